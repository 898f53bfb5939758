"""The `compact` background job and `manage.py compact`: they pack due streams and say so in
/metrics and on the terminal."""

import datetime as dt
import io

import pytest
from django.core.management import call_command

from streams.ingest.importer import import_capture
from streams.models import Event, EventBlock, Stream
from streams.observe import telemetry
from streams.run import compaction, periodic
from tests.support.paths import CAPTURES

pytestmark = pytest.mark.django_db

HOUR_AGO = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)


def imported(name="openai_text_basic.sse", ended=HOUR_AGO):
    [stream] = import_capture((CAPTURES / name).read_bytes(), name)
    Stream.objects.filter(pk=stream.pk).update(created_at=ended, finished_at=ended)
    return stream


def value(metric):
    return metric._value.get()


def test_the_job_is_registered_and_packs_due_streams_with_its_metrics(settings):
    assert periodic.jobs()["compact"].fn is compaction.sweep
    settings.STREAMSCOPE = {"COMPACT_STREAMS_PER_RUN": 2}
    due = [imported() for _ in range(3)]
    recent = imported(ended=dt.datetime.now(dt.UTC))  # within its grace: left as rows
    streams_before = value(telemetry.COMPACTED_STREAMS)
    events_before = value(telemetry.COMPACTED_EVENTS)
    n = Event.objects.filter(stream_id=due[0].pk).count()

    compaction.sweep()

    assert value(telemetry.COMPACTED_STREAMS) - streams_before == 2
    assert value(telemetry.COMPACTED_EVENTS) - events_before == 2 * n
    assert value(telemetry.COMPACT_BACKLOG) == 1  # the third; the recent one is not due yet
    assert EventBlock.objects.filter(stream_id=recent.pk).count() == 0
    settings.STREAMSCOPE = {"COMPACT_STREAMS_PER_RUN": 0}  # (the test servers': off)
    compaction.sweep()
    assert value(telemetry.COMPACT_BACKLOG) == 1
    settings.STREAMSCOPE = {}
    compaction.sweep()
    assert value(telemetry.COMPACT_BACKLOG) == 0
    assert set(EventBlock.objects.values_list("stream_id", flat=True)) == {s.pk for s in due}


def test_the_command_packs_every_due_stream_with_progress():
    due = [imported(), imported("openai_text_long_722ev.sse")]
    out, err = io.StringIO(), io.StringIO()
    call_command("compact", stdout=out, stderr=err)
    assert out.getvalue().strip() == f"packed 2 streams, {722 + _events(due[0])} events"
    assert "2 of 2 streams" in err.getvalue()
    assert not Event.objects.exists()


def _events(stream):
    return sum(EventBlock.objects.filter(stream_id=stream.pk).values_list("count", flat=True))
