"""WebSocket consumers: subscribe, catch up from the database, dedupe, forward.

`/ws/streams/<id>/` sends one stream's events exactly once and in order, then its terminal
status; `/ws/streams/` is the live list. Frames are JSON, encoded by `streams.shapes.public` (a
stream's events by `streams.shapes.event_message`); every frame leaves through the egress gate
(streams/serve/egress.py). docs/relay.md describes the endpoints, frames, close codes, and how
completeness is kept without trusting the channel layer and without letting a slow client slow
anyone else.
"""

import asyncio
import contextlib
import functools
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

from streams.access import projects, shares, sockets, throttle, tokens
from streams.access.rules import streams_for
from streams.access.tokens import bearer_token
from streams.core import conf
from streams.core.transport import buffered_bytes, connection
from streams.live import relay
from streams.models import ApiToken, Stream
from streams.observe import telemetry
from streams.shapes import public
from streams.shapes.event_message import (
    DATA,
    INDEX,
    MESSAGE_COLUMNS,
    PROXIED_MESSAGE_COLUMNS,
    stream_frame,
    with_data,
)
from streams.store import events as stored_events

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
CLOSE_REVOKED = 4003  # the token or share link this socket was opened with was revoked
CLOSE_TOO_MANY = 4029  # the user has MAX_SOCKETS_PER_USER sockets open
REVOCATION_CHECK_S = 2.0
ACTIVE = frozenset(Stream.ACTIVE_STATUSES)
LIST_SNAPSHOT_MAX = 200


# ---------------------------------------------------------------------------------------------
# Database reads: off the event loop, on the relay's own threads (not the one thread Django's
# sync_to_async shares with every view), each cleaning up its connection like Channels does.

_read_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="streamscope-relay")


def db_read(func):
    return database_sync_to_async(
        _once_more_on_a_dead_connection(func), thread_sensitive=False, executor=_read_executor
    )


def _once_more_on_a_dead_connection(func):
    """`func`, asked again on a fresh connection if the thread's kept one had died (the
    database restarted since this thread last used it): a restart costs a reconnect, not a
    refused socket for each of the relay's threads."""

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            if connections["default"].in_atomic_block:
                raise
            connections.close_all()
            return func(*args, **kwargs)

    return call


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


def _visible_stream_source(user, stream_id):
    """The stream's `source` if `user` may see it, else None."""
    return streams_for(user).filter(pk=stream_id).values_list("source", flat=True).first()


def _stream_fields(stream_id):
    return Stream.objects.filter(pk=stream_id).values(*public.STREAM_FIELDS).first()


def _events_between(stream_id, after, before=None, limit=PAGE_EVENTS, columns=MESSAGE_COLUMNS):
    """Stored events with after < index (< before), in index order, as messages (`columns`:
    `event_message.MESSAGE_COLUMNS` or its proxied form)."""
    return stored_events.read(stream_id, columns, after=after, before=before, limit=limit)


def _event_data(stream_id, indexes):
    return dict(stored_events.read(stream_id, ("index", "data"), indexes=indexes))


def _listed_projects(user, slug):
    """The project ids a live list of `user` shows (None: every stream, for staff)."""
    if slug:
        project = projects.by_slug(user, slug)
        return frozenset() if project is None else frozenset({project.pk})
    return projects.visible_project_ids(user)


def _list_snapshot(user, project_ids, after):
    visible = streams_for(user)
    if project_ids is not None:
        visible = visible.filter(project_id__in=project_ids)
    active = visible.filter(status__in=Stream.ACTIVE_STATUSES)
    newer = visible.filter(pk__gt=after) if after is not None else visible.none()
    rows = (active | newer).order_by("-pk").values(*public.LIST_COLUMNS)
    return [public.list_item(row) for row in rows[:LIST_SNAPSHOT_MAX]]


# ---------------------------------------------------------------------------------------------
# Frames


