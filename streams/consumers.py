"""WebSocket consumers: subscribe, catch up from the database, dedupe, forward (DESIGN.md §2).

Endpoints
=========

``/ws/streams/<id>/?after=<index>&format=html|json``
    One stream's events. The consumer joins the stream's group *first*, then sends every stored
    event with an arrival index greater than ``after`` (default -1: all of them) from the
    database, then the live batches, dropping any event it already sent. A reconnect with the
    last index seen therefore gets exactly the missing events. When the stream reaches a
    terminal status (anything but ``pending``/``streaming``) the consumer re-reads the database
    for events it has not sent, sends them with the final status and closes with 1000.

``/ws/streams/?after=<stream id>&format=html|json``
    The live list: streams created, status changes and milestones (TTFT, resolved model, …);
    counters (event_count, output_tokens) at most twice a second per stream. A user gets their
    own streams, staff get all. On connect it first sends the current state of the user's active
    streams and of the streams newer than ``after`` (the newest id the page already shows).

Who may connect: a logged-in session (cookie) or ``Authorization: Bearer ss_…`` (an
``ApiToken``), and an ``Origin`` header matching ALLOWED_HOSTS (scripts must send one too, e.g.
``Origin: http://127.0.0.1:8000``). Anonymous users, foreign origins, streams of other users
(unless staff), unknown streams and malformed query strings are refused at the handshake: the
server answers HTTP 403 and no WebSocket is opened (browsers report close code 1006).

JSON frames (``format=json``), one text message per frame
---------------------------------------------------------
Stream::

    {"events": [{"index": 0, "type": "response.created", "sequence_number": 0,
                 "t_us": 12345, "data": "<the SSE data, verbatim, as a string>"}, …],
     "status": "streaming",          # present when the status is new to this client
     "stream": {"ttft_ms": 251.3, "resolved_model": "…", "event_count": 42, …},  # changed fields
     "terminal": true}               # only on the last frame, just before close 1000

A stream deleted while watched ends with ``{"events": [], "status": "deleted", "terminal":
true}``. The first frame always carries ``status`` and ``stream`` (all public fields: status,
upstream_id, resolved_model, routing_*, http_status, error_code, error_message, the
``*_us`` milestones, ttft_ms, duration_ms, tokens_per_s, event_count, output_tokens,
findings_count, error_findings) and the first page of stored events (possibly none). Events
are always in arrival order, each index exactly once per connection. ``t_us`` is the receipt
time in µs since the stream started; ``data`` is the verbatim SSE data (parse it yourself: it
may be invalid JSON, which is one of the things Streamscope records). Events are batched: one
frame per committed batch; batches that queued up meanwhile (a slow client, a busy server) go
out together; at most 2000 events per frame.

List::

    {"streams": [{"id": 7, "status": "streaming", "ttft_ms": 250.9, …}, …]}

Each item carries the stream's id and the fields that changed (the first frame: a snapshot of
status, source, models, scenario, prompt (200 chars), attempt, created_at, ttft_ms,
duration_ms, event_count, findings_count, error_findings, error_code). Merge by ``id``.

HTML frames (``format=html``, the default; for htmx's ws extension)
-------------------------------------------------------------------
Stream: out-of-band fragments, every model-controlled string escaped::

    <tbody hx-swap-oob="beforeend:#events"><tr id="ev-<stream>-<index>" data-index="…">
        <td>index</td><td>t (ms)</td><td>type</td><td>sequence_number</td>
        <td class="data"><code>data (first 2000 characters)</code></td></tr>…</tbody>
    <span hx-swap-oob="beforeend:#output">text of the output_text deltas</span>
    <span id="stream-status" hx-swap-oob="true" class="status status-<s>" data-status="<s>"
          [data-terminal="true"]>s</span>                          (when the status changes)
    <span id="stream-<field>" hx-swap-oob="true" data-value="raw">formatted</span>  (changed
          fields among HTML_FIELDS; pages include the ids they want to show)

List: ``<tbody hx-swap-oob="afterbegin:#streams">`` with the rows of streams newer than
``after`` that this connection has not shown yet, and ``<tr id="stream-row-<id>"
hx-swap-oob="true">`` replacing rows already on the page (``templates/streams/stream_row.html``,
which the list page can include for its first render).

Close codes
-----------
- 1000 the stream ended; the last frame carried the terminal status. Do not reconnect.
- 1011 server error; reconnect with ``after=<last index seen>``.
- 4008 too slow: the client did not read fast enough and its outbox overflowed (or its send
  buffer stayed full for RELAY_SLOW_CLIENT_TIMEOUT_S). Nothing is lost: reconnect with
  ``after=<last index seen>`` and the rest comes from the database.
- 1001/1006 server restart or network trouble: reconnect with ``after=``.

How completeness is kept without trusting the channel layer
------------------------------------------------------------
Messages come through the channel layer (Redis), or, with the in-memory layer, through
``relay.LocalFanout`` (the same messages by direct call: the in-memory layer is process-local
anyway, and its per-message cost was most of the relay's). Channel layers drop messages
silently when a consumer's queue is full. So the consumer never
assumes it got every message: a batch whose first new index is not ``last_sent + 1`` makes it
read the hole from the database first; a terminal status makes it read everything after
``last_sent`` before it sends the status; an idle connection (no message for
RELAY_IDLE_CHECK_S) polls the database once in case the last messages were lost. Events whose
data was too large to inline are read from the database too.

A slow client never slows the recorder or other viewers: layer messages are taken off the
channel by Channels' receive loop and only appended to this connection's outbox (no database,
no rendering, no Channels per-message connection cleanup); a separate sender task drains the
outbox into frames, coalescing everything queued. Daphne never blocks a send (Twisted buffers
without limit), so the sender looks at the transport's buffered bytes and stops sending above
RELAY_SEND_HIGH_WATER_BYTES: batches then queue and coalesce, and when more than
RELAY_OUTBOX_MAX_EVENTS events are waiting while the buffer stays above it the connection is
closed with 4008 (a long outbox with a draining buffer is the server's own lag, not the
client's).
"""

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs

