"""streams.ingest.upstream.EventReader, the live reader: chunk boundaries anywhere must give
the same events as the whole-body parser of imports (streams.core.capture), WHATWG rules
included. Pure."""

import asyncio
import base64

import pytest

from streams.core.capture import SSEEncoder, parse_sse_bytes
from streams.ingest.upstream import EventReader
from tests.support.hostile import ENDLESS, holding

BODIES = {
    "plain": b'event: message\ndata: {"a":1}\n\nevent: message\ndata: {"b":2}\n\n',
    "comments and retry-only blocks": b": hi\n\nretry: 10\n\n: x\ndata: 1\n\n",
    "a lone event: line is no event": b"event: ping\n\ndata: 2\n\n",
    "empty data line": b"data:\n\ndata\n\n",
    "multi-line data": b"data: a\ndata:  b\ndata:c\n\n",
    "ids persist, NUL ids ignored": b"id: 7\ndata: x\n\ndata: y\n\nid: a\x00b\ndata: z\n\n",
    "CRLF and CR": b"data: one\r\n\r\ndata: two\r\rdata: three\n\r\n",
    "not UTF-8": b"data: caf\xe9\ndata: ok\n\ndata: \xff\xfe\n\n",
    "unknown fields": b"foo: bar\ndata: 3\nbaz\n\n",
}


def live(body, size):
    reader = EventReader()
    out = []
    for start in range(0, len(body), size):
        out.extend(reader.feed(body[start : start + size], start))
    reader.close(len(body))
    return [(e.event_name, e.sse_id, e.data, e.raw, e.preamble) for e in out]


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
def test_any_chunking_reads_like_the_import_parser(name, size):
    body = BODIES[name]
    want = [
        (e.event_name or "message", e.sse_id, e.data, e.raw, e.preamble)
        for e in parse_sse_bytes(body)
    ]
    assert want  # every body has events
    assert live(body, size) == want


def test_an_unterminated_last_block_is_not_dispatched():
    assert live(b"data: 1\n\ndata: 2\n", 4) == [("message", "", "1", None, "")]


@pytest.mark.parametrize("size", [1, 5, 1 << 20])
def test_comments_and_retry_blocks_are_kept_with_the_next_event(size):
    body = (
        b": OPENROUTER PROCESSING\n\ndata: 1\n\n"
        b": keep-alive\n: two\n\nretry: 1000\n\nevent: x\ndata: 2\n\ndata: 3\n\n"
    )
    assert [e[4] for e in live(body, size)] == [
        ": OPENROUTER PROCESSING\n\n",
        ": keep-alive\n: two\n\nretry: 1000\n\n",
        "",
    ]
    # written back where they came, the events are the body again
    encoder = SSEEncoder()
    events = parse_sse_bytes(body)
    written = b"".join(
        encoder.event(e.event_name, e.sse_id, e.data, e.raw, e.preamble) for e in events
    )
    assert written == body


def test_receipt_time_is_that_of_the_chunk_completing_the_event():
    reader = EventReader()
    assert reader.feed(b"data: a", 10) == []
    (event,) = reader.feed(b"bc\n\n", 20)
    assert (event.data, event.t_ns) == ("abc", 20)


# Lines of every kind the WHATWG rules treat differently, for random bodies.
LINES = [
    b"data: x",
    b"data:  two spaces",
    b"data:no space",
    b"data:",
    b"data",
    b'data: {"type":"response.output_text.delta","delta":"h\\u00e9"}',
    b"event: message",
    b"event: ping",
    b"event:",
    b"event:nospace",
    b"id: 42",
    b"id: a\x00b",
    b"id:",
    b"retry: 100",
    b"retry: x",
    b": comment",
    b":",
    b"foo: bar",
    b"data: caf\xc3\xa9",
    b"data: \xff",
    b"",
    b"",
    b"",
]


