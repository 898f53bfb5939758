"""Processes that clean up after themselves (issue 17): heartbeats of quiet streams, the
periodic orphan sweep of every server, cancelling an orphan, commands stopped by signals or a
closed pipe, and `record` against an upstream that never answers.

Real processes and real signals throughout. Timing is judged by states and counts, with
generous wall-clock bounds (a busy machine may be slow, but not wrong)."""

import asyncio
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
from asgiref.sync import sync_to_async

from streams.core.lifecycle import RUNNER_ID
from streams.models import Event, Stream
from streams.run import runner, services
from streams.store import rows
from tests.conftest import DaphneServer
from tests.support.clients import bearer
from tests.support.processes import api_create, manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TERMINAL = {s for s in Stream.Status.values if s not in Stream.ACTIVE_STATUSES}


def statuses(ids):
    return dict(Stream.objects.filter(pk__in=ids).values_list("pk", "status"))


def log_errors(text):
    return [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]


# --- Heartbeats ---------------------------------------------------------------------------


def test_a_quiet_stream_keeps_its_heartbeat_and_is_never_swept(people, simulator_process, settings):
    """Silent for more than 3× the stale threshold while connected: another process sweeping
    all the while must see it alive. (Before the fix, the heartbeat task ran in the context of
    the request that started the stream and failed at every beat; the row went stale.)"""
    stale_s = 1.5
    # the sweeping test process judges by the same threshold
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "HEARTBEAT_STALE_S": stale_s}
    server = DaphneServer(
        simulator_process.base_url,
        overrides={"HEARTBEAT_S": 0.2, "HEARTBEAT_STALE_S": stale_s, "STALL_TIMEOUT_S": 30.0},
    )
    try:
        r = api_create(
            server,
            people.owner,
            scenario="stall",
            metadata={"stall_s": 3.5 * stale_s, "time_scale": 0.02},
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        swept = 0
        deadline = time.monotonic() + 60
        while Stream.objects.get(pk=sid).is_active:
            assert time.monotonic() < deadline, server.output()
            swept += runner.sweep_orphans()  # this test process is "another process"
            time.sleep(0.1)
        stream = Stream.objects.get(pk=sid)
        assert swept == 0
        assert stream.status == "completed", (stream.status, stream.error_message)
        # ground truth that it was quiet: the stored receipt times
        times = list(Event.objects.filter(stream_id=sid).order_by("index").values_list("t_us"))
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(times)]
        assert max(gaps) >= 3 * stale_s * 1e6
        assert log_errors(server.output()) == []
        assert "heartbeat failed" not in server.output()
    finally:
        server.stop()


# --- Orphans: the periodic sweep, and cancel --------------------------------------------------


