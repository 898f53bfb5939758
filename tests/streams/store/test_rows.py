"""streams.store.rows: the one home of the stream row. Bounding (every bounded Stream and
Event column, found by walking the models, so a new column is covered without anyone listing
it), finishing
(the same fields live and from the stored events), the orphan sweep's rebuild, and the writer's
isolation of a stream whose rows the database refuses. The live tests record through the
simulator's `long_strings` scenario; all run on SQLite and on PostgreSQL (which, unlike SQLite,
refuses a value longer than its column)."""

import asyncio
import datetime as dt
import json
import socket

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, models

from streams.ingest import importer, recorder
from streams.ingest import writer as writer_module
from streams.models import Event, Finding, Stream
from streams.run import runner
from streams.simulator.scenarios import LONG_FIELD_CHARS, LONG_MODEL_CHARS
from streams.store import event_row, rows
from tests.support import recording
from tests.support.migrations import own_database
from tests.support.recording import record

DEAD_RUNNER = f"{socket.gethostname()}:999999:0123abcd"  # a pid of this host that is not alive


def char_fields(model):
    return [
        f for f in model._meta.concrete_fields if isinstance(f, models.CharField) and f.max_length
    ]


def too_long(limit):
    """A value longer than `limit` characters, with characters beyond the BMP (one character
    each, four bytes in UTF-8: a cut counting bytes or UTF-16 units would be wrong)."""
    return ("é😀x" * limit)[: limit + 37]


def body(*args, **metadata):
    """tests/support/recording.py's request body, paced faster."""
    metadata.setdefault("time_scale", 0.02)
    return recording.body(*args, **metadata)


def stored_events(stream_id):
    return list(
        Event.objects.filter(stream_id=stream_id)
        .order_by("index")
        .values_list(*rows.STORED_EVENT_COLUMNS)
    )


# ---------------------------------------------------------------------------------------------
# Bounding


def test_a_cut_counts_characters_and_never_splits_a_surrogate_pair():
    assert rows.cut("abcdef", 3) == "abc" and rows.cut("abc", 3) == "abc"
    assert rows.cut("😀" * 5, 3) == "😀😀😀"  # one character each, as varchar(n) counts them
    paired = "ab\ud83d\ude00cd"  # a pair as two code points (from surrogatepass text)
    assert rows.cut(paired, 3) == "ab"
    assert rows.cut(paired, 4) == "ab\ud83d\ude00"
    assert rows.cut(paired, 2) == "ab"


def test_the_limits_are_the_models():
    assert rows.STREAM_LIMITS == {f.name: f.max_length for f in char_fields(Stream)}
    assert rows.EVENT_LIMITS == {f.column: f.max_length for f in char_fields(Event)}
    assert {"resolved_model", "upstream_id", "routing_category", "error_code"} <= set(
        rows.STREAM_LIMITS
    )


@pytest.mark.django_db
def test_every_bounded_stream_column_is_bounded_on_create_and_update():
    """Each CharField of Stream (walked, not listed): a value too long for it is cut to its
    max_length by the ORM create (`rows.create`), `rows.bound`, and the recorder's raw UPDATE
    (which PostgreSQL would refuse otherwise)."""
    fields = char_fields(Stream)
    assert len(fields) >= 10
    for field in fields:
        value = too_long(field.max_length)
        expected = value[: field.max_length]
        assert rows.bound({field.name: value}) == {field.name: expected}
        created = rows.create({"input": "hi"}, **{field.name: value})
        assert getattr(Stream.objects.get(pk=created.pk), field.name) == expected, field.name
        row = rows.new_row(None, body())
        update = {field.name: value}
        rows.update_streams({recorder.Recording(row.pk, None, pinned_model=False): update})
        assert getattr(Stream.objects.get(pk=row.pk), field.name) == expected, field.name
        assert update[field.name] == expected  # in place: what is published is what is stored


