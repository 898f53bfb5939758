"""The read-side queries of the stream pages (dashboard/queries/): keyset pages and filters
of the list, event windows (a summary as the table shows it), output preparation, chart and
replay data. (The per-type summaries themselves: tests/streams/core/test_summaries.py.)"""

import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.queries import output, stream_detail, stream_list, timing
from streams.core import summaries
from streams.models import Stream
from streams.store import known_secrets, search
from tests.support.recording import recorded, text_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("owner")


@pytest.fixture
def stranger():
    return get_user_model().objects.create_user("stranger")


@pytest.fixture
def staff():
    return get_user_model().objects.create_user("staff", is_staff=True)


def many(user, n, **fields):
    streams = Stream.objects.bulk_create(
        [Stream(user=user, prompt=f"prompt {i}", **fields) for i in range(n)]
    )
    return sorted(streams, key=lambda s: s.pk)


def ids(page):
    return [s.pk for s in page.streams]


# ---- the list --------------------------------------------------------------------------------


class TestStreamPage:
    def test_pages_cover_every_stream_once_newest_first_with_ties(self, owner):
        streams = many(owner, 23)
        # Equal timestamps across page boundaries: the id breaks the tie.
        same = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        Stream.objects.filter(pk__in=[s.pk for s in streams[5:15]]).update(created_at=same)
        Stream.objects.filter(pk__in=[s.pk for s in streams[:5]]).update(
            created_at=same - dt.timedelta(hours=1)
        )
        expected = [
            s.pk
            for s in sorted(
                Stream.objects.filter(user=owner), key=lambda s: (s.created_at, s.pk), reverse=True
            )
        ]
        seen, before = [], None
        while True:
            page = stream_list.stream_page(owner, {}, before=before, limit=4)
            seen += ids(page)
            if page.older is None:
                break
            before = page.older
        assert seen == expected

        # and back up through the newer pages
        back, after = [], seen[-1]
        while after:
            page = stream_list.stream_page(owner, {}, after=after, limit=4)
            back = ids(page) + back
            after = page.newer
        assert back + [seen[-1]] == expected

    def test_the_first_page_has_no_newer_cursor(self, owner):
        many(owner, 3)
        page = stream_list.stream_page(owner, {}, limit=2)
        assert page.newer is None and page.older is not None
        assert page.newest_id == max(ids(page))

    def test_a_page_past_the_newest_knows_it(self, owner):
        streams = many(owner, 3)
        page = stream_list.stream_page(owner, {}, after=streams[0].pk, limit=5)
        assert ids(page) == [streams[2].pk, streams[1].pk]
        assert page.newer is None and page.older == streams[1].pk

    def test_users_see_their_own_streams_and_staff_all(self, owner, stranger, staff):
        mine = many(owner, 2)
        theirs = many(stranger, 1)
        assert set(ids(stream_list.stream_page(owner, {}))) == {s.pk for s in mine}
        assert ids(stream_list.stream_page(stranger, {})) == [theirs[0].pk]
        assert len(ids(stream_list.stream_page(staff, {}))) == 3

    def test_a_cursor_of_someone_elses_stream_is_ignored(self, owner, stranger):
        mine = many(owner, 2)
        theirs = many(stranger, 1)
        page = stream_list.stream_page(owner, {}, before=theirs[0].pk)
        assert set(ids(page)) == {s.pk for s in mine}

    def test_it_never_counts_nor_offsets(self, owner):
        many(owner, 30)
        with CaptureQueriesContext(connection) as ctx:
            page = stream_list.stream_page(owner, {"status": "pending"}, limit=10)
            stream_list.stream_page(owner, {}, before=page.older, limit=10)
            stream_list.stream_page(owner, {}, after=page.older, limit=10)
        sql = " ".join(q["sql"].upper() for q in ctx.captured_queries)
        assert "COUNT(" not in sql and "OFFSET" not in sql

    @pytest.mark.parametrize(
        "filters,expected",
        [
            ({"status": "failed"}, {"failed"}),
            ({"source": "import"}, {"imported"}),
            ({"requested": "gpt-x"}, {"pinned"}),
            ({"resolved": "small"}, {"routed"}),
            ({"findings": "any"}, {"failed", "warned"}),
            ({"findings": "errors"}, {"failed"}),
            ({"findings": "none"}, {"imported", "pinned", "routed"}),
            ({"q": "utrecht"}, {"routed"}),
            ({"q": "resp_abc"}, {"pinned"}),
        ],
    )
    def test_filters(self, owner, filters, expected):
        rows = {
            "failed": dict(status="failed", findings_count=2, error_findings=1),
            "warned": dict(status="completed", findings_count=1),
            "imported": dict(source="import"),
            "pinned": dict(requested_model="gpt-x", upstream_id="resp_abc"),
            "routed": dict(resolved_model="small", prompt="Tell me about Utrecht"),
        }
        by_pk = {Stream.objects.create(user=owner, **f).pk: name for name, f in rows.items()}
        search.maintain()  # (made past the rows' home: searchable once derived, as a server does)
        page = stream_list.stream_page(owner, {k: filters.get(k) for k in filters})
        assert {by_pk[pk] for pk in ids(page)} == expected

    def test_an_upstream_id_search_keeps_to_visible_streams(self, owner, stranger):
        Stream.objects.create(user=stranger, upstream_id="resp_x")
        mine = Stream.objects.create(user=owner, prompt="about resp_x")
        search.maintain()  # (made past the rows' home: searchable once derived)
        # what the owner sees is what they would see if the stranger's id did not exist: its
        # absence from the page must not confirm it
        assert ids(stream_list.stream_page(owner, {"q": "resp_x"})) == [mine.pk]
        assert ids(stream_list.stream_page(owner, {"q": "about resp_x"})) == [mine.pk]
        theirs = Stream.objects.create(user=owner, upstream_id="resp_x")
        assert ids(stream_list.stream_page(owner, {"q": "resp_x"})) == [theirs.pk]

    def test_search_by_id_and_time_range(self, owner):
        old, new = many(owner, 2)
        Stream.objects.filter(pk=old.pk).update(
            created_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
        )
        assert ids(stream_list.stream_page(owner, {"q": f"#{old.pk}"})) == [old.pk]
        since = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
        assert ids(stream_list.stream_page(owner, {"since": since})) == [new.pk]
        assert ids(stream_list.stream_page(owner, {"until": since})) == [old.pk]

    def test_model_names_are_the_users_own(self, owner, stranger):
        Stream.objects.create(user=owner, requested_model="auto", resolved_model="small")
        Stream.objects.create(user=stranger, requested_model="secret-model")
        assert stream_list.model_names(owner) == ["auto", "small"]