@pytest.mark.parametrize("seed", range(40))
def test_random_bodies_read_like_the_import_parser(seed):
    """The reader's fast path (data:/event: lines applied to the decoder's state directly)
    against the independent whole-body parser, on random mixes of every kind of line and
    random chunk sizes."""
    import random

    rng = random.Random(seed)
    body = b"\n".join(rng.choice(LINES) for _ in range(rng.randint(1, 200))) + b"\n\n"
    want = [
        (e.event_name or "message", e.sse_id, e.data, e.raw, e.preamble)
        for e in parse_sse_bytes(body)
    ]
    for size in (1, rng.randint(2, 40), rng.randint(41, 5000), 1 << 20):
        assert live(body, size) == want, size


async def test_a_read_reports_when_its_bytes_arrived_not_when_it_ran():
    """Receipt times are stamped in the protocol callback: a reader that gets to the bytes
    late (a busy loop) still reports when they arrived, for every part of a split read."""
    import time

    from streams.ingest.network import Phases, _Protocol, _Stream

    class Transport:
        def pause_reading(self):
            pass

        def resume_reading(self):
            pass

    protocol = _Protocol()
    protocol.connection_made(Transport())
    stream = _Stream(Transport(), protocol)
    phases = Phases()
    phases.activate()
    # each arrival is bracketed by clock reads, so a descheduled test process cannot fail this
    before_first = time.monotonic_ns()
    protocol.data_received(b"ab")
    first = time.monotonic_ns()
    time.sleep(0.02)
    before_second = time.monotonic_ns()
    protocol.data_received(b"cd")
    second = time.monotonic_ns()
    time.sleep(0.03)  # the loop was busy: the reader runs 30 ms after the last arrival
    assert await stream.read(1) == b"a"
    assert before_first <= phases.last_read_ns <= first
    assert await stream.read(1) == b"b"  # the rest of the same arrival
    assert before_first <= phases.last_read_ns <= first
    assert await stream.read(1024) == b"cd"
    assert before_second <= phases.last_read_ns <= second
    assert time.monotonic_ns() - phases.last_read_ns >= 30_000_000


# --- Kernel receipt times (network._KernelTransport): real sockets on 127.0.0.1 -------------


async def _server(handler, ssl=None):
    import asyncio

    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl)
    return server, server.sockets[0].getsockname()[1]


async def _connect(port, clock="kernel"):
    from streams.ingest.network import Backend

    return await Backend(receipt_clock=clock).connect_tcp("127.0.0.1", port, timeout=5)


async def test_a_late_read_reports_when_the_kernel_received_the_bytes():
    """The loop is blocked for 30 ms after the bytes arrived: their receipt time is still the
    kernel's, not the read's; and the request's write time is the kernel's send time."""
    import asyncio
    import time

    from streams.ingest.network import Phases, _KernelStream

    got = asyncio.Event()
    sent = []

    async def handler(reader, writer):
        await reader.readexactly(5)
        got.set()
        writer.write(b"hello")
        await writer.drain()
        sent.append(time.monotonic_ns())
        await reader.read()
        writer.close()

    server, port = await _server(handler)
    stream = await _connect(port)
    try:
        assert isinstance(stream, _KernelStream)
        phases = Phases()
        phases.activate()
        before = time.monotonic_ns()
        await stream.write(b"hi 42")
        after = time.monotonic_ns()
        assert before <= phases.last_write_ns <= after
        assert phases.receipt_clock == "kernel"
        await got.wait()
        while not sent:
            await asyncio.sleep(0.001)
        time.sleep(0.03)  # a busy loop: nothing reads the socket for 30 ms
        assert await stream.read(1024) == b"hello"
        late = time.monotonic_ns() - phases.last_read_ns
        assert late >= 30_000_000
        assert abs(phases.last_read_ns - sent[0]) < 5_000_000
    finally:
        await stream.aclose()
        server.close()


