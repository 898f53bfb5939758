"""Full-text search (streams/store/search.py), on SQLite's FTS5 here and PostgreSQL's tsvector in
tier 2: what is indexed, how a query reads, that the database keeps the index whatever writes
a row, ranking, access, filters, redacted snippets, the list page and the API."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from dashboard.queries.stream_list import marked
from streams.models import Stream
from streams.store import known_secrets, rows, search
from tests.support import recording
from tests.support.migrations import own_database

pytestmark = pytest.mark.django_db

POSTGRES = connection.vendor == "postgresql"


def found(q, qs=None):
    hits, _ = search.page(qs if qs is not None else Stream.objects.all(), search.parse(q))
    return [h.pk for h in hits]


def stored(prompt="Tell me about Utrecht", user=None, instructions="", **fields):
    body = rows.build_request_body(prompt, "auto", instructions=instructions)
    stream = rows.create(body, user=user)
    if fields:
        rows.update(Stream.objects.filter(pk=stream.pk), fields)
    return stream


# ---- what is indexed, how a query reads ----------------------------------------------------------


def test_other_text_holds_what_the_prompt_output_and_error_columns_do_not():
    body = {
        "instructions": "Answer in Dutch",
        "input": [
            {"role": "user", "content": "An earlier question"},
            {"type": "function_call_output", "call_id": "c1", "output": "22 degrees"},
            {"role": "user", "content": [{"type": "input_text", "text": "The last question"}]},
        ],
    }
    parts = [
        {"type": "reasoning", "summary": ["Weighing the canals"]},
        {"type": "message", "parts": [{"type": "refusal", "text": "I cannot say"}]},
        {"type": "message", "parts": [{"type": "output_text", "text": "in output_text already"}]},
        {"type": "function_call", "name": "get_weather", "arguments": '{"city":"Utrecht"}'},
        {"type": "mcp_call", "name": "lookup", "arguments": "{}", "output": {"rows": ["Dom"]}},
    ]
    text = search.other_text(body, parts)
    for piece in (
        "Answer in Dutch",
        "An earlier question",
        "22 degrees",
        "Weighing the canals",
        "I cannot say",
        "get_weather",
        '{"city":"Utrecht"}',
        "lookup",
        "Dom",
    ):
        assert piece in text
    assert "The last question" not in text  # the prompt has a column of its own
    assert "in output_text already" not in text
    assert len(search.other_text({"instructions": "x" * 10**6}, None)) == search.OTHER_MAX_CHARS


SYSTEM, LAST = "Answer in Dutch", "The last question"


@pytest.mark.parametrize(
    "body",
    [
        # Chat: the system message is one of the messages
        {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": LAST}]},
        {
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": SYSTEM}]},
                {"role": "user", "content": LAST},
            ]
        },
        # Messages: `system`, a text or a list of text blocks
        {"system": SYSTEM, "messages": [{"role": "user", "content": LAST}]},
        {
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": LAST}]}],
        },
    ],
    ids=["chat", "chat-developer-parts", "messages", "messages-blocks"],
)
def test_other_text_holds_the_system_text_of_chat_and_messages(body):
    text = search.other_text(body, None)
    assert SYSTEM in text and LAST not in text


@pytest.mark.parametrize("format", ["chat", "messages"])
def test_chat_and_messages_system_text_is_searched_from_the_redacted_view(settings, format):
    """Their system text is found like Responses' instructions, and a secret in it is not:
    neither whole, nor by a prefix, nor in a snippet."""
    settings.UPSTREAM_API_KEY = KEY
    body = rows.build_request_body(
        "Vertel over de Dom", format=format, instructions=f"Antwoord kort, sleutel {KEY} geheim"
    )
    stream = rows.create(body, format=format)
    for q in (KEY, "9a8b*", "9a8b7c6d5e4f3g2h1i", "index"):
        assert found(q) == [], q
    assert found("antwoord kort") == [stream.pk] and found('"sleutel redacted"') == [stream.pk]
    (hit,) = search.page(Stream.objects.all(), search.parse("geheim"))[0]
    assert KEY not in hit.text and KEY[:12] not in hit.snippet
    assert KEY in json.dumps(Stream.objects.get(pk=stream.pk).request_body)  # (kept verbatim)
    # rebuilt from the request (manage.py rebuild_search): the same
    search.rederive(Stream, from_source=True)
    assert found("antwoord") == [stream.pk] and found("9a8b*") == []


@pytest.mark.parametrize(
    "q, fts5, tsquery",
    [
        ("Kortom", '"kortom"', "kortom"),
        ("utre* Dom", '"utre"* "dom"', "utre:* & dom"),
        ('"hoogste toren" kerk', '"hoogste toren" "kerk"', "(hoogste <-> toren) & kerk"),
        ("“smart quotes”", '"smart quotes"', "(smart <-> quotes)"),
        ("e-mail", '"e mail"', "(e <-> mail)"),
        ("'; DROP TABLE x; -- & | ! :*", '"drop" "table" "x"', "drop & table & x"),
        ("!!! ...", "", ""),
    ],
)
def test_a_query_is_words_phrases_and_prefixes_and_nothing_else(q, fts5, tsquery):
    terms = search.parse(q)
    assert search.fts5_match(terms) == fts5
    assert search.tsquery(terms) == tsquery


# ---- the index follows the rows ------------------------------------------------------------------


def test_the_index_follows_every_write_of_the_indexed_columns():
    stream = stored(prompt="Vertel over de Domtoren", instructions="Antwoord kort")
    assert found("domtoren") == [stream.pk]  # the prompt, from the row's INSERT
    assert found("antwoord") == [stream.pk]  # its instructions, from the start
    rows.update(Stream.objects.filter(pk=stream.pk), {"output_text": "Kortom: 112 meter hoog."})
    assert found("kortom") == [stream.pk]
    # a write that does not derive the search text leaves the row out of the index (its text
    # unread, redacted or not) until `maintain` derives it
    Stream.objects.filter(pk=stream.pk).update(output_text="Kortom: 113 meter hoog.")
    assert found("kortom") == [] and found("domtoren") == []
    search.maintain()
    assert found("kortom") == [stream.pk] and found("113") == [stream.pk]
    # the writer's own UPDATE (raw SQL, streams/store/rows.py), as a stream's end is written
    rec = type("Rec", (), {"stream_id": stream.pk})()
    rows.update_streams({rec: {"output_text": "Samengevat: een toren", "error_message": "boom"}})
    assert found("kortom") == [] and found("samengevat") == [stream.pk]
    assert found("boom") == [stream.pk]
    Stream.objects.filter(pk=stream.pk).delete()
    assert found("samengevat") == []


KEY = "sk-INDEX-" + "9a8b7c6d5e4f3g2h1i"


def _integrity():
    """SQLite: the index holds exactly what its view reads of each row now, word by word and
    place by place (compared with an index built afresh from the view), and is consistent in
    itself (FTS5's own check). A trigger that indexed other values than the row ends with, or
    deleted other values than it had indexed, fails it."""
    if POSTGRES:
        return
    t = search.TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")
        cursor.execute(
            f"CREATE VIRTUAL TABLE check_fts USING fts5({', '.join(search.COLUMNS)}, "
            f"content='{t}_source', content_rowid='id', tokenize='unicode61 remove_diacritics 2')"
        )
        cursor.execute("INSERT INTO check_fts(check_fts) VALUES ('rebuild')")
        cursor.execute(f"CREATE VIRTUAL TABLE check_held USING fts5vocab({t}, 'instance')")
        cursor.execute("CREATE VIRTUAL TABLE check_fresh USING fts5vocab(check_fts, 'instance')")
        try:
            cols = "term, doc, col, offset"
            for a, b in (("check_held", "check_fresh"), ("check_fresh", "check_held")):
                cursor.execute(f"SELECT {cols} FROM {a} EXCEPT SELECT {cols} FROM {b}")
                assert cursor.fetchall() == [], f"in {a}, not in {b}"
        finally:
            for table in ("check_held", "check_fresh", "check_fts"):
                cursor.execute(f"DROP TABLE {table}")


def test_what_the_index_reads_is_derived_with_the_secrets_taken_out(settings):
    settings.UPSTREAM_API_KEY = KEY
    text = f"Incorrect API key provided: {KEY}"
    got = search.derived({"prompt": "hoi", "output_text": text, "error_message": "", "x": 1})
    assert got["search_prompt"] is None and got["search_error"] is None  # nothing twice
    assert got["search_output"] == "Incorrect API key provided: [redacted]"
    assert "search_other" not in got and got[search.MARK] > 0
    assert search.derived({"status": "completed"}) == {}  # (no indexed column: nothing)
    # a key across the index's cut is taken out of what the index reads of it
    cut = "x" * (search.INDEXED_MAX_CHARS - 12) + " " + KEY + " tail"
    copy = search.derived({"output_text": cut})["search_output"]
    assert len(copy) == search.INDEXED_MAX_CHARS and KEY[:11] not in copy
    # `search_other` is the search's own: stored redacted, always
    assert search.derived({"search_other": text})["search_other"].endswith("[redacted]")
    first, second = search.new_mark(), search.new_mark()
    assert second > first


def test_every_write_derives_or_leaves_the_row_out_of_the_index(settings):
    settings.UPSTREAM_API_KEY = KEY
    stream = stored(prompt=f"Waarom {KEY}?")  # made: derived
    assert found("waarom") == [stream.pk] and found("9a8b*") == []
    rec = type("Rec", (), {"stream_id": stream.pk})()
    rows.update_streams({rec: {"output_text": f"Omdat {KEY}", "error_message": "boom"}})
    assert found("omdat") == [stream.pk] and found("9a8b*") == [] and found("index") == []
    # a forgotten writer: the row leaves the index, its text unread, until it is derived
    Stream.objects.filter(pk=stream.pk).update(error_message=f"Incorrect key {KEY}")
    assert found("incorrect") == [] and found("9a8b*") == [] and found("waarom") == []
    _integrity()
    # a write that derives only what it changes leaves an underived row underived
    rows.update(Stream.objects.filter(pk=stream.pk), {"output_text": "Daarom"})
    assert found("daarom") == [] and Stream.objects.get(pk=stream.pk).search_derived_ns is None
    assert search.maintain() == 1
    assert found("incorrect") == [stream.pk] and found("daarom") == [stream.pk]
    assert found("9a8b*") == [] and found("waarom") == [stream.pk]
    # the mark alone: NULL takes the row out, a derivation puts it back
    Stream.objects.filter(pk=stream.pk).update(search_derived_ns=None)
    assert found("daarom") == []
    _integrity()
    search.maintain()
    assert found("daarom") == [stream.pk]
    # a whole row saved (the admin's way) with a new text and its old mark: underived too
    row = Stream.objects.get(pk=stream.pk)
    row.output_text = f"Dus {KEY}"
    row.save()
    assert found("dus") == [] and found("9a8b*") == []
    search.maintain()
    assert found("dus") == [stream.pk] and found("9a8b*") == []
    _integrity()
    row = Stream.objects.get(pk=stream.pk)
    assert KEY in row.prompt and KEY in row.output_text and KEY in row.error_message  # verbatim


@pytest.mark.django_db(transaction=True)
async def test_a_recorded_stream_is_found_by_its_answer_and_its_tool_call(upstream):
    stream, _ = await recording.record(recording.body(scenario="tools"))
    assert stream.status == "completed", stream.error_message
    word = next(w for w in stream.output_text.split() if w.isalpha() and len(w) > 4)
    tool = next(p["name"] for p in stream.parts if p.get("name"))
    assert stream.pk in await sync_to_async(found)(word)
    assert stream.pk in await sync_to_async(found)(tool)


def test_rebuild_search_makes_the_text_again_and_the_index_from_the_rows():
    from django.core.management import call_command

    stream = stored(instructions="Antwoord kort")
    Stream.objects.filter(pk=stream.pk).update(search_other="")  # (as before migration 0013)
    assert found("antwoord") == []
    call_command("rebuild_search", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert found("antwoord") == [stream.pk]


def test_an_imported_stream_is_found_by_its_answer():
    from streams.ingest import importer
    from tests.support.captures import text_capture

    (stream,) = importer.import_capture(text_capture("Gezellig grachtenpand"), "a.sse")
    assert found("grachtenpand") == [stream.pk]


# ---- ranking, words, access, filters -------------------------------------------------------------


def test_a_match_in_the_prompt_ranks_above_one_in_the_output():
    in_output = stored(prompt="Something else", output_text="about the Oudegracht")
    in_prompt = stored(prompt="Walk along the Oudegracht")
    assert found("oudegracht") == [in_prompt.pk, in_output.pk]


def test_phrases_prefixes_and_all_words_required():
    a = stored(output_text="de hoogste toren van Nederland")
    b = stored(output_text="de toren is de hoogste")
    assert sorted(found("hoogste toren")) == sorted([a.pk, b.pk])
    assert found('"hoogste toren"') == [a.pk]
    assert found("neder*") == [a.pk]
    assert found("hoogste fiets") == []


def test_case_and_on_sqlite_accents_are_ignored():
    stream = stored(output_text="Één café in Utrecht")
    assert found("ÉÉN") == [stream.pk] and found("utrecht") == [stream.pk]
    # SQLite's unicode61 removes diacritics; PostgreSQL's `simple` keeps them (docs/search.md)
    assert found("cafe") == ([] if POSTGRES else [stream.pk])


def test_only_streams_the_user_may_see_are_found_and_the_filters_apply():
    from streams.access.rules import streams_for

    owner = get_user_model().objects.create_user("owner")
    stranger = get_user_model().objects.create_user("stranger")
    mine = stored(user=owner, output_text="Kortom, de gracht", status="completed")
    failed = stored(user=owner, output_text="Kortom, kapot", status="failed")
    stored(user=stranger, output_text="Kortom, niet van jou")
    assert sorted(found("kortom", streams_for(owner))) == sorted([mine.pk, failed.pk])
    assert found("kortom", streams_for(owner).filter(status="completed")) == [mine.pk]


def test_the_newest_matches_are_ranked(monkeypatch):
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    best_but_old = stored(prompt="Oudegracht")
    newer = [stored(output_text=f"de Oudegracht {i}") for i in range(3)]
    assert found("oudegracht") == [s.pk for s in reversed(newer)]
    assert best_but_old.pk not in found("oudegracht")


@pytest.mark.parametrize("window", [5, 4, 100])  # within it; past it; the whole table
def test_a_phrase_found_among_the_newest_streams_ranks_the_same_newest_matches(monkeypatch, window):
    """(PostgreSQL looks for a phrase's matches among the newest NEWEST_FIRST streams first,
    and in the whole table when they hold fewer than RANK_WINDOW: either way the same.)"""
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    monkeypatch.setattr(search, "NEWEST_FIRST", window)
    old = [stored(prompt="de Oude Gracht") for _ in range(2)]
    stored(output_text="oude en een gracht")  # both words, not the phrase
    newer = [stored(output_text=f"langs de oude gracht {i}") for i in range(3)]
    filler = [stored(output_text="iets anders") for _ in range(2)]
    assert found('"oude gracht"') == [s.pk for s in reversed(newer)]
    mine = Stream.objects.filter(pk__in=[s.pk for s in old + filler])
    assert sorted(found('"oude gracht"', mine)) == sorted(s.pk for s in old)


@pytest.mark.skipif(not POSTGRES, reason="PostgreSQL's statements")
def test_a_projects_phrase_is_a_condition_on_its_own_rows():
    """A member's phrase at 1M streams over 50 projects (582 ms): each of the phrase's 62,000
    matches was looked up again by primary key for its project (`s.id IN (SELECT id … WHERE
    project_id = …)`, 302,000 buffers), and the newest-first probe, which a project's few
    newest streams cannot satisfy, read the phrase's index entries once more. Now the match
    is one more condition on the project's rows, which the planner ANDs with the project's
    index (1,300 buffers), in one statement."""
    from django.test.utils import CaptureQueriesContext

    from streams.models import Project

    owner = get_user_model().objects.create_user("owner")
    other = get_user_model().objects.create_user("other")
    mine = [stored(user=owner, output_text=f"langs de oude gracht {i}") for i in range(2)]
    stored(user=owner, output_text="oude en een gracht")  # both words, not the phrase
    stored(user=other, output_text="ook langs de oude gracht")
    project = Stream.objects.filter(project=Project.personal(owner))
    with CaptureQueriesContext(connection) as ctx:
        hits = found('"oude gracht"', project)
    assert sorted(hits) == sorted(s.pk for s in mine)
    searches = [c["sql"] for c in ctx.captured_queries if "to_tsquery" in c["sql"]]
    assert len(searches) == 1, searches
    assert "IN (SELECT" not in searches[0]
    assert '"streams_stream"."project_id" = ' in searches[0]


def _fts_statements(q, qs):
    """(the hits of `q` among `qs`, the search's statements over the FTS table with their
    query plans)."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        hits = found(q, qs)
    statements = []
    with connection.cursor() as cursor:
        for sql in (c["sql"] for c in ctx.captured_queries if search.TABLE in c["sql"]):
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            statements.append((sql, [row[3] for row in cursor.fetchall()]))
    return hits, statements


@pytest.mark.skipif(POSTGRES, reason="SQLite's FTS5 statements")
def test_filters_that_keep_few_of_the_newest_matches_drive_the_search(monkeypatch):
    """At 1M streams a word with a user's and a status filter looked every one of the word's
    104,000 matches up in the stream table to find its 291 visible ones (331 ms; docs/
    search.md): when the newest MATCHES_TESTED matches hold fewer than RANK_WINDOW visible
    ones, the filtered streams are listed once (an IN list) and no match is looked up."""
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    monkeypatch.setattr(search, "MATCHES_TESTED", 4)
    too_old = stored(output_text="Kortom, kapot", status="failed")
    kept = [stored(output_text=f"Kortom, kapot {i}", status="failed") for i in range(2)]
    [stored(output_text=f"Kortom, goed {i}", status="completed") for i in range(3)]
    kept.append(stored(output_text="Kortom, weer kapot", status="failed"))  # the newest
    hits, statements = _fts_statements("kortom", Stream.objects.filter(status="failed"))
    assert sorted(hits) == sorted(s.pk for s in kept) and too_old.pk not in hits
    sql, plan = statements[-1]
    assert "+f.rowid IN (SELECT" in sql and "JOIN (SELECT" not in sql
    assert any(step.startswith("LIST SUBQUERY") for step in plan)
    # no match looked up in the stream table, and no rowid handed to FTS5 to look up
    assert not [step for step in plan if "INTEGER PRIMARY KEY" in step]
    assert not [step for step in plan if "VIRTUAL TABLE INDEX" in step and "=" in step]


@pytest.mark.skipif(POSTGRES, reason="SQLite's FTS5 statements")
def test_a_users_streams_of_one_status_are_listed_from_one_index_range(monkeypatch):
    """A word with a user's and a status filter, staff over 1M streams: the filtered streams
    were listed through the user's index, each of the user's 315,809 streams looked up in
    the table for its status (491 ms). (user, status) is one range of stream_user_status."""
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    monkeypatch.setattr(search, "MATCHES_TESTED", 4)
    alice = get_user_model().objects.create(username="alice")
    stored(output_text="Kortom, kapot", user=alice, status="failed")
    kept = [stored(output_text=f"Kortom, kapot {i}", user=alice, status="failed") for i in range(2)]
    [stored(output_text=f"Kortom, goed {i}", user=alice, status="completed") for i in range(3)]
    [stored(output_text=f"Kortom, ook kapot {i}", status="failed") for i in range(3)]
    visible = Stream.objects.filter(status="failed", user=alice)
    hits, statements = _fts_statements("kortom", visible)
    assert sorted(hits) == sorted(s.pk for s in visible) and set(hits) >= {s.pk for s in kept}
    sql, plan = statements[-1]
    assert "+f.rowid IN (SELECT" in sql  # (the filters drive)
    lists = " ".join(plan[plan.index(next(p for p in plan if p.startswith("LIST"))) :])
    assert "COVERING INDEX stream_user_status (user_id=? AND status=?)" in lists, plan


@pytest.mark.skipif(POSTGRES, reason="SQLite's FTS5 statements")
def test_filters_that_keep_many_of_the_newest_matches_let_the_matches_drive(monkeypatch):
    """(Listing the filtered streams costs as many rows as they are: 280 ms for the 939,000
    completed streams at 1M, against 5 ms walking the matches newest first.)"""
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    monkeypatch.setattr(search, "MATCHES_TESTED", 4)
    stored(output_text="Kortom, kapot", status="failed")
    done = [stored(output_text=f"Kortom, goed {i}", status="completed") for i in range(4)]
    hits, statements = _fts_statements("kortom", Stream.objects.filter(status="completed"))
    assert sorted(hits) == sorted(s.pk for s in done[1:])
    assert len(statements) == 2  # the MATCHES_TESTED-th match, then the page
    sql, plan = statements[-1]
    assert "JOIN (SELECT" in sql and '+f.rowid IN (SELECT "streams_stream"' not in sql
    assert any("INTEGER PRIMARY KEY" in step for step in plan)
    assert not [step for step in plan if "VIRTUAL TABLE INDEX" in step and "=" in step]


def test_pages_of_matches():
    many = [stored(output_text=f"Kortom nummer {i}") for i in range(search.PAGE_SIZE + 3)]
    first, more = search.page(Stream.objects.all(), search.parse("kortom"))
    second, last = search.page(Stream.objects.all(), search.parse("kortom"), 2)
    assert len(first) == search.PAGE_SIZE and more and len(second) == 3 and not last
    assert {h.pk for h in first + second} == {s.pk for s in many}


# ---- snippets ------------------------------------------------------------------------------------


def test_a_snippet_marks_the_matched_words_and_escapes_the_rest():
    stored(output_text="Kortom: <script>alert(1)</script> de Dom & meer")
    (hit,) = search.page(Stream.objects.all(), search.parse("dom"))[0]
    assert f"de {search.MATCH_START}Dom{search.MATCH_STOP} &" in hit.snippet  # plain text
    assert "<script>alert(1)</script> de Dom &" in hit.text
    html = marked(hit.snippet)  # the face marks it
    assert "<mark>Dom</mark>" in html
    assert "&lt;script&gt;" in html and "<script>" not in html


def test_the_index_and_its_snippets_are_made_of_the_redacted_text():
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    known_secrets.remember(key)
    try:
        stream = stored(output_text=f"Kortom, de sleutel is {key} hier")
        (hit,) = search.page(Stream.objects.all(), search.parse("sleutel"))[0]
        assert key not in hit.snippet and "[redacted]" in hit.text
        assert "<mark>sleutel</mark>" in marked(hit.snippet)  # (no mark splits what is not there)
        assert found("a1b2*") == [] and found("proj") == [] and found("redacted") == [stream.pk]
        row = Stream.objects.get(pk=stream.pk)
        assert key in row.output_text  # the row keeps what came, verbatim
        assert key not in row.search_output and row.search_prompt is None  # (nothing to redact)
    finally:
        known_secrets.forget_all()


@pytest.mark.django_db(transaction=True)
def test_the_servers_sweep_derives_what_a_writer_left_underived():
    from streams.run import runner

    stream = stored(prompt="Vertel over de Dom")
    Stream.objects.filter(pk=stream.pk).update(prompt="Vertel over de Domtoren")  # (forgot)
    assert found("domtoren") == [] and found("vertel") == []
    runner._sweep_now()  # (every SWEEP_INTERVAL_S in every server and worker process)
    assert found("domtoren") == [stream.pk]


LATE_KEY = "pk-live-" + "Q7w8E9r0T1y2U3i4O5p6"  # (no `sk-` shape: only known once remembered)


def test_a_secret_learned_after_it_was_indexed_is_redacted_then_swept_out_of_the_index():
    stream = stored(output_text=f"Kortom, de sleutel is {LATE_KEY} hier")
    other = stored(output_text="Kortom, de q7w8 van iets anders")  # a candidate, unchanged
    assert found("q7w8e9*") == [stream.pk]  # not a secret yet: indexed as it came
    known_secrets.remember(LATE_KEY)
    search.forget_sweeps()
    try:
        # until the index is swept, a snippet that shows it is redacted and unmarked
        (hit,) = search.page(Stream.objects.all(), search.parse("sleutel"))[0]
        assert LATE_KEY not in hit.text and "[redacted]" in hit.text
        assert search.MATCH_START not in hit.snippet and "<mark>" not in marked(hit.snippet)
        assert search.maintain(now=0) == 0  # first seen: every process is given time to learn it
        before = Stream.objects.get(pk=other.pk).search_derived_ns
        assert search.maintain(now=search.SWEEP_GRACE_S) == 1  # the stream that holds it
        assert found("q7w8e9*") == [] and found("live") == [] and found("sleutel") == [stream.pk]
        assert Stream.objects.get(pk=other.pk).search_derived_ns == before  # (looked at, left)
        assert search.maintain(now=2 * search.SWEEP_GRACE_S) == 0  # swept, and recorded so
        from streams.models import SweptSecret
        from streams.store import sealed

        assert SweptSecret.objects.filter(fingerprint=sealed.fingerprint(LATE_KEY)).exists()
    finally:
        known_secrets.forget_all()
        search.forget_sweeps()


# ---- the list page and the API -------------------------------------------------------------------


def test_the_list_page_ranks_and_shows_snippets():
    user = get_user_model().objects.create_user("reader")
    other = stored(user=user, prompt="Iets anders", output_text="Kortom, een antwoord")
    best = stored(user=user, prompt="Kortom als vraag")
    client = Client()
    client.force_login(user)
    html = client.get("/", {"q": "kortom"}).content.decode()
    assert html.index(f"stream-row-{best.pk}") < html.index(f"stream-row-{other.pk}")
    assert "<mark>Kortom</mark>" in html
    assert 'data-live="off"' in html  # a ranked page is not the live newest page
    assert client.get("/", {"q": "kortom", "page": "99"}).status_code == 400
    csv = b"".join(client.get("/streams.csv", {"q": "kortom"}).streaming_content).decode()
    assert csv.count("\n") == 3  # the header and both matches


def test_the_api_searches_with_ranks_and_plain_snippets():
    user = get_user_model().objects.create_user("api")
    from streams.models import ApiToken

    token = ApiToken.issue(user, name="t")
    stream = stored(user=user, output_text="Kortom, <b>vet</b>")
    response = Client().get("/api/streams/", {"q": "vet"}, HTTP_AUTHORIZATION=f"Bearer {token}")
    data = json.loads(response.content)
    assert [s["id"] for s in data["streams"]] == [stream.pk]
    assert "Kortom, <b>vet" in data["streams"][0]["snippet"]  # plain text, not HTML
    assert data["next_page"] is None


# ---- the migration ---------------------------------------------------------------------------


MIGRATION_KEY = "sk-MIGRATE-" + "4f5e6d7c8b9a0z1y"


def test_the_migration_derives_every_stored_row_and_the_index_then_holds_no_secret(settings):
    settings.UPSTREAM_API_KEY = MIGRATION_KEY
    message = f"Incorrect API key provided: {MIGRATION_KEY}"
    with own_database() as db:
        old = db.forward(("streams", "0014_scores_and_share_links"))
        OldStream = old.get_model("streams", "Stream")
        pk = OldStream.objects.create(
            prompt="Vertel over de Dom", output_text="Kortom: 112 meter", error_message=message
        ).pk
        before = found("4f5e*") if not POSTGRES else None  # (the attack: the index held the key)
        new = db.forward(("streams", "0015_search_redacted"))
        if before is not None:
            assert before == [pk]
        assert found("4f5e*") == [] and found("migrate") == []
        assert found("incorrect") == [pk] and found("kortom") == [pk]
        row = new.get_model("streams", "Stream").objects.get(pk=pk)
    assert row.error_message == message  # verbatim
    assert row.search_error == "Incorrect API key provided: [redacted]"
    assert row.search_prompt is None and row.search_output is None  # nothing stored twice
