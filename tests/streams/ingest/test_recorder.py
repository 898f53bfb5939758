"""The recording pipeline against the simulator over real HTTP on 127.0.0.1."""

import asyncio
import datetime as dt
import itertools
import json
import time

import httpx
import pytest
from asgiref.sync import sync_to_async

from streams.ingest import recorder
from streams.ingest.upstream import EventTooLarge, UpstreamError
from streams.models import Event, Finding, Stream
from streams.run import runner
from streams.store import event_row, rows
from tests.support import hostile
from tests.support.recording import body, event_values, record

pytestmark = pytest.mark.django_db(transaction=True)


async def stored_events(stream):
    return [e async for e in Event.objects.filter(stream=stream).order_by("index")]


async def finding_codes(stream):
    return {f.code async for f in Finding.objects.filter(stream=stream)}


async def test_normal_stream_is_stored_verbatim_with_milestones(upstream):
    stream, _ = await record(body())
    assert stream.status == "completed"
    sim = await sync_to_async(upstream.log)(stream.upstream_id)
    events = await stored_events(stream)
    assert [e.index for e in events] == list(range(len(events)))
    assert [e.data for e in events] == [e["data"] for e in sim["events"]]
    assert stream.event_count == len(sim["events"])
    assert events[0].type == "response.created"
    assert events[1].type == "response.routing.completed"
    assert all(e.event_name == "message" for e in events)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # milestones in the order the protocol promises
    m = [
        stream.request_written_us,
        stream.headers_us,
        stream.created_event_us,
        stream.routing_us,
        stream.first_token_us,
        stream.terminal_us,
        stream.closed_us,
    ]
    assert None not in m and m == sorted(m)
    assert stream.connected_us is None or stream.connected_us <= stream.request_written_us
    assert stream.resolved_model and stream.resolved_model != "auto"
    assert stream.routing_category
    assert stream.ttft_ms == pytest.approx(
        (stream.first_token_us - stream.request_written_us) / 1000, abs=0.001
    )
    assert stream.output_text and stream.output_text == stream.final_text
    # the rate over the output deltas' own receipt times (a busy machine's reader may take
    # every delta in one read, at one kernel stamp: then no rate can be known, and none is said)
    deltas = [e.t_us for e in events if e.type == "response.output_text.delta"]
    assert stream.output_deltas == len(deltas) > 1
    if deltas[-1] > deltas[0]:
        span_s = (deltas[-1] - deltas[0]) / 1e6
        assert stream.tokens_per_s == pytest.approx((len(deltas) - 1) / span_s)
    else:
        assert stream.tokens_per_s is None
    assert stream.error_findings == 0
    t = [e.t_us for e in events]
    assert t == sorted(t)
    assert events[0].received_at >= stream.started_at - dt.timedelta(milliseconds=1)


async def test_first_token_is_the_first_delta_not_created(upstream):
    """Judged against a loopback capture (tests/support/wire.py), not against either event
    loop: on the wire `response.created` comes long before the first delta. The two may still
    share a read (a late loop finds both queued): then both carry that read's time, which is
    what the first delta's receipt time is; TTFT is never created's."""
    from tests.support import wire

    with wire.capturing(upstream.port) as capture:
        (stream,) = await wire.record_concurrently(1, model="gpt-oss-20b", time_scale=1.0)
        packets = await asyncio.to_thread(capture.stop)
    events = await stored_events(stream)
    first_delta = next(e for e in events if e.type.endswith(".delta"))
    assert stream.first_token_us == first_delta.t_us
    assert stream.created_event_us == events[0].t_us <= stream.first_token_us
    assert stream.routing_us is None  # pinned models are not routed
    (judgement,) = await wire.judged([stream], packets, upstream.port)
    (exchange,) = [x for x in wire.exchanges(packets, upstream.port) if x.events]
    created_ms = (exchange.events[0].t_ns - exchange.request_last_ns) / 1e6
    assert judgement.wire_ms - created_ms > 20  # (the simulator's pacing, seen on the wire)
    assert abs(judgement.error_ms) <= wire.TOLERANCE_MS, str(judgement)
    assert stream.ttft_ms > created_ms + wire.TOLERANCE_MS


