"""streams.serve.export and the export_sse command: SSE re-serialisation of recorded rows, the JSON
document, the streaming generators (sync and async) and the key never leaving."""

import datetime as dt
import io
import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from streams.core.capture import parse_sse_bytes
from streams.ingest.importer import import_capture
from streams.models import Event, Finding, Stream
from streams.serve import export
from streams.serve.export import iter_document, iter_sse
from streams.shapes import public
from streams.store.rows import insert_events
from tests.support.captures import (
    document,
    event_tuples,
    exported,
    finding_tuples,
    small_stream,
    sse,
)
from tests.support.recording import event_values

T0 = dt.datetime(2025, 5, 6, 7, 8, 9, tzinfo=dt.UTC)


def recorded(events, *, status="completed", **fields):
    """A live stream stored as the recorder stores one: `events` are (name, id, data, raw)."""
    stream = Stream.objects.create(
        status=status, source="live", requested_model="auto", started_at=T0, **fields
    )
    rows = [
        event_values(
            stream.pk, i, i * 1000, T0 + dt.timedelta(milliseconds=i), data,
            event_name=name, sse_id=sse_id, raw=raw,
        )  # (no comments before it)
        for i, (name, sse_id, data, raw) in enumerate(events)
    ]  # fmt: skip
    insert_events(rows)
    Stream.objects.filter(pk=stream.pk).update(event_count=len(rows))
    return Stream.objects.get(pk=stream.pk)


def messages(n_text="Hoi"):
    return [("message", "", json.dumps(e), None) for e in small_stream(n_text)]


@pytest.mark.django_db
class TestSse:
    def test_recorded_rows_are_written_as_sse_blocks(self):
        stream = recorded(messages()[:2])
        first, second = (e[2] for e in messages()[:2])
        assert exported(stream) == (
            f"event: message\ndata: {first}\n\nevent: message\ndata: {second}\n\n".encode()
        )

    def test_names_ids_multiline_and_raw_data_survive_the_round_trip(self):
        events = messages()
        events[1] = ("response.routing.completed", "7", events[1][2], None)
        events[2] = ("", "8", events[2][2], None)
        events[3] = ("message", "", events[3][2], None)  # the id was cleared after "8"
        events.insert(4, ("message", "", "line one\n line two\n\nfour", None))
        events.insert(5, ("message", "", "caf\ufffd", b"caf\xe9"))
        events.insert(6, ("message", "", "", None))
        stream = recorded(events)
        body = exported(stream)
        parsed = parse_sse_bytes(body)
        assert [(e.event_name, e.sse_id, e.data) for e in parsed] == [e[:3] for e in events]
        assert parsed[5].raw == b"caf\xe9"
        assert b"id: \n" in body  # the explicit reset
        [again] = import_capture(body, "again.sse")
        assert [r[1:] for r in event_tuples(again)] == [
            (e[0], e[1], *r[3:6], e[3]) for e, r in zip(events, event_tuples(stream), strict=True)
        ]

    def test_it_comes_in_pieces_for_big_streams(self):
        n = export.EVENTS_PER_PIECE * 2 + 3
        events = [
            ("message", "", json.dumps({"type": "x", "sequence_number": i}), None) for i in range(n)
        ]
        stream = recorded(events)
        pieces = list(iter_sse(stream))
        assert len(pieces) == 3
        assert len(parse_sse_bytes(b"".join(pieces))) == n

    def test_an_import_gives_back_its_bytes(self):
        content = b": hi\r\n\r\n" + sse(*small_stream()).replace(b"\n", b"\r\n")
        [stream] = import_capture(content, "crlf.sse")
        assert exported(stream) == content
        # even when the bytes are larger than one piece
        big = sse(*small_stream("x" * 20_000))
        [stream] = import_capture(big, "big.sse")
        assert len(list(iter_sse(stream))) > 1
        assert exported(stream) == big


