"""Scale-out and durability on real PostgreSQL and Redis, with several processes.

Runs in the CI's second tier (`.ci/test-suite` starts the servers and sets DATABASE_URL,
REDIS_URL, STREAMSCOPE_PG_DATA and STREAMSCOPE_PG_BIN); skipped elsewhere."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
import websockets
from django.conf import settings
from websockets.asyncio.client import connect

from streams.models import Event, Stream
from tests.conftest import REPO, DaphneServer, database_url, wait_for_port

ON_SCALE_STACK = (
    bool(os.environ.get("REDIS_URL")) and "postgresql" in settings.DATABASES["default"]["ENGINE"]
)
pytestmark = [
    pytest.mark.scale,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not ON_SCALE_STACK, reason="needs PostgreSQL and Redis (CI tier 2)"),
]

FAST_LIVENESS = {
    "HEARTBEAT_S": 0.5,
    "HEARTBEAT_STALE_S": 3.0,
    "WORKER_POLL_S": 0.2,
    "MAX_CONCURRENT_PER_USER": 1000,
}


class WorkerProcess:
    """`manage.py stream_worker` on the test database, Redis and the simulator."""

    def __init__(self, upstream_url, overrides=None):
        self.log = tempfile.NamedTemporaryFile(prefix="worker-", suffix=".log", delete=False)
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "tests.live_settings",
            "DATABASE_URL": database_url(),
            "UPSTREAM_BASE_URL": upstream_url,
            "STREAMSCOPE_RUNNER": "worker",
            "STREAMSCOPE_TEST_OVERRIDES": json.dumps({**FAST_LIVENESS, **(overrides or {})}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "stream_worker", "--drain", "5"],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while "ready" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.output()}")
            time.sleep(0.05)

    def output(self, tail=5000):
        with open(self.log.name, errors="replace") as f:
            text = f.read()
        return text if tail is None else text[-tail:]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        os.unlink(self.log.name)


def daphne(simulator_process, overrides=None, port=None):
    return DaphneServer(
        simulator_process.base_url,
        overrides={**FAST_LIVENESS, **(overrides or {})},
        env={"STREAMSCOPE_RUNNER": "worker"},
        port=port,
    )


async def start_stream(client, server, user, prompt="Tell me about Utrecht", **metadata):
    metadata.setdefault("time_scale", 0.3)
    r = await client.post(
        server.url + "/api/streams/",
        json={"input": prompt, "model": "gpt-oss-20b", "metadata": metadata},
        headers={"Authorization": f"Bearer {user.token}"},
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def watch(server, stream_id, user, timeout=120):
    """A viewer that behaves like static/js/streamclient.js: it resumes with after=<last index
    seen> whenever the connection drops, until the stream's terminal frame. Returns every index
    received, in order (duplicates included, so a test can see them) and the reconnect count."""
    seen = []
    reconnects = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        after = seen[-1] if seen else -1
        try:
            async with connect(
                f"{server.ws_url}/ws/streams/{stream_id}/?format=json&after={after}",
                origin=server.origin,
                additional_headers={"Authorization": f"Bearer {user.token}"},
                max_size=None,
                open_timeout=5,
            ) as ws:
                async for message in ws:
                    frame = json.loads(message)
                    seen.extend(e["index"] for e in frame.get("events", []))
                    if frame.get("terminal"):
                        return seen, reconnects
        except (OSError, websockets.WebSocketException, TimeoutError):
            pass
        reconnects += 1
        await asyncio.sleep(min(0.1 * 2**reconnects, 1.0))
    raise AssertionError(f"viewer of stream {stream_id} timed out after {seen[-1:]}")


async def wait_finished(ids, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = await Stream.objects.filter(pk__in=ids, status__in=Stream.ACTIVE_STATUSES).acount()
        if not active:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("streams did not finish")


async def sent_count(simulator_process, upstream_id):
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.get(f"{simulator_process.root}/_simulator/responses/{upstream_id}")
        return r.json()["event_count"]


async def assert_stored_exactly_once(simulator_process, stream_id):
    stream = await Stream.objects.aget(pk=stream_id)
    indexes = [
        i
        async for i in Event.objects.filter(stream_id=stream_id)
        .order_by("index")
        .values_list("index", flat=True)
    ]
    assert indexes == list(range(len(indexes)))
    assert (
        len(indexes)
        == stream.event_count
        == await sent_count(simulator_process, stream.upstream_id)
    )
    return stream, len(indexes)


async def test_two_daphnes_two_workers_200_streams(people, simulator_process):
    servers = [daphne(simulator_process) for _ in range(2)]
    workers = [WorkerProcess(simulator_process.base_url) for _ in range(2)]
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            ids = await asyncio.gather(
                *(
                    start_stream(client, servers[i % 2], people.owner, prompt=f"question {i}")
                    for i in range(200)
                )
            )
        # every viewer watches through the other Daphne than the one that took the request
        views = await asyncio.gather(
            *(watch(servers[(i + 1) % 2], sid, people.owner) for i, sid in enumerate(ids))
        )
        await wait_finished(ids)
        runners = set()
        for sid, (seen, _) in zip(ids, views, strict=True):
            stream, n = await assert_stored_exactly_once(simulator_process, sid)
            assert stream.status == "completed", (stream.error_code, stream.error_message)
            assert seen == list(range(n)), f"stream {sid}: viewer got {len(seen)} of {n}"
            runners.add(stream.runner)
        assert len(runners) == 2  # both workers took streams
    finally:
        for p in workers + servers:
            p.stop()


async def test_sigkill_of_a_worker_interrupts_and_retries_its_streams(people, simulator_process):
    from asgiref.sync import sync_to_async

    from streams.store import rows

    worker_a = WorkerProcess(simulator_process.base_url, {"RETRY_INTERRUPTED": True})
    worker_b = None
    try:
        # long enough to be still streaming when worker A is killed: worker B starts first,
        # which takes a second or two (it loads what the hot path needs before it serves,
        # streams/core/warmup.py), and the default length had ended by then
        body = rows.build_request_body(
            "Tell me a long story", "gpt-oss-120b",
            metadata={"time_scale": "1.0", "sentences": "30"},
        )  # fmt: skip
        ids = [
            (await sync_to_async(rows.new_row)(people.owner, body, claimed=False)).pk
            for _ in range(5)
        ]
        deadline = time.monotonic() + 20
        while await Event.objects.filter(
            stream_id__in=ids, type="response.output_text.delta"
        ).values("stream_id").distinct().acount() < len(ids):
            assert time.monotonic() < deadline, worker_a.output()
            await asyncio.sleep(0.1)
        worker_b = WorkerProcess(simulator_process.base_url, {"RETRY_INTERRUPTED": True})
        worker_a.kill()
        killed_at = {sid: await Event.objects.filter(stream_id=sid).acount() for sid in ids}
        retries = []
        # (a bound on a failure, not a measurement: a sweep every SWEEP_INTERVAL_S finds them
        # within seconds, but on a loaded 2-core machine 30 s once ran out)
        deadline = time.monotonic() + 90
        while len(retries) < len(ids):
            assert time.monotonic() < deadline, worker_b.output()
            retries = [r async for r in Stream.objects.filter(first_attempt_id__in=ids)]
            await asyncio.sleep(0.2)
        await wait_finished([r.pk for r in retries], timeout=60)
        for sid in ids:
            stream = await Stream.objects.aget(pk=sid)
            assert stream.status == "interrupted"
            stored = await Event.objects.filter(stream_id=sid).acount()
            # Nothing that was stored is lost; what was stored is what the row says.
            assert stored >= killed_at[sid] > 0
            assert stored == stream.event_count
        for retry in retries:
            retry, _ = await assert_stored_exactly_once(simulator_process, retry.pk)
            assert retry.status == "completed" and retry.attempt == 2
            assert retry.runner.split(":")[1] == str(worker_b.proc.pid)
    finally:
        worker_a.stop()
        if worker_b is not None:
            worker_b.stop()


def _redis_restart(downtime_s):
    url = urlsplit(os.environ["REDIS_URL"])
    port = str(url.port or 6379)
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", port, "shutdown", "nosave"], check=False)
    time.sleep(downtime_s)
    d = tempfile.mkdtemp(prefix="redis-")
    subprocess.run(
        ["redis-server", "--bind", "127.0.0.1", "--port", port, "--daemonize", "yes"]
        + ["--save", "", "--appendonly", "no", "--dir", d]
        + ["--pidfile", f"{d}/redis.pid", "--logfile", f"{d}/redis.log"],
        check=True,
    )
    wait_for_port(int(port))


async def test_redis_restart_recording_continues_and_viewers_catch_up(people, simulator_process):
    server = daphne(simulator_process)
    worker = WorkerProcess(simulator_process.base_url)
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            ids = await asyncio.gather(
                *(
                    start_stream(client, server, people.owner, time_scale=1.0, prompt=f"q{i}")
                    for i in range(20)
                )
            )
        viewers = asyncio.gather(*(watch(server, sid, people.owner) for sid in ids))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(_redis_restart, 1.0)
        views = await viewers
        await wait_finished(ids)
        for sid, (seen, _) in zip(ids, views, strict=True):
            stream, n = await assert_stored_exactly_once(simulator_process, sid)
            assert stream.status == "completed"
            assert seen == list(range(n))
    finally:
        worker.stop()
        server.stop()


def _postgres(action):
    data, pgbin = os.environ["STREAMSCOPE_PG_DATA"], os.environ["STREAMSCOPE_PG_BIN"]
    # port, socket and listen address live in postgresql.conf (see .ci/test-suite)
    cmd = f"{pgbin}/pg_ctl -D {data} -l {data}/../server.log -m fast -w {action}"
    if os.geteuid() == 0:
        cmd = ["su", "postgres", "-c", cmd]
    else:
        cmd = cmd.split()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


needs_pg_control = pytest.mark.skipif(
    not os.environ.get("STREAMSCOPE_PG_DATA"), reason="needs STREAMSCOPE_PG_DATA/_PG_BIN"
)


async def _relay_threads_read():
    """A read on each of the relay's reader threads of this process (consumers.db_read)."""
    from streams.live.consumers import _read_executor, db_read

    barrier = threading.Barrier(_read_executor._max_workers, timeout=10)

    def count():
        barrier.wait()  # one call per thread
        return Stream.objects.count()

    return await asyncio.gather(*(db_read(count)() for _ in range(_read_executor._max_workers)))