SCENARIOS = [
    # scenario, status, error_code, findings that must be there
    ("tools", "completed", "", set()),
    ("parallel_tools", "completed", "", set()),
    ("multi_part", "completed", "", set()),
    ("rewrite", "completed", "", set()),
    ("final_text", "completed", "", set()),
    ("gap", "completed", "", {"sequence_gap"}),
    ("duplicate", "completed", "", {"sequence_duplicate"}),
    ("reorder", "completed", "", {"sequence_regression"}),
    ("missing_terminal", "truncated", "", {"missing_terminal"}),
    ("error", "failed", "*", set()),
    ("error_no_seq", "failed", "*", set()),
    ("http_429", "failed", "*", set()),
    ("http_500", "failed", "*", set()),
    ("wrong_content_type", "failed", "wrong_content_type", set()),
    ("malformed_json", "completed", "", {"invalid_json"}),
    ("unknown_event", "completed", "", {"unknown_event_type"}),
    ("utf8_split", "completed", "", set()),
    ("huge_delta", "completed", "", set()),
    ("bursty", "completed", "", set()),
    ("reset", "truncated", "connection_reset", {"missing_terminal"}),
    ("xss", "completed", "", set()),
    ("comments", "completed", "", set()),
    ("done_sentinel", "completed", "", {"done_sentinel"}),
    ("slow_headers", "completed", "", set()),
]


@pytest.mark.parametrize("scenario,status,error_code,codes", SCENARIOS)
async def test_every_scenario_is_recorded_with_its_status(
    upstream, scenario, status, error_code, codes
):
    stream, _ = await record(body(scenario, header_delay_s=0.3))
    assert stream.status == status, (stream.error_code, stream.error_message)
    if error_code == "*":
        assert stream.error_code and stream.error_message
    else:
        assert stream.error_code == error_code
    assert codes <= await finding_codes(stream)
    if stream.upstream_id:
        sim = await sync_to_async(upstream.log)(stream.upstream_id)
        sent = [e for e in sim["events"]]
        assert stream.event_count == len(sent)
        stored = await stored_events(stream)
        assert [e.data for e in stored] == [e["data"] for e in sent]


async def test_http_errors_keep_status_and_body_message(upstream):
    stream, _ = await record(body("http_429"))
    assert stream.http_status == 429
    # the body is the record too: one event, verbatim (the error in the page's notice)
    assert stream.event_count == 1
    [event] = await sync_to_async(list)(Event.objects.filter(stream=stream))
    assert event.type == "response.body" and '"error"' in event.data
    assert stream.error_message.endswith("(Retry-After: 2)")  # what the page's notice shows
    stream, _ = await record(body("http_500"))
    assert stream.http_status == 500 and stream.error_message


async def test_a_body_that_is_not_an_event_stream_is_kept_as_it_came(upstream):
    """The issue's case: a complete JSON answer with the wrong Content-Type was thrown away
    (0 events, "nothing to show"). What the upstream sent is the record, whatever its type."""
    stream, _ = await record(body("wrong_content_type"))
    assert (stream.status, stream.error_code) == ("failed", "wrong_content_type")
    [event] = await sync_to_async(list)(Event.objects.filter(stream=stream))
    assert event.type == "response" and event.is_json
    assert json.loads(event.data)["object"] == "response"  # the answer, whole
    assert stream.bytes_received == len(event.data.encode())


async def test_slow_headers_are_a_phase_of_their_own(upstream):
    stream, _ = await record(body("slow_headers", header_delay_s=0.5, time_scale=0.01))
    assert stream.headers_us - stream.request_written_us >= 450_000
    # the wait for headers is part of TTFT: it is the upstream's time, not ours
    assert stream.ttft_ms >= 450


async def test_utf8_split_across_writes_reassembles_exactly(upstream):
    stream, _ = await record(body("utf8_split"))
    assert stream.status == "completed"
    assert stream.output_text == stream.final_text
    assert any(ord(c) > 0xFFFF for c in stream.output_text)  # an emoji survived the split
    assert "\ufffd" not in stream.output_text


