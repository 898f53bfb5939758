"""The event table's one-line summaries (streams/core/summaries.py): one per protocol event
type or family, pure functions of an event's type and data."""

import pytest

from streams.core import summaries
from tests.support.recording import compact_json


class TestEventSummary:
    @pytest.mark.parametrize(
        "obj,summary",
        [
            (
                {
                    "type": "response.output_text.delta",
                    "output_index": 0,
                    "content_index": 1,
                    "delta": "a\nb",
                },
                '"a\\nb" [0:1]',
            ),  # fmt: skip
            (
                {
                    "type": "response.output_item.added",
                    "output_index": 2,
                    "item": {"type": "function_call", "name": "get_weather", "call_id": "c1"},
                },
                "function_call get_weather c1 [2]",
            ),  # fmt: skip
            (
                {
                    "type": "response.routing.completed",
                    "model_id": "small",
                    "category": "chat",
                    "source": "rules",
                },
                "→ small (chat, rules)",
            ),  # fmt: skip
            (
                {"type": "error", "code": "overloaded", "message": "try later"},
                "overloaded: try later",
            ),  # fmt: skip
            (
                {
                    "type": "response.completed",
                    "response": {"id": "r1", "status": "completed", "output_text": "hello"},
                },
                "r1 completed 5 chars",
            ),  # fmt: skip
            ({"type": "response.completed", "final_text": "hey"}, "final_text, 3 chars"),
            (
                {
                    "type": "response.output_text.done",
                    "output_index": 0,
                    "content_index": 0,
                    "text": "done!",
                },
                "done!" and '5 chars [0:0]: "done!"',
            ),  # fmt: skip
            (
                {"type": "response.refusal.done", "output_index": 1, "refusal": "No."},
                '3 chars [1]: "No."',
            ),  # fmt: skip
            (
                {"type": "response.reasoning_summary_text.done", "text": "think"},
                '5 chars: "think"',
            ),  # fmt: skip
            # a text .done without a text: as any other event
            ({"type": "response.output_text.done", "text": 7}, '{"text": 7}'),
            (
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": 2,
                    "arguments": '{"city":"Utrecht"}',
                },
                '"{\\"city\\":\\"Utrecht\\"}" [2]',
            ),  # fmt: skip
            ({"type": "response.custom_tool_call_input.done", "input": "ls"}, '"ls"'),
            (
                {"type": "response.function_call_arguments.delta", "delta": 3, "output_index": 0},
                '"3" [0]',
            ),  # fmt: skip
            ({"type": "response.output_item.done", "item": "?"}, "item"),
            (
                {
                    "type": "response.content_part.added",
                    "output_index": 0,
                    "content_index": 1,
                    "part": {"type": "refusal"},
                },
                "refusal [0:1]",
            ),  # fmt: skip
            ({"type": "response.content_part.done", "part": None}, "part"),
            ({"type": "response.routing.completed"}, "→ ?"),
            (
                {"type": "error", "error": {"code": "rate_limit", "message": "slow down"}},
                "rate_limit: slow down",
            ),  # fmt: skip
            ({"type": "error", "message": "no code"}, "no code"),
            (
                {"type": "response.created", "response": {"id": "r2", "model": "small"}},
                "r2 small",
            ),  # fmt: skip
            ({"type": "response.rewrite.in_progress", "pass": 1}, '{"pass": 1}'),
            ({"type": "response.in_progress", "sequence_number": 4}, ""),
        ],
    )
    def test_event_summary(self, obj, summary):
        assert summaries.event_summary(obj["type"], compact_json(obj)) == summary

    def test_not_json_and_long_text(self):
        assert summaries.event_summary("", "[DONE]", is_json=False) == "not JSON: [DONE]"
        assert summaries.event_summary("", "{bad") == "not JSON: {bad"
        assert summaries.event_summary("", "[1, 2]") == "[1, 2]"
        # the row's type when it has one, else the data's
        refusal = compact_json({"type": "response.refusal.delta", "delta": "no"})
        assert summaries.event_summary("", refusal) == '"no"'
        delta = {"type": "response.output_text.delta", "delta": "x" * 500}
        summary = summaries.event_summary(delta["type"], compact_json(delta))
        assert len(summary) == summaries.SUMMARY_MAX and summary.endswith("…")
