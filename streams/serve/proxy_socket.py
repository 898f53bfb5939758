"""The recording proxy's WebSocket: the Responses API's WebSocket mode, `GET /v1/responses`
upgraded, as the openai SDK's `client.responses.connect()` opens it.

    with client.responses.connect() as connection:          # base_url …/v1, api_key ss_…
        connection.send({"type": "response.create", "model": …, "input": …})
        for event in connection: …

Let in as a POST to the HTTP proxy is (streams/serve/proxy.py, `admit`: the same tokens, the
`proxy` scope, the user's role through the one project rule, spend caps, pass-through keys
handed to the egress gate), refused before the handshake completes otherwise (Daphne answers
403); an open socket counts as one of its token's requests in flight. Then the upstream's
WebSocket is opened (no compression: frames are relayed as they came) and both directions are
relayed, the upstream's frames to the client first, before anything else happens to them.

What the protocol says a response is decides what a stream is: each `response.create` the
client sends is one stream, recorded the one way proxied streams are
(`services.start_proxied`, the runner, `recorder.Relayed`): the token is checked again for
it (a refused create gets an `error` event and goes nowhere), its frames are its events, each
with its receipt time and the time its client had it, TTFT from the frame that carried the
`response.create` upstream to the first output delta, usage and cost from the terminal event.
The responses of one socket are one session (the client's `X-Streamscope-Session`, or the
socket's own). A response ends when the checker has seen its terminal event; frames after it
and before the next `response.create` are relayed, not recorded. Other client frames
(`response.steer`, …) go upstream as they came.

Bad input closes the socket with a code saying why: a binary frame 4003, a frame that is not a
JSON object with a `type` 4007, one over PROXY_MAX_BODY_BYTES 4009 (WebSocket's 1003, 1007
and 1009 in the application's range). An upstream that closes closes the client's socket
(1000 when it closed normally, else 4011); a client that leaves ends the responses it was
reading with the frames that came, cancelled (`client_disconnected`) unless their terminal
event had come. Every frame sent passes the egress gate
(dashboard/asgi.py), like every response.
"""

import asyncio
import contextlib
import json
import logging
import time
import uuid

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import URLRouter
from django.urls import path
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from streams.core import conf, formats, safejson
from streams.ingest.recorder import Relayed
from streams.ingest.upstream import ReceivedEvent
from streams.run import services
from streams.serve import proxy

log = logging.getLogger(__name__)

# Close codes: 1003, 1007, 1009 and 1011 in the application's range (Daphne's Autobahn lets a
# server close with 1000 or 3000–4999 only, and sends no reason).
CLOSE_UNSUPPORTED, CLOSE_INVALID, CLOSE_TOO_BIG, CLOSE_BROKEN = 4003, 4007, 4009, 4011


class StampedConnection(ClientConnection):
    """The upstream's socket, noting when its newest bytes came (a frame's receipt time is
    that of the read that completed it, as for the HTTP proxy's chunks)."""

    last_read_ns = 0

    def data_received(self, data):
        self.last_read_ns = time.monotonic_ns()
        super().data_received(data)


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

    async def frames(self):
        if self.previous is not None:
            await self.previous.done.wait()
        queue = self.socket.frames
        try:
            while not self.running.ended_upstream():
                item = await queue.get()
                if item is None:  # the socket ended: every later turn ends too
                    queue.put_nowait(None)
                    if self.socket.client_left:
                        # what came is recorded; the rest was never asked for
                        self.running.cancel("client_disconnected")
                        await asyncio.sleep(0)
                    return
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
        return await connect(
            url,
            additional_headers=forward,
            user_agent_header=None,
            compression=None,  # frames as they came: nothing to inflate, nothing to re-deflate
            max_size=None,
            open_timeout=conf.get().connect_timeout_s,
            ping_interval=None,  # (the client's pings are its own)
            create_connection=StampedConnection,
        )

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
        await self.upstream.send(text)  # as it came
        written_ns = time.monotonic_ns()
        admitted = self.admitted
        turn.running = services.start_proxied(
            admitted.bearer.user,
            body,
            upstream_url(admitted.base_url),
            Relayed(written_ns, turn.frames(), turn),
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
                data = await upstream.recv(decode=False)
                t_ns = upstream.last_read_ns or time.monotonic_ns()
                try:
                    text, raw = data.decode("utf-8"), None
                except UnicodeDecodeError:  # (the row keeps the bytes as they came)
                    text, raw = data.decode("utf-8", "replace"), data
                sent_ns = None
                if not self.client_left:
                    try:
                        await self.send(text_data=text)
                        sent_ns = time.monotonic_ns()
                    except Exception:  # its socket is gone (Daphne refuses sends after it)
                        self.client_left = True
                if self.turns:
                    event = (t_ns, "message", "", text, raw, "")
                    self.frames.put_nowait((new_event(ReceivedEvent, event), sent_ns))
                if self.client_left:
                    break  # (what came is recorded, never handed over: no sent_us)
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code in (1000, 1001):
                code = 1000
        finally:
            self.frames.put_nowait(None)
        if not self.client_left:
            await self.close(code)

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
            with contextlib.suppress(Exception):
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
