"""The lean upstream transport (streams/ingest/transport.py) against real servers on 127.0.0.1:
every framing, keep-alive reuse counted on the server's side, a response abandoned mid-body,
resets, timeouts, the pool's bound, TLS with a local certificate, and the request phases and
receipt stamps the recorder reads."""

import asyncio
import socket
import ssl
import struct

import httpx
import pytest

from streams.ingest.network import Phases
from streams.ingest.transport import LeanTransport


class Upstream:
    """An HTTP/1.1 server on 127.0.0.1 in the test's loop that keeps connections open:
    `answer(writer, index, head, body)` writes each response and returns whether the
    connection stays open. Counts the connections it accepted, and those it saw closed by the
    client."""

    def __init__(self, answer):
        self.answer = answer
        self.connections = 0
        self.closed_by_client = 0
        self.requests = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1/responses"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                lines = head.decode("latin-1").lower().split("\r\n")
                length = next(
                    (int(x.split(":")[1]) for x in lines if x.startswith("content-length:")), 0
                )
                if any(x.startswith("transfer-encoding:") and "chunked" in x for x in lines):
                    body = await reader.readuntil(b"0\r\n\r\n")
                else:
                    body = await reader.readexactly(length)
                self.requests.append((head, body))
                keep = await self.answer(writer, len(self.requests) - 1, head, body)
                if not keep:
                    return
        except ConnectionError:
            self.closed_by_client += 1
        finally:
            writer.close()


def _client(**kwargs):
    timeout = kwargs.pop("timeout", httpx.Timeout(5.0))
    return httpx.AsyncClient(transport=LeanTransport(**kwargs), timeout=timeout, trust_env=False)


def _ok(body):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def _held(release, first, rest=b""):
    """An answer: a chunked body's `first` chunk, then (for the first request only, once
    `release` is set) `rest`'s chunk, then its end."""

    async def answer(writer, i, head, body):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(first), first))
        await writer.drain()
        if i == 0:
            await release.wait()
            if rest:
                writer.write(b"%x\r\n%s\r\n" % (len(rest), rest))
        writer.write(b"0\r\n\r\n")
        return True

    return answer


