"""The one home of an event's shape: its row (the columns written per event, and `row`, which
makes a row's values), its live message (the tuple the channel layer carries and the relay
reads back from the database: `MESSAGE_COLUMNS`, `message`, the named positions), and how a
message is encoded for a client (`event`, `stream_frame`).

Both shapes are plain tuples, positional, because they are made and carried per event on the
hottest path (a tuple of atoms is one the garbage collector stops tracking; a dict or an object
per event cost measurably: docs/performance.md, "Recorder"). Their order is declared once, here:
every other module names a position (`INDEX`, `DATA`) or a column, never a number.

A new column of `Event` is added to the model, its migration and here (`ROW_COLUMNS` and `row`,
or `DATABASE_FILLS`); tests/test_event_shape.py walks the model and fails on a column placed
nowhere. The writers (the recorder, the importer, `seed_demo`'s SQL) take the columns from here.
"""

from typing import NamedTuple

from streams.core import conf
from streams.store.public import dumps

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


# ---------------------------------------------------------------------------------------------
# The live message: one event in a channel-layer message, and as the relay reads it back

MESSAGE_COLUMNS = ("index", "type", "sequence_number", "t_us", "data")
# A proxied stream's events also say when the proxy handed them to its client.
PROXIED_MESSAGE_COLUMNS = (*MESSAGE_COLUMNS, "sent_us")
INDEX = MESSAGE_COLUMNS.index("index")
DATA = MESSAGE_COLUMNS.index("data")


def message(index, t_us, checked, data, inline_max=None):
    """The compact form of one event in a channel-layer message (`MESSAGE_COLUMNS`): a tuple,
    not a dict, because it is repeated thousands of times per second. `data` is None when it is
    too large to carry inline (RELAY_INLINE_MAX_BYTES, or `inline_max` read once by a hot
    caller); the consumer then reads it from the database. `checked`: `Checked`'s fields."""
    if inline_max is None:
        inline_max = conf.get().relay_inline_max_bytes
    if data is not None and len(data) > inline_max:
        data = None
    return (index, checked.type, checked.sequence_number, t_us, data)


def proxied(message, sent_us):
    """`message` of a proxied stream (`PROXIED_MESSAGE_COLUMNS`): the consumer needs no read for
    when the client had it."""
    return (*message, sent_us)


def with_data(message, data):
    """`message` with its data (read from the database when it was too large to inline)."""
    return (*message[:DATA], data, *message[DATA + 1 :])


# ---------------------------------------------------------------------------------------------
# Encoding for a client


def event(index, type, sequence_number, t_us, data, sent_us=None) -> dict:
    """One event as the API and the WebSocket send it, from a message's values; `data` is the
    verbatim SSE data. `sent_us` (a proxied stream's: when the proxy handed the event to its
    client) is there only when known, so the events of every other stream keep their shape byte
    for byte."""
    if sent_us is None:
        return {"index": index, "type": type, "sequence_number": sequence_number,
                "t_us": t_us, "data": data}  # fmt: skip
    return {"index": index, "type": type, "sequence_number": sequence_number, "t_us": t_us,
            "data": data, "sent_us": sent_us}  # fmt: skip


def _without_data(message):
    data = message[DATA]
    if data is None:
        return event(*message)
    return {**event(*with_data(message, None)), "data_bytes": len(data.encode())}


def stream_frame(events, status=None, stream=None, terminal=False, omit_data=False) -> str:
    """A stream WebSocket frame (docs/relay.md) for messages (`MESSAGE_COLUMNS` or
    `PROXIED_MESSAGE_COLUMNS`); `omit_data` sends each event's size instead of its data."""
    if omit_data:
        out = [_without_data(e) for e in events]
    else:
        out = [event(*e) for e in events]
    frame = {"events": out}
    if status is not None:
        frame["status"] = status
    if stream:
        frame["stream"] = stream
    if terminal:
        frame["terminal"] = True
    return dumps(frame)
