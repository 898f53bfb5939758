"""streams.core.checks: every finding code on a stream that triggers it and a similar one that must
not, plus the twelve real captures in tests/fixtures/streams. Pure tests, no database."""

import json
from pathlib import Path

import pytest

from streams.core.capture import parse_sse_bytes
from streams.core.checks import (
    CODES,
    OUTPUT,
    TERMINAL,
    BufferedThresholds,
    Checker,
    Violation,
    check_events,
)
from tests.conftest import FIXTURES


def fixtures_dir() -> Path:
    return FIXTURES


# ---- stream builders ---------------------------------------------------------------------------


def created(model="gpt-oss-120b"):
    return {
        "type": "response.created",
        "response": {"id": "resp_1", "object": "response", "model": model, "status": "in_progress"},
    }


def item_added(oi=0, type_="message", **item):
    return {
        "type": "response.output_item.added",
        "output_index": oi,
        "item": {"type": type_, **item},
    }


def item_done(oi=0, type_="message", **item):
    return {
        "type": "response.output_item.done",
        "output_index": oi,
        "item": {"type": type_, **item},
    }


def part_added(oi=0, ci=0, type_="output_text"):
    return {
        "type": "response.content_part.added",
        "output_index": oi,
        "content_index": ci,
        "part": {"type": type_, "text": ""},
    }


def delta(text, oi=0, ci=0):
    return {
        "type": "response.output_text.delta",
        "output_index": oi,
        "content_index": ci,
        "delta": text,
    }


def text_done(text, oi=0, ci=0):
    return {
        "type": "response.output_text.done",
        "output_index": oi,
        "content_index": ci,
        "text": text,
    }


def completed(text):
    return {
        "type": "response.completed",
        "response": {
            "id": "resp_1",
            "status": "completed",
            "model": "gpt-oss-120b",
            "output_text": text,
        },
    }


def numbered(events, start=0):
    """Give each event the next sequence_number unless it already has one (None removes it)."""
    out = []
    for n, event in enumerate(events, start):
        event = dict(event)
        if "sequence_number" not in event:
            event["sequence_number"] = n
        elif event["sequence_number"] is None:
            del event["sequence_number"]
        out.append(event)
    return out


def good_stream(pieces=("Hello", ", ", "world.")):
    text = "".join(pieces)
    return numbered(
        [
            created(),
            item_added(),
            part_added(),
            *[delta(p) for p in pieces],
            text_done(text),
            item_done(content=[{"type": "output_text", "text": text}]),
            completed(text),
        ]
    )


def run(events, names=None, times=None, close=True, **options):
    """Feed dicts (or raw strings) to a fresh Checker; return it and all its findings."""
    checker = Checker(**options)
    for i, event in enumerate(events):
        data = event if isinstance(event, str) else json.dumps(event)
        name = names[i] if names else "message"
        checker.feed(i, name, data, t_us=times[i] if times else None)
    if close:
        checker.close()
    return checker, checker.violations


def codes(violations):
    return [v.code for v in violations]


def errors(violations):
    return [v for v in violations if v.severity == "error"]


# ---- the finding vocabulary --------------------------------------------------------------------


class TestCodes:
    def test_every_code_has_a_severity_and_a_description(self):
        for code, (severity, description) in CODES.items():
            assert severity in ("error", "warning", "info"), code
            assert description, code

    def test_the_required_codes_exist_with_their_severities(self):
        expected = {
            "error": {
                "first_not_created",
                "sequence_gap",
                "sequence_duplicate",
                "sequence_regression",
                "missing_sequence_number",
                "event_after_terminal",
                "missing_terminal",
                "invalid_json",
                "invalid_utf8",
                "missing_type",
                "delta_after_item_done",
                "text_mismatch",
                "final_text_mismatch",
                # Chat Completions (streams/core/formats/chat.py)
                "done_missing",
                "not_a_chunk",
                "finish_reason_repeated",
                "chunk_after_finish",
                "finish_reason_missing",
                "tool_call_inconsistent",
                "chunk_field_changed",
                # Anthropic Messages (streams/core/formats/messages.py)
                "first_not_message_start",
                "block_index_out_of_order",
                "block_delta_before_start",
                "block_delta_after_stop",
                "block_stopped_twice",
                "block_never_stopped",
                "tool_input_invalid_json",
            },
            "warning": {
                "delta_without_item",
                "delta_without_part",
                "routing_on_pinned_model",
                "stall",
                "buffered_delivery",
                "event_name_mismatch",
                "usage_chunk_has_choices",
                "role_not_first",
            },
            "info": {
                "rewritten_text",
                "unknown_event_type",
                "event_name_not_message",
                "done_sentinel",
                "content_filtered",
            },
        }
        got = {s: {c for c, (sev, _) in CODES.items() if sev == s} for s in expected}
        assert got == expected

    def test_violation_fields_match_the_finding_model(self):
        from streams.models import Finding

        fields = {f.name for f in Finding._meta.get_fields()} - {"id", "stream"}
        v = Violation("stall", "warning", 3, "a", "b", "c")
        assert set(v.as_dict()) == fields
        with pytest.raises(AttributeError):
            v.code = "x"  # frozen