async def test_stall_aborts_and_retries_as_linked_attempts(upstream, settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "STALL_TIMEOUT_S": 0.4, "STALL_MAX_ATTEMPTS": 2}
    first = await sync_to_async(rows.new_row)(None, body("stall", stall_s=5))
    last, outcome = await runner.run_stream(first)
    first = await Stream.objects.aget(pk=first.pk)
    last = await Stream.objects.aget(pk=last.pk)
    assert first.status == "stalled" and first.error_code == "stall"
    assert first.event_count > 0  # what arrived before the stall is kept
    assert last.pk != first.pk and last.first_attempt_id == first.pk and last.attempt == 2
    assert last.status == "stalled"  # the scenario stalls every time
    assert await Stream.objects.filter(first_attempt=first).acount() == 1
    # no missing_terminal blamed on the upstream: we closed the connection; but the silence
    # that made us close it is a finding
    codes = await finding_codes(first)
    assert "missing_terminal" not in codes and "stall" in codes


async def test_a_stream_longer_than_the_stall_timeout_is_no_stall(upstream, settings):
    """The rule is no *event* for N s, however long the stream runs."""
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "STALL_TIMEOUT_S": 0.5}
    stream, _ = await record(body(time_scale=0.6, sentences=8))
    assert stream.status == "completed", (stream.status, stream.error_message)
    times = [e.t_us for e in await stored_events(stream)]
    assert times[-1] - times[0] > 1_000_000  # twice the stall timeout
    assert max(b - a for a, b in itertools.pairwise(times)) < 500_000


async def test_cancel_closes_promptly_and_keeps_what_arrived(upstream):
    stream = await sync_to_async(rows.new_row)(None, body(time_scale=1.0))
    task = runner.start(stream)
    for _ in range(200):
        await asyncio.sleep(0.02)
        if await Event.objects.filter(stream=stream, type="response.output_text.delta").aexists():
            break
    assert runner.cancel(stream.pk)
    t0 = asyncio.get_running_loop().time()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert asyncio.get_running_loop().time() - t0 < 0.5
    stream = await Stream.objects.aget(pk=stream.pk)
    assert stream.status == "cancelled"
    stored = await Event.objects.filter(stream=stream).acount()
    assert stored == stream.event_count > 0
    assert not await Event.objects.filter(stream=stream, type="response.completed").aexists()


async def test_connection_refused_retries_then_fails(settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "CONNECT_BACKOFF_S": 0.01}
    from tests.conftest import free_port

    stream, outcome = await record(body(), base_url=f"http://127.0.0.1:{free_port()}/v1")
    assert stream.status == "failed" and stream.error_code == "connect_error"
    assert stream.event_count == 0


async def test_200_concurrent_streams_lose_nothing(upstream):
    async def one(i):
        return await record(body(model="gpt-oss-20b", prompt=f"question {i}", time_scale=0.02))

    results = await asyncio.gather(*(one(i) for i in range(200)))
    for stream, _ in results:
        assert stream.status == "completed"
        sim = await sync_to_async(upstream.log)(stream.upstream_id)
        assert stream.event_count == len(sim["events"])
        assert await Event.objects.filter(stream=stream).acount() == len(sim["events"])


async def test_in_worker_mode_a_row_claimed_elsewhere_is_not_recorded_here(settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "RUNNER": "worker"}
    stream = await sync_to_async(rows.new_row)(None, body())
    assert stream.runner == ""  # waits for a worker
    stream.runner = "elsewhere:1:abcd"  # one claimed it before we got to start it
    assert runner.start(stream) is None and stream.pk not in runner._tasks
    await asyncio.sleep(0.05)  # the wake-up sent to the workers
    assert (await Stream.objects.aget(pk=stream.pk)).status == "pending"


async def test_the_client_pool_spreads_streams_over_small_pools(upstream):
    from streams.ingest.upstream import ClientPool

    pool = ClientPool(shard_streams=2, keepalive=2)
    try:
        results = await asyncio.gather(
            *(record(body(prompt=f"q{i}", time_scale=0.2), client=pool) for i in range(5))
        )
        assert [s.status for s, _ in results] == ["completed"] * 5
        assert len(pool.shards) == 3 and all(n == 0 for _, n, _ in pool.shards)
        # later streams go to the first shard with room, onto its idle connections
        for _ in range(3):
            stream, _ = await record(body(), client=pool)
            assert stream.status == "completed"
        assert len(pool.shards) == 3
    finally:
        await pool.aclose()


