"""The Chat Completions checker (streams/core/formats/chat.py): each fault capture flagged with
exactly its finding, the clean ones with none, and the reassembled output per choice."""

import json

import pytest

from streams.core import formats
from streams.core.formats.chat import ChatChecker
from tests.support.captures import checked, codes
from tests.support.paths import CAPTURES

CHAT = CAPTURES / "chat"


@pytest.mark.parametrize(
    "capture, expected, status",
    [
        ("normal", [], "completed"),
        ("tools", [], "completed"),
        ("refusal", [], "completed"),
        ("comments", [], "completed"),
        ("content_filter", ["content_filtered"], "incomplete"),
        ("missing_done", ["done_missing"], "completed"),
        ("finish_twice", ["finish_reason_repeated"], "completed"),
        ("after_done", ["event_after_terminal"], "completed"),
        ("missing_finish", ["finish_reason_missing"], "truncated"),
        ("role_repeated", ["role_not_first"], "completed"),
        ("usage_with_choices", ["usage_chunk_has_choices"], "completed"),
        ("tool_id_changed", ["tool_call_inconsistent"], "completed"),
        ("model_changed", ["chunk_field_changed"], "completed"),
        ("error", [], "failed"),
    ],
)
def test_each_capture_is_flagged_with_exactly_its_fault(capture, expected, status):
    checker = checked(formats.CHAT, capture)
    assert codes(checker) == expected
    assert checker.status == status


def test_the_output_is_reassembled_per_choice_with_usage_in_the_responses_shape():
    checker = checked(formats.CHAT, "normal")
    content = (CHAT / "normal.sse").read_text()
    chunks = [json.loads(line[6:]) for line in content.splitlines() if line[6:7] == "{"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert checker.output_text == text and len(text) > 20
    [message] = checker.items()
    assert message["parts"][0]["text"] == text and message["finish_reason"] == "stop"
    usage = chunks[-1]["usage"]
    assert checker.usage["input_tokens"] == usage["prompt_tokens"]
    assert checker.usage["output_tokens"] == usage["completion_tokens"]
    assert checker.upstream_id == chunks[0]["id"] and checker.response_model == "gpt-oss-20b"


def test_a_tool_calls_fragments_are_joined_by_index():
    checker = checked(formats.CHAT, "tools")
    calls = [i for i in checker.items() if i["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"location": "Utrecht", "unit": "celsius"})
    ]
    assert calls[0]["call_id"].startswith("call_")


def test_the_refusal_is_kept_as_a_refusal_part_not_as_text():
    checker = checked(formats.CHAT, "refusal")
    [message] = checker.items()
    assert checker.output_text == ""
    assert message["parts"][1] == {
        "content_index": 1,
        "type": "refusal",
        "text": " I can't help with that.",
        "done": True,
    }


def chunk(delta=None, finish=None, index=0, **envelope):
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    obj.update(envelope)
    obj["choices"] = [{"index": index, "delta": delta or {}, "finish_reason": finish}]
    return json.dumps(obj)


def feed_all(*datas):
    checker = ChatChecker()
    results = [checker.feed(i, "message", d) for i, d in enumerate(datas)]
    checker.close()
    return checker, results


def call(index, id_=None, name=None, args=""):
    tc = {"index": index, "function": {"arguments": args}}
    if id_:
        tc["id"], tc["type"] = id_, "function"
    if name:
        tc["function"]["name"] = name
    return {"tool_calls": [tc]}


class TestToolCalls:
    def test_a_first_fragment_without_an_id_is_inconsistent(self):
        checker, _ = feed_all(chunk(call(0, name="f")), chunk(finish="tool_calls"), "[DONE]")
        assert codes(checker) == ["tool_call_inconsistent"]

    def test_one_id_at_two_indexes_is_inconsistent(self):
        checker, _ = feed_all(
            chunk(call(0, "call_a", "f", "{}")),
            chunk(call(1, "call_a", "g", "{}")),
            chunk(finish="tool_calls"),
            "[DONE]",
        )
        assert codes(checker) == ["tool_call_inconsistent"]

    def test_parallel_calls_are_fine_and_the_first_is_ttft_and_the_first_tool_call(self):
        checker, results = feed_all(
            chunk({"role": "assistant", "content": None}),
            chunk(call(0, "call_a", "f", '{"a"')),
            chunk(call(1, "call_b", "g", "{}")),
            chunk(call(0, args=":1}")),
            chunk(finish="tool_calls"),
            "[DONE]",
        )
        assert codes(checker) == []
        assert [r.first_output for r in results] == [False, True, False, False, False, False]
        assert [r.first_tool_call for r in results] == [False, True, False, False, False, False]
        args = [i["arguments"] for i in checker.items() if i["type"] == "function_call"]
        assert args == ['{"a":1}', "{}"]


def test_azures_prompt_filter_chunk_is_not_a_changed_envelope():
    first = json.dumps({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                        "prompt_filter_results": []})  # fmt: skip
    checker, results = feed_all(first, chunk({"content": "hi"}), chunk(finish="stop"), "[DONE]")
    assert codes(checker) == [] and checker.upstream_id == "c1"
    assert results[1].kind == "output" and results[1].first_output


def test_a_second_done_is_one_fact_after_the_end():
    checker, _ = feed_all(chunk({"content": "a"}), chunk(finish="stop"), "[DONE]", "[DONE]")
    assert codes(checker) == ["event_after_terminal"]


def test_a_stream_cut_before_any_finish_is_truncated():
    checker, _ = feed_all(chunk({"role": "assistant", "content": "a"}))
    assert codes(checker) == ["done_missing"] and checker.status == "truncated"


def test_text_after_a_finish_is_one_fact_per_choice():
    checker, _ = feed_all(
        chunk({"content": "a"}), chunk(finish="stop"), chunk({"content": "b"}),
        chunk({"content": "c"}), "[DONE]",
    )  # fmt: skip
    assert codes(checker) == ["chunk_after_finish"] and checker.output_text == "a"


# Real servers' streams (tests/fixtures/streams/SOURCES.md): no error; what they do differently
# from OpenAI's contract is said as a warning.
@pytest.mark.parametrize(
    "capture, warnings",
    [
        ("openai_gpt4o_tool_call", []),
        ("openai_gpt4o_after_tool", []),
        ("openai_gpt4o_refusal", []),
        ("openrouter_gpt4o", ["role_not_first", "usage_chunk_has_choices"]),
    ],
)
def test_real_captures_have_no_false_finding(capture, warnings):
    checker = checked(formats.CHAT, capture)
    assert codes(checker) == warnings and checker.status == "completed"
    assert checker.usage["output_tokens"] > 0
    for call in (i for i in checker.items() if i["type"] == "function_call"):
        assert isinstance(json.loads(call["arguments"]), dict) and call["call_id"]


def test_a_real_refusal_is_a_refusal_part():
    [message] = checked(formats.CHAT, "openai_gpt4o_refusal").items()
    assert message["parts"][0]["text"] == "" and message["parts"][1]["type"] == "refusal"
    assert message["parts"][1]["text"]


# Streams that lean on each condition of the content chunk's short way (`_content_chunk`): a
# changed or returning envelope, content with a role, a filter or a usage, an index that is no
# 32-bit number, an unopened choice, content after a finish, two choices interleaved.
EDGES = {
    "envelope changes and returns": [
        chunk({"role": "assistant", "content": ""}), chunk({"content": "a"}),
        chunk({"content": "b"}, model="other"), chunk({"content": "c"}),
        chunk({"content": "d"}, created=2.0), chunk({"content": "e"}, created=1.0),
        chunk({}, "stop"), "[DONE]",
    ],
    "content beside a role, a filter, a usage": [
        chunk({"content": "a"}), chunk({"role": "assistant", "content": "b"}),
        json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": [{"index": 0, "delta": {"content": "c"},
                                 "content_filter_results": {"hate": {"filtered": True}}}]}),
        json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 2},
                    "choices": [{"index": 0, "delta": {"content": "d"}}]}),
        chunk({}, "stop"), "[DONE]",
    ],
    "indexes": [
        chunk({"content": "a"}), chunk({"content": "b"}, index=2**40),
        chunk({"content": "c"}, index=1),
        chunk({"content": "d"}, index=1), chunk({"content": "e"}, index=True),
        chunk({"content": "f"}, index=-1), chunk({"content": "g"}, index=-1),
        chunk({}, "stop"), chunk({"content": "h"}), chunk({}, "stop", index=1), "[DONE]",
    ],
    "no object, an empty text, after the end": [
        chunk({"content": "a"}), chunk({"content": "b"}, object=None), chunk({"content": ""}),
        chunk({"content": 3}), chunk({}, "length"), "[DONE]", chunk({"content": "z"}),
    ],
}  # fmt: skip


