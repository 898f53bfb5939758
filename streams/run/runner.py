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
from django.db import close_old_connections
from django.db.models import Q

from streams.core import conf, formats, lifecycle
from streams.core.lifecycle import RUNNER_ID
from streams.ingest.recorder import Forwarded, Recording, record_attempt
from streams.ingest.upstream import ClientPool
from streams.ingest.writer import get_writer
from streams.live import relay
from streams.models import Stream
from streams.observe import telemetry
from streams.run import periodic
from streams.simulator import built_in_upstream, scenarios
from streams.store import retention, rows, search

log = logging.getLogger(__name__)

_simulator = None
_simulator_lock = threading.Lock()


def upstream_base_url():
    """The configured upstream, or the built-in simulator (started on first use)."""
    global _simulator
    if not built_in_upstream():
        return settings.UPSTREAM_BASE_URL
    with _simulator_lock:
        if _simulator is None:
            from streams.simulator.server import start_in_thread

            _simulator = start_in_thread()
            log.info("built-in upstream simulator listening at %s", _simulator.base_url)
        return _simulator.base_url


def upstream(format):
    """(base URL, API key) of the upstream that speaks `format` (streams/core/formats/), as
    configured: its own (UPSTREAM_CHAT_*, UPSTREAM_MESSAGES_*) with its own key, else the
    Responses upstream and its key (one upstream's key never goes to another). The URL is ""
    for the built-in simulator: `upstream_base_url()` starts it (not on the event loop)."""
    base_url, key = {
        formats.CHAT: (settings.UPSTREAM_CHAT_BASE_URL, settings.UPSTREAM_CHAT_API_KEY),
        formats.MESSAGES: (settings.UPSTREAM_MESSAGES_BASE_URL, settings.UPSTREAM_MESSAGES_API_KEY),
    }.get(format, ("", ""))
    if base_url:
        return base_url, key
    return settings.UPSTREAM_BASE_URL, settings.UPSTREAM_API_KEY


def uses_simulator():
    return built_in_upstream()


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
    """Record `stream` (and its stall retries) at the upstream of its format (`upstream`: its
    own URL and key, never another's). Returns (last attempt's stream, outcome)."""
    configured, key = upstream(stream.format)
    # The built-in simulator paces a run at its time_scale (the playground's speed): its
    # stall scenario's silence scales, and the stall threshold with it.
    stall_s = None
    if base_url is None and not configured and uses_simulator():
        metadata = stream.request_body.get("metadata")
        stall_s = scenarios.stall_threshold_s(conf.get().stall_timeout_s, metadata)
    if base_url is None:
        base_url = configured or await sync_to_async(upstream_base_url)()
        api_key = key if api_key is None else api_key
    api_key = settings.UPSTREAM_API_KEY if api_key is None else api_key
    client = client or get_client()
    url = base_url.rstrip("/") + formats.PATHS[stream.format]
    writer = get_writer()
    current = stream
    stall_attempts = conf.get().stall_max_attempts
    while True:
        outcome = None
        for connect_try in range(conf.get().connect_max_attempts):
            if connect_try:
                telemetry.retried("connect")
                await asyncio.sleep(conf.get().connect_backoff_s * 2 ** (connect_try - 1))
            rec = Recording(
                current.pk,
                current.project_id,
                pinned_model=current.requested_model != "auto",
                format=current.format,
            )
            rec.token_id = current.token_id  # (started with a token: its spend counts it)
            rec.connect_retry_follows = connect_try + 1 < conf.get().connect_max_attempts
            outcome = await record_attempt(
                rec, client, url, current.request_body, api_key, writer=writer, stall_s=stall_s
            )
            if not outcome.retryable:
                break
            log.info("stream %s: %s; retrying", current.pk, outcome.error_message)
        if outcome.status == Stream.Status.STALLED and current.attempt < stall_attempts:
            stalled, current = current, await sync_to_async(rows.next_attempt)(current)
            log.info("stream %s stalled; retrying as stream %s", stalled.pk, current.pk)
            telemetry.retried("stall")
            continue
        return current, outcome


_tasks = {}
WORKERS_GROUP = "streamscope.workers"