@pytest.mark.parametrize("fast", [False, True], ids=["paced", "fast-with-backpressure"])
async def test_an_https_upstream_is_recorded_the_same(upstream, monkeypatch, fast):
    """TLS on our own asyncio stream (network._Stream.start_tls): a TLS proxy with a test CA
    in front of the simulator. Fast: 30 000 events through a 16 KiB read buffer, so reading
    pauses and resumes (through the TLS transport) again and again."""
    import ssl
    from urllib.parse import urlsplit

    import trustme

    from streams.ingest import network
    from streams.ingest.upstream import ClientPool

    pauses = []
    if fast:
        protocol = network._Protocol
        received = protocol.data_received

        def counting(self, data):
            was = self.reading_paused
            received(self, data)
            if self.reading_paused and not was:
                pauses.append(len(data))

        monkeypatch.setattr(protocol, "HIGH_WATER", 16 * 1024)
        monkeypatch.setattr(protocol, "data_received", counting)

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    sim = urlsplit(upstream.base_url)
    handshakes = []

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def proxy(client_reader, client_writer):
        handshakes.append(client_writer.get_extra_info("ssl_object").version())
        sim_reader, sim_writer = await asyncio.open_connection(sim.hostname, sim.port)
        await asyncio.gather(pipe(client_reader, sim_writer), pipe(sim_reader, client_writer))

    server = await asyncio.start_server(proxy, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    pool = ClientPool()
    pool.ssl_context = ssl.create_default_context()
    ca.configure_trust(pool.ssl_context)
    try:
        request = body("fast", events=30_000, batch=200) if fast else body(time_scale=0.2)
        stream, _ = await record(request, base_url=f"https://localhost:{port}/v1", client=pool)
    finally:
        await pool.aclose()
        server.close()
    assert handshakes and handshakes[0].startswith("TLS")
    assert stream.status == "completed", stream.error_message
    sim_log = await sync_to_async(upstream.log)(stream.upstream_id)
    assert stream.event_count == len(sim_log["events"])
    assert stream.connected_us < stream.request_written_us < stream.first_token_us
    assert stream.ttft_ms > 0
    if fast:
        assert stream.event_count == 30_000 and len(pauses) > 5


async def test_ttft_matches_with_50_concurrent_streams(upstream):
    """Every stream's TTFT within ±1 ms of a loopback capture's (tests/support/wire.py: the
    kernel's packet times, which no event loop's delay can skew), 50 streams at once. The
    simulator's own log is no judge here: its send times are its loop's, and its request clock
    starts when its loop got round to the request. With a CPU hog beside:
    tests/streams/ingest/test_wire_truth.py."""
    from tests.support import wire

    streams, judgements = await wire.record_50_on_the_wire(upstream)
    wire.assert_ttft_within_tolerance(streams, judgements)


async def test_event_count_is_exact_at_the_end(upstream, settings, monkeypatch):
    """However the commits fall (the writer takes what queued, more on a busy machine), the
    event_count values written only grow, and the last one is the number of events stored."""

    counts = []  # event_count values written, in commit order
    real_write = rows.write_batch

    def write_batch(rows, updates, findings, retry_for_s=None, proxied_rows=(), new_rows=()):
        counts.extend(f["event_count"] for f in updates.values() if "event_count" in f)
        return real_write(rows, updates, findings, retry_for_s, proxied_rows, new_rows)

    monkeypatch.setattr(rows, "write_batch", write_batch)
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "COUNT_WRITE_INTERVAL_MS": 60_000}
    stream, _ = await record(body(sentences=8))
    events = await stored_events(stream)
    assert stream.status == "completed" and stream.event_count == len(events)
    assert counts == sorted(counts) and counts[-1] == len(events)