class TestCleanStream:
    def test_a_well_formed_eu_gpt_stream_has_no_findings(self):
        checker, violations = run(good_stream())
        assert violations == []
        assert checker.status == "completed"
        assert checker.output_text == checker.final_text == "Hello, world."
        assert checker.output_deltas == 3
        assert checker.upstream_id == "resp_1"
        assert checker.resolved_model == "gpt-oss-120b"

    def test_wire_example_with_top_level_final_text(self):
        # docs/protocol.md's wire example, verbatim: no item/part events, top-level final_text.
        events = [
            '{"type":"response.created","sequence_number":0}',
            '{"type":"response.output_text.delta","sequence_number":1,"delta":"Hello"}',
            '{"type":"response.output_text.delta","sequence_number":2,"delta":", world"}',
            '{"type":"response.completed","sequence_number":3,"final_text":"Hello, world"}',
        ]
        checker, violations = run(events)
        assert errors(violations) == []
        assert sorted(codes(violations)) == ["delta_without_item", "delta_without_part"]
        assert checker.final_text == checker.output_text == "Hello, world"
        assert checker.status == "completed"


# ---- one class per code: triggers, and a similar stream that must not ------------------------


class TestFirstNotCreated:
    def test_it_fires_when_the_first_event_is_not_created(self):
        events = good_stream()[1:]
        _, violations = run(
            numbered([{k: v for k, v in e.items() if k != "sequence_number"} for e in events])
        )
        [v] = [v for v in violations if v.code == "first_not_created"]
        assert (v.event_index, v.expected, v.got) == (
            0,
            "response.created",
            "response.output_item.added",
        )

    def test_it_fires_when_the_first_event_is_not_json(self):
        _, violations = run(["oops", *good_stream()])
        assert "first_not_created" in codes(violations)

    def test_it_does_not_fire_for_a_created_first_stream(self):
        _, violations = run(good_stream())
        assert "first_not_created" not in codes(violations)


class TestSequenceGap:
    def test_it_fires_on_a_skipped_number(self):
        events = good_stream()
        del events[4]  # the second delta: numbers go 3 → 5
        _, violations = run(events)
        [v] = [v for v in violations if v.code == "sequence_gap"]
        assert (v.event_index, v.expected, v.got) == (4, "4", "5")

    def test_it_fires_when_the_first_number_is_not_zero(self):
        _, violations = run(numbered([created(), *good_stream()[1:]], start=1))
        assert codes(violations).count("sequence_gap") == 1

    def test_it_does_not_fire_on_consecutive_numbers(self):
        _, violations = run(good_stream())
        assert "sequence_gap" not in codes(violations)


class TestSequenceDuplicate:
    def test_it_fires_and_the_repeat_is_not_applied_twice(self):
        events = good_stream()
        events.insert(5, events[4])  # ", " delivered twice
        checker, violations = run(events)
        assert codes(violations) == ["sequence_duplicate"]
        assert checker.output_text == "Hello, world."
        assert checker.output_deltas == 3

    def test_it_does_not_fire_for_equal_payloads_with_their_own_numbers(self):
        checker, violations = run(good_stream(("ha", "ha", "ha")))
        assert violations == []
        assert checker.output_text == "hahaha"


class TestSequenceRegression:
    def test_a_reordered_pair_is_reported_but_reassembled_in_sequence_order(self):
        events = good_stream()
        events[4], events[5] = events[5], events[4]  # ", " and "world." swapped on the wire
        checker, violations = run(events)
        assert codes(violations) == ["sequence_gap", "sequence_regression"]
        regression = violations[1]
        assert (regression.expected, regression.got) == ("6", "4")
        assert "reordered" in regression.detail
        assert checker.output_text == "Hello, world."  # no text_mismatch either

    def test_a_done_event_overtaking_its_last_delta_is_not_a_text_mismatch(self):
        events = good_stream()
        events[5], events[6] = events[6], events[5]  # output_text.done before "world."
        checker, violations = run(events)
        assert codes(violations) == ["sequence_gap", "sequence_regression"]
        assert checker.output_text == "Hello, world."

    def test_a_number_lower_than_all_seen_without_a_gap_is_a_regression(self):
        events = good_stream()
        events[4] = {**events[4], "sequence_number": -1}
        _, violations = run(events)
        assert "sequence_regression" in codes(violations)

    def test_it_does_not_fire_in_order(self):
        _, violations = run(good_stream())
        assert "sequence_regression" not in codes(violations)


class TestMissingSequenceNumber:
    def test_it_fires_for_a_delta_without_a_number(self):
        events = good_stream()
        events[4] = {**events[4], "sequence_number": None}
        checker, violations = run(numbered(events))
        assert "missing_sequence_number" in codes(violations)
        assert checker.output_text == "Hello, world."  # still applied, in arrival order

    def test_it_is_one_finding_for_a_stream_that_never_numbers(self):
        events = [{k: v for k, v in e.items() if k != "sequence_number"} for e in good_stream()]
        _, violations = run(events)
        assert codes(violations) == ["missing_sequence_number"]
        assert violations[0].event_index == 0

    def test_it_fires_for_a_non_integer_number(self):
        events = good_stream()
        events[4] = {**events[4], "sequence_number": "4"}
        _, violations = run(events)
        [v] = [v for v in violations if v.code == "missing_sequence_number"]
        assert v.got == "'4' (str)"

    def test_it_does_not_fire_for_an_error_event(self):
        events = [created(), {"type": "error", "code": "internal_error", "message": "boom"}]
        checker, violations = run(numbered(events[:1]) + events[1:])
        assert violations == []
        assert checker.status == "failed"
        assert (checker.error_code, checker.error_message) == ("internal_error", "boom")