async def test_end_of_stream_and_reset_read_as_before():
    """A FIN reads as b"" (then again b""); an RST after data gives the data, then ReadError —
    as on the loop's transport."""
    import asyncio
    import socket
    import struct

    import httpcore

    async def closes(reader, writer):
        writer.write(b"bye")
        await writer.drain()
        writer.close()

    async def resets(reader, writer):
        writer.write(b"half")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    for clock in ("kernel", "loop"):
        server, port = await _server(closes)
        stream = await _connect(port, clock)
        data = b""
        while chunk := await stream.read(1024):
            data += chunk
        assert (data, await stream.read(1024)) == (b"bye", b"")
        assert stream.get_extra_info("is_readable")  # an idle connection the server closed
        await stream.aclose()
        server.close()

        server, port = await _server(resets)
        stream = await _connect(port, clock)
        assert await stream.read(1024) == b"half"
        with pytest.raises(httpcore.ReadError):
            await stream.read(1024)
        await stream.aclose()
        server.close()


async def test_reading_pauses_above_the_high_water_mark_and_resumes(monkeypatch):
    """Backpressure: with a slow reader, the protocol stops reading the socket above HIGH_WATER
    buffered bytes (TCP then slows the sender) and reads on once drained; nothing is lost."""
    import asyncio

    from streams.ingest.network import _Protocol

    monkeypatch.setattr(_Protocol, "HIGH_WATER", 64 * 1024)
    body = bytes(range(256)) * 8 * 1024  # 2 MiB

    async def handler(reader, writer):
        writer.write(body)
        await writer.drain()
        writer.close()

    server, port = await _server(handler)
    stream = await _connect(port)
    pauses = 0
    data = bytearray()
    try:
        while True:
            await asyncio.sleep(0.002)  # slower than loopback
            if stream._protocol.reading_paused:
                pauses += 1
                assert stream._protocol.size <= _Protocol.HIGH_WATER + (256 << 10)
            chunk = await stream.read(64 * 1024)
            if not chunk:
                break
            data += chunk
    finally:
        await stream.aclose()
        server.close()
    assert bytes(data) == body
    assert pauses > 3


async def test_tls_moves_the_socket_to_the_loops_transport():
    """start_tls on a kernel-stamped connection: the handshake and everything after it go
    through the loop's TLS transport, stamped as there (the stream says "loop")."""
    import ssl

    import trustme

    from streams.ingest.network import Phases

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)

    async def echo(reader, writer):
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    server, port = await _server(echo, ssl=server_ctx)
    stream = await _connect(port)
    try:
        tls = await stream.start_tls(client_ctx, server_hostname="localhost", timeout=5)
        assert tls.get_extra_info("ssl_object") is not None
        phases = Phases()
        phases.activate()
        await tls.write(b"ping")
        assert phases.receipt_clock == "loop"
        assert await tls.read(1024) == b"ping"
        await tls.aclose()
    finally:
        server.close()


def test_kernel_stamps_convert_to_the_monotonic_clock():
    import time

    from streams.ingest.network import _ClockOffset

    clock = _ClockOffset()
    real, now = time.time_ns(), time.monotonic_ns()
    assert abs(clock.monotonic(real, now) - now) < 1_000_000
    # a stamp "from the future" (the real-time clock stepped back since): never after now
    assert clock.monotonic(real + 3_600_000_000_000, now) <= now
    assert clock.due_ns > now  # measured again within RECHECK_NS


async def test_an_http_upstream_builds_no_ssl_context(monkeypatch):
    """Building one (certifi's bundle, ~25 ms of blocked loop) was charged to the first
    attempt's `connected`: an http:// upstream never needs one."""
    import ssl

    import httpx

    from streams.ingest.upstream import ClientPool

    def forbidden(*args, **kwargs):
        raise AssertionError("an SSL context was built for an http:// upstream")

    monkeypatch.setattr(httpx, "create_ssl_context", forbidden)
    monkeypatch.setattr(ssl, "create_default_context", forbidden)
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", forbidden)

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server, port = await _server(answer)
    pool = ClientPool()
    try:
        async with pool.stream("GET", f"http://127.0.0.1:{port}/") as response:
            assert await response.aread() == b"ok"
        assert pool.ssl_context is None and len(pool.shards) == 1 and not pool.tls_shards
    finally:
        await pool.aclose()
        server.close()


