"""The one home of an event's row: the columns written per event (`ROW_COLUMNS`), `row`, which
makes a row's values, and what it reads of a received event (`Received`) and of the checker's
verdict (`Checked`). The live message made from the same event, and how it is encoded for a
client, are the outward shapes' (streams/shapes/event_message.py).

The row is a plain tuple, positional, because it is made and carried per event on the hottest
path (a tuple of atoms is one the garbage collector stops tracking; a dict or an object per event
cost measurably: docs/performance.md, "Recorder"). Its order is declared once, here: every other
module names a position (`ROW_T_US`) or a column, never a number.

A new column of `Event` is added to the model, its migration and here (`ROW_COLUMNS` and `row`,
or `DATABASE_FILLS`); tests/streams/shapes/test_event_shape.py walks the model and fails on a column
placed nowhere. The writers (the recorder, the importer, `seed_demo`'s SQL) take the columns from
here.
"""

from typing import NamedTuple

# ---------------------------------------------------------------------------------------------
# The row: what is written per event (streams/store/rows.py, `insert_flat`)

ROW_COLUMNS = (
    "stream_id",
    "index",
    "t_us",
    "received_at",
    "event_name",
    "sse_id",
    "type",
    "sequence_number",
    "output_index",
    "content_index",
    "is_json",
    "data",
    "raw",
    "preamble",
)
# A proxied stream's rows: the same, plus when the event was handed to the client. Apart, so the
# rows of every other stream bind one value less (a column more costs every insert:
# docs/performance.md, "Recorder").
PROXIED_ROW_COLUMNS = (*ROW_COLUMNS, "sent_us")
# Columns of `Event` no row carries, and why.
DATABASE_FILLS = {"id": "the database numbers the rows"}

# Named positions in a row (the writer's thread rewrites `received_at` in place, from `t_us`).
ROW_STREAM_ID = ROW_COLUMNS.index("stream_id")
ROW_T_US = ROW_COLUMNS.index("t_us")
ROW_RECEIVED_AT = ROW_COLUMNS.index("received_at")


class Received(NamedTuple):
    """What `row` reads of a received event, for a caller with no parsed SSE event of its own
    (a whole body kept as one event). A parsed event (httpx-sse's, a capture's) has these."""

    event_name: str
    sse_id: str
    data: str
    raw: bytes | None
    preamble: str = ""  # the comment lines before it (`Event.preamble`)


class Checked(NamedTuple):
    """What `row` and `message` read of the checker's verdict on an event (a `checks` result
    has these), kept small for a caller that holds many of them (an import)."""

    type: str
    sequence_number: int | None
    output_index: int | None
    content_index: int | None
    is_json: bool

    @classmethod
    def of(cls, result):
        return cls(
            result.type,
            result.sequence_number,
            result.output_index,
            result.content_index,
            result.is_json,
        )


def row(stream_id, index, t_us, received_at, sse, checked):
    """An event's row values (`ROW_COLUMNS`) from the received `sse` (`Received`'s fields) and
    the checker's `checked` (`Checked`'s fields). `received_at`: the receipt time, or (the
    recorder's) the stream's wall-clock start, which the writer turns into start + t_us."""
    return (
        stream_id,
        index,
        t_us,
        received_at,
        sse.event_name,
        sse.sse_id,
        checked.type,
        checked.sequence_number,
        checked.output_index,
        checked.content_index,
        checked.is_json,
        sse.data,
        sse.raw,
        sse.preamble,
    )


def proxied_row(stream_id, index, t_us, received_at, sse, checked, sent_us):
    """`row` of a proxied stream (`PROXIED_ROW_COLUMNS`): `sent_us` is when the proxy handed the
    event to its client (None: it never did)."""
    return (*row(stream_id, index, t_us, received_at, sse, checked), sent_us)


def sql_row(**exprs):
    """`(ROW_COLUMNS, their SQL expressions)` for an INSERT … SELECT of event rows (`seed_demo`):
    `exprs` by column name; a column not given is NULL (a nullable column its SQL does not know
    of yet), a name that is no column is refused."""
    unknown = set(exprs) - set(ROW_COLUMNS)
    if unknown:
        raise ValueError(f"not a column of an event row: {', '.join(sorted(unknown))}")
    return ROW_COLUMNS, [exprs.get(column, "NULL") for column in ROW_COLUMNS]
