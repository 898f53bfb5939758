"""Each of the event's shapes has one home, its row the store's (streams/store/event_row.py) and
its live message the outward shapes' (streams/shapes/event_message.py): every column of `Event`
is placed in the row, the message reads back columns of `Event`, and what their makers build is
what the database stores and the relay reads back."""

import datetime as dt

import pytest

from streams.models import Event
from streams.shapes import event_message
from streams.store import event_row, rows
from tests.support.recording import body


def test_every_column_of_the_event_is_placed():
    """Walked from the model, not listed: a new column of `Event` is written by the row (and so
    by every writer: the recorder, the importer, `seed_demo`) or filled by the database."""
    columns = {f.column for f in Event._meta.concrete_fields}
    placed = set(event_row.PROXIED_ROW_COLUMNS) | set(event_row.DATABASE_FILLS)
    assert columns - placed == set(), "place these in streams/store/event_row.py"
    assert placed - columns == set(), "not columns of Event"
    assert not set(event_row.PROXIED_ROW_COLUMNS) & set(event_row.DATABASE_FILLS)
    assert set(event_message.PROXIED_MESSAGE_COLUMNS) <= columns


@pytest.mark.django_db
@pytest.mark.parametrize("proxied", [False, True], ids=["plain", "proxied"])
def test_a_row_is_stored_column_by_column_and_read_back_as_its_message(proxied):
    """What `row` makes lands in the columns `ROW_COLUMNS` names (each value distinct, so a
    swap fails), and the relay's read of the stored event is the message the recorder sent."""
    stream = rows.new_row(None, body())
    start = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    sse = event_row.Received("ev", "id-9", '{"type":"x"}', b"\xff")
    checked = event_row.Checked("response.output_text.delta", 11, 12, 13, False)
    if proxied:
        values = event_row.proxied_row(stream.pk, 7, 1500, start, sse, checked, 2500)
        columns = event_row.PROXIED_ROW_COLUMNS
    else:
        values = event_row.row(stream.pk, 7, 1500, start, sse, checked)
        columns = event_row.ROW_COLUMNS
    assert len(values) == len(columns)
    rows.insert_flat(list(values), offsets=True, columns=columns)
    stored = Event.objects.filter(stream=stream).values(*columns).get()
    stored["raw"] = bytes(stored["raw"])
    assert stored == {
        "stream_id": stream.pk,
        "index": 7,
        "t_us": 1500,
        "received_at": start + dt.timedelta(microseconds=1500),  # the start + t_us
        "event_name": "ev",
        "sse_id": "id-9",
        "type": "response.output_text.delta",
        "sequence_number": 11,
        "output_index": 12,
        "content_index": 13,
        "is_json": False,
        "data": '{"type":"x"}',
        "raw": b"\xff",
        **({"sent_us": 2500} if proxied else {}),
    }
    message = event_message.message(7, 1500, checked, sse.data)
    message_columns = event_message.MESSAGE_COLUMNS
    if proxied:
        message = event_message.proxied(message, 2500)
        message_columns = event_message.PROXIED_MESSAGE_COLUMNS
    read = Event.objects.filter(stream=stream).values_list(*message_columns).get()
    assert read == message
    assert event_message.with_data(event_message.message(7, 1500, checked, "x" * 9, 8), "d") == (
        7,
        "response.output_text.delta",
        11,
        1500,
        "d",
    )


def test_the_named_positions_are_the_columns():
    message = event_message.message(4, 10, event_row.Checked("t", 4, None, None, True), "data")
    assert message[event_message.INDEX] == 4 and message[event_message.DATA] == "data"
    assert event_row.ROW_COLUMNS[event_row.ROW_T_US] == "t_us"
    assert event_row.ROW_COLUMNS[event_row.ROW_RECEIVED_AT] == "received_at"
    assert event_row.ROW_COLUMNS[event_row.ROW_STREAM_ID] == "stream_id"


def test_the_sql_row_orders_by_column_and_refuses_a_stranger():
    columns, values = event_row.sql_row(data="d", stream_id="s")
    assert columns == event_row.ROW_COLUMNS
    assert dict(zip(columns, values, strict=True)) == {
        **dict.fromkeys(columns, "NULL"),
        "data": "d",
        "stream_id": "s",
    }
    with pytest.raises(ValueError, match="sent_me"):
        event_row.sql_row(sent_me="1")