# ---- the timeline --------------------------------------------------------------------------


class TestEventWindow:
    @pytest.fixture
    def stream(self, owner):
        deltas = [f"w{i} " for i in range(495)]
        return recorded(owner, text_events(*deltas))  # 3 + 495 + 3 = 501 events

    def test_the_first_window(self, stream):
        w = stream_detail.event_window(stream, limit=200)
        assert [r["index"] for r in w.rows] == list(range(200))
        assert (w.first, w.last, w.has_before, w.has_after) == (0, 199, False, True)
        assert w.rows[5]["summary"] == '"w2 " [0:0]'
        assert w.rows[5]["t_ms"] == 105.0 and w.rows[5]["gap_ms"] == 1.0
        assert w.rows[0]["gap_ms"] is None

    def test_after_before_tail(self, stream):
        w = stream_detail.event_window(stream, after=199, limit=200)
        assert (w.first, w.last, w.has_before, w.has_after) == (200, 399, True, True)
        w = stream_detail.event_window(stream, before=200, limit=150)
        assert (w.first, w.last, w.has_before, w.has_after) == (50, 199, True, True)
        w = stream_detail.event_window(stream, tail=True, limit=200)
        assert (w.first, w.last, w.has_before, w.has_after) == (301, 500, True, False)
        assert w.rows[-1]["type"] == "response.completed"

    def test_a_jump_shows_context_above_and_ignores_the_type_filter(self, stream):
        w = stream_detail.event_window(stream, at=300, type="response.completed", limit=200)
        assert w.first == 300 - stream_detail.JUMP_CONTEXT and w.at == 300 and w.type == ""

    def test_a_jump_past_the_end_shows_the_end(self, stream):
        w = stream_detail.event_window(stream, at=10_000, limit=50)
        assert (w.first, w.last, w.at) == (451, 500, None)

    def test_a_type_filter_pages_by_index(self, stream):
        w = stream_detail.event_window(stream, type="response.output_text.delta", limit=10)
        assert [r["index"] for r in w.rows] == list(range(3, 13))
        assert not w.has_before and w.has_after
        w = stream_detail.event_window(stream, type="response.completed", limit=10)
        assert [r["index"] for r in w.rows] == [500] and not w.has_before

    def test_rows_carry_their_findings(self, owner):
        events = text_events("a", "b", "c")
        events[4]["sequence_number"] = 40  # a gap before event 4
        stream = recorded(owner, events)
        rows = {r["index"]: r for r in stream_detail.event_window(stream).rows}
        assert rows[4]["codes"] == ["sequence_gap"] and rows[4]["severity"] == "error"
        assert rows[3]["codes"] == []


