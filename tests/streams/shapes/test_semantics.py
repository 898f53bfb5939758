"""The seed's semantics, end to end through every reader (issue 16): after a rewrite pass the
response's text is the rewritten `.done` text, with the streamed draft kept beside it; events
after the terminal event are one finding and no part of the response; a capture that is not
UTF-8 is a finding with the byte offset, its bytes kept; a stream without events has a timing
chart and no replay to offer. Each fact is checked where it is read: the stored row, the
serializer (`streams.shapes.public`), the timeline page, the replay data and the `import_sse`
CLI."""

import io
import json
import re

import pytest
from django.core.management import call_command

from dashboard.queries import stream_detail, timing
from streams.ingest.importer import import_capture, read_capture
from streams.models import Capture, Event, Finding, Stream
from streams.serve.export import iter_sse
from streams.shapes import public
from tests.conftest import log_in_people
from tests.support.captures import har, har_entry, small_stream, sse
from tests.support.recording import recorded, text_events


class Base:
    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)

    def page(self, stream):
        r = self.owner_client.get(f"/streams/{stream.pk}/")
        assert r.status_code == 200
        return r.text


def output_panel(html):
    return html.split('id="output-items"', 1)[1].split("</section>", 1)[0]


class TestRewrite(Base):
    def test_the_final_text_is_the_rewritten_one_everywhere(self, tmp_path):
        events = text_events("teh ", "cat sat", rewrite_to="the cat sat")
        stream = recorded(self.owner, events)
        assert stream.output_text == stream.final_text == "the cat sat"
        [finding] = Finding.objects.filter(stream=stream)
        assert finding.code == "rewritten_text"  # once, though the .done and the terminal carry it
        [item] = public.output(stream)
        assert (item["parts"][0]["text"], item["parts"][0]["streamed"]) == (
            "the cat sat",
            "teh cat sat",
        )
        assert public.stream(stream)["output_text"] == "the cat sat"

        # the timeline: the final text first, then the draft, labelled as such, and the diff
        panel = output_panel(self.page(stream))
        final_at = panel.index('<div class="text">the cat sat</div>')
        draft_at = panel.index("Streamed draft (before the rewrite)")
        assert final_at < draft_at < panel.index("teh cat sat") < panel.index("<del>teh</del>")
        assert "the text above is the final (rewritten) text" in panel

        # the CLI, from the file the stream exports
        path = tmp_path / "rewrite.sse"
        path.write_bytes(b"".join(iter_sse(stream)))
        out = io.StringIO()
        call_command("import_sse", str(path), "--json", stdout=out)
        [line] = [json.loads(x) for x in out.getvalue().splitlines()]
        assert line["output_text"] == "the cat sat"
        assert [v["code"] for v in line["violations"]] == ["rewritten_text"]
        out = io.StringIO()
        call_command("import_sse", str(path), stdout=out)
        assert "output: 'the cat sat'" in out.getvalue()

    def test_rows_stored_in_the_older_shape_read_the_same(self):
        # before this rule the checker stored the deltas as `text` and the .done as `done_text`
        parts = [
            {
                "output_index": 0,
                "type": "message",
                "id": "",
                "parts": [
                    {"content_index": 0, "type": "output_text", "text": "teh", "done_text": "the"}
                ],
            }
        ]
        stream = recorded(self.owner, text_events("teh", rewrite_to="the"), parts=parts)
        [item] = public.output(stream)
        assert (item["parts"][0]["text"], item["parts"][0]["streamed"]) == ("the", "teh")


def after_terminal_events():
    events = text_events("Hello")
    n = len(events)
    events += [
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "delta": " LATE", "sequence_number": n},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"type": "function_call", "name": "late_tool"}, "sequence_number": n + 1},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "delta": " LATER", "sequence_number": n + 2},
    ]  # fmt: skip
    return events, n


class TestEventsAfterTheTerminal(Base):
    def test_one_finding_with_the_count_and_the_first_sequence_number(self):
        events, n = after_terminal_events()
        stream = recorded(self.owner, events)
        [finding] = Finding.objects.filter(stream=stream, code="event_after_terminal")
        assert finding.event_index == n
        assert finding.got.startswith("3 events")
        assert f"the first is event {n} (sequence_number {n})" in finding.detail
        assert stream.findings_count == 1

    def test_they_are_not_part_of_the_text_the_items_the_page_or_the_replay(self):
        events, n = after_terminal_events()
        stream = recorded(self.owner, events)
        assert stream.output_text == "Hello"
        assert [p["output_index"] for p in stream.parts] == [0]
        panel = output_panel(self.page(stream))
        assert "LATE" not in panel and "late_tool" not in panel
        replay = timing.replay_events(stream)
        deltas = [e[2] for e in replay["events"] if len(e) == 3]
        assert deltas == ["Hello"]
        assert all("late_tool" not in json.dumps(e) for e in replay["events"])
        # still recorded verbatim: the table and the export have them
        assert Event.objects.filter(stream=stream, index__gte=n).count() == 3

    def test_an_import_of_such_a_capture_says_the_same(self, tmp_path):
        events, n = after_terminal_events()
        path = tmp_path / "late.sse"
        path.write_bytes(sse(*events))
        out = io.StringIO()
        call_command("import_sse", str(path), "--json", stdout=out)
        [line] = [json.loads(x) for x in out.getvalue().splitlines()]
        assert line["output_text"] == "Hello"
        [v] = line["violations"]
        assert (v["code"], v["event_index"]) == ("event_after_terminal", n)