class TestEventAfterTerminal:
    def test_it_fires_for_an_event_after_completed(self):
        events = good_stream()
        events.append({**delta("!"), "sequence_number": len(events)})
        _, violations = run(events)
        [v] = [v for v in violations if v.code == "event_after_terminal"]
        assert v.event_index == len(events) - 1
        assert v.got == "1 event, the first response.output_text.delta"

    def test_many_events_after_the_terminal_are_one_finding_with_their_count(self):
        events = good_stream()
        n = len(events)
        events += [
            {**delta("!"), "sequence_number": n},
            '{"not json',
            {**delta("?"), "sequence_number": n + 1},
            {**completed("Hello, world.!?"), "sequence_number": n + 2},
        ]
        checker, violations = run(events)
        [v] = [v for v in violations if v.code == "event_after_terminal"]
        assert v.event_index == n  # the first offending event
        assert v.got.startswith("4 events")
        assert f"event {n} (sequence_number {n})" in v.detail
        assert f"(event {n - 1})" in v.expected  # the terminal it came after

    def test_events_after_the_terminal_are_not_part_of_the_response(self):
        events = good_stream()
        n = len(events)
        events += [
            {**item_added(1), "sequence_number": n},
            {**part_added(1), "sequence_number": n + 1},
            {**delta("late", oi=1), "sequence_number": n + 2},
            {**delta(" more"), "sequence_number": n + 3},
            {**item_added(2, "function_call", name="f"), "sequence_number": n + 4},
        ]
        checker, violations = run(events)
        assert checker.output_text == "Hello, world."
        assert [item["output_index"] for item in checker.items()] == [0]
        assert checker.items()[0]["parts"][0]["text"] == "Hello, world."
        assert checker.output_deltas == 3  # the three deltas before the terminal
        assert checker.status == "completed"
        # one finding for the fact, none for what the late events would have said
        assert codes(violations) == ["event_after_terminal"]

    def test_a_late_event_is_no_milestone(self):
        checker = Checker()
        events = numbered([created(), completed(""), delta("x")])
        kinds = [checker.feed(i, "message", json.dumps(e)).kind for i, e in enumerate(events)]
        assert kinds == ["created", TERMINAL, None]

    def test_a_done_sentinel_after_the_terminal_is_not_an_event(self):
        _, violations = run([*good_stream(), "[DONE]"])
        assert codes(violations) == ["done_sentinel"]


class TestMissingTerminal:
    def test_it_fires_when_the_connection_closes_without_a_terminal(self):
        checker, violations = run(good_stream()[:-1])
        assert codes(violations) == ["missing_terminal"]
        assert checker.status == "truncated"
        assert checker.final_text is None

    def test_it_does_not_fire_when_we_stopped_reading(self):
        checker, _ = run(good_stream()[:-1], close=False)
        assert checker.close(connection_closed=False) == []
        assert checker.status == "streaming"

    def test_it_does_not_fire_after_a_terminal(self):
        _, violations = run(good_stream())
        assert "missing_terminal" not in codes(violations)


class TestInvalidJson:
    def test_it_fires_for_broken_json(self):
        events = good_stream()
        events.insert(4, '{"type": "response.output_text.delta", "delta": "x"')
        _, violations = run(events)
        [v] = [v for v in violations if v.code == "invalid_json"]
        assert v.event_index == 4
        assert v.detail  # the parser's message

    def test_done_sentinel_is_not_invalid_json(self):
        _, violations = run(["[DONE]"])
        assert "invalid_json" not in codes(violations)


class TestMissingType:
    @pytest.mark.parametrize("payload", [{"sequence_number": 1}, {"type": ""}, [1, 2], 3])
    def test_it_fires_without_a_string_type(self, payload):
        _, violations = run([*good_stream()[:1], payload])
        assert "missing_type" in codes(violations)

    def test_it_does_not_fire_for_typed_events(self):
        _, violations = run(good_stream())
        assert "missing_type" not in codes(violations)


class TestDeltaAfterItemDone:
    def test_it_fires_for_a_delta_after_output_item_done(self):
        events = numbered(
            [
                created(),
                item_added(),
                part_added(),
                delta("a"),
                item_done(),
                delta("b"),
                completed("ab"),
            ]
        )
        _, violations = run(events)
        assert codes(violations) == ["delta_after_item_done"]

    def test_it_fires_for_a_delta_after_output_text_done(self):
        events = numbered(
            [
                created(),
                item_added(),
                part_added(),
                delta("a"),
                text_done("a"),
                delta("b"),
                completed("ab"),
            ]
        )
        _, violations = run(events)
        assert "delta_after_item_done" in codes(violations)

    def test_it_fires_for_function_call_arguments_after_done(self):
        events = numbered(
            [
                created(),
                item_added(0, "function_call", name="f", call_id="c1", arguments=""),
                item_done(0, "function_call", name="f", call_id="c1", arguments="{}"),
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": 0,
                    "delta": "{}",
                },
                completed(""),
            ]
        )
        _, violations = run(events)
        assert "delta_after_item_done" in codes(violations)

    def test_it_does_not_fire_when_deltas_precede_done(self):
        _, violations = run(good_stream())
        assert "delta_after_item_done" not in codes(violations)


