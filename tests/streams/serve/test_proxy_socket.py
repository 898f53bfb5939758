"""The Responses API over a WebSocket through the recording proxy (streams/serve/proxy_socket.py)
on a real Daphne, against the simulator's WebSocket (streams/simulator/websocket.py) over real
sockets, with the official `openai` SDK's `client.responses.connect()` (sync and async): the
frames a client gets are the simulator's, byte for byte; each `response.create` is one stream
whose events are its frames, none lost, with TTFT, usage and cost; the responses of one socket
are one session; bad input closes the socket with a code that says why."""

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time

import openai
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Close, Opcode
from websockets.sync.client import connect

from streams.models import ApiToken, Event, Finding, Stream
from tests.conftest import DaphneServer, free_port
from tests.support.recording import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

META = {"deterministic_ids": "true", "seed": "48", "time_scale": "0.02"}
TERMINAL = {"response.completed", "response.failed", "response.incomplete", "error"}
BODIES = [
    {"model": "gpt-oss-120b", "input": "What is the weather in Utrecht?", "metadata": META},
    {"model": "gpt-oss-120b", "input": "And in Delft?", "metadata": {**META, "seed": "49"}},
]


@pytest.fixture
def token(people):
    return ApiToken.issue(people.owner, name="socket test")


def turns_sync(base_url, key, bodies=BODIES):
    """Each body's frames as the sync SDK received them, as bytes, over one socket."""
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    out = []
    with client.responses.connect(max_retries=0) as connection:
        for body in bodies:
            connection.send({"type": "response.create", **body})
            frames = []
            while not frames or json.loads(frames[-1])["type"] not in TERMINAL:
                frames.append(connection.recv_bytes())
            out.append(frames)
    return out


async def turns_async(base_url, key, bodies=BODIES):
    client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    out = []
    async with client.responses.connect(max_retries=0) as connection:
        for body in bodies:
            await connection.send({"type": "response.create", **body})
            frames = []
            while not frames or json.loads(frames[-1])["type"] not in TERMINAL:
                frames.append(await connection.recv_bytes())
            out.append(frames)
    await client.close()
    return out


def proxied_streams(n, timeout=10):
    """The `n` proxied streams, each once it ended. The client is handed each frame before the
    recorder writes it, so a client that got a response's last frame may see its row a moment
    later (CI: 1 of 2 rows, read as the socket closed)."""
    proxied = Stream.objects.filter(source="proxy").order_by("pk").values_list("pk", flat=True)
    deadline = time.monotonic() + timeout
    # (.all(): a queryset read once keeps its rows, and the loop waited on the first reading)
    while len(pks := list(proxied.all())) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pks) == n
    return [wait_terminal(pk) for pk in pks]


def assert_recorded(streams, turns):
    sessions = {s.session for s in streams}
    assert len(sessions) == 1 and sessions != {""}  # one socket, one session
    for stream, frames in zip(streams, turns, strict=True):
        completed = json.loads(frames[-1])["response"]
        stored = list(Event.objects.filter(stream=stream).order_by("index"))
        assert [e.data.encode() for e in stored] == frames  # every frame, verbatim, in order
        assert stream.event_count == len(frames)
        assert all(e.sent_us is not None and e.sent_us >= e.t_us for e in stored)
        assert (stream.status, stream.format, stream.upstream_id) == (
            "completed",
            "responses",
            completed["id"],
        )
        assert list(Finding.objects.filter(stream=stream, severity="error")) == []
        assert stream.input_tokens == completed["usage"]["input_tokens"]
        assert stream.output_tokens == completed["usage"]["output_tokens"] > 0
        assert stream.cost_nanos and stream.cost_nanos > 0
        assert stream.ttft_ms is not None and stream.ttft_ms > 0
        assert stream.upstream_url.startswith("ws://") and stream.token_id
        assert stream.receipt_clock == "kernel"  # (each frame stamped with its read)


def test_the_sync_sdk_gets_the_simulators_frames_and_each_response_is_a_stream(
    live_server_daphne, simulator_process, token
):
    want = turns_sync(simulator_process.base_url, "x")
    got = turns_sync(f"{live_server_daphne.url}/v1", token)
    assert got == want and all(len(frames) > 10 for frames in want)
    assert_recorded(proxied_streams(2), got)