def frame_chunks(events):
    """`events` cut into frames of at most PAGE_EVENTS events and about FRAME_MAX_BYTES of
    data (an oversized event counts as nothing: it goes without its data)."""
    chunks, chunk, size = [], [], 0
    for e in events:
        data = e[DATA]
        n = len(data) + 64 if data is not None else 64
        if chunk and (len(chunk) >= PAGE_EVENTS or size + n > FRAME_MAX_BYTES):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(e)
        size += n
    if chunk:
        chunks.append(chunk)
    return chunks


def fits(text):
    """Whether Daphne will send `text` as one WebSocket message."""
    return len(text) * 4 <= MESSAGE_MAX_BYTES or len(text.encode()) <= MESSAGE_MAX_BYTES


def shared_frame(message):
    """The frame of a layer message of a stream (its events and changed fields), encoded once
    for every viewer it reaches: the local fan-out hands each the same message, and each
    encoding its own made the viewers' cost one encoding per viewer per batch. None when the
    message would not go as one such frame (data left out, too many or too large)."""
    try:
        return message["frame"]
    except KeyError:
        pass
    events = message["events"]
    text = None
    if len(frame_chunks(events)) <= 1 and all(e[DATA] is not None for e in events):
        text = stream_frame(events, stream=message.get("stream_fields") or None)
        if not fits(text):
            text = None
    message["frame"] = text  # (a cache slot; the message is otherwise read-only)
    return text


# ---------------------------------------------------------------------------------------------
# Reaching the server's send buffer


def innermost_send(send):
    """The server's own `send` beneath Channels' wrappers (the session middleware wraps it in
    a bound method that keeps the original as `real_send`). For `websocket.send` the wrapper
    only looks at the session (it saves on `http.response.start` alone), yet costs a noticeable
    share of each frame with many paced streams: frames go straight to this instead
    (docs/performance.md, "Consumers")."""
    for _ in range(8):
        inner = getattr(getattr(send, "__self__", None), "real_send", None)
        if inner is None:
            return send
        send = inner
    return send


def find_transport(send):
    """The Twisted transport behind Daphne's `send`, or None under another server (its buffer
    is the only way to notice a slow client: streams/core/transport.py)."""
    return connection(send)


