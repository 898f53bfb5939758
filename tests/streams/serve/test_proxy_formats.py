"""Chat Completions and Anthropic Messages through the recording proxy (streams/serve/proxy.py)
on a real Daphne, against the simulator over real HTTP, with the official `openai` and
`anthropic` SDKs and plain httpx as clients: the same bytes as a direct call, every event
recorded and checked by its format's checker, usage and cost on the stream."""

import asyncio
import json

import anthropic
import httpx
import openai
import pytest

from streams.core import formats
from streams.core.capture import parse_sse_bytes
from streams.models import ApiToken, Event, Finding, Stream
from streams.serve.export import iter_sse
from streams.simulator.models import MODELS
from tests.conftest import DaphneServer, SimulatorProcess
from tests.support.hostile import RawUpstream, sse
from tests.support.recording import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

META = {"deterministic_ids": "true", "seed": "48", "time_scale": "0.02"}
QUESTION = [{"role": "user", "content": "What is the weather in Utrecht?"}]
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    }
]
MESSAGES_TOOLS = [
    {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
    }
]


@pytest.fixture
def token(people):
    return ApiToken.issue(people.owner, name="formats test")


def chat_body(scenario="normal", **extra):
    return {
        "model": "gpt-oss-20b",
        "messages": QUESTION,
        "stream": True,
        "metadata": {**META, "scenario": scenario},
        **extra,
    }


def messages_body(scenario="normal", **extra):
    return {"max_tokens": 300, **chat_body(scenario), **extra}


def post(url, body, headers=None):
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", url, json=body, headers=headers) as r:
            return r.status_code, r.headers, b"".join(r.iter_raw())


def proxied(server, path, body, token, scheme="bearer"):
    auth = {"Authorization": f"Bearer {token}"} if scheme == "bearer" else {"x-api-key": token}
    status, headers, content = post(f"{server.url}/v1{path}", body, auth)
    return status, content, wait_terminal(int(headers["x-streamscope-stream"]))


