"""The lean upstream transport: HTTP/1.1 behind httpx's transport interface, framed here.

httpx stays the client's API (`make_client`, streams/ingest/upstream.py); below it, instead of
httpcore's connection pool and h11, this module writes the request and reads the response's
head and body (chunked, Content-Length or close-delimited) over network.py's connections, so
the kernel receipt stamps, the request phases (`Phases`, through the `trace` extension, under
httpcore's names) and the read backpressure are exactly network.py's. Measured against httpcore
in `bench proxy` / `bench ingest` (docs/performance.md, "Upstream").

Why not httpcore: its pool scans every connection on each request and each response close,
h11 builds event objects for every chunk, and each read goes through several layers of
generic machinery; for a paced stream (one event per read) that was a large share of the
server's CPU (issue 45). What this keeps of it: pooled keep-alive connections per (scheme,
host, port) with a bound, the connect/read/write/pool timeouts of the request's
`extensions["timeout"]`, TLS with the client's SSLContext, and errors as httpx's exceptions.

A connection goes back to the pool only when its response was read to its end, framed, with
nothing after it: a response closed early (the proxy's client left, a stall, a cancel) closes
its connection, since what is still in flight on it would be read as the next response.
"""

import asyncio
import collections
import time

import httpcore
import httpx

from streams.ingest.network import Backend

# httpcore's names, which `network.Phases.trace` maps to phases (and any other trace reader knows)
_CONNECTED = "connection.connect_tcp.complete"
_TLS_DONE = "connection.start_tls.complete"
_WRITTEN = "http11.send_request_body.complete"
_HEADERS = "http11.receive_response_headers.complete"

MAX_HEAD_BYTES = 64 * 1024  # a response head larger than this is refused (h11's default limit)
READ_SIZE = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})

# network.py's streams raise httpcore's exceptions; the recorder knows httpx's (httpx's own
# transport maps them the same way).
_ERRORS = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
)


def _as_httpx(exc, request):
    for theirs, ours in _ERRORS:
        if isinstance(exc, theirs):
            return ours(str(exc) or type(exc).__name__, request=request)
    return httpx.TransportError(str(exc) or type(exc).__name__, request=request)