class TestTextMismatch:
    def test_it_fires_when_done_text_differs_from_the_deltas(self):
        events = good_stream()
        events[6] = {**events[6], "text": "Hello, World."}
        _, violations = run(events)
        [v] = [v for v in violations if v.code == "text_mismatch"]
        assert (v.expected, v.got, v.event_index) == ("Hello, world.", "Hello, World.", 6)
        assert "character 7" in v.detail

    def test_it_fires_for_a_refusal_done_that_differs(self):
        events = numbered(
            [
                created(),
                item_added(),
                part_added(type_="refusal"),
                {
                    "type": "response.refusal.delta",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": "No",
                },
                {
                    "type": "response.refusal.done",
                    "output_index": 0,
                    "content_index": 0,
                    "refusal": "Nope",
                },
                completed(""),
            ]
        )
        _, violations = run(events)
        assert "text_mismatch" in codes(violations)

    def test_an_announced_rewrite_is_info_with_a_diff_not_an_error(self):
        events = good_stream()
        rewritten = "Hello, World!"
        events.insert(6, {"type": "response.rewrite.in_progress"})
        events[7] = {**events[7], "text": rewritten}
        events[-1] = completed(rewritten)
        checker, violations = run(
            numbered([{k: v for k, v in e.items() if k != "sequence_number"} for e in events])
        )
        assert errors(violations) == []
        # one fact, one finding: the part's .done and the terminal carry the same rewrite
        assert codes(violations) == ["rewritten_text"]
        part = violations[0]
        assert (part.expected, part.got, part.event_index) == ("Hello, world.", rewritten, 7)
        assert "[-world.-]" in part.detail and "{+World!+}" in part.detail
        assert checker.rewrite_announced
        # the response's text is the rewritten one; the streamed draft is kept beside it
        assert checker.output_text == checker.final_text == rewritten
        [message] = checker.items()
        assert message["parts"][0]["text"] == rewritten
        assert message["parts"][0]["streamed_text"] == "Hello, world."
        assert message["parts"][0]["rewritten"] is True

    def test_a_rewrite_only_the_terminal_carries_is_reported_once(self):
        events = good_stream()[:-1]
        events = [e for e in events if e["type"] != "response.output_text.done"]
        events.insert(6, {"type": "response.rewrite.in_progress"})
        events.append(completed("Hello, World!"))
        checker, violations = run(
            numbered([{k: v for k, v in e.items() if k != "sequence_number"} for e in events])
        )
        assert codes(violations) == ["rewritten_text"]
        assert violations[0].event_index == len(events) - 1

    def test_a_mismatch_the_terminal_agrees_with_is_reported_once(self):
        # the .done text differs from the deltas and the terminal carries the .done text:
        # one fact (text_mismatch at the .done), not a second final_text_mismatch
        events = good_stream()
        events[6] = {**events[6], "text": "Hello, World."}
        events[-1] = {
            **completed("Hello, World."),
            "sequence_number": events[-1]["sequence_number"],
        }
        checker, violations = run(events)
        assert codes(violations) == ["text_mismatch"]
        assert checker.output_text == "Hello, World."
        part = checker.items()[0]["parts"][0]
        assert (part["text"], part["streamed_text"]) == ("Hello, World.", "Hello, world.")
        assert "rewritten" not in part

    def test_it_does_not_fire_when_the_texts_agree(self):
        _, violations = run(good_stream())
        assert "text_mismatch" not in codes(violations)
        assert "rewritten_text" not in codes(violations)


class TestFinalTextMismatch:
    def test_it_fires_when_the_terminal_text_differs(self):
        events = good_stream()
        events[-1] = {**completed("Hello."), "sequence_number": events[-1]["sequence_number"]}
        _, violations = run(events)
        [v] = [v for v in violations if v.code == "final_text_mismatch"]
        assert (v.expected, v.got) == ("Hello, world.", "Hello.")

    def test_it_fires_for_a_top_level_final_text_that_differs(self):
        events = good_stream()
        events[-1] = {"type": "response.completed", "sequence_number": 9, "final_text": "nope"}
        _, violations = run(events)
        assert "final_text_mismatch" in codes(violations)

    def test_response_output_messages_win_over_an_empty_output_text(self):
        events = good_stream()
        events[-1]["response"]["output_text"] = ""
        events[-1]["response"]["output"] = [
            {"type": "message", "content": [{"type": "output_text", "text": "Hello, world."}]}
        ]
        checker, violations = run(events)
        assert violations == []
        assert checker.final_text == "Hello, world."

    def test_an_empty_output_list_carries_no_text(self):
        # ChatGPT Codex backend, vLLM and gateways: `output: []` after streaming everything
        events = good_stream()
        events[-1]["response"] = {"status": "completed", "output": []}
        checker, violations = run(events)
        assert violations == []
        assert checker.final_text is None
        assert checker.output_text == "Hello, world."

    def test_output_without_messages_means_no_text(self):
        events = good_stream()
        events[-1]["response"] = {"status": "completed", "output": [{"type": "reasoning"}]}
        checker, violations = run(events)
        assert checker.final_text == ""
        assert "final_text_mismatch" in codes(violations)

    def test_it_is_not_checked_when_the_terminal_has_no_text(self):
        events = good_stream()[:-1] + [{"type": "error", "code": "x", "message": "y"}]
        checker, violations = run(events)
        assert violations == []
        assert checker.final_text is None