@pytest.mark.parametrize("transport", ["lean", "httpcore"])
async def test_an_upstreams_cookie_is_never_sent_with_a_later_request(transport):
    """One client carries every user's and project's requests: a `Set-Cookie` of the upstream
    (a load balancer's, a gateway's session) answering one must not go with the next. httpx's
    cookie jar kept it and sent it with every later request through that client."""
    from streams.ingest.upstream import ClientPool

    heads = []

    async def answer(reader, writer):
        for _ in range(3):
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head.lower())
            length = [v for k, _, v in (x.partition(b":") for x in head.lower().split(b"\r\n"))
                      if k == b"content-length"]  # fmt: skip
            await reader.readexactly(int(length[0]) if length else 0)
            writer.write(
                b"HTTP/1.1 200 OK\r\nSet-Cookie: __cf_bm=of-project-a; Path=/\r\n"
                b"Set-Cookie: session=a1; Domain=127.0.0.1; Path=/v1\r\nContent-Length: 2\r\n\r\nok"
            )
            await writer.drain()
        writer.close()

    server, port = await _server(answer)
    pool = ClientPool(transport=transport)
    try:
        for i in range(3):
            url = f"http://127.0.0.1:{port}/v1/responses"
            async with pool.stream("POST", url, json={"i": i}) as response:
                assert await response.aread() == b"ok"
        assert len(heads) == 3
        assert not [h for h in heads if b"cookie" in h or b"of-project-a" in h]
    finally:
        await pool.aclose()
        server.close()


async def test_a_reset_right_behind_the_last_data_is_not_missed():
    """Data and the RST both wait in the socket before the loop looks: uvloop reports the
    socket once (and then stops watching it, libuv's rule for a socket with an error), so the
    one read must also notice the reset: the proxy's client hung on such a stream."""
    import asyncio
    import socket
    import struct
    import time

    import httpcore

    async def resets(reader, writer):
        writer.write(b"last")
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    server, port = await _server(resets)
    stream = await _connect(port)
    try:
        stream._transport.pause_reading()  # as a busy loop would: nobody looks for a while
        await asyncio.sleep(0.05)
        time.sleep(0.02)
        stream._transport.resume_reading()
        assert await stream.read(1024) == b"last"
        async with asyncio.timeout(5):
            with pytest.raises(httpcore.ReadError):
                await stream.read(1024)
    finally:
        await stream.aclose()
        server.close()


def test_a_key_is_sent_as_itself_when_the_base_url_has_credentials_too():
    """httpx turns a URL's credentials into `Authorization: Basic`, replacing the request's
    own: the configured key was never sent. The request's Authorization wins; the URL's
    credentials go only when a request has none."""
    from streams.ingest import upstream as up
    from tests.support.hostile import RawUpstream

    server = RawUpstream(lambda m, p, h, b: (200, "application/json", [b'{"data": []}']))
    try:
        base = server.base_url.replace("http://", "http://user:pw-77@")
        up.list_models(base, "sk-the-key-123456")
        up.list_models(base, "")

        async def stream():
            pool = up.ClientPool()
            try:
                for headers in ({"Authorization": "Bearer sk-the-key-123456"}, {}):
                    async with pool.stream("GET", base + "/models", headers=headers) as r:
                        await r.aread()
            finally:
                await pool.aclose()

        asyncio.run(stream())
        sent = [h.get("authorization") for _, _, h, _ in server.requests]
        basic = "Basic " + base64.b64encode(b"user:pw-77").decode()
        assert sent == ["Bearer sk-the-key-123456", basic, "Bearer sk-the-key-123456", basic]
    finally:
        server.stop()


# ---- one event is bounded (UPSTREAM_MAX_EVENT_BYTES) --------------------------------------------

