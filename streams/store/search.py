"""Full-text search over what was said: prompts, instructions, outputs and errors.

What is indexed, per stream: `prompt` (the last user input), `output_text` (the answer's text),
`error_message`, and `search_other`: everything else a person may look for, which
`rows.finished` writes when a stream ends (`other_text`: the instructions, earlier inputs,
reasoning summaries, and tool calls' names, arguments and outputs). The index follows those
columns by construction, whatever writes them (the recorder, imports, rebuilds of a dead
process's rows, retention's deletes, the admin): the database keeps it.

- SQLite: an FTS5 table over the four columns (`streams_search`, external content: the index
  only, the text stays in the stream's row), kept by triggers on the stream table; the
  `unicode61` tokenizer with diacritics removed (`één` finds `een`).
- PostgreSQL: a generated `tsvector` column (`search_vector`, the `simple` configuration: no
  stemming, no stop words, the same for Dutch and English) with a GIN index.

Both are written when a row is made (its prompt) and when it ends (the rest): never per event
(the writer's per-batch updates do not touch the indexed columns). Each indexed text is cut to
INDEXED_MAX_CHARS (a PostgreSQL `tsvector` is at most 1 MB: a longer answer would fail its
row's write). Migration 0013 makes both; `manage.py rebuild_search` refills them.

Queries (`parse`): words, "quoted phrases" and prefixes (`utre*`), all required, case and
(SQLite) accents ignored. `page` ranks the newest RANK_WINDOW matches among a queryset's
streams (BM25 on SQLite, `ts_rank_cd` on PostgreSQL; a match in the prompt weighs most: a word
in most streams would otherwise rank hundreds of thousands of rows) and gives each a snippet
around its best match, the matched words marked; a snippet with anything redacted in it
(streams.store.known_secrets) is shown redacted and unmarked, so no mark ever splits a secret
that the egress gate must see whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import connection
from django.utils.html import escape
from django.utils.safestring import mark_safe

from streams.store import known_secrets

# The indexed columns, in the FTS table's order (their weights: bm25's, and setweight's letter).
COLUMNS = ("prompt", "output_text", "error_message", "search_other")
INDEXED_MAX_CHARS = 200_000
OTHER_MAX_CHARS = INDEXED_MAX_CHARS
TABLE = "streams_search"
MAX_TERMS = 16  # words and phrases in one query
PAGE_SIZE = 50
MAX_PAGES = 20  # results beyond PAGE_SIZE * MAX_PAGES are not shown: narrow the search
RANK_WINDOW = 2_000  # the newest matches ranked (see `page`)
MATCHES_TESTED = 10_000  # SQLite: matches tested one by one before filters drive (`_sqlite_page`)
NEWEST_FIRST = 50_000  # PostgreSQL: the newest streams searched first (`_postgres_oldest`)
SNIPPET_WORDS = 24
_START, _STOP = "\ue000", "\ue001"  # (private-use: never in a stored text's snippet otherwise)
_LT, _GT = "\ue002", "\ue003"
_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r'["“”]([^"“”]*)["“”]?|(\S+)')


# ---- what is indexed -----------------------------------------------------------------------------


def prompt_of(input):
    """The last user text of an input, for lists and search."""
    if isinstance(input, str):
        return input
    for item in reversed(input if isinstance(input, list) else ()):
        if isinstance(item, dict) and item.get("role", "user") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    c["text"]
                    for c in content
                    if isinstance(c, dict) and isinstance(c.get("text"), str)
                )
    return ""


def other_text(request_body, parts) -> str:
    """What a search finds besides the prompt, the output text and the error: the request's
    instructions and its input texts (the prompt is its last one), the reasoning summaries,
    message parts that are not the output text (refusals), and each tool call's name,
    arguments and output. Cut to OTHER_MAX_CHARS."""
    pieces = []
    body = request_body if isinstance(request_body, dict) else {}
    if isinstance(body.get("instructions"), str):
        pieces.append(body["instructions"])
    prompt = prompt_of(body.get("input"))  # (a column of its own)
    pieces += [t for t in _input_texts(body.get("input")) if t != prompt]
    for item in parts if isinstance(parts, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            pieces += [s for s in item.get("summary") or () if isinstance(s, str)]
        elif kind == "message":
            pieces += [
                p["text"]
                for p in item.get("parts") or ()
                if isinstance(p, dict)
                and p.get("type") not in ("output_text", None)
                and isinstance(p.get("text"), str)
            ]
        elif "arguments" in item or "name" in item:  # a tool call
            for key in ("name", "arguments", "output"):
                value = item.get(key)
                if isinstance(value, str):
                    pieces.append(value)
                elif value is not None:
                    pieces.append(_text_of(value))
    text = "\n".join(p for p in pieces if p)
    return text[:OTHER_MAX_CHARS]


def _input_texts(value):
    if isinstance(value, str):
        return [value]
    out = []
    for item in value if isinstance(value, list) else ():
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [
                c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)
            ]
        elif isinstance(item.get("output"), str):  # a tool's output sent back
            out.append(item["output"])
    return out


def _text_of(value):
    """The strings inside a JSON value (a tool's structured output), space-separated."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(_text_of(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_text_of(v) for v in value)
    return "" if value is None or isinstance(value, bool) else str(value)


def refill(Stream, chunk=2000) -> int:
    """`search_other` of every row made again from its request and output parts (`Stream`: the
    model, or a migration's historical one); how many rows changed. The index follows by
    itself; `rebuild` also remakes SQLite's from the rows."""
    changed = 0
    pending = []
    rows = Stream.objects.order_by("pk").values_list("pk", "request_body", "parts", "search_other")
    for pk, body, parts, before in rows.iterator(chunk_size=chunk):
        text = other_text(body, parts)
        if text != before:
            pending.append(Stream(pk=pk, search_other=text))
        if len(pending) >= chunk:
            changed += len(pending)
            Stream.objects.bulk_update(pending, ["search_other"])
            pending = []
    if pending:
        changed += len(pending)
        Stream.objects.bulk_update(pending, ["search_other"])
    return changed


def rebuild() -> None:
    """The index remade from the rows (SQLite's FTS5 table; PostgreSQL's column is generated)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")


def index_bytes() -> int:
    """What the index takes on disk: SQLite's FTS5 tables; PostgreSQL's GIN index and the
    generated column's values (a full scan: for benches and notes, not pages)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_relation_size('stream_search') + "
                "(SELECT coalesce(sum(pg_column_size(search_vector)), 0) FROM streams_stream)"
            )
        else:
            cursor.execute(f"SELECT sum(pgsize) FROM dbstat WHERE name LIKE '{TABLE}%'")
        return int(cursor.fetchone()[0] or 0)