def start(stream):
    """Run `stream` as a task on the running loop; it outlives the request that started it.

    When streams run in workers and this process has not claimed the row, wake the workers
    instead: the row waits in the database, so a worker that misses the wake-up still finds it
    when it polls (and a row a worker claimed meanwhile is not recorded twice)."""
    if conf.in_workers() and stream.runner != RUNNER_ID:
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


class Proxied:
    """A forwarded request being recorded here (`start_proxied`): its `task`, which ends with
    the attempt's `Outcome`, and `cancel(code)`, which says why it was stopped."""

    def __init__(self, task, rec):
        self.task = task
        self._rec = rec

    def cancel(self, code):
        self._rec.cancel_code = code
        self.task.cancel()

    def ended_upstream(self):
        """Whether the stream's terminal event has come (its end is being recorded)."""
        return "terminal" in self._rec.milestones


def start_proxied(
    open_row, body, url, forwarded: Forwarded, *, project_id=None, token_id=None, format=None
):
    """Record a request the proxy forwards (streams/serve/proxy.py), here, whatever
    STREAMSCOPE_RUNNER says: it goes upstream at once, as its client sent it, while
    `open_row()` (a coroutine function) creates its row; once that exists the task runs as
    that stream's (a cancel from a page or the API reaches it, the heartbeat keeps it) and
    the live list hears of it. Returns a `Proxied`.

    The row beside the request, not before it: creating it first on the ORM's thread held
    the GIL while many requests were on their way, and every client waited for it."""
    model = body.get("model")
    rec = Recording(
        None,
        project_id,
        pinned_model=isinstance(model, str) and model != "auto",
        format=format or formats.RESPONSES,
    )
    rec.proxied = True
    rec.token_id = token_id
    # Its own context (see `start`): with `drain` it outlives the request that started it.
    task = asyncio.get_running_loop().create_task(
        _run_proxied(open_row, rec, body, url, forwarded), context=contextvars.Context()
    )
    return Proxied(task, rec)


async def _run_proxied(open_row, rec, body, url, forwarded):
    rec.row_created = asyncio.ensure_future(_opened(open_row, rec, asyncio.current_task()))
    return await record_attempt(
        rec, get_client(), url, body, None, writer=get_writer(), forwarded=forwarded
    )


async def _opened(open_row, rec, task):
    stream = await open_row()
    rec.stream_id, rec.project_id = stream.pk, stream.project_id
    task.set_name(f"stream-{stream.pk}")
    adopt(stream.pk, task)
    await relay.publish_created(stream)


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
    if conf.in_workers():
        _spawn(_cancel_elsewhere(stream_id))
        return True
    return False


def running_here():
    return set(_tasks)


async def _cancel_elsewhere(stream_id):
    if not await sync_to_async(_cancel_unclaimed)(stream_id):
        await sync_to_async(_cancel_if_abandoned)(stream_id)
    await _tell_workers({"type": "worker.cancel", "stream": stream_id})


