"""The upstream client: a request body in, received events out, with receipt times.

The only module that sends requests to the upstream. Timing rules (docs/measurement.md): every
event is stamped with `time.monotonic_ns()` when the bytes carrying it are handed to us, and the
request phases come from httpx's `trace` extension, so queueing inside our own process is never
charged to the upstream.

Lines are split here at the byte level so that data which is not valid UTF-8 can be kept
verbatim (`ReceivedEvent.raw`) instead of being silently replaced; the field semantics of each
line (event/data/id/retry, comments) are httpx-sse's own `SSEDecoder`.
"""

import asyncio
import collections
import contextlib
import contextvars
import ssl
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import httpcore
import httpx
from httpx_sse._decoders import SSEDecoder

TRACE_PHASES = {
    "connection.connect_tcp.complete": "connected",
    "connection.start_tls.complete": "connected",
    "http11.send_request_body.complete": "request_written",
    "http2.send_request_body.complete": "request_written",
    "http11.receive_response_headers.complete": "headers",
    "http2.receive_response_headers.complete": "headers",
}


class ReceivedEvent(NamedTuple):
    """A tuple: the garbage collector stops tracking it at its first collection (a slots
    class stayed tracked, and was scanned again and again while a chunk waited for the
    writer)."""

    t_ns: int  # monotonic receipt time of the bytes that completed this event
    event_name: str
    sse_id: str
    data: str
    raw: bytes | None = None  # undecoded data, only when it was not valid UTF-8


# tuple.__new__(ReceivedEvent, values): a NamedTuple's own constructor is a Python function,
# markedly slower, and this runs once per event (docs/performance.md, "Upstream").
_new_event = tuple.__new__


@dataclass
class Phases:
    """Monotonic ns of each request phase, filled by httpx's trace callback."""

    marks: dict = field(default_factory=dict)
    last_write_ns: int = 0  # when bytes of this request last went to the socket
    # When the newest bytes of the last read from the socket arrived (stamped in the
    # protocol's data_received, not when the reading task got round to them: on a busy loop
    # that was later, and the receipt times of events are measurements; docs/performance.md).
    last_read_ns: int = 0

    async def trace(self, name, info):
        phase = TRACE_PHASES.get(name)
        if phase is not None:
            now = time.monotonic_ns()
            if phase == "request_written" and self.last_write_ns:
                # httpcore reports the body complete after one more, empty, write, which
                # yields to the event loop first: under load that came well after the last
                # byte had left (docs/performance.md, "Upstream").
                now = self.last_write_ns
            elif phase == "headers" and self.last_read_ns:
                # like events: when the bytes that completed them arrived
                now = self.last_read_ns
            # `connected` keeps the latest (TLS completes after TCP); the rest keep the first.
            if phase == "connected" or phase not in self.marks:
                self.marks[phase] = now

    def activate(self):
        """Make this the request whose writes the current task's connection reports."""
        _current_phases.set(self)


_current_phases = contextvars.ContextVar("streamscope_phases", default=None)