async def _outage(downtime_s):
    from asgiref.sync import sync_to_async
    from django.db import connections

    await _relay_threads_read()  # each relay thread holds a connection from before
    await asyncio.to_thread(_postgres, "stop")
    await asyncio.sleep(downtime_s)
    await asyncio.to_thread(_postgres, "start")
    # The test's own ORM calls run on asgiref's thread: its connection died with the server.
    await sync_to_async(connections.close_all)()
    # The relay's threads reconnect on their own: a viewer's first read after the restart is
    # answered, not refused (their connections died with the server too).
    await _relay_threads_read()


def _survive_outage(flow):
    """Run an async test body that restarts PostgreSQL; then drop this thread's dead
    connection, which pytest-django uses to clean up (from the event loop it may not)."""
    from django.db import connections

    try:
        asyncio.run(flow)
    finally:
        connections.close_all()


@needs_pg_control
def test_postgres_outage_writes_are_retried_and_nothing_is_lost(people, simulator_process):
    _survive_outage(_outage_retried(people, simulator_process))


async def _outage_retried(people, simulator_process):
    from asgiref.sync import sync_to_async

    from streams.store import rows

    worker = WorkerProcess(simulator_process.base_url)
    try:
        body = rows.build_request_body("q", "gpt-oss-20b", metadata={"time_scale": "1.0"})
        ids = [
            (await sync_to_async(rows.new_row)(people.owner, body, claimed=False)).pk
            for _ in range(10)
        ]
        await asyncio.sleep(1.0)
        await _outage(3.0)
        await wait_finished(ids, timeout=60)
        for sid in ids:
            stream, _ = await assert_stored_exactly_once(simulator_process, sid)
            assert stream.status == "completed", (stream.error_code, stream.error_message)
        assert "retrying" in worker.output(tail=None)
    finally:
        worker.stop()