class TestDeltaWithoutItemOrPart:
    def test_a_delta_without_item_or_part_warns_once_each(self):
        events = numbered([created(), delta("a"), delta("b"), completed("ab")])
        checker, violations = run(events)
        assert codes(violations) == ["delta_without_item", "delta_without_part"]
        assert all(v.severity == "warning" and v.event_index == 1 for v in violations)
        assert checker.output_text == "ab"

    def test_a_delta_with_an_item_but_no_part_warns_for_the_part_only(self):
        events = numbered([created(), item_added(), delta("a"), completed("a")])
        _, violations = run(events)
        assert codes(violations) == ["delta_without_part"]

    def test_a_part_announced_before_its_item_still_warns_for_the_item(self):
        events = numbered([created(), part_added(), delta("a"), completed("a")])
        _, violations = run(events)
        assert codes(violations) == ["delta_without_item"]

    def test_argument_deltas_without_an_item_warn(self):
        events = numbered(
            [
                created(),
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": 0,
                    "delta": "{}",
                },
                completed(""),
            ]
        )
        checker, violations = run(events)
        assert codes(violations) == ["delta_without_item"]
        assert checker.items()[0]["arguments"] == "{}"

    def test_no_warning_with_item_and_part(self):
        _, violations = run(good_stream())
        assert violations == []


class TestRoutingOnPinnedModel:
    def routed(self):
        routing = {
            "type": "response.routing.completed",
            "model_id": "gpt-oss-20b",
            "category": "chat",
            "source": "router",
            "reasoning": "short input",
        }
        events = good_stream()
        return numbered(
            [
                events[0],
                routing,
                *[{k: v for k, v in e.items() if k != "sequence_number"} for e in events[1:]],
            ]
        )

    def test_it_fires_when_the_model_was_pinned(self):
        checker, violations = run(self.routed(), pinned_model=True)
        [v] = violations
        assert (v.code, v.severity, v.got) == ("routing_on_pinned_model", "warning", "gpt-oss-20b")

    def test_a_second_routing_event_is_the_same_fact(self):
        events = [{k: v for k, v in e.items() if k != "sequence_number"} for e in self.routed()]
        events.insert(2, events[1])
        checker, violations = run(numbered(events), pinned_model=True)
        assert codes(violations) == ["routing_on_pinned_model"]

    @pytest.mark.parametrize("pinned", [False, None])
    def test_it_does_not_fire_for_auto_or_unknown(self, pinned):
        checker, violations = run(self.routed(), pinned_model=pinned)
        assert violations == []
        assert checker.routing == {
            "model_id": "gpt-oss-20b",
            "category": "chat",
            "source": "router",
            "reasoning": "short input",
        }
        assert checker.resolved_model == "gpt-oss-20b"  # routing wins over response.model


class TestStall:
    def test_it_fires_for_a_long_silence_between_events(self):
        events = good_stream()
        times = [i * 50_000 for i in range(len(events))]
        times[5:] = [t + 40_150_000 for t in times[5:]]
        _, violations = run(events, times=times)
        [v] = violations
        assert (v.code, v.event_index, v.got) == ("stall", 5, "40.2 s")

    def test_the_threshold_is_configurable(self):
        events = good_stream()
        times = [i * 2_000_000 for i in range(len(events))]
        _, violations = run(events, times=times, stall_threshold_us=1_000_000)
        assert codes(violations) == ["stall"] * (len(events) - 1)
        _, violations = run(events, times=times, stall_threshold_us=0)
        assert violations == []

    def test_silence_before_the_connection_closed_counts(self):
        checker, _ = run(good_stream()[:-1], times=[0] * 8, close=False)
        assert codes(checker.close(t_us=45_000_000)) == ["stall", "missing_terminal"]

    def test_it_does_not_fire_for_normal_gaps_or_without_times(self):
        events = good_stream()
        _, violations = run(events, times=[i * 1_000_000 for i in range(len(events))])
        assert violations == []
        _, violations = run(events)
        assert violations == []


def _paced(n, tokens_per_s, start_us=300_000):
    """created, then n deltas at a steady rate, then done/completed."""
    pieces = [f"w{i} " for i in range(n)]
    events = good_stream(pieces)
    step = 1_000_000 // tokens_per_s
    times = [0] * len(events)
    times[:3] = [start_us] * 3  # created, item, part in one write
    for i in range(3, 3 + n):
        times[i] = start_us + (i - 2) * step
    times[3 + n :] = [times[2 + n]] * (len(events) - 3 - n)  # the .done flurry in one write
    return events, times