import orjson
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from . import relay
from .auth import bearer_token, may_see, streams_for, user_for_token
from .models import Event, Stream
from .recorder import PUBLIC_FIELDS

log = logging.getLogger(__name__)

PAGE_EVENTS = 2000  # events per database page and per frame
# Daphne refuses to send a WebSocket message over 1 MiB (websocket_max_message_size; the
# consumer then failed and the viewer saw nothing more). Frames are cut at FRAME_MAX_BYTES of
# event data, halved further while their text is over MESSAGE_MAX_BYTES, and an event too big
# for a frame of its own goes with `"data": null, "data_bytes": n` (its page and the exports
# have it).
FRAME_MAX_BYTES = 512 * 1024
MESSAGE_MAX_BYTES = 1024 * 1024 - 4096
CLOSE_NORMAL = 1000
CLOSE_ERROR = 1011
CLOSE_TOO_SLOW = 4008
ACTIVE = frozenset(Stream.ACTIVE_STATUSES)
EVENT_COLUMNS = ("index", "type", "sequence_number", "t_us", "data")
STREAM_FIELDS = ("status", *sorted(PUBLIC_FIELDS - {"status"}))
LIST_FIELDS = (
    "status",
    "source",
    "requested_model",
    "resolved_model",
    "scenario",
    "prompt",
    "attempt",
    "created_at",
    "ttft_ms",
    "duration_ms",
    "event_count",
    "findings_count",
    "error_findings",
    "error_code",
)
LIST_SNAPSHOT_MAX = 200
# Stream fields rendered as `<span id="stream-<field>">` in HTML frames.
HTML_FIELDS = (
    "upstream_id",
    "resolved_model",
    "routing_category",
    "http_status",
    "error_code",
    "error_message",
    "ttft_ms",
    "duration_ms",
    "tokens_per_s",
    "event_count",
    "output_tokens",
    "findings_count",
    "error_findings",
)
HTML_DATA_MAX = 2000