@pytest.mark.parametrize("interval_ms, rewrites", [(60_000, [0, 2, 5]), (0, list(range(8)))])
async def test_event_count_is_rewritten_at_most_once_per_interval(
    settings, monkeypatch, interval_ms, rewrites
):
    """A streaming row's event_count is not rewritten at every commit (each rewrite costs the
    commit a page per stream), only once per COUNT_WRITE_INTERVAL_MS or with another change of
    the row. One commit per chunk here (a flush after each), whatever the machine's load: the
    first commit writes it, and so do those where a milestone changed the row (2 and 5)."""
    from streams.ingest.recorder import Recording
    from streams.ingest.upstream import ReceivedEvent
    from streams.ingest.writer import Writer

    written = []  # per commit: the stream's fields written, or None

    def write_batch(rows, updates, findings, retry_for_s=None, proxied_rows=(), new_rows=()):
        written.append(next(iter(updates.values()), None))
        return {}

    monkeypatch.setattr(rows, "write_batch", write_batch)
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "COUNT_WRITE_INTERVAL_MS": interval_ms}
    writer = Writer(max_age_ms=60_000)
    rec = Recording(1, None, pinned_model=False)
    rec.start(time.monotonic_ns(), 60.0)
    sse = ReceivedEvent(time.monotonic_ns(), "message", "", '{"type":"x"}')
    for chunk in range(8):
        if chunk in (2, 5):
            rec.pending_fields["routing_us"] = chunk
        await writer.put(rec, *rec.ingest([sse, sse]))
        await writer.flush(rec)
    writer.task.cancel()
    assert len(written) == 8
    assert [i for i, fields in enumerate(written) if fields and "event_count" in fields] == rewrites
    assert [written[i]["event_count"] for i in rewrites] == [2 * (i + 1) for i in rewrites]


async def test_new_rows_are_inserted_together_by_the_writer(monkeypatch):
    """Writer.create: the rows of streams starting together are made on the writer's thread and
    inserted in one batch, committed at once (no waiting for the batch's age); one that cannot
    be made raises for its caller alone, the others are inserted."""
    from streams.ingest.writer import Writer

    batches = []  # per commit: the new rows it inserted
    real_write = rows.write_batch

    def write_batch(flat, updates, findings, retry_for_s=None, proxied_rows=(), new_rows=()):
        batches.append(len(new_rows))
        return real_write(flat, updates, findings, retry_for_s, proxied_rows, new_rows)

    def make(i):
        if i == 3:
            raise ValueError("not a row")
        return rows.pending_row(None, body(), source=Stream.Source.PROXY, session=f"s{i}")

    monkeypatch.setattr(rows, "write_batch", write_batch)
    writer = Writer(max_age_ms=60_000)
    started = time.monotonic()
    made = await asyncio.gather(
        *(writer.create(lambda i=i: make(i)) for i in range(6)), return_exceptions=True
    )
    took = time.monotonic() - started
    writer.task.cancel()
    assert isinstance(made[3], ValueError)
    inserted = [m for i, m in enumerate(made) if i != 3]
    assert all(isinstance(m, Stream) and m.pk for m in inserted)
    ids = [m.pk for m in inserted]
    stored = await sync_to_async(
        lambda: dict(Stream.objects.filter(pk__in=ids).values_list("pk", "session"))
    )()
    assert stored == {m.pk: m.session for m in inserted} and len(stored) == 5
    assert batches == [6] and took < 30  # one commit, not one after the batch's 60 s age


def test_stream_updates_group_by_changed_columns(db):
    """update_streams: one statement per set of changed columns, each row its own values,
    NULLs, JSON and datetimes adapted as the ORM would."""
    from streams.ingest.recorder import Recording
    from streams.store.rows import update_streams

    a, b, c, d = (rows.new_row(None, body()) for _ in range(4))
    now = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)

    def rec(stream):
        return Recording(stream.pk, None, pinned_model=False)

    update_streams(
        {
            rec(a): {"event_count": 3, "ttft_ms": 12.5, "heartbeat_at": now},
            rec(b): {"event_count": 7, "ttft_ms": None, "heartbeat_at": now},
            rec(c): {
                "status": "completed",
                "parts": [{"text": "<b>é</b>", "done": True}],
                "finished_at": now,
                "resolved_model": "eu-gpt-4o",
                "heartbeat_at": now,
            },
            rec(d): {"heartbeat_at": now},
        }
    )
    a, b, c, d = (Stream.objects.get(pk=s.pk) for s in (a, b, c, d))
    assert (a.event_count, a.ttft_ms) == (3, 12.5)
    assert (b.event_count, b.ttft_ms) == (7, None)
    assert c.status == "completed" and c.resolved_model == "eu-gpt-4o"
    assert c.parts == [{"text": "<b>é</b>", "done": True}] and c.finished_at == now
    assert c.event_count == 0 and a.status == "pending"  # untouched columns stay
    assert {s.heartbeat_at for s in (a, b, c, d)} == {now}