def _cancel_unclaimed(stream_id):
    return rows.end_from_stored(
        stream_id,
        Stream.Status.CANCELLED,
        error_message="cancelled before a worker started it",
        where={"status": Stream.Status.PENDING, "runner": ""},
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


class _Complaints:
    """A periodic job's failures, logged once per kind (exception type) until it works again:
    a database outage is one line per kind, not a traceback every beat."""

    def __init__(self, job):
        self.job = job
        self.kinds = set()

    def failed(self, exc):
        kind = type(exc).__name__
        if kind not in self.kinds:
            self.kinds.add(kind)
            log.warning("%s failed (%s: %s); retrying, logged once", self.job, kind, exc)

    def recovered(self):
        if self.kinds:
            log.info("%s works again", self.job)
            self.kinds.clear()


_heartbeat_tasks = {}
_heartbeat_complaints = _Complaints("heartbeat")
_search_complaints = _Complaints("search maintenance")


def _ensure_heartbeat():
    loop = asyncio.get_running_loop()
    task = _heartbeat_tasks.get(loop)
    if task is None or task.done():
        # Its own context, not the request's that started the first stream (see `start`):
        # with the request's, every beat's ORM call failed once the response had been sent,
        # and a quiet stream looked dead to other processes' sweeps.
        _heartbeat_tasks[loop] = loop.create_task(
            _heartbeat(), name="streamscope-heartbeat", context=contextvars.Context()
        )


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
        except Exception as exc:
            _heartbeat_complaints.failed(exc)
        else:
            _heartbeat_complaints.recovered()


_sweepers = {}


def sweep_periodically(on_swept=None):
    """Sweep orphans now and then every SWEEP_INTERVAL_S, on the running loop, for as long as
    it runs: a long-lived process's job (Daphne's, a worker's), so a row left by a process that
    died ends `interrupted` without waiting for some process's next start. `on_swept(n)` is
    called after a sweep that found some. The registered background jobs (streams/run/
    periodic.py) run beside it for as long. Returns the sweeper task (one per loop)."""
    loop = asyncio.get_running_loop()
    task = _sweepers.get(loop)
    if task is None or task.done():
        task = _sweepers[loop] = loop.create_task(
            _sweep_forever(on_swept), name="streamscope-sweeper", context=contextvars.Context()
        )
    return task


def sweep_when_served():
    """Start `sweep_periodically` once Daphne's reactor runs its loop. Called by the two
    commands that serve (`manage.py serve`, `python -m dashboard.server`) before they hand the
    process to Daphne: Daphne speaks no ASGI lifespan, so its reactor's start is the one moment
    every server process has, and nothing else (tests, `record`, `migrate`) ever runs it."""
    from twisted.internet import reactor  # Daphne's asyncio reactor, installed by daphne.server

    # callLater runs on the asyncio loop once it runs (callWhenRunning would run before).
    reactor.callLater(0, sweep_periodically)


def _sweep_now():
    close_old_connections()  # a long-lived thread: replace a connection the database dropped
    # A retry waits unclaimed for a worker: without workers it would wait (and hold one of
    # its user's slots) for ever.
    swept = sweep_orphans(retry=conf.get().retry_interrupted and conf.in_workers())
    # Retention rides on the same sweep: it does nothing until it is due (at most once an
    # hour per process), then deletes in small batches of one short transaction each.
    retention.prune_if_due()
    # So does the search index's text: rows a writer left underived, and those that may hold a
    # secret learned since they were indexed, derived again (a bounded batch per sweep); its
    # failure is its own (the orphans above were swept all the same)
    try:
        search.maintain()
    except Exception as exc:
        _search_complaints.failed(exc)
    else:
        _search_complaints.recovered()
    return swept


async def _sweep_forever(on_swept):
    complaints = _Complaints("orphan sweep")
    jobs = periodic.start()  # the registered background jobs live as long as the sweeper
    try:
        await _sweep_loop(on_swept, complaints)
    finally:
        jobs.cancel()


async def _sweep_loop(on_swept, complaints):
    while True:
        try:
            swept = await sync_to_async(_sweep_now)()
        except Exception as exc:
            complaints.failed(exc)
        else:
            complaints.recovered()
            if swept:
                log.warning("marked %d stream(s) of dead processes interrupted", swept)
                if on_swept is not None:
                    on_swept(swept)
        await asyncio.sleep(conf.get().sweep_interval_s)


def _process_gone(runner):
    """`runner` (a RUNNER_ID) names a process of this host that no longer exists, or an
    earlier run of this very pid (a container restarted with the same pid)."""
    parts = runner.split(":")
    if len(parts) == 3 and parts[0] == socket.gethostname() and parts[1].isdigit():
        pid = int(parts[1])
        return not lifecycle.pid_alive(pid) or (pid == os.getpid() and runner != RUNNER_ID)
    return False


def _end_abandoned(pk, runner, status, message, now):
    """End an active row nothing records any more, with what is stored of it: its output,
    tokens, bytes and findings rebuilt from its stored events (`rows.end_from_stored`);
    conditional on the runner seen, so a row claimed again meanwhile is left alone. Returns
    whether it was ended."""
    return rows.end_from_stored(
        pk,
        status,
        error_code="interrupted" if status == Stream.Status.INTERRUPTED else "",
        error_message=message,
        where={"runner": runner, "status__in": Stream.ACTIVE_STATUSES},
        now=now,
    )


def sweep_orphans(retry=None):
    """Mark streams left `pending`/`streaming` by a dead process as `interrupted`, each with
    the output, tokens, bytes and findings of what was stored of it; returns how many. With
    `retry` (default: the RETRY_INTERRUPTED setting) each gets a new attempt, linked to the
    first, that waits unclaimed for a worker.

    A stream is orphaned when its runner is a process of this host that no longer exists (or
    an earlier run of this very pid), or when nobody has touched it for HEARTBEAT_STALE_S.
    Unclaimed rows are waiting for a worker: nobody's orphans."""
    now = dt.datetime.now(dt.UTC)
    stale = now - dt.timedelta(seconds=conf.get().heartbeat_stale_s)
    active = Stream.objects.filter(status__in=Stream.ACTIVE_STATUSES).exclude(runner="")
    dead = Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True)
    for runner in active.exclude(runner=RUNNER_ID).values_list("runner", flat=True).distinct():
        if _process_gone(runner):
            dead |= Q(runner=runner)
    orphans = list(active.filter(dead).exclude(runner=RUNNER_ID).values_list("pk", "runner"))
    swept = [
        pk
        for pk, runner in orphans
        if _end_abandoned(
            pk,
            runner,
            Stream.Status.INTERRUPTED,
            "the process recording this stream stopped before it ended",
            now,
        )
    ]
    if retry is None:
        retry = conf.get().retry_interrupted
    if retry:
        for stream in Stream.objects.filter(pk__in=swept).select_related("user", "first_attempt"):
            if stream.attempt < conf.get().stall_max_attempts:
                rows.next_attempt(stream, claimed=False)
    return len(swept)