@pytest.mark.django_db
@pytest.mark.parametrize("columns", [event_row.ROW_COLUMNS, event_row.PROXIED_ROW_COLUMNS], ids=len)
def test_every_bounded_event_column_is_bounded_on_insert(columns):
    """Each CharField of Event the recorder writes (walked, not listed) is cut to its
    max_length by the raw INSERT / COPY; `data` and `raw` (the verbatim event) are not."""
    written = [f for f in char_fields(Event) if f.column in columns]
    assert {f.column for f in written} == set(rows.EVENT_LIMITS)  # every one is written raw
    stream = rows.new_row(None, body())
    data = '{"type":"x","text":"' + "😀" * 20_000 + '"}'
    raw = b"\xff" * 3000
    values = dict(zip(columns, [None] * len(columns), strict=True))
    values.update(
        stream_id=stream.pk, index=0, t_us=1, received_at=dt.datetime.now(dt.UTC), is_json=True
    )
    values.update(data=data, raw=raw, sent_us=2, preamble="")
    for field in written:
        values[field.column] = too_long(field.max_length)
    rows.insert_flat([values[c] for c in columns], offsets=True, columns=columns)
    event = Event.objects.get(stream=stream)
    for field in written:
        expected = too_long(field.max_length)[: field.max_length]
        assert getattr(event, field.attname) == expected, field.name
    assert event.data == data and bytes(event.raw) == raw


