"""Full-text search over what was said: prompts, instructions, outputs and errors.

What is indexed, per stream: `prompt` (the last user input), `output_text` (the answer's text),
`error_message`, and `search_other`: everything else a person may look for, which
`rows.finished` writes when a stream ends (`other_text`: the instructions — Chat's system
message, Messages' `system` —, earlier inputs, reasoning summaries, and tool calls' names,
arguments and outputs).

The index is a thing people read (its matches, its snippets), so it is built from the
**redacted** text, never from the stored one (docs/search.md, docs/security.md): `derived`
takes every known secret out (`redacted`, streams.store.known_secrets) where a row's indexed
columns are written, into `search_prompt`, `search_output` and `search_error`, kept only where
redaction changed something (NULL: the column as it is), and `search_other`, which is the
search's own and stored redacted. `search_derived_ns` says when: a write that changes an
indexed column without it (a writer that forgot to derive) leaves it NULL (the database's own
triggers see to it), and a row without it is indexed as nothing at all until `maintain`
derives it again. A secret learned after a row was indexed (a pass-through key first forwarded
later, a configured key changed) is looked for in the index by its words, and the rows that
hold it are derived again (`maintain`, every few seconds in every server process).

The database keeps the index from those columns, whatever writes them (the recorder, imports,
rebuilds of a dead process's rows, retention's deletes, the admin):

- SQLite: an FTS5 table over the four texts (`streams_search`, external content: a view over
  the stream table, `source_sql`; the index only, the text stays in the stream's row), kept by
  triggers on the stream table; the `unicode61` tokenizer with diacritics removed (`één`
  finds `een`).
- PostgreSQL: a generated `tsvector` column (`search_vector`, the `simple` configuration: no
  stemming, no stop words, the same for Dutch and English) with a GIN index.

Both are written when a row is made (its prompt) and when it ends (the rest): never per event
(the writer's per-batch updates do not touch the indexed columns). Each indexed text is cut to
INDEXED_MAX_CHARS (a PostgreSQL `tsvector` is at most 1 MB: a longer answer would fail its
row's write). Migrations 0013 and 0015 make them; `manage.py rebuild_search` derives every row
again and remakes the index.

Queries (`parse`): words, "quoted phrases" and prefixes (`utre*`), all required, case and
(SQLite) accents ignored. `page` ranks the newest RANK_WINDOW matches among a queryset's
streams (BM25 on SQLite, `ts_rank_cd` on PostgreSQL; a match in the prompt weighs most: a word
in most streams would otherwise rank hundreds of thousands of rows) and gives each a snippet
around its best match, the matched words between markers (the face marks them:
dashboard/queries/stream_list.py); a snippet with anything redacted in it
(streams.store.known_secrets) is given redacted and without markers, so no mark ever splits a secret
that the egress gate must see whole.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass

from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from streams.store import known_secrets

log = logging.getLogger(__name__)

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
# Around each match in a snippet (private-use: never in a stored text's snippet otherwise); the
# face turns them into marks (dashboard/queries/stream_list.py).
MATCH_START, MATCH_STOP = "\ue000", "\ue001"
_LT, _GT = "\ue002", "\ue003"
_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r'["“”]([^"“”]*)["“”]?|(\S+)')

# What the index reads instead of a column where redaction changed it (NULL: the column itself);
# `search_other` has no copy: it is the search's own column, stored redacted.
COPIES = {
    "prompt": "search_prompt",
    "output_text": "search_output",
    "error_message": "search_error",
}
OTHER = "search_other"
# When a row's search text was derived (ns since the epoch); NULL: the index holds nothing of it.
MARK = "search_derived_ns"
DERIVED = (*COPIES.values(), OTHER, MARK)  # the columns `derived` writes
# A secret cut by INDEXED_MAX_CHARS is still seen whole by the redaction: it reads this much more.
_CUT_MARGIN = 1024


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
    instructions (Responses' `instructions`, Messages' `system`; Chat's system message is one of
    its messages) and its input texts (the prompt is its last one), the reasoning summaries,
    message parts that are not the output text (refusals), and each tool call's name,
    arguments and output. Cut to OTHER_MAX_CHARS."""
    pieces = []
    body = request_body if isinstance(request_body, dict) else {}
    pieces += _input_texts(body.get("instructions", body.get("system")))
    # (Chat Completions and Messages send `messages`: rows.input_of, which this may not import)
    inputs = body.get("input", body.get("messages"))
    prompt = prompt_of(inputs)  # (a column of its own)
    pieces += [t for t in _input_texts(inputs) if t != prompt]
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
    """The texts of an input (a string or a list of messages), or of Messages' `system` (a
    string or a list of text blocks)."""
    if isinstance(value, str):
        return [value]
    out = []
    for item in value if isinstance(value, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            out.append(item["text"])  # (a block of Messages' `system`)
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


# ---- the index's text: derived, redacted ---------------------------------------------------


def redacted(text: str) -> str:
    """`text` without any secret this server knows, under the rules as every process knows them
    now (the one redaction the index's text passes: `derived` calls it for each column)."""
    rules = known_secrets.fresh_rules()
    return rules.text(text) if rules else text


def derived(fields) -> dict:
    """The search columns for the indexed columns among `fields` ({column: stored value}), with
    a new `search_derived_ns`; {} when `fields` has none of them. A copy is None where the
    redaction changed nothing of what the index reads (the column is read then)."""
    out = {}
    for column, copy in COPIES.items():
        if column in fields:
            text = fields[column] or ""
            indexed = text[:INDEXED_MAX_CHARS]
            clean = redacted(text[: INDEXED_MAX_CHARS + _CUT_MARGIN])[:INDEXED_MAX_CHARS]
            out[copy] = None if clean == indexed else clean
    if OTHER in fields:
        out[OTHER] = redacted(fields[OTHER] or "")[:OTHER_MAX_CHARS]
    if out:
        out[MARK] = new_mark()
    return out


_mark_lock = threading.Lock()
_last_mark = 0


def new_mark() -> int:
    """A `search_derived_ns` no derivation in this process had: the database tells a write that
    derived (the value changed) from one that did not (it did not: the row is left underived)."""
    global _last_mark
    with _mark_lock:
        _last_mark = max(time.time_ns(), _last_mark + 1)
        return _last_mark


def source_sql(row=""):
    """The four texts the index holds of a stream row, in COLUMNS order, as SQL over `row` (a
    table alias, a trigger's `old` or `new`; none: the row itself), the same on SQLite and
    PostgreSQL: the redacted copy where there is one, cut to INDEXED_MAX_CHARS; nothing at all
    for a row not derived since its indexed columns last changed."""
    p = f"{row}." if row else ""
    texts = (
        f"coalesce({p}search_prompt, {p}prompt)",
        f"substr(coalesce({p}search_output, {p}output_text), 1, {INDEXED_MAX_CHARS})",
        f"substr(coalesce({p}search_error, {p}error_message), 1, {INDEXED_MAX_CHARS})",
        f"substr({p}search_other, 1, {INDEXED_MAX_CHARS})",
    )
    return [f"CASE WHEN {p}{MARK} IS NULL THEN '' ELSE {t} END" for t in texts]


def rebuild() -> None:
    """The index remade from the rows (SQLite's FTS5 table; PostgreSQL's column is generated)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")


CHUNK = 200  # rows derived again per transaction, and at most per `maintain` turn


def rederive_rows(Stream, ids, *, from_source=False) -> int:
    """The search text of the rows `ids` of `Stream` (the model, or a migration's) derived again
    under the current rules, in one transaction with the rows locked (PostgreSQL; on SQLite
    writers wait for it): written where it changes or the row had none, with a new
    `search_derived_ns`. `from_source`: `search_other` made again from the request and the
    output parts (`other_text`), else the stored one redacted again. Returns the rows written."""
    columns = ["pk", *COPIES, OTHER, *COPIES.values(), MARK]
    if from_source:
        columns += ["request_body", "parts"]
    changed, marked = [], []
    with transaction.atomic():
        rows = Stream.objects.filter(pk__in=list(ids)).select_for_update().values_list(*columns)
        for values in rows:
            row = dict(zip(columns, values, strict=True))
            texts = {column: row[column] for column in (*COPIES, OTHER)}
            if from_source:
                texts[OTHER] = other_text(row["request_body"], row["parts"])
            new = derived(texts)
            del new[MARK]
            if any(new[column] != row[column] for column in new):
                changed.append(Stream(pk=row["pk"], **new))
            elif row[MARK] is None:
                marked.append(row["pk"])
        mark = new_mark()
        for stream in changed:
            setattr(stream, MARK, mark)
        if changed:
            Stream.objects.bulk_update(changed, list(DERIVED))
        if marked:
            Stream.objects.filter(pk__in=marked).update(**{MARK: mark})
    return len(changed) + len(marked)


def rederive(Stream, *, from_source=False, chunk=CHUNK) -> int:
    """Every row's search text derived again (`rederive_rows`, a chunk at a time); how many rows
    were written."""
    written, last = 0, 0
    while True:
        ids = list(
            Stream.objects.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:chunk]
        )
        if not ids:
            return written
        written += rederive_rows(Stream, ids, from_source=from_source)
        last = ids[-1]


def holding_query(secret):
    """An index query (FTS5 or `to_tsquery`) for the rows whose text may hold `secret`: any of
    its words of 4 or more characters as a prefix, a word with a digit in it (random text) by
    its first 4 characters (a word cut short is found too; 4 random characters rarely begin
    anything else), other words by their first 8; None when it has no such word. What a row
    holds inside a longer word, or from the middle of one of the secret's words on, is not
    found (docs/security.md)."""
    words = []
    for word in re.findall(r"[^\W_]+", secret.lower()):
        if len(word) < 4:
            continue
        word = word[:4] if any(c.isdigit() for c in word) else word[:8]
        if word not in words:
            words.append(word)
    if not words:
        return None
    if connection.vendor == "postgresql":
        return " | ".join(f"{w}:*" for w in words)
    return " OR ".join(f'"{w}"*' for w in words)


def holding_ids(query, after=0, limit=CHUNK):
    """Ids above `after` of the rows the index finds for `holding_query`'s `query`, in order."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT id FROM streams_stream WHERE search_vector @@ to_tsquery('simple', %s) "
                "AND id > %s ORDER BY id LIMIT %s",
                [query, after, limit],
            )
        else:
            cursor.execute(
                f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH %s AND rowid > %s "
                "ORDER BY rowid LIMIT %s",
                [query, after, limit],
            )
        return [row[0] for row in cursor.fetchall()]


# A secret first seen this long ago is looked for: every process derives with it by then (they
# read other processes' keys at most REFRESH_S after they are sealed), so no row derived without
# it is still on its way to the database when the index is asked.
SWEEP_GRACE_S = 10.0


class _Sweeps:
    """Which secrets this process knows the index was swept for, and those it is sweeping."""

    def __init__(self):
        self.done = set()  # fingerprints
        self.pending = {}  # fingerprint -> secret
        self.first_seen = {}  # fingerprint -> monotonic seconds
        self.cursor = {}  # fingerprint -> the last row id swept
        self.rules = None


_sweeps = _Sweeps()


def maintain(budget=CHUNK, now=None) -> int:
    """One turn of keeping the index's text derived, at most `budget` rows (every server process
    runs one per orphan sweep, streams/run/runner.py): the rows a writer left underived, then
    the rows that may hold a secret learned since they were derived (`holding_query`), a
    secret recorded as swept (`SweptSecret`) once all of its rows were. Returns the rows
    written."""
    from streams.models import Stream

    now = time.monotonic() if now is None else now
    underived = Stream.objects.filter(**{f"{MARK}__isnull": True}).order_by("pk")
    ids = list(underived.values_list("pk", flat=True)[:budget])
    written = rederive_rows(Stream, ids) if ids else 0
    budget -= len(ids)
    if budget > 0:
        written += _sweep_new_secrets(Stream, budget, now)
    return written


def _sweep_new_secrets(Stream, budget, now):
    from streams.models import SweptSecret
    from streams.store import sealed

    rules = known_secrets.fresh_rules()
    if rules is not _sweeps.rules:
        _sweeps.rules = rules
        current = {sealed.fingerprint(s): s for s in (rules.secrets if rules else ())}
        unknown = [fp for fp in current if fp not in _sweeps.done]
        for i in range(0, len(unknown), 500):
            chunk = unknown[i : i + 500]
            found = SweptSecret.objects.filter(fingerprint__in=chunk).values_list(
                "fingerprint", flat=True
            )
            _sweeps.done.update(found)
        _sweeps.pending = {fp: s for fp, s in current.items() if fp not in _sweeps.done}
    written = 0
    for fp, secret in list(_sweeps.pending.items()):
        if budget <= 0:
            break
        if now - _sweeps.first_seen.setdefault(fp, now) < SWEEP_GRACE_S:
            continue
        query = holding_query(secret)
        ids = holding_ids(query, _sweeps.cursor.get(fp, 0), budget) if query else []
        if ids:
            written += rederive_rows(Stream, ids)
            _sweeps.cursor[fp] = ids[-1]
            if len(ids) == budget:
                break  # (more may follow: the next turn)
            budget -= len(ids)
        SweptSecret.objects.get_or_create(fingerprint=fp)
        log.info("search: the rows that may hold a newly known secret were derived again")
        _sweeps.done.add(fp)
        del _sweeps.pending[fp]
        _sweeps.cursor.pop(fp, None)
    return written


def swept_all(SweptSecret) -> None:
    """Record every secret known now as swept (after every row was derived under them)."""
    from streams.store import sealed

    rules = known_secrets.fresh_rules()
    prints = {sealed.fingerprint(s) for s in (rules.secrets if rules else ())}
    SweptSecret.objects.bulk_create(
        [SweptSecret(fingerprint=fp) for fp in prints], ignore_conflicts=True, batch_size=500
    )
    _sweeps.done |= prints


def forget_sweeps():
    """Tests: this process knows of no sweep."""
    _sweeps.__init__()


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
    # Plain text (redacted), the index's matches between MATCH_START and MATCH_STOP; without
    # them when anything in it was redacted. Not HTML: the face marks it.
    snippet: str

    @property
    def text(self):
        """The snippet as plain text (redacted), without the match markers."""
        return self.snippet.replace(MATCH_START, "").replace(MATCH_STOP, "")


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
        try:
            visible = qs.order_by().values("pk").query.sql_with_params()
        except EmptyResultSet:  # (`qs` can hold nothing: someone in no project)
            return [], False
    offset = (number - 1) * PAGE_SIZE
    if connection.vendor == "postgresql":
        rows = _postgres_page(terms, qs, offset)
    else:
        rows = _sqlite_page(terms, visible, offset)
    more = len(rows) > PAGE_SIZE and number < MAX_PAGES
    hits = [Hit(pk, rank, _snippet(snippet)) for pk, rank, snippet in rows[:PAGE_SIZE]]
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
        [*join_params, match, *where_params, floor, RANK_WINDOW, MATCH_START, MATCH_STOP, match]
        + [PAGE_SIZE + 1, offset],
    )
    rows = cursor.fetchall()
    found = rows[0][3] if rows else 0
    return [(pk, -rank, snippet) for pk, rank, snippet, _ in rows], found