def _fill_slots(server, user, n):
    """`n` streams that stay streaming (a long stall), each with its first events stored."""
    ids = []
    for _ in range(n):
        r = api_create(
            server, user, scenario="stall", metadata={"stall_s": 120, "time_scale": 0.02}
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    wait_until(
        lambda: Event.objects.filter(stream_id__in=ids).values("stream_id").distinct().count() == n,
        30,
        what="first events of every stream",
    )
    return ids


SWEEP_S = 0.5


@pytest.mark.parametrize("peer", [False, True], ids=["restarted", "peer-running"])
def test_a_server_killed_with_sigkill_leaves_rows_that_are_swept(people, simulator_process, peer):
    """`kill -9` of a server with running streams: they end `interrupted` at once when it is
    restarted, or within the sweep interval when another server runs meanwhile; and the user's
    slots are free again. (Heartbeats stay "fresh" for 30 s: only the pid tells.)"""
    overrides = {"SWEEP_INTERVAL_S": SWEEP_S, "MAX_CONCURRENT_PER_USER": 3}
    first = DaphneServer(simulator_process.base_url, overrides=overrides)
    other = DaphneServer(simulator_process.base_url, overrides=overrides) if peer else None
    try:
        ids = _fill_slots(first, people.owner, 3)
        assert api_create(first, people.owner).status_code == 429  # the slots are taken
        deltas = Event.objects.filter(stream_id__in=ids, type="response.output_text.delta")
        wait_until(
            lambda: deltas.values("stream_id").distinct().count() == 3,
            30,
            what="output of every stream stored",
        )
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        killed = time.monotonic()
        assert set(statuses(ids).values()) == {"streaming"}
        if other is None:
            other = DaphneServer(simulator_process.base_url, overrides=overrides)
        ready = time.monotonic()
        wait_until(
            lambda: set(statuses(ids).values()) == {"interrupted"},
            30,
            what="rows of the killed server interrupted",
        )
        swept = time.monotonic()
        print(
            f"\n[{'peer' if peer else 'restart'}] swept {swept - killed:.2f} s after SIGKILL"
            + ("" if peer else f", {swept - ready:.2f} s after the restarted server was up")
        )
        if peer:
            # its periodic sweep, not a start-up one: within an interval (+ slack for a busy box)
            assert swept - killed < SWEEP_S + 5.0
        for stream in Stream.objects.filter(pk__in=ids):
            assert stream.error_code == "interrupted"
            assert stream.event_count == Event.objects.filter(stream=stream).count() > 0
            # what was stored of it (rows.end_from_stored), not "No output"
            stored_deltas = deltas.filter(stream=stream).count()
            assert stream.output_text and stream.output_deltas == stored_deltas > 0
            assert stream.bytes_received > 0 and stream.first_token_us is not None
        r = api_create(other, people.owner, metadata={"time_scale": 0})
        assert r.status_code == 201, r.text  # the slots are free
        assert log_errors(other.output()) == []
    finally:
        first.stop()
        if other is not None:
            other.stop()


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("command", ["serve", "stream_worker"])
def test_every_long_lived_command_sweeps_periodically(people, simulator_process, command):
    """A row of a dead process that appears while `serve` or `stream_worker` runs (so not their
    start-up sweep) ends `interrupted` within the sweep interval."""
    import datetime as dt

    from tests.conftest import free_port, wait_for_port

    port = free_port()
    args = ["serve", f"127.0.0.1:{port}"] if command == "serve" else ["stream_worker"]
    env = {"UPSTREAM_BASE_URL": simulator_process.base_url}
    if command == "stream_worker":
        env["STREAMSCOPE_RUNNER"] = "worker"
    proc = manage(*args, overrides={"SWEEP_INTERVAL_S": SWEEP_S}, stdout=subprocess.PIPE, **env)
    try:
        if command == "serve":
            wait_for_port(port, proc=proc, timeout=60)
        else:
            assert "ready" in proc.stdout.readline()
        time.sleep(2 * SWEEP_S)  # past its start-up sweep
        orphan = Stream.objects.create(
            user=people.owner,
            status="streaming",
            runner=f"{socket.gethostname()}:{_dead_pid()}:0123abcd",
            heartbeat_at=dt.datetime.now(dt.UTC),  # fresh: only the pid tells
        )
        created = time.monotonic()
        wait_until(
            lambda: Stream.objects.get(pk=orphan.pk).status == "interrupted",
            30,
            what=f"{command} sweeping",
        )
        took = time.monotonic() - created
        print(f"\n{command}: orphan swept after {took:.2f} s")
        assert took < SWEEP_S + 5.0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


class TestCancelOfAnOrphan:
    """POST /api/streams/<id>/cancel/ of a row nothing records any more."""

    async def _cancel(self, user, stream):
        return await bearer(user).post(f"/api/streams/{stream.pk}/cancel/")

    async def _wait_final(self, stream):
        for _ in range(250):
            stream = await Stream.objects.aget(pk=stream.pk)
            if not stream.is_active:
                return stream
            await asyncio.sleep(0.02)
        raise AssertionError(f"stream {stream.pk} still {stream.status}")

    @pytest.mark.parametrize(
        "kind", ["dead_pid", "stale_heartbeat", "claimed_here_without_task", "unclaimed"]
    )
    async def test_it_is_cancelled_and_frees_the_slot(self, people, settings, kind):
        import datetime as dt

        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_CONCURRENT_PER_USER": 1}
        now = dt.datetime.now(dt.UTC)
        row = {
            "dead_pid": (f"{socket.gethostname()}:{_dead_pid()}:0123abcd", now, "streaming"),
            "stale_heartbeat": ("elsewhere:1:0123abcd", now - dt.timedelta(minutes=5), "streaming"),
            "claimed_here_without_task": (RUNNER_ID, now, "pending"),
            "unclaimed": ("", now, "pending"),
        }[kind]
        stream = await Stream.objects.acreate(
            user=people.owner, status=row[2], runner=row[0], heartbeat_at=row[1]
        )
        await Event.objects.acreate(stream=stream, index=0, t_us=0, type="x", data="{}")
        with pytest.raises(services.TooMany):
            await sync_to_async(services.create)(people.owner, {"input": "hi"})
        r = await self._cancel(people.owner, stream)
        assert r.status_code == 202, r.content
        stream = await self._wait_final(stream)
        assert stream.status == "cancelled"
        assert stream.event_count == 1  # what was stored, not what the row last said
        assert stream.finished_at is not None
        await sync_to_async(services.create)(people.owner, {"input": "hi"})  # the slot is free

    async def test_a_live_process_elsewhere_still_answers_409(self, people):
        import datetime as dt

        stream = await Stream.objects.acreate(
            user=people.owner,
            status="streaming",
            runner="elsewhere:1:0123abcd",
            heartbeat_at=dt.datetime.now(dt.UTC),
        )
        r = await self._cancel(people.owner, stream)
        assert r.status_code == 409 and r.json()["error"]["code"] == "not_running_here"
        assert (await Stream.objects.aget(pk=stream.pk)).status == "streaming"


# --- Commands stopped by signals and closed pipes ---------------------------------------------


def runner_of(proc):
    """The RUNNER_ID prefix of the rows a command process created."""
    return f"{socket.gethostname()}:{proc.pid}:"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_record_stopped_by_a_signal_cancels_its_streams_and_exits_quietly(
    people, simulator_process, sig, code
):
    proc = manage(
        "record",
        "--prompt",
        "Tell me a long story about Utrecht",
        "--model",
        "gpt-oss-120b",
        "--count",
        "12",
        "--concurrency",
        "4",
        "--json",
        "--upstream",
        simulator_process.base_url,
    )
    mine = Stream.objects.filter(runner__startswith=runner_of(proc))
    try:
        wait_until(
            lambda: Event.objects.filter(stream__in=mine).values("stream").distinct().count() >= 4,
            30,
            what="4 streams recording",
        )
        proc.send_signal(sig)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\nrecord exited {took * 1000:.0f} ms after {sig.name}")
    assert proc.returncode == code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    reason = "interrupted" if sig == signal.SIGINT else "terminated"
    cancelled = mine.filter(status="cancelled").count()
    assert cancelled >= 4
    assert lines[0] == f"record: {reason}; {cancelled} stream(s) cancelled"
    assert not mine.filter(status__in=Stream.ACTIVE_STATUSES).exists()
    for stream in mine.filter(status="cancelled"):
        assert stream.event_count == Event.objects.filter(stream=stream).count()
    assert took < 10  # normally tens of ms: one commit


def test_record_into_a_closed_pipe_stops_and_cancels(people, simulator_process):
    proc = manage(
        "record",
        "--prompt",
        "Hi",
        "--count",
        "8",
        "--concurrency",
        "2",
        "--json",
        "--upstream",
        simulator_process.base_url,
    )
    mine = Stream.objects.filter(runner__startswith=runner_of(proc))
    try:
        first = proc.stdout.readline()  # `| head -1`
        assert json.loads(first)["status"] == "completed"
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("record: output closed (broken pipe)"), err
    assert mine.count() < 8  # it stopped
    assert not mine.filter(status__in=Stream.ACTIVE_STATUSES).exists()


@pytest.fixture(scope="module")
def big_capture(tmp_path_factory):
    """An SSE capture of 99,000 events (importing one takes a second or so)."""
    path = tmp_path_factory.mktemp("captures") / "big.sse"
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}}
    with open(path, "w") as f:
        f.write(f"event: response.created\ndata: {json.dumps(created)}\n\n")
        for i in range(1, 99_000):
            delta = {
                "type": "response.output_text.delta",
                "sequence_number": i,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "x",
            }
            f.write(f"event: response.output_text.delta\ndata: {json.dumps(delta)}\n\n")
    return str(path)