# Counters for tests and the benchmark: holes filled from the database, slow clients closed.
stats = Counter()


# Knobs (settings.STREAMSCOPE) and their defaults.
KNOBS = {
    # events waiting for one slow connection before it is closed with 4008
    "RELAY_OUTBOX_MAX_EVENTS": 20_000,
    # bytes buffered by the server for a connection above which we stop sending to it
    "RELAY_SEND_HIGH_WATER_BYTES": 256 * 1024,
    # how long a connection's buffer may stay above that before it is closed with 4008
    "RELAY_SLOW_CLIENT_TIMEOUT_S": 30.0,
    # a connection without messages for this long checks the database once
    "RELAY_IDLE_CHECK_S": 5.0,
}


def knob(name):
    return relay.conf(name, KNOBS[name])


# ---------------------------------------------------------------------------------------------
# Database reads: off the event loop, on the relay's own threads (not the one thread Django's
# sync_to_async shares with every view), each cleaning up its connection like Channels does.

_read_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="streamscope-relay")


def db_read(func):
    return database_sync_to_async(func, thread_sensitive=False, executor=_read_executor)


def close_db_connections():
    """Close the relay threads' database connections (PostgreSQL keeps them open; a test
    database cannot be dropped while they are). One task per thread: a barrier holds each
    thread until all of them have closed theirs."""
    n = _read_executor._max_workers
    barrier = threading.Barrier(n)

    def close():
        connections.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=5)

    for future in [_read_executor.submit(close) for _ in range(n)]:
        future.result(timeout=10)


def _visible_stream(user, stream_id):
    return streams_for(user).filter(pk=stream_id).exists()


def _stream_fields(stream_id):
    return Stream.objects.filter(pk=stream_id).values(*STREAM_FIELDS).first()


def _events_between(stream_id, after, before=None, limit=PAGE_EVENTS):
    """Stored events with after < index (< before), in index order, as payload tuples."""
    qs = Event.objects.filter(stream_id=stream_id, index__gt=after)
    if before is not None:
        qs = qs.filter(index__lt=before)
    return list(qs.order_by("index").values_list(*EVENT_COLUMNS)[:limit])


def _event_data(stream_id, indexes):
    return dict(
        Event.objects.filter(stream_id=stream_id, index__in=indexes).values_list("index", "data")
    )


def _list_snapshot(user, after):
    visible = streams_for(user)
    active = visible.filter(status__in=Stream.ACTIVE_STATUSES)
    newer = visible.filter(pk__gt=after) if after is not None else visible.none()
    rows = (active | newer).order_by("-pk").values("id", *LIST_FIELDS)[:LIST_SNAPSHOT_MAX]
    out = []
    for row in rows:
        row["prompt"] = row["prompt"][:200]
        out.append(row)
    return out


def _list_rows(user, ids):
    return list(streams_for(user).filter(pk__in=ids).order_by("-pk"))


# ---------------------------------------------------------------------------------------------
# Frames


_django_default = DjangoJSONEncoder().default


def _dumps(obj):
    """Compact JSON, datetimes as Django writes them. orjson first (frames are rendered for
    every batch of every viewer); json for anything it refuses."""
    try:
        return orjson.dumps(
            obj, default=_django_default, option=orjson.OPT_PASSTHROUGH_DATETIME
        ).decode()
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, cls=DjangoJSONEncoder)


def _json_event(e, omit_data=False):
    data = e[4]
    if omit_data and data is not None:
        return {"index": e[0], "type": e[1], "sequence_number": e[2], "t_us": e[3],
                "data": None, "data_bytes": len(data.encode())}  # fmt: skip
    return {"index": e[0], "type": e[1], "sequence_number": e[2], "t_us": e[3], "data": data}