def test_the_async_sdk_gets_the_simulators_frames_and_each_response_is_a_stream(
    live_server_daphne, simulator_process, token
):
    want = asyncio.run(turns_async(simulator_process.base_url, "x"))
    got = asyncio.run(turns_async(f"{live_server_daphne.url}/v1", token))
    assert got == want
    assert_recorded(proxied_streams(2), got)


def test_an_upstream_that_breaks_off_closes_the_socket_and_what_came_is_recorded(
    live_server_daphne, token
):
    url = f"{live_server_daphne.ws_url}/v1/responses"
    body = {**BODIES[0], "metadata": {**META, "scenario": "reset"}}
    frames = []
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(json.dumps({"type": "response.create", **body}))
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(ws.recv(timeout=10).encode())
    assert closed.value.rcvd.code == 4011 and len(frames) > 3
    [stream] = proxied_streams(1)
    assert [e.data.encode() for e in Event.objects.filter(stream=stream).order_by("index")] == (
        frames
    )
    assert stream.status == "truncated"
    assert "missing_terminal" in set(
        Finding.objects.filter(stream=stream).values_list("code", flat=True)
    )


def test_a_client_that_leaves_mid_response_cancels_it_with_every_frame_it_had_recorded(
    live_server_daphne, token
):
    url = f"{live_server_daphne.ws_url}/v1/responses"
    body = {**BODIES[0], "metadata": {**META, "time_scale": "1"}}
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(json.dumps({"type": "response.create", **body}))
        frames = [ws.recv(timeout=10).encode() for _ in range(5)]
    [stream] = proxied_streams(1)
    stored = [e.data.encode() for e in Event.objects.filter(stream=stream).order_by("index")]
    assert stored[:5] == frames  # (and what was relayed while it left)
    assert (stream.status, stream.error_code) == ("cancelled", "client_disconnected")


def test_without_a_valid_token_the_handshake_is_refused_and_nothing_recorded(
    live_server_daphne, people
):
    url = f"{live_server_daphne.ws_url}/v1/responses"
    for headers in ({}, {"Authorization": "Bearer ss_wrong"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers=headers, open_timeout=10).close()
        assert refused.value.response.status_code == 403
    read_only = ApiToken.issue(people.owner, name="read only", scopes=["read"])
    with pytest.raises(InvalidStatus):
        connect(url, additional_headers={"Authorization": f"Bearer {read_only}"}).close()
    with pytest.raises(InvalidStatus):  # no other path of the proxy's takes a socket
        connect(f"{live_server_daphne.ws_url}/v1/chat/completions").close()
    assert not Stream.objects.filter(source="proxy").exists()


@pytest.mark.parametrize(
    "frame, code",
    [
        (b"\x00\x01", 4003),  # binary
        ("not json", 4007),
        ('["a list"]', 4007),
        ('{"no": "type"}', 4007),
    ],
)
def test_bad_input_closes_the_socket_with_a_code_saying_why(live_server_daphne, token, frame, code):
    url = f"{live_server_daphne.ws_url}/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(frame)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == code
    assert not Stream.objects.filter(source="proxy").exists()


# ---- the egress gate on every frame ----------------------------------------------------------

KEY = "sk-proj-SOCKETwsKEY48echoOracle5550199xyzQ"
PASS_KEY = "sk-ant-api03-PASSwsKEY48echo7766554433zz"


@pytest.fixture
def echoing_upstream():
    """A Responses WebSocket that answers each message with frames holding the Authorization
    header it was opened with, as an upstream that echoes its key would."""
    from websockets.sync.server import serve

    def handler(connection):
        said = connection.request.headers.get("Authorization", "")
        for message in connection:
            created = {"type": "response.created", "sequence_number": 0}
            created["response"] = {"id": "resp_echo", "status": "in_progress", "note": said}
            connection.send(json.dumps(created))
            done = {"type": "response.completed", "sequence_number": 1}
            done["response"] = {"id": "resp_echo", "status": "completed", "output": []}
            connection.send(json.dumps({**done, "echo": said, "asked": json.loads(message)}))

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}/v1"
        server.shutdown()