class TestBufferedDelivery:
    @pytest.mark.parametrize("rate", [30, 50, 100])
    def test_normally_paced_streams_never_trigger(self, rate):
        events, times = _paced(200, rate)
        _, violations = run(events, times=times)
        assert violations == []

    def test_a_burst_after_a_long_silence_triggers_once(self):
        events, times = _paced(60, 50)
        # 40 deltas (indexes 13..52) arrive in one write, 1 s after the previous event
        burst_at = times[12] + 1_000_000
        for i in range(13, 53):
            times[i] = burst_at + (i - 13) * 20  # 20 µs apart: the parsing of one chunk
        for i in range(53, len(times)):
            times[i] = burst_at + 10_000 + (i - 53) * 20_000
        _, violations = run(events, times=times)
        [v] = violations
        assert (v.code, v.severity, v.event_index) == ("buffered_delivery", "warning", 13)

    def test_a_fully_buffered_response_triggers(self):
        events, _ = _paced(40, 50)
        _, violations = run(events, times=[1_000_000] * len(events))
        assert codes(violations) == ["buffered_delivery"]

    def test_a_short_lump_after_a_silence_does_not_trigger(self):
        events, times = _paced(60, 50)
        burst_at = times[12] + 1_000_000
        for i in range(13, 23):  # only 10 events in the lump
            times[i] = burst_at
        for i in range(23, len(times)):
            times[i] = burst_at + (i - 22) * 20_000
        _, violations = run(events, times=times)
        assert violations == []

    def test_thresholds_are_configurable(self):
        events, _ = _paced(40, 50)
        times = [1_000_000] * len(events)
        _, violations = run(events, times=times, buffered=BufferedThresholds(min_events=50))
        assert violations == []
        _, violations = run(events, times=times, buffered=False)
        assert violations == []


class TestUnknownEventType:
    def test_it_is_reported_once_per_type(self):
        events = good_stream()
        extra = [
            {"type": "response.citation.added"},
            {"type": "response.citation.added"},
            {"type": "response.usage.partial"},
        ]
        stream = numbered(
            [
                events[0],
                *extra,
                *[{k: v for k, v in e.items() if k != "sequence_number"} for e in events[1:]],
            ]
        )
        checker, violations = run(stream)
        assert [(v.code, v.got) for v in violations] == [
            ("unknown_event_type", "response.citation.added"),
            ("unknown_event_type", "response.usage.partial"),
        ]
        assert checker.output_text == "Hello, world."

    def test_openai_families_are_known(self):
        events = numbered(
            [
                created(),
                {"type": "response.in_progress"},
                {"type": "response.web_search_call.searching", "output_index": 0},
                {
                    "type": "response.output_text.annotation.added",
                    "output_index": 0,
                    "content_index": 0,
                },
                {"type": "response.queued"},
                completed(""),
            ]
        )
        _, violations = run(events)
        assert "unknown_event_type" not in codes(violations)


class TestEventNameNotMessage:
    def test_it_is_reported_once_per_stream(self):
        events = good_stream()
        checker, violations = run(events, names=[e["type"] for e in events])
        [v] = violations
        assert (v.code, v.event_index, v.expected, v.got) == (
            "event_name_not_message",
            0,
            "message",
            "response.created",
        )

    @pytest.mark.parametrize("name", ["message", ""])
    def test_message_or_absent_is_fine(self, name):
        events = good_stream()
        _, violations = run(events, names=[name] * len(events))
        assert violations == []


class TestDoneSentinel:
    def test_it_is_info(self):
        _, violations = run([*good_stream(), "[DONE]"])
        [v] = violations
        assert (v.code, v.severity) == ("done_sentinel", "info")

    def test_it_does_not_fire_without_the_sentinel(self):
        _, violations = run(good_stream())
        assert violations == []


# ---- reassembled state and milestones ---------------------------------------------------------