async def _reset(writer):
    """A TCP reset (RST), not a close."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def test_a_keep_alive_connection_is_reused_for_the_next_request():
    async def answer(writer, i, head, body):
        writer.write(_ok(b"answer %d" % i))
        return True

    async with Upstream(answer) as up, _client() as client:
        for i in range(3):
            response = await client.post(up.url, content=b"q%d" % i)
            assert response.content == b"answer %d" % i
        assert up.connections == 1
        assert [body for _, body in up.requests] == [b"q0", b"q1", b"q2"]


async def test_a_chunked_body_split_anywhere_arrives_whole_and_the_connection_is_reused():
    """The chunk-size line, the data and the CRLFs each split across reads; an extension
    and a trailer; then a second request on the same connection."""
    wire = b"5;ext=1\r\nhello\r\n10\r\n, world, chunked\r\n0\r\nX-Trailer: 1\r\n\r\n"

    async def answer(writer, i, head, body):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for cut in (1, 4, 9, 12, 20, 31, 36, len(wire) - 3, len(wire)):
            start = getattr(answer, "at", 0)
            writer.write(wire[start:cut])
            answer.at = cut
            await writer.drain()
            await asyncio.sleep(0.01)
        answer.at = 0
        return True

    async with Upstream(answer) as up, _client() as client:
        for _ in range(2):
            async with client.stream("POST", up.url, content=b"{}") as response:
                assert response.status_code == 200
                got = [chunk async for chunk in response.aiter_raw()]
            assert b"".join(got) == b"hello, world, chunked"
            assert len(got) > 1  # each read's bytes as they came, not held for the end
        assert up.connections == 1


async def test_a_close_delimited_body_is_read_to_the_end_and_its_connection_not_reused():
    async def answer(writer, i, head, body):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
        await writer.drain()
        writer.write(b"the close")
        return False

    async with Upstream(answer) as up, _client() as client:
        for _ in range(2):
            assert (await client.post(up.url, content=b"{}")).content == b"until the close"
        assert up.connections == 2


async def test_a_response_abandoned_mid_body_closes_its_connection():
    """What is still in flight would be read as the next response: the connection closes,
    the server sees it, and the next request opens a new one."""
    release = asyncio.Event()
    async with Upstream(_held(release, b"firs", b"rest")) as up, _client() as client:
        async with client.stream("POST", up.url, content=b"{}") as response:
            async for chunk in response.aiter_raw():
                assert chunk == b"firs"
                break
        release.set()
        async with asyncio.timeout(5):
            while not up.closed_by_client:
                await asyncio.sleep(0.01)
        assert (await client.post(up.url, content=b"{}")).content == b"firs"
        assert up.connections == 2


async def test_bytes_after_the_body_keep_the_connection_out_of_the_pool():
    async def answer(writer, i, head, body):
        writer.write(_ok(b"ok") + b"HTTP/1.1 200 OK\r\n")  # junk behind the body
        return True

    async with Upstream(answer) as up, _client() as client:
        for _ in range(2):
            assert (await client.post(up.url, content=b"{}")).content == b"ok"
            await asyncio.sleep(0.02)
        assert up.connections == 2


async def test_a_reset_mid_body_is_a_read_error_and_an_early_close_a_protocol_error():
    async def answer(writer, i, head, body):
        if i == 0 or "reset" in head.decode():
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
            await writer.drain()
            await asyncio.sleep(0.05)
            await _reset(writer)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
        return False

    async with Upstream(answer) as up, _client() as client:
        got = b""
        with pytest.raises(httpx.ReadError):
            async with client.stream("POST", up.url + "?reset", content=b"{}") as response:
                async for chunk in response.aiter_raw():
                    got += chunk
        assert got == b"part"
        with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
            await client.post(up.url, content=b"{}")


async def test_a_slow_head_is_a_read_timeout_and_a_refused_connect_a_connect_error():
    async def answer(writer, i, head, body):
        await asyncio.sleep(30)
        return False

    async with Upstream(answer) as up, _client(timeout=httpx.Timeout(5.0, read=0.2)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(up.url, content=b"{}")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with _client() as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(f"http://127.0.0.1:{port}/", content=b"{}")


async def test_the_pool_is_bounded_and_a_request_waits_for_room_at_most_its_pool_timeout():
    release = asyncio.Event()
    timeout = httpx.Timeout(5.0, pool=0.2)
    async with (
        Upstream(_held(release, b"hi")) as up,
        _client(max_connections=1, timeout=timeout) as client,
    ):
        async with client.stream("POST", up.url, content=b"{}") as first:
            with pytest.raises(httpx.PoolTimeout):
                await client.post(up.url, content=b"{}")
            waiting = asyncio.create_task(
                client.post(up.url, content=b"{}", timeout=httpx.Timeout(5.0))
            )
            await asyncio.sleep(0.05)
            assert not waiting.done() and up.connections == 1
            release.set()
            assert await first.aread() == b"hi"
        assert (await waiting).content == b"hi"
        assert up.connections == 1  # the waiter took the freed connection


async def test_a_streamed_request_body_goes_out_chunked():
    async def answer(writer, i, head, body):
        writer.write(_ok(b"ok"))
        return True

    async def parts():
        yield b'{"a":'
        yield b"1}"

    async with Upstream(answer) as up, _client() as client:
        assert (await client.post(up.url, content=parts())).content == b"ok"
        head, body = up.requests[0]
        assert b"transfer-encoding: chunked" in head.lower()
        assert body == b'5\r\n{"a":\r\n2\r\n1}\r\n0\r\n\r\n'


async def test_phases_and_kernel_receipt_stamps_are_reported_as_network_py_reports_them():
    """The recorder reads `Phases` (trace extension) and `last_read_ns` after each chunk."""
    gaps = []

    async def answer(writer, i, head, body):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
        writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
        for n in range(3):
            await asyncio.sleep(0.03)
            writer.write(b"9\r\ndata: %d\n\n\r\n" % n)
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        return True

    async with Upstream(answer) as up, _client() as client:
        for _ in range(2):
            phases = Phases()
            phases.activate()
            stamps = []
            url = up.url
            async with client.stream(
                "POST", url, content=b"{}", extensions={"trace": phases.trace}
            ) as r:
                async for chunk in r.aiter_raw():
                    stamps.append((chunk, phases.last_read_ns))
            assert [c for c, _ in stamps] == [b"data: %d\n\n" % n for n in range(3)]
            assert phases.receipt_clock == "kernel"
            assert phases.marks["request_written"] <= phases.marks["headers"] <= stamps[0][1]
            gaps.append([b - a for (_, a), (_, b) in zip(stamps, stamps[1:], strict=False)])
            if _ == 0:
                assert phases.marks["connected"] <= phases.marks["request_written"]
            else:
                assert "connected" not in phases.marks  # a reused connection connects nothing
        # each chunk carries its own read's stamp, the server's 30 ms apart
        assert all(gap > 15_000_000 for run in gaps for gap in run)
        assert up.connections == 1


async def test_tls_with_the_clients_ssl_context_and_reuse():
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    connections = []

    async def handle(reader, writer):
        connections.append(writer)
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)
            except asyncio.IncompleteReadError:
                break
            writer.write(_ok(b"secret ok"))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        async with _client(ssl_context=client_context) as client:
            for _ in range(2):
                phases = Phases()
                phases.activate()
                response = await client.post(
                    f"https://127.0.0.1:{port}/v1",
                    content=b"{}",
                    extensions={"trace": phases.trace},
                )
                assert response.content == b"secret ok"
            assert phases.receipt_clock == "loop"  # TLS: stamped at the protocol's hand-off
            assert len(connections) == 1
        async with _client() as client:  # the system's trust: this CA is unknown
            with pytest.raises(httpx.ConnectError):
                await client.post(f"https://127.0.0.1:{port}/v1", content=b"{}")
    finally:
        server.close()


def test_make_client_takes_the_configured_transport(settings):
    from streams.ingest.upstream import make_client

    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "UPSTREAM_TRANSPORT": "lean"}
    assert isinstance(make_client()._transport, LeanTransport)
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "UPSTREAM_TRANSPORT": "httpcore"}
    assert isinstance(make_client()._transport, httpx.AsyncHTTPTransport)


async def test_at_the_bound_an_idle_connection_of_another_origin_makes_room():
    async def answer(writer, i, head, body):
        writer.write(_ok(b"ok"))
        return True

    async with Upstream(answer) as a, Upstream(answer) as b, _client(max_connections=1) as client:
        assert (await client.post(a.url, content=b"{}")).content == b"ok"
        assert (await client.post(b.url, content=b"{}")).content == b"ok"
        async with asyncio.timeout(5):
            while not a.closed_by_client:
                await asyncio.sleep(0.01)
        assert (a.connections, b.connections) == (1, 1)


async def test_a_reader_that_falls_behind_stops_the_upstream_backpressure():
    """Nothing is read ahead of the reader: above network.py's high-water mark the socket is
    not read, the kernel's buffers fill, and the upstream's writes wait."""
    total = 256 << 20
    sent = [0]

    async def answer(writer, i, head, body):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        block = b"x" * (256 << 10)
        while sent[0] < total:
            writer.write(block)
            await writer.drain()
            sent[0] += len(block)
        return False

    async with Upstream(answer) as up, _client() as client:
        async with client.stream("POST", up.url, content=b"{}") as response:
            chunks = response.aiter_raw()  # (held: a dropped iterator closes the connection)
            assert await chunks.__anext__()
            async with asyncio.timeout(30):  # until the upstream's writes stop moving
                while True:
                    before = sent[0]
                    await asyncio.sleep(0.3)
                    if sent[0] == before:
                        break
            # the kernel's buffers on both sides and one high-water mark: a few MB, not 256
            assert sent[0] < 32 << 20


async def test_a_line_break_in_a_header_value_is_refused_before_anything_is_sent():
    async def answer(writer, i, head, body):
        writer.write(_ok(b"ok"))
        return True

    async with Upstream(answer) as up, _client() as client:
        for value in ("a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rb"):
            request = client.build_request("POST", up.url, content=b"{}")
            request.headers._list.append((b"x-note", b"x-note", value.encode()))
            with pytest.raises(httpx.LocalProtocolError):
                await client.send(request)
        assert up.requests == []
        assert (await client.post(up.url, content=b"{}")).content == b"ok"


@pytest.mark.parametrize(
    "wire",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n no-name\r\n\r\n",  # a folded line
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n",  # no end in sight
    ],
    ids=[
        "not-http",
        "status",
        "folded",
        "length",
        "two-lengths",
        "size",
        "0x",
        "chunk-end",
        "huge",
    ],
)
async def test_a_malformed_answer_is_a_protocol_error_and_its_connection_closes(wire):
    async def answer(writer, i, head, body):
        writer.write(wire)
        await writer.drain()
        await asyncio.sleep(5)  # (open: the client must not wait for a close to see it)
        return False

    async with Upstream(answer) as up, _client(timeout=httpx.Timeout(3.0)) as client:
        for _ in range(2):
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(up.url, content=b"{}")
        assert up.connections == 2  # (the first never went back to the pool)