def frame_chunks(events):
    """`events` cut into frames of at most PAGE_EVENTS events and about FRAME_MAX_BYTES of
    data (an oversized event counts as nothing: it goes without its data)."""
    chunks, chunk, size = [], [], 0
    for e in events:
        n = len(e[4]) + 64 if e[4] is not None else 64
        if chunk and (len(chunk) >= PAGE_EVENTS or size + n > FRAME_MAX_BYTES):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(e)
        size += n
    if chunk:
        chunks.append(chunk)
    return chunks


def json_stream_frame(events, status=None, stream=None, terminal=False, omit_data=False):
    frame = {"events": [_json_event(e, omit_data) for e in events]}
    if status is not None:
        frame["status"] = status
    if stream:
        frame["stream"] = stream
    if terminal:
        frame["terminal"] = True
    return _dumps(frame)


def _ms(t_us):
    return "" if t_us is None else f"{t_us / 1000:.3f}"


def _short(data):
    if data is None:
        return ""
    return data if len(data) <= HTML_DATA_MAX else data[:HTML_DATA_MAX] + "…"


def _delta_text(events):
    parts = []
    for e in events:
        if e[1] == "response.output_text.delta" and e[4]:
            try:
                delta = json.loads(e[4]).get("delta")
            except (ValueError, AttributeError):
                continue
            if isinstance(delta, str):
                parts.append(delta)
    return "".join(parts)


def html_event_rows(stream_id, events):
    """`<tr>`s for events (payload tuples); also what a page renders for stored events."""
    return format_html_join(
        "",
        '<tr id="ev-{}-{}" class="event" data-index="{}"><td class="num">{}</td>'
        '<td class="num">{}</td><td class="type">{}</td><td class="num">{}</td>'
        '<td class="data"><code>{}</code></td></tr>',
        (
            (
                stream_id,
                e[0],
                e[0],
                e[0],
                _ms(e[3]),
                e[1],
                "" if e[2] is None else e[2],
                _short(e[4]),
            )
            for e in events
        ),
    )


def _field_text(name, value):
    if value is None or value == "":
        return "—"
    if isinstance(value, float):
        return f"{value:.1f}"
    return value


def html_status(status, terminal=False):
    return format_html(
        '<span id="stream-status" hx-swap-oob="true" class="status status-{}" data-status="{}"{}>'
        "{}</span>",
        status,
        status,
        mark_safe(' data-terminal="true"') if terminal else "",
        status,
    )


def html_stream_frame(stream_id, events, status=None, stream=None, terminal=False):
    parts = []
    if events:
        parts.append(
            format_html(
                '<tbody hx-swap-oob="beforeend:#events">{}</tbody>',
                html_event_rows(stream_id, events),
            )
        )
        text = _delta_text(events)
        if text:
            parts.append(format_html('<span hx-swap-oob="beforeend:#output">{}</span>', text))
    if status is not None:
        parts.append(html_status(status, terminal))
    if stream:
        parts.extend(
            format_html(
                '<span id="stream-{}" hx-swap-oob="true" data-value="{}">{}</span>',
                name,
                "" if stream[name] is None else stream[name],
                _field_text(name, stream[name]),
            )
            for name in HTML_FIELDS
            if name in stream
        )
    return "\n".join(parts)


def html_stream_row(stream, oob=False):
    return render_to_string("streams/stream_row.html", {"stream": stream, "oob": oob})


# ---------------------------------------------------------------------------------------------
# Reaching the server's send buffer