LATIN1_TEXT = "Café crème, één ijsje"


def latin1_capture():
    """A capture saved as Latin-1: its one delta's bytes are not UTF-8."""
    events = small_stream("x")
    good = sse(*events)
    delta = sse(events[3])
    latin = delta.decode().replace('"x"', json.dumps(LATIN1_TEXT, ensure_ascii=False))
    return good.replace(delta, latin.encode("latin-1")), good.index(delta)


@pytest.mark.django_db
class TestNotUtf8:
    def test_a_latin1_file_is_a_finding_with_the_byte_offset_and_keeps_its_bytes(self):
        content, delta_at = latin1_capture()
        offset = content.index("é".encode("latin-1"))
        [stream] = import_capture(content, "latin1.sse")
        [finding] = Finding.objects.filter(stream=stream, code="invalid_utf8")
        assert finding.severity == "error" and finding.event_index == 3
        assert f"byte offset {offset} of the file" in finding.detail
        assert "E9" in finding.got
        event = Event.objects.get(stream=stream, index=3)
        assert "\ufffd" in event.data  # shown replaced, but never silently:
        assert LATIN1_TEXT.encode("latin-1") in bytes(event.raw)  # the bytes are kept
        assert bytes(Capture.objects.get(stream=stream).content) == content
        assert b"".join(iter_sse(stream)) == content  # and export byte for byte
        assert offset > delta_at

    def test_the_check_before_storing_has_it_too(self):
        content, _ = latin1_capture()
        [capture] = read_capture(content, "latin1.sse")  # what the upload form validates with
        assert "invalid_utf8" in {v.code for v in capture.checked.checker.violations}

    def test_once_per_file_however_many_events_hold_such_bytes(self):
        events = small_stream("xy")
        body = b"".join(
            sse(e).replace(b'"x"', b'"\xe9"').replace(b'"y"', b'"\xe8"') for e in events
        )
        [stream] = import_capture(body, "latin1.sse")
        [finding] = Finding.objects.filter(stream=stream, code="invalid_utf8")
        assert "2 events have such bytes" in finding.detail
        assert finding.event_index == 3

    def test_the_cli_reports_it(self, tmp_path):
        content, _ = latin1_capture()
        path = tmp_path / "latin1.sse"
        path.write_bytes(content)
        out = io.StringIO()
        call_command("import_sse", str(path), "--json", stdout=out)
        [line] = [json.loads(x) for x in out.getvalue().splitlines()]
        codes = [v["code"] for v in line["violations"]]
        assert "invalid_utf8" in codes
        [v] = [v for v in line["violations"] if v["code"] == "invalid_utf8"]
        assert re.search(r"byte offset \d+ of the file", v["detail"])

    def test_a_har_body_in_base64_that_is_not_utf8(self):
        content, _ = latin1_capture()
        [stream] = import_capture(har(har_entry(content, base64_body=True)), "session.har")
        [finding] = Finding.objects.filter(stream=stream, code="invalid_utf8")
        offset = content.index("é".encode("latin-1"))
        assert f"byte offset {offset} of the HAR entry's response body" in finding.detail

    def test_utf8_files_have_no_such_finding(self):
        [stream] = import_capture(sse(*small_stream(LATIN1_TEXT)), "utf8.sse")
        assert not Finding.objects.filter(stream=stream, code="invalid_utf8").exists()


class TestStreamWithoutEvents(Base):
    @pytest.fixture(autouse=True)
    def _stream(self, _people):
        self.stream = Stream.objects.create(
            user=self.owner,
            status=Stream.Status.FAILED,
            http_status=429,
            error_code="http_429",
            error_message="rate limited",
            event_count=0,
        )

    def test_its_timing_is_an_empty_chart_not_a_500(self):
        r = self.owner_client.get(f"/streams/{self.stream.pk}/timing.json")
        assert r.status_code == 200
        data = r.json()
        assert data["count"] == 0 and "gap_us" not in data
        assert data["flagged"] == {"stall": 0, "buffered_delivery": 0}

    def test_its_page_offers_no_replay_and_says_why(self):
        html = self.page(self.stream)
        button = re.search(r'<button type="button" id="replay-btn"[^>]*>', html).group(0)
        assert "disabled" in button
        assert 'id="replay-why"' in html and "Nothing to replay: no events were received." in html

    def test_a_finished_stream_with_output_offers_it(self):
        stream = recorded(self.owner, text_events("Hi"))
        html = self.page(stream)
        button = re.search(r'<button type="button" id="replay-btn"[^>]*>', html).group(0)
        assert "disabled" not in button and 'id="replay-why"' not in html


