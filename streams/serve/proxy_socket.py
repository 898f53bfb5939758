"""The recording proxy's WebSocket: the Responses API's WebSocket mode, `GET /v1/responses`
upgraded, as the openai SDK's `client.responses.connect()` opens it.

    with client.responses.connect() as connection:          # base_url …/v1, api_key ss_…
        connection.send({"type": "response.create", "model": …, "input": …})
        for event in connection: …

Let in as a POST to the HTTP proxy is (streams/serve/proxy.py, `admit`: the same tokens, the
`proxy` scope, the user's role through the one project rule, spend caps, pass-through keys
handed to the egress gate), refused before the handshake completes otherwise (Daphne answers
403); an open socket counts as one of its token's requests in flight. Then the upstream's
WebSocket is opened (`Upstream`: network.py's kernel-stamping connection under the
`websockets` library's sans-I/O protocol; no compression: frames are relayed as they came) and
both directions are relayed, the upstream's frames to the client first, before anything else
happens to them. While more than PROXY_CLIENT_BUFFER_BYTES wait unread for the client, the
upstream is not read (what the proxy holds for a client that does not read is bounded).

What the protocol says a response is decides what a stream is: each `response.create` the
client sends is one stream, recorded the one way proxied streams are
(`services.start_proxied`, the runner, `recorder.Relayed`): the token is checked again for
it (a refused create gets an `error` event and goes nowhere), its frames are its events, each
with its receipt time (the kernel's stamp of the read that completed it) and the time its
client had it, TTFT from the frame that carried the `response.create` upstream (the kernel's
transmit stamp) to the first output delta, usage and cost from the terminal event.
The responses of one socket are one session (the client's `X-Streamscope-Session`, or the
socket's own). A response ends when the checker has seen its terminal event; frames after it
and before the next `response.create` are relayed and counted as unrecorded
(`ResponsesSocket.unrecorded`), in no stream. Other client frames (`response.steer`, …) go
upstream as they came.

Bad input closes the socket with a code saying why: a binary frame 4003, a frame that is not a
JSON object with a `type` 4007, one over PROXY_MAX_BODY_BYTES 4009 (WebSocket's 1003, 1007
and 1009 in the application's range). An upstream that closes closes the client's socket
(1000 when it closed normally, else 4011); one that sends a message over
UPSTREAM_MAX_EVENT_BYTES is closed (1009) and so is the client's socket, with 4009, and the
response reading it ends `truncated`, `event_too_large`, with every frame before it; a
client that leaves ends the responses it was reading with the frames that came, cancelled
(`client_disconnected`) unless their terminal event had come; one that leaves more than
PROXY_CLIENT_BUFFER_BYTES unread for PROXY_SLOW_CLIENT_TIMEOUT_S is closed with 4008 and its
responses end `client_too_slow`.
Every frame sent passes the egress gate (dashboard/asgi.py), like every response.
"""

import asyncio
import collections
import contextlib
import json
import logging
import ssl
import time
import uuid

import httpcore
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import URLRouter
from django.urls import path
from websockets.client import ClientProtocol
from websockets.exceptions import PayloadTooBig
from websockets.frames import DATA_OPCODES
from websockets.http11 import Response
from websockets.uri import parse_uri

from streams.core import conf, formats, safejson, transport
from streams.ingest import network
from streams.ingest.recorder import Relayed
from streams.ingest.upstream import EventTooLarge, ReceivedEvent
from streams.observe import telemetry
from streams.run import services
from streams.serve import proxy

log = logging.getLogger(__name__)

# Close codes: 1003, 1007, 1009 and 1011 in the application's range (Daphne's Autobahn lets a
# server close with 1000 or 3000–4999 only, and sends no reason).
CLOSE_UNSUPPORTED, CLOSE_INVALID, CLOSE_TOO_BIG, CLOSE_BROKEN = 4003, 4007, 4009, 4011
# A client that left more than PROXY_CLIENT_BUFFER_BYTES unread for PROXY_SLOW_CLIENT_TIMEOUT_S
# (1008, policy violation, in the application's range).
CLOSE_TOO_SLOW = 4008