# ---- queries -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # one word, or a phrase's words in order
    prefix: bool = False  # the last word is a prefix


def parse(q: str) -> list[Term]:
    """The terms of a query: "quoted phrases", words, and prefixes (`word*`). Only word
    characters count (as the tokenizers split text); at most MAX_TERMS terms."""
    terms = []
    for phrase, bare in _TOKEN.findall(q or ""):
        raw = phrase if phrase else bare
        words = tuple(w.lower() for w in _WORD.findall(raw))
        if not words:
            continue
        prefix = not phrase and raw.endswith("*") and len(words) == 1
        if bare and len(words) > 1:  # `e-mail`, `U.S.`: a phrase, as the index holds it
            terms.append(Term(words))
        else:
            terms.append(Term(words, prefix))
        if len(terms) >= MAX_TERMS:
            break
    return terms


def fts5_match(terms) -> str:
    """An FTS5 MATCH expression of `terms` (every term required)."""
    return " ".join('"' + " ".join(t.words) + '"' + ("*" if t.prefix else "") for t in terms)


def tsquery(terms) -> str:
    """A `to_tsquery('simple', …)` expression of `terms` (every term required)."""
    out = []
    for t in terms:
        words = list(t.words)
        if t.prefix:
            words[-1] += ":*"
        out.append("(" + " <-> ".join(words) + ")" if len(words) > 1 else words[0])
    return " & ".join(out)


# ---- results -------------------------------------------------------------------------------------


@dataclass
class Hit:
    pk: int
    rank: float
    snippet: str  # safe HTML: escaped, the matched words in <mark>
    text: str  # the snippet as plain text (redacted)


def matching(qs, terms):
    """`qs` narrowed to the streams whose indexed text matches every term (unranked)."""
    sql, params = _match_sql(terms)
    return qs.filter(pk__in=_RawIds(sql, params))


def page(qs, terms, number=1):
    """(hits of page `number` of `qs`'s matches, best first; whether there is a next page).

    Ranked among the newest RANK_WINDOW matches: a word that is in most streams matches
    hundreds of thousands of rows, and ranking them all cost seconds (docs/search.md); the
    newest of them are the ones a person is after, and a rarer word ranks all of its own."""
    number = max(1, min(number, MAX_PAGES))
    visible = None
    if qs.query.where:  # (all streams: no subquery to test each match against)
        visible = qs.order_by().values("pk").query.sql_with_params()
    offset = (number - 1) * PAGE_SIZE
    if connection.vendor == "postgresql":
        rows = _postgres_page(terms, visible, offset)
    else:
        rows = _sqlite_page(terms, visible, offset)
    more = len(rows) > PAGE_SIZE and number < MAX_PAGES
    hits = [Hit(pk, rank, *_marked(snippet)) for pk, rank, snippet in rows[:PAGE_SIZE]]
    return hits, more


