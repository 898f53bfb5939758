"""The one write path, per stream: receipt times, checks, the attempt's outcome and its end.

```
upstream (httpx) ─► reader (per stream, here) ─► writer (streams/ingest/writer.py) ─► DB ─► publish
                    stamps t on receipt, checks     batches, commits, then publishes
```
- `record_attempt` runs one attempt: the request (started here, or `Forwarded` as the recording
  proxy's client sent it, its response written to an output `Port` first), the events as they
  arrive (`Recording.ingest`: numbered, checked, stamped, queued to the writer), the stall
  watch, and the outcome: each way an attempt can fail is one entry of `_FAILURES`, mapped to
  its status by `_failure_outcome`.
- The fields a stream ends with are `streams/store/rows.py`'s (`rows.finished`), and every way
  a stream ends goes through `_finish`, which tells the instruments once
  (`streams/observe/ended.py`).
"""

import asyncio
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from django.db.utils import InterfaceError, OperationalError

from streams.core import capture, conf, figures, formats, lifecycle, warmup
from streams.core.checks import CREATED, OUTPUT, ROUTING, TERMINAL, TOOL_CALL, Checker, said
from streams.ingest.network import Phases
from streams.ingest.upstream import (
    EVENT_TOO_LARGE,
    EventReader,
    EventTooLarge,
    UpstreamError,
    check_response,
    request_headers,
)
from streams.ingest.writer import db_executor, get_writer
from streams.models import Finding, Stream
from streams.observe import ended, telemetry
from streams.shapes import event_message
from streams.store import event_row, rows
from streams.store.rows import StorageUnavailable

log = logging.getLogger(__name__)


def _us(ns):
    return ns // 1000


# ---------------------------------------------------------------------------------------------
# Per-stream state