class Closed(Exception):
    """The upstream's socket ended: `code` is what the client's socket closes with (1000 when
    the upstream closed normally, else CLOSE_BROKEN)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code
        self.too_large = None  # the EventTooLarge it closed for, if one


class Upstream:
    """The upstream's WebSocket on network.py's connection, whose every read carries the
    kernel's receipt stamp (`SO_TIMESTAMPNS`, plain TCP; the loop's where it cannot, as on TLS:
    `receipt_clock` says which), driven through the `websockets` library's sans-I/O protocol:
    the bytes of each read go into it, and the messages it completes come out with that read's
    stamp, as an HTTP response's events do (docs/measurement.md). A library connection read
    through the loop's own transport, and its stamps were the loop's, late by whatever the loop
    was doing. No extension is offered (no compression: frames are relayed as they came); the
    upstream's pings are answered; messages may be split across frames and frames across reads.
    """

    READ_BYTES = 256 * 1024

    def __init__(self, stream, protocol):
        self.stream = stream
        self.protocol = protocol
        self.receipt_clock = stream.receipt_clock
        self.phases = network.Phases()  # this connection's newest read and write
        self.writing = asyncio.Lock()  # (the pump answers pings while a create goes up)
        self.messages = collections.deque()  # (payload, receipt ns), complete, not yet taken
        self.parts = []  # the frames so far of a message split across frames
        self.closed = None  # the Closed the socket ended with
        self.opened = False  # the handshake's 101 came

    @classmethod
    async def open(cls, url, headers, open_timeout_s):
        uri = parse_uri(url)
        stream = await network.Backend().connect_tcp(uri.host, uri.port, timeout=open_timeout_s)
        try:
            async with asyncio.timeout(open_timeout_s):
                if uri.secure:  # (decrypted in the loop's transport: its clock)
                    context = ssl.create_default_context()
                    stream = await stream.start_tls(context, server_hostname=uri.host)
                # (one message over the bound: the protocol stops at its frame's header)
                protocol = ClientProtocol(uri, max_size=conf.get().upstream_max_event_bytes)
                request = protocol.connect()
                for name, value in headers:
                    request.headers[name] = value
                protocol.send_request(request)
                upstream = cls(stream, protocol)
                await upstream._flush()
                while not upstream.opened:
                    if upstream.closed is not None:
                        raise ConnectionError("the upstream closed during the handshake")
                    await upstream._read()
                    upstream._take()
        except BaseException:
            stream.close()
            raise
        return upstream

    async def send(self, text):
        """Send `text` as one text frame; when its last byte went out (monotonic ns: the
        kernel's transmit stamp on plain TCP, as an HTTP request's)."""
        self.protocol.send_text(text.encode("utf-8"))
        return await self._flush()

    async def recv(self):
        """The next message (bytes) and the receipt time of the read that completed it; raises
        Closed once the socket ended."""
        while not self.messages:
            if self.closed is not None:
                raise self.closed
            await self._read()
            self._take()
        return self.messages.popleft()

    async def _read(self):
        self.phases.activate()
        try:
            data = await self.stream.read(self.READ_BYTES)
        except (httpcore.ReadError, OSError):
            self.closed = Closed(CLOSE_BROKEN)
            self.protocol.receive_eof()
            return
        if not data:
            self.protocol.receive_eof()
            code = self.protocol.close_rcvd.code if self.protocol.close_rcvd else None
            self.closed = Closed(1000 if code in (1000, 1001) else CLOSE_BROKEN)
            return
        self.protocol.receive_data(data)
        await self._flush()  # (a pong, the close's answer)

    def _take(self):
        t_ns = self.phases.last_read_ns or time.monotonic_ns()
        protocol = self.protocol
        for event in protocol.events_received():
            if isinstance(event, Response):
                if protocol.handshake_exc is not None:
                    raise protocol.handshake_exc
                self.opened = True
            elif event.opcode in DATA_OPCODES:  # (pings are answered; a close ends at its EOF)
                self.parts.append(event.data)
                if event.fin:
                    payload = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
                    self.parts = []
                    self.messages.append((bytes(payload), t_ns))
        if protocol.parser_exc is not None and self.closed is None:
            # (a frame breaking the protocol, or a message over UPSTREAM_MAX_EVENT_BYTES: it
            # answered with a close, 1009 for the latter, and reads no further)
            too_big = isinstance(protocol.parser_exc, PayloadTooBig)
            self.closed = Closed(CLOSE_TOO_BIG if too_big else CLOSE_BROKEN)
            if too_big:
                exc = protocol.parser_exc
                self.closed.too_large = EventTooLarge(
                    protocol.max_message_size,
                    exc.current_size or 0,  # (earlier frames of it; the big one is not read)
                    declared=(exc.current_size or 0) + (exc.size or 0),
                )

    async def _flush(self):
        self.phases.activate()
        async with self.writing:
            for data in self.protocol.data_to_send():
                if data:
                    await self.stream.write(data, timeout=conf.get().connect_timeout_s)
        return self.phases.last_write_ns or time.monotonic_ns()

    async def close(self):
        with contextlib.suppress(Exception):
            self.protocol.send_close(1000)
            await self._flush()
        self.stream.close()


def upstream_url(base_url, query_string=b""):
    url = base_url.rstrip("/") + formats.PATHS[formats.RESPONSES]
    url = "ws" + url[4:] if url.startswith("http") else url  # http→ws, https→wss
    return url + ("?" + query_string.decode("latin-1") if query_string else "")


class Turn:
    """One `response.create` of a socket: the recording's `frames` and its port (the runner
    calls `finish` once it is recorded). Turns read the socket's frames one after the other:
    a turn starts reading once the one before it has seen its terminal event."""

    def __init__(self, socket, previous):
        self.socket = socket
        self.previous = previous
        self.done = asyncio.Event()
        self.running = None  # the runner's `Proxied`
        self.written_ns = None  # when its `response.create` went upstream

    async def frames(self):
        if self.previous is not None:
            await self.previous.done.wait()
        queue = self.socket.frames
        try:
            while not self.running.ended_upstream():
                item = await queue.get()
                if item is None:  # the socket ended: every later turn ends too
                    queue.put_nowait(None)
                    too_large, self.socket.too_large = self.socket.too_large, None
                    if too_large is not None:  # (this turn's message: truncated, its code)
                        raise too_large
                    if self.socket.left_first:
                        # what came is recorded; the rest was never asked for
                        left = "client_too_slow" if self.socket.too_slow else "client_disconnected"
                        self.running.cancel(left)
                        await asyncio.sleep(0)
                    return
                if item[0].t_ns < self.written_ns:
                    # received before this response was asked for, after the one before it
                    # ended: no response's (relayed, counted, not recorded)
                    self.socket.unrecorded(1)
                    continue
                yield item
        finally:
            self.done.set()

    async def start(self, response, stream_id):
        pass

    async def chunk(self, data):
        pass

    async def finish(self, outcome):
        self.done.set()
        with contextlib.suppress(ValueError):
            self.socket.turns.remove(self)
        if not self.socket.turns and self.socket.ended:
            self.socket.leftovers()


class ResponsesSocket(AsyncWebsocketConsumer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.admitted = None
        self.upstream = None
        self.pump = None
        self.turns = []  # not yet recorded to their end, oldest first
        self.frames = asyncio.Queue()  # the upstream's frames for the turns: (event, sent_ns)
        self.session = ""
        self.client_left = False
        self.too_slow = False  # let go for not reading (not a hang-up)
        self.connection = None  # the client's connection in the server (its unread bytes)
        self.ended = False  # the upstream's frames came to their end
        self.left_first = False  # ... because the client left (not the upstream)
        self.too_large = None  # the upstream sent a message over the bound (an EventTooLarge)

    async def connect(self):
        self.headers = {}
        for name, value in self.scope["headers"]:
            self.headers.setdefault(name.lower(), value)
        try:
            self.admitted = await proxy.admit(self.scope, self.headers)
        except proxy.Refused as refusal:
            log.info("proxy socket refused: %s %s", refusal.args[0], refusal.args[3])
            await self.close()  # before accept: the handshake is answered 403
            raise StopConsumer() from None
        try:
            self.upstream = await self._open_upstream()
        except Exception as exc:
            log.warning("proxy socket: the upstream's WebSocket did not open: %s", exc)
            self._release()
            await self.close()
            raise StopConsumer() from None
        self.session = self.admitted.session or f"ws-{uuid.uuid4().hex[:16]}"
        await self.accept()
        self.connection = transport.connection(self.base_send)
        self.pump = asyncio.get_running_loop().create_task(self._pump())

    async def _open_upstream(self):
        forward = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in self.scope["headers"]
            if k.lower() not in proxy.NOT_FORWARDED
            and not k.lower().startswith(b"sec-websocket")
            and k.lower() != b"origin"
        ]
        forward += [
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in self.admitted.upstream_auth
        ]
        url = upstream_url(self.admitted.base_url, self.scope.get("query_string", b""))
        return await Upstream.open(url, forward, conf.get().connect_timeout_s)

    async def receive(self, text_data=None, bytes_data=None):
        if text_data is None:
            return await self.close(CLOSE_UNSUPPORTED, "Text frames only: JSON events.")
        limit = conf.get().proxy_max_body_bytes
        if len(text_data) > limit:  # (characters: at most as many as bytes)
            return await self.close(CLOSE_TOO_BIG, f"A frame is at most {limit} bytes.")
        try:
            event = safejson.loads(text_data)
        except ValueError:
            return await self.close(CLOSE_INVALID, "A frame is a JSON object.")
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return await self.close(CLOSE_INVALID, "A frame is a JSON object with a type.")
        if event["type"] == "response.create":
            return await self._create(text_data, event)
        await self.upstream.send(text_data)

    async def _create(self, text, event):
        try:
            await proxy.admit(self.scope, self.headers, holding=True)
        except proxy.Refused as refusal:
            status, message, _type, code = refusal.args[:4]
            error = {"type": "error", "code": code, "message": message, "param": None}
            return await self.send(text_data=json.dumps({**error, "sequence_number": 0}))
        body = {k: v for k, v in event.items() if k != "type"}  # the body a POST would send
        turn = Turn(self, self.turns[-1] if self.turns else None)
        self.turns.append(turn)
        turn.written_ns = written_ns = await self.upstream.send(text)  # as it came
        admitted = self.admitted
        turn.running = services.start_proxied(
            admitted.bearer.user,
            body,
            upstream_url(admitted.base_url),
            Relayed(written_ns, turn.frames(), turn, self.upstream.receipt_clock),
            tags=admitted.tags,
            session=self.session,
            project=admitted.bearer.project,
            token=admitted.bearer.token.pk,
            format=formats.RESPONSES,
        )

    async def _pump(self):
        """The upstream's frames to the client, first, then to the turn recording them."""
        upstream, code = self.upstream, CLOSE_BROKEN
        new_event = tuple.__new__
        try:
            while True:
                data, t_ns = await upstream.recv()
                try:
                    text, raw = data.decode("utf-8"), None
                except UnicodeDecodeError:  # (the row keeps the bytes as they came)
                    text, raw = data.decode("utf-8", "replace"), data
                sent_ns = None
                if not self.client_left:
                    try:
                        await self.send(text_data=text)
                    except Exception:  # its socket is gone (Daphne refuses sends after it)
                        self.client_left = True
                    else:
                        sent_ns = await self._drained()
                if self.turns:
                    event = (t_ns, "message", "", text, raw, "")
                    self.frames.put_nowait((new_event(ReceivedEvent, event), sent_ns))
                else:  # (no response open: nobody's)
                    self.unrecorded(1)
                if self.client_left:
                    break  # (what came is recorded, never handed over: no sent_us)
        except Closed as closed:
            code = closed.code
            self.too_large = closed.too_large
        finally:
            # (the client's socket closes after this: its leaving then is not why they ended)
            self.left_first = self.client_left
            self.frames.put_nowait(None)
            self.ended = True
            if not self.turns:
                self.leftovers()
        if not self.client_left:
            await self.close(code)

    def unrecorded(self, n):
        """`n` frames the upstream sent while no response of this socket was open (after one's
        terminal event, before the next `response.create`): relayed, but part of no stream.
        Counted (`streamscope_proxy_socket_frames_unrecorded_total`) and said, never dropped
        silently."""
        if n:
            telemetry.proxy_socket_frames_unrecorded(n)
            log.warning(
                "proxy socket (session %s): %d frame(s) the upstream sent outside any response "
                "were relayed, not recorded",
                self.session,
                n,
            )

    def leftovers(self):
        """The frames still queued once the socket ended and no response reads them."""
        n = 0
        while not self.frames.empty():
            n += self.frames.get_nowait() is not None
        self.frames.put_nowait(None)  # (still the end, for a turn that comes late)
        self.unrecorded(n)

    async def _drained(self):
        """When the frame just sent was handed over: once no more than
        PROXY_CLIENT_BUFFER_BYTES wait unread in the server for this client. Until then the
        upstream is not read (network.py's connection stops reading above its high-water mark,
        and TCP's flow control slows the upstream): what the proxy holds for a client that does
        not read is bounded. A client that stays behind for PROXY_SLOW_CLIENT_TIMEOUT_S is let go
        (None): the socket closes with CLOSE_TOO_SLOW, after the frames it had yet to read,
        and its responses end `client_too_slow` with every frame that came."""
        settings = conf.get()
        if await transport.wait_drained(
            self.connection,
            settings.proxy_client_buffer_bytes,
            settings.proxy_slow_client_timeout_s,
            lambda: self.client_left,
        ):
            return None if self.client_left else time.monotonic_ns()
        log.info("proxy socket: the client read nothing for too long; closing it")
        self.too_slow = self.client_left = True
        await self.close(CLOSE_TOO_SLOW)
        return None

    async def disconnect(self, code):
        # The responses it was reading end with the frames that came (every one is recorded,
        # even those a recording that has not caught up has yet to store), cancelled unless
        # their terminal event had come: the upstream's socket is closed, and its end is
        # theirs (`Turn.frames`).
        self.client_left = True
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump
        if self.upstream is not None:
            await self.upstream.close()
        self._release()

    def _release(self):
        if self.admitted is not None:
            admitted, self.admitted = self.admitted, None
            proxy.release(admitted.digest)


websocket_urlpatterns = [
    path("v1/responses", ResponsesSocket.as_asgi(), name="ws_proxy_responses"),
]


def route(sockets):
    """The WebSocket application: `/v1/…` to the proxy's (any other path there refused), the
    rest to `sockets` (the live pages', behind their origin check: the proxy's clients are
    programs that send no Origin, and a token, not a cookie, says who they are)."""
    proxied = URLRouter(websocket_urlpatterns)
    paths = {"/" + str(p.pattern) for p in websocket_urlpatterns}

    async def app(scope, receive, send):
        where = scope.get("path", "")
        if where in paths:
            return await proxied(scope, receive, send)
        if where == "/v1" or where.startswith("/v1/"):
            await receive()  # (the connect)
            return await send({"type": "websocket.close"})
        return await sockets(scope, receive, send)

    return app
