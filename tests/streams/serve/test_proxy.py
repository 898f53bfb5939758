"""The recording proxy (streams/serve/proxy.py) on a real Daphne, against the simulator over real
HTTP, with the official openai SDK and plain httpx as its clients."""

import asyncio
import json
import time

import httpx
import openai
import pytest

from streams.models import ApiToken, Event, SealedSecret, Stream
from streams.serve import proxy
from tests.conftest import DaphneServer, SimulatorProcess
from tests.support import hostile
from tests.support.recording import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

# Same seed and ids through the proxy and directly: the simulator sends the same bytes.
META = {"deterministic_ids": "true", "seed": "7", "time_scale": "0.02"}


def request(scenario="normal", stream=True, **metadata):
    return {
        "model": "auto",
        "input": "Tell me about Utrecht",
        "stream": stream,
        "metadata": {**META, "scenario": scenario, **metadata},
    }


@pytest.fixture(autouse=True)
def _streams_end_before_teardown(transactional_db):
    """A test whose client hung up leaves the server finishing its stream: the flush at
    teardown must not run beside those last writes (on PostgreSQL, TRUNCATE against the
    recorder's transaction is a deadlock). (After the database fixture, so torn down before
    its flush.)"""
    yield
    deadline = time.monotonic() + 20
    while Stream.objects.filter(status__in=Stream.ACTIVE_STATUSES).exists():
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


@pytest.fixture
def token(people):
    return ApiToken.issue(people.owner, name="proxy test")


def sdk(server, token, **kwargs):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0, **kwargs)


def post(base, body, headers=None, timeout=30):
    """The raw exchange: status, headers and the body's bytes as they came."""
    with httpx.Client(timeout=timeout) as client:
        with client.stream("POST", f"{base}/responses", json=body, headers=headers) as r:
            return r.status_code, r.headers, b"".join(r.iter_raw())


def hang_up_mid_stream(server, token, body):
    """Start a proxied stream, read it to its first delta, close the connection: its id."""
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "POST",
            f"{server.url}/v1/responses",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        ) as r:
            stream_id = int(r.headers["x-streamscope-stream"])
            for line in r.iter_lines():
                if "output_text.delta" in line:
                    return stream_id
    raise AssertionError("the stream ended before its first delta")


def serving(simulator, **overrides):
    """A Daphne of its own with these STREAMSCOPE settings, for a module-scoped fixture."""
    server = DaphneServer(simulator.base_url, overrides=overrides)
    yield server
    server.stop()


def recorded_bytes(stream):
    """The body as the recorder stored it, event by event (verbatim data)."""
    return [e.data for e in Event.objects.filter(stream=stream).order_by("index")]