@dataclass(eq=False)
class Recording:
    """What a reader knows about the stream it records."""

    stream_id: int
    project_id: int | None  # (whose live list hears of it: streams/live/relay.py)
    pinned_model: bool
    format: str = formats.RESPONSES  # the API its bytes speak (its checker)
    t0_ns: int = 0
    wall0: dt.datetime = None
    checker: Checker = None
    next_index: int = 0
    bytes_received: int = 0
    error_findings: int = 0
    warning_findings: int = 0
    findings: int = 0
    output_times: list = field(default_factory=list)  # first and last output delta, ns
    milestones: dict = field(default_factory=dict)
    status: str = Stream.Status.PENDING
    urgent: bool = False  # the writer should commit what is queued now
    storage_error: str = ""  # set by the writer when it gave up on a batch of this stream
    # "storage_unavailable" (the database did not answer) or "storage_refused" (it refused
    # this stream's rows: a data error), and the cause, for the final message
    storage_code: str = ""
    storage_cause: str = ""
    lost_events: int = 0
    count_due_s: float = 0.0  # loop time when event_count is next written (Writer._commit)
    inline_max: int | None = None  # RELAY_INLINE_MAX_BYTES, read once per attempt
    body_open: bool = False  # an event stream was being read (the checker has a say)
    # Proxied streams: rows with PROXIED_ROW_COLUMNS, and (µs the proxy held a chunk before the
    # client's socket had it, events).
    proxied: bool = False
    proxy_delays: list = field(default_factory=list)
    # the token a proxied stream came through: its cost counts to it (streams/store/spend.py)
    token_id: int | None = None
    # Why a cancel came, when the canceller knows (the proxy: "client_disconnected").
    cancel_code: str = ""
    # The request's `model` and `stream` (telemetry's labels and span attributes).
    request_model: str = ""
    request_stream: bool = True
    request_body: dict | None = None  # (for the usage estimate when the upstream sends none)
    answer: tuple | None = None  # a `stream: false` answer's (usage, text, model): its usage
    # (set by the runner) a retryable outcome of this attempt is retried on the same row: its
    # end is not the stream's end (telemetry counts it once, at the last attempt)
    connect_retry_follows: bool = False
    # Events whose data was not UTF-8: [first index, byte offset in its data, the bad bytes,
    # how many] (one invalid_utf8 finding at the end; the bytes are kept in Event.raw).
    invalid_utf8: list | None = None
    # Filled by the reader, drained by the writer at the next commit.
    pending_fields: dict = field(default_factory=dict)
    pending_findings: list = field(default_factory=list)
    # Set while the stream's row is still being created (a forwarded request goes upstream
    # meanwhile: streams/run/runner.py, `start_proxied`); done once `stream_id` names it.
    row_created: asyncio.Future | None = None

    async def row_ready(self):
        """Once the stream's row exists: nothing is written, and the head is not forwarded,
        before then (the head says the stream's id)."""
        if self.row_created is not None:
            await asyncio.shield(self.row_created)

    def start(self, t0_ns, stall_s):
        self.t0_ns = t0_ns
        self.inline_max = conf.get().relay_inline_max_bytes
        self.wall0 = dt.datetime.now(dt.UTC)
        stall_us = int(stall_s * 1_000_000)
        self.checker = formats.checker(
            self.format, pinned_model=self.pinned_model, stall_threshold_us=stall_us
        )

    def restart_clock(self):
        """Start the attempt clock again, now that the request really starts: our own set-up
        before it (committing the `streaming` status behind other streams' batches) is not the
        upstream's time, and every milestone counts from here."""
        self.t0_ns = time.monotonic_ns()
        self.wall0 = dt.datetime.now(dt.UTC)
        self.pending_fields["started_at"] = self.wall0

    def mark(self, name, t_ns):
        """Set a milestone once; returns True when it was new."""
        if name in self.milestones or t_ns is None:
            return False
        self.milestones[name] = t_ns
        self.pending_fields[f"{name}_us"] = _us(t_ns - self.t0_ns)
        return True

    def add_findings(self, violations):
        for v in violations:
            self.findings += 1
            if v.severity == "error":
                self.error_findings += 1
            elif v.severity == "warning":
                self.warning_findings += 1
            self.pending_findings.append(Finding(stream_id=self.stream_id, **v.as_dict()))
        self.pending_fields["findings_count"] = self.findings
        self.pending_fields["error_findings"] = self.error_findings
        self.pending_fields["warning_findings"] = self.warning_findings

    def ingest(self, events, sent_ns=None):
        """The events of one received chunk: number them, feed the checker, note milestones.

        Returns the writer's `(rows, payloads)`: `rows` is flat, `event_row.row` values one
        event after the other, and payloads are `event_message.message` tuples. Per event
        nothing survives that the garbage collector must keep scanning (a tuple of atoms is
        untracked at its first collection; a list per row and a tuple per queue item were
        scanned again and again while queued, and the collector took a large share of the
        pipeline's time; docs/performance.md, "Recorder"). This is the hottest code in the
        product.

        `sent_ns`: when the proxy handed the chunk to its client (None: not proxied)."""
        rows = []
        payloads = []
        add_row = rows.extend
        add_payload = payloads.append
        feed = self.checker.feed
        row, proxied_row = event_row.row, event_row.proxied_row
        message, proxied_message = event_message.message, event_message.proxied
        stream_id = self.stream_id
        wall0 = self.wall0  # the writer thread turns this into the wall-clock receipt time
        t0_ns = self.t0_ns
        inline_max = self.inline_max
        index = self.next_index
        sent_us = None if sent_ns is None else (sent_ns - t0_ns) // 1000
        proxied = self.proxied
        for sse in events:
            t_us = (sse.t_ns - t0_ns) // 1000
            data = sse.data
            result = feed(index, sse.event_name, data, t_us=t_us)
            if result.violations:
                self.add_findings(result.violations)
            if result.kind is not None:
                self._milestone(result, sse.t_ns)
            if sse.raw is not None:
                self._not_utf8(index, sse.raw)
            payload = message(index, t_us, result, data, inline_max)
            if proxied:
                add_row(proxied_row(stream_id, index, t_us, wall0, sse, result, sent_us))
                payload = proxied_message(payload, sent_us)  # the consumer needs no read for it
            else:
                add_row(row(stream_id, index, t_us, wall0, sse, result))
            add_payload(payload)
            index += 1
        self.next_index = index
        return rows, payloads

    def _not_utf8(self, index, raw):
        if self.invalid_utf8 is not None:
            self.invalid_utf8[3] += 1
            return
        where = capture.first_invalid_utf8(raw) or (0, b"")
        self.invalid_utf8 = [index, where[0], where[1], 1]

    def _milestone(self, result, t_ns):
        kind = result.kind
        checker = self.checker
        if kind == OUTPUT:
            times = self.output_times
            if result.first_output:
                times[:] = [t_ns, t_ns]
                if self.mark("first_token", t_ns) and "request_written" in self.milestones:
                    self.pending_fields["ttft_ms"] = self.ttft_ms()
            elif times:
                times[1] = t_ns
            if result.first_tool_call:  # (a Chat tool-call delta: output and a call)
                self.mark("first_tool_call", t_ns)
        elif kind == CREATED:
            if self.mark("created_event", t_ns):
                self.pending_fields["upstream_id"] = checker.upstream_id or ""
                if checker.resolved_model:
                    self.pending_fields["resolved_model"] = checker.resolved_model
        elif kind == ROUTING:
            if self.mark("routing", t_ns):
                routing = checker.routing or {}
                self.pending_fields.update(
                    resolved_model=checker.resolved_model or "",
                    routing_category=str(routing.get("category") or ""),
                    routing_source=str(routing.get("source") or ""),
                    routing_reasoning=str(routing.get("reasoning") or ""),
                )
        elif kind == TOOL_CALL:
            if result.first_tool_call:
                self.mark("first_tool_call", t_ns)
        elif kind == TERMINAL:
            self.urgent = self.mark("terminal", t_ns)

    def us(self, name):
        """A milestone as stored: µs since the attempt started (None if it did not happen)."""
        t_ns = self.milestones.get(name)
        return None if t_ns is None else _us(t_ns - self.t0_ns)

    def ttft_ms(self):
        return figures.ttft_ms(self.us("request_written"), self.us("first_token"))

    def final_fields(self, status, closed_ns, error_code="", error_message=""):
        """Everything derived when the stream ends, for its last UPDATE (`rows.finished`)."""
        self.mark("closed", closed_ns)
        first_output, last_output = self.output_times or (None, None)
        return rows.finished(
            self.checker,
            status=status,
            error_code=error_code,
            error_message=error_message,
            event_count=self.next_index,
            bytes_received=self.bytes_received,
            body_read=self.body_open,
            finished_at=dt.datetime.now(dt.UTC),
            request_written_us=self.us("request_written"),
            first_token_us=self.us("first_token"),
            closed_us=self.us("closed"),
            first_output_us=None if first_output is None else _us(first_output - self.t0_ns),
            last_output_us=None if last_output is None else _us(last_output - self.t0_ns),
            proxy_delays=self.proxy_delays,
            project=self.project_id,
            request_body=self.request_body,
            answer=self.answer,
            model=self.request_model,
            started_at=self.wall0,
        )