def figure(html, label):
    """The value of a key figure in the timeline header."""
    m = re.search(
        rf'<div class="label">{label}</div><div class="value"[^>]*>(?:<[^>]+>)*([\d,]+)', html
    )
    return int(m.group(1).replace(",", ""))


class TestFiguresAgree(Base):
    """One source per figure: the page's numbers are the database's."""

    def check(self, stream, html):
        stored = Event.objects.filter(stream=stream).count()
        assert figure(html, "Events") == stored
        toolbar = re.search(r'<h2 id="events-title">Events <span[^>]*>([\d,]+)</span>', html)
        assert int(toolbar.group(1).replace(",", "")) == stored
        rows = re.findall(r'<tr id="ev-(\d+)" class="event', html)
        assert len(rows) == min(stored, stream_detail.EVENTS_PAGE)
        findings = Finding.objects.filter(stream=stream)
        assert figure(html, "Findings") == findings.count()
        assert len(re.findall(r'<li class="finding sev-', html)) == findings.count()
        return stored

    def test_a_finished_stream(self):
        # a stall between two events and one before the connection closed (at no event)
        events = text_events("a", "b", "c", "d")
        times = [100_000 + 1000 * i + (3_000_000 if i >= 5 else 0) for i in range(len(events))]
        stream = recorded(self.owner, events, times=times)
        Finding.objects.create(
            stream=stream, code="stall", severity="warning", event_index=None, got="40.0 s"
        )
        Stream.objects.filter(pk=stream.pk).update(findings_count=2)
        stream.refresh_from_db()
        html = self.page(stream)
        stored = self.check(stream, html)
        assert f"Loading the timing of {stored} events" in html
        timing = self.owner_client.get(f"/streams/{stream.pk}/timing.json").json()
        assert timing["count"] == stored
        # the caption counts both stalls, the chart marks the one at an event
        assert timing["flagged"]["stall"] == 2 == Finding.objects.filter(code="stall").count()
        assert [m["code"] for m in timing["marks"]] == ["stall"]

    def test_a_live_stream_whose_row_count_lags(self):
        stream = recorded(self.owner, text_events("a", "b", "c")[:-1], status="streaming")
        # the recorder rewrites a streaming row's event_count at most every 500 ms
        Stream.objects.filter(pk=stream.pk).update(event_count=2)
        stream.refresh_from_db()
        html = self.page(stream)
        assert self.check(stream, html) == 8


# ---- a live recording whose upstream sends bytes that are not UTF-8 ---------------------------


@pytest.fixture
def latin1_upstream(settings):
    from tests.support.hostile import RawUpstream

    created = (
        b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_l1",'
        b'"object":"response","model":"m","status":"in_progress"}}\n\n'
    )
    deltas = [
        b'data: {"type":"response.output_text.delta","sequence_number":%d,"output_index":0,'
        b'"item_id":"msg_1","content_index":0,"delta":"caf\xe9 %d"}\n\n' % (i, i)
        for i in (1, 2)
    ]
    done = (
        b'data: {"type":"response.completed","sequence_number":3,"response":{"id":"resp_l1",'
        b'"object":"response","model":"m","status":"completed"}}\n\n'
    )
    server = RawUpstream(lambda *a: (200, "text/event-stream", [created, *deltas, done]))
    settings.UPSTREAM_BASE_URL = server.base_url
    yield server
    server.stop()


@pytest.mark.django_db(transaction=True)
async def test_a_live_stream_that_is_not_utf8_gets_one_finding_and_keeps_its_bytes(
    latin1_upstream,
):
    from asgiref.sync import sync_to_async

    from streams.run import runner
    from streams.store import rows

    stream = await sync_to_async(rows.new_row)(None, {"input": "hi", "stream": True})
    last, _ = await runner.run_stream(stream)
    findings = [f async for f in Finding.objects.filter(stream_id=last.pk, code="invalid_utf8")]
    assert len(findings) == 1
    (finding,) = findings
    assert finding.event_index == 1
    # the offset in that event's data, the bytes in hex, and how many events hold such bytes
    offset = (await Event.objects.aget(stream_id=last.pk, index=1)).raw.index(b"\xe9")
    assert f"byte {offset:,} of the data of event 1: E9" in finding.got
    assert "2 events have such bytes" in finding.detail
    raws = [e.raw async for e in Event.objects.filter(stream_id=last.pk).order_by("index")]
    assert raws[0] is None and b"caf\xe9 1" in raws[1] and b"caf\xe9 2" in raws[2]