@needs_pg_control
def test_postgres_outage_beyond_the_retry_window_ends_with_a_clear_status(
    people, simulator_process
):
    _survive_outage(_outage_gives_up(people, simulator_process))


async def _outage_gives_up(people, simulator_process):
    from asgiref.sync import sync_to_async

    from streams.store import rows

    worker = WorkerProcess(simulator_process.base_url, {"STORAGE_RETRY_S": 1.0})
    try:
        body = rows.build_request_body("q", "gpt-oss-120b", metadata={"time_scale": "1.0"})
        ids = [
            (await sync_to_async(rows.new_row)(people.owner, body, claimed=False)).pk
            for _ in range(3)
        ]
        await asyncio.sleep(1.5)
        await _outage(4.0)
        await wait_finished(ids, timeout=60)
        for sid in ids:
            stream = await Stream.objects.aget(pk=sid)
            assert stream.status == "failed"
            assert stream.error_code == "storage_unavailable"
            assert "could not be stored" in stream.error_message
            # the row says exactly what is in the database
            assert await Event.objects.filter(stream_id=sid).acount() == stream.event_count
    finally:
        worker.stop()


async def test_daphne_restart_viewers_reconnect_and_resume(people, simulator_process):
    first = daphne(simulator_process)
    worker = WorkerProcess(simulator_process.base_url)
    second = None
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            sid = await start_stream(client, first, people.owner, time_scale=1.0)
        viewer = asyncio.create_task(watch(first, sid, people.owner))
        await asyncio.sleep(1.0)
        port = first.port
        await asyncio.to_thread(first.stop)
        second = await asyncio.to_thread(daphne, simulator_process, None, port)
        seen, reconnects = await viewer
        await wait_finished([sid])
        stream, n = await assert_stored_exactly_once(simulator_process, sid)
        assert stream.status == "completed"
        assert seen == list(range(n))
        assert reconnects >= 1
    finally:
        worker.stop()
        if second is not None:
            second.stop()


