"""The writer's schedule (streams/ingest/writer.py): a batch of streams nobody watches waits
BATCH_UNWATCHED_AGE_MS, one with a viewer BATCH_MAX_AGE_MS, and a viewer who arrives hurries
the batch. Judged by commits counted, not by clocks: a busy machine only makes commits late,
never early."""

import asyncio
import time

import pytest

from streams.ingest.recorder import Recording
from streams.ingest.upstream import ReceivedEvent
from streams.ingest.writer import Writer
from streams.live import relay
from streams.store import rows

# a minute for nobody, nothing for a viewer: which one a batch got shows at once
SCHEDULE = {"BATCH_MAX_AGE_MS": 0, "BATCH_UNWATCHED_AGE_MS": 60_000}


@pytest.fixture
def commits(monkeypatch, settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, **SCHEDULE}
    assert relay.live_groups() is not None, "the tests' channel layer is the in-memory one"
    committed = []

    def write_batch(rows, updates, findings, retry_for_s=None, proxied_rows=()):
        committed.append({rec.stream_id for rec in updates})
        return {}

    monkeypatch.setattr(rows, "write_batch", write_batch)
    return committed


def recording(stream_id):
    rec = Recording(stream_id, None, pinned_model=False)
    rec.start(time.monotonic_ns(), 60.0)
    return rec


def chunk(rec):
    sse = ReceivedEvent(time.monotonic_ns(), "message", "", '{"type":"x"}')
    return rec.ingest([sse, sse])


async def committed_soon(commits, n=1, within_s=10.0):
    deadline = time.monotonic() + within_s
    while len(commits) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return len(commits) >= n


def watch(stream_id):
    def viewer(message):
        pass

    relay.fanout.subscribe(relay.stream_group(stream_id), viewer)
    return lambda: relay.fanout.unsubscribe(relay.stream_group(stream_id), viewer)


async def test_a_batch_nobody_watches_waits_for_the_unwatched_age(commits):
    writer = Writer()
    try:
        rec = recording(9001)
        await writer.put(rec, *chunk(rec))
        await asyncio.sleep(0.3)
        assert commits == []  # 0 ms would have committed it at once
        # a flush (the end of a stream, a terminal event) still commits at once
        await asyncio.wait_for(writer.flush(rec), 10)
        assert len(commits) == 1
    finally:
        writer.task.cancel()


async def test_a_watched_stream_commits_at_the_max_age(commits):
    stop = watch(9002)
    writer = Writer()
    try:
        rec = recording(9002)
        await writer.put(rec, *chunk(rec))
        assert await committed_soon(commits)
    finally:
        writer.task.cancel()
        stop()


async def test_a_viewer_who_arrives_hurries_the_waiting_batch(commits):
    writer = Writer()
    stop = None
    try:
        quiet, watched = recording(9003), recording(9004)
        await writer.put(quiet, *chunk(quiet))
        await writer.put(watched, *chunk(watched))
        await asyncio.sleep(0.3)
        assert commits == []
        stop = watch(9004)
        await writer.put(watched, *chunk(watched))
        assert await committed_soon(commits)
        assert commits[0] >= {9003, 9004}  # the whole waiting batch, not only the watched one
    finally:
        writer.task.cancel()
        if stop is not None:
            stop()