# ---------------------------------------------------------------------------------------------
# One attempt


class StallWatch:
    """Expires `timer` (an `asyncio.timeout`) once `last_ns` (a monotonic_ns receipt time,
    set by the reader) is `stall_s` old: the stall rule, no event for N s.

    Rescheduling the timeout at every event instead cancelled and pushed a timer per event:
    a measurable share of the server's CPU with many paced streams (docs/performance.md,
    "Recorder"). This re-arms at most once per `stall_s`, and setting `last_ns` is all an
    event costs."""

    def __init__(self, loop, timer, stall_s):
        self.loop = loop
        self.timer = timer
        self.stall_ns = int(stall_s * 1e9)
        self.last_ns = time.monotonic_ns()
        self.handle = loop.call_later(stall_s, self._check)

    def _check(self):
        now = time.monotonic_ns()
        due = self.last_ns + self.stall_ns
        if now >= due:
            self.handle = None
            self.timer.reschedule(self.loop.time())
        else:
            self.handle = self.loop.call_later((due - now) / 1e9, self._check)

    def cancel(self):
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


@dataclass
class Outcome:
    status: str
    error_code: str = ""
    error_message: str = ""
    events: int = 0
    retryable: bool = False  # a connection error before the first event


class Port(Protocol):
    """Where a forwarded request's response goes, as it comes: the recording proxy's client.
    The recorder writes to it and asks it one thing, when the client had a chunk; it never
    starts, adopts or announces anything (the runner does: streams/run/runner.py)."""

    async def start(self, response, stream_id):
        """The upstream's head (status, headers), before its body."""

    async def chunk(self, data):
        """A chunk of the body as it came, before it is parsed or recorded; returns when the
        client's socket had it (monotonic ns), None when the client did not get it."""

    async def finish(self, outcome):
        """The end, once recorded: `outcome` (an `Outcome`; None when the recording failed
        without one). Never raises."""


