"""The network under the upstream client: connections whose received bytes carry their
receipt time, and the request phases httpx's `trace` extension reports.

`Backend` is httpcore's network backend for the upstream pool (streams/ingest/upstream.py's
`make_client`). On plain TCP the kernel stamps what it receives (`SO_TIMESTAMPNS`) and what it
sent (`SO_TIMESTAMPING`), on the `time.monotonic_ns()` clock; where that is not possible (TLS,
another platform) the bytes are stamped when they are handed to our socket protocol, never when
a busy loop's reading task gets round to them. `Phases` keeps the request's milestones
(connected, request written, headers), with the request written when the send that finished it
returned. Reading pauses above a high-water mark: TCP backpressure when the recorder falls
behind (docs/measurement.md, docs/performance.md "Upstream").
"""

import asyncio
import collections
import contextvars
import os
import socket
import ssl
import struct
import sys
import time
from dataclasses import dataclass, field

import httpcore

TRACE_PHASES = {
    "connection.connect_tcp.complete": "connected",
    "connection.start_tls.complete": "connected",
    "http11.send_request_body.complete": "request_written",
    "http2.send_request_body.complete": "request_written",
    "http11.receive_response_headers.complete": "headers",
    "http2.receive_response_headers.complete": "headers",
}


@dataclass
class Phases:
    """Monotonic ns of each request phase, filled by httpx's trace callback."""

    marks: dict = field(default_factory=dict)
    last_write_ns: int = 0  # when bytes of this request last went to the socket
    # When the newest bytes of the last read from the socket arrived (stamped in the
    # protocol's data_received, not when the reading task got round to them: on a busy loop
    # that was later, and the receipt times of events are measurements; docs/performance.md).
    last_read_ns: int = 0
    # Which clock those times came from ("kernel" or "loop", streams.core.conf.RECEIPT_CLOCKS): the
    # connection that wrote the request says, so a stream records the clock it really had.
    receipt_clock: str = ""

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
        self.data_arrived(data, time.monotonic_ns())

    def data_arrived(self, data, t_ns):
        """`data`, received at `t_ns` (monotonic): the kernel's stamp on plain TCP
        (`_KernelTransport`), else now, in the loop's callback."""
        self.chunks.append(data)
        self.arrivals.append(t_ns)
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

    receipt_clock = "loop"
    # Arrivals read together are at most this far apart (their events carry the newest time).
    MERGE_NS = 250_000

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
        elif (
            chunks
            and len(data) + len(chunks[0]) <= max_bytes
            and arrivals[0] - arrived <= self.MERGE_NS
        ):
            # several arrivals waiting (a burst): one read, one pass through h11. Only those of
            # one moment: the bytes of one read share its newest arrival time, and the kernel
            # stamped each arrival apart, so a paced stream read late keeps its times.
            first = arrived
            parts = [data]
            size = len(data)
            while (
                chunks
                and size + len(chunks[0]) <= max_bytes
                and arrivals[0] - first <= self.MERGE_NS
            ):
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
            phases.receipt_clock = self.receipt_clock

    async def aclose(self):
        self.close()

    def close(self):
        """Close at once (the lean transport's pool closes connections from sync code)."""
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


# --- Kernel receipt times (plain TCP) ----------------------------------------------------------
# The loop's callback runs when the loop gets round to the socket: every loop delay (a long
# callback, a collection, a neighbour process on the same core) was charged to the upstream,
# late by milliseconds at the median with a CPU hog beside us (docs/performance.md, "Upstream";
# docs/measurement.md). The kernel stamps each segment when it receives it, and `recvmsg` hands
# us the stamp of the newest bytes of each read, however late we read them.