class TestStreaming:
    def test_the_sdk_gets_what_a_direct_call_gets_and_every_event_is_recorded(
        self, live_server_daphne, simulator_process, token
    ):
        body = request()
        direct = openai.OpenAI(base_url=simulator_process.base_url, api_key="x", max_retries=0)
        want = [e.model_dump() for e in direct.responses.create(**body)]
        got = [e.model_dump() for e in sdk(live_server_daphne, token).responses.create(**body)]
        assert got == want and got[-1]["type"] == "response.completed"
        stream = Stream.objects.filter(source=Stream.Source.PROXY).get()
        stream = wait_terminal(stream.pk)
        assert stream.status == "completed" and stream.user.username == "owner"
        assert stream.event_count == len(want) and stream.error_findings == 0
        events = list(Event.objects.filter(stream=stream).order_by("index"))
        assert [json.loads(e.data)["sequence_number"] for e in events] == list(range(len(want)))
        # both times: receipt from the upstream, then the hand-over to the client's socket
        assert all(e.sent_us is not None and e.sent_us >= e.t_us for e in events)
        assert stream.proxy_added_p50_ms is not None
        assert 0 <= stream.proxy_added_p50_ms <= stream.proxy_added_p99_ms
        assert stream.ttft_ms is not None and stream.resolved_model

    def test_the_client_gets_the_upstreams_bytes_and_headers(
        self, live_server_daphne, simulator_process, token
    ):
        body = request("utf8_split")
        status, headers, direct = post(simulator_process.base_url, body)
        auth = {"Authorization": f"Bearer {token}"}
        p_status, p_headers, proxied = post(f"{live_server_daphne.url}/v1", body, auth)
        assert (p_status, proxied) == (status, direct)
        assert p_headers["content-type"] == headers["content-type"]
        assert p_headers["x-accel-buffering"] == "no"
        assert p_headers["cache-control"] == "no-cache"
        stream = wait_terminal(int(p_headers["x-streamscope-stream"]))
        assert stream.source == "proxy" and stream.status == "completed"
        sse_data = [line[6:] for line in direct.decode().split("\n") if line.startswith("data: ")]
        assert recorded_bytes(stream) == sse_data

    @pytest.mark.parametrize(
        "scenario, status, recorded",
        [
            ("http_429", 429, "failed"),
            ("http_500", 500, "failed"),
            ("wrong_content_type", 200, "failed"),
            ("malformed_json", 200, "completed"),
            ("unknown_event", 200, "completed"),
            ("missing_terminal", 200, "truncated"),
            ("error", 200, "failed"),
        ],
    )
    def test_each_scenario_reaches_the_client_as_sent_and_is_recorded(
        self, live_server_daphne, simulator_process, token, scenario, status, recorded
    ):
        body = request(scenario)
        d_status, d_headers, direct = post(simulator_process.base_url, body)
        auth = {"Authorization": f"Bearer {token}"}
        p_status, p_headers, proxied = post(f"{live_server_daphne.url}/v1", body, auth)
        assert (p_status, proxied) == (d_status, direct) and p_status == status
        if "retry-after" in d_headers:
            assert p_headers["retry-after"] == d_headers["retry-after"]
        stream = wait_terminal(int(p_headers["x-streamscope-stream"]))
        assert stream.status == recorded and stream.http_status == status
        if not d_headers["content-type"].startswith("text/event-stream"):
            # a body that is not an event stream is kept whole, verbatim
            assert recorded_bytes(stream) == [direct.decode()]

    def test_a_reset_upstream_resets_the_client(self, live_server_daphne, token):
        client = sdk(live_server_daphne, token)
        with pytest.raises((httpx.HTTPError, openai.APIError)):
            for _ in client.responses.create(**request("reset")):
                pass
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.status == "truncated" and stream.error_code == "connection_reset"
        assert stream.event_count > 0

    def test_a_huge_delta_arrives_whole(self, live_server_daphne, token):
        events = list(
            sdk(live_server_daphne, token).responses.create(
                **request("huge_delta", huge_bytes="300000")
            )
        )
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert len(text) >= 300_000
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.status == "completed" and len(stream.output_text) == len(text)

    async def test_the_async_sdk_and_50_concurrent_clients_lose_nothing(
        self, live_server_daphne, token
    ):
        client = openai.AsyncOpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )

        async def one(i):
            body = request(seed=str(i))
            return [e async for e in await client.responses.create(**body)]

        results = await asyncio.gather(*(one(i) for i in range(50)))
        await client.close()
        assert all(r[-1].type == "response.completed" for r in results)

        def check():
            streams = list(Stream.objects.filter(source="proxy"))
            assert len(streams) == 50
            for s in streams:
                wait_terminal(s.pk)
            counts = sorted(Event.objects.filter(stream__in=streams).values_list("stream_id"))
            assert len(counts) == sum(len(r) for r in results)  # 0 lost, 0 duplicated
            assert Event.objects.filter(stream__in=streams, sent_us__isnull=True).count() == 0

        from asgiref.sync import sync_to_async

        await sync_to_async(check)()


