"""streams.core.capture: the WHATWG SSE parser over bytes, HAR import and sniffing. Pure tests."""

import base64
import json

import pytest

from streams.core.capture import (
    event_at,
    first_invalid_utf8,
    parse_har,
    parse_sse_bytes,
    sniff,
    truncated_tail,
)

BODY = (
    "event: message\n"
    'data: {"type":"response.created","sequence_number":0}\n'
    "\n"
    "event: message\n"
    'data: {"type":"response.output_text.delta","sequence_number":1,"delta":"Hi"}\n'
    "\n"
)


def _data(events):
    return [e.data for e in events]


class TestLineEnds:
    @pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
    def test_it_parses_every_line_end_the_same(self, eol):
        events = parse_sse_bytes(BODY.replace("\n", eol).encode())
        assert _data(events) == [
            '{"type":"response.created","sequence_number":0}',
            '{"type":"response.output_text.delta","sequence_number":1,"delta":"Hi"}',
        ]
        assert [e.event_name for e in events] == ["message", "message"]

    def test_crlf_counts_as_one_line_end_not_two(self):
        # "\r\n" split into "\r" + "\n" would be a blank line and dispatch "a" alone.
        events = parse_sse_bytes(b"data: a\r\ndata: b\r\n\r\n")
        assert _data(events) == ["a\nb"]

    def test_mixed_line_ends_in_one_file(self):
        events = parse_sse_bytes(b"data: a\r\rdata: b\n\ndata: c\r\n\r\n")
        assert _data(events) == ["a", "b", "c"]


