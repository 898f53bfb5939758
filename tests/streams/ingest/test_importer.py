"""streams.ingest.importer and the import_sse command: real captures, wire-format variants, HAR,
round trips through the export (imported and recorded streams), unreadable files."""

import io
import json
import os
import re
import subprocess
import sys

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from streams.ingest.importer import CaptureError, import_capture, read_capture
from streams.models import Capture, Event, Finding, Stream
from tests.conftest import FIXTURES, REPO, database_url
from tests.support.captures import (
    event_tuples,
    exported,
    finding_tuples,
    har,
    har_entry,
    small_stream,
    sse,
)
from tests.support.recording import body, record

CAPTURES = sorted(p.name for p in FIXTURES.glob("*.sse"))
# At collection: a missing or empty folder would otherwise parametrize zero cases and pass.
assert CAPTURES, f"no .sse captures in {FIXTURES}"
TIMING_ONLY = {"stall", "buffered_delivery"}


def codes(stream):
    return {f.code for f in Finding.objects.filter(stream=stream)}


def one(content, filename="capture.sse", **kwargs):
    [stream] = import_capture(content, filename, **kwargs)
    return Stream.objects.get(pk=stream.pk)


# ---- the twelve real captures --------------------------------------------------------------


@pytest.mark.django_db
class TestRealCaptures:
    @pytest.mark.parametrize("name", CAPTURES)
    def test_it_imports_without_errors_and_round_trips(self, name):
        content = (FIXTURES / name).read_bytes()
        stream = one(content, name)
        expected = (
            "incomplete" if name == "openai_incomplete_max_output_tokens.sse" else "completed"
        )
        assert stream.status == expected
        assert stream.source == "import"
        assert stream.error_findings == 0
        assert not Finding.objects.filter(stream=stream, severity="error").exists()
        assert stream.output_text == stream.final_text
        assert stream.upstream_id.startswith("resp_")
        assert stream.requested_model and stream.resolved_model == stream.requested_model
        rows = event_tuples(stream)
        assert stream.event_count == len(rows) == len(read_capture(content, name)[0].events)
        assert rows[0][3] == "response.created"
        assert not Event.objects.filter(stream=stream, t_us__isnull=False).exists()
        assert stream.findings_count == Finding.objects.filter(stream=stream).count()
        assert Capture.objects.get(stream=stream).filename == name

        body = exported(stream)
        assert body == content  # byte-identical
        again = one(body, name)
        assert [r[1:] for r in event_tuples(again)] == [r[1:] for r in rows]
        assert finding_tuples(again) == finding_tuples(stream)

    def test_the_sample_texts_are_what_the_captures_say(self):
        stream = one((FIXTURES / "openai_text_basic.sse").read_bytes())
        assert stream.output_text == "1, 2, 3"
        assert stream.output_deltas > 0
        calls = one((FIXTURES / "openai_parallel_function_calls.sse").read_bytes())
        assert [p["type"] for p in calls.parts] == ["function_call", "function_call"]
        assert all(p["arguments"] for p in calls.parts)


# ---- wire-format variants ------------------------------------------------------------------


