"""Where streams run: asyncio tasks in this process (the default), or worker processes.

A stream started from a page or the API is a task on the server's event loop, so it outlives
the browser tab that asked for it. Stall retries create a new `Stream` row per attempt, linked
to the first; connection errors before the first event retry on the same row with backoff.
"""

import asyncio
import contextvars
import datetime as dt
import logging
import os
import socket
import threading

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from . import conf, services
from .models import Event, Stream
from .recorder import RUNNER_ID, Recording, get_writer, record_attempt
from .upstream import ClientPool

log = logging.getLogger(__name__)

_simulator = None
_simulator_lock = threading.Lock()


def upstream_base_url():
    """The configured upstream, or the built-in simulator (started on first use)."""
    global _simulator
    if settings.UPSTREAM_BASE_URL:
        return settings.UPSTREAM_BASE_URL
    with _simulator_lock:
        if _simulator is None:
            from .simulator.server import start_in_thread

            _simulator = start_in_thread()
            log.info("built-in upstream simulator listening at %s", _simulator.base_url)
        return _simulator.base_url


def uses_simulator():
    return not settings.UPSTREAM_BASE_URL


def in_workers():
    """Streams started by pages and the API run in worker processes (`stream_worker`)."""
    return conf.get().runner == "worker"


# ---------------------------------------------------------------------------------------------
# Running


_clients = {}


def get_client():
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = ClientPool(conf.get().connect_timeout_s)
        for other in [lp for lp in _clients if lp.is_closed()]:
            del _clients[other]
    return client


async def run_stream(stream, *, base_url=None, api_key=None, client=None):
    """Record `stream` (and its stall retries). Returns (last attempt's stream, outcome)."""
    base_url = base_url or await sync_to_async(upstream_base_url)()
    api_key = settings.UPSTREAM_API_KEY if api_key is None else api_key
    client = client or get_client()
    url = base_url.rstrip("/") + "/responses"
    writer = get_writer()
    current = stream
    stall_attempts = conf.get().stall_max_attempts
    while True:
        outcome = None
        for connect_try in range(conf.get().connect_max_attempts):
            if connect_try:
                await asyncio.sleep(conf.get().connect_backoff_s * 2 ** (connect_try - 1))
            rec = Recording(
                current.pk, current.user_id, pinned_model=current.requested_model != "auto"
            )
            outcome = await record_attempt(
                rec, client, url, current.request_body, api_key, writer=writer
            )
            if not outcome.retryable:
                break
            log.info("stream %s: %s; retrying", current.pk, outcome.error_message)
        if outcome.status == Stream.Status.STALLED and current.attempt < stall_attempts:
            current = await sync_to_async(services.next_attempt)(current)
            log.info("stream %s stalled; retrying as stream %s", stream.pk, current.pk)
            continue
        return current, outcome


_tasks = {}
WORKERS_GROUP = "streamscope.workers"


def start(stream):
    """Run `stream` as a task on the running loop; it outlives the request that started it.

    When streams run in workers and this process has not claimed the row, wake the workers
    instead: the row waits in the database, so a worker that misses the wake-up still finds it
    when it polls (and a row a worker claimed meanwhile is not recorded twice)."""
    if in_workers() and stream.runner != RUNNER_ID:
        _spawn(_tell_workers({"type": "worker.wake"}))
        return None
    # A fresh context, not the request's: under ASGI that one carries asgiref's executor for the
    # request's thread, which quits when the response is sent, and the task's later
    # sync_to_async calls (the new row of a stall retry) would fail with "CurrentThreadExecutor
    # already quit or is broken".
    task = asyncio.get_running_loop().create_task(
        run_stream(stream), name=f"stream-{stream.pk}", context=contextvars.Context()
    )
    _tasks[stream.pk] = task
    task.add_done_callback(lambda t: _done(stream.pk, t))
    _ensure_heartbeat()
    return task


def _done(stream_id, task):
    if _tasks.get(stream_id) is task:
        del _tasks[stream_id]
    if not task.cancelled() and task.exception() is not None:
        log.error("stream %s: runner failed", stream_id, exc_info=task.exception())


def cancel(stream_id):
    """Cancel a stream. Running in this process: at once (True). When streams run in workers:
    the request is broadcast to them (True: asked), and a stream still waiting for a worker is
    cancelled in the database. False when it runs nowhere this process can reach."""
    task = _tasks.get(stream_id)
    if task is not None and not task.done():
        task.cancel()
        return True
    if in_workers():
        _spawn(_cancel_elsewhere(stream_id))
        return True
    return False


def running_here():
    return set(_tasks)


async def _cancel_elsewhere(stream_id):
    await sync_to_async(_cancel_unclaimed)(stream_id)
    await _tell_workers({"type": "worker.cancel", "stream": stream_id})


