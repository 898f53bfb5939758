"""The upstream client: a request body in, received events out, with receipt times.

The only module that sends requests to the upstream. Timing rules (docs/measurement.md): every
event is stamped on the `time.monotonic_ns()` clock with the kernel's receipt time of the bytes
carrying it (`SO_TIMESTAMPNS` on plain TCP; where that is not possible, TLS or another
platform, when the bytes are handed to our socket protocol), the request is written when the
send syscall that finished it returned, and the request phases come from httpx's `trace`
extension, so queueing inside our own process is never charged to the upstream.

Lines are split here at the byte level so that data which is not valid UTF-8 can be kept
verbatim (`ReceivedEvent.raw`) instead of being silently replaced; the field semantics of each
line (event/data/id/retry, comments) are httpx-sse's own `SSEDecoder`.
"""

import asyncio
import collections
import contextlib
import contextvars
import os
import socket
import ssl
import struct
import sys
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
# 1.6–1.9 ms late at the median with a CPU hog beside us (docs/measurement.md). The kernel
# stamps each segment when it receives it, and `recvmsg` hands us the stamp of the newest bytes
# of each read, however late we read them.

# Python 3.11's socket module lacks the constant; its value on Linux (asm-generic/socket.h).
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: tv_sec, tv_nsec
# The request's send time, also from the kernel: SO_TIMESTAMPING's software transmit stamp of
# the last byte of each send (OPT_ID numbers it by byte offset; OPT_TSONLY: the stamp without a
# copy of the packet). Our own clock read around the send syscall was not enough: after it the
# thread waits to take the GIL back, before it another thread may take the GIL, and with the
# writer thread committing beside 50 streams either came 1–2 ms off for a few of them.
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
        came 1–2 ms after the packet had left, for 8 of 50 concurrent streams; before it there
        is only the call itself, which releases the GIL and enters the kernel at once."""
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


class _Backend(httpcore.AsyncNetworkBackend):
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
    # and blocks the loop: pass one to share (docs/performance.md, "Upstream"). None: httpcore
    # builds its default one if and when a connection needs TLS, so a client for an http://
    # upstream never builds one (httpx's transport always did, ~25 ms of blocked loop, charged
    # to the first attempt's `connected`: it read 87–112 ms on loopback).
    transport = httpx.AsyncHTTPTransport.__new__(httpx.AsyncHTTPTransport)
    # httpx's transport is its httpcore pool (`_pool` is all its methods use); building the pool
    # here is also the only way to give it our network backend (httpx has no public hook).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=max_connections,
        max_keepalive_connections=keepalive,
        keepalive_expiry=5.0,  # httpx's default
        network_backend=_Backend(),
    )
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
        self.shards = []  # [client, streams in flight], for http:// upstreams
        self.tls_shards = []  # the same for https://
        # One for all TLS shards, built at the first https:// request: building each one blocks
        # the loop, and an http:// upstream needs none.
        self.ssl_context = None

    @contextlib.asynccontextmanager
    async def stream(self, method, url, **kwargs):
        tls = str(url)[:6].lower() == "https:"
        shards = self.tls_shards if tls else self.shards
        shard = next((s for s in shards if s[1] < self.shard_streams), None)
        if shard is None:
            if tls and self.ssl_context is None:
                self.ssl_context = httpx.create_ssl_context(trust_env=False)
            client = make_client(
                self.connect_timeout,
                keepalive=self.keepalive,
                ssl_context=self.ssl_context if tls else None,
            )
            shard = [client, 0]
            shards.append(shard)
        shard[1] += 1
        if "auth" not in kwargs and _has_authorization(kwargs.get("headers")):
            kwargs["auth"] = KEEP_AUTHORIZATION
        try:
            async with shard[0].stream(method, url, **kwargs) as response:
                yield response
        finally:
            shard[1] -= 1

    async def aclose(self):
        for client, _ in (*self.shards, *self.tls_shards):
            await client.aclose()
        self.shards = []
        self.tls_shards = []


# httpx turns credentials in a URL into `Authorization: Basic …`, replacing the one a request
# carries: the configured key (or a pass-through client's) would never be sent. A request with
# its own Authorization keeps it; URL credentials are sent only when there is none.
KEEP_AUTHORIZATION = httpx.Auth()


def _has_authorization(headers):
    if not headers:
        return False
    items = headers.items() if hasattr(headers, "items") else headers
    return any(
        (k.lower() if isinstance(k, str) else k.lower().decode("latin-1")) == "authorization"
        for k, _ in items
    )


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
        message = message or f"HTTP {status} {response.reason_phrase}".strip()
        # How long the upstream asked to wait is what a user of a 429/503 wants to know; the
        # headers are not stored, so it goes with the message (a number or an HTTP date).
        retry_after = response.headers.get("retry-after", "").strip()[:40]
        if retry_after:
            message = f"{message} (Retry-After: {retry_after})"
        raise UpstreamError(
            code or f"http_{status}",
            message,
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

    Sync and short-timeout on purpose: it runs for a page render (streams.run.catalog caches it).
    Raises UpstreamError for anything but a 200 with an OpenAI-style `{"data": [...]}` list."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            response = client.get(
                base_url.rstrip("/") + "/models",
                headers=headers,
                auth=KEEP_AUTHORIZATION if "Authorization" in headers else httpx.USE_CLIENT_DEFAULT,
            )
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