class _Connection:
    """One connection to one origin, and its bytes read but not yet consumed."""

    __slots__ = ("key", "stream", "buffer", "idle_since")

    def __init__(self, key, stream):
        self.key = key
        self.stream = stream
        self.buffer = b""
        self.idle_since = 0.0

    def is_reusable(self, now, expiry):
        return (
            now - self.idle_since < expiry
            and not self.buffer
            and not self.stream.get_extra_info("is_readable")  # closed by the server, or junk
        )


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx's transport on our own HTTP/1.1 client. `max_connections` bounds the connections
    open at once (idle ones included; an idle one of another origin is closed to make room),
    `max_keepalive` the idle ones kept, each for at most `keepalive_expiry` seconds."""

    def __init__(
        self,
        ssl_context=None,
        max_connections=2000,
        max_keepalive=200,
        keepalive_expiry=5.0,
        backend=None,
    ):
        self._ssl_context = ssl_context  # None: built at the first https:// connection
        self._max_connections = max_connections
        self._max_keepalive = max_keepalive
        self._expiry = keepalive_expiry
        self._backend = backend or Backend()
        self._idle = {}  # key -> deque of idle connections, the most recent last
        self._idle_count = 0
        self._open = 0
        self._waiters = collections.deque()  # futures of requests waiting for room
        self._closed = False

    # --- the pool ---------------------------------------------------------------------------

    def _take_idle(self, key):
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if conn.is_reusable(now, self._expiry):
                return conn
            self._discard(conn)
        return None

    def _evict_one(self):
        """Close the longest-idle connection of any origin (room for a new one)."""
        oldest = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is None:
            return False
        self._idle_count -= 1
        oldest.popleft().stream.close()
        self._open -= 1  # (no wake-up: the caller takes this room at once)
        return True

    async def _acquire(self, key, timeouts):
        """(connection, reused): an idle connection to `key`'s origin, or a new one once there
        is room (waiting at most the pool timeout)."""
        deadline = None
        while True:
            conn = self._take_idle(key)
            if conn is not None:
                return conn, True
            if self._open < self._max_connections or self._evict_one():
                self._open += 1
                try:
                    return await self._connect(key, timeouts), False
                except BaseException:
                    self._release_slot()
                    raise
            loop = asyncio.get_running_loop()
            pool_timeout = timeouts.get("pool")
            if deadline is None and pool_timeout is not None:
                deadline = loop.time() + pool_timeout
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise httpcore.PoolTimeout("no connection to the upstream free in time") from None
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, but leaving: the room goes to the next in line
                raise
            finally:
                if not waiter.done():  # (timed out or cancelled: no longer waiting)
                    self._waiters.remove(waiter)

    async def _connect(self, key, timeouts):
        scheme, host, port = key
        connect_timeout = timeouts.get("connect")
        stream = await self._backend.connect_tcp(host, port, timeout=connect_timeout)
        if scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = httpx.create_ssl_context(trust_env=False)
            try:
                stream = await stream.start_tls(
                    self._ssl_context, server_hostname=host, timeout=connect_timeout
                )
            except BaseException:
                await stream.aclose()
                raise
        return _Connection(key, stream)

    def _release_slot(self):
        self._open -= 1
        self._wake()

    def _wake(self):
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _discard(self, conn):
        conn.stream.close()
        self._release_slot()

    def _give_back(self, conn):
        if self._closed or self._idle_count >= self._max_keepalive:
            self._discard(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, collections.deque()).append(conn)
        self._idle_count += 1
        self._wake()  # a request waiting for room may close it, or use it

    # --- one exchange -----------------------------------------------------------------------

    async def handle_async_request(self, request):
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}", request=request)
        port = url.port or (443 if scheme == "https" else 80)
        key = (scheme, url.host, port)
        timeouts = request.extensions.get("timeout", {})
        trace = request.extensions.get("trace")
        conn = None
        try:
            conn, reused = await self._acquire(key, timeouts)
            if trace is not None and not reused:
                # (the latest of these is the `connected` phase: TLS when there is TLS)
                await trace(_TLS_DONE if scheme == "https" else _CONNECTED, {})
            await self._send(conn, request, timeouts)
            if trace is not None:
                await trace(_WRITTEN, {})
            head = await self._read_head(conn, request, timeouts.get("read"))
            if trace is not None:
                await trace(_HEADERS, {"return_value": head})
        except BaseException as exc:
            if conn is not None:
                self._discard(conn)
            if isinstance(exc, httpcore.NetworkError | httpcore.TimeoutException):
                raise _as_httpx(exc, request) from exc
            raise
        status, reason, headers, body = head
        return httpx.Response(
            status,
            headers=headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    async def _send(self, conn, request, timeouts):
        """The request's head and body; in one write when the body is already in memory."""
        parts = [
            request.method.encode("ascii"),
            b" ",
            request.url.raw_path,
            b" HTTP/1.1\r\n",
        ]
        chunked = False
        for name, value in request.headers.raw:
            parts += (name, b": ", value, b"\r\n")
            if name.lower() == b"transfer-encoding" and value.lower() == b"chunked":
                chunked = True
        parts.append(b"\r\n")
        head = b"".join(parts)
        # A line break inside a name or value would start a header (or a request) of its own:
        # the proxy forwards its client's headers (h11 refused these too).
        lines = len(request.headers.raw) + 2
        if head.count(b"\n") != lines or head.count(b"\r") != lines:
            raise httpx.LocalProtocolError("a line break in the request's head", request=request)
        write_timeout = timeouts.get("write")
        stream = request.stream
        if isinstance(stream, httpx.ByteStream):  # content=, json=: all in memory
            body = b"".join(stream)
            if chunked and body:
                body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            elif chunked:
                body = b"0\r\n\r\n"
            await conn.stream.write(head + body, write_timeout)
            return
        await conn.stream.write(head, write_timeout)
        async for part in stream:
            if part:
                await conn.stream.write(
                    b"%x\r\n%s\r\n" % (len(part), part) if chunked else part, write_timeout
                )
        if chunked:
            await conn.stream.write(b"0\r\n\r\n", write_timeout)

    async def _read_head(self, conn, request, read_timeout):
        """(status, reason, headers, body stream) of the first final response on `conn`."""
        read = conn.stream.read
        while True:
            buffer = conn.buffer
            start = 0
            while True:
                end = buffer.find(b"\r\n\r\n", start)
                if end > MAX_HEAD_BYTES or (end < 0 and len(buffer) > MAX_HEAD_BYTES):
                    raise httpx.RemoteProtocolError("response head too large", request=request)
                if end >= 0:
                    break
                start = max(0, len(buffer) - 3)
                data = await read(READ_SIZE, read_timeout)
                if not data:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    )
                buffer += data
            conn.buffer = buffer[end + 4 :]
            status, reason, headers, version = _parse_head(buffer[:end], request)
            if 100 <= status < 200 and status != 101:
                continue  # informational (100 Continue, 103 Early Hints): the answer follows
            break
        body = _Body(self, conn, request, read_timeout)
        body.frame(status, headers, version)
        return status, reason, headers, body

    async def aclose(self):
        self._closed = True
        for idle in self._idle.values():
            while idle:
                self._discard(idle.pop())
        self._idle.clear()
        self._idle_count = 0


def _parse_head(head, request):
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}", request=request)
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in b" \t":
            raise httpx.RemoteProtocolError("malformed response header", request=request)
        headers.append((name, value.strip(b" \t")))
    return int(code), reason, headers, version