def test_import_sse_interrupted_keeps_whole_files_only(people, big_capture):
    before = set(Stream.objects.values_list("pk", flat=True))
    proc = manage("import_sse", "--json", *[big_capture] * 6)
    try:
        first = proc.stdout.readline()
        assert json.loads(first)["events"] == 99_000
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["import_sse: interrupted"], err
    new = Stream.objects.exclude(pk__in=before)
    reported = 1 + len(out.strip().splitlines())
    assert 1 <= new.count() == reported < 6  # each file whole or not at all
    for stream in new:
        assert stream.status not in Stream.ACTIVE_STATUSES
        assert Event.objects.filter(stream=stream).count() == 99_000


def test_import_sse_and_export_sse_into_a_closed_pipe(people, big_capture):
    from streams.ingest.importer import import_capture

    with open(big_capture, "rb") as f:
        (stream,) = import_capture(f.read(), "big.sse")
    for args in (["export_sse", str(stream.pk)], ["import_sse", *[big_capture] * 3]):
        proc = manage(*args)
        try:
            proc.stdout.read(100)  # `| head -c 100`
            proc.stdout.close()
            err = proc.stderr.read()
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 141, (args, err)
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert err.strip().splitlines() == [f"{args[0]}: output closed (broken pipe)"], err


# --- The watchdog: an upstream that accepts and then never answers ----------------------------