class _Protocol(asyncio.Protocol):
    """Bytes received on one connection, until `_Stream.read` takes them. Reading pauses
    above HIGH_WATER buffered bytes: TCP backpressure when the recorder falls behind."""

    HIGH_WATER = 1 << 20

    def __init__(self):
        self.transport = None
        self.chunks = collections.deque()
        self.arrivals = collections.deque()  # monotonic ns of each chunk's arrival
        self.size = 0
        self.eof = False
        self.error = None
        self.reading_paused = False
        self.waiter = None  # a reader waiting for data
        self.drain = None  # a writer waiting for the transport's buffer to drain
        self.writing_paused = False

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.chunks.append(data)
        self.arrivals.append(time.monotonic_ns())
        self.size += len(data)
        if self.size > self.HIGH_WATER and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self):
        self.eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc):
        self.eof = True
        if exc is not None:
            self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self):
        self.writing_paused = True

    def resume_writing(self):
        self.writing_paused = False
        drain, self.drain = self.drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def _wake(self):
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Stream(httpcore.AsyncNetworkStream):
    """httpcore's network stream on a plain asyncio transport and protocol, noting when a
    request's bytes were handed to the socket (for `request_written`).

    Not httpcore's AnyIO backend: its per-read cancel scope, async-library sniffing and reader
    re-registration cost a lot per read, and a paced upstream sends one event per read: with
    many paced streams they were a large share of the server's CPU (docs/performance.md,
    "Upstream")."""

    def __init__(self, transport, protocol):
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes, timeout=None):
        protocol = self._protocol
        if protocol.chunks:
            # Already here: still let the other tasks run first. A reader that never waits
            # (a burst faster than we parse) would otherwise keep the loop from the viewers
            # and the other streams until its buffer ran dry.
            await asyncio.sleep(0)
        if not protocol.chunks:
            if protocol.error is not None:
                raise httpcore.ReadError(str(protocol.error) or type(protocol.error).__name__)
            if protocol.eof:
                return b""
            protocol.waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:
                    await waiter
                else:
                    async with asyncio.timeout(timeout):
                        await waiter
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out reading from the upstream") from None
            return await self.read(max_bytes, timeout)
        chunks = protocol.chunks
        arrivals = protocol.arrivals
        data = chunks.popleft()
        arrived = arrivals.popleft()
        if len(data) > max_bytes:
            chunks.appendleft(data[max_bytes:])
            arrivals.appendleft(arrived)
            data = data[:max_bytes]
        elif chunks and len(data) + len(chunks[0]) <= max_bytes:
            # several arrivals waiting (a loaded loop): one read, one pass through h11
            parts = [data]
            size = len(data)
            while chunks and size + len(chunks[0]) <= max_bytes:
                part = chunks.popleft()
                arrived = arrivals.popleft()
                parts.append(part)
                size += len(part)
            data = b"".join(parts)
        phases = _current_phases.get()
        if phases is not None:
            phases.last_read_ns = arrived
        protocol.size -= len(data)
        if protocol.reading_paused and protocol.size <= protocol.HIGH_WATER // 4:
            protocol.reading_paused = False
            self._transport.resume_reading()
        return data

    async def write(self, buffer, timeout=None):
        if not buffer:
            return
        protocol = self._protocol
        if protocol.eof or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if protocol.writing_paused:
            protocol.drain = drain = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await drain
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out writing to the upstream") from None
            if protocol.error is not None:
                raise httpcore.WriteError(str(protocol.error))
        phases = _current_phases.get()
        if phases is not None:
            phases.last_write_ns = time.monotonic_ns()

    async def aclose(self):
        self._transport.close()

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                self._transport,
                self._protocol,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        # Flow control from now on through the TLS transport (pausing the raw one beneath it
        # behind its back could leave reading paused for good).
        self._protocol.transport = transport
        return _Stream(transport, self._protocol)

    def get_extra_info(self, info):
        transport = self._transport
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":
            # an idle connection with something to read was closed by the server
            protocol = self._protocol
            return protocol.eof or bool(protocol.chunks)
        return None


class _Backend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol,
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("Unix sockets are not supported for the upstream")

    async def sleep(self, seconds):
        await asyncio.sleep(seconds)


class UpstreamError(Exception):
    """The upstream answered in a way that is not an event stream."""

    def __init__(self, code, message, http_status=None, body=""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status
        self.body = body


def make_client(connect_timeout=10.0, max_connections=2000, keepalive=200, ssl_context=None):
    # No read timeout here: the stall rule (no event for N s) is enforced by the recorder,
    # which knows when an event arrived. Building an SSL context (certifi's bundle) is slow
    # and blocks the loop: pass one to share (docs/performance.md, "Upstream").
    transport = httpx.AsyncHTTPTransport(
        verify=ssl_context if ssl_context is not None else True,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=keepalive),
        trust_env=False,
    )
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        # httpx has no public hook for this; without it `request_written` falls back to
        # httpx's trace event (see Phases.trace), and reads cost more (see _Stream).
        pool._network_backend = _Backend()
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(connect=connect_timeout, read=None, write=30.0, pool=None),
        trust_env=False,
    )


class ClientPool:
    """The upstream clients of one event loop: `stream()` as on an httpx.AsyncClient, spread
    over clients that each hold at most `shard_streams` streams (and `keepalive` idle
    connections), opened as needed and filled in order so idle connections get reused.

    Not one client: httpcore (1.0.9) scans its whole pool on every request and response
    close, and for every idle connection counts the pool again, so a pool's cost grows with
    the square of its size. With 100 streams starting beside the 100 idle keep-alive
    connections of the previous 100, starting them stalled the event loop, and the pool took
    a large share of the process's CPU (docs/performance.md, "Upstream")."""

    def __init__(self, connect_timeout=10.0, shard_streams=16, keepalive=8):
        self.connect_timeout = connect_timeout
        self.shard_streams = shard_streams
        self.keepalive = keepalive
        self.shards = []  # [client, streams in flight]
        self.ssl_context = None  # one for all shards: building each one blocks the loop

    @contextlib.asynccontextmanager
    async def stream(self, method, url, **kwargs):
        shard = next((s for s in self.shards if s[1] < self.shard_streams), None)
        if shard is None:
            if self.ssl_context is None:
                self.ssl_context = httpx.create_ssl_context(trust_env=False)
            client = make_client(
                self.connect_timeout, keepalive=self.keepalive, ssl_context=self.ssl_context
            )
            shard = [client, 0]
            self.shards.append(shard)
        shard[1] += 1
        try:
            async with shard[0].stream(method, url, **kwargs) as response:
                yield response
        finally:
            shard[1] -= 1

    async def aclose(self):
        for client, _ in self.shards:
            await client.aclose()
        self.shards = []


