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