class TestSummaries:
    def test_the_upstream_key_never_shows(self, owner, settings):
        # The summary clips the key (verbatim rows, clipped); what leaves through the egress
        # gate holds no piece of it of 8 or more characters.
        settings.UPSTREAM_API_KEY = "sk-secret-123456"
        filler = "x" * (summaries.SUMMARY_MAX - 20)
        stream = recorded(
            owner, [{"type": "error", "message": f"{filler} bad key sk-secret-123456"}]
        )
        [row] = stream_detail.event_window(stream).rows
        assert row["summary"].endswith("sk-secret-…")  # clipped mid-key
        shown = known_secrets.redact(row["summary"])
        assert "sk-secr" not in shown and shown.endswith("[redacted]…")


class TestOutputItems:
    def test_a_rewrite_keeps_streamed_and_final_with_a_word_diff(self, owner):
        stream = recorded(owner, text_events("teh ", "cat", rewrite_to="the cat"))
        [item] = output.output_blocks(stream)
        [part] = item["parts"]
        assert part["text"] == "the cat" and part["streamed"] == "teh cat"
        assert part["diff"] == [("del", "teh"), ("ins", "the"), ("same", " cat")]

    def test_tool_calls_pretty_print_and_failures_stand_out(self):
        parts = [
            {
                "output_index": 0,
                "type": "function_call",
                "name": "f",
                "call_id": "c",
                "arguments": '{"a":1}',
                "status": "failed",
                "output": "timed out",
            },  # fmt: skip
            {
                "output_index": 1,
                "type": "function_call",
                "name": "g",
                "arguments": "{oops",
                "status": "completed",
                "output": '[{"x": 1}]',
            },  # fmt: skip
        ]
        failed, ok = output.output_blocks(Stream(parts=parts))
        assert (
            failed["kind"] == "tool"
            and failed["failed"]
            and failed["arguments"] == '{\n  "a": 1\n}'
        )
        assert failed["output"] == "timed out" and not failed["output_json"]
        assert not ok["failed"] and ok["arguments"] == "{oops" and not ok["arguments_json"]
        assert ok["output"] == '[\n  {\n    "x": 1\n  }\n]'

    def test_refusal_reasoning_and_unknown_items(self):
        parts = [
            {"output_index": 0, "type": "reasoning", "summary": ["thinking"]},
            {
                "output_index": 1,
                "type": "message",
                "parts": [{"content_index": 0, "type": "refusal", "text": "No.", "done": True}],
            },  # fmt: skip
            {"output_index": 2, "type": "web_search_call", "item": {"status": "completed"}},
        ]
        reasoning, message, other = output.output_blocks(Stream(parts=parts))
        assert reasoning["summary"] == ["thinking"]
        assert message["parts"][0]["type"] == "refusal" and "diff" not in message["parts"][0]
        assert '"status": "completed"' in other["json"]


