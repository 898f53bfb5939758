"""streams.core.storable and streams.fields: what a text column can store, one rule for every
write. Every text and JSON column of every model of `streams` and `dashboard` (walked, not
listed) is a storable field, so whatever writes it (the ORM's every write, the row module's raw
UPDATE, the importer, the upload queue, tokens, scores and comments) stores a value cut to its
column and without NUL; the raw event INSERT / COPY does the same; and a stream whose upstream
sends NUL, raw and escaped, is stored with U+FFFD in its place. SQLite stores over-long values
and NUL alike, so these tests read back what was stored and measure it (PostgreSQL would have
refused the write: "value too long", "invalid byte sequence … 0x00")."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, models

from streams import fields as storable_fields
from streams.core.storable import NUL, REPLACEMENT, cut, storable, storable_json
from streams.ingest import import_jobs, importer
from streams.models import (
    MAX_TAG_CHARS,
    ApiToken,
    Capture,
    Comment,
    Event,
    Finding,
    ImportFile,
    Stream,
)
from streams.run import runner
from streams.store import aggregates, event_row, rows, scores
from tests.support.hostile import answering, sse

TEXT = (models.CharField, models.TextField, models.JSONField)


def text_fields():
    """(model, field) of every text and JSON column of every model of the two apps."""
    return [
        (model, field)
        for app in ("streams", "dashboard")
        for model in apps.get_app_config(app).get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, TEXT)
    ]


def poisoned(limit):
    """A value too long for `limit` characters, a NUL inside what a cut keeps, and characters
    beyond the BMP (one character each)."""
    return ("a" + NUL + "é😀x" * (limit or 10))[: (limit or 10) + 37]


def assert_storable(value, limit=None):
    assert NUL not in value, value[:40]
    if limit is not None:
        assert len(value) <= limit, (len(value), limit)


# ---------------------------------------------------------------------------------------------
# The rule


def test_a_value_is_cut_to_its_column_and_a_nul_becomes_the_replacement_character():
    assert storable("ab\x00c", 10) == "ab\ufffdc" and REPLACEMENT == "\ufffd"
    assert storable("a\x00" * 10, 3) == "a\ufffda"
    assert storable("😀" * 5, 3) == "😀😀😀"  # characters, as varchar(n) counts them
    clean = "x" * 50
    assert storable(clean) is clean and storable(clean, 50) is clean
    assert cut("ab\ud83d\ude00cd", 3) == "ab"  # never between the halves of a pair


def test_json_loses_its_nuls_in_strings_and_keys_and_nothing_else():
    value = {"a\x00": ["x\x00y", 1, None, True, {"k": "\x00"}], "b": 2.5}
    assert storable_json(value) == {
        "a\ufffd": ["x\ufffdy", 1, None, True, {"k": "\ufffd"}],
        "b": 2.5,
    }
    clean = {"text": "a \\u0000 spelt out is text", "n": [1, 2]}
    assert storable_json(clean) is clean
    assert storable_json("\x00") == "\ufffd"


# ---------------------------------------------------------------------------------------------
# Every column, walked


def test_every_text_column_of_every_model_is_a_storable_field():
    """A new CharField, TextField or JSONField declared with Django's own class fails here:
    its writers could store a NUL or an over-long value."""
    found = text_fields()
    assert len(found) > 90
    plain = [
        f"{model.__name__}.{field.name}"
        for model, field in found
        if type(field).__module__ != storable_fields.__name__
    ]
    assert not plain, f"declare these with streams.fields: {plain}"
    # the schema is Django's (the migrations do not name this module)
    for _model, field in found:
        assert field.deconstruct()[1] == f"django.db.models.{type(field).__bases__[-1].__name__}"


def test_every_text_column_makes_what_enters_sql_storable():
    for model, field in text_fields():
        where = f"{model.__name__}.{field.name}"
        if isinstance(field, models.JSONField):
            stored = field.get_db_prep_save({"k\x00": ["v\x00"]}, connection)
            assert "\\u0000" not in (stored if isinstance(stored, str) else json.dumps(stored.obj))
            continue
        stored = field.get_db_prep_save(poisoned(field.max_length), connection)
        assert NUL not in stored, where
        if field.max_length:
            assert len(stored) == field.max_length, where


# ---------------------------------------------------------------------------------------------
# Every way the ORM writes


@pytest.mark.django_db
def test_every_orm_write_stores_bounded_values():
    """save, create, update, bulk_create, bulk_update and update_or_create, on a CharField
    (a token's name, 100) and a TextField with a bound (a comment's text, 2000)."""
    user = get_user_model().objects.create(username="writer")
    stream = rows.new_row(None, {"input": "hi"})
    long_name, long_text = poisoned(100), poisoned(2000)

    def stored():
        names = list(ApiToken.objects.values_list("name", flat=True))
        texts = list(Comment.objects.values_list("text", flat=True))
        for name in names:
            assert_storable(name, 100)
            assert len(name) == 100
        for text in texts:
            assert_storable(text, 2000)
            assert len(text) == 2000
        return len(names), len(texts)

    ApiToken.issue(user, name=long_name)  # create
    token = ApiToken(user=user, name=long_name, digest="d1", prefix="p1")
    token.save()
    assert token.name == ApiToken.objects.get(pk=token.pk).name  # the instance holds it too
    ApiToken.objects.bulk_create([ApiToken(user=user, name=long_name, digest="d2", prefix="p2")])
    ApiToken.objects.update_or_create(digest="d3", defaults={"user": user, "name": long_name})
    assert stored() == (4, 0)
    ApiToken.objects.update(name=long_name + "!")
    assert stored() == (4, 0)
    tokens = list(ApiToken.objects.all())
    for t in tokens:
        t.name = "b" + long_name
    ApiToken.objects.bulk_update(tokens, ["name"])
    assert stored() == (4, 0)

    Comment.objects.create(stream=stream, text=long_text, source="api")
    Comment.objects.bulk_create([Comment(stream=stream, text=long_text, source="api")])
    assert stored() == (4, 2)
    Comment.objects.update(text="c" + long_text)
    assert stored() == (4, 2)


# ---------------------------------------------------------------------------------------------
# The writers


@pytest.mark.django_db
def test_the_writers_store_bounded_values_without_nul(tmp_path):
    user = get_user_model().objects.create(username="writer")
    # an upload: its model and file names
    content = b"".join(
        sse(json.dumps(e)) for e in (CREATED, *TEXT_EVENTS, COMPLETED)
    )  # (escaped NULs in the JSON)
    name = poisoned(300) + ".sse"
    job = import_jobs.submit(user, [(name, content)], model=poisoned(100))
    job.refresh_from_db()
    assert_storable(job.model, 100)
    (file,) = ImportFile.objects.filter(job=job)
    assert_storable(file.filename, 300)
    assert file.status == ImportFile.Status.DONE, file.error
    for capture in Capture.objects.all():
        assert_storable(capture.filename, 300)
    assert_nothing_stored_holds_nul()
    # a token's name, from the command
    call_command(
        "create_token", "writer", "--name", poisoned(100), stdout=open(tmp_path / "o", "w")
    )
    assert_storable(ApiToken.objects.get().name, 100)
    # a score's comment and key, and a comment (too long is a 400 there: scores._text)
    stream = rows.new_row(None, {"input": "hi"})
    scored = scores.give(
        stream.pk,
        author=user,
        name="thumbs",
        label="up",
        comment="a\x00b",
        key="k\x00",
        source="api",
    )
    scored.refresh_from_db()
    assert (scored.comment, scored.key) == ("a\ufffdb", "k\ufffd")
    said = scores.comment(stream.pk, author=user, text="c\x00d", source="api")
    said.refresh_from_db()
    assert said.text == "c\ufffdd"


def test_the_raw_event_insert_makes_every_text_column_storable():
    columns = event_row.ROW_COLUMNS
    values = dict.fromkeys(columns)
    for column, limit in rows.EVENT_TEXT.items():
        if column in values:
            values[column] = poisoned(limit)
    flat = list(values.values())
    rows.bound_event_values(flat, columns)
    got = dict(zip(columns, flat, strict=True))
    for column, limit in rows.EVENT_TEXT.items():
        if column in got:
            assert_storable(got[column], limit)
    assert got["data"] == poisoned(None).replace(NUL, REPLACEMENT)  # not cut: only NUL goes


# ---------------------------------------------------------------------------------------------
# A stream whose upstream sends NUL

MODEL = "m-\\u0000-x"  # (JSON text: the escape a stream would send)
CREATED = {"type": "response.created", "sequence_number": 0,
           "response": {"id": "resp_\u0000", "object": "response", "model": "m-\u0000-x",
                        "status": "in_progress"}}  # fmt: skip
TEXT_EVENTS = [
    {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
     "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}},
    {"type": "response.content_part.added", "sequence_number": 2, "output_index": 0,
     "item_id": "msg_1", "content_index": 0, "part": {"type": "output_text", "text": ""}},
    {"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0,
     "item_id": "msg_1", "content_index": 0, "delta": "echo: a\u0000b"},
]  # fmt: skip
COMPLETED = {"type": "response.completed", "sequence_number": 4,
             "response": {"id": "resp_\u0000", "object": "response", "model": "m-\u0000-x",
                          "status": "completed", "output_text": "echo: a\u0000b"}}  # fmt: skip


def assert_nothing_stored_holds_nul():
    """No text or JSON column of a stream, event or finding stored holds a NUL."""
    for model in (Stream, Event, Finding):
        names = [f.attname for f in model._meta.concrete_fields if isinstance(f, TEXT)]
        for row in model.objects.values_list(*names):
            for name, value in zip(names, row, strict=True):
                if isinstance(value, str):
                    assert NUL not in value, (model.__name__, name, value)  # (`data` may
                    # hold the escape `\\u0000` as it came: that is text)
                else:  # decoded JSON, written as JSON again: a NUL would be the escape
                    assert "\\u0000" not in json.dumps(value), (model.__name__, name, value)


@pytest.fixture
def nul_upstream(settings):
    """An upstream that echoes NUL: escaped in the JSON of every event, and raw in an `event:`
    name."""
    chunks = [sse(json.dumps(e)) for e in (CREATED, *TEXT_EVENTS)]
    chunks.append(sse(json.dumps({"type": "response.x", "sequence_number": 99}), event="ev\x00il"))
    chunks.append(sse(json.dumps(COMPLETED)))
    with answering(settings, chunks) as server:
        yield server


@pytest.mark.django_db(transaction=True)
async def test_a_stream_whose_output_echoes_nul_is_stored_with_the_replacement_character(
    nul_upstream,
):
    stream = await sync_to_async(rows.new_row)(None, {"input": "say \x00", "stream": True})
    last, _ = await runner.run_stream(stream)
    stream = await Stream.objects.aget(pk=last.pk)
    assert stream.status == "completed", (stream.error_code, stream.error_message)
    assert stream.output_text == "echo: a\ufffdb"
    assert stream.resolved_model == "m-\ufffd-x" and stream.upstream_id == "resp_\ufffd"
    assert stream.prompt == "say \ufffd" and stream.request_body["input"] == "say \ufffd"
    names = [
        e async for e in Event.objects.filter(stream=stream).values_list("event_name", flat=True)
    ]
    assert "ev\ufffdil" in names
    await sync_to_async(assert_nothing_stored_holds_nul)()


@pytest.mark.django_db
def test_an_import_that_echoes_nul_is_stored_with_the_replacement_character():
    content = b"".join(sse(json.dumps(e)) for e in (CREATED, *TEXT_EVENTS, COMPLETED))
    (stream,) = importer.import_capture(content, "nul\x00.sse")
    stream.refresh_from_db()
    assert stream.status == "completed", (stream.error_code, stream.error_message)
    assert stream.output_text == "echo: a\ufffdb" and stream.resolved_model == "m-\ufffd-x"
    assert_nothing_stored_holds_nul()


def test_the_rollups_raw_upsert_copies_only_values_that_fit():
    """The rollups are written by raw SQL (`aggregates.apply`, ON CONFLICT), past the fields'
    rule: each text dimension copies the column of the same name of a stored stream or
    finding, already storable, so it fits when it is at least as wide (a stream column made
    wider alone would make PostgreSQL refuse the batch). The tag is cut by the tag rule
    (`aggregates` keeps tags of at most MAX_TAG_CHARS, the column's width)."""
    checked = 0
    for model, (key, _values) in aggregates.rollup_tables().items():
        for name in key:
            field = model._meta.get_field(name)
            if not isinstance(field, TEXT):
                continue
            if name == "tag":
                assert field.max_length == MAX_TAG_CHARS
                continue
            source = next(
                m._meta.get_field(name)
                for m in (Stream, Finding)
                if name in {f.name for f in m._meta.concrete_fields}
            )
            assert field.max_length >= source.max_length, f"{model.__name__}.{name}"
            checked += 1
    assert checked >= 20