class SlowClient(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Consumers


def _query(scope):
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin1")).items()}


def _json_format(query):
    """JSON is the only format; `format=json` is still accepted (clients send it)."""
    return query.get("format", "json") == "json"


def _header(scope, name):
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_key(url):
    """(scheme, host, port) of an origin or `scheme://host[:port]`, default ports filled in."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[parts.scheme]


def origin_allowed(scope):
    """The browser's `Origin` is the server's own (scheme, host and port of this connection:
    the Host header, https when the connection or, with STREAMSCOPE_SECURE, the proxy's
    X-Forwarded-Proto says so), or one of CSRF_TRUSTED_ORIGINS. Host names alone let any port
    or scheme of an allowed host in (another service on that machine, plain http)."""
    origin = _origin_key(_header(scope, b"origin") or "")
    if origin is None:
        return False
    secure = scope.get("scheme") == "wss" or (
        conf.get().secure and _header(scope, b"x-forwarded-proto") == "https"
    )
    host = _header(scope, b"host")
    if host is None and scope.get("server"):  # a server that does not pass Host on
        host = "{}:{}".format(*scope["server"])
    own = _origin_key(f"{'https' if secure else 'http'}://{host}") if host else None
    if origin == own:
        return True
    return origin in {_origin_key(o) for o in settings.CSRF_TRUSTED_ORIGINS}


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
        self.token_digest = None  # when the socket was opened with a bearer token
        self.share_link_id = None  # when it was opened through a share link
        self.slot = None  # the user's socket slot (sockets.take_socket_slot)
        self.slot_owner = uuid.uuid4().hex

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
            ip = throttle.client_ip(self.scope)
            bearer, _retry = await db_read(throttle.token_user)(token, ip)
            # a socket only reads: a token needs its `read` scope (streams/access/tokens.py)
            if bearer and not bearer.lacks(tokens.Scope.READ):
                self.token_digest = ApiToken.hash(token)
                return bearer.user
        return None

    async def authorize(self):
        """Parse the query, check access; False refuses the connection."""
        raise NotImplementedError

    def socket_holder(self):
        """Whose socket slots this socket takes (MAX_SOCKETS_PER_USER): its user's."""
        return self.user.pk

    async def websocket_connect(self, message):
        try:
            allowed = origin_allowed(self.scope)
            self.user = await self.resolve_user() if allowed else None
            allowed = self.user is not None and await self.authorize()
        except Exception:
            log.exception("relay: access check failed")
            allowed = False
        if not allowed:
            # Before accept: Daphne answers the handshake with 403, nothing is sent.
            await self.close()
            raise StopConsumer()
        self.slot = await db_read(sockets.take_socket_slot)(self.socket_holder(), self.slot_owner)
        if self.slot is None:
            # Accepted to be closed: a close code says why, a refused handshake would not.
            await self.accept()
            await self.close(CLOSE_TOO_MANY)
            raise StopConsumer()
        self._fast = {t: getattr(self, t.replace(".", "_")) for t in self.fast_handlers}
        self.local = relay.local_fanout()
        if self.local is not None:
            self.local.subscribe(self.group, self.deliver)
        else:
            await self.channel_layer.group_add(self.group, self.channel_name)
        self.joined = True
        telemetry.viewer_joined()
        await self.accept()
        self.transport = find_transport(self.base_send)
        self._send_frame = innermost_send(self.base_send)
        self.sender = asyncio.get_running_loop().create_task(self._sender())
        _watch_idle(self)
        _guard(self)

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
        _guarded.get(asyncio.get_running_loop(), set()).discard(self)
        if self.slot is not None:
            slot, self.slot = self.slot, None
            try:
                await db_read(sockets.free_socket_slot)(slot, self.slot_owner)
            except Exception:  # the cache is down: the lease runs out on its own
                log.warning("relay: could not free a socket slot", exc_info=True)
        if self.joined:
            self.joined = False
            telemetry.viewer_left()
            if self.local is not None:
                self.local.unsubscribe(self.group, self.deliver)
            else:
                await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _sender(self):
        try:
            await self.run()
        except SlowClient:
            telemetry.slow_viewer_closed()
            await self.finish(CLOSE_TOO_SLOW)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("relay: %s failed", type(self).__name__)
            await self.finish(CLOSE_ERROR)

    async def close_revoked(self):
        """Close now with CLOSE_REVOKED: what opened this socket (a token, a share link) no
        longer opens anything."""
        if self.sender is not None:
            self.sender.cancel()
        await self.finish(CLOSE_REVOKED)

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
        high = conf.get().relay_send_high_water_bytes
        if buffered_bytes(transport) <= high:
            return
        # The client reads slower than we send: let batches queue (they coalesce into bigger
        # frames) until the buffer drains, the outbox overflows or the client seems stuck.
        give_up = time.monotonic() + conf.get().relay_slow_client_timeout_s
        while buffered_bytes(transport) > high:
            if self.overflowing() or time.monotonic() > give_up:
                raise SlowClient()
            await asyncio.sleep(0.01)

    def overflowing(self):
        return False

    async def send_frame(self, text):
        telemetry.frame_sent()
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
        idle_s = conf.get().relay_idle_check_s
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


# One guard task per event loop renews the open sockets' slot leases and closes sockets whose
# token was revoked: one cache write and one database read per process every few seconds,
# whatever the number of sockets; the database is the truth for every process.
_guarded = {}  # loop -> set of consumers


def _guard(consumer):
    loop = asyncio.get_running_loop()
    guarded = _guarded.get(loop)
    if guarded is None:
        guarded = _guarded[loop] = set()
        loop.create_task(_guardian(guarded), name="streamscope-relay-guard")
        for other in [lp for lp in _guarded if lp.is_closed()]:
            del _guarded[other]
    guarded.add(consumer)


async def _guardian(guarded):
    renewed = time.monotonic()
    while guarded:
        await asyncio.sleep(REVOCATION_CHECK_S)
        try:
            digests = {c.token_digest for c in guarded if c.token_digest}
            if digests:
                revoked = await db_read(tokens.revoked_tokens)(digests)
                for consumer in [c for c in guarded if c.token_digest in revoked]:
                    guarded.discard(consumer)
                    await consumer.close_revoked()
            # sockets opened through a share link (streams/live/shared.py): revoked, expired
            links = {c.share_link_id for c in guarded if c.share_link_id}
            if links:
                closed = await db_read(shares.closed_links)(links)
                for consumer in [c for c in guarded if c.share_link_id in closed]:
                    guarded.discard(consumer)
                    await consumer.close_revoked()
            if time.monotonic() - renewed >= sockets.SOCKET_RENEW_S:
                renewed = time.monotonic()
                slots = {c.slot: c.slot_owner for c in guarded if c.slot}
                await db_read(sockets.renew_socket_slots)(slots)
        except Exception:
            log.exception("relay: socket guard failed (retrying)")
    for loop, members in list(_guarded.items()):
        if members is guarded:
            del _guarded[loop]


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
        if not _json_format(query) or self.last_sent < -1:
            return False
        source = await self.visible_source()
        if source is None:
            return False
        # Proxied streams' events carry sent_us; every other stream's frames stay as they were.
        self.proxied = source == Stream.Source.PROXY
        self.columns = PROXIED_MESSAGE_COLUMNS if self.proxied else MESSAGE_COLUMNS
        self.group = relay.stream_group(self.stream_id)
        self.status = None
        self.outbox = []  # event lists of queued batches, in arrival order
        self.outbox_events = 0
        self.pending_fields = {}  # stream fields changed since the last frame, merged
        self.announced = -1  # the highest index any message has mentioned
        self.catching_up = True
        # the one message queued since the last frame, alone (its frame may be shared)
        self.lone = None
        return True

    async def visible_source(self):
        """The stream's `source` if this socket may show it, else None."""
        return await db_read(_visible_stream_source)(self.user, self.stream_id)

    # -- the receive side: runs for every layer message; no I/O here

    def stream_batch(self, message):
        if self.closing:
            return
        lone = not (self.catching_up or self.outbox or self.pending_fields)
        events = message["events"]
        if events:
            last = events[-1][INDEX]
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
        self.lone = message if lone else None
        self.wake.set()

    def overflowing(self):
        return self.outbox_events > conf.get().relay_outbox_max_events

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
            page = await db_read(_events_between)(
                self.stream_id, self.last_sent, columns=self.columns
            )
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
            lone, self.lone = self.lone, None
            if lone is not None and len(batches) <= 1 and await self.send_shared(lone):
                continue
            await self.forward(batches)

    async def send_shared(self, message):
        """Send the lone queued `message` as the frame encoded once for all its viewers
        (`shared_frame`) when it is exactly what `forward` would send: its events next in
        line, nothing to read from the database, no status to judge. False otherwise (and
        nothing sent): `forward` makes this viewer's own."""
        events = message["events"]
        last = events[-1][INDEX] if events else self.last_sent
        if "status" in self.pending_fields or self.announced > last:
            return False
        if events and events[0][INDEX] != self.last_sent + 1:
            return False
        text = shared_frame(message)
        if text is None:
            return False
        self.pending_fields = {}
        await self.send_frame(text)
        self.last_sent = last
        return True

    async def idle_check(self):
        """No message for a while: make sure the layer did not lose the last ones."""
        fields = await db_read(_stream_fields)(self.stream_id)
        if fields is None:
            await self.gone()
            return
        if fields["status"] != self.status:
            self.pending_fields = {**fields, **self.pending_fields}
        missed = await self.read_range(self.last_sent, None)
        if missed or self.pending_fields:
            await self.forward([missed])

    async def gone(self):
        """The stream was deleted while we watched: end like a finished stream."""
        await self.send_events([], status="deleted", terminal=True)
        await self.finish(CLOSE_NORMAL)

    async def forward(self, batches):
        """Send queued batches as frames: dedupe, fill holes from the database, end."""
        fields, self.pending_fields = self.pending_fields, {}
        self.lone = None
        stream_id = self.stream_id
        out = []
        last = self.last_sent
        missing_data = []
        for events in batches:
            for e in events:
                i = e[INDEX]
                if i <= last:
                    continue  # already sent: stored catch-up, or a duplicate delivery
                if i != last + 1:
                    out.extend(await self.read_range(last, i))
                if e[DATA] is None:
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
            out.extend(await self.read_range(last, None))
        if missing_data:
            data = await db_read(_event_data)(stream_id, [out[j][INDEX] for j in missing_data])
            for j in missing_data:
                e = out[j]
                out[j] = with_data(e, data.get(e[INDEX], ""))
        if status == self.status:
            status = None
        await self.send_events(out, status=status, stream=fields, terminal=terminal)
        if terminal:
            await self.finish(CLOSE_NORMAL)

    async def read_range(self, after, before):
        out = []
        while True:
            page = await db_read(_events_between)(
                self.stream_id, after, before, columns=self.columns
            )
            out.extend(page)
            if len(page) < PAGE_EVENTS:
                return out
            after = page[-1][INDEX]

    async def send_events(self, events, status=None, stream=None, terminal=False):
        """Frames of at most PAGE_EVENTS events; status and fields ride on the last one."""
        chunks = frame_chunks(events) or [[]]
        for n, chunk in enumerate(chunks, 1):
            final = n == len(chunks)
            if not chunk and not final:
                continue
            if not chunk and not (status or stream or terminal):
                continue
            for part, text in self._fitting(
                chunk,
                status=status if final else None,
                stream=stream if final else None,
                terminal=terminal and final,
            ):
                await self.send_frame(text)
                if part:
                    self.last_sent = part[-1][INDEX]
            if chunk and not final:
                await self.writable()
        if status is not None:
            self.status = status

    def _fitting(self, events, omit_data=False, **end):
        """(events, text) frames of `events` whose texts Daphne will send: halved until each
        is under MESSAGE_MAX_BYTES; `end` (status, fields, terminal) rides on the last."""
        text = stream_frame(events, omit_data=omit_data, **end)
        if fits(text):
            return [(events, text)]
        if len(events) <= 1:
            if omit_data:
                log.error(
                    "relay: a frame of stream %s is too big even without data", self.stream_id
                )
                return []
            return self._fitting(events, omit_data=True, **end)
        half = len(events) // 2
        first = self._fitting(events[:half], omit_data=omit_data)
        return first + self._fitting(events[half:], omit_data=omit_data, **end)


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
        if not _json_format(query):
            return False
        # whose streams it lists: the projects the user may read (staff: None, every one),
        # or the one of `?project=<slug>`, known before any message comes (the handler below
        # runs without the database)
        self.projects = await db_read(_listed_projects)(self.user, query.get("project", ""))
        if self.projects == frozenset() and query.get("project"):
            return False
        self.changes = {}  # stream id -> changed fields, merged
        return True

    def streams_changed(self, message):
        if self.closing:
            return
        if self.projects is not None and message.get("project") not in self.projects:
            return
        self.changes.setdefault(message["stream"], {}).update(message.get("fields") or {})
        self.wake.set()

    async def run(self):
        snapshot = await db_read(_list_snapshot)(self.user, self.projects, self.after)
        await self.send_frame(public.list_frame(snapshot))
        while not self.closing:
            if not await self.wait_for_work(lambda: self.changes):
                continue
            changes, self.changes = self.changes, {}
            items = [{"id": sid, **fields} for sid, fields in changes.items()]
            await self.send_frame(public.list_frame(items))