def _fed(datas):
    checker = ChatChecker()
    results = []
    for i, data in enumerate(datas):
        r = checker.feed(i, "message", data, t_us=1000 * i)
        results.append((r.kind, r.type, r.first_output, r.first_tool_call, r.is_json, r.violations))
    checker.close()
    state = (checker.violations, checker.items(), checker.output_text, checker.usage)
    return results, state, checker.status, checker.upstream_id, checker.response_model


@pytest.mark.parametrize("name", [*sorted(p.stem for p in CHAT.glob("*.sse")), *EDGES], ids=str)
def test_the_content_chunks_short_way_says_what_the_general_path_says(name, monkeypatch):
    """Every capture and every edge, fed with the short way and without it: the same result
    for every event, the same findings, output, usage and status at the end."""
    if name in EDGES:
        datas = EDGES[name]
    else:
        from streams.core.capture import parse_sse_bytes

        datas = [ev.data for ev in parse_sse_bytes((CHAT / f"{name}.sse").read_bytes())]
    short_way = ChatChecker._content_chunk
    taken = []

    def counted(self, obj, result):
        taken.append(short_way(self, obj, result))
        return taken[-1]

    monkeypatch.setattr(ChatChecker, "_content_chunk", counted)
    with_it = _fed(datas)
    monkeypatch.setattr(ChatChecker, "_content_chunk", lambda self, obj, result: False)
    assert _fed(datas) == with_it
    if name in ("normal", "openai_gpt4o_after_tool", "envelope changes and returns", "indexes"):
        assert any(taken), name  # (the short way was taken, so the comparison compares it)