class TestFeedResult:
    def test_milestones_are_reported_once_each(self):
        events = numbered(
            [
                created(),
                {"type": "response.routing.completed", "model_id": "m"},
                item_added(0, "function_call", name="f", call_id="c", arguments=""),
                {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"},
                {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "}"},
                item_added(1, "function_call", name="g", call_id="d", arguments="{}"),
                completed(""),
            ]
        )
        checker = Checker()
        results = [checker.feed(i, "message", json.dumps(e)) for i, e in enumerate(events)]
        assert [r.kind for r in results] == [
            "created",
            "routing",
            "tool_call",
            OUTPUT,
            OUTPUT,
            "tool_call",
            TERMINAL,
        ]
        assert [r.first_output for r in results] == [False, False, False, True, False, False, False]
        assert [r.first_tool_call for r in results] == [False, False, True] + [False] * 4
        assert results[3].type == "response.function_call_arguments.delta"
        assert results[3].sequence_number == 3 and results[3].output_index == 0
        assert results[3].is_json and results[3].obj == events[3]

    def test_reasoning_deltas_are_output_and_created_never_is(self):
        checker = Checker()
        r0 = checker.feed(0, "message", json.dumps(numbered([created()])[0]))
        r1 = checker.feed(
            1,
            "message",
            json.dumps(
                {
                    "type": "response.reasoning_summary_text.delta",
                    "sequence_number": 1,
                    "output_index": 0,
                    "summary_index": 0,
                    "delta": "hm",
                }
            ),
        )
        assert (r0.kind, r0.first_output) == ("created", False)
        assert (r1.kind, r1.first_output) == (OUTPUT, True)

    def test_non_json_result(self):
        result = Checker().feed(0, "", "[DONE]")
        assert not result.is_json and result.obj is None and result.kind is None

    def test_passing_obj_skips_parsing_with_the_same_outcome(self):
        events = good_stream()
        checker = Checker()
        for i, e in enumerate(events):
            checker.feed(i, "message", "not even json", obj=e)
        checker.close()
        assert checker.violations == []
        assert checker.output_text == "Hello, world."


class TestReassembly:
    def test_terminal_statuses(self):
        base = good_stream()[:-1]
        n = len(base)
        cases = {
            "response.incomplete": "incomplete",
            "response.failed": "failed",
            "response.completed": "completed",
        }
        for etype, status in cases.items():
            terminal = {
                "type": etype,
                "sequence_number": n,
                "response": {"status": status, "output": []},
            }
            checker, _ = run([*base, terminal])
            assert checker.status == status

    def test_response_failed_carries_the_error(self):
        terminal = {
            "type": "response.failed",
            "sequence_number": 1,
            "response": {"status": "failed", "error": {"code": "server_error", "message": "oops"}},
        }
        checker, violations = run([numbered([created()])[0], terminal])
        assert checker.status == "failed"
        assert (checker.error_code, checker.error_message) == ("server_error", "oops")
        assert errors(violations) == []

    def test_status_while_streaming(self):
        checker, _ = run(good_stream()[:3], close=False)
        assert checker.status == "streaming"

    def test_interleaved_parallel_calls_join_arguments_by_output_index(self):
        # item ids rotate between events on some servers: output_index is what joins them
        def args(oi, d, item_id):
            return {
                "type": "response.function_call_arguments.delta",
                "output_index": oi,
                "item_id": item_id,
                "delta": d,
            }

        events = numbered(
            [
                created(),
                item_added(0, "function_call", id="fc_a", name="f", call_id="c0", arguments=""),
                item_added(1, "function_call", id="fc_b", name="g", call_id="c1", arguments=""),
                args(0, '{"x"', "fc_a1"),
                args(1, '{"y"', "fc_b1"),
                args(0, ":1}", "fc_a2"),
                args(1, ":2}", "fc_b2"),
                item_done(
                    1,
                    "function_call",
                    id="fc_b",
                    name="g",
                    call_id="c1",
                    arguments='{"y":2}',
                    status="completed",
                    output="two",
                ),
                item_done(
                    0,
                    "function_call",
                    id="fc_a",
                    name="f",
                    call_id="c0",
                    arguments='{"x":1}',
                    status="failed",
                    output="boom",
                ),
                completed(""),
            ]
        )
        checker, violations = run(events)
        assert violations == []
        assert checker.items() == [
            {
                "output_index": 0,
                "type": "function_call",
                "id": "fc_a",
                "name": "f",
                "call_id": "c0",
                "arguments": '{"x":1}',
                "status": "failed",
                "output": "boom",
            },
            {
                "output_index": 1,
                "type": "function_call",
                "id": "fc_b",
                "name": "g",
                "call_id": "c1",
                "arguments": '{"y":2}',
                "status": "completed",
                "output": "two",
            },
        ]
        assert checker.output_deltas == 4

    def test_arguments_only_in_done_events(self):
        events = numbered(
            [
                created(),
                item_added(0, "function_call", name="f", call_id="c0", arguments=""),
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": 0,
                    "arguments": '{"a":1}',
                },
                item_added(1, "function_call", name="g", call_id="c1", arguments=""),
                item_done(1, "function_call", name="g", call_id="c1", arguments='{"b":2}'),
                completed(""),
            ]
        )
        checker, _ = run(events)
        assert [i["arguments"] for i in checker.items()] == ['{"a":1}', '{"b":2}']

    def test_output_text_joins_message_output_text_parts_in_output_order(self):
        events = numbered(
            [
                created(),
                item_added(0),
                part_added(0, 0),
                part_added(0, 1, "refusal"),
                delta("A", 0, 0),
                {
                    "type": "response.refusal.delta",
                    "output_index": 0,
                    "content_index": 1,
                    "delta": "no",
                },
                item_added(1, "function_call", name="f", call_id="c", arguments="{}"),
                item_added(2),
                part_added(2, 0),
                delta("B", 2, 0),
                delta("C", 0, 0),
                completed("ACB"),
            ]
        )
        checker, violations = run(events)
        assert violations == []
        assert checker.output_text == "ACB"
        parts = checker.items()[0]["parts"]
        assert [(p["type"], p["text"]) for p in parts] == [("output_text", "AC"), ("refusal", "no")]

    def test_an_error_event_mid_stream(self):
        events = numbered([created(), item_added(), part_added(), delta("Hi")])
        events.append({"type": "error", "code": "rate_limit", "message": "slow down"})
        checker, violations = run(events)
        assert violations == []
        assert checker.status == "failed"
        assert checker.error_code == "rate_limit"
        assert checker.output_text == "Hi"


class TestCheckEvents:
    def test_it_checks_stored_rows_in_one_go(self):
        rows = [(i, "message", json.dumps(e), i * 10_000) for i, e in enumerate(good_stream())]
        checker, violations = check_events(rows)
        assert violations == []
        assert checker.closed and checker.status == "completed"

    def test_it_accepts_rows_without_times_and_checker_options(self):
        rows = [(i, "message", json.dumps(e)) for i, e in enumerate(good_stream()[:-1])]
        checker, violations = check_events(rows, pinned_model=True)
        assert codes(violations) == ["missing_terminal"]
        assert checker.pinned_model is True


# ---- the real captures ----------------------------------------------------------------------

CAPTURES = {
    "chatgpt_codex_backend_text.sse": "completed",
    "openai_file_search.sse": "completed",
    "openai_function_call.sse": "completed",
    "openai_incomplete_max_output_tokens.sse": "incomplete",
    "openai_parallel_function_calls.sse": "completed",
    "openai_reasoning_summary_o4mini.sse": "completed",
    "openai_refusal.sse": "completed",
    "openai_text_basic.sse": "completed",
    "openai_text_long_722ev.sse": "completed",
    "openai_text_then_function_call.sse": "completed",
    "openai_two_messages.sse": "completed",
    "openai_web_search.sse": "completed",
}


