"""Finished streams packed into blocks (streams/store/compact.py): every reader of events gives
the same before and after, exports are byte-identical, a re-check finds the same, a crash in
the middle loses nothing, a reader racing the pack reads each event once."""

import contextlib
import dataclasses
import datetime as dt

import pytest
from django.db import connection, models

from dashboard.queries import stream_detail, timing
from streams import fields
from streams.ingest.importer import import_capture
from streams.models import Event, EventBlock, Finding, Stream
from streams.serve import export
from streams.store import compact, event_row, rows
from streams.store import events as stored_events
from tests.support.paths import CAPTURES, FIXTURES

pytestmark = pytest.mark.django_db

CAPTURE_FILES = sorted(p.name for p in CAPTURES.glob("*.sse"))
BLOCKS = FIXTURES / "blocks"  # frozen blocks of earlier versions
PAST = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)  # every ended stream is past its grace


def everything(stream):
    """What every consumer reads of the stream's events."""
    stream = Stream.objects.get(pk=stream.pk)
    as_recorded = Stream.objects.get(pk=stream.pk)
    as_recorded.source = Stream.Source.PROXY  # the .sse of events, not the import's capture
    window = stream_detail.event_window(stream, limit=50)
    return {
        "sse": b"".join(export.iter_sse(as_recorded)),
        "json": "".join(export.iter_document(stream)),
        "window": dataclasses.asdict(window),
        "tail": dataclasses.asdict(stream_detail.event_window(stream, tail=True, limit=7)),
        "before": dataclasses.asdict(stream_detail.event_window(stream, before=30, limit=9)),
        "typed": dataclasses.asdict(
            stream_detail.event_window(stream, type="response.output_text.delta", limit=5)
        ),
        "at": dataclasses.asdict(stream_detail.event_window(stream, at=12, limit=5)),
        "detail": stream_detail.event_detail(stream, 3),
        "types": stream_detail.type_counts(stream),
        "count": stream_detail.stored_event_count(stream),
        "timing": timing.timing_series(stream),
        "replay": timing.replay_events(stream),
        "terminal": timing.terminal_index(stream),
        "page": stored_events.read(stream.pk, ("index", "data"), after=5, limit=10),
        "last": stored_events.last_data([stream.pk]),
    }


def findings(stream):
    rows.end_from_stored(stream.pk, Stream.objects.get(pk=stream.pk).status)
    columns = ("code", "severity", "event_index", "expected", "got", "detail")
    return sorted(Finding.objects.filter(stream_id=stream.pk).values_list(*columns), key=repr)


def test_every_column_of_an_event_is_packed():
    """Derived from the row's columns (streams/store/event_row.py), each with a kind."""
    assert set(compact.columns()) == compact.packed_columns()
    assert len(compact.columns()) == len(compact.packed_columns())


@pytest.mark.parametrize("name", CAPTURE_FILES)
def test_a_packed_capture_reads_as_before(name, monkeypatch):
    monkeypatch.setattr(compact, "BLOCK", 16)  # several blocks even of a short capture
    [stream] = import_capture((CAPTURES / name).read_bytes(), name)
    found = findings(stream)
    before = everything(stream)
    n = Event.objects.filter(stream_id=stream.pk).count()
    assert n > 0

    assert compact.pack(stream.pk, now=PAST) == n

    assert not Event.objects.filter(stream_id=stream.pk).exists()
    assert EventBlock.objects.filter(stream_id=stream.pk).count() == -(-n // 16)
    after = everything(stream)
    for key, value in before.items():
        assert after[key] == value, key
    assert findings(stream) == found
    assert compact.pack(stream.pk, now=PAST) == 0  # packed once


def test_a_stream_not_ended_or_within_its_grace_is_left_as_rows():
    [stream] = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "a.sse")
    assert compact.pack(stream.pk) == 0  # it ended just now: viewers may still catch up
    Stream.objects.filter(pk=stream.pk).update(status=Stream.Status.STREAMING)
    assert compact.pack(stream.pk, now=PAST) == 0
    assert compact.due(now=PAST) == []
    Stream.objects.filter(pk=stream.pk).update(status=Stream.Status.COMPLETED)
    assert compact.due(now=PAST) == [stream.pk]


