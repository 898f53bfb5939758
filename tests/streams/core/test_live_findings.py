"""The live path end to end: a simulator fault, recorded over real HTTP, ends up as the matching
finding on the stored stream, at the event that carries the fault, and nothing else is blamed.

Not covered: `routing_on_pinned_model` (the simulator never routes a pinned model)."""

import asyncio

import pytest
from asgiref.sync import sync_to_async

from streams.models import Event, Finding
from tests.support.recording import body, record

pytestmark = pytest.mark.django_db(transaction=True)

TEXT_CODES = {"text_mismatch", "final_text_mismatch"}


async def findings(stream):
    return [f async for f in Finding.objects.filter(stream=stream).order_by("event_index", "id")]


async def event_at(stream, index):
    return await Event.objects.aget(stream=stream, index=index)


async def faults(upstream, stream):
    return (await sync_to_async(upstream.log)(stream.upstream_id))["faults"]


async def assert_counters(stream, found):
    assert stream.findings_count == len(found)
    assert stream.error_findings == sum(f.severity == "error" for f in found)


async def test_gap_is_a_sequence_gap(upstream):
    stream, _ = await record(body("gap"))
    found = await findings(stream)
    assert [(f.code, f.severity) for f in found] == [("sequence_gap", "error")]
    await assert_counters(stream, found)
    at = await event_at(stream, found[0].event_index)
    before = await event_at(stream, found[0].event_index - 1)
    assert at.sequence_number == before.sequence_number + 2
    assert stream.status == "completed"


async def test_duplicate_is_a_sequence_duplicate(upstream):
    stream, _ = await record(body("duplicate"))
    found = await findings(stream)
    assert [(f.code, f.severity) for f in found] == [("sequence_duplicate", "error")]
    [fault] = await faults(upstream, stream)
    at = await event_at(stream, found[0].event_index)
    before = await event_at(stream, found[0].event_index - 1)
    assert at.sequence_number == before.sequence_number == fault["sequence_number"]
    assert at.data == before.data
    # the repeat is not counted twice in the text
    assert stream.output_text == stream.final_text


async def test_reorder_is_a_regression_and_the_text_is_still_right(upstream):
    stream, _ = await record(body("reorder"))
    found = await findings(stream)
    # the later number arrives first (a gap), the earlier one then fills it (a regression)
    assert [(f.code, f.severity) for f in found] == [
        ("sequence_gap", "error"),
        ("sequence_regression", "error"),
    ]
    [fault] = await faults(upstream, stream)
    late = await event_at(stream, found[1].event_index)
    assert late.sequence_number == min(fault["sequence_numbers"])
    assert found[1].event_index == found[0].event_index + 1
    assert stream.output_text == stream.final_text and stream.output_text
    assert not TEXT_CODES & {f.code for f in found}


async def test_missing_terminal(upstream):
    stream, _ = await record(body("missing_terminal"))
    found = await findings(stream)
    assert [(f.code, f.severity, f.event_index) for f in found] == [
        ("missing_terminal", "error", None)
    ]
    assert stream.status == "truncated"
    assert stream.terminal_us is None


async def test_malformed_json_is_invalid_json(upstream):
    stream, _ = await record(body("malformed_json"))
    found = await findings(stream)
    assert [(f.code, f.severity) for f in found] == [("invalid_json", "error")]
    at = await event_at(stream, found[0].event_index)
    assert not at.is_json and at.type == "" and at.sequence_number is None
    assert stream.status == "completed" and stream.output_text == stream.final_text


async def test_unknown_events_are_info_once_per_type(upstream):
    stream, _ = await record(body("unknown_event"))
    found = await findings(stream)
    assert {f.code for f in found} == {"unknown_event_type"}
    assert all(f.severity == "info" for f in found)
    types = [(await event_at(stream, f.event_index)).type for f in found]
    assert sorted(types) == ["response.citation.added", "response.usage.partial"]
    assert [f.got for f in found] == types
    assert stream.error_findings == 0


async def test_done_sentinel_is_info(upstream):
    stream, _ = await record(body("done_sentinel"))
    found = await findings(stream)
    assert [(f.code, f.severity, f.event_index) for f in found] == [
        ("done_sentinel", "info", stream.event_count - 1)
    ]
    assert (await event_at(stream, stream.event_count - 1)).data == "[DONE]"
    assert stream.status == "completed"


async def test_rewrite_is_info_not_a_mismatch(upstream):
    stream, _ = await record(body("rewrite"))
    found = await findings(stream)
    assert found and {(f.code, f.severity) for f in found} == {("rewritten_text", "info")}
    [fault] = await faults(upstream, stream)
    # the response's text is the rewritten one (issue 16); the draft is kept in `parts`
    assert stream.output_text == stream.final_text == fault["text"] != fault["draft"]
    draft = "".join(p.get("streamed_text", "") for i in stream.parts for p in i["parts"])
    assert draft == fault["draft"]
    assert len(found) == 1  # one rewrite, one finding
    assert stream.error_findings == 0 and stream.status == "completed"


async def test_bursts_are_buffered_delivery_and_paced_streams_are_not(upstream):
    # Real pacing (time_scale 1): a burst needs a silence of 250 ms before it, which at 20×
    # speed never happens. All run at once to keep the test at the length of the longest.
    paced = [
        ("normal", "gpt-oss-20b"),
        ("normal", "mistral-small-3.2"),
        ("normal", "auto"),
        ("tools", "gpt-oss-20b"),
    ]
    results = await asyncio.gather(
        record(body("bursty", model="gpt-oss-20b", time_scale=1.0, sentences=3)),
        *(record(body(s, model=m, time_scale=1.0, sentences=3)) for s, m in paced),
    )
    (bursty, _), *normal = results
    found = await findings(bursty)
    assert found and {(f.code, f.severity) for f in found} == {("buffered_delivery", "warning")}
    assert bursty.status == "completed" and bursty.error_findings == 0
    for stream, _ in normal:
        assert stream.status == "completed"
        assert [f.code for f in await findings(stream)] == [], (stream.scenario, stream.pk)