def _cancel_unclaimed(stream_id):
    return Stream.objects.filter(pk=stream_id, status=Stream.Status.PENDING, runner="").update(
        status=Stream.Status.CANCELLED,
        finished_at=dt.datetime.now(dt.UTC),
        error_message="cancelled before a worker started it",
    )


async def _tell_workers(message):
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(WORKERS_GROUP, message)
    except Exception:
        # Workers also poll the database: a lost wake-up costs at most one poll interval.
        log.exception("could not reach the workers over the channel layer")


_background = set()


def _spawn(coro):
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


def claim_pending(limit):
    """Claim up to `limit` unclaimed pending streams for this process, oldest first. One
    conditional UPDATE per row makes it safe with any number of workers, on SQLite and
    PostgreSQL alike (the loser of a race updates nothing)."""
    if limit <= 0:
        return []
    # status index (status, -created_at): the pending rows are few
    candidates = list(
        Stream.objects.filter(status=Stream.Status.PENDING, runner="")
        .order_by("id")
        .values_list("id", flat=True)[: limit * 2]
    )
    now = dt.datetime.now(dt.UTC)
    claimed = []
    for pk in candidates:
        won = Stream.objects.filter(pk=pk, status=Stream.Status.PENDING, runner="").update(
            runner=RUNNER_ID, heartbeat_at=now
        )
        if won:
            claimed.append(pk)
            if len(claimed) >= limit:
                break
    return list(Stream.objects.filter(pk__in=claimed).order_by("id"))


# ---------------------------------------------------------------------------------------------
# Liveness: heartbeats and orphans


_heartbeat_tasks = {}


def _ensure_heartbeat():
    loop = asyncio.get_running_loop()
    task = _heartbeat_tasks.get(loop)
    if task is None or task.done():
        _heartbeat_tasks[loop] = loop.create_task(_heartbeat(), name="streamscope-heartbeat")


async def _heartbeat():
    while _tasks:
        await asyncio.sleep(conf.get().heartbeat_s)
        await beat()


async def beat():
    """Keep `heartbeat_at` fresh on streams this process runs, even silent ones, so that other
    processes can tell a live stream from one whose process died."""
    ids = list(_tasks)
    if ids:
        try:
            await Stream.objects.filter(pk__in=ids, status__in=Stream.ACTIVE_STATUSES).aupdate(
                heartbeat_at=dt.datetime.now(dt.UTC)
            )
        except Exception:
            log.exception("heartbeat failed")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans(retry=None):
    """Mark streams left `pending`/`streaming` by a dead process as `interrupted`; returns how
    many. With `retry` (default: the RETRY_INTERRUPTED setting) each gets a new attempt, linked
    to the first, that waits unclaimed for a worker.

    A stream is orphaned when its runner is a process of this host that no longer exists (or
    an earlier run of this very pid), or when nobody has touched it for HEARTBEAT_STALE_S.
    Unclaimed rows are waiting for a worker: nobody's orphans."""
    host = socket.gethostname()
    now = dt.datetime.now(dt.UTC)
    stale = now - dt.timedelta(seconds=conf.get().heartbeat_stale_s)
    active = Stream.objects.filter(status__in=Stream.ACTIVE_STATUSES).exclude(runner="")
    dead = Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True)
    for runner in active.exclude(runner=RUNNER_ID).values_list("runner", flat=True).distinct():
        parts = runner.split(":")
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit():
            pid = int(parts[1])
            if not _pid_alive(pid) or pid == os.getpid():
                dead |= Q(runner=runner)
    orphans = list(active.filter(dead).exclude(runner=RUNNER_ID).values_list("pk", "runner"))
    swept = []
    for pk, runner in orphans:
        # Conditional on the runner seen: a row claimed again meanwhile is left alone.
        if Stream.objects.filter(pk=pk, runner=runner, status__in=Stream.ACTIVE_STATUSES).update(
            status=Stream.Status.INTERRUPTED,
            # what was stored: the recorder rewrites a streaming row's count only now and then
            event_count=Coalesce(
                Subquery(
                    Event.objects.filter(stream_id=OuterRef("pk"))
                    .values("stream_id")
                    .annotate(n=Count("pk"))
                    .values("n")[:1]
                ),
                0,
            ),
            finished_at=now,
            error_code="interrupted",
            error_message="the process recording this stream stopped before it ended",
        ):
            swept.append(pk)
    if retry is None:
        retry = conf.get().retry_interrupted
    if retry:
        for stream in Stream.objects.filter(pk__in=swept).select_related("user", "first_attempt"):
            if stream.attempt < conf.get().stall_max_attempts:
                services.next_attempt(stream, claimed=False)
    return len(swept)