def checked(type_, sequence_number):
    return event_row.Checked(type_, sequence_number, None, None, True)


def test_receipt_wall_clock_is_start_plus_offset_to_the_microsecond(db):
    """insert_events(offsets=True) formats received_at itself (not through datetime
    arithmetic): it must read back as exactly start + t_us, whole seconds included, and a
    retried batch (rows already converted) must store the same."""
    from streams.store.rows import insert_events

    stream = rows.new_row(None, body())
    start = dt.datetime(2026, 11, 30, 23, 59, 59, 999_000, tzinfo=dt.UTC)
    offsets = [0, 1, 999, 1_000, 1_001, 999_999, 1_000_000, 86_400_000_000 + 17]

    def values(indexes):
        return [
            event_values(stream.pk, i, offsets[i % 100], start, "{}", checked("x", i))
            for i in indexes
        ]

    insert_events(values(range(4)), offsets=True)
    insert_events(values(range(4, len(offsets))), offsets=True)
    insert_events(values(range(104, 100 + len(offsets))), offsets=True)  # again
    got = dict(Event.objects.filter(stream=stream).values_list("index", "received_at"))
    for i, t in enumerate(offsets):
        assert got[i] == start + dt.timedelta(microseconds=t), (i, t, got[i])
    for i in range(4, len(offsets)):
        assert got[i + 100] == got[i]


def test_orphans_of_dead_processes_become_interrupted(db):
    live = rows.new_row(None, body())
    Stream.objects.filter(pk=live.pk).update(status="streaming")
    dead = rows.new_row(None, body())
    Stream.objects.filter(pk=dead.pk).update(status="streaming", runner="otherhost:1:abc")
    stale = rows.new_row(None, body())
    Stream.objects.filter(pk=stale.pk).update(
        status="streaming",
        runner="otherhost:2:def",
        heartbeat_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5),
    )
    import socket

    local_dead = rows.new_row(None, body())
    Stream.objects.filter(pk=local_dead.pk).update(
        status="streaming", runner=f"{socket.gethostname()}:999999:abc"
    )
    # rows whose count lags what was stored (the recorder rewrites it only now and then)
    from streams.store.rows import insert_events

    start = dt.datetime.now(dt.UTC)

    def event(i):
        return event_values(stale.pk, i, i, start, "{}", checked("x", i))

    insert_events([event(i) for i in range(3)], offsets=True)
    Stream.objects.filter(pk__in=[stale.pk, local_dead.pk]).update(event_count=1)
    assert runner.sweep_orphans() == 2
    statuses = dict(Stream.objects.values_list("pk", "status"))
    assert statuses[live.pk] == "streaming"  # this process, alive
    assert statuses[dead.pk] == "streaming"  # another host, heartbeat fresh
    assert statuses[stale.pk] == "interrupted"
    assert statuses[local_dead.pk] == "interrupted"
    counts = dict(Stream.objects.values_list("pk", "event_count"))
    assert (counts[stale.pk], counts[local_dead.pk]) == (3, 0)  # what was stored


async def test_the_api_key_is_sent_but_never_stored_or_logged(caplog):
    import logging

    from streams.simulator.server import start_in_thread

    caplog.set_level(logging.DEBUG)
    key = "sk-test-0123456789abcdef"
    with start_in_thread(api_key=key) as sim:  # this one refuses requests without the key
        stream, _ = await record(body(), base_url=sim.base_url, api_key=key)
        refused, _ = await record(body(), base_url=sim.base_url, api_key="sk-wrong-key-000000")
    assert stream.status == "completed"  # so the key was sent
    assert refused.status == "failed" and refused.http_status == 401
    for s in (stream, refused):
        row = await Stream.objects.filter(pk=s.pk).values().aget()
        assert key not in repr(row)
    assert not await Event.objects.filter(stream=stream, data__contains=key).aexists()
    assert key not in caplog.text