@pytest.mark.django_db
class TestWireFormats:
    def test_crlf_comments_retry_and_ids(self):
        events = small_stream()
        blocks = [": keep-alive\r\n\r\n", "retry: 1000\r\n\r\n"]
        for i, e in enumerate(events):
            blocks.append(f"event: message\r\nid: {i}\r\ndata: {json.dumps(e)}\r\n\r\n")
            if i == 2:
                blocks.append(": ping\r\n\r\n")
        content = "".join(blocks).encode()
        stream = one(content)
        assert stream.status == "completed" and stream.error_findings == 0
        assert stream.output_text == stream.final_text == "Hoi"
        rows = event_tuples(stream)
        assert len(rows) == len(events)  # comments and retry blocks are not events
        assert [r[2] for r in rows] == [str(i) for i in range(len(events))]
        assert [r[4] for r in rows] == list(range(len(events)))
        assert exported(stream) == content

    def test_done_sentinel_is_an_info_finding(self):
        content = sse(*small_stream()) + b"data: [DONE]\n\n"
        stream = one(content)
        assert stream.status == "completed"
        assert stream.error_findings == 0
        assert "done_sentinel" in codes(stream)
        last = Event.objects.get(stream=stream, index=stream.event_count - 1)
        assert last.data == "[DONE]" and not last.is_json and last.type == ""

    def test_events_without_event_lines_and_a_top_level_final_text(self):
        events = small_stream("Dag")
        events[-1] = {"type": "response.completed", "sequence_number": 7, "final_text": "Dag"}
        stream = one(sse(*events, event=None))
        assert stream.status == "completed" and stream.error_findings == 0
        assert stream.final_text == "Dag"
        assert "event_name_not_message" not in codes(stream)
        assert set(Event.objects.filter(stream=stream).values_list("event_name", flat=True)) == {""}

    def test_non_utf8_data_is_kept_raw_and_round_trips(self):
        good = sse(*small_stream())
        content = good[: good.index(b'event: message\ndata: {"type": "response.completed')]
        content += b"event: message\ndata: caf\xe9 \xff\n\n" + good[len(content) :]
        stream = one(content)
        bad = Event.objects.get(stream=stream, index=stream.event_count - 2)
        assert bytes(bad.raw) == b"caf\xe9 \xff"
        assert bad.data == "caf\ufffd \ufffd"
        assert not bad.is_json
        assert "invalid_json" in codes(stream)
        assert exported(stream) == content

    def test_the_model_option_is_the_requested_model(self):
        stream = one(sse(*small_stream(routing=True, model="gpt-oss-20b")), model="auto")
        assert stream.requested_model == "auto"
        assert stream.resolved_model == "gpt-oss-20b"
        assert (stream.routing_category, stream.routing_source) == ("chat", "router")
        assert stream.routing_reasoning == "short question"
        assert "routing_on_pinned_model" not in codes(stream)
        pinned = one(sse(*small_stream(routing=True)), model="gpt-oss-120b")
        assert "routing_on_pinned_model" in codes(pinned)

    def test_an_error_terminal_is_a_failed_stream(self):
        events = small_stream()[:-2] + [
            {"type": "error", "code": "overloaded", "message": "try again"}
        ]
        stream = one(sse(*events))
        assert stream.status == "failed"
        assert (stream.error_code, stream.error_message) == ("overloaded", "try again")

    def test_no_terminal_is_truncated(self):
        stream = one(sse(*small_stream()[:-1]))
        assert stream.status == "truncated"
        assert "missing_terminal" in codes(stream)

    def test_the_owner_is_stored(self):
        user = get_user_model().objects.create_user("importer")
        stream = one(sse(*small_stream()), user=user)
        assert stream.user == user


# ---- HAR -----------------------------------------------------------------------------------


@pytest.mark.django_db
class TestHar:
    def test_each_sse_response_becomes_a_stream_with_timings(self):
        first = sse(*small_stream("Een", routing=True, model="gpt-oss-20b"))
        second = sse(*small_stream("Twee")) + b"data: \xff\n\n"
        streams = import_capture(
            har(har_entry(first), har_entry(second, base64_body=True)), "session.har"
        )
        assert len(streams) == 2
        a, b = (Stream.objects.get(pk=s.pk) for s in streams)
        assert a.output_text == "Een" and b.output_text == "Twee"
        assert a.requested_model == "auto" and a.resolved_model == "gpt-oss-20b"
        assert a.prompt == "Hallo daar"
        assert a.request_body["input"][0]["content"] == "Hallo daar"
        assert a.http_status == 200 and a.content_type == "text/event-stream"
        assert a.upstream_url == "https://api.test/v1/responses"  # no query string: keys live there
        assert (a.connected_us, a.request_written_us, a.headers_us) == (11_500, 12_000, 312_000)
        assert a.closed_us == 812_500 and a.duration_ms == pytest.approx(800.5)
        assert a.started_at.isoformat() == "2025-01-02T03:04:05.678000+00:00"
        assert a.first_token_us is None and a.ttft_ms is None  # HAR has no per-event times
        # the export is the entry's body, not the HAR
        assert exported(a) == first
        assert exported(b) == second
        assert Capture.objects.get(stream=b).filename == "session.har#2"
        assert "sk-secret" not in json.dumps(a.request_body)

    def test_a_har_without_sse_responses_is_an_error(self):
        with pytest.raises(CaptureError, match="no SSE response"):
            import_capture(har(), "empty.har")
        assert not Stream.objects.exists()