async def test_proxied_streams_record_in_the_web_process_and_reach_viewers_elsewhere(
    people, simulator_process
):
    """With STREAMSCOPE_RUNNER=worker and no worker at all: a proxied stream runs and records
    in the Daphne holding the client's connection; a viewer on the other Daphne sees it live
    through Redis."""
    servers = [daphne(simulator_process) for _ in range(2)]
    try:
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(i):
                body = {
                    "model": "auto",
                    "input": f"question {i}",
                    "stream": True,
                    "metadata": {"time_scale": "0.3", "seed": str(i)},
                }
                async with client.stream(
                    "POST",
                    f"{servers[0].url}/v1/responses",
                    json=body,
                    headers={"Authorization": f"Bearer {people.owner.token}"},
                ) as r:
                    assert r.status_code == 200
                    stream_id = int(r.headers["x-streamscope-stream"])
                    viewer = asyncio.ensure_future(watch(servers[1], stream_id, people.owner))
                    received = b"".join([chunk async for chunk in r.aiter_raw()])
                return stream_id, received, await viewer

            results = await asyncio.gather(*(one(i) for i in range(20)))
        await wait_finished([sid for sid, _, _ in results])
        for sid, received, (seen, _) in results:
            stream, n = await assert_stored_exactly_once(simulator_process, sid)
            assert stream.source == "proxy" and stream.status == "completed"
            assert stream.runner.split(":")[1] == str(servers[0].proc.pid)
            assert seen == list(range(n))
            assert received.count(b"\n\n") == n
    finally:
        for p in servers:
            p.stop()
