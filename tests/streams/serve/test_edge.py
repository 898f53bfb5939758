"""A request body that stalls is answered 408 and dropped (streams/serve/edge.py), through a real
Daphne: for a page's form post and for the proxy, while other users are served meanwhile."""

import socket
import time

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def quick_daphne(django_db_setup, simulator_process, _relay_db_connections):
    from tests.conftest import DaphneServer

    server = DaphneServer(simulator_process.base_url, overrides={"REQUEST_BODY_TIMEOUT_S": 0.5})
    yield server
    server.stop()


def _slow_post(server, path, declared=1000, sent=b"{"):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n".encode()
        + sent
    )
    return sock


def _answer(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("path", ["/v1/responses", "/api/streams/", "/login/"])
def test_a_stalled_body_is_408_and_others_are_served_meanwhile(quick_daphne, path):
    started = time.monotonic()
    sock = _slow_post(quick_daphne, path)
    # the server is not held: another user's page answers at once
    assert httpx.get(f"{quick_daphne.url}/login/", timeout=5).status_code == 200
    head = _answer(sock)
    waited = time.monotonic() - started
    sock.close()
    assert head.startswith(b"HTTP/1.1 408"), head[:100]
    assert waited < 5  # the timeout is 0.5 s idle; without it the server waits for ever


def test_a_body_that_keeps_coming_too_slowly_is_cut_at_three_times_the_timeout(quick_daphne):
    started = time.monotonic()
    sock = _slow_post(quick_daphne, "/v1/responses", declared=100_000)
    head = b""
    sock.settimeout(0.2)
    while time.monotonic() - started < 8:
        try:
            sock.sendall(b" ")  # a byte every 0.2 s: never idle for 0.5 s
        except OSError:
            break
        try:
            head += sock.recv(4096)
        except TimeoutError:
            continue
        if b"\r\n\r\n" in head or not head:
            break
    sock.close()
    assert head.startswith(b"HTTP/1.1 408"), head[:100]
    assert 1.4 < time.monotonic() - started < 8


# ---- a body over the limit is refused before it is read ----------------------------------------

DECLARED = 1 << 30  # a dataset of 1 GB


def _head(path, length_header):
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/csv\r\n"
        f"{length_header}\r\n\r\n"
    ).encode()


def _limit_said(head):
    import re

    found = re.search(rb"over the limit of ([\d,]+) bytes", head)
    return int(found.group(1).replace(b",", b"")) if found else None


def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_a_declared_1_gb_upload_is_413_with_the_limit_before_its_body_is_read(quick_daphne):
    from streams.serve import edge

    limit = edge.body_limit()
    rss_before = _rss_kib(quick_daphne.proc.pid)
    # headers only, and "Expect: 100-continue": the answer comes before a byte of the body
    sock = socket.create_connection(("127.0.0.1", quick_daphne.port), timeout=10)
    sock.sendall(
        _head("/datasets/1/upload/", f"Content-Length: {DECLARED}\r\nExpect: 100-continue")
    )
    head = _answer(sock)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert b"100 Continue" not in head
    sock.settimeout(5)
    rest = head.split(b"\r\n\r\n", 1)[1]
    while (chunk := sock.recv(4096)) != b"":  # (then the server closes the connection)
        rest += chunk
    sock.close()
    assert _limit_said(rest) == limit
    # a client that sends the body anyway gets no further than the sockets' buffers: without
    # the refusal the server read all of it (into a temporary file) to refuse it afterwards
    sock = socket.create_connection(("127.0.0.1", quick_daphne.port), timeout=10)
    sock.sendall(_head("/datasets/1/upload/", f"Content-Length: {DECLARED}"))
    sent, block = 0, b"x" * (1 << 20)
    try:
        while sent < 4 * limit:
            sent += sock.send(block)
    except OSError:
        pass
    finally:
        sock.close()
    assert sent < limit, f"{sent:,} bytes of the body were taken"
    assert _rss_kib(quick_daphne.proc.pid) - rss_before < 32 * 1024
    # and the server goes on serving
    assert httpx.get(f"{quick_daphne.url}/login/", timeout=30).status_code == 200


def test_a_chunked_body_is_cut_at_the_limit(quick_daphne):
    from streams.serve import edge

    limit = edge.body_limit()
    sock = socket.create_connection(("127.0.0.1", quick_daphne.port), timeout=10)
    sock.sendall(_head("/api/datasets/", "Transfer-Encoding: chunked"))
    # one byte over the limit, in chunks, and no end: the server says no without waiting for it
    left, block = limit + 1, 1 << 20
    while left:
        n = min(block, left)
        sock.sendall(f"{n:x}\r\n".encode() + b"x" * n + b"\r\n")
        left -= n
    head = _answer(sock)
    sock.close()
    assert head.startswith(b"HTTP/1.1 413"), head[:200]


def test_a_proxy_client_over_the_limit_gets_the_proxys_json_error(quick_daphne):
    # (an SDK reads `error.message` of a JSON body; the edge's 413 used to be plain text for
    # every path, so a proxy client over the largest body any route takes lost the message)
    import json

    from streams.serve import edge

    limit = edge.body_limit()
    for target in ("/v1/responses", f"http://127.0.0.1:{quick_daphne.port}/v1/chat/completions"):
        sock = socket.create_connection(("127.0.0.1", quick_daphne.port), timeout=10)
        sock.sendall(
            f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {DECLARED}\r\n\r\n".encode()
        )
        answer = _answer(sock)
        sock.settimeout(5)
        while (chunk := sock.recv(4096)) != b"":
            answer += chunk
        sock.close()
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 413"), head[:200]
        assert b"content-type: application/json" in head.lower()
        error = json.loads(body)["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
        assert _limit_said(error["message"].encode()) == limit