def _postgres_page(terms, qs, offset):
    # the newest matches, then their rank, then a headline for the page's rows only, from what
    # the index holds (`source_sql`: the redacted text; `<` and `>` hidden from ts_headline,
    # which drops what looks like a tag: `_snippet` puts them back)
    headline = (
        f"ts_headline('simple', translate(concat_ws(' … ', {', '.join(source_sql('s'))}), "
        f"'<>', '{_LT}{_GT}'), q, "
        f"'StartSel={MATCH_START}, StopSel={MATCH_STOP}, MaxWords={SNIPPET_WORDS}, MinWords=12, "
        'MaxFragments=1, FragmentDelimiter=" … "\')'
    )
    # The query is a constant in each statement, not a CTE's column: the planner then reads
    # the word's frequency from the column's statistics, and for a common word walks the
    # primary key newest first (24 ms for the newest 2,000 of 104,000 matches at 1M streams)
    # instead of fetching every match through the GIN index (250 ms; docs/search.md).
    query = "to_tsquery('simple', %s)"
    q = tsquery(terms)
    # The match is one more condition on the filtered streams' own rows, not the matches
    # tested against a list of them (`id IN (SELECT id … WHERE project_id = …)`): the planner
    # then ANDs the match's bitmap with the project's and reads the heap for the few of both
    # (a member's phrase at 1M streams: 1,300 buffers), where it had looked each of the
    # phrase's 62,000 matches up again by primary key for its project (302,000 buffers).
    matches = qs.order_by().filter(
        RawSQL(f'"streams_stream"."search_vector" @@ {query}', [q], output_field=BooleanField())
    )
    recent, recent_params = (
        matches.order_by("-pk").values_list("pk")[:RANK_WINDOW].query.sql_with_params()
    )
    with connection.cursor() as cursor:
        # (a filtered page's phrase is ANDed with its filter's index, the project's: the
        # newest-first probe would read the phrase's index entries a second time for nothing
        # — a project's newest 50,000 streams of every project's hold few of its matches)
        if any(len(t.words) > 1 for t in terms) and not qs.query.where:
            oldest = _newest_phrases(cursor, matches)
            if oldest is not None:
                recent, recent_params = (
                    matches.filter(pk__gte=oldest).values_list("pk").query.sql_with_params()
                )
        cursor.execute(
            f"WITH recent(id) AS ({recent}), "
            f"hits AS (SELECT s.id, ts_rank_cd(s.search_vector, {query}) AS r "
            "FROM streams_stream s JOIN recent ON recent.id = s.id "
            "ORDER BY r DESC, s.id DESC LIMIT %s OFFSET %s) "
            f"SELECT hits.id, hits.r, {headline} FROM hits "
            f"JOIN streams_stream s ON s.id = hits.id, {query} AS q "
            "ORDER BY hits.r DESC, hits.id DESC",
            [*recent_params, q, PAGE_SIZE + 1, offset, q],
        )
        return list(cursor.fetchall())


def _newest_phrases(cursor, matches):
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
    newest = matches.filter(pk__gt=top - NEWEST_FIRST).order_by("-pk").values_list("pk")
    sql, params = newest[:RANK_WINDOW].query.sql_with_params()
    cursor.execute(f"SELECT min(id), count(*) FROM ({sql}) AS r(id)", params)
    oldest, found = cursor.fetchone()
    return oldest if found == RANK_WINDOW else None


def _snippet(snippet):
    """The snippet as plain text, the index's matches between MATCH_START and MATCH_STOP.
    Redacted first: a snippet that held a secret is given redacted and without the markers (a
    mark inside it would hide the secret's shape from the egress gate)."""
    snippet = re.sub(r"\s+", " ", snippet or "").strip().replace(_LT, "<").replace(_GT, ">")
    plain = snippet.replace(MATCH_START, "").replace(MATCH_STOP, "")
    redacted = known_secrets.redact(plain)
    return redacted if redacted != plain else snippet