class TestNonStreaming:
    def test_stream_false_gives_the_response_object_and_records_it(
        self, live_server_daphne, simulator_process, token
    ):
        body = request(stream=False)
        direct = openai.OpenAI(base_url=simulator_process.base_url, api_key="x", max_retries=0)
        want = direct.responses.create(**body)
        got = sdk(live_server_daphne, token).responses.create(**body)
        assert got.model_dump() == want.model_dump()
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.status == "completed" and stream.http_status == 200
        assert stream.output_text == want.output_text and stream.upstream_id == want.id
        assert stream.resolved_model == want.model and stream.event_count == 1
        # its usage is the answer's, and there are no deltas to count
        assert stream.usage_source == "reported" and stream.output_deltas == 0
        assert (stream.input_tokens, stream.output_tokens, stream.total_tokens) == (
            want.usage.input_tokens,
            want.usage.output_tokens,
            want.usage.total_tokens,
        )
        _, _, direct_body = post(simulator_process.base_url, body)
        assert recorded_bytes(stream) == [direct_body.decode()]  # verbatim

    def test_without_stream_the_sdk_gets_a_stream_and_the_proxy_says_why(
        self, live_server_daphne, token
    ):
        """The API streams by default: `responses.create()` without `stream=` gets an event
        stream, which the SDK hands back as a `str`. The proxy says so in a header and a log
        line (never when the client asked either way)."""
        body = {k: v for k, v in request().items() if k != "stream"}
        raw = sdk(live_server_daphne, token).responses.with_raw_response.create(**body)
        got = raw.parse()
        assert isinstance(got, str) and '"type":"response.completed"' in got
        assert raw.headers["content-type"].startswith("text/event-stream")
        hint = raw.headers["x-streamscope-hint"]
        assert hint == proxy.STREAMED_BY_DEFAULT and '"stream": true' in hint
        stream_id = raw.headers["x-streamscope-stream"]
        wait_terminal(int(stream_id))
        log = live_server_daphne.output()
        assert f'stream {stream_id}: The request had no "stream" field' in log
        for asked in (True, False):
            r = sdk(live_server_daphne, token).responses.with_raw_response.create(
                **request(stream=asked)
            )
            r.parse()
            assert "x-streamscope-hint" not in r.headers, asked

    def test_models_are_forwarded(self, live_server_daphne, simulator_process, token):
        want = httpx.get(f"{simulator_process.base_url}/models").json()
        got = sdk(live_server_daphne, token).models.list()
        assert [m.id for m in got.data] == [m["id"] for m in want["data"]]