def started(server, token, data):
    """A stream started through the API (not the proxy), once it ended."""
    r = httpx.post(
        f"{server.url}/api/streams/",
        json={**data, "metadata": META},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return wait_terminal(r.json()["id"])


def codes(stream):
    return sorted(Finding.objects.filter(stream=stream).values_list("code", flat=True))


def recorded(stream):
    return list(Event.objects.filter(stream=stream).order_by("index"))


class TestChatCompletions:
    def test_the_sdk_streams_with_usage_as_directly_and_the_stream_has_usage_and_cost(
        self, live_server_daphne, simulator_process, token
    ):
        body = chat_body(stream_options={"include_usage": True})
        del body["stream"]
        direct = openai.OpenAI(base_url=simulator_process.base_url, api_key="x", max_retries=0)
        through = openai.OpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )
        want = [c.model_dump() for c in direct.chat.completions.create(stream=True, **body)]
        got = [c.model_dump() for c in through.chat.completions.create(stream=True, **body)]
        assert got == want and want[-1]["usage"]["completion_tokens"] > 0
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert (stream.format, stream.status, codes(stream)) == ("chat", "completed", [])
        text = "".join(c["choices"][0]["delta"]["content"] or "" for c in want if c["choices"])
        assert stream.output_text == text
        assert stream.event_count == len(want) + 1  # and data: [DONE]
        assert stream.usage_source == "reported"
        assert stream.input_tokens == want[-1]["usage"]["prompt_tokens"]
        assert stream.output_tokens == want[-1]["usage"]["completion_tokens"]
        assert stream.cost_nanos and stream.cost_nanos > 0
        assert stream.upstream_id == want[0]["id"] and stream.resolved_model == "gpt-oss-20b"
        assert stream.ttft_ms is not None and stream.prompt == QUESTION[0]["content"]

    def test_the_async_sdk_gets_a_tool_call_whose_fragments_are_joined(
        self, live_server_daphne, simulator_process, token
    ):
        body = chat_body(tools=CHAT_TOOLS)
        del body["stream"]

        async def calls(base_url, key):
            client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
            chunks = [c async for c in await client.chat.completions.create(stream=True, **body)]
            await client.close()
            return chunks

        want = asyncio.run(calls(simulator_process.base_url, "x"))
        got = asyncio.run(calls(f"{live_server_daphne.url}/v1", token))
        assert [c.model_dump() for c in got] == [c.model_dump() for c in want]
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert (stream.status, codes(stream)) == ("completed", [])
        [call] = [item for item in stream.parts if item["type"] == "function_call"]
        assert call["name"] == "get_weather"
        assert json.loads(call["arguments"]) == {"location": "Utrecht", "unit": "celsius"}
        # TTFT at the first tool-call delta, which is the first tool call too
        assert stream.first_tool_call_us == stream.first_token_us is not None

    def test_a_client_that_leaves_at_done_before_the_bodys_end_leaves_a_complete_record(
        self, live_server_daphne, token
    ):
        # the openai SDK closes the response at `data: [DONE]`; the upstream's body ends a
        # moment later (here 0.5 s): the record is the whole stream, not a cancelled one
        body = chat_body(stream_options={"include_usage": True})
        body["metadata"]["linger_s"] = "0.5"
        del body["stream"]
        through = openai.OpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )
        chunks = list(through.chat.completions.create(stream=True, **body))
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert (stream.status, codes(stream)) == ("completed", [])
        assert stream.event_count == len(chunks) + 1

    def test_stream_false_gives_the_completion_and_records_its_usage(
        self, live_server_daphne, simulator_process, token
    ):
        body = chat_body(stream=False)
        through = openai.OpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )
        completion = through.chat.completions.create(**body)
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.status == "completed" and stream.format == "chat"
        assert stream.output_text == completion.choices[0].message.content
        assert stream.output_tokens == completion.usage.completion_tokens

    @pytest.mark.parametrize("scenario", ["comments", "content_filter", "refusal"])
    def test_the_client_gets_the_upstreams_bytes_and_comments_are_stored_not_events(
        self, live_server_daphne, simulator_process, token, scenario
    ):
        body = chat_body(scenario)
        _, _, direct = post(f"{simulator_process.base_url}/chat/completions", body)
        status, content, stream = proxied(live_server_daphne, "/chat/completions", body, token)
        assert (status, content) == (200, direct)
        events = parse_sse_bytes(direct)
        assert [e.data for e in recorded(stream)] == [e.data for e in events]
        assert stream.event_count == len(events)
        # every byte the upstream sent is stored: the .sse export is its bytes, comments too
        assert b"".join(iter_sse(stream)) == direct
        if scenario == "comments":
            comments = [e.preamble for e in recorded(stream) if e.preamble]
            assert comments == [": OPENROUTER PROCESSING\n\n"] * 2
            assert "OPENROUTER" not in stream.output_text

    def test_a_responses_streams_comments_and_retry_blocks_are_stored(
        self, live_server_daphne, simulator_process, token
    ):
        body = {"model": "gpt-oss-120b", "input": "Hi", "stream": True}
        body["metadata"] = {**META, "scenario": "comments"}
        _, _, direct = post(f"{simulator_process.base_url}/responses", body)
        status, content, stream = proxied(live_server_daphne, "/responses", body, token)
        assert (status, content) == (200, direct)
        assert b"retry: 1000" in direct and b": keep-alive" in direct
        assert stream.event_count == len(parse_sse_bytes(direct))
        assert b"".join(iter_sse(stream)) == direct

    @pytest.mark.parametrize(
        "scenario, found, status",
        [
            ("missing_done", ["done_missing"], "completed"),
            ("finish_twice", ["finish_reason_repeated"], "completed"),
            ("after_done", ["event_after_terminal"], "completed"),
            ("usage_with_choices", ["usage_chunk_has_choices"], "completed"),
            ("error", [], "failed"),
        ],
    )
    def test_each_fault_is_recorded_with_exactly_its_finding(
        self, live_server_daphne, token, scenario, found, status
    ):
        _, _, stream = proxied(live_server_daphne, "/chat/completions", chat_body(scenario), token)
        assert (codes(stream), stream.status) == (found, status)

    def test_a_reset_upstream_resets_the_client(self, live_server_daphne, token):
        client = openai.OpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )
        body = chat_body("reset")
        del body["stream"]
        with pytest.raises((httpx.HTTPError, openai.APIError)):
            for _ in client.chat.completions.create(stream=True, **body):
                pass
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert (stream.status, stream.error_code) == ("truncated", "connection_reset")
        assert stream.format == "chat" and stream.event_count > 0