@pytest.mark.django_db
def test_a_row_inserted_is_the_row_the_orm_saves():
    """rows.insert (one statement made once) writes every column as Model.save would: a row
    with a value in every column it can, and one with the defaults and no project (the
    user's personal project). Stream has no save receivers that insert would skip."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import post_save, pre_save

    assert not pre_save.has_listeners(Stream) and not post_save.has_listeners(Stream)
    user = get_user_model().objects.create(username="inserter")
    full = {
        "requested_model": "eu-" + "x" * 500,
        "tags": ["a", "b"],
        "session": "s1",
        "format": Stream.Format.CHAT,
        "source": Stream.Source.PROXY,
    }
    for fields in (full, {}):
        made = [rows.new(body(), user=user, **fields) for _ in range(2)]
        made[0].save(force_insert=True)
        rows.insert(made[1])
        assert made[1].pk and made[1].pk != made[0].pk and not made[1]._state.adding
        saved, inserted = (Stream.objects.filter(pk=s.pk).values().get() for s in made)
        for key in ("id", "created_at", "search_derived_ns"):  # (each its own moment)
            saved.pop(key), inserted.pop(key)
        assert inserted == saved
        assert inserted["project_id"] is not None


@pytest.mark.django_db
def test_batches_of_every_size_are_stored_whole_in_order_by_few_statements(monkeypatch):
    """insert_flat stores a batch of any size, every row once and in order, through statements
    of a few sizes only (SQLite: powers of two), so that sqlite3's cache of compiled statements
    keeps them; a statement for each batch size was compiled anew for most batches."""
    stream = rows.new_row(None, body())
    columns = event_row.PROXIED_ROW_COLUMNS
    now = dt.datetime.now(dt.UTC)
    index = 0
    statements = set()
    sizes = [*range(1, 70), 300, rows.SQLITE_ROWS_PER_STATEMENT * 2 + 3]
    real = rows.sqlite_insert

    def seen(n, columns=event_row.ROW_COLUMNS):
        statements.add(n)
        return real(n, columns)

    monkeypatch.setattr(rows, "sqlite_insert", seen)
    for size in sizes:
        values = []
        for i in range(index, index + size):
            event = dict.fromkeys(columns)
            event.update(stream_id=stream.pk, index=i, t_us=i, received_at=now)
            event.update(data=f'{{"i":{i}}}', raw=b"x", is_json=True, sent_us=i)
            event.update(event_name="message", sse_id="", type="i", preamble="")
            values += [event[c] for c in columns]
        rows.insert_flat(values, columns=columns)
        index += size
    stored = list(Event.objects.filter(stream=stream).order_by("id").values_list("index", "data"))
    assert stored == [(i, f'{{"i":{i}}}') for i in range(index)]
    if connection.vendor == "sqlite":
        assert statements <= {1 << k for k in range(11)}, sorted(statements)
        assert len(statements) <= 11


@pytest.mark.django_db
def test_an_import_with_long_values_is_stored_bounded():
    model = "eu-" + "😀" * LONG_MODEL_CHARS
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_" + "r" * 900, "model": model, "status": "in_progress"},
    }
    completed = {
        "type": "response.completed",
        "sequence_number": 1,
        "response": {"id": "resp_" + "r" * 900, "model": model, "status": "completed"},
    }
    name = "ev-" + "é" * 1000
    content = "".join(
        f"event: {name}\nid: {i}{'i' * 900}\ndata: {json.dumps(obj)}\n\n"
        for i, obj in enumerate((created, completed))
    ).encode()
    (stream,) = importer.import_capture(content, "long.sse")
    stream.refresh_from_db()
    assert stream.status == "completed"
    assert stream.resolved_model == model[:100] and stream.requested_model == model[:100]
    assert stream.upstream_id == ("resp_" + "r" * 900)[:200]
    events = list(Event.objects.filter(stream=stream).order_by("index"))
    assert [e.event_name for e in events] == [name[:200]] * 2
    assert [len(e.sse_id) for e in events] == [200, 200]
    assert json.loads(events[0].data) == created  # verbatim


# ---------------------------------------------------------------------------------------------
# Finishing

# A stream that got this far before its process died: created, an item and a part, two deltas.
PARTIAL = [
    (1_000, {"type": "response.created", "sequence_number": 0,
             "response": {"id": "resp_partial", "object": "response", "model": "m-x",
                          "status": "in_progress"}}),
    (2_000, {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
             "item": {"id": "msg_1", "type": "message", "role": "assistant",
                      "status": "in_progress", "content": []}}),
    (3_000, {"type": "response.content_part.added", "sequence_number": 2, "output_index": 0,
             "content_index": 0, "item_id": "msg_1", "part": {"type": "output_text", "text": ""}}),
    (50_000, {"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0,
              "content_index": 0, "item_id": "msg_1", "delta": "Hello"}),
    (60_000, {"type": "response.output_text.delta", "sequence_number": 4, "output_index": 0,
              "content_index": 0, "item_id": "msg_1", "delta": " world"}),
]  # fmt: skip


def _store_partial(stream):
    start = dt.datetime.now(dt.UTC)
    rows.insert_events(
        [
            recording.event_values(stream.pk, i, t, start, json.dumps(obj, separators=(",", ":")))
            for i, (t, obj) in enumerate(PARTIAL)
        ],
        offsets=True,
    )


def _sse_bytes():
    return sum(
        len(f"event: message\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n".encode())
        for _, obj in PARTIAL
    )


def test_finished_takes_the_checker_and_what_the_caller_knows():
    from streams.core.checks import Checker

    checker = Checker(pinned_model=True)
    for i, (t, obj) in enumerate(PARTIAL):
        checker.feed(i, "message", json.dumps(obj), t_us=t)
    checker.close(connection_closed=True)
    now = dt.datetime.now(dt.UTC)
    fields = rows.finished(
        checker,
        error_code="x" * 150,
        error_message="why",
        event_count=5,
        bytes_received=999,
        finished_at=now,
        request_written_us=500,
        first_token_us=50_000,
        closed_us=70_000,
        first_output_us=50_000,
        last_output_us=60_000,
    )
    assert fields["status"] == "truncated"  # no terminal event: the checker decides
    assert fields["output_text"] == "Hello world" and fields["output_deltas"] == 2
    assert fields["upstream_id"] == "resp_partial" and fields["resolved_model"] == "m-x"
    assert fields["error_code"] == "x" * 100 and fields["error_message"] == "why"
    assert fields["findings_count"] == len(checker.violations) >= 1  # missing_terminal
    assert fields["ttft_ms"] == 49.5 and fields["duration_ms"] == 69.5
    assert fields["tokens_per_s"] == 100.0 and fields["inter_token_ms"] == 10.0
    assert (fields["event_count"], fields["bytes_received"], fields["closed_us"]) == (
        5,
        999,
        70_000,
    )
    assert fields["finished_at"] == now
    # no event stream read: the output fields stay as they are
    bare = rows.finished(checker, status="failed", body_read=False, finished_at=now)
    assert "output_text" not in bare and bare["status"] == "failed"


@pytest.mark.django_db
def test_the_sweep_rebuilds_a_dead_processs_stream_from_its_stored_events():
    """kill -9 of the process recording it: the row was `streaming` with only its milestones;
    the sweep ends it `interrupted` with the output, tokens, bytes and findings of what was
    stored (before, it set status, count and end time only: "No output")."""
    stream = rows.new_row(None, body(model="m-x"))
    Stream.objects.filter(pk=stream.pk).update(
        status="streaming", runner=DEAD_RUNNER, request_written_us=500, event_count=1
    )
    _store_partial(stream)
    Finding.objects.create(stream=stream, code="stall", severity="warning")  # re-judged
    assert runner.sweep_orphans() == 1
    stream.refresh_from_db()
    assert (stream.status, stream.error_code) == ("interrupted", "interrupted")
    assert stream.error_message == "the process recording this stream stopped before it ended"
    assert stream.output_text == "Hello world" and stream.output_deltas == 2
    assert stream.parts[0]["parts"][0]["text"] == "Hello world"
    assert stream.event_count == 5 and stream.bytes_received == _sse_bytes()
    assert stream.upstream_id == "resp_partial" and stream.resolved_model == "m-x"
    assert (stream.created_event_us, stream.first_token_us) == (1_000, 50_000)
    assert stream.ttft_ms == 49.5 and stream.tokens_per_s == 100.0
    assert stream.finished_at is not None and stream.terminal_us is None
    # the findings are the checker's over the stored events: no missing_terminal (nobody saw
    # the connection close), and the stale one is gone
    assert stream.findings_count == Finding.objects.filter(stream=stream).count() == 0


@pytest.mark.django_db
def test_cancelling_an_orphan_and_a_stopped_command_keep_what_was_stored():
    orphan = rows.new_row(None, body(model="m-x"))
    Stream.objects.filter(pk=orphan.pk).update(status="streaming", runner=DEAD_RUNNER)
    _store_partial(orphan)
    assert runner._cancel_abandoned(orphan.pk, DEAD_RUNNER)
    mine = rows.new_row(None, body(model="m-x"), claimed=True)
    Stream.objects.filter(pk=mine.pk).update(status="streaming")
    _store_partial(mine)
    assert runner.cancel_unfinished_here("stopped") == 1
    for stream, message in ((orphan, "cancelled; nothing was recording"), (mine, "stopped")):
        stream.refresh_from_db()
        assert stream.status == "cancelled" and stream.error_code == ""
        assert stream.error_message.startswith(message)
        assert stream.output_text == "Hello world" and stream.bytes_received == _sse_bytes()
    # a row that moved on meanwhile is left alone
    assert not runner._cancel_abandoned(orphan.pk, DEAD_RUNNER)


@pytest.mark.django_db
def test_a_rebuild_the_database_refuses_still_ends_the_row(monkeypatch):
    stream = rows.new_row(None, body(model="m-x"))
    Stream.objects.filter(pk=stream.pk).update(status="streaming", runner=DEAD_RUNNER)
    _store_partial(stream)
    real = rows.from_events

    def poisoned(*args, **kwargs):
        rebuilt = real(*args, **kwargs)
        rebuilt.fields["routing_reasoning"] = "\ud800"  # no driver encodes a lone surrogate
        return rebuilt

    monkeypatch.setattr(rows, "from_events", poisoned)
    assert runner.sweep_orphans() == 1
    stream.refresh_from_db()
    assert stream.status == "interrupted" and stream.event_count == 5
    assert stream.output_text == ""  # only status, count, time and error


FIELDS_COMPARED = (
    "status", "output_text", "final_text", "parts", "output_deltas", "bytes_received",
    "event_count", "findings_count", "error_findings", "upstream_id", "resolved_model",
    "routing_category", "routing_source", "routing_reasoning", "error_code", "error_message",
    "ttft_ms", "duration_ms", "tokens_per_s", "inter_token_ms", "created_event_us", "routing_us",
    "first_token_us", "first_tool_call_us", "terminal_us", "closed_us",
)  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scenario", ["", "tools", "error", "gap", "multi_part"])
async def test_the_finished_fields_are_the_same_live_and_from_the_stored_events(upstream, scenario):
    stream, _ = await record(body(scenario))
    events = await sync_to_async(stored_events)(stream.pk)
    rebuilt = rows.from_events(
        stream, events, status=stream.status, connection_closed=True, finished_at=None
    )
    live = {name: getattr(stream, name) for name in FIELDS_COMPARED}
    # (a field `finished` leaves out is one the stream never had: its default)
    default = {name: Stream._meta.get_field(name).get_default() for name in FIELDS_COMPARED}
    again = {name: rebuilt.fields.get(name, default[name]) for name in FIELDS_COMPARED}
    assert again == live
    codes = [f.code async for f in Finding.objects.filter(stream=stream).order_by("id")]
    assert [v.code for v in rebuilt.violations] == codes


# ---------------------------------------------------------------------------------------------
# Writing: a refused stream does not fail the others


def _row(stream_id, index, type_="response.output_text.delta", data="{}"):
    checked = event_row.Checked(type_, index, None, None, True)
    return recording.event_values(stream_id, index, index, dt.datetime.now(dt.UTC), data, checked)


class _Rec:
    def __init__(self, stream_id):
        self.stream_id = stream_id


@pytest.mark.django_db(transaction=True)  # (foreign keys are checked at a real commit)
@pytest.mark.parametrize("poison", ["duplicate", "surrogate", "deleted"])
def test_write_batch_writes_the_others_when_one_streams_rows_are_refused(poison):
    good, bad = rows.new_row(None, body()), rows.new_row(None, body())
    rows.insert_events([_row(bad.pk, 0)], offsets=True)
    bad_rows = [_row(bad.pk, i) for i in (1, 2, 3)]
    if poison == "duplicate":
        bad_rows[1] = _row(bad.pk, 0)  # (stream, index) is unique
    elif poison == "surrogate":
        bad_rows[1] = _row(bad.pk, 2, type_="\ud800")  # a lone surrogate: no driver encodes it
    else:
        Stream.objects.filter(pk=bad.pk).delete()  # (the admin) while it was recorded
    flat = [v for r in [_row(good.pk, 0), *bad_rows, _row(good.pk, 1)] for v in r]
    updates = {_Rec(good.pk): {"status": "streaming"}, _Rec(bad.pk): {"status": "streaming"}}
    findings = [Finding(stream_id=s, code="stall", severity="warning") for s in (good.pk, bad.pk)]
    refused = rows.write_batch(flat, updates, findings, retry_for_s=0)
    assert set(refused) == {bad.pk}
    assert list(Event.objects.filter(stream=good).values_list("index", flat=True)) == [0, 1]
    assert Stream.objects.get(pk=good.pk).status == "streaming"
    assert Finding.objects.filter(stream_id=good.pk).count() == 1
    if poison != "deleted":
        assert Event.objects.filter(stream_id=bad.pk).count() == 1  # only what was there
        assert Stream.objects.get(pk=bad.pk).status == "pending"
        assert not Finding.objects.filter(stream_id=bad.pk).exists()


@pytest.mark.django_db(transaction=True)
async def test_the_writer_isolates_a_refused_stream_and_counts_exactly_what_it_lost(monkeypatch):
    """Two streams in one batch; the database refuses one's rows. The other is stored,
    published and flushed; the offender loses exactly its events of the batch (not published),
    its flush fails, and its final write says how many of the received events are missing
    and why, with `storage_refused`."""
    good = await sync_to_async(rows.new_row)(None, body())
    bad = await sync_to_async(rows.new_row)(None, body())
    await sync_to_async(rows.insert_events)([_row(bad.pk, i) for i in range(3)], offsets=True)
    published = []
    monkeypatch.setattr(
        writer_module.relay, "publish", lambda sid, uid, events, fields=None: published.append(sid)
    )
    writer = writer_module.Writer(max_age_ms=60_000)
    rec_good = recorder.Recording(good.pk, None, pinned_model=False)
    rec_bad = recorder.Recording(bad.pk, None, pinned_model=False)

    async def put(rec, first, n):
        flat = [v for i in range(first, first + n) for v in _row(rec.stream_id, i)]
        await writer.put(rec, flat, [(i, "x", i, i, "{}") for i in range(first, first + n)])

    rec_good.pending_fields["status"] = "streaming"
    rec_bad.pending_fields["status"] = "streaming"
    await put(rec_good, 0, 4)
    await put(rec_bad, 2, 3)  # index 2 is stored already: refused
    await put(rec_good, 4, 2)
    bad_flush = asyncio.ensure_future(writer.flush(rec_bad))
    await asyncio.sleep(0)  # (queued: one commit answers both flushes)
    await writer.flush(rec_good)
    with pytest.raises(rows.StorageUnavailable):
        await bad_flush
    writer.task.cancel()
    assert published == [good.pk]
    assert await Event.objects.filter(stream=good).acount() == 6
    assert (await Stream.objects.aget(pk=good.pk)).status == "streaming"
    assert rec_good.storage_error == "" and rec_good.lost_events == 0
    assert rec_bad.lost_events == 3 and rec_bad.storage_code == "storage_refused"
    assert rec_bad.storage_error.startswith("3 event(s) could not be stored: ")
    assert rec_bad.storage_cause.startswith("refused by the database: ")
    assert "unique" in rec_bad.storage_cause.lower()  # (SQLite's words or PostgreSQL's)
    # what `_finish` writes last for it
    fields = {"status": "failed", "error_code": rec_bad.storage_code}
    await sync_to_async(rows.end_after_loss)(bad.pk, fields, 5, rec_bad.storage_cause)
    bad = await Stream.objects.aget(pk=bad.pk)
    assert (bad.status, bad.error_code, bad.event_count) == ("failed", "storage_refused", 3)
    assert bad.error_message.startswith(
        "2 of 5 received event(s) could not be stored (refused by the database: "
    )


# ---------------------------------------------------------------------------------------------
# Live: values longer than their columns, recorded completely


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", ["auto", "gpt-oss-20b"])
async def test_long_strings_from_the_upstream_record_completely(upstream, model):
    """A 10,000-character model id, 1,000-character response id, routing category and source,
    `event:` names, `id:`s and an event type: the stream completes (on PostgreSQL the write
    was refused and the stream failed before), every event is stored with its data verbatim,
    and the bounded columns hold their first max_length characters."""
    stream, outcome = await record(body("long_strings", model=model))
    assert stream.status == "completed", (stream.error_code, stream.error_message)
    assert outcome.error_code == ""
    events = await sync_to_async(stored_events)(stream.pk)
    created = json.loads(events[0][3])["response"]
    assert len(created["id"]) == LONG_FIELD_CHARS
    sim = await sync_to_async(upstream.log)(created["id"])
    sent = sim["events"]
    assert stream.event_count == len(events) == len(sent) > 10
    assert [e[3] for e in events] == [s["data"] for s in sent]  # data verbatim
    limits = rows.EVENT_LIMITS
    assert [e[1] for e in events] == [s["event"][: limits["event_name"]] for s in sent]
    assert [e[2] for e in events] == [s["id"][: limits["sse_id"]] for s in sent]
    types = await sync_to_async(list)(
        Event.objects.filter(stream=stream).order_by("index").values_list("type", flat=True)
    )
    assert types == [s["type"][: limits["type"]] for s in sent]
    assert max(map(len, types)) == limits["type"]
    assert all(len(s["event"]) == len(s["id"]) == LONG_FIELD_CHARS for s in sent)
    # the row: every bounded column cut, the text columns whole
    long_model = sim["resolved_model"]
    assert len(long_model) == LONG_MODEL_CHARS
    assert stream.resolved_model == long_model[:100]
    assert stream.upstream_id == created["id"][:200]
    assert len(stream.content_type) == 200 and stream.content_type.startswith("text/event-stream")
    if model == "auto":
        assert stream.routing_category == sim["routing"]["category"][:50]
        assert stream.routing_source == sim["routing"]["source"][:50]
        assert stream.routing_reasoning == sim["routing"]["reasoning"]
    assert stream.output_text and stream.output_text == stream.final_text
    assert stream.ttft_ms > 0 and stream.output_deltas > 0
    codes = {f.code async for f in Finding.objects.filter(stream=stream)}
    assert codes == {"event_name_not_message", "unknown_event_type"}


@pytest.mark.django_db(transaction=True)
async def test_a_long_strings_stream_beside_normal_ones_leaves_them_alone(upstream):
    results = await asyncio.gather(
        record(body("long_strings")), *(record(body(prompt=f"q{i}")) for i in range(5))
    )
    assert [s.status for s, _ in results] == ["completed"] * 6
    for stream, _ in results:
        assert await Event.objects.filter(stream=stream).acount() == stream.event_count > 0


def test_a_model_that_is_not_a_string_is_no_model_and_the_body_keeps_it():
    from streams.store import rows

    for model in (["x"], {"a": 1}, 5, None):
        stream = rows.new({"model": model, "input": "hi", "metadata": {"scenario": ["s"]}})
        assert (stream.requested_model, stream.scenario) == ("", "")
        assert stream.request_body["model"] == model


@pytest.mark.django_db
def test_integers_no_column_holds_are_stored_as_none_and_found(db):
    """An SSE `sequence_number` of 2**70 (or an output_index beyond 32 bits) crashed the import
    thread and would fail a live batch: the event is stored whole, the column says nothing, the
    checker reports the number it could not take."""
    import json as _json

    from streams.ingest.importer import import_capture
    from streams.models import Event, Finding

    events = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}},
        {"type": "response.output_text.delta", "sequence_number": 2**70, "output_index": 2**40,
         "content_index": 0, "delta": "Hoi"},
        {"type": "response.completed", "sequence_number": 2, "response": {"id": "r"}},
    ]  # fmt: skip
    content = b"".join(b"data: " + _json.dumps(e).encode() + b"\n\n" for e in events)
    [stream] = import_capture(content, "big-numbers.sse")
    stored = list(Event.objects.filter(stream=stream).order_by("index"))
    assert len(stored) == 3 and str(2**70) in stored[1].data
    assert (stored[1].sequence_number, stored[1].output_index) == (None, None)
    assert Finding.objects.filter(stream=stream, code="missing_sequence_number").exists()


@pytest.mark.django_db
def test_warning_findings_are_counted_live_and_backfilled_by_the_migration():
    from dashboard.queries import stream_list

    with own_database() as db:
        old = db.forward(("streams", "0009_sealed_secrets"))
        OldStream, OldFinding = (old.get_model("streams", name) for name in ("Stream", "Finding"))

        def stream_with(*severities):
            s = OldStream.objects.create(
                findings_count=len(severities), error_findings=severities.count("error")
            )
            for sev in severities:
                OldFinding.objects.create(stream=s, code="x", severity=sev)
            return s.pk

        warned, errored, noted = (
            stream_with("warning", "warning", "info"),
            stream_with("error"),
            stream_with("info"),
        )
        # the migration's backfill (0010), from the findings stored
        new = db.forward(("streams", "0010_warning_findings"))
        counts = ("findings_count", "error_findings", "warning_findings")
        migrated = list(new.get_model("streams", "Stream").objects.values("pk", *counts))
    assert {s["pk"]: s["warning_findings"] for s in migrated} == {warned: 2, errored: 0, noted: 0}

    # the list's filter 'with warnings or errors' reads the rows as the migration left them
    for fields in migrated:
        Stream.objects.create(**fields)

    class Staff:
        is_staff, pk, is_authenticated, is_active = True, None, True, True

    page = stream_list.stream_page(Staff(), {"findings": "warnings"})
    assert {s.pk for s in page.streams} == {warned, errored}