async def test_a_failed_commit_counts_each_lost_event_once(monkeypatch):
    """Two chunks of one stream in a batch that cannot be stored: the stream is told it lost
    exactly their events (the writer merges a stream's chunks for publishing; the counts of
    the entries must not see that)."""
    from streams.ingest import recorder
    from streams.ingest import writer as writer_module

    def write_batch(rows, updates, findings, retry_for_s=None):
        raise rows.StorageUnavailable("database unavailable: test")

    monkeypatch.setattr(rows, "write_batch", write_batch)
    writer = writer_module.Writer(max_age_ms=1000)
    rec = recorder.Recording(stream_id=1, project_id=None, pinned_model=False)
    width = len(event_row.ROW_COLUMNS)
    for first, n in ((0, 3), (3, 2)):
        payloads = [(i, "x", i, i, "{}") for i in range(first, first + n)]
        await writer.put(rec, [None] * (width * n), payloads)
    with pytest.raises(rows.StorageUnavailable):
        await writer.flush(rec)
    assert rec.lost_events == 5
    assert rec.storage_error.startswith("5 event(s) could not be stored")
    writer.task.cancel()


async def test_on_the_built_in_simulator_the_stall_threshold_follows_the_runs_speed(settings):
    """The playground's speed (time_scale) shortens the stall scenario's silence, and the
    threshold applied to built-in simulator runs in proportion: 60 s × 0.05 = 3 s here."""
    settings.UPSTREAM_BASE_URL = ""  # the built-in simulator
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "STALL_MAX_ATTEMPTS": 1}
    started = asyncio.get_running_loop().time()
    stream, outcome = await record(body("stall", time_scale=0.05))
    took = asyncio.get_running_loop().time() - started
    assert stream.status == "stalled" and outcome.error_code == "stall"
    assert "no event for 3 s" in stream.error_message
    assert took < 30  # not the real upstream's 60 s


async def test_a_flush_never_waits_for_a_writer_that_is_gone(db):
    """A writer cancelled (its loop shutting down) answers the flushes waiting for it, and a
    later flush fails at once: no recording waits forever for a commit that will not come."""
    from streams.ingest.recorder import Recording
    from streams.ingest.writer import Writer
    from streams.store.rows import StorageUnavailable

    writer = Writer(max_age_ms=60_000)  # a batch that would wait a minute
    rec = Recording(1, None, pinned_model=False)
    waiting = asyncio.ensure_future(writer.flush(rec))
    await asyncio.sleep(0)
    writer.task.cancel()
    with pytest.raises(StorageUnavailable):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(StorageUnavailable):
        await asyncio.wait_for(writer.flush(rec), 5)


def test_a_proxied_chunk_carries_its_hand_over_time_in_rows_and_payloads():
    """Proxied rows have PROXIED_ROW_COLUMNS and their relay payloads sent_us (the consumer
    reads nothing more); every other stream's keep ROW_COLUMNS and MESSAGE_COLUMNS."""
    from streams.ingest.recorder import Recording
    from streams.ingest.upstream import ReceivedEvent
    from streams.shapes.event_message import MESSAGE_COLUMNS, PROXIED_MESSAGE_COLUMNS
    from streams.store.event_row import PROXIED_ROW_COLUMNS, ROW_COLUMNS

    for proxied, columns in ((False, ROW_COLUMNS), (True, PROXIED_ROW_COLUMNS)):
        rec = Recording(1, None, pinned_model=False, proxied=proxied)
        rec.start(1_000_000, 60.0)
        sse = ReceivedEvent(3_000_000, "message", "", '{"type":"response.created"}')
        rows, payloads = rec.ingest([sse, sse], sent_ns=4_500_000 if proxied else None)
        assert len(rows) == 2 * len(columns)
        if proxied:
            sent = PROXIED_MESSAGE_COLUMNS.index("sent_us")
            assert rows[columns.index("sent_us")] == 3500 and payloads[0][sent] == 3500
            assert [len(p) for p in payloads] == [len(PROXIED_MESSAGE_COLUMNS)] * 2
        else:
            assert [len(p) for p in payloads] == [len(MESSAGE_COLUMNS)] * 2


