"""A proxied client that never reads cannot bloat the server (streams/serve/proxy.py, Tap):
the proxy stops reading the upstream while PROXY_CLIENT_BUFFER_BYTES wait unread, lets the
client go after
PROXY_SLOW_CLIENT_TIMEOUT_S, and the record says what the client was handed. Against a real
Daphne and the simulator's `fast` scenario (the attack: three such clients on 200,000-event
streams took the server from 248 to 502 MB, for good, and their rows said `completed`)."""

import json
import socket
import time

import pytest

from streams.models import ApiToken, Event, Stream
from tests.conftest import DaphneServer
from tests.support.recording import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 200_000  # ~30 MB of SSE a stream
LIMITS = {
    "PROXY_CLIENT_BUFFER_BYTES": 65536,
    "PROXY_SLOW_CLIENT_TIMEOUT_S": 3.0,
    "PROXY_MAX_CONCURRENT": 3,
}


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def unread_request(server, token, events=EVENTS, metadata=None):
    """A client that sends its request, reads the answer's head and then nothing more (a small
    receive buffer, so the kernel holds little for it either)."""
    metadata = metadata or {"scenario": "fast", "events": events, "time_scale": 0}
    body = json.dumps({"model": "auto", "input": "hi", "stream": True, "metadata": metadata})
    body = body.encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1024)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n\r\n")[0].split(b"\r\n")[1:])
    stream_id = int({k.lower(): v for k, v in headers.items()}[b"x-streamscope-stream"])
    return sock, stream_id


@pytest.fixture(scope="module")
def cancelling(django_db_setup, simulator_process, _relay_db_connections):
    server = DaphneServer(simulator_process.base_url, overrides=LIMITS)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def draining(django_db_setup, simulator_process, _relay_db_connections):
    server = DaphneServer(
        simulator_process.base_url, overrides={**LIMITS, "PROXY_ON_DISCONNECT": "drain"}
    )
    yield server
    server.stop()


def test_clients_that_never_read_hold_memory_flat_and_count_until_let_go(people, cancelling):
    token = ApiToken.issue(people.owner, name="unread")
    pid = cancelling.proc.pid
    # warm: the proxy's path imported and its caches filled, by a client that reads it all
    sock, warm = unread_request(cancelling, token, events=2000)
    while sock.recv(65536):
        pass
    sock.close()
    wait_terminal(warm)
    before = rss_mb(pid)
    clients = [unread_request(cancelling, token) for _ in range(3)]
    peak = before
    for _ in range(15):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.1)
    streams = [wait_terminal(stream_id, timeout=30) for _, stream_id in clients]
    for sock, _ in clients:
        sock.close()
    after = rss_mb(pid)
    # three unread 30 MB answers: each held to PROXY_CLIENT_BUFFER_BYTES in the server, the
    # upstream read only as far as the client's socket took (without: +300 MB, measured, for
    # good); what remains is the recording of the ~16,000 events each client was handed
    assert peak - before < 80, (before, peak, after)
    assert after - before < 80, (before, peak, after)
    for stream in streams:
        assert (stream.status, stream.error_code) == ("cancelled", "client_too_slow")
        stored = Event.objects.filter(stream=stream)
        # far from all 200,000: the proxy stopped reading when the client did
        assert stored.count() < EVENTS / 4
        # what the client was never handed says so
        assert stored.filter(sent_us__isnull=True).exists()


def test_a_tokens_request_past_its_limit_in_flight_waits_its_turn(people, cancelling):
    """Three answers in flight (their upstream silent after a few deltas, so none is let go
    as too slow however long the machine takes): the token's fourth request gets 429, and
    one more once they have ended."""
    token = ApiToken.issue(people.owner, name="in-flight")
    stalled = {"scenario": "stall", "stall_s": 120}
    clients = [unread_request(cancelling, token, metadata=stalled) for _ in range(3)]

    def fourth():
        with socket.create_connection(("127.0.0.1", cancelling.port)) as other:
            body = b'{"model": "auto", "input": "hi", "stream": true}'
            other.sendall(
                f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            head = b""
            while b"\r\n\r\n" not in head and (chunk := other.recv(1024)):
                head += chunk
            return head

    refused = fourth()
    assert refused.startswith(b"HTTP/1.1 429"), refused[:200]
    assert b"retry-after: 1" in refused.lower()
    assert all(Stream.objects.get(pk=stream_id).is_active for _, stream_id in clients)
    for sock, _ in clients:
        sock.close()
    for _, stream_id in clients:
        assert wait_terminal(stream_id, timeout=30).error_code == "client_disconnected"
    # (a row ends a moment before its request lets go of its place)
    deadline = time.monotonic() + 10
    while (answer := fourth()).startswith(b"HTTP/1.1 429") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_with_drain_the_upstream_is_read_to_its_end_and_the_record_says_what_was_sent(
    people, draining
):
    token = ApiToken.issue(people.owner, name="unread-drain")
    sock, stream_id = unread_request(draining, token, events=50_000)
    stream = wait_terminal(stream_id, timeout=60)
    sock.close()
    assert stream.status == "completed"
    stored = Event.objects.filter(stream=stream)
    assert stored.count() == 50_000  # every event of the upstream's answer is recorded
    handed = stored.filter(sent_us__isnull=False).count()
    assert 0 < handed < stored.count() / 2  # the client got a little, and the record says so
    assert Stream.objects.get(pk=stream_id).event_count == stored.count()
