"""The one home of an event's live message, an outward shape: the tuple the channel layer
carries and the relay reads back from the database (`MESSAGE_COLUMNS`, `message`, the named
positions), and how a message is encoded for a client (`event`, `stream_frame`). The row the
same event is written as is the store's (streams/store/event_row.py): the message is made from
that row's inputs (`Checked`) but declares only its own positions.

A plain tuple, positional, for the row's reason (docs/performance.md, "Recorder"); its order is
declared once, here: every other module names a position (`INDEX`, `DATA`), never a number.
`MESSAGE_COLUMNS` are columns of `Event` (the relay reads them back):
tests/streams/shapes/test_event_shape.py checks they are.
"""

from streams.core import conf
from streams.shapes.public import dumps

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