# Python 3.11's socket module lacks the constant; its value on Linux (asm-generic/socket.h).
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: tv_sec, tv_nsec
# The request's send time, also from the kernel: SO_TIMESTAMPING's software transmit stamp of
# the last byte of each send (OPT_ID numbers it by byte offset; OPT_TSONLY: the stamp without a
# copy of the packet). Our own clock read around the send syscall was not enough: after it the
# thread waits to take the GIL back, before it another thread may take the GIL, and with the
# writer thread committing beside 50 streams either came off for a few of them
# (docs/performance.md, "Upstream").
_SO_TIMESTAMPING = 37 if sys.platform == "linux" else None
_TX_FLAGS = (1 << 1) | (1 << 4) | (1 << 7) | (1 << 11)  # TX_SOFTWARE, SOFTWARE, OPT_ID, OPT_TSONLY
_SOCK_EXTENDED_ERR = struct.Struct("=IBBBBII")  # errno, origin, type, code, pad, info, data
_EE_ORIGIN_TIMESTAMPING = 4
_RECVERR = {(socket.IPPROTO_IP, 11), (socket.IPPROTO_IPV6, 25)}  # IP_RECVERR, IPV6_RECVERR
_HAS_CMSG = hasattr(socket, "CMSG_SPACE")
# a read's SCM_TIMESTAMPNS, and the SCM_TIMESTAMPING (3 timespecs) SO_TIMESTAMPING adds to it
_ANCILLARY = socket.CMSG_SPACE(16) + socket.CMSG_SPACE(48) if _HAS_CMSG else 0
# a transmit stamp: SCM_TIMESTAMPING and IP(V6)_RECVERR (sock_extended_err + an address)
_TX_ANCILLARY = socket.CMSG_SPACE(48) + socket.CMSG_SPACE(16 + 28) + 64 if _HAS_CMSG else 0
_READ_SIZE = 256 * 1024  # one recvmsg: what a fast upstream's burst fills before we look


