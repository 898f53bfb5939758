"""The Anthropic Messages checker (streams/core/formats/messages.py): each fault capture
flagged with exactly its finding, the clean ones with none; thinking and tool use kept."""

import json

import pytest

from streams.core import formats
from streams.core.capture import parse_sse_bytes
from streams.core.formats.messages import MessagesChecker
from tests.support.captures import checked, codes
from tests.support.paths import CAPTURES

MESSAGES = CAPTURES / "messages"


@pytest.mark.parametrize(
    "capture, expected, status",
    [
        ("normal", [], "completed"),
        ("tools_thinking", [], "completed"),
        ("never_stopped", ["block_never_stopped"], "completed"),
        ("stopped_twice", ["block_stopped_twice"], "completed"),
        ("out_of_order", ["block_index_out_of_order"], "completed"),
        ("delta_before_start", ["block_delta_before_start"], "completed"),
        ("bad_json", ["tool_input_invalid_json"], "completed"),
        ("after_stop", ["event_after_terminal"], "completed"),
        ("error", [], "failed"),
    ],
)
def test_each_capture_is_flagged_with_exactly_its_fault(capture, expected, status):
    checker = checked(formats.MESSAGES, capture)
    assert codes(checker) == expected
    assert checker.status == status


def test_thinking_with_its_signature_text_and_the_tool_use_are_kept_in_block_order():
    checker = checked(formats.MESSAGES, "tools_thinking")
    thinking, text, tool = checker.items()
    assert thinking["type"] == "reasoning" and thinking["content"][0].strip()
    assert thinking["signature"].startswith("sig_")
    assert text["parts"][0]["text"] == checker.output_text == " Let me look that up."
    assert tool["type"] == "function_call" and tool["name"] == "get_weather"
    assert json.loads(tool["arguments"]) == {"location": "Utrecht", "unit": "celsius"}
    assert tool["call_id"].startswith("toolu_")


def test_usage_is_message_starts_input_and_the_last_message_deltas_output():
    checker = checked(formats.MESSAGES, "normal")
    events = [json.loads(e.data) for e in parse_sse_bytes((MESSAGES / "normal.sse").read_bytes())]
    start = events[0]["message"]["usage"]
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert checker.usage["output_tokens"] == delta["usage"]["output_tokens"]
    assert checker.usage["input_tokens"] == start["input_tokens"]


def test_an_error_ends_the_stream_and_says_why():
    checker = checked(formats.MESSAGES, "error")
    assert (checker.error_code, checker.error_message) == ("overloaded_error", "Overloaded")


def feed_all(*events):
    checker = MessagesChecker()
    results = [checker.feed(i, e["type"], json.dumps(e)) for i, e in enumerate(events)]
    checker.close()
    return checker, results


START = {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {
    "input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1}}}  # fmt: skip
STOP = {"type": "message_stop"}


def block(i, kind="text", **extra):
    return {"type": "content_block_start", "index": i, "content_block": {"type": kind, **extra}}


def delta(i, **d):
    return {"type": "content_block_delta", "index": i, "delta": d}


def end(i):
    return {"type": "content_block_stop", "index": i}


def test_the_first_text_or_tool_input_delta_is_the_first_output():
    checker, results = feed_all(
        START,
        block(0, "tool_use", id="toolu_1", name="f", input={}),
        delta(0, type="input_json_delta", partial_json='{"a":'),
        delta(0, type="input_json_delta", partial_json="1}"),
        end(0),
        STOP,
    )
    assert codes(checker) == []
    assert [r.kind for r in results] == [
        "created",
        "tool_call",
        "output",
        "output",
        None,
        "terminal",
    ]
    assert [r.first_output for r in results] == [False, False, True, False, False, False]
    assert results[1].first_tool_call


def test_cached_input_counts_as_input_and_as_cached():
    checker, _ = feed_all(START, block(0), delta(0, type="text_delta", text="x"), end(0), STOP)
    assert checker.usage["input_tokens"] == 100
    assert checker.usage["input_tokens_details"] == {"cached_tokens": 90}


def test_an_event_line_naming_another_type_is_a_warning():
    checker = MessagesChecker()
    checker.feed(0, "message_stop", json.dumps(START))
    assert codes(checker) == ["event_name_mismatch"]


def test_the_first_event_must_be_message_start():
    checker, _ = feed_all(block(0), end(0), STOP)
    assert codes(checker) == ["first_not_message_start"]


@pytest.mark.parametrize("capture", ["anthropic_sonnet4_thinking", "anthropic_sonnet4_tool_use"])
def test_real_captures_have_no_false_finding(capture):
    checker = checked(formats.MESSAGES, capture)
    assert codes(checker) == [] and checker.status == "completed"
    assert checker.usage["output_tokens"] > 0 and checker.output_text
    for item in checker.items():
        if item["type"] == "function_call":
            assert isinstance(json.loads(item["arguments"]), dict)
        if item["type"] == "reasoning":
            assert item["content"][0] and item["signature"]