def test_an_upstream_echoing_its_key_over_the_socket_gets_it_back_redacted(
    people, echoing_upstream
):
    server = DaphneServer(echoing_upstream, env={"UPSTREAM_API_KEY": KEY})
    try:
        token = ApiToken.issue(people.owner, name="echo")
        url = f"{server.ws_url}/v1/responses"
        ask = json.dumps({"type": "response.create", "model": "m", "input": f"say {KEY}"})
        answers = {}
        for who, headers in {
            "configured": {"Authorization": f"Bearer {token}"},
            "pass-through": {"Authorization": f"Bearer {PASS_KEY}", "X-Streamscope-Token": token},
        }.items():
            with connect(url, additional_headers=headers) as ws:
                ws.send(ask)
                answers[who] = ws.recv(timeout=10) + ws.recv(timeout=10)
        for who, key in (("configured", KEY), ("pass-through", PASS_KEY)):
            # (each key checked against its own socket's frames: the configured one also asked
            # with the key in its input, which the upstream echoed)
            assert "[redacted]" in answers[who], who
            assert key not in answers[who] and key[8:24] not in answers[who], who
        assert "resp_echo" in answers["configured"]  # the frames came, only the keys went
    finally:
        server.stop()


def test_a_message_over_a_mib_reaches_the_proxy_and_one_over_its_limit_closes_with_4009(
    simulator_process, people, token
):
    """Daphne's own cap (1 MiB) dropped a larger `response.create` with the connection, before
    the proxy could say why; the server lets messages up to the proxy's body limit (and a little
    over, to say 4009) reach the consumer."""
    limit = 2 * 1024 * 1024
    server = DaphneServer(
        simulator_process.base_url, env={"STREAMSCOPE_PROXY_MAX_BODY_BYTES": str(limit)}
    )
    try:
        url = f"{server.ws_url}/v1/responses"
        for size, code in ((limit * 3 // 4, 4007), (limit + 1, 4009)):
            with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                ws.send("[" + " " * (size - 2) + "]")  # read (past 1 MiB) and refused: no object
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == code, size
    finally:
        server.stop()
    assert not Stream.objects.filter(source="proxy").exists()


# ---- a client that does not read -------------------------------------------------------------

FLOOD_FRAME = 64 * 1024
# What the proxy may take in for a client that reads nothing: its client buffer
# (PROXY_CLIENT_BUFFER_BYTES, 256 KiB) and the upstream connection's (network.py's 1 MiB high
# water and one read), plus the kernel's socket buffers on the way, which Linux grows as a
# connection reads fast (seen: 6–19 MiB in all; without the pause, 110 MiB in 7.5 s and on).
HELD_AT_MOST = 32 * 2**20


@pytest.fixture
def flooding_upstream():
    """A Responses WebSocket that answers a `response.create` with output deltas of 64 KiB as
    fast as its socket takes them, until its client goes: `sent["bytes"]` is how much of it
    its sends completed (ground truth for how much the proxy took in)."""
    from websockets.sync.server import serve

    sent = {"bytes": 0, "frames": 0, "ended": False}

    def handler(connection):
        # (its own send buffer small and fixed: what it sent is what the proxy's side took)
        connection.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 128 * 1024)
        connection.recv()
        created = {"type": "response.created", "sequence_number": 0}
        created["response"] = {"id": "resp_flood", "status": "in_progress"}
        frames = [json.dumps(created)]
        delta = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0}
        delta["content_index"] = 0
        with contextlib.suppress(ConnectionClosed, OSError):
            for i in itertools.count(1):
                for text in frames:
                    connection.send(text)
                    sent["bytes"] += len(text)
                    sent["frames"] += 1
                pad = "x" * (FLOOD_FRAME - 150)
                frames = [json.dumps({**delta, "sequence_number": i, "delta": pad})]
        sent["ended"] = True

    with serve(handler, "127.0.0.1", 0, compression=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}/v1", sent
        server.shutdown()


def raw_socket(url, token, rcvbuf=64 * 1024):
    """A WebSocket client on a plain blocking socket with a small receive buffer, so that what
    it does not read stays in the server; its sans-I/O protocol, opened."""
    from websockets.client import ClientProtocol
    from websockets.uri import parse_uri

    uri = parse_uri(url)
    protocol = ClientProtocol(uri, max_size=None)
    request = protocol.connect()
    request.headers["Authorization"] = f"Bearer {token}"
    protocol.send_request(request)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect((uri.host, uri.port))
    for data in protocol.data_to_send():
        sock.sendall(data)
    while protocol.handshake_exc is None and not protocol.events_received():
        protocol.receive_data(sock.recv(4096))
    assert protocol.handshake_exc is None
    return sock, protocol