def _match_sql(terms):
    if connection.vendor == "postgresql":
        return (
            "SELECT id FROM streams_stream WHERE search_vector @@ to_tsquery('simple', %s)",
            [tsquery(terms)],
        )
    return f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH %s", [fts5_match(terms)]


class _RawIds:
    """A raw `SELECT id …` usable as the right side of `pk__in` (a subquery, not a list)."""

    def __init__(self, sql, params):
        self.sql, self.params = sql, params

    def resolve_expression(self, *args, **kwargs):
        from django.db.models.expressions import RawSQL

        return RawSQL(self.sql, self.params).resolve_expression(*args, **kwargs)


def _sqlite_page(terms, visible, offset):
    """The page ranked among the newest RANK_WINDOW visible matches (`_ranked`), found one of
    two ways (docs/search.md, "Ranking and snippets"):

    - the matches drive: FTS5 walks its matches newest first and each is looked up in the
      stream table by primary key and tested against the filters (~1-3 µs a match at 1M
      streams), which stops soon while the filters keep many of them;
    - the filters drive: the filtered streams are listed once through their own indexes and
      each match is tested against that list. When the filters keep few matches (one user's
      failed streams: 291 of a word's 104,000), looking every match up took 331-401 ms a page.

    The matches drive among the newest MATCHES_TESTED of them; when those hold fewer than
    RANK_WINDOW visible ones and older matches exist, the filters drive."""
    match = fts5_match(terms)
    with connection.cursor() as cursor:
        floor = 0
        if visible is not None:
            # the MATCHES_TESTED-th newest match (FTS5 walks its doclist: 0.5 ms for 10,000)
            cursor.execute(
                f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH %s "
                "ORDER BY rowid DESC LIMIT 1 OFFSET %s",
                [match, MATCHES_TESTED - 1],
            )
            row = cursor.fetchone()
            floor = row[0] if row else 0
        rows, found = _ranked(cursor, match, _filtered(visible, by_filter=False), floor, offset)
        if floor and found < RANK_WINDOW:  # the filters keep few matches: they drive
            rows, _ = _ranked(cursor, match, _filtered(visible, by_filter=True), 0, offset)
        return rows


def _filtered(visible, *, by_filter):
    """How a statement over the FTS table `f` keeps to the visible streams: (a join, its
    parameters, a condition after the MATCH, its parameters).

    - the matches drive: the visible streams joined by primary key, each match looked up in
      the stream table (a `rowid IN (…)` test instead made FTS5 look each candidate up anew
      in its index: 94 ms for 2,000);
    - the filters drive (`by_filter`): `+f.rowid IN (the visible streams)`, which SQLite
      answers from a temporary index of them made once per statement, read through the
      filters' own indexes; the unary plus keeps the IN list from being handed to FTS5 as
      rowids to look up one by one."""
    if visible is None:
        return "", [], "", []
    sql, params = visible[0], list(visible[1])
    if by_filter:
        return "", [], f"AND +f.rowid IN ({sql})", params
    return f"JOIN ({sql}) AS v ON v.pk = f.rowid", params, "", []


def _ranked(cursor, match, keep, floor, offset):
    """(the page's rows ranked among the newest RANK_WINDOW visible matches from id `floor` on,
    how many of those there are; 0 when the page is empty).

    One statement: `hits`, the newest visible matches (the filters tested once, in `keep`),
    then their rank from the oldest of them on, each match tested against `hits` alone (with
    no filters every match from there on is one of them)."""
    join, join_params, where, where_params = keep
    among_hits = "AND +f.rowid IN (SELECT id FROM hits) " if join or where else ""
    cursor.execute(
        f"WITH hits AS (SELECT f.rowid AS id FROM {TABLE} f {join} "
        f"WHERE f.{TABLE} MATCH %s {where} AND f.rowid >= %s "
        "ORDER BY f.rowid DESC LIMIT %s) "
        # bm25 weights, in COLUMNS order: the prompt most, the rest alike
        f"SELECT f.rowid, bm25({TABLE}, 4.0, 2.0, 1.0, 1.0) AS r, "
        f"snippet({TABLE}, -1, %s, %s, '…', {SNIPPET_WORDS}), (SELECT count(*) FROM hits) "
        f"FROM {TABLE} f WHERE f.{TABLE} MATCH %s AND f.rowid >= (SELECT min(id) FROM hits) "
        f"{among_hits}ORDER BY r, f.rowid DESC LIMIT %s OFFSET %s",
        [*join_params, match, *where_params, floor, RANK_WINDOW, _START, _STOP, match]
        + [PAGE_SIZE + 1, offset],
    )
    rows = cursor.fetchall()
    found = rows[0][3] if rows else 0
    return [(pk, -rank, snippet) for pk, rank, snippet, _ in rows], found