def _attempt(events=0, milestones=()):
    rec = recorder.Recording(stream_id=1, project_id=None, pinned_model=False)
    rec.next_index = events
    rec.milestones = dict.fromkeys(milestones, 0)
    return rec


@pytest.mark.parametrize(
    "exc, events, milestones, expected",
    [
        (TimeoutError(), 0, (), ("failed", "timeout", False)),
        (TimeoutError(), 3, ("headers",), ("stalled", "stall", False)),
        (UpstreamError("http_error", "HTTP 500", 500), 0, (), ("failed", "http_error", False)),
        (httpx.ConnectError("refused"), 0, (), ("failed", "connect_error", True)),
        (httpx.ConnectTimeout("slow"), 2, (), ("failed", "connect_error", False)),
        (httpx.ReadError("reset"), 0, (), ("failed", "connection_error", True)),
        (
            httpx.RemoteProtocolError("eof"),
            4,
            ("headers",),
            ("truncated", "connection_reset", False),
        ),
        (httpx.WriteError("eof"), 4, ("headers", "terminal"), (None, "", False)),
        (httpx.ProxyError("no"), 0, (), ("failed", "http_error", False)),
        (rows.StorageUnavailable("gone"), 5, (), ("failed", "storage_unavailable", False)),
        (EventTooLarge(1024, 2000), 3, ("headers",), ("truncated", "event_too_large", False)),
    ],
)
def test_failure_outcome_maps_each_exception_to_its_outcome(exc, events, milestones, expected):
    """The exception table of record_attempt, clause by clause (the first matching class wins:
    ConnectTimeout is a connect error, not another HTTP error)."""
    assert isinstance(exc, recorder._FAILURES)
    rec = _attempt(events, milestones)
    outcome = recorder._failure_outcome(rec, exc, stall_s=30)
    assert (outcome.status, outcome.error_code, outcome.retryable) == expected
    if isinstance(exc, UpstreamError) and exc.http_status:
        assert rec.pending_fields["http_status"] == 500


def test_failure_outcome_leaves_other_exceptions_to_propagate():
    assert not isinstance(ValueError("bug"), recorder._FAILURES)
    assert not isinstance(asyncio.CancelledError(), recorder._FAILURES)


# ---- one upstream event is bounded -------------------------------------------------------------

BOUND = 1024 * 1024


@pytest.mark.parametrize("name", hostile.ENDLESS)
async def test_an_endless_event_ends_the_stream_truncated_holding_at_most_the_bound(
    name, settings, monkeypatch
):
    """An upstream that never ends an event (a line, a block of data lines, comments) over real
    HTTP on 127.0.0.1: the stream ends `truncated`, event_too_large, with the two events before
    it stored; the reader never held more than the bound and one read (its state measured after
    every chunk), and the upstream was read no further (it would send 16 times the bound)."""
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "UPSTREAM_MAX_EVENT_BYTES": BOUND}
    peak = [0]

    class Measured(recorder.EventReader):
        def feed(self, chunk, t_ns):
            out = super().feed(chunk, t_ns)
            peak[0] = max(peak[0], hostile.holding(self))
            return out

    monkeypatch.setattr(recorder, "EventReader", Measured)
    head, tail = hostile.ENDLESS[name]
    endless = hostile.Endless(hostile.ENDLESS_HEAD + head, tail, cap=16 * BOUND)
    server = hostile.RawUpstream(endless.answer)
    try:
        stream, _ = await record(body(), base_url=server.base_url)
    finally:
        server.stop()
    assert (stream.status, stream.error_code) == ("truncated", "event_too_large")
    assert "UPSTREAM_MAX_EVENT_BYTES (1048576 bytes)" in stream.error_message
    assert [json.loads(e.data)["type"] for e in await stored_events(stream)] == [
        "response.created",
        "response.in_progress",
    ]
    assert stream.event_count == 2
    assert 0 < peak[0] <= BOUND + 256 * 1024  # (a read is at most 256 KiB)
    assert endless.sent < 16 * BOUND
    # we stopped reading: the terminal it never sent is not blamed on a closed connection
    assert "missing_terminal" not in await finding_codes(stream)