def test_a_client_that_does_not_read_holds_the_upstream_back_then_is_let_go(
    people, token, flooding_upstream
):
    """The proxy takes in a bounded amount for a client that does not read: the upstream's
    reads pause, and the flood's sends stop completing (ground truth: without the pause they
    went on, 110 MiB in 7.5 s, into Daphne's buffer; with it 6–8 MiB, then nothing). After
    PROXY_SLOW_CLIENT_TIMEOUT_S the client is let go (4008, then Daphne's close handshake
    resets a client that still reads nothing), the upstream's socket is closed and the
    response ends `client_too_slow` with every frame that came."""
    base_url, sent = flooding_upstream
    slow_s = 8
    server = DaphneServer(base_url, env={"STREAMSCOPE_PROXY_SLOW_CLIENT_TIMEOUT_S": str(slow_s)})
    try:
        sock, protocol = raw_socket(f"{server.ws_url}/v1/responses", token)
        create = {"type": "response.create", "model": "m", "input": "flood me"}
        protocol.send_text(json.dumps(create).encode())
        for data in protocol.data_to_send():
            sock.sendall(data)
        series = []  # what the upstream's sends completed, every 0.25 s of not reading
        while len(series) < slow_s * 4 - 2:
            time.sleep(0.25)
            series.append(sent["bytes"])
        mib = [round(b / 2**20, 1) for b in series]
        print(f"\nupstream sent (MiB, every 0.25 s) while the client read nothing: {mib}")
        assert series[-1] < HELD_AT_MOST, mib
        assert series[-5] == series[-1], mib  # (held back: nothing more for the last second)
        [stream] = proxied_streams(1)  # (let go: its recording ended)
        ended = None
        with contextlib.suppress(ConnectionError):
            while data := sock.recv(1 << 20):
                protocol.receive_data(data)
        protocol.receive_eof()
        for event in protocol.events_received():
            if event.opcode == Opcode.CLOSE:
                ended = Close.parse(event.data).code
        sock.close()
        deadline = time.monotonic() + 10
        while not sent["ended"] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
    assert sent["ended"]  # the upstream's socket was closed
    assert ended in (4008, None)  # (None: reset before the client read its close)
    assert (stream.status, stream.error_code) == ("cancelled", "client_too_slow")
    stored = Event.objects.filter(stream=stream).count()
    assert stored == stream.event_count and 2 <= stored <= sent["frames"]


# ---- frames outside any response -------------------------------------------------------------


@pytest.fixture
def chatty_upstream():
    """A Responses WebSocket that follows each response's terminal event with a frame of its
    own (as an upstream announcing its rate limits might): part of no response."""
    from websockets.sync.server import serve

    def handler(connection):
        for n, _ in enumerate(connection):
            rid = f"resp_chatty{n}"
            created = {"type": "response.created", "sequence_number": 0}
            created["response"] = {"id": rid, "status": "in_progress"}
            done = {"type": "response.completed", "sequence_number": 1}
            done["response"] = {"id": rid, "status": "completed", "output": []}
            aside = {"type": "rate_limits.updated", "rate_limits": [], "n": n}
            for event in (created, done, aside):
                connection.send(json.dumps(event))

    with serve(handler, "127.0.0.1", 0, compression=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}/v1"
        server.shutdown()


