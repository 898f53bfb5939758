"""`seed_demo --packed-events` (streams/bench/packed_history.py): the seeded streams hold packed
simulator streams that the one event reader reads whole, in order, as many as each says."""

import datetime as dt

import pytest

from streams.bench import packed_history
from streams.models import Event, EventBlock, Stream
from streams.store import compact
from streams.store import events as stored_events

pytestmark = pytest.mark.django_db


def test_the_seeded_streams_hold_packed_simulator_streams(monkeypatch):
    from streams.management.commands.seed_demo import _settable_created_at, make_stream

    monkeypatch.setattr(packed_history, "LENGTHS", ((40, 1), (1_500, 1)))
    monkeypatch.setattr(packed_history, "TEMPLATES_PER_LENGTH", 1)
    now = dt.datetime.now(dt.UTC)
    with _settable_created_at():
        Stream.objects.bulk_create(
            [Stream(status="completed", created_at=now - dt.timedelta(hours=h)) for h in range(30)]
        )
    Event.objects.bulk_create([Event(stream=Stream.objects.first(), index=0, data="{}")])

    done = packed_history.fill(5_000, make_stream, seed=3)

    assert done["events"] >= 5_000 and not Event.objects.exists()
    assert EventBlock.objects.count() == done["blocks"]
    held = Stream.objects.filter(event_count__gt=0)
    assert held.count() == done["streams"] < 30
    assert sum(held.values_list("event_count", flat=True)) == done["events"]
    for stream in held:
        read = list(stored_events.read(stream.pk, ("index", "type", "data")))
        assert [r[0] for r in read] == list(range(stream.event_count))
        assert read[0][1] == "response.created" and '"delta"' in read[5][2]  # (not zeros)
    assert compact.due(grace_s=-3600) == []  # nothing left for the packer
    # with the outlines the packer would have stored (made anew from the events: the same)
    stream = held.order_by("-event_count").first()
    seeded = stored_events.outline(stream.pk)
    assert seeded["count"] == stream.event_count
    EventBlock.objects.filter(stream_id=stream.pk).update(outline=None)
    assert stored_events.outline(stream.pk) == seeded