# ---- unreadable input ----------------------------------------------------------------------


@pytest.mark.django_db
class TestUnreadable:
    @pytest.mark.parametrize(
        "content,message",
        [
            (b"", "empty"),
            (b"  \n\r\n", "empty"),
            (b"hello world\nthis is not a stream\n", "not an event stream"),
            (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not an event stream"),
            (b": only a comment\n\n", "not an event stream"),
            (b'{"not": "a har"}', "not a HAR"),
            (b"{broken json", "not a HAR"),
        ],
    )
    def test_it_raises_a_capture_error(self, content, message):
        with pytest.raises(CaptureError, match=message):
            import_capture(content, "x.sse")
        assert not Stream.objects.exists()


class TestReasons:
    """A CaptureError says why in English (str: what is stored and printed) and as a code with
    parameters, which a page says in its own language (importer.reason_shown)."""

    @pytest.mark.parametrize(
        "content,code,params,english,dutch",
        [
            (b" \n", "empty", {}, "the file is empty", "het bestand is leeg"),
            (
                b"data: {}\n\n" * 1001,
                "too_many_events",
                {"limit": 1000},
                "more than 1,000 events; one file may hold at most 1,000",
                "meer dan 1\u202f000 events; één bestand mag er hooguit 1\u202f000 bevatten",
            ),
            (
                har(),
                "har_without_sse",
                {"entries": 0},
                "the HAR file holds no SSE response with events (0 candidate entries)",
                "het HAR-bestand bevat geen SSE-antwoord met events (kandidaat-items: 0)",
            ),
            (
                json.dumps({"log": {"entries": [{"request": [1]}]}}).encode(),
                "har_wrong_type",
                {"entry": "1", "field": "request", "expected": "object", "got_type": "list"},
                "HAR entry 1.request is a list, not an object",
                "in HAR-item 1 is request een list, geen object",
            ),
        ],
    )
    def test_a_reason_is_english_and_a_code_the_page_says_in_dutch(
        self, monkeypatch, content, code, params, english, dutch
    ):
        from django.utils import translation

        from streams.ingest import importer

        monkeypatch.setattr(importer, "MAX_EVENTS_PER_UPLOAD", 1000)
        with translation.override("nl"), pytest.raises(CaptureError) as caught:
            read_capture(content, "x.sse")
        error = caught.value
        assert (str(error), error.reason) == (english, {"code": code, "params": params})
        json.dumps(error.reason)  # stored in a JSONField
        with translation.override("nl"):
            assert importer.reason_shown(error.reason) == dutch
        with translation.override("en"):  # (on a page figures are grouped by a thin space)
            shown = re.sub(r"(?<=\d),(?=\d{3})", "\u202f", english)
            assert importer.reason_shown(error.reason) == shown

    def test_an_unknown_or_broken_reason_is_not_said(self):
        from streams.ingest.importer import reason_shown

        for reason in (None, {}, {"code": "from_a_later_version"}, {"code": "empty", "params": 3}):
            assert reason_shown(reason) is None
        assert reason_shown({"code": "too_many_events", "params": {}}) is None


# ---- the command ---------------------------------------------------------------------------


@pytest.mark.django_db
class TestImportCommand:
    def test_it_reports_each_file(self, tmp_path):
        path = tmp_path / "run.sse"
        path.write_bytes(sse(*small_stream()[:-1]))
        out = io.StringIO()
        call_command("import_sse", str(FIXTURES / "openai_text_basic.sse"), str(path), stdout=out)
        text = out.getvalue()
        assert "openai_text_basic.sse: stream" in text and "completed, 15 events" in text
        assert "output: '1, 2, 3'" in text
        assert "truncated" in text
        assert "1 error, 0 warning, 0 info" in text
        assert "error   missing_terminal @ end" in text

    def test_json_lines_and_exit_code_2_for_unreadable_files(self, tmp_path):
        garbage = tmp_path / "garbage.sse"
        garbage.write_bytes(b"not a stream\n")
        capture = tmp_path / "multi.har"
        capture.write_bytes(
            har(har_entry(sse(*small_stream("A"))), har_entry(sse(*small_stream("B"))))
        )
        out, err = io.StringIO(), io.StringIO()
        files = [str(tmp_path / "missing.sse"), str(garbage), str(capture)]
        with pytest.raises(CommandError) as exc:
            call_command("import_sse", *files, "--json", "--model", "auto", stdout=out, stderr=err)
        assert exc.value.returncode == 2
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        assert [line["file"] for line in lines] == [files[0], files[1], files[2], files[2]]
        assert "error" in lines[0] and "error" in lines[1]
        a, b = lines[2:]
        assert set(a) == {"file", "stream_id", "status", "events", "output_text", "violations"}
        assert (a["status"], a["output_text"], b["output_text"]) == ("completed", "A", "B")
        assert a["events"] == Stream.objects.get(pk=a["stream_id"]).event_count
        assert Stream.objects.get(pk=b["stream_id"]).requested_model == "auto"
        assert "missing.sse" in err.getvalue() and "garbage.sse" in err.getvalue()
        assert Stream.objects.count() == 2  # the readable file was still imported

    def test_violations_carry_code_severity_index_and_detail(self, tmp_path):
        events = small_stream()
        del events[4]  # a delta: a sequence gap
        path = tmp_path / "gap.sse"
        path.write_bytes(sse(*events))
        out = io.StringIO()
        call_command("import_sse", str(path), "--json", stdout=out)
        [line] = [json.loads(x) for x in out.getvalue().splitlines()]
        gap = next(v for v in line["violations"] if v["code"] == "sequence_gap")
        assert set(gap) == {"code", "severity", "event_index", "detail"}
        assert (gap["severity"], gap["event_index"]) == ("error", 4)
        assert gap["detail"]


@pytest.mark.django_db(transaction=True)
def test_the_command_exits_0_and_2_as_a_process(tmp_path):
    env = {**os.environ, "DATABASE_URL": database_url()}
    ok = subprocess.run(
        [sys.executable, "manage.py", "import_sse", "--json", str(FIXTURES / "openai_refusal.sse")],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    [line] = [json.loads(x) for x in ok.stdout.splitlines()]
    assert line["status"] == "completed"
    assert Stream.objects.filter(pk=line["stream_id"], source="import").exists()
    bad = subprocess.run(
        [sys.executable, "manage.py", "import_sse", str(tmp_path / "nope.sse")],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert b"nope.sse" in bad.stderr


# ---- recorded streams: export, then import -------------------------------------------------


ROUND_TRIP_SCENARIOS = [
    "normal",
    "tools",
    "parallel_tools",
    "multi_part",
    "rewrite",
    "final_text",
    "malformed_json",
    "gap",
    "duplicate",
    "reorder",
    "missing_terminal",
    "error_no_seq",
    "unknown_event",
    "utf8_split",
    "comments",
    "done_sentinel",
    "xss",
]


@pytest.mark.django_db(transaction=True)
async def test_recorded_streams_round_trip_through_export_and_import(upstream):
    import asyncio

    recorded = await asyncio.gather(*(record(body(s, sentences=2)) for s in ROUND_TRIP_SCENARIOS))

    def check(stream):
        again = one(exported(stream), f"{stream.scenario}.sse")
        original_rows = [(r[3], r[4], r[5]) for r in event_tuples(stream)]
        assert [(r[3], r[4], r[5]) for r in event_tuples(again)] == original_rows, stream.scenario
        assert [r[1:3] for r in event_tuples(again)] == [r[1:3] for r in event_tuples(stream)]
        assert finding_tuples(again, TIMING_ONLY) == finding_tuples(stream, TIMING_ONLY), (
            stream.scenario
        )
        for field in ("status", "output_text", "final_text", "upstream_id", "resolved_model"):
            assert getattr(again, field) == getattr(stream, field), (stream.scenario, field)
        assert again.parts == stream.parts
        assert again.output_deltas == stream.output_deltas
        return stream.scenario

    done = [await sync_to_async(check)(s) for s, _ in recorded]
    assert done == ROUND_TRIP_SCENARIOS