def test_a_frame_outside_any_response_is_relayed_counted_and_in_no_stream(
    people, token, chatty_upstream
):
    """The frame after a response's terminal event reaches the client, is not taken for the
    next response's first (it was, when it waited in the socket's queue for the next turn),
    and is counted and said as unrecorded."""
    server = DaphneServer(chatty_upstream)
    try:
        url = f"{server.ws_url}/v1/responses"
        got = []
        with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            for _ in range(2):
                ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
                got.append([json.loads(ws.recv(timeout=10))["type"] for _ in range(3)])
        streams = proxied_streams(2)
        deadline = time.monotonic() + 10
        while unrecorded(said := server.output()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
    assert got == [["response.created", "response.completed", "rate_limits.updated"]] * 2
    for n, stream in enumerate(streams):
        stored = [json.loads(e.data) for e in Event.objects.filter(stream=stream).order_by("index")]
        assert [e["type"] for e in stored] == ["response.created", "response.completed"], n
        assert (stream.upstream_id, stream.status) == (f"resp_chatty{n}", "completed")
    assert unrecorded(said) == 2, said


def unrecorded(log):
    """The frames the proxy's log says it relayed outside any response."""
    said = [line for line in log.splitlines() if "proxy_socket: " in line]
    return sum(int(line.split("): ")[1].split()[0]) for line in said if "outside any" in line)


def test_an_upstream_that_refuses_the_handshake_refuses_the_clients(people, token):
    """The upstream's handshake is the proxy's own now (the sans-I/O protocol on network.py's
    connection): an upstream answering 403, or not listening, refuses the client's handshake
    too, and nothing is recorded."""
    from websockets.sync.server import serve

    def refuse(connection, request):
        return connection.respond(403, "not you\n")

    with serve(lambda c: None, "127.0.0.1", 0, process_request=refuse) as refusing:
        threading.Thread(target=refusing.serve_forever, daemon=True).start()
        port = refusing.socket.getsockname()[1]
        for upstream in (f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{free_port()}/v1"):
            server = DaphneServer(upstream)
            try:
                headers = {"Authorization": f"Bearer {token}"}
                with pytest.raises(InvalidStatus) as refused:
                    connect(f"{server.ws_url}/v1/responses", additional_headers=headers).close()
                assert refused.value.response.status_code == 403, upstream
                said = server.output()
            finally:
                server.stop()
            assert "the upstream's WebSocket did not open" in said, said
        refusing.shutdown()
    assert not Stream.objects.filter(source="proxy").exists()


# ---- an upstream message over UPSTREAM_MAX_EVENT_BYTES ----------------------------------------

BOUND = 1024 * 1024


@pytest.fixture
def oversized_upstream():
    """A Responses WebSocket that answers a `response.create` with two frames, then one message
    of 16 times BOUND (`sent["size"]`): `sent["whole"]` says whether its send of that message
    completed (the proxy took it all in)."""
    from websockets.sync.server import serve

    sent = {"whole": False, "size": 0}

    def handler(connection):
        connection.recv()
        for n, type_ in enumerate(("response.created", "response.in_progress")):
            response = {"id": "resp_big", "status": "in_progress"}
            connection.send(json.dumps({"type": type_, "sequence_number": n, "response": response}))
        delta = {"type": "response.output_text.delta", "sequence_number": 2, "delta": ""}
        delta["delta"] = "x" * (16 * BOUND)
        message = json.dumps(delta)
        sent["size"] = len(message)
        with contextlib.suppress(ConnectionClosed, OSError):
            connection.send(message)
            sent["whole"] = True
            connection.recv()  # (until the proxy goes)

    with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}/v1", sent
        server.shutdown()


def test_an_upstream_message_over_the_bound_closes_with_4009_and_ends_its_response(
    people, token, oversized_upstream
):
    """The proxy stops at the oversized message's frame header (the protocol's max_size is the
    bound): the client had the two frames before it and its socket closes with 4009; the
    response ends `truncated`, event_too_large, with those two frames stored; the message's 16
    MiB were never taken in."""
    url, sent = oversized_upstream
    server = DaphneServer(url, overrides={"UPSTREAM_MAX_EVENT_BYTES": BOUND})
    try:
        frames = []
        with connect(
            f"{server.ws_url}/v1/responses",
            additional_headers={"Authorization": f"Bearer {token}"},
            max_size=None,
        ) as ws:
            ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    frames.append(json.loads(ws.recv(timeout=30))["type"])
        [stream] = proxied_streams(1)
    finally:
        server.stop()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4009
    assert frames == ["response.created", "response.in_progress"]
    assert (stream.status, stream.error_code) == ("truncated", "event_too_large")
    assert f"an upstream message of {sent['size']} bytes" in stream.error_message
    stored = [json.loads(e.data)["type"] for e in Event.objects.filter(stream=stream)]
    assert stored == frames and stream.event_count == 2
    assert "missing_terminal" not in set(
        Finding.objects.filter(stream=stream).values_list("code", flat=True)
    )
    assert not sent["whole"]