@pytest.mark.django_db
class TestDocument:
    def test_it_has_the_stream_its_findings_and_its_events(self):
        stream = recorded(
            messages(),
            resolved_model="gpt-oss-20b",
            routing_category="chat",
            error_code="",
            request_written_us=100,
            first_token_us=300,
            ttft_ms=0.2,
            output_text="Hoi",
            final_text="Hoi",
            parts=[{"output_index": 0, "type": "message"}],
            request_body={"model": "auto", "input": "hallo"},
        )
        Finding.objects.create(
            stream=stream, code="sequence_gap", severity="error", event_index=3, detail="d"
        )
        doc = document(stream)
        assert doc["id"] == stream.pk and doc["status"] == "completed"
        assert doc["source"] == "live"
        assert doc["routing"] == {"category": "chat", "source": "", "reasoning": ""}
        assert doc["error"] is None
        assert doc["milestones_us"]["request_written"] == 100
        assert doc["milestones_us"]["first_token"] == 300
        assert set(doc["milestones_us"]) == {
            "connected",
            "request_written",
            "headers",
            "created",
            "routing",
            "first_token",
            "first_tool_call",
            "terminal",
            "closed",
        }
        assert doc["ttft_ms"] == 0.2 and doc["started_at"] == T0.isoformat()
        assert doc["parts"] == [{"output_index": 0, "type": "message"}]
        assert doc["findings"] == [
            {
                "code": "sequence_gap",
                "severity": "error",
                "event_index": 3,
                "expected": "",
                "got": "",
                "detail": "d",
            }
        ]
        assert len(doc["events"]) == stream.event_count
        e = doc["events"][1]
        assert set(e) == set(public.EXPORT_EVENT_FIELDS)
        assert e["index"] == 1 and e["t_us"] == 1000 and e["is_json"] is True
        assert e["received_at"] == (T0 + dt.timedelta(milliseconds=1)).isoformat()
        assert json.loads(e["data"])["sequence_number"] == 1
        assert "events" not in document(stream, events=False)

    def test_the_pieces_are_one_json_document(self):
        n = export.EVENTS_PER_PIECE + 10
        stream = recorded([("message", "", '{"type":"x","sequence_number":0}', None)] * n)
        pieces = list(iter_document(stream))
        assert len(pieces) >= 3
        doc = json.loads("".join(pieces))
        assert [e["index"] for e in doc["events"]] == list(range(n))
        empty = recorded([])
        assert json.loads("".join(iter_document(empty)))["events"] == []

    def test_the_upstream_key_never_leaves(self, settings):
        settings.UPSTREAM_API_KEY = "sk-very-secret-123"
        stream = recorded(
            [("message", "", '{"type":"error","message":"bad key sk-very-secret-123"}', None)],
            status="failed",
            error_code="invalid_api_key",
            error_message="Incorrect API key provided: sk-very-secret-123",
        )
        out = io.StringIO()
        call_command("export_sse", str(stream.pk), "--json", stdout=out)
        text = out.getvalue()
        assert "sk-very-secret-123" in "".join(iter_document(stream))  # verbatim until it leaves
        assert "sk-very-secret-123" not in text
        assert "[redacted]" in json.loads(text)["error"]["message"]
        doc = json.loads(text)
        assert "[redacted]" in doc["events"][0]["data"]
        assert not {"headers", "request_headers", "api_key"} & set(doc)
        assert "Authorization" not in text

    def test_the_upstream_key_never_leaves_an_sse_export(self, settings, tmp_path):
        settings.UPSTREAM_API_KEY = "sk-very-secret-123"
        data = '{"type":"error","message":"bad key sk-very-secret-123"}'
        stream = recorded([("message", "", data, None)], status="failed")
        recorded_body = self.client_get(stream)
        assert (
            recorded_body
            == b"event: message\ndata: "
            + data.replace("sk-very-secret-123", "[redacted]").encode()
            + b"\n\n"
        )
        # an imported capture is given back byte for byte, but for the key (even one that
        # would straddle two pieces of the download)
        content = b"data: " + b"x" * (export.CAPTURE_PIECE - 10) + b" sk-very-secret-123\n\n"
        [imported] = import_capture(content, "echo.sse")
        pieces = list(iter_sse(imported))
        assert len(pieces) == 2 and pieces[1].startswith(b"very-secret")  # it straddles them
        assert self.client_get(imported) == content.replace(b"sk-very-secret-123", b"[redacted]")
        path = tmp_path / "out.sse"
        call_command("export_sse", str(imported.pk), "-o", str(path))
        assert path.read_bytes() == content.replace(b"sk-very-secret-123", b"[redacted]")

    def client_get(self, stream):
        """The download as it leaves the server (the test client applies the egress gate)."""
        client = Client()
        user = User.objects.create_superuser(f"export-{stream.pk}", password="x")
        client.force_login(user)
        r = client.get(f"/streams/{stream.pk}.sse")
        assert r.status_code == 200
        return b"".join(r.streaming_content) if r.streaming else r.content


@pytest.mark.django_db
class TestExportCommand:
    def test_it_writes_the_bytes_to_a_file(self, tmp_path):
        content = sse(*small_stream()) + b"data: \xff\xfe\n\n"
        [stream] = import_capture(content, "raw.sse")
        out = tmp_path / "out.sse"
        call_command("export_sse", str(stream.pk), "-o", str(out))
        assert out.read_bytes() == content

    def test_it_writes_binary_to_stdout(self):
        stream = recorded(messages() + [("message", "", "\ufffd", b"\xff")])
        buffer = io.BytesIO()
        stdout = io.TextIOWrapper(buffer)  # like sys.stdout: text, with the bytes under .buffer
        call_command("export_sse", str(stream.pk), stdout=stdout)
        assert buffer.getvalue() == exported(stream)
        assert buffer.getvalue().endswith(b"data: \xff\n\n")

    def test_json_writes_the_document(self, tmp_path):
        stream = recorded(messages())
        out = tmp_path / "doc.json"
        call_command("export_sse", str(stream.pk), "--json", "-o", str(out))
        doc = json.loads(out.read_text())
        assert doc["id"] == stream.pk and len(doc["events"]) == stream.event_count

    def test_an_unknown_stream_is_an_error(self):
        with pytest.raises(CommandError, match="no stream 999"):
            call_command("export_sse", "999")

    def test_import_then_export_then_import_keeps_findings(self):
        events = small_stream()
        del events[5]
        [a] = import_capture(sse(*events), "gap.sse")
        [b] = import_capture(exported(a), "again.sse")
        assert finding_tuples(a) == finding_tuples(b)
        assert ("sequence_gap", "error", 5) in finding_tuples(a)
        assert Event.objects.filter(stream=b).count() == len(events)


# The async generators read on another thread: its writes must be committed.


@pytest.mark.django_db(transaction=True)
async def test_the_async_generator_gives_the_same_bytes():
    stream = await sync_to_async(recorded)(messages())
    pieces = [p async for p in export.aiter_sse(stream)]
    assert b"".join(pieces) == await sync_to_async(exported)(stream)


@pytest.mark.django_db(transaction=True)
async def test_the_async_generator_gives_the_same_document():
    stream = await sync_to_async(recorded)(messages())
    text = "".join([p async for p in export.aiter_document(stream)])
    assert json.loads(text) == await sync_to_async(document)(stream)