def innermost_send(send):
    """The server's own `send` beneath Channels' wrappers (the session middleware wraps it in
    a bound method that keeps the original as `real_send`). For `websocket.send` the wrapper
    only looks at the session (it saves on `http.response.start` alone): ~a tenth of a frame's
    cost in the server with 100 paced streams, skipped by sending frames straight to this."""
    for _ in range(8):
        inner = getattr(getattr(send, "__self__", None), "real_send", None)
        if inner is None:
            return send
        send = inner
    return send


def find_transport(send):
    """The Twisted transport behind Daphne's `send`, or None under another server.

    Daphne hands the application `partial(server.handle_reply, protocol)` and writes every
    frame into Twisted's unbounded buffer at once, so a send never waits for a slow client.
    Measuring that buffer is the only way to notice one."""
    send = innermost_send(send)
    if isinstance(send, functools.partial):
        for arg in send.args:
            transport = getattr(arg, "transport", None)
            if transport is not None and hasattr(transport, "dataBuffer"):
                return transport
    return None


def buffered_bytes(transport):
    try:
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    except AttributeError:
        return 0


class SlowClient(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Consumers


def _query(scope):
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin1")).items()}


def _header(scope, name):
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


class RelayConsumer(AsyncWebsocketConsumer):
    """What both consumers share: who is asking, the refusal before accept, the fast path for
    layer messages, the sender task and the slow-client guard."""

    group = None
    # Layer message types handled synchronously, without Channels' per-message
    # `close_old_connections` (a thread hop): their handlers never touch the ORM.
    fast_handlers = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = None
        self.format = "html"
        self.joined = False
        self.local = None  # relay.LocalFanout when messages skip the channel layer
        self.closing = False
        self.sender = None
        self.wake = asyncio.Event()
        self.idle = False  # set by the idle watch: no message for RELAY_IDLE_CHECK_S
        self.last_message = time.monotonic()
        self.transport = None
        self._send_frame = None  # the server's send (innermost_send), once accepted
        self._fast = {}

    async def dispatch(self, message):
        handler = self._fast.get(message["type"])
        if handler is not None:
            self.last_message = time.monotonic()
            handler(message)
            return
        await super().dispatch(message)

    def deliver(self, message):
        """A message from relay.LocalFanout (same handlers, no channel layer)."""
        handler = self._fast.get(message["type"])
        if handler is not None:
            self.last_message = time.monotonic()
            handler(message)

    async def resolve_user(self):
        user = self.scope.get("user")
        if user is not None and user.is_authenticated:
            return user
        token = bearer_token(_header(self.scope, b"authorization"))
        if token:
            return await db_read(user_for_token)(token)
        return None

    async def authorize(self):
        """Parse the query, check access; False refuses the connection."""
        raise NotImplementedError

    async def websocket_connect(self, message):
        try:
            self.user = await self.resolve_user()
            allowed = self.user is not None and await self.authorize()
        except Exception:
            log.exception("relay: access check failed")
            allowed = False
        if not allowed:
            # Before accept: Daphne answers the handshake with 403, nothing is sent.
            await self.close()
            raise StopConsumer()
        self._fast = {t: getattr(self, t.replace(".", "_")) for t in self.fast_handlers}
        self.local = relay.local_fanout()
        if self.local is not None:
            self.local.subscribe(self.group, self.deliver)
        else:
            await self.channel_layer.group_add(self.group, self.channel_name)
        self.joined = True
        await self.accept()
        self.transport = find_transport(self.base_send)
        self._send_frame = innermost_send(self.base_send)
        self.sender = asyncio.get_running_loop().create_task(self._sender())
        _watch_idle(self)

    async def websocket_disconnect(self, message):
        self.closing = True
        if self.sender is not None and not self.sender.done():
            self.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sender
        await self._leave()
        raise StopConsumer()

    async def _leave(self):
        _idle_watch.get(asyncio.get_running_loop(), set()).discard(self)
        if self.joined:
            self.joined = False
            if self.local is not None:
                self.local.unsubscribe(self.group, self.deliver)
            else:
                await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _sender(self):
        try:
            await self.run()
        except SlowClient:
            stats["slow_closes"] += 1
            await self.finish(CLOSE_TOO_SLOW)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("relay: %s failed", type(self).__name__)
            await self.finish(CLOSE_ERROR)

    async def finish(self, code):
        if self.closing:
            return
        self.closing = True
        await self._leave()
        await self.close(code)

    async def run(self):
        raise NotImplementedError

    async def wait_for_work(self, pending):
        """Wait until `pending()` is true (False when the idle watch wakes us instead), then
        until the client's send buffer has room."""
        if not pending():
            self.wake.clear()
            self.idle = False
            await self.wake.wait()
            if self.idle and not pending():
                return False
        await self.writable()
        return True

    async def writable(self):
        transport = self.transport
        if transport is None:
            return
        high = knob("RELAY_SEND_HIGH_WATER_BYTES")
        if buffered_bytes(transport) <= high:
            return
        # The client reads slower than we send: let batches queue (they coalesce into bigger
        # frames) until the buffer drains, the outbox overflows or the client seems stuck.
        give_up = time.monotonic() + knob("RELAY_SLOW_CLIENT_TIMEOUT_S")
        while buffered_bytes(transport) > high:
            if self.overflowing() or time.monotonic() > give_up:
                raise SlowClient()
            await asyncio.sleep(0.01)

    def overflowing(self):
        return False

    async def send_frame(self, text):
        await self._send_frame({"type": "websocket.send", "text": text})


# One watcher task per event loop wakes connections that had no message for
# RELAY_IDLE_CHECK_S, instead of a timeout around every wait (a timer per message).
_idle_watch = {}  # loop -> set of consumers


def _watch_idle(consumer):
    loop = asyncio.get_running_loop()
    watched = _idle_watch.get(loop)
    if watched is None:
        watched = _idle_watch[loop] = set()
        loop.create_task(_idle_watcher(watched), name="streamscope-relay-idle")
        for other in [lp for lp in _idle_watch if lp.is_closed()]:
            del _idle_watch[other]
    watched.add(consumer)


async def _idle_watcher(watched):
    while watched:
        idle_s = knob("RELAY_IDLE_CHECK_S")
        await asyncio.sleep(min(1.0, idle_s / 2))
        now = time.monotonic()
        for consumer in tuple(watched):
            if now - consumer.last_message >= idle_s and not consumer.wake.is_set():
                consumer.last_message = now
                consumer.idle = True
                consumer.wake.set()
    # the next connection starts a new watcher
    for loop, members in list(_idle_watch.items()):
        if members is watched:
            del _idle_watch[loop]


class StreamConsumer(RelayConsumer):
    """`/ws/streams/<id>/`: one stream's events, exactly once, then its terminal status."""

    fast_handlers = ("stream.batch",)

    async def authorize(self):
        query = _query(self.scope)
        try:
            self.stream_id = int(self.scope["url_route"]["kwargs"]["stream_id"])
            self.last_sent = int(query.get("after", -1))
        except (KeyError, ValueError):
            return False
        self.format = query.get("format", "html")
        if self.format not in ("html", "json") or self.last_sent < -1:
            return False
        if not await db_read(_visible_stream)(self.user, self.stream_id):
            return False
        self.group = relay.stream_group(self.stream_id)
        self.status = None
        self.outbox = []  # event lists of queued batches, in arrival order
        self.outbox_events = 0
        self.pending_fields = {}  # stream fields changed since the last frame, merged
        self.announced = -1  # the highest index any message has mentioned
        self.catching_up = True
        return True

    # -- the receive side: runs for every layer message; no I/O here

    def stream_batch(self, message):
        if self.closing:
            return
        events = message["events"]
        if events:
            last = events[-1][0]
            if last > self.announced:
                self.announced = last
            if not self.catching_up:
                # During catch-up the database read covers these; after it, `announced` tells
                # whether to read once more.
                self.outbox.append(events)
                self.outbox_events += len(events)
        fields = message.get("stream_fields")
        if fields:
            self.pending_fields.update(fields)
        self.wake.set()

    def overflowing(self):
        return self.outbox_events > knob("RELAY_OUTBOX_MAX_EVENTS")

    # -- the send side

    async def run(self):
        fields = await db_read(_stream_fields)(self.stream_id)
        if fields is None:
            await self.gone()
            return
        self.status = fields["status"]
        terminal = self.status not in ACTIVE
        first = True
        while True:
            page = await db_read(_events_between)(self.stream_id, self.last_sent)
            if page or first:
                await self.send_events(
                    page, status=self.status if first else None, stream=fields if first else None
                )
                first = False
            if not page or (len(page) < PAGE_EVENTS and self.announced <= self.last_sent):
                break
        self.catching_up = False
        if terminal:
            await self.send_events([], status=self.status, terminal=True)
            await self.finish(CLOSE_NORMAL)
            return
        while not self.closing:
            if not await self.wait_for_work(lambda: self.outbox or self.pending_fields):
                await self.idle_check()
                continue
            # No overflow check here: the client's buffer has room (wait_for_work waited for
            # that), so a long outbox is our own lag (a burst the recorder took faster than
            # this loop could send it), not a slow client; closing it would punish a viewer
            # that keeps up. Overflow closes only while the buffer stays full (writable).
            batches, self.outbox, self.outbox_events = self.outbox, [], 0
            await self.forward(batches)

    async def idle_check(self):
        """No message for a while: make sure the layer did not lose the last ones."""
        stats["idle_checks"] += 1
        fields = await db_read(_stream_fields)(self.stream_id)
        if fields is None:
            await self.gone()
            return
        if fields["status"] != self.status:
            self.pending_fields = {**fields, **self.pending_fields}
        missed = await self.read_range(self.last_sent, None)
        if missed or self.pending_fields:
            stats["filled_events"] += len(missed)
            await self.forward([missed])

    async def gone(self):
        """The stream was deleted while we watched: end like a finished stream."""
        await self.send_events([], status="deleted", terminal=True)
        await self.finish(CLOSE_NORMAL)

    async def forward(self, batches):
        """Send queued batches as frames: dedupe, fill holes from the database, end."""
        fields, self.pending_fields = self.pending_fields, {}
        stream_id = self.stream_id
        out = []
        last = self.last_sent
        missing_data = []
        for events in batches:
            for e in events:
                i = e[0]
                if i <= last:
                    continue  # already sent: stored catch-up, or a duplicate delivery
                if i != last + 1:
                    filled = await self.read_range(last, i)
                    stats["holes"] += 1
                    stats["filled_events"] += len(filled)
                    out.extend(filled)
                if e[4] is None:
                    missing_data.append(len(out))
                out.append(e)
                last = i
        status = fields.get("status")
        terminal = status is not None and status not in ACTIVE
        complete = terminal and fields.get("event_count") == last + 1
        if (terminal and not complete) or self.announced > last:
            # The last batch may have been dropped: the database has the final word (unless
            # the final count says nothing is missing: 100 streams ending together made 100
            # reads of nothing).
            tail = await self.read_range(last, None)
            if tail:
                stats["filled_events"] += len(tail)
                out.extend(tail)
        if missing_data:
            data = await db_read(_event_data)(stream_id, [out[j][0] for j in missing_data])
            for j in missing_data:
                e = out[j]
                out[j] = (e[0], e[1], e[2], e[3], data.get(e[0], ""))
        if status == self.status:
            status = None
        await self.send_events(out, status=status, stream=fields, terminal=terminal)
        if terminal:
            await self.finish(CLOSE_NORMAL)

    async def read_range(self, after, before):
        out = []
        while True:
            page = await db_read(_events_between)(self.stream_id, after, before)
            out.extend(page)
            if len(page) < PAGE_EVENTS:
                return out
            after = page[-1][0]

    async def send_events(self, events, status=None, stream=None, terminal=False):
        """Frames of at most PAGE_EVENTS events; status and fields ride on the last one."""
        chunks = frame_chunks(events) or [[]]
        render = json_stream_frame if self.format == "json" else self._html
        for n, chunk in enumerate(chunks, 1):
            final = n == len(chunks)
            if not chunk and not final:
                continue
            if not chunk and not (status or stream or terminal):
                continue
            for part, text in self._fitting(
                render,
                chunk,
                status=status if final else None,
                stream=stream if final else None,
                terminal=terminal and final,
            ):
                await self.send_frame(text)
                if part:
                    self.last_sent = part[-1][0]
            if chunk and not final:
                await self.writable()
        if status is not None:
            self.status = status

    def _fitting(self, render, events, omit_data=False, **end):
        """(events, text) frames of `events` whose texts Daphne will send: halved until each
        is under MESSAGE_MAX_BYTES; `end` (status, fields, terminal) rides on the last."""
        text = render(events, omit_data=omit_data, **end)
        if len(text) * 4 <= MESSAGE_MAX_BYTES or len(text.encode()) <= MESSAGE_MAX_BYTES:
            return [(events, text)]
        if len(events) <= 1:
            if omit_data:
                log.error(
                    "relay: a frame of stream %s is too big even without data", self.stream_id
                )
                return []
            return self._fitting(render, events, omit_data=True, **end)
        half = len(events) // 2
        first = self._fitting(render, events[:half], omit_data=omit_data)
        return first + self._fitting(render, events[half:], omit_data=omit_data, **end)

    def _html(self, events, status=None, stream=None, terminal=False, omit_data=False):
        return html_stream_frame(self.stream_id, events, status, stream, terminal)


class StreamListConsumer(RelayConsumer):
    """`/ws/streams/`: the live list of the user's streams (staff: all streams)."""

    group = relay.LIST_GROUP
    fast_handlers = ("streams.changed",)

    async def authorize(self):
        query = _query(self.scope)
        try:
            self.after = int(query["after"]) if "after" in query else None
        except ValueError:
            return False
        self.format = query.get("format", "html")
        if self.format not in ("html", "json"):
            return False
        self.changes = {}  # stream id -> changed fields, merged
        self.shown = set()  # ids whose rows this connection inserted
        return True

    def streams_changed(self, message):
        if self.closing or not may_see(self.user, message.get("user")):
            return
        self.changes.setdefault(message["stream"], {}).update(message.get("fields") or {})
        self.wake.set()

    async def run(self):
        snapshot = await db_read(_list_snapshot)(self.user, self.after)
        if self.format == "json":
            await self.send_frame(_dumps({"streams": snapshot}))
        else:
            await self.send_rows([row["id"] for row in snapshot])
        while not self.closing:
            if not await self.wait_for_work(lambda: self.changes):
                continue
            changes, self.changes = self.changes, {}
            if self.format == "json":
                items = [{"id": sid, **fields} for sid, fields in changes.items()]
                await self.send_frame(_dumps({"streams": items}))
            else:
                await self.send_rows(list(changes))

    async def send_rows(self, ids):
        if not ids:
            return
        streams = await db_read(_list_rows)(self.user, ids)
        new, known = [], []
        for stream in streams:
            is_new = self.after is not None and stream.pk > self.after
            if is_new and stream.pk not in self.shown:
                self.shown.add(stream.pk)
                new.append(html_stream_row(stream))
            else:
                known.append(html_stream_row(stream, oob=True))
        parts = []
        if new:
            parts.append(
                format_html(
                    '<tbody hx-swap-oob="afterbegin:#streams">{}</tbody>', mark_safe("".join(new))
                )
            )
        parts.extend(known)
        if parts:
            await self.send_frame("\n".join(parts))