BOUND = 64 * 1024
PIECE = 4096


@pytest.mark.parametrize("name", ENDLESS)
def test_an_endless_event_is_refused_past_the_bound_holding_no_more(name):
    """The events before it are read, then the reader holds at most the bound and one piece,
    and says the event was too large; what it held is let go. Without the bound it holds
    everything that came (the loop runs out at 64 times the bound)."""
    head, piece = ENDLESS[name]
    assert len(piece) == PIECE
    reader = EventReader(max_event_bytes=BOUND)
    events = reader.feed(b'data: {"a":1}\n\ndata: {"b":2}\n\n' + head, 1)
    assert [e.data for e in events] == ['{"a":1}', '{"b":2}']
    peak = 0
    for _ in range(64 * BOUND // PIECE):
        assert reader.feed(piece, 2) == []
        peak = max(peak, holding(reader))
        if reader.too_large is not None:
            break
    assert reader.too_large is not None and reader.too_large.code == "event_too_large"
    assert BOUND < reader.too_large.held <= BOUND + PIECE
    assert peak <= BOUND + PIECE
    assert holding(reader) == 0


def test_events_up_to_the_bound_pass_in_any_chunking_and_one_over_it_does_not():
    """The measure is per chunk, but an event is measured exactly where the chunks would let
    one over the bound through: the events before it in its chunk are returned."""
    small = b"data: " + b"s" * 100 + b"\n\n"
    fits = b"data: " + b"f" * (BOUND - 2) + b"\n\n"  # data and its line: just the bound
    over = b"data: " + b"o" * (BOUND + 1) + b"\n\n"
    for size in (1000, 1 << 20):
        reader = EventReader(max_event_bytes=BOUND)
        body = small + fits + small
        out = [
            e
            for start in range(0, len(body), size)
            for e in reader.feed(body[start : start + size], 0)
        ]
        assert [len(e.data) for e in out] == [100, BOUND - 2, 100] and reader.too_large is None
        reader = EventReader(max_event_bytes=BOUND)
        out = reader.feed(small + over + small, 0)  # all in one chunk
        assert [len(e.data) for e in out] == [100]
        assert reader.too_large is not None and reader.too_large.held == BOUND + 1
    # measured in bytes, as they came: half the bound in two-byte characters is over it
    reader = EventReader(max_event_bytes=BOUND)
    wide = ("data: " + "é" * (BOUND // 2 + 1) + "\n\n").encode()
    assert reader.feed(small + wide, 0) and reader.too_large.held == BOUND + 2


def test_comments_between_events_are_not_held_against_the_next():
    """A long run of small events, each with its comment, never adds up to the bound."""
    reader = EventReader(max_event_bytes=1024)
    event = b": ping\ndata: " + b"d" * 500 + b"\n\n"
    out = []
    for i in range(0, len(event) * 200, 333):
        out += reader.feed((event * 200)[i : i + 333], 0)
    assert len(out) == 200 and reader.too_large is None


def test_a_long_line_costs_in_proportion_to_its_length():
    """A line over many chunks is joined once, when it ends: joining at every chunk copied it
    again each time (a 32 MiB line, within the bound, took 6.4 s of the loop's CPU). Four times
    the line costs about four times the CPU (measured in the process's CPU time, which a busy
    neighbour does not stretch the way it does wall time); copying it at every chunk made it
    sixteen."""
    import time

    piece = b"x" * 65536

    def cpu(mib):
        best = None
        for _ in range(3):
            reader = EventReader(max_event_bytes=64 << 20)
            t = time.process_time()
            reader.feed(b"data: ", 0)
            for _ in range(mib * 16):
                reader.feed(piece, 0)
            (event,) = reader.feed(b"\n\n", 0)
            spent = time.process_time() - t
            assert len(event.data) == mib << 20
            best = spent if best is None else min(best, spent)
        return best

    small, large = cpu(4), cpu(16)
    assert large < 8 * small, (small, large)