class TroubledUpstream:
    """A raw asyncio HTTP server on 127.0.0.1: of the connections it accepts, one in three is
    read and never answered, one in three is reset (RST), one in three gets a short event
    stream."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.count = itertools.count()
        self.kinds = []
        self.held = []
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _run(self, started):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self.server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()

    async def _handle(self, reader, writer):
        kind = ("silent", "reset", "answer")[next(self.count) % 3]
        self.kinds.append(kind)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        if kind == "silent":
            self.held.append(writer)  # accepted, read, never answered
            return
        if kind == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        events = [
            {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_t"}},
            {
                "type": "response.completed",
                "sequence_number": 1,
                "response": {"id": "resp_t", "status": "completed", "output": []},
            },
        ]
        body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    def stop(self):
        def shutdown():
            for writer in self.held:
                writer.transport.abort()
            self.server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(shutdown)
        self.thread.join(10)


WATCHDOG = {
    "STREAMSCOPE_STALL_TIMEOUT_S": "1",
    "STREAMSCOPE_CONNECT_TIMEOUT_S": "1",
    "STREAMSCOPE_CONNECT_BACKOFF_S": "0.1",
}


def test_record_against_an_upstream_that_never_answers_finishes(people):
    upstream = TroubledUpstream()
    try:
        started = time.monotonic()
        proc = manage(
            "record",
            "--prompt",
            "hi",
            "--count",
            "50",
            "--concurrency",
            "50",
            "--json",
            "--upstream",
            upstream.base_url,
            **WATCHDOG,
        )
        try:
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
        took = time.monotonic() - started
    finally:
        upstream.stop()
    print(f"\nrecord --count 50 against a troubled upstream: {took:.1f} s")
    assert proc.returncode == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert len(results) == 50
    mine = Stream.objects.filter(pk__in=[r["id"] for r in results])
    assert mine.count() == 50
    got = {(s.status, s.error_code) for s in mine}
    assert {s for s, _ in got} <= TERMINAL
    assert ("failed", "timeout") in got  # the silent ones, after the timeouts
    assert ("completed", "") in got
    assert {"silent", "reset", "answer"} <= set(upstream.kinds)
    # Each stream: at most 3 attempts of connect + stall timeout (2 s) and the backoff; the
    # bound is generous for a busy machine, but far from "hung for minutes".
    assert took < 60


def test_a_failure_outside_a_recording_does_not_hang_record(people, simulator_process, monkeypatch):
    """What hung `record` once: an exception escaping one stream's task (a row that could not
    be created) ended asyncio.run's main task while the others were recording; asyncio.run then
    cancelled every task at once, this loop's writer among them, and the recordings waited for
    ever for their final write. Now the command stops its recordings itself, writer alive, and
    one failure is one error line."""
    from django.db import OperationalError

    from streams.management.commands.record import Command

    calls = itertools.count()
    new_row = rows.new_row

    def flaky_new_row(*args, **kwargs):
        if next(calls) == 2:
            raise OperationalError("database is locked")
        return new_row(*args, **kwargs)

    monkeypatch.setattr(rows, "new_row", flaky_new_row)
    body = rows.build_request_body("Tell me about Utrecht", "gpt-oss-20b")
    body["metadata"] = {"time_scale": "0.3"}
    command = Command(stdout=open(os.devnull, "w"))  # noqa: SIM115 (closed with the process)
    opts = {"concurrency": 5, "count": 5, "upstream": simulator_process.base_url, "json": True}
    outcome = {}

    def run():  # in a thread, so that a hang fails this test instead of the suite
        outcome["results"] = asyncio.run(command.record_all(body, None, opts))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "record hung"
    results = outcome["results"]
    assert [r for r in results if r.get("error")] == [
        {"id": None, "error": "OperationalError: database is locked"}
    ]
    ids = [r["id"] for r in results if r.get("id")]
    assert len(ids) == 4
    assert set(statuses(ids).values()) == {"completed"}


# --- The playground says when it follows a stall retry ----------------------------------------


class TestStallRetryNotice:
    def test_a_stalled_attempt_names_its_silence_and_the_next_attempt(self, settings):
        from dashboard.views.playground import answer_notice

        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "STALL_MAX_ATTEMPTS": 3}
        stalled = Stream(status="stalled", attempt=1, error_message="no event for 15 s; aborted")
        assert answer_notice(stalled) == (
            "warn",
            "Stalled: no event for 15 s; aborted — retrying, attempt 2 of 3.",
        )
        retry = Stream(status="streaming", attempt=2)
        assert answer_notice(retry) == ("warn", "Retrying after a stall: attempt 2 of 3.")
        last = Stream(status="stalled", attempt=3, error_message="no event for 15 s; aborted")
        assert answer_notice(last) == ("err", "No event for a while, 3 times: gave up.")
        assert answer_notice(Stream(status="streaming", attempt=1)) == ("", "")