def cancel_unfinished_here(message):
    """End this process's rows that did not end (they carry its RUNNER_ID, stall retries too)
    `cancelled`, with what is stored of them: for a command stopped before its recordings could
    end them; returns how many."""
    where = {"runner": RUNNER_ID, "status__in": Stream.ACTIVE_STATUSES}
    mine = list(Stream.objects.filter(**where).values_list("pk", flat=True))
    now = dt.datetime.now(dt.UTC)
    return sum(
        rows.end_from_stored(
            pk, Stream.Status.CANCELLED, error_message=message, where=where, now=now
        )
        for pk in mine
    )


def _abandoned(stream):
    """Nothing records active `stream` (a row just read) any more: it waits for a worker, or
    this process claimed it but runs no task for it, or its process is gone or silent for
    HEARTBEAT_STALE_S (as `sweep_orphans` decides)."""
    runner = stream.runner
    if runner == RUNNER_ID:
        return stream.pk not in _tasks and stream.first_attempt_id not in _tasks
    if runner == "":
        return stream.status == Stream.Status.PENDING
    stale = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=conf.get().heartbeat_stale_s)
    return _process_gone(runner) or stream.heartbeat_at is None or stream.heartbeat_at < stale


def cancel_orphan(stream):
    """Cancel `stream` (a row just read) in the database when nothing records it any more
    (see `_abandoned`), without waiting for the next sweep. True when it will be cancelled;
    False when a live process elsewhere may still be recording it.

    Without this, cancelling a row of a process that died answered 409 until a sweep came, and
    the row held one of its user's slots meanwhile."""
    if not stream.is_active or not _abandoned(stream):
        return False
    _spawn(sync_to_async(_cancel_abandoned)(stream.pk, stream.runner))
    return True


def _cancel_abandoned(pk, runner):
    return _end_abandoned(
        pk,
        runner,
        Stream.Status.CANCELLED,
        "cancelled; nothing was recording it any more (its process had stopped)",
        dt.datetime.now(dt.UTC),
    )


def _cancel_if_abandoned(stream_id):
    """Worker mode: a cancel no worker answers, because the worker that ran it died."""
    stream = Stream.objects.filter(pk=stream_id, status__in=Stream.ACTIVE_STATUSES).first()
    if stream is not None and stream.runner and _abandoned(stream):
        return _cancel_abandoned(stream.pk, stream.runner)
    return 0


def adopt(stream_id, task):
    """Count a task started elsewhere (the recording proxy's) as running `stream_id` in this
    process: it gets the heartbeat, and a cancel from a page or the API reaches it."""
    _tasks[stream_id] = task
    task.add_done_callback(lambda t: _done(stream_id, t))
    _ensure_heartbeat()