def test_a_crash_while_packing_loses_nothing(monkeypatch):
    monkeypatch.setattr(compact, "BLOCK", 300)
    [stream] = import_capture((CAPTURES / "openai_text_long_722ev.sse").read_bytes(), "l.sse")
    before = everything(stream)
    written = []
    real = compact._write

    def write_then_die(stream_id, batch, *args):
        last_us = real(stream_id, batch, *args)
        written.append(len(batch))
        if len(written) == 2:
            raise KeyboardInterrupt  # the process stopped between two blocks
        return last_us

    monkeypatch.setattr(compact, "_write", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        compact.pack(stream.pk, now=PAST)
    assert written == [300, 300]
    assert not EventBlock.objects.filter(stream_id=stream.pk).exists()
    assert everything(stream) == before
    monkeypatch.setattr(compact, "_write", real)
    assert compact.pack(stream.pk, now=PAST) == 722
    assert EventBlock.objects.filter(stream_id=stream.pk).count() == 3
    assert everything(stream) == before


def test_a_reader_racing_the_pack_reads_every_event_once(monkeypatch):
    """The pack commits after the reader chose to read rows and before the rows' query runs:
    it finds none, and the blocks give every event, once."""
    [stream] = import_capture((CAPTURES / "openai_text_long_722ev.sse").read_bytes(), "r.sse")
    expected = [i for (i,) in stored_events.read(stream.pk, ("index",))]
    real = stored_events._filtered

    def rows_then_pack(stream_id, *args):
        qs = real(stream_id, *args)  # (lazy: runs when read)
        compact.pack(stream_id, now=PAST)
        return qs

    monkeypatch.setattr(stored_events, "_filtered", rows_then_pack)
    got = [i for (i,) in stored_events.read(stream.pk, ("index",))]
    assert got == expected == list(range(722))
    page = stored_events.read(stream.pk, ("index",), after=99, limit=5)
    assert page == [(100,), (101,), (102,), (103,), (104,)]
    assert not Event.objects.filter(stream_id=stream.pk).exists()


def test_packing_compresses_recorded_events():
    [stream] = import_capture((CAPTURES / "openai_text_long_722ev.sse").read_bytes(), "c.sse")
    stored = list(stored_events.read(stream.pk, ("data",)))
    raw = sum(len(d.encode()) for (d,) in stored)
    compact.pack(stream.pk, now=PAST)
    packed = sum(len(p) for p in EventBlock.objects.values_list("payload", flat=True))
    assert packed * 4 < raw, (packed, raw)


def test_retention_deletes_a_packed_streams_events():
    from streams.store import retention

    [stream] = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "p.sse")
    n = Event.objects.filter(stream_id=stream.pk).count()
    compact.pack(stream.pk, now=PAST)
    retention_due = Stream.objects.filter(pk=stream.pk)
    assert compact.held(retention_due) == n  # what a dry run counts
    assert retention._delete_events([stream.pk]) == n
    assert not EventBlock.objects.filter(stream_id=stream.pk).exists()
    assert stored_events.count(stream.pk) == 0


KILLED_MID_PACK = """
import sys, time
import django
django.setup()
from streams.store import compact
compact.BLOCK = 100
real = compact._write
def write_then_hang(stream_id, *args):
    real(stream_id, *args)
    print("wrote", flush=True)
    time.sleep(60)
compact._write = write_then_hang
compact.pack(int(sys.argv[1]), grace_s=-3600)
"""