class TestAccess:
    def test_no_token_is_401_and_nothing_reaches_the_upstream(
        self, live_server_daphne, simulator_process, people
    ):
        before = httpx.get(f"{simulator_process.root}/_simulator/responses/").json()["data"]
        for headers in (
            {},
            {"Authorization": "Bearer ss_guessed"},
            {"Authorization": "Bearer sk-x"},
        ):
            status, _, body = post(f"{live_server_daphne.url}/v1", request(), headers)
            assert status == 401
            assert json.loads(body)["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            sdk(live_server_daphne, "ss_nope").responses.create(**request())
        for path in ("/v1/models", "/v1/chat/completions", "/v1"):
            r = httpx.get(f"{live_server_daphne.url}{path}")
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        after = httpx.get(f"{simulator_process.root}/_simulator/responses/").json()["data"]
        assert after == before and not Stream.objects.exists()

    def test_other_paths_are_404_in_the_openai_shape(self, live_server_daphne, token):
        r = httpx.post(
            f"{live_server_daphne.url}/v1/embeddings",
            json={},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 404
        assert set(r.json()["error"]) == {"message", "type", "code"}

    def test_a_host_not_allowed_is_400_and_nothing_reaches_the_upstream(
        self, live_server_daphne, token
    ):
        for host in ("evil.example", "", "127.0.0.1.evil.example:80"):
            r = httpx.post(
                f"{live_server_daphne.url}/v1/responses",
                json=request(),
                headers={"Authorization": f"Bearer {token}", "Host": host},
            )
            assert r.status_code == 400, host
            assert r.json()["error"]["code"] == "bad_host"
        assert not Stream.objects.exists()

    def test_a_revoked_token_stops_working(self, live_server_daphne, token):
        ApiToken.objects.update(revoked=True)
        time.sleep(0.1)  # (this token was never cached: first use)
        status, _, _ = post(
            f"{live_server_daphne.url}/v1", request(), {"Authorization": f"Bearer {token}"}
        )
        assert status == 401

    def test_bad_bodies_are_400_and_nothing_is_recorded(self, live_server_daphne, token):
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for content in (b"not json", b"[1]", b"[" * 100_000, b'{"input": NaN}'):
            r = httpx.post(f"{live_server_daphne.url}/v1/responses", content=content, headers=auth)
            assert r.status_code == 400, content[:20]
            assert r.json()["error"]["code"] == "invalid_json"
        assert not Stream.objects.exists()


@pytest.fixture(scope="module")
def keyed_upstream():
    """A simulator that wants its own key, as a real upstream does."""
    import os

    os.environ["SIMULATOR_API_KEY"] = "sk-client-own-key-123456"
    try:
        sim = SimulatorProcess()
    finally:
        del os.environ["SIMULATOR_API_KEY"]
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def passthrough_server(django_db_setup, keyed_upstream, _relay_db_connections):
    server = DaphneServer(keyed_upstream.base_url, env={"UPSTREAM_API_KEY": ""})
    yield server
    server.stop()


class TestPassThrough:
    KEY = "sk-client-own-key-123456"

    def test_the_clients_key_is_forwarded_and_never_kept(self, passthrough_server, token):
        client = openai.OpenAI(
            base_url=f"{passthrough_server.url}/v1",
            api_key=self.KEY,
            default_headers={"X-Streamscope-Token": token},
            max_retries=0,
        )
        events = list(client.responses.create(**request()))
        assert events[-1].type == "response.completed"
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.status == "completed"
        rows = [
            *Stream.objects.values_list(),
            *Event.objects.values_list("data", "type", "event_name"),
        ]
        assert self.KEY not in repr(rows)
        assert self.KEY not in passthrough_server.output()
        # kept sealed only, for the egress gate: no piece of it in clear
        [sealed] = SealedSecret.objects.values_list("fingerprint", "sealed")
        assert not any(self.KEY[i : i + 8] in repr(sealed) for i in range(len(self.KEY) - 7))

    def test_without_the_streamscope_token_it_is_refused(self, passthrough_server, people):
        client = openai.OpenAI(
            base_url=f"{passthrough_server.url}/v1", api_key=self.KEY, max_retries=0
        )
        with pytest.raises(openai.AuthenticationError):
            client.responses.create(**request())
        assert not Stream.objects.exists()


@pytest.fixture(scope="module")
def limited_server(django_db_setup, simulator_process, _relay_db_connections):
    yield from serving(simulator_process, **{"PROXY_MAX_CONCURRENT": 1})


class TestLifecycle:
    def test_a_client_that_hangs_up_cancels_the_upstream_request(
        self, live_server_daphne, simulator_process, token
    ):
        body = request("stall", stall_s="30", time_scale="0.02")
        stream_id = hang_up_mid_stream(live_server_daphne, token, body)
        hung_up = time.monotonic()
        stream = wait_terminal(stream_id, timeout=10)
        assert stream.status == "cancelled" and stream.error_code == "client_disconnected"
        assert stream.event_count > 0
        upstream = simulator_process.log(stream.upstream_id)
        deadline = hung_up + 5
        while upstream["outcome"] == "in_progress" and time.monotonic() < deadline:
            time.sleep(0.05)
            upstream = simulator_process.log(stream.upstream_id)
        assert upstream["outcome"] == "client_disconnected"

    def test_over_the_tokens_limit_is_429_with_retry_after(self, limited_server, token):
        auth = {"Authorization": f"Bearer {token}"}
        client = httpx.Client(timeout=30)
        with client.stream(
            "POST",
            f"{limited_server.url}/v1/responses",
            json=request("stall", stall_s="5", time_scale="0.02"),
            headers=auth,
        ) as first:
            assert first.status_code == 200
            status, headers, body = post(f"{limited_server.url}/v1", request(), auth)
            assert status == 429 and headers["retry-after"] == "1"
            assert json.loads(body)["error"]["type"] == "rate_limit_error"
        client.close()


@pytest.fixture(scope="module")
def draining_server(django_db_setup, simulator_process, _relay_db_connections):
    yield from serving(simulator_process, **{"PROXY_ON_DISCONNECT": "drain"})


def test_with_drain_a_client_that_hangs_up_still_gets_a_complete_record(
    draining_server, simulator_process, token
):
    body = request("stall", stall_s="1", time_scale="0.02")
    stream_id = hang_up_mid_stream(draining_server, token, body)
    stream = wait_terminal(stream_id, timeout=20)
    assert stream.status == "completed", (stream.error_code, stream.error_message)
    upstream = simulator_process.log(stream.upstream_id)
    assert upstream["outcome"] == "complete"
    assert stream.event_count == upstream["event_count"]
    # what the client never got has no hand-over time
    events = Event.objects.filter(stream=stream)
    assert events.filter(sent_us__isnull=True).exists()
    assert events.filter(sent_us__isnull=False).exists()


@pytest.fixture(scope="module")
def short_stall_server(django_db_setup, simulator_process, _relay_db_connections):
    yield from serving(simulator_process, **{"STALL_TIMEOUT_S": 0.3})


def test_a_stall_is_recorded_not_retried_behind_the_clients_back(short_stall_server, token):
    client = sdk(short_stall_server, token)
    events = list(client.responses.create(**request("stall", stall_s="1", time_scale="0.02")))
    assert events[-1].type == "response.completed"  # the client waited and got it all
    stream = wait_terminal(Stream.objects.get(source="proxy").pk)
    assert stream.status == "completed" and stream.attempt == 1
    assert not Stream.objects.filter(first_attempt=stream).exists()
    assert stream.findings.filter(code="stall").exists()


# (what the upstream sends before the event that never ends, what of it is stored, `stream`)
ENDLESS_ANSWERS = {
    "an event stream": (
        "text/event-stream",
        hostile.ENDLESS_HEAD,
        ["response.created", "response.in_progress"],
        True,
    ),
    "a JSON answer": ("application/json", b"", [], False),
}


@pytest.mark.parametrize("answer", ENDLESS_ANSWERS)
def test_an_endless_upstream_event_resets_the_client_and_what_it_was_shown_is_counted(
    people, answer
):
    """An upstream that never ends its event (an event stream's third, or the one a JSON
    answer is), through the proxy: the client gets the bytes as they come, up to the bound, and
    then a reset (no clean end passes for the response's); the row ends `truncated`,
    event_too_large, with the events before it, and its message counts every byte the client
    was shown beyond them (the proxy relays no further: the upstream, which would send 16 times
    the bound, is read no further)."""
    content_type, stored_head, stored_types, streamed = ENDLESS_ANSWERS[answer]
    bound = 1024 * 1024
    head, tail = hostile.ENDLESS["an endless line"]
    if not streamed:
        head = b'{"object":"response","output_text":"'
    endless = hostile.Endless(stored_head + head, tail, cap=16 * bound, content_type=content_type)
    upstream = hostile.RawUpstream(endless.answer)
    server = DaphneServer(upstream.base_url, overrides={"UPSTREAM_MAX_EVENT_BYTES": bound})
    try:
        token = ApiToken.issue(people.owner, name="endless")
        got = bytearray()
        with httpx.Client(timeout=30) as client:
            with client.stream(
                "POST",
                f"{server.url}/v1/responses",
                json=request(stream=streamed),
                headers={"Authorization": f"Bearer {token}"},
            ) as r:
                stream_id = int(r.headers["x-streamscope-stream"])
                with pytest.raises(httpx.HTTPError):  # (reset: never a clean end)
                    for chunk in r.iter_raw():
                        got += chunk
        stream = wait_terminal(stream_id)
    finally:
        server.stop()
        upstream.stop()
    assert got.startswith(stored_head + head) and len(got) > bound
    assert (stream.status, stream.error_code) == ("truncated", "event_too_large")
    stored = [json.loads(e.data)["type"] for e in Event.objects.filter(stream=stream)]
    assert stored == stored_types
    # the bytes of the refused event the proxy relayed: all it read past the stored events
    unstored = int(stream.error_message.split(": the ")[1].split()[0])
    relayed = len(got) - len(stored_head)
    assert bound < unstored <= bound + 256 * 1024 and relayed <= unstored
    assert stream.bytes_received == len(stored_head) + unstored
    assert endless.sent < 16 * bound