@dataclass(frozen=True)
class Forwarded:
    """A request forwarded as its client sent it: its bytes and headers go upstream
    unchanged, and its response goes to `port` first. `wants_json`: the request asked for
    one JSON answer (`stream` not true), which a JSON body then is."""

    content: bytes
    headers: list
    port: Port
    wants_json: bool


@dataclass(frozen=True)
class Relayed:
    """A response the recording proxy relays over a WebSocket (streams/serve/proxy_socket.py):
    its request (a `response.create` frame) went upstream at `written_ns` (monotonic; the
    attempt's clock starts there), and `frames` yields its upstream frames as
    `(ReceivedEvent, sent_ns)`, each already handed to the client (`sent_ns`: when; None if the
    client was gone), until the turn's last frame or the socket's end. `port.finish` hears
    the outcome once recorded; `receipt_clock`: which clock stamped the frames' reads."""

    written_ns: int
    frames: object  # an async iterator
    port: Port
    receipt_clock: str = "loop"


async def record_attempt(
    rec, client, url, body, api_key, writer=None, forwarded=None, stall_s=None
):
    """Run one upstream request and record it on `rec`'s stream; return its outcome.

    Never raises for upstream trouble: every failure becomes a status on the stream
    (`_failure_outcome`). Re-raises CancelledError after recording `cancelled` (with
    `rec.cancel_code`, if one was set).

    `forwarded` (the recording proxy's request, streams/serve/proxy.py): sent as it came, at
    once, while its row may still be being created (`rec.row_created`); its response's head
    and every chunk of its body go to `forwarded.port` *before* they are parsed and recorded,
    and its end once recorded. A stall is recorded (the checker's finding), not aborted: the
    proxy's client decides.

    `stall_s`: this attempt's stall threshold (default STALL_TIMEOUT_S)."""
    writer = writer or get_writer()
    stall_s = conf.get().stall_timeout_s if stall_s is None else stall_s
    port = forwarded.port if forwarded is not None else None
    phases = Phases()
    phases.activate()
    _begin_attempt(rec, url, body, stall_s)
    ended = None  # the outcome the port hears: None when the attempt reached none
    try:
        try:
            await _warmed_up(rec)
            if forwarded is None:
                outcome = await _attempt_started_here(
                    rec, client, url, body, api_key, writer, phases, stall_s
                )
            elif isinstance(forwarded, Relayed):
                outcome = await _attempt_relayed(rec, writer, forwarded)
            else:
                outcome = await _attempt_forwarded(rec, client, url, writer, forwarded, phases)
            outcome = outcome or Outcome(None)  # the checker decides, once it has seen the end
        except _FAILURES as exc:
            outcome = _failure_outcome(rec, exc, stall_s)
        except asyncio.CancelledError:
            ended = _cancelled_outcome(rec)
            await asyncio.shield(_finish(rec, writer, ended))
            raise
        await _finish(rec, writer, outcome)
        ended = outcome
    finally:
        if port is not None:
            await asyncio.shield(port.finish(ended))
    return outcome