def check_capture(name) -> tuple[Checker, list]:
    events = parse_sse_bytes((fixtures_dir() / name).read_bytes())
    return check_events((i, e.event_name, e.data) for i, e in enumerate(events))


def test_all_captures_are_covered():
    assert sorted(p.name for p in fixtures_dir().glob("*.sse")) == sorted(CAPTURES)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_real_capture_is_clean_and_reassembles(name):
    checker, violations = check_capture(name)
    assert errors(violations) == []
    assert checker.status == CAPTURES[name]
    assert checker.final_text is not None
    assert checker.output_text == checker.final_text
    # OpenAI style: the type sits on the event line, reported once; nothing else is notable
    assert codes(violations) == ["event_name_not_message"]
    json.dumps(checker.items())  # JSON-able for Stream.parts


class TestCaptureDetails:
    def test_incomplete_reason(self):
        checker, _ = check_capture("openai_incomplete_max_output_tokens.sse")
        assert checker.incomplete_reason == "max_output_tokens"
        assert (
            checker.output_text
            == "In a lush, green valley, a bear named Benny roamed. Every morning"
        )

    def test_function_call(self):
        checker, _ = check_capture("openai_function_call.sse")
        [call] = checker.items()
        assert (call["name"], call["arguments"], call["status"]) == (
            "multiply",
            '{"x":5,"y":4}',
            "completed",
        )
        assert call["call_id"] == "call_UuBjgXhfKp38j2KhLk0rLlSC"
        assert checker.output_deltas == 9

    def test_parallel_function_calls(self):
        checker, _ = check_capture("openai_parallel_function_calls.sse")
        assert [c["arguments"] for c in checker.items()] == [
            '{"password":"mellon"}',
            '{"password":"radiance"}',
        ]

    def test_text_then_function_call(self):
        checker, _ = check_capture("openai_text_then_function_call.sse")
        assert [i["type"] for i in checker.items()] == ["message", "function_call"]

    def test_two_messages(self):
        checker, _ = check_capture("openai_two_messages.sse")
        items = checker.items()
        assert [i["output_index"] for i in items] == [0, 1]
        assert checker.output_text == items[0]["parts"][0]["text"] + items[1]["parts"][0]["text"]

    def test_refusal_is_not_output_text(self):
        checker, _ = check_capture("openai_refusal.sse")
        [message] = checker.items()
        assert message["parts"][0]["type"] == "refusal"
        assert message["parts"][0]["text"] == "I'm sorry, I can't assist with that."
        assert checker.output_text == ""

    def test_reasoning_summary(self):
        checker, _ = check_capture("openai_reasoning_summary_o4mini.sse")
        reasoning = checker.items()[0]
        assert reasoning["type"] == "reasoning" and len(reasoning["summary"]) == 3
        assert reasoning["summary"][0].startswith("**Determining the third tallest")
        assert checker.output_deltas == 312 + 112

    def test_web_search_annotations(self):
        checker, _ = check_capture("openai_web_search.sse")
        search, message = checker.items()
        assert search["type"] == "web_search_call"
        assert len(message["parts"][0]["annotations"]) == 3

    def test_codex_backend(self):
        checker, _ = check_capture("chatgpt_codex_backend_text.sse")
        assert checker.output_text == "One, two, three."
        assert checker.resolved_model == "gpt-5.5"
        assert checker.upstream_id.startswith("resp_0a2567")

    def test_first_output_milestone_on_a_capture(self):
        events = parse_sse_bytes((fixtures_dir() / "openai_text_basic.sse").read_bytes())
        checker = Checker()
        results = [checker.feed(i, e.event_name, e.data) for i, e in enumerate(events)]
        firsts = [i for i, r in enumerate(results) if r.first_output]
        assert firsts == [4]
        assert results[0].kind == "created" and results[-1].kind == "terminal"


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"response.output_text.delta","delta":"caf\\u00e9 \u20ac"}',
        '{"n": NaN, "i": Infinity}',  # json takes these, orjson does not
        '{"s": "\\ud800 lone"}',  # a lone surrogate escape
        '{"big": 123456789012345678901234567890}',
        '{"a": 1, "o": {"big": 123456789012345678901234567890}}',  # nested: past the flat look
        '{"a": "x", "l": [1, 2.5]}',
        '{"f": 1e400}',
        '[1, 2, {"a": null}]',
        '{"a": 1, "a": 2}',
        # an empty list or object passes the flat look; what follows it is still looked at
        '{"logprobs": [], "o": {}, "big": 123456789012345678901234567890}',
        '{"logprobs": [], "l": [1, 2.5]}',
        '{"e": [], "d": {}, "neg": -9223372036854775809}',
    ],
)
def test_parse_json_takes_what_json_takes(text):
    import json

    from streams.core.checks import parse_json

    got, want = parse_json(text), json.loads(text)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("text", ["{", "{'a': 1}", "", "[1,]", '{"a": 1} x', "data"])
def test_parse_json_refuses_what_json_refuses(text):
    import json

    from streams.core.checks import parse_json

    with pytest.raises(ValueError) as ours:
        parse_json(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert str(ours.value) == str(theirs.value)