def _postgres_page(terms, visible, offset):
    within, params = ("", []) if visible is None else (f"AND s.id IN ({visible[0]})", visible[1])
    # the newest matches, then their rank, then a headline for the page's rows only
    # (`<` and `>` hidden from ts_headline, which drops what looks like a tag: `_marked` puts
    # them back)
    headline = (
        f"ts_headline('simple', translate(concat_ws(' … ', s.prompt, left(s.output_text, "
        f"{INDEXED_MAX_CHARS}), left(s.error_message, {INDEXED_MAX_CHARS}), s.search_other), "
        f"'<>', '{_LT}{_GT}'), q, "
        f"'StartSel={_START}, StopSel={_STOP}, MaxWords={SNIPPET_WORDS}, MinWords=12, "
        'MaxFragments=1, FragmentDelimiter=" … "\')'
    )
    # The query is a constant in each statement, not a CTE's column: the planner then reads
    # the word's frequency from the column's statistics, and for a common word walks the
    # primary key newest first (24 ms for the newest 2,000 of 104,000 matches at 1M streams)
    # instead of fetching every match through the GIN index (250 ms; docs/search.md).
    query = "to_tsquery('simple', %s)"
    q = tsquery(terms)
    recent, recent_params = (
        f"SELECT s.id FROM streams_stream s WHERE s.search_vector @@ {query} {within} "
        "ORDER BY s.id DESC LIMIT %s",
        [q, *params, RANK_WINDOW],
    )
    with connection.cursor() as cursor:
        if any(len(t.words) > 1 for t in terms):
            oldest = _newest_phrases(cursor, query, q, within, params)
            if oldest is not None:
                recent = "SELECT s.id FROM streams_stream s WHERE s.id >= %s AND "
                recent += f"s.search_vector @@ {query} {within}"
                recent_params = [oldest, q, *params]
        cursor.execute(
            f"WITH recent AS ({recent}), "
            f"hits AS (SELECT s.id, ts_rank_cd(s.search_vector, {query}) AS r "
            "FROM streams_stream s JOIN recent ON recent.id = s.id "
            "ORDER BY r DESC, s.id DESC LIMIT %s OFFSET %s) "
            f"SELECT hits.id, hits.r, {headline} FROM hits "
            f"JOIN streams_stream s ON s.id = hits.id, {query} AS q "
            "ORDER BY hits.r DESC, hits.id DESC",
            [*recent_params, q, PAGE_SIZE + 1, offset, q],
        )
        return list(cursor.fetchall())


def _newest_phrases(cursor, query, q, within, params):
    """With a phrase: the oldest id of the newest RANK_WINDOW visible matches if they are all
    among the newest NEWEST_FIRST streams, else None. The planner guesses a phrase's
    frequency low (3,856 for 62,400 at 1M streams) and fetched every match through the GIN
    index (233 ms); within the newest streams the same takes 40 ms. (Words need no such
    help: their frequency is known, and the one statement walks the primary key for a
    common one.)"""
    cursor.execute("SELECT max(id) FROM streams_stream")
    (top,) = cursor.fetchone()
    if top is None or top <= NEWEST_FIRST:
        return None
    cursor.execute(
        "SELECT min(id), count(*) FROM (SELECT s.id FROM streams_stream s "
        f"WHERE s.id > %s AND s.search_vector @@ {query} {within} ORDER BY s.id DESC LIMIT %s) r",
        [top - NEWEST_FIRST, q, *params, RANK_WINDOW],
    )
    oldest, found = cursor.fetchone()
    return oldest if found == RANK_WINDOW else None


def _marked(snippet):
    """(the snippet as safe HTML: escaped, the index's matches in <mark>; as plain text).
    Redacted first: a snippet that held a secret is shown redacted and without marks (a mark
    inside it would hide the secret's shape from the egress gate)."""
    snippet = re.sub(r"\s+", " ", snippet or "").strip().replace(_LT, "<").replace(_GT, ">")
    plain = snippet.replace(_START, "").replace(_STOP, "")
    redacted = known_secrets.redact(plain)
    if redacted != plain:
        return mark_safe(escape(redacted)), redacted
    out = []
    for i, piece in enumerate(re.split(f"[{_START}{_STOP}]", snippet)):
        out.append(f"<mark>{escape(piece)}</mark>" if i % 2 and piece else escape(piece))
    return mark_safe("".join(out)), plain