class TestFields:
    def test_it_strips_a_leading_bom_once(self):
        events = parse_sse_bytes(b"\xef\xbb\xbf" + BODY.encode())
        assert len(events) == 2
        assert events[0].event_name == "message"
        assert events[0].byte_offset == 3

    def test_a_second_bom_is_not_stripped(self):
        events = parse_sse_bytes(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n")
        assert events == []  # the field name is "\ufeffdata", which the spec ignores

    def test_comments_are_ignored(self):
        events = parse_sse_bytes(b": keep-alive\ndata: x\n: another\n\n")
        assert _data(events) == ["x"]

    def test_comment_and_retry_only_blocks_are_not_events(self):
        events = parse_sse_bytes(b": ping\n\nretry: 3000\n\nevent: message\n\ndata: x\n\n")
        assert _data(events) == ["x"]
        assert events[0].event_name == ""  # the event name of the data-less block was reset

    def test_retry_is_kept_when_numeric(self):
        events = parse_sse_bytes(b"retry: 1500\ndata: x\n\nretry: soon\ndata: y\n\n")
        assert [e.retry for e in events] == [1500, None]

    def test_multi_line_data_is_joined_with_newlines(self):
        events = parse_sse_bytes(b'data: {"a":\ndata:  1}\ndata\n\n')
        # one leading space is removed, a second one is kept; a bare `data` adds an empty line
        assert _data(events) == ['{"a":\n 1}\n']

    def test_field_without_space_after_colon(self):
        events = parse_sse_bytes(b"event:x\ndata:y\n\n")
        assert (events[0].event_name, events[0].data) == ("x", "y")

    def test_empty_data_line_dispatches_an_empty_event(self):
        assert _data(parse_sse_bytes(b"data:\n\n")) == [""]

    def test_missing_event_field_gives_an_empty_name(self):
        assert parse_sse_bytes(b"data: x\n\n")[0].event_name == ""

    def test_id_persists_until_changed_and_null_ids_are_ignored(self):
        content = b"id: 7\ndata: a\n\ndata: b\n\nid: 8\x00\ndata: c\n\nid\ndata: d\n\n"
        events = parse_sse_bytes(content)
        assert [e.sse_id for e in events] == ["7", "7", "7", ""]

    def test_unknown_fields_are_ignored(self):
        assert _data(parse_sse_bytes(b"foo: bar\ndata: x\n\n")) == ["x"]

    def test_done_sentinel_is_an_ordinary_event(self):
        events = parse_sse_bytes(b"data: [DONE]\n\n")
        assert _data(events) == ["[DONE]"]


class TestBytes:
    def test_valid_utf8_keeps_no_raw_bytes(self):
        events = parse_sse_bytes("data: héllo €\n\n".encode())
        assert events[0].data == "héllo €"
        assert events[0].raw is None

    def test_invalid_utf8_keeps_the_raw_bytes(self):
        events = parse_sse_bytes(b"data: ok \xff\xfe end\ndata: two\n\n")
        assert events[0].raw == b"ok \xff\xfe end\ntwo"
        assert events[0].data == "ok \ufffd\ufffd end\ntwo"

    def test_byte_offsets_point_at_each_block(self):
        content = BODY.encode()
        events = parse_sse_bytes(content)
        assert events[0].byte_offset == 0
        assert content[events[1].byte_offset :].startswith(b"event: message\ndata:")
        assert events[0].byte_end == events[1].byte_offset
        assert events[1].byte_end == len(content)

    def test_byte_offset_includes_a_leading_comment_of_the_block(self):
        content = b"data: a\n\n: note\ndata: b\n\n"
        assert parse_sse_bytes(content)[1].byte_offset == 9


class TestTruncatedTail:
    def test_complete_file_is_not_truncated(self):
        events = parse_sse_bytes(BODY.encode())
        assert not truncated_tail(events)
        assert not any(e.truncated for e in events)

    @pytest.mark.parametrize("tail", [b"data: last\n", b"data: last"])
    def test_pending_event_at_eof_is_dispatched_and_flagged(self, tail):
        events = parse_sse_bytes(b"data: first\n\n" + tail)
        assert _data(events) == ["first", "last"]
        assert truncated_tail(events)
        assert events[-1].truncated and not events[0].truncated

    def test_pending_block_without_data_at_eof_is_not_an_event(self):
        events = parse_sse_bytes(b"data: first\n\nevent: message\n")
        assert _data(events) == ["first"]
        assert not truncated_tail(events)

    def test_empty_input(self):
        assert parse_sse_bytes(b"") == []
        assert not truncated_tail([])


def _har(entries):
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def _entry(url, mime, text, encoding=None, status=200):
    content = {"size": len(text), "mimeType": mime, "text": text}
    if encoding:
        content["encoding"] = encoding
    return {
        "startedDateTime": "2025-01-02T03:04:05.678Z",
        "time": 812.5,
        "request": {
            "method": "POST",
            "url": url,
            "postData": {"mimeType": "application/json", "text": '{"model":"auto"}'},
        },
        "response": {"status": status, "content": content},
        "timings": {
            "blocked": 1.5,
            "dns": -1,
            "connect": -1,
            "send": 0.2,
            "wait": 300.1,
            "receive": 510.7,
        },
    }


class TestHar:
    def test_it_reads_sse_entries_with_their_timings(self):
        har = _har(
            [
                _entry("https://x.test/app.js", "application/javascript", "var a;"),
                _entry("https://api.test/v1/responses", "text/event-stream; charset=utf-8", BODY),
            ]
        )
        [entry] = parse_har(har)
        assert entry.url == "https://api.test/v1/responses"
        assert entry.method == "POST"
        assert entry.status == 200
        assert entry.started_at == "2025-01-02T03:04:05.678Z"
        assert entry.time_ms == 812.5
        assert entry.timings == {
            "blocked": 1.5,
            "dns": None,
            "connect": None,
            "send": 0.2,
            "wait": 300.1,
            "receive": 510.7,
        }
        assert entry.request_body == '{"model":"auto"}'
        assert entry.content == BODY.encode()
        assert len(entry.events) == 2
        assert json.loads(entry.events[1].data)["delta"] == "Hi"

    def test_it_decodes_base64_bodies(self):
        raw = BODY.encode() + b"data: \xff\n\n"
        encoded = base64.b64encode(raw).decode()
        [entry] = parse_har(
            _har([_entry("https://a/v1/responses", "text/event-stream", encoded, "base64")])
        )
        assert entry.content == raw
        assert len(entry.events) == 3
        assert entry.events[2].raw == b"\xff"

    def test_it_takes_responses_urls_whatever_the_mime_type(self):
        har = _har([_entry("https://a/v1/responses?x=1", "application/octet-stream", BODY)])
        assert len(parse_har(har)[0].events) == 2

    def test_it_keeps_entries_without_a_body(self):
        entry = _entry("https://a/v1/responses", "text/event-stream", "")
        del entry["response"]["content"]["text"]
        [parsed] = parse_har(_har([entry]))
        assert parsed.content is None
        assert parsed.events == []

    def test_it_rejects_non_har_json(self):
        with pytest.raises(ValueError):
            parse_har(b'{"not": "a har"}')
        with pytest.raises(ValueError):
            parse_har(b"data: x\n\n")


class TestSniff:
    def test_har_by_content(self):
        assert sniff(_har([]), "capture.txt") == "har"
        assert sniff(b"\xef\xbb\xbf  \n{ }", "x") == "har"

    def test_sse_by_content(self):
        assert sniff(BODY.encode(), "capture.har") == "sse"
        assert sniff(b": comment\n", "") == "sse"

    def test_empty_content_falls_back_to_the_file_name(self):
        assert sniff(b"", "network.HAR") == "har"
        assert sniff(b"  ", "stream.sse") == "sse"


class TestInvalidUtf8:
    def test_it_finds_the_first_invalid_sequence_and_its_event(self):
        body = BODY.encode() + "event: message\ndata: Café crème\n\n".encode("latin-1")
        offset, bad = first_invalid_utf8(body)
        assert offset == body.index(b"\xe9") and bad == b"\xe9"
        events = parse_sse_bytes(body)
        assert event_at(events, offset) == 2
        assert bytes(events[2].raw) == "Café crème".encode("latin-1")

    def test_utf8_and_a_bom_are_fine(self):
        assert first_invalid_utf8(b"\xef\xbb\xbf" + "data: Café\n\n".encode()) is None

    def test_bytes_outside_any_event_have_no_event(self):
        body = b": caf\xe9\n\n" + BODY.encode()
        offset, _ = first_invalid_utf8(body)
        # a comment alone in its block dispatches nothing
        assert offset == 5 and event_at(parse_sse_bytes(body), offset) is None