class _Body(httpx.AsyncByteStream):
    """A response's body as it arrives: each item is the body bytes of one read (network.py's
    stream stamps `Phases.last_read_ns` with that read's arrival, which the recorder takes as
    the receipt time of what it gets), so no bytes are held back to a later read's stamp."""

    def __init__(self, transport, conn, request, read_timeout):
        self._transport = transport
        self._conn = conn
        self._request = request
        self._read_timeout = read_timeout
        self._keep_alive = False
        self._mode = "close"  # "length", "chunked", "close", "none"
        self._remaining = 0  # body bytes left (length) or of the current chunk (chunked)
        self._chunk_state = "size"  # chunked: "size", "data", "crlf", "trailers", "done"
        self._done = False

    def frame(self, status, headers, version):
        connection = transfer = length = None
        for name, value in headers:
            lower = name.lower()
            if lower == b"transfer-encoding":
                transfer = value.lower()
            elif lower == b"content-length":
                if length is not None and length != value:
                    raise httpx.RemoteProtocolError(
                        "conflicting Content-Length", request=self._request
                    )
                length = value
            elif lower == b"connection":
                connection = value.lower()
        self._keep_alive = version == b"HTTP/1.1" and not (connection and b"close" in connection)
        for name, value in self._request.headers.raw:
            if name.lower() == b"connection" and b"close" in value.lower():
                self._keep_alive = False
        if self._request.method == "HEAD" or status in _NO_BODY_STATUS:
            self._mode = "none"
        elif transfer is not None:
            if transfer.rsplit(b",", 1)[-1].strip() != b"chunked":
                self._keep_alive = False  # (framed by the close, RFC 9112 6.3)
            else:
                self._mode = "chunked"
        elif length is not None:
            if not length.isdigit():
                raise httpx.RemoteProtocolError("malformed Content-Length", request=self._request)
            self._mode = "length"
            self._remaining = int(length)
        if self._mode == "close":
            self._keep_alive = False
        if self._mode == "none" or (self._mode == "length" and not self._remaining):
            self._finish()

    async def __aiter__(self):
        conn = self._conn
        if conn is None:
            return
        read = conn.stream.read
        try:
            data, conn.buffer = conn.buffer, b""
            while not self._done:
                if data:
                    out = self._take(data)  # (an incomplete chunk line waits in conn.buffer)
                    if out:
                        yield out
                    if self._done:
                        break
                new = await read(READ_SIZE, self._read_timeout)
                if not new:
                    if self._mode != "close":
                        raise httpx.RemoteProtocolError(
                            "peer closed connection without sending complete message body",
                            request=self._request,
                        )
                    self._finish()
                    break
                data, conn.buffer = conn.buffer + new if conn.buffer else new, b""
        except (httpcore.NetworkError, httpcore.TimeoutException) as exc:
            self._close_connection()
            raise _as_httpx(exc, self._request) from exc
        except BaseException:
            self._close_connection()
            raise

    def _take(self, data):
        """The body bytes in `data`; framing consumed; what follows the body kept."""
        mode = self._mode
        if mode == "close":
            return data
        if mode == "length":
            if len(data) >= self._remaining:
                out, rest = data[: self._remaining], data[self._remaining :]
                self._remaining = 0
                self._conn.buffer = rest
                self._finish()
                return out
            self._remaining -= len(data)
            return data
        return self._dechunk(data)

    def _dechunk(self, data):
        out = []
        pos = 0
        size = len(data)
        conn = self._conn
        while pos < size:
            state = self._chunk_state
            if state == "data":
                take = min(self._remaining, size - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._chunk_state = "crlf"
                continue
            # a line: a chunk's size, the CRLF after its data, or a trailer
            end = data.find(b"\r\n", pos)
            if end < 0:
                # an incomplete line waits in the buffer for the next read
                rest = data[pos:]
                if len(rest) > MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError("chunk line too long", request=self._request)
                conn.buffer = rest
                break
            line = data[pos:end]
            pos = end + 2
            if state == "crlf":
                if line:
                    raise httpx.RemoteProtocolError("malformed chunk end", request=self._request)
                self._chunk_state = "size"
            elif state == "size":
                hex_size = line.split(b";", 1)[0].strip()
                try:
                    self._remaining = int(hex_size, 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(
                        "malformed chunk size", request=self._request
                    ) from None
                if not hex_size or hex_size.strip(b"0123456789abcdefABCDEF"):
                    raise httpx.RemoteProtocolError("malformed chunk size", request=self._request)
                self._chunk_state = "data" if self._remaining else "trailers"
            else:  # trailers, ended by an empty line
                if not line:
                    conn.buffer = data[pos:]
                    self._finish()
                    break
        return b"".join(out)

    def _finish(self):
        self._done = True

    def _close_connection(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            self._transport._discard(conn)

    async def aclose(self):
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep_alive and not conn.buffer:
            self._transport._give_back(conn)
        else:
            self._transport._discard(conn)