async def _warmed_up(rec):
    """No stream of a process starts before its warm-up is over (streams/core/warmup.py):
    loaded beside running streams, it held the GIL as their first deltas arrived, and their
    receipt stamps came late (issue 42). Only a process's first streams wait (off the loop);
    their clocks start after the wait, which is not the upstream's time."""
    if not warmup.done():
        await warmup.ready()
        rec.restart_clock()


def _begin_attempt(rec, url, body, stall_s):
    """`rec` at the start of an attempt: its clock and checker, the request's model and
    `stream`, and the `streaming` status with the fields the row is written with."""
    rec.start(time.monotonic_ns(), stall_s)
    rec.request_model, rec.request_stream = str(body.get("model") or ""), body.get("stream") is True
    rec.request_body = body
    rec.status = Stream.Status.STREAMING
    rec.pending_fields.update(
        status=rec.status, started_at=rec.wall0, runner=lifecycle.RUNNER_ID, upstream_url=url
    )


async def _attempt_started_here(rec, client, url, body, api_key, writer, phases, stall_s):
    """A request of our own: its `streaming` status committed and the clock restarted first,
    `body` sent as JSON with our key (where `rec.format`'s upstream takes it), and the stall
    timer armed for the connect timeout plus the stall threshold (`_read_events` then watches
    the events)."""
    await writer.flush(rec)
    rec.restart_clock()
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as stall_timer:
        stall_timer.reschedule(loop.time() + stall_s + conf.get().connect_timeout_s)
        request = {"json": body, "headers": request_headers(api_key, rec.format)}
        return await _exchange(
            rec, client, url, request, writer, None, phases, stall_timer, stall_s
        )


async def _attempt_forwarded(rec, client, url, writer, forwarded, phases):
    """The proxy's request, as its client sent it, out at once: its row may still be being
    created (the head waits for it), and its `streaming` status goes with the first batch. No
    stall timer: the proxy's client decides."""
    request = {"content": forwarded.content, "headers": forwarded.headers}
    return await _exchange(rec, client, url, request, writer, forwarded, phases, None, None)