def request_headers(api_key):
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


async def read_error_body(response, limit=64 * 1024):
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    return body[:limit].decode("utf-8", errors="replace")


def error_from_body(text):
    """(code, message) from an OpenAI-style JSON error body, if it is one."""
    import json

    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None, None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return str(err.get("code") or err.get("type") or ""), str(err.get("message") or "")
    return None, None


def check_response(response, body_text=None):
    """Raise UpstreamError unless `response` is a 2xx `text/event-stream`."""
    status = response.status_code
    if status >= 400:
        code, message = error_from_body(body_text or "")
        raise UpstreamError(
            code or f"http_{status}",
            message or f"HTTP {status} {response.reason_phrase}".strip(),
            http_status=status,
            body=body_text or "",
        )
    content_type = response.headers.get("content-type", "")
    if "text/event-stream" not in content_type.partition(";")[0]:
        raise UpstreamError(
            "wrong_content_type",
            f"expected text/event-stream, got {content_type or 'no Content-Type'!r}",
            http_status=status,
            body=body_text or "",
        )


class EventReader:
    """Incremental bytes → events, keeping receipt time and undecodable bytes.

    Fast path: the complete lines of a chunk are decoded in one go. A chunk with bytes that are
    not UTF-8 takes the per-line path, which keeps the raw value of each bad `data` line, so
    the event's `raw` holds exactly the bytes that arrived."""

    def __init__(self):
        self._decoder = SSEDecoder()
        self._line = b""  # an unterminated line carried to the next chunk
        self._skip_lf = False  # a chunk ended in CR: a LF at the start of the next belongs to it
        self._raw = {}  # position in the block's data lines → raw bytes, for non-UTF-8 lines

    def feed(self, chunk, t_ns):
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._skip_lf = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._line:
            chunk = self._line + chunk
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._line = chunk
            return []
        self._line = chunk[cut + 1 :]
        complete = chunk[:cut]
        if not self._raw:
            try:
                text = complete.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                return self._lines(text.split("\n"), t_ns)
        out = []
        for line in complete.split(b"\n"):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                text = line.decode("utf-8", errors="replace")
                if _is_data(text):
                    self._raw[len(self._decoder._data)] = _field_value(line)
            out.extend(self._lines((text,), t_ns))
        return out

    def _lines(self, lines, t_ns):
        """Decoded lines into events. `data: ` and `event: ` lines and the blank line that ends
        a block change the decoder's state here exactly as `SSEDecoder.decode` would, without a
        call, a `ServerSentEvent` and its checks per line (every event has two or three lines,
        and with those the reader was a large share of the pipeline's time; docs/performance.md,
        "Upstream"). Any other line goes to the decoder."""
        out = []
        decoder = self._decoder
        decode = decoder.decode
        data = decoder._data
        for line in lines:
            if line.startswith("data: "):
                data.append(line[6:])
            elif line.startswith("event: "):
                decoder._event = line[7:]
            elif line:
                decode(line)
            else:
                # WHATWG: a block with an empty data buffer (comments, retry:, a lone event:)
                # is not an event; a `data:` line, even empty, fills it.
                if data:
                    raw = None
                    if self._raw:  # (only ever for data lines: the per-line path)
                        raw = b"\n".join(self._raw.get(i, v.encode()) for i, v in enumerate(data))
                        self._raw = {}
                    out.append(
                        _new_event(
                            ReceivedEvent,
                            (
                                t_ns,
                                decoder._event or "message",
                                decoder._last_event_id,
                                "\n".join(data),
                                raw,
                            ),
                        )
                    )
                decoder._event = ""
                decoder._data = data = []
                decoder._retry = None
        return out

    def close(self, t_ns):
        """End of body: an event never terminated by a blank line is not dispatched (WHATWG)."""
        self._line = b""
        return []


def _is_data(line):
    return line.startswith("data:") or line == "data"


def _field_value(line):
    _, _, value = line.partition(b":")
    return value[1:] if value.startswith(b" ") else value


def list_models(base_url, api_key="", timeout=3.0):
    """`GET {base_url}/models`: the upstream's model objects (`[{"id", "owned_by", …}]`).

    Sync and short-timeout on purpose: it runs for a page render (streams.catalog caches it).
    Raises UpstreamError for anything but a 200 with an OpenAI-style `{"data": [...]}` list."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            response = client.get(base_url.rstrip("/") + "/models", headers=headers)
    except httpx.HTTPError as exc:
        raise UpstreamError("connect_error", f"{type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        code, message = error_from_body(response.text)
        raise UpstreamError(
            code or f"http_{response.status_code}",
            message or f"HTTP {response.status_code}",
            http_status=response.status_code,
        )
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError, RecursionError):
        data = None
    if not isinstance(data, list):
        raise UpstreamError("bad_models_list", "GET /models did not answer {'data': [...]}")
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