class TestMessages:
    def sdk(self, base_url, key, **kwargs):
        return anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, **kwargs)

    def test_the_sdk_streams_thinking_and_tools_as_directly_and_the_stream_keeps_them(
        self, live_server_daphne, simulator_process, token
    ):
        body = messages_body(
            tools=MESSAGES_TOOLS, thinking={"type": "enabled", "budget_tokens": 100}
        )
        del body["stream"]
        metadata = body.pop("metadata")

        def final(client):
            with client.messages.stream(**body, extra_body={"metadata": metadata}) as events:
                kinds = [e.type for e in events]
                return kinds, events.get_final_message().model_dump()

        direct = final(self.sdk(simulator_process.base_url.removesuffix("/v1"), "x"))
        got = final(self.sdk(live_server_daphne.url, token))
        assert got == direct
        message = got[1]
        assert [b["type"] for b in message["content"]] == ["thinking", "text", "tool_use"]
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert (stream.format, stream.status, codes(stream)) == ("messages", "completed", [])
        thinking, text, tool = stream.parts
        assert thinking["content"] == [message["content"][0]["thinking"]]
        assert thinking["signature"] == message["content"][0]["signature"]
        assert stream.output_text == text["parts"][0]["text"] == message["content"][1]["text"]
        assert json.loads(tool["arguments"]) == message["content"][2]["input"]
        assert stream.output_tokens == message["usage"]["output_tokens"]
        assert stream.input_tokens == message["usage"]["input_tokens"]
        assert stream.usage_source == "reported" and stream.cost_nanos > 0
        assert stream.ttft_ms is not None and stream.first_tool_call_us is not None

    def test_the_bytes_are_the_upstreams_and_export_byte_for_byte(
        self, live_server_daphne, simulator_process, token
    ):
        body = messages_body(tools=MESSAGES_TOOLS)
        _, _, direct = post(f"{simulator_process.base_url}/messages", body)
        status, content, stream = proxied(live_server_daphne, "/messages", body, token, "x-api-key")
        assert (status, content) == (200, direct)
        assert [(e.event_name, e.data) for e in recorded(stream)] == [
            (e.event_name, e.data) for e in parse_sse_bytes(direct)
        ]
        assert b"".join(iter_sse(stream)) == direct

    @pytest.mark.parametrize(
        "scenario, found, status",
        [
            ("never_stopped", ["block_never_stopped"], "completed"),
            ("out_of_order", ["block_index_out_of_order"], "completed"),
            ("after_stop", ["event_after_terminal"], "completed"),
            ("error", [], "failed"),
        ],
    )
    def test_each_fault_is_recorded_with_exactly_its_finding(
        self, live_server_daphne, token, scenario, found, status
    ):
        _, _, stream = proxied(live_server_daphne, "/messages", messages_body(scenario), token)
        assert (codes(stream), stream.status) == (found, status)

    def test_the_models_are_listed_in_anthropics_shape(self, live_server_daphne, token):
        models = self.sdk(live_server_daphne.url, token).models.list()
        assert [m.id for m in models.data] == list(MODELS)


KEY = "sk-ant-messages-own-key-123456"


@pytest.fixture(scope="module")
def keyed_messages_upstream():
    """A simulator that wants its own key in x-api-key, as Anthropic's API does."""
    import os

    os.environ["SIMULATOR_API_KEY"] = KEY
    try:
        sim = SimulatorProcess()
    finally:
        del os.environ["SIMULATOR_API_KEY"]
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def messages_server(
    django_db_setup, simulator_process, keyed_messages_upstream, _relay_db_connections
):
    """Responses and Chat to one upstream, Messages to its own, with its own key."""
    env = {
        "UPSTREAM_MESSAGES_BASE_URL": keyed_messages_upstream.base_url,
        "UPSTREAM_MESSAGES_API_KEY": KEY,
    }
    server = DaphneServer(simulator_process.base_url, env=env)
    yield server
    server.stop()