class TestTimeline:
    def test_waterfall_in_time_order_on_one_scale(self):
        stream = Stream(
            connected_us=1_000,
            request_written_us=2_000,
            headers_us=50_000,
            created_event_us=60_000,
            first_token_us=250_000,
            terminal_us=900_000,
            closed_us=1_000_000,
        )
        wf = stream_detail.waterfall(stream)
        names = [r["name"] for r in wf["rows"]]
        assert names == [
            "connected", "request_written", "headers", "created_event", "first_token",
            "terminal", "closed",
        ]  # fmt: skip
        terminal = wf["rows"][5]
        assert (terminal["left"], terminal["width"]) == (25.0, 65.0)
        assert terminal["duration_ms"] == 650.0
        assert [s["label"] for s in wf["spans"]] == ["TTFT", "Generation"]
        assert wf["spans"][0]["ms"] == 248.0
        assert [t["label"] for t in wf["ticks"]] == [
            "0 ms",
            "250 ms",
            "500 ms",
            "750 ms",
            "1000 ms",
        ]

    def test_attempts_link_stall_retries(self, owner, stranger):
        first = Stream.objects.create(user=owner, status="stalled")
        second = Stream.objects.create(user=owner, first_attempt=first, attempt=2)
        chain = stream_detail.attempts(owner, second)
        assert [(a["id"], a["status"]) for a in chain] == [
            (first.pk, "stalled"),
            (second.pk, "pending"),
        ]
        assert stream_detail.attempts(owner, first) == chain
        assert stream_detail.attempts(stranger, first) == []

    def test_stream_timeline_is_a_few_queries(self, owner):
        stream = recorded(owner, text_events(*"abcdefgh"))
        with CaptureQueriesContext(connection) as ctx:
            timeline = stream_detail.stream_timeline(owner, stream)
        assert len(ctx.captured_queries) <= 12
        assert timeline["items"][0]["parts"][0]["text"] == "abcdefgh"
        assert len(timeline["events"].rows) == 14


class TestChartAndReplay:
    def test_timing_series_is_compact(self, owner):
        times = [100_000, 101_000, 103_000, 3_103_000, 3_103_500]
        events = text_events("a", "b")[:5]
        stream = recorded(owner, events, times=times)
        data = timing.timing_series(stream)
        assert data["gap_us"] == [100_000, 1000, 2000, 3_000_000, 500]
        assert "index" not in data and data["first"] == 0 and data["count"] == 5
        types = [data["types"][k] for k in data["kind"]]
        assert types[3] == "response.output_text.delta"
        assert data["output_types"] == ["response.output_text.delta"]
        assert data["stats"]["max_ms"] == 3000.0
        assert data["stats"]["longest"][0] == {"index": 3, "gap_ms": 3000.0}
        assert data["marks"] == [{"event_index": 3, "code": "stall"}]  # the checker's, 2 s

    def test_indexes_are_sent_when_they_have_holes(self, owner):
        stream = recorded(owner, text_events("a", "b"))
        stream.events.filter(index=4).delete()
        data = timing.timing_series(stream)
        assert data["index"] == [0, 1, 2, 3, 5, 6, 7]
        assert data["gap_us"][4] == 2000 and len(data["gap_us"]) == 7

    def test_untimed_streams_say_so(self, owner):
        events = text_events("a")
        stream = recorded(owner, events, times=[None] * len(events))
        data = timing.timing_series(stream)
        assert data["timed"] is False and "gap_us" not in data

    def test_replay_leaves_out_duplicates(self, owner):
        events = text_events("a", "b")
        events.insert(5, dict(events[4]))  # "b" delivered twice
        stream = recorded(owner, events)
        assert stream.output_text == "ab"
        deltas = [e[2] for e in timing.replay_events(stream)["events"] if len(e) == 3]
        assert deltas == ["a", "b"]

    def test_replay_events_are_compact_and_rebuild_the_text(self, owner):
        stream = recorded(owner, text_events("Hel", "lo"))
        data = timing.replay_events(stream)
        assert data["targets"] == [["response.output_text.delta", 0, 0, None]]
        deltas = [e for e in data["events"] if len(e) == 3]
        assert [e[2] for e in deltas] == ["Hel", "lo"] and deltas[0][0] == 103_000
        others = [e[1]["type"] for e in data["events"] if len(e) == 2]
        assert others == [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.done",
            "response.output_item.done",
        ]


class TestEventDetail:
    def test_pretty_and_verbatim(self, owner):
        stream = recorded(owner, text_events("<b>x</b>"))
        event = stream_detail.event_detail(stream, 3)
        assert event["verbatim"] == (
            '{"type":"response.output_text.delta","output_index":0,"content_index":0,'
            '"delta":"<b>x</b>","sequence_number":3}'
        )
        assert json.loads(event["pretty"])["delta"] == "<b>x</b>"
        assert event["pretty"].startswith('{\n  "type"')
        assert stream_detail.event_detail(stream, 999) is None

    def test_invalid_json_has_no_pretty_view(self, owner):
        events = text_events("a")
        events.insert(4, "{not json")
        stream = recorded(owner, events)
        event = stream_detail.event_detail(stream, 4)
        assert event["pretty"] is None and event["verbatim"] == "{not json"
        assert [f["code"] for f in event["findings"]] == ["invalid_json"]