class _ClockOffset:
    """CLOCK_REALTIME (the kernel's stamps) − CLOCK_MONOTONIC (everything we measure), for the
    whole process. The best of several paired readings (the tightest bracket: a pair split by
    a preemption is discarded), re-measured every RECHECK_NS: an NTP step moves the real-time
    clock, and then every stamp converted with the old offset would be off by the step."""

    RECHECK_NS = 2_000_000_000
    PAIRS = 5

    def __init__(self):
        self.offset_ns = None
        self.due_ns = 0

    def measure(self):
        best = None
        for _ in range(self.PAIRS):
            before = time.monotonic_ns()
            real = time.time_ns()
            after = time.monotonic_ns()
            if best is None or after - before < best[0]:
                best = (after - before, real - (before + after) // 2)
        self.offset_ns = best[1]
        self.due_ns = after + self.RECHECK_NS

    def monotonic(self, realtime_ns, now_ns):
        """`realtime_ns` (a kernel stamp) on the monotonic clock; never later than `now_ns`."""
        if now_ns >= self.due_ns:
            self.measure()
        t_ns = realtime_ns - self.offset_ns
        if t_ns > now_ns:
            # A stamp from the future: the real-time clock stepped since the last reading.
            self.measure()
            t_ns = min(realtime_ns - self.offset_ns, now_ns)
        return t_ns


_clock = _ClockOffset()


class _KernelTransport:
    """A plain TCP socket read with `recvmsg` when the loop says it is readable (`add_reader`:
    uvloop and the stdlib loop both watch sockets they do not own as transports), each read
    stamped by the kernel; written with `send`. It offers `_Protocol` and `_Stream` the few
    transport methods they use, and feeds the protocol as an asyncio transport would: data,
    then `eof_received` and `connection_lost(None)` on a FIN, `connection_lost(exc)` on a
    reset."""

    def __init__(self, loop, sock, protocol):
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._extra = {
            "socket": sock,
            "sockname": sock.getsockname(),
            "peername": sock.getpeername(),
        }
        self._reading = False
        self._closed = False
        self._lost = False
        self._out = None  # (memoryview of what is left to send, future of the send's end)
        self._sent = 0  # bytes sent: the OPT_ID of the transmit stamp of the last one
        try:  # (after connecting: a TCP socket numbers its stamps from its first unsent byte)
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING, _TX_FLAGS)
            self._tx_stamps = True
        except (OSError, TypeError):
            self._tx_stamps = False
        self._stamp_late = False  # a send returned before its transmit stamp was there
        protocol.connection_made(self)
        self.resume_reading()

    # what _Protocol and _Stream call
    def pause_reading(self):
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self):
        if not self._reading and not self._closed:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    def is_closing(self):
        return self._closed

    def get_extra_info(self, name, default=None):
        return self._extra.get(name, default)

    def close(self):
        if self._closed:
            return
        self.pause_reading()
        self._closed = True
        self._fail_send(httpcore.WriteError("the connection is closed"))
        self._sock.close()
        self._loop.call_soon(self._connection_lost, None)

    def detach(self):
        """Stop watching the socket and give it away (TLS goes through the loop's transport)."""
        self.pause_reading()
        self._closed = self._lost = True
        return self._sock

    def _connection_lost(self, exc):
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(exc)

    def _on_readable(self):
        # uvloop (libuv) reports a socket with a pending error (a reset, a transmit stamp in the
        # error queue) once, and stops watching it: this call must deal with the error itself,
        # or nothing would ever read the socket again (a reset right behind the last data hung
        # the proxy's client).
        recvmsg = self._sock.recvmsg
        protocol = self._protocol
        while self._reading:
            try:
                data, ancillary, _, _ = recvmsg(_READ_SIZE, _ANCILLARY)
            except (BlockingIOError, InterruptedError):
                # (rare: nothing to read, so the loop may have woken us for an error-queue
                # entry and stopped watching)
                self._stamp_late = self._tx_stamps
                self._late_stamps()
                return
            except OSError as exc:  # a reset: what arrived before it was read already
                self.pause_reading()
                self._connection_lost(exc)
                self.close()
                return
            now = time.monotonic_ns()
            if not data:
                self.pause_reading()
                protocol.eof_received()
                self.close()  # as an asyncio transport does when eof_received is falsy
                return
            t_ns = now
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    t_ns = _clock.monotonic(sec * 1_000_000_000 + nsec, now)
            protocol.data_arrived(data, t_ns)
            if len(data) < _READ_SIZE:
                # The socket is (almost certainly) empty: no EAGAIN round trip, but a reset that
                # came behind the data is taken now (see above).
                error = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    self.pause_reading()
                    self._connection_lost(OSError(error, os.strerror(error)))
                    self.close()
                elif self._stamp_late or (self._tx_stamps and self._error_queue_pending()):
                    # Also a stamp nobody waits for (a retransmitted segment's, under load):
                    # any entry in the error queue made the loop stop watching (see above).
                    self._stamp_late = True
                    self._late_stamps()
                return

    def _error_queue_pending(self):
        """Whether the socket's error queue holds an entry (one peek, no copy)."""
        try:
            self._sock.recvmsg(0, _TX_ANCILLARY, socket.MSG_ERRQUEUE | socket.MSG_PEEK)
        except OSError:  # BlockingIOError: empty
            return False
        return True

    def _late_stamps(self):
        """A transmit stamp that was not there when its send returned may come later: drop
        it, and watch the socket again (see _on_readable)."""
        if self._stamp_late and self._reading:
            self._stamp_late = False
            self._sent_at(None)
            self._loop.remove_reader(self._fd)
            self._loop.add_reader(self._fd, self._on_readable)

    # writing
    async def send(self, buffer, timeout):
        """Send all of `buffer`; return when the send syscall that finished it was made
        (monotonic ns): the clock is read just before that call, not after it. After it, the
        thread first takes the GIL back, and with the writer thread committing beside it that
        came late for some of 50 concurrent streams (docs/performance.md, "Upstream"); before
        it there is only the call itself, which releases the GIL and enters the kernel at
        once."""
        view = memoryview(buffer)
        t_ns = time.monotonic_ns()
        try:
            sent = self._sock.send(view)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc
        self._sent += sent
        if sent == len(view):
            return self._sent_at(t_ns)
        done = self._loop.create_future()
        self._out = (view[sent:], done)
        self._loop.add_writer(self._fd, self._on_writable)
        try:
            async with asyncio.timeout(timeout):
                return await done
        except TimeoutError:
            self._fail_send(None)
            raise httpcore.WriteTimeout("timed out writing to the upstream") from None

    def _on_writable(self):
        view, done = self._out
        t_ns = time.monotonic_ns()  # (before the call: see send)
        try:
            sent = self._sock.send(view)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail_send(httpcore.WriteError(str(exc) or type(exc).__name__))
            return
        self._sent += sent
        if sent < len(view):
            self._out = (view[sent:], done)
            return
        self._out = None
        self._loop.remove_writer(self._fd)
        if not done.done():
            done.set_result(self._sent_at(t_ns))

    def _sent_at(self, t_ns):
        """The kernel's transmit time of the last byte sent so far (monotonic ns), taken from
        the socket's error queue, where it is by the time the send syscall returns (it went
        out within the call); `t_ns` when it is not there. Older stamps are dropped."""
        if not self._tx_stamps:
            return t_ns
        want = (self._sent - 1) & 0xFFFFFFFF
        found = None
        recvmsg = self._sock.recvmsg
        while True:
            try:
                _, ancillary, _, _ = recvmsg(0, _TX_ANCILLARY, socket.MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # (a socket error; the read reports it)
                break
            stamp = key = None
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    stamp = sec * 1_000_000_000 + nsec
                elif (level, kind) in _RECVERR:
                    err = _SOCK_EXTENDED_ERR.unpack_from(value)
                    if err[1] == _EE_ORIGIN_TIMESTAMPING:
                        key = err[6]
            if key == want and stamp:
                found = stamp
        if t_ns is None:
            return None
        if found is None:
            self._stamp_late = True
            return t_ns
        now = time.monotonic_ns()
        return max(t_ns, _clock.monotonic(found, now))

    def _fail_send(self, exc):
        if self._out is None:
            return
        _, done = self._out
        self._out = None
        self._loop.remove_writer(self._fd)
        if exc is not None and not done.done():
            done.set_exception(exc)


class _KernelStream(_Stream):
    """`_Stream` on a `_KernelTransport`: reads as before (the protocol holds the kernel's
    stamps), writes through `send` so `request_written` is the syscall's, not a later turn."""

    receipt_clock = "kernel"

    async def write(self, buffer, timeout=None):
        if not buffer:
            return
        if self._protocol.eof or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        sent_ns = await self._transport.send(buffer, timeout)
        phases = _current_phases.get()
        if phases is not None:
            phases.last_write_ns = sent_ns
            phases.receipt_clock = self.receipt_clock

    async def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        # TLS decrypts in the loop's transport, which reads the socket itself: the socket moves
        # to an ordinary transport (nothing has been received yet: a TLS server waits for our
        # ClientHello) and receipt is stamped as there, in data_received.
        loop = asyncio.get_running_loop()
        sock = self._transport.detach()
        try:
            transport, _ = await loop.create_connection(lambda: self._protocol, sock=sock)
        except OSError as exc:
            sock.close()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return await _Stream(transport, self._protocol).start_tls(
            ssl_context, server_hostname=server_hostname, timeout=timeout
        )


def _configured_clock():
    from streams.core import conf

    return conf.get().receipt_clock


def kernel_timestamps_available():
    return _SO_TIMESTAMPNS is not None and _HAS_CMSG


async def _connect_kernel(host, port, local_address):
    """A connected non-blocking TCP socket with kernel receive timestamps on (None: this
    platform or socket refuses them; the caller connects as before)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                sock.close()
                return None
            # as asyncio's transports do: a request's head and body are not held back
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if local_address:
                sock.bind((local_address, 0))
            await loop.sock_connect(sock, address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error or OSError(f"no address for {host}:{port}")


class Backend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend: plain TCP stamped by the kernel (`receipt_clock` "kernel",
    where the platform can), else by the loop's callback."""

    def __init__(self, receipt_clock=None):
        self.receipt_clock = receipt_clock  # None: STREAMSCOPE_RECEIPT_CLOCK, read per connection

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        loop = asyncio.get_running_loop()
        clock = self.receipt_clock or _configured_clock()
        if clock == "kernel" and kernel_timestamps_available():
            try:
                async with asyncio.timeout(timeout):
                    sock = await _connect_kernel(host, port, local_address)
            except TimeoutError as exc:
                raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
            except OSError as exc:
                raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
            if sock is not None:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                protocol = _Protocol()
                return _KernelStream(_KernelTransport(loop, sock, protocol), protocol)
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