@pytest.mark.django_db(transaction=True)
def test_a_process_killed_mid_pack_loses_nothing():
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO, database_url

    [stream] = import_capture((CAPTURES / "openai_text_long_722ev.sse").read_bytes(), "k.sse")
    before = everything(stream)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "DATABASE_URL": database_url(),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_PACK, str(stream.pk)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = proc.stdout.readline()
        assert line == b"wrote\n", proc.stderr.read().decode()[-2000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert not EventBlock.objects.filter(stream_id=stream.pk).exists()
    assert Event.objects.filter(stream_id=stream.pk).count() == 722
    assert everything(stream) == before
    assert compact.pack(stream.pk, now=PAST) == 722  # the next sweep finishes it
    assert everything(stream) == before


def test_a_secret_in_a_packed_stream_leaves_through_no_page_export_or_api(settings):
    """The blocks keep the upstream's bytes verbatim, the key it echoed too; every way out
    still goes through the egress gate."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from tests.support.captures import text_capture
    from tests.support.hostile import KEY, copies

    settings.UPSTREAM_API_KEY = KEY
    user = User.objects.create_user("packer", password="x")
    [stream] = import_capture(text_capture(f"echoed {KEY} back"), "s.sse", user=user)
    Stream.objects.filter(pk=stream.pk).update(source=Stream.Source.LIVE)  # .sse from events
    n = compact.pack(stream.pk, now=PAST)
    assert n > 3
    packed = [compact.decode(p) for p in EventBlock.objects.values_list("payload", flat=True)]
    assert any(KEY in d for block in packed for d in block["data"])  # stored as received

    client = Client()
    client.force_login(user)
    names = ["stream_detail", "stream_events", "stream_timing", "stream_replay", "stream_sse"]
    urls = [reverse(name, args=[stream.pk]) for name in [*names, "stream_json"]]
    urls += [reverse("stream_event", args=[stream.pk, i]) for i in range(n)]
    urls.append(f"/api/streams/{stream.pk}/events/")
    for url in urls:
        r = client.get(url)
        body = b"".join(r.streaming_content) if r.streaming else r.content
        assert r.status_code == 200, url
        assert copies(body.decode()) == 0, url
    assert b"[redacted]" in body  # (the API's events: the echo was there to redact)


def test_comments_between_events_come_back_from_a_packed_stream(monkeypatch):
    monkeypatch.setattr(compact, "BLOCK", 4)
    content = (CAPTURES / "chat" / "comments.sse").read_bytes()
    assert b": OPENROUTER PROCESSING\n\n" in content
    [stream] = import_capture(content, "comments.sse")
    as_recorded = Stream.objects.get(pk=stream.pk)
    as_recorded.source = Stream.Source.PROXY  # the .sse of events, not the import's capture
    assert b"".join(export.iter_sse(as_recorded)) == content
    assert compact.pack(stream.pk, now=PAST) > 0
    assert b"".join(export.iter_sse(as_recorded)) == content


def test_due_streams_are_a_range_of_the_unpacked_index_and_a_packed_one_leaves_it():
    from django.db import connection

    [recorded] = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "d.sse")
    empty = Stream.objects.create(status="failed", finished_at=PAST - dt.timedelta(hours=2))
    running = Stream.objects.create(status="streaming")
    # a history of packed streams, which the look for due ones must not read
    Stream.objects.bulk_create(
        [Stream(status="completed", events_packed_at=PAST) for _ in range(2000)]
    )
    query = compact._due(grace_s=-3600).order_by("pk").values("pk")[:20]
    if connection.vendor == "postgresql":
        # Whether the index serves the query, not which plan PostgreSQL costs lower on a
        # near-empty table that earlier tests' rolled-back rows bloated (CI saw a Seq Scan
        # of 2,003 rows win): without a Seq Scan to fall back on, the planner can only use
        # an index whose predicate the query implies.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            plan = query.explain()
            cursor.execute("SET LOCAL enable_seqscan = on")
    else:
        plan = query.explain()
    assert "stream_unpacked" in plan, plan

    n = Event.objects.filter(stream_id=recorded.pk).count()
    assert compact.due(grace_s=-3600) == [recorded.pk, empty.pk]
    assert compact.sweep(limit=None, grace_s=-3600) == {"streams": 1, "events": n}
    assert compact.due(grace_s=-3600) == []  # the empty one was looked at once, and marked
    assert Stream.objects.get(pk=empty.pk).events_packed_at is not None
    assert Stream.objects.get(pk=running.pk).events_packed_at is None


# ---------------------------------------------------------------------------------------------
# The block's format: blocks written by earlier versions read, and a new column of the event
# needs nothing of compact.py.

# Rows of every kind a block holds, edge values included (None in each nullable column, a lone
# surrogate, undecodable bytes, a negative delta, an integer beyond 32 bits).
FROZEN_ROWS = [
    {
        "index": 0,
        "t_us": 0,
        "sequence_number": 0,
        "output_index": None,
        "content_index": None,
        "sent_us": None,
        "received_at": dt.datetime(2026, 12, 5, 17, 0, 0, 123456, tzinfo=dt.UTC),
        "event_name": "response.created",
        "sse_id": "",
        "type": "response.created",
        "data": '{"type":"response.created"}',
        "preamble": ": OPENROUTER PROCESSING\n\n",
        "is_json": True,
        "raw": None,
    },
    {
        "index": 1,
        "t_us": 1500,
        "sequence_number": 1,
        "output_index": 0,
        "content_index": 0,
        "sent_us": 1700,
        "received_at": dt.datetime(2026, 12, 5, 17, 0, 0, 124956, tzinfo=dt.UTC),
        "event_name": "",
        "sse_id": "7",
        "type": "response.output_text.delta",
        "data": '{"delta":"grüße 🌍 \ud800"}',
        "preamble": "",
        "is_json": True,
        "raw": None,
    },
    {
        "index": 2,
        "t_us": None,
        "sequence_number": None,
        "output_index": None,
        "content_index": None,
        "sent_us": None,
        "received_at": None,
        "event_name": "",
        "sse_id": "",
        "type": "",
        "data": "\ufffd\ufffd",
        "preamble": "retry: 100\n\n",
        "is_json": False,
        "raw": b"\xff\xfe\x00",
    },
    {
        "index": 5,
        "t_us": 1400,
        "sequence_number": 2**40,
        "output_index": 3,
        "content_index": 1,
        "sent_us": 0,
        "received_at": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        "event_name": "done",
        "sse_id": "x" * 200,
        "type": "response.completed",
        "data": "",
        "preamble": "",
        "is_json": True,
        "raw": b"",
    },
]


@pytest.mark.parametrize("version", [1, 2])
def test_a_block_of_an_earlier_version_still_reads(version):
    """tests/fixtures/blocks/v1.zst and v2.zst: `FROZEN_ROWS` packed by the code of their
    version (frozen bytes, never regenerated). Version 1 had no `preamble`: the model's
    default (empty) stands in for it."""
    block = compact.decode((BLOCKS / f"v{version}.zst").read_bytes())
    for column in compact.packed_columns():
        expected = [r[column] for r in FROZEN_ROWS]
        if version == 1 and column == "preamble":
            expected = [""] * len(FROZEN_ROWS)
        assert block[column] == expected, column


# A column of each kind a block packs, and values for it (the first its field's default).
SCRATCH = {
    "int": (lambda: models.BigIntegerField(null=True), [None, 7, -(2**40), 0]),
    "time": (
        lambda: models.DateTimeField(null=True),
        [None, dt.datetime(2026, 12, 5, 18, 0, 0, 1, tzinfo=dt.UTC)],
    ),
    "text": (lambda: fields.TextField(blank=True, default="-"), ["-", "", "grüße\n", "x" * 300]),
    "bool": (lambda: models.BooleanField(default=True), [True, False]),
    "bytes": (lambda: models.BinaryField(null=True), [None, b"\x00\xff", b""]),
}


@contextlib.contextmanager
def scratch_column(make_field, monkeypatch):
    """A column `scratch` added the way issue 43 says a new column is: to `Event` (its
    database column in the test's transaction, rolled back with it) and to the row's columns
    in streams/store/event_row.py, nowhere else."""
    field = make_field()
    field.contribute_to_class(Event, "scratch")
    try:
        with connection.cursor() as cursor:
            table, column = Event._meta.db_table, connection.ops.quote_name(field.column)
            kind = field.db_type(connection)
            if connection.vendor == "postgresql":  # (no ALTER while deferred checks wait)
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind} NULL")
        with monkeypatch.context() as m:
            m.setattr(event_row, "ROW_COLUMNS", (*event_row.ROW_COLUMNS, "scratch"))
            m.setattr(event_row, "PROXIED_ROW_COLUMNS", (*event_row.PROXIED_ROW_COLUMNS, "scratch"))
            yield field
    finally:
        Event._meta.local_fields.remove(field)
        delattr(Event, "scratch")
        Event._meta._expire_cache()


@pytest.mark.parametrize("kind", SCRATCH)
def test_a_new_column_placed_in_the_model_and_the_row_only_is_packed(kind, monkeypatch):
    """Issue 43: a new column touches the model, its migration and the shape module. Its
    values go into the blocks and come back; a block packed before it existed reads with the
    field's default; once it is gone, a block that holds it reads without it."""
    monkeypatch.setattr(compact, "BLOCK", 4)
    make_field, values = SCRATCH[kind]
    [stream] = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "n.sse")
    n = Event.objects.filter(stream_id=stream.pk).count()
    expected = [values[i % len(values)] for i in range(n)]
    old = compact.decode((BLOCKS / "v2.zst").read_bytes())
    with scratch_column(make_field, monkeypatch) as field:
        for i, value in enumerate(expected):
            Event.objects.filter(stream_id=stream.pk, index=i).update(scratch=value)
        as_rows = list(stored_events.read(stream.pk, ("index", "scratch")))
        assert [v for _, v in as_rows] == expected

        assert compact.pack(stream.pk, now=PAST) == n
        assert not Event.objects.filter(stream_id=stream.pk).exists()
        assert list(stored_events.read(stream.pk, ("index", "scratch"))) == as_rows

        before_it = compact.decode((BLOCKS / "v2.zst").read_bytes())
        assert before_it["scratch"] == [field.get_default()] * len(FROZEN_ROWS)
        assert {c: v for c, v in before_it.items() if c != "scratch"} == old
    payloads = EventBlock.objects.filter(stream_id=stream.pk).values_list("payload", flat=True)
    for block in map(compact.decode, payloads):
        assert "scratch" not in block
        assert set(block) == compact.packed_columns()
    assert [i for (i,) in stored_events.read(stream.pk, ("index",))] == list(range(n))


def test_a_block_is_read_by_the_names_it_holds_not_by_their_order():
    """The head is what the reader goes by: the same rows packed in another column order
    (as a later layout may) read the same."""
    shape = compact.layout()
    rows_ = [tuple(r[c] for c, _ in shape) for r in FROZEN_ROWS]
    reordered = tuple(reversed(shape))
    moved = compact.encode([tuple(reversed(r)) for r in rows_], reordered)
    assert compact.decode(moved) == compact.decode(compact.encode(rows_, shape))
    assert compact.decode(moved)["data"] == [r["data"] for r in FROZEN_ROWS]


def test_a_column_of_a_kind_no_block_can_hold_is_refused(monkeypatch):
    with scratch_column(lambda: fields.JSONField(null=True), monkeypatch):
        with pytest.raises(TypeError, match="Event.scratch: no way to pack a JSONField"):
            compact.layout()