class TestMessagesUpstream:
    def test_the_token_in_x_api_key_gets_the_upstreams_own_key_which_never_comes_back(
        self, messages_server, token
    ):
        client = anthropic.Anthropic(base_url=messages_server.url, api_key=token, max_retries=0)
        body = messages_body()
        del body["stream"]
        metadata = body.pop("metadata")
        message = client.messages.create(**body, extra_body={"metadata": metadata})
        assert message.content[0].text
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.format == "messages" and stream.status == "completed"
        rows = [*Stream.objects.values_list(), *Event.objects.values_list("data")]
        assert KEY not in repr(rows) and KEY not in messages_server.output()

    def test_the_clients_own_key_is_passed_through(self, messages_server, token):
        client = anthropic.Anthropic(
            base_url=messages_server.url,
            api_key=KEY,
            default_headers={"X-Streamscope-Token": token},
            max_retries=0,
        )
        body = messages_body()
        del body["stream"]
        metadata = body.pop("metadata")
        with client.messages.stream(**body, extra_body={"metadata": metadata}) as events:
            text = events.get_final_text()
        stream = wait_terminal(Stream.objects.get(source="proxy").pk)
        assert stream.output_text == text and codes(stream) == []

    def test_a_stream_started_through_the_api_goes_there_with_that_key(
        self, messages_server, keyed_messages_upstream, token
    ):
        """Our own request (the API's, the playground's) goes to the Messages upstream with
        that upstream's key (the one it accepts), never the Responses upstream's."""
        stream = started(messages_server, token, {"input": "Hallo", "format": "messages"})
        assert (stream.format, stream.status, stream.http_status) == ("messages", "completed", 200)
        assert stream.upstream_url == f"{keyed_messages_upstream.base_url}/messages"
        assert stream.output_text and codes(stream) == []

    def test_a_wrong_key_for_that_upstream_is_its_401(self, messages_server, token):
        client = anthropic.Anthropic(
            base_url=messages_server.url,
            api_key="sk-ant-wrong",
            default_headers={"X-Streamscope-Token": token},
            max_retries=0,
        )
        body = messages_body()
        del body["stream"]
        with pytest.raises(anthropic.AuthenticationError):
            client.messages.create(**body)


ECHOED = "ant-upstream-key-0123456789abcdef"  # (no shape the gate knows: only as a key)


def echo_the_key(method, path, headers, body):
    """A Messages upstream that says the key it was called with (and the API version asked
    for), in a text delta."""
    key = headers.get("x-api-key", "")
    version = headers.get("anthropic-version", "")
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": f"your key is {key} for {version}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]  # fmt: skip
    return 200, "text/event-stream", [sse(json.dumps(e), event=e["type"]) for e in events]


@pytest.fixture(scope="module")
def echoing_messages_server(django_db_setup, simulator_process, _relay_db_connections):
    upstream = RawUpstream(echo_the_key)
    env = {"UPSTREAM_MESSAGES_BASE_URL": upstream.base_url, "UPSTREAM_MESSAGES_API_KEY": ECHOED}
    server = DaphneServer(simulator_process.base_url, env=env)
    yield server
    server.stop()
    upstream.stop()


def test_the_messages_upstreams_key_echoed_back_never_leaves(echoing_messages_server, people):
    token = ApiToken.issue(people.owner, name="echo")
    server = echoing_messages_server
    status, content, stream = proxied(server, "/messages", messages_body(), token, "x-api-key")
    assert status == 200 and b"your key is " in content and ECHOED.encode() not in content
    assert ECHOED in stream.output_text  # the record is verbatim; what is shown of it is not
    page = httpx.get(
        f"{server.url}/api/streams/{stream.pk}/", headers={"Authorization": f"Bearer {token}"}
    )
    assert page.status_code == 200 and "your key is" in page.text and ECHOED not in page.text


def test_a_started_messages_stream_whose_upstream_echoes_its_key_never_shows_it(
    echoing_messages_server, people
):
    """The API's own Messages request sends the upstream's key in x-api-key, with Anthropic's
    required anthropic-version; an upstream that says the key back gets it recorded verbatim
    and never shown (the egress gate knows every format's key)."""
    token = ApiToken.issue(people.owner, name="echo")
    stream = started(echoing_messages_server, token, {"input": "Hi", "format": "messages"})
    assert f"your key is {ECHOED} for {formats.ANTHROPIC_VERSION}" in stream.output_text
    headers = {"Authorization": f"Bearer {token}"}
    for path in (f"/api/streams/{stream.pk}/", f"/api/streams/{stream.pk}/events/"):
        page = httpx.get(f"{echoing_messages_server.url}{path}", headers=headers)
        assert page.status_code == 200 and "your key is" in page.text, path
        assert ECHOED not in page.text, path