async def _attempt_relayed(rec, writer, relayed):
    """A response over the proxy's WebSocket: every frame one event, its data the frame's text
    verbatim, recorded after its client had it, with both times. Returns None: the checker
    decides the outcome (a socket that ends before the turn's terminal is its
    `missing_terminal`)."""
    rec.t0_ns = relayed.written_ns
    rec.mark("request_written", relayed.written_ns)
    rec.pending_fields["receipt_clock"] = relayed.receipt_clock
    await rec.row_ready()
    rec.body_open = True
    put, ingest = writer.put, rec.ingest
    async for event, sent_ns in relayed.frames:
        if rec.storage_error:
            raise StorageUnavailable(rec.storage_error)
        rec.bytes_received += len(event.data.encode())
        if sent_ns is not None:
            rec.proxy_delays.append(((sent_ns - event.t_ns) // 1000, 1))
        await put(rec, *ingest((event,), sent_ns))
        if rec.urgent:
            rec.urgent = False
            await writer.flush(rec)
    return None


async def _exchange(rec, client, url, request, writer, forwarded, phases, stall_timer, stall_s):
    """POST `request` and record the response: an event stream event by event (returns None:
    the checker decides the outcome), any other body whole (returns its outcome)."""
    trace = {"trace": phases.trace}
    async with client.stream("POST", url, extensions=trace, **request) as response:
        for name, t_ns in phases.marks.items():
            rec.mark(name, t_ns)
        if phases.receipt_clock:  # (set by the connection that wrote the request)
            rec.pending_fields["receipt_clock"] = phases.receipt_clock
        rec.pending_fields["http_status"] = response.status_code
        rec.pending_fields["content_type"] = response.headers.get("content-type", "")
        port = None
        if forwarded is not None:
            await rec.row_ready()
            port = forwarded.port
            await port.start(response, rec.stream_id)
        if response.status_code >= 400 or "text/event-stream" not in response.headers.get(
            "content-type", ""
        ):
            wants_json = forwarded is not None and forwarded.wants_json
            return await _whole_body(rec, writer, response, port, phases, wants_json)
        await _read_events(rec, writer, response, port, phases, stall_timer, stall_s)
    return None


# What an attempt turns into an outcome (`_failure_outcome`); anything else propagates.
_FAILURES = (TimeoutError, UpstreamError, httpx.HTTPError, StorageUnavailable)


def _failure_outcome(rec, exc, stall_s):
    """The outcome of an attempt that raised `exc` (one of `_FAILURES`), by the first class
    it is an instance of: timeout, upstream error, connect error, connection lost, other HTTP
    error, storage."""
    if isinstance(exc, TimeoutError):
        if rec.next_index == 0 and "headers" not in rec.milestones:
            return Outcome(Stream.Status.FAILED, "timeout", "no response from upstream")
        return Outcome(Stream.Status.STALLED, "stall", f"no event for {stall_s:g} s; aborted")
    if isinstance(exc, EventTooLarge):
        # The upstream's fault, cut short by us: what came before it is the record, and the
        # event itself one lost (through the proxy its bytes were relayed: its client had them).
        telemetry.events_lost(rec, 1)
        return Outcome(Stream.Status.TRUNCATED, exc.code, exc.message)
    if isinstance(exc, UpstreamError):
        if exc.http_status:
            rec.pending_fields["http_status"] = exc.http_status
        return Outcome(Stream.Status.FAILED, exc.code, exc.message)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Outcome(
            Stream.Status.FAILED, "connect_error", _describe(exc), retryable=rec.next_index == 0
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        if "terminal" in rec.milestones:
            return Outcome(None)
        before_events = rec.next_index == 0 and "headers" not in rec.milestones
        return Outcome(
            Stream.Status.FAILED if before_events else Stream.Status.TRUNCATED,
            "connection_error" if before_events else "connection_reset",
            _describe(exc),
            retryable=before_events,
        )
    if isinstance(exc, httpx.HTTPError):
        return Outcome(Stream.Status.FAILED, "http_error", _describe(exc))
    code = rec.storage_code or "storage_unavailable"  # StorageUnavailable
    return Outcome(Stream.Status.FAILED, code, rec.storage_error or str(exc))


def _cancelled_outcome(rec):
    """The outcome of a cancelled attempt: `interrupted` when this process is stopping and
    nobody asked for the cancel, else `cancelled` with its reason (`rec.cancel_code`)."""
    if lifecycle.stopping and not rec.cancel_code:
        # cut short by a stop of this process, not by anyone who wanted it stopped
        return Outcome(
            Stream.Status.INTERRUPTED, lifecycle.SHUTDOWN_CODE, lifecycle.SHUTDOWN_REASON
        )
    reason = CANCEL_REASONS.get(rec.cancel_code, "")
    return Outcome(Stream.Status.CANCELLED, rec.cancel_code, reason)


async def _read_events(rec, writer, response, port, phases, stall_timer, stall_s):
    """Read, parse and queue an event stream's body (forwarding each chunk first to `port`;
    without one, `stall_timer` watches the events)."""
    loop = asyncio.get_running_loop()
    rec.body_open = True
    reader = EventReader()
    ingest = rec.ingest
    put = writer.put
    watch = None
    if port is None:
        stall_timer.reschedule(None)
        watch = StallWatch(loop, stall_timer, stall_s)
    sent_ns = None
    try:
        # the proxy forwards the bytes as they came (it asks for no content encoding)
        async for chunk in response.aiter_raw() if port is not None else response.aiter_bytes():
            # the arrival of the newest bytes read (our backend stamps it in the protocol
            # callback), else now
            t_ns = phases.last_read_ns or time.monotonic_ns()
            if port is not None:
                sent_ns = await port.chunk(chunk)
            if rec.storage_error:
                raise StorageUnavailable(rec.storage_error)
            rec.bytes_received += len(chunk)
            events = reader.feed(chunk, t_ns)
            if events:
                if watch is not None:
                    watch.last_ns = t_ns
                elif sent_ns is not None:
                    rec.proxy_delays.append(((sent_ns - t_ns) // 1000, len(events)))
                await put(rec, *ingest(events, sent_ns))
                if rec.urgent:
                    # Terminal events flush at once (docs/recorder.md).
                    rec.urgent = False
                    await writer.flush(rec)
            if reader.too_large is not None:  # (the events before it are queued)
                raise reader.too_large
    finally:
        if watch is not None:
            watch.cancel()
    reader.close(time.monotonic_ns())


# The most of a body that is not an event stream kept from a stream started here (through the
# proxy the whole body is forwarded, and kept, as it comes).
WHOLE_BODY_MAX = 16 * 1024 * 1024


async def _whole_body(rec, writer, response, port, phases, wants_json):
    """A body that is not an event stream (an error, a JSON answer, anything): kept whole as
    one event, verbatim, whatever its type — what the upstream sent is the record — and
    through the proxy forwarded as it comes (so nothing the client saw is missing from the
    record; one over UPSTREAM_MAX_EVENT_BYTES ends it, EventTooLarge); then judged as the
    recorder judges it, except that a JSON response to a `stream: false` request is the
    answer it asked for. Returns the outcome."""
    chunks, size = [], 0
    t_ns = sent_ns = None
    limit = conf.get().upstream_max_event_bytes
    body_chunks = response.aiter_raw() if port is not None else response.aiter_bytes()
    async for chunk in body_chunks:
        t_ns = phases.last_read_ns or time.monotonic_ns()
        if port is not None:
            sent_ns = await port.chunk(chunk)
            if size + len(chunk) > limit:  # (one event: the client had it, it is not kept)
                rec.bytes_received += len(chunk)
                raise EventTooLarge(limit, size + len(chunk))
        elif size + len(chunk) > WHOLE_BODY_MAX:
            chunk = chunk[: WHOLE_BODY_MAX - size]
        rec.bytes_received += len(chunk)
        size += len(chunk)
        chunks.append(chunk)
        if port is None and size >= WHOLE_BODY_MAX:
            break
    body = b"".join(chunks)
    if t_ns is None:
        t_ns = time.monotonic_ns()
    text = body.decode("utf-8", errors="replace")
    type_, is_json, fields, status = _json_response_fields(response, text, wants_json, rec.format)
    rec.answer = fields.pop("answer", None)
    t_us = _us(t_ns - rec.t0_ns)
    s_us = None if sent_ns is None else _us(sent_ns - rec.t0_ns)
    rec.mark("terminal", t_ns)
    rec.pending_fields.update(fields)
    if s_us is not None:
        rec.proxy_delays.append((s_us - t_us, 1))
    raw = None if text.encode() == body else body
    received = event_row.Received("", "", text, raw)
    checked = event_row.Checked(type_, None, None, None, is_json)
    payload = event_message.message(0, t_us, checked, text)
    if port is not None:
        values = event_row.proxied_row(rec.stream_id, 0, t_us, rec.wall0, received, checked, s_us)
        payload = event_message.proxied(payload, s_us)
    else:
        values = event_row.row(rec.stream_id, 0, t_us, rec.wall0, received, checked)
    rec.next_index = 1
    await writer.put(rec, values, [payload])
    if status is not None:
        return Outcome(status)
    try:
        check_response(response, text)
    except UpstreamError as exc:
        return Outcome(Stream.Status.FAILED, exc.code, exc.message)
    return Outcome(Stream.Status.FAILED, "wrong_content_type", "not an event stream")


_JSON_STATUSES = {
    "completed": Stream.Status.COMPLETED,
    "incomplete": Stream.Status.INCOMPLETE,
    "failed": Stream.Status.FAILED,
    "cancelled": Stream.Status.CANCELLED,
}


def _json_response_fields(response, text, wants_json, format=formats.RESPONSES):
    """(event type, is_json, fields, status) of a body that is not an event stream: status
    None unless it is the 2xx JSON answer a `stream: false` request asked for (a `response`
    object; in another format, that format's: `formats.json_answer`)."""
    content_type = response.headers.get("content-type", "").partition(";")[0].strip()
    if response.status_code >= 400 or content_type != "application/json":
        return "response.body", False, {}, None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return "response.body", False, {}, None
    if format != formats.RESPONSES:
        fields = formats.json_answer(format, obj)
        if fields is None or not wants_json:
            return "response.body", True, {}, None
        return "response", True, fields, fields.pop("status")
    if not isinstance(obj, dict) or obj.get("object") != "response":
        return "response.body", True, {}, None
    if not wants_json:
        return "response", True, {}, None  # a stream was asked for: wrong_content_type
    texts = []
    for item in obj.get("output") or ():
        for part in (item.get("content") or ()) if isinstance(item, dict) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    fields = dict(
        upstream_id=str(obj.get("id") or ""),
        resolved_model=str(obj.get("model") or ""),
        final_text="".join(texts),
        output_text="".join(texts),
        answer=(obj.get("usage"), "".join(texts), str(obj.get("model") or "")),  # its usage
    )
    return "response", True, fields, _JSON_STATUSES.get(obj.get("status"), Stream.Status.COMPLETED)


CANCEL_REASONS = {
    "client_disconnected": "the proxied client closed its connection; the upstream request "
    "was cancelled",
    "client_too_slow": "the proxied client read nothing for PROXY_SLOW_CLIENT_TIMEOUT_S and "
    "was let go",
}


def _describe(exc):
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


async def _finish(rec, writer, outcome):
    closed_ns = time.monotonic_ns()
    await rec.row_ready()
    if rec.body_open:
        # A connection we closed ourselves (cancel, stall, an event over the bound) did not
        # close without its terminal event: no missing_terminal.
        closed_by_upstream = (
            outcome.status not in (Stream.Status.CANCELLED, Stream.Status.STALLED)
            and outcome.error_code != EVENT_TOO_LARGE
        )
        # With the close time, the checker also judges the silence before it (a stall).
        final = rec.checker.close(
            connection_closed=closed_by_upstream, t_us=_us(closed_ns - rec.t0_ns)
        )
        if final:
            rec.add_findings(final)
    if rec.invalid_utf8 is not None:
        index, offset, bad, count = rec.invalid_utf8
        where = said("in_event_data", index=index)
        rec.add_findings(rec.checker.report_invalid_utf8(index, offset, bad, count, where=where))
    if outcome.status is None:
        outcome.status = rows.status_from_checker(rec.checker)
    rec.status = outcome.status
    fields = rec.final_fields(outcome.status, closed_ns, outcome.error_code, outcome.error_message)
    outcome.events = rec.next_index
    if not rec.storage_error:
        rec.pending_fields.update(fields)
        try:
            await writer.flush(rec)
            ended.stream_ended(rec, fields, outcome)  # stored: figures agree with rows
            return
        except StorageUnavailable:
            pass
    # Some of this stream's events (or its row) could not be stored: the database was
    # unavailable, or refused them. Its final status must still land (or the row would claim
    # to be streaming), saying exactly how many are missing, and why.
    rec.pending_fields = {}
    rec.pending_findings = []
    fields.update(status=Stream.Status.FAILED, error_code=rec.storage_code or "storage_unavailable")
    ended.stream_ended(rec, fields, outcome)
    cause = rec.storage_cause or "database unavailable"
    _write_later(rec.stream_id, fields, received=rec.next_index, cause=cause)


_later = set()


def _write_later(stream_id, fields, received, cause, interval_s=2.0, for_s=600.0):
    async def retry():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + for_s
        while loop.time() < deadline:
            try:
                await loop.run_in_executor(
                    db_executor(), rows.end_after_loss, stream_id, fields, received, cause
                )
                log.warning("stream %s: final status written after a storage outage", stream_id)
                return
            except (OperationalError, InterfaceError):
                await asyncio.sleep(interval_s)
        log.error("stream %s: final status never written (database unavailable)", stream_id)

    task = asyncio.get_running_loop().create_task(retry())
    _later.add(task)
    task.add_done_callback(_later.discard)
