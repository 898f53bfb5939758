"""Our own requests per format (`formats.request_body`, `rows.build_request_body`) and the
header each format's upstream takes its key in (`formats.key_header`, `request_headers`): a
request in the format's own shape, never another's translated."""

import pytest

from streams.core import formats
from streams.ingest.upstream import request_headers
from streams.store.rows import build_request_body, input_of

HISTORY = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "And Delft?"},
]


def test_chat_asks_for_usage_and_puts_the_instructions_first():
    body = build_request_body(
        HISTORY, "m", format=formats.CHAT, instructions="Be brief.", scenario="missing_done",
        temperature=0.3, max_output_tokens=50, metadata={"time_scale": "0"},
    )  # fmt: skip
    assert body == {
        "model": "m",
        "messages": [{"role": "system", "content": "Be brief."}, *HISTORY],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 50,
        "temperature": 0.3,
        "metadata": {"time_scale": "0", "scenario": "missing_done"},
    }
    assert input_of(body) == body["messages"]


def test_messages_has_its_system_and_always_max_tokens():
    body = build_request_body("Hallo", "", format=formats.MESSAGES, instructions="Kort.")
    assert body == {
        "model": "auto",
        "messages": [{"role": "user", "content": "Hallo"}],
        "stream": True,
        "max_tokens": formats.MESSAGES_MAX_TOKENS,
        "system": "Kort.",
    }
    assert build_request_body("x", format=formats.MESSAGES, max_output_tokens=9)["max_tokens"] == 9


def test_responses_is_as_it_was_and_previous_response_id_is_its_alone():
    assert build_request_body("Hi", scenario="gap") == {
        "model": "auto", "input": "Hi", "stream": True, "metadata": {"scenario": "gap"},
    }  # fmt: skip
    with pytest.raises(ValueError):
        build_request_body("Hi", format=formats.CHAT, previous_response_id="resp_1")


def test_each_upstream_gets_the_key_where_its_api_takes_it():
    assert request_headers("k")["Authorization"] == "Bearer k"
    assert request_headers("k", formats.CHAT)["Authorization"] == "Bearer k"
    anthropic = request_headers("k", formats.MESSAGES)
    assert anthropic["x-api-key"] == "k" and "Authorization" not in anthropic
    assert anthropic["anthropic-version"] == formats.ANTHROPIC_VERSION
    assert "Authorization" not in request_headers("", formats.RESPONSES)
