"""The streams list as CSV (`/streams.csv`, dashboard/views/exports.py): its columns, a row's
cells, the guard against spreadsheet formulas, and the body written in pieces.

Plain Python over dicts of a `Stream` queryset's `.values(*FIELDS)`: the view hands it the
list's own queryset (`queries.stream_list.filter_streams` over `streams_for`), so the file holds
exactly the streams the list shows for the same query string, newest first, without paging.

- **Data, never translated**: the header is the columns' names, values are as stored (status
  and source as their codes, times UTC ISO 8601, cost as a decimal string in its currency).
  Unknown is an empty cell, never 0 (a cost without a price, a count nobody reported).
- **CSV injection**: prompts, model ids, sessions, tags, error codes come from users and
  upstreams. A text cell a spreadsheet would read as a formula (starting with `=`, `+`, `-`,
  `@`, a tab, CR or LF) gets a leading `'` (OWASP's advice); numbers we format ourselves are
  left alone. Secrets are not this module's business: the body leaves through the egress gate.
- **Bounded**: rows are read with `.iterator()` in chunks and written a piece at a time; at
  most `limit` rows (STREAMSCOPE_CSV_MAX_ROWS), and a cut file ends with a line saying so.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import AsyncIterator, Iterator

from django.db.models.functions import Left

from streams.core import pricing
from streams.serve.export import drive
from streams.store import scores

COLUMNS = (
    "id",
    "created_at",
    "status",
    "source",
    "requested_model",
    "resolved_model",
    "session",
    "tags",
    "ttft_ms",
    "duration_ms",
    "event_count",
    "output_deltas",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "usage_source",
    "cost",
    "cost_currency",
    "price_ref",
    "error_code",
    "scores",
    "scores_positive",
    "thumbs_up",
    "thumbs_down",
    "comments",
    "prompt",
)
PROMPT_MAX = 200  # characters of the prompt in a row (cut in the database)
# What is read of each row: the columns as stored, the cost as nano-units, the prompt cut.
FEEDBACK = ("scores", "scores_positive", "thumbs_up", "thumbs_down", "comments")  # (Summary)
FIELDS = tuple(c for c in COLUMNS if c not in ("cost", "prompt", *FEEDBACK)) + (
    "cost_nanos",
    "prompt_cut",
)
READ_CHUNK = 2000  # rows per database round trip
ROWS_PER_PIECE = 500  # rows written into one piece of the response
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


def guard(text: str) -> str:
    """`text` as a cell no spreadsheet runs: a leading `'` when it starts like a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def lines(rows) -> Iterator[str]:
    """CSV lines of already computed rows (the first the header), each text cell `guard`ed:
    the usage page's per-model table (a model id is the upstream's)."""
    for row in rows:
        out = io.StringIO()
        csv.writer(out, lineterminator="\r\n").writerow(
            [guard(c) if isinstance(c, str) else c for c in row]
        )
        yield out.getvalue()


def _number(value) -> str:
    return "" if value is None else str(value)


def _utc(value) -> str:
    return "" if value is None else value.astimezone(dt.UTC).isoformat()


def _tags(value) -> str:
    return ",".join(str(t) for t in value) if isinstance(value, list) else ""


NOTHING = scores.Summary()


def cells(row: dict, feedback=NOTHING) -> list[str]:
    """One stream's cells, in COLUMNS order, from a row of `rows(queryset)` and its scores'
    `scores.Summary`."""
    text = guard  # (every text from outside; our own numbers and times as they are)
    return [
        _number(row["id"]),
        _utc(row["created_at"]),
        text(row["status"]),
        text(row["source"]),
        text(row["requested_model"]),
        text(row["resolved_model"]),
        text(row["session"]),
        text(_tags(row["tags"])),
        _number(row["ttft_ms"]),
        _number(row["duration_ms"]),
        _number(row["event_count"]),
        _number(row["output_deltas"]),
        _number(row["input_tokens"]),
        _number(row["output_tokens"]),
        _number(row["total_tokens"]),
        _number(row["cached_input_tokens"]),
        _number(row["reasoning_tokens"]),
        text(row["usage_source"]),
        pricing.amount_text(row["cost_nanos"]),
        text(row["cost_currency"]),
        text(row["price_ref"]),
        text(row["error_code"]),
        str(feedback.n),
        str(feedback.positive),
        str(feedback.up),
        str(feedback.down),
        str(feedback.comments),
        text(row["prompt_cut"] or ""),
    ]


def rows(queryset):
    """`queryset` (of `Stream`) as the dicts `cells` reads, newest first (the list's order)."""
    return (
        queryset.order_by("-created_at", "-pk")
        .annotate(prompt_cut=Left("prompt", PROMPT_MAX))
        .values(*FIELDS)
    )


def truncated(queryset, limit: int) -> bool:
    """Whether `queryset` holds more than `limit` streams (one row read past the cut)."""
    return rows(queryset)[limit : limit + 1].exists()


def marker(limit: int) -> str:
    """The last line of a file that was cut."""
    return f"# truncated at {limit} rows"


def iter_csv(queryset, limit: int, cut: bool | None = None) -> Iterator[str]:
    """The CSV body in pieces: the header, then at most `limit` streams of `queryset`, then,
    when there were more (`cut`, or one more row came), the `marker` line."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    n = 0
    piece = []
    for row in rows(queryset)[: limit + 1].iterator(chunk_size=READ_CHUNK):
        if n == limit:
            cut = True
            break
        piece.append(row)
        n += 1
        if len(piece) == ROWS_PER_PIECE:
            _write(writer, piece)
            piece = []
            yield _take(buffer)
    _write(writer, piece)
    if cut:
        writer.writerow([marker(limit)])
    yield _take(buffer)


def _write(writer, piece):
    """Rows with their scores (one lookup per piece)."""
    feedback = scores.summaries(row["id"] for row in piece)
    for row in piece:
        writer.writerow(cells(row, feedback.get(row["id"], NOTHING)))


async def aiter_csv(queryset, limit: int, cut: bool | None = None) -> AsyncIterator[str]:
    """`iter_csv` for the ASGI server: driven a piece at a time on the ORM's thread."""
    async for piece in drive(iter_csv, queryset, limit, cut):
        yield piece


def _take(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text
