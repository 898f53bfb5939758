"""The event blocks partitioned by day on PostgreSQL (streams/store/partitions.py, migration
0040): a packed stream's blocks go to its day's partition, a read opens that partition only,
a day without one falls back to the default partition and reads the same, retention of a day
drops its partition (and leaves one that holds a block retention keeps), the job makes the
days ahead. Tier 2 (DATABASE_URL): SQLite keeps one table."""

import datetime as dt

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from streams.ingest.importer import import_capture
from streams.models import Project, PrunedDay, Stream
from streams.serve import export
from streams.store import compact, partitions, retention
from streams.store import events as stored_events
from tests.support.paths import CAPTURES

pytestmark = [
    pytest.mark.scale,
    pytest.mark.django_db,
    pytest.mark.skipif(
        "postgresql" not in django_settings.DATABASES["default"]["ENGINE"],
        reason="needs PostgreSQL",
    ),
]

NOW = dt.datetime.now(dt.UTC)
PAST = NOW + dt.timedelta(hours=1)  # every ended stream is past its grace


@pytest.fixture(autouse=True)
def fresh_partitions(monkeypatch):
    # (each test's transaction rolls back the partitions it made: forget them with it)
    monkeypatch.setattr(partitions, "_made", set())


def recorded(days_ago, name="openai_text_long_722ev.sse", project=None):
    [stream] = import_capture((CAPTURES / name).read_bytes(), name)
    changes = {"created_at": NOW - dt.timedelta(days=days_ago)}
    if project is not None:
        changes["project"] = project
    Stream.objects.filter(pk=stream.pk).update(**changes)
    return Stream.objects.get(pk=stream.pk)


def what_reads(stream):
    as_recorded = Stream.objects.get(pk=stream.pk)
    as_recorded.source = Stream.Source.PROXY  # the .sse of events, not the import's capture
    return {
        "sse": b"".join(export.iter_sse(as_recorded)),
        "rows": list(stored_events.read(stream.pk, compact.columns())),
        "window": stored_events.read(stream.pk, ("index", "data"), after=500, limit=50),
    }


def homes(stream):
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT tableoid::regclass::text FROM {partitions.table()} "
            "WHERE stream_id = %s",
            [stream.pk],
        )
        return {name for (name,) in cursor.fetchall()}


def day_of(stream):
    return stream.created_at.astimezone(dt.UTC).date()


def test_the_blocks_go_to_their_days_partition_and_a_read_opens_it_only():
    stream = recorded(days_ago=40)
    before = what_reads(stream)
    compact.sweep(limit=None, grace_s=-3600)  # (makes the day's partition, then packs)

    assert homes(stream) == {partitions.name_of(day_of(stream))}
    assert what_reads(stream) == before
    assert len(partitions.days()) >= 2  # (the migration's days ahead besides)
    qs = compact.stream_blocks(stream.pk)
    explained = qs.explain(analyze=True)
    scans = [
        line
        for line in explained.splitlines()
        if "Index Scan using" in line and "eventblock_" in line
    ]
    opened = [line for line in scans if "never executed" not in line]
    assert len(scans) == len(partitions.days()) + 1, explained  # every day and the default
    assert len(opened) == 1 and partitions.name_of(day_of(stream)) in opened[0], explained


def test_a_day_without_a_partition_goes_to_the_default_and_reads_the_same():
    stream = recorded(days_ago=400)
    before = what_reads(stream)
    assert compact.pack(stream.pk, now=PAST) == 722  # (no sweep: nobody made its day)

    assert homes(stream) == {f"{partitions.table()}_default"}
    assert what_reads(stream) == before


def test_retention_of_a_day_drops_its_partition_and_keeps_a_day_it_must(settings):
    keeper = Project.objects.create(name="Keeps", slug="keeps", retain_events_days=90)
    gone = recorded(days_ago=40)
    kept_by_project = recorded(days_ago=41, project=keeper)
    young = recorded(days_ago=10)
    compact.sweep(limit=None, grace_s=-3600)
    kept_before = what_reads(kept_by_project)
    young_before = what_reads(young)
    settings.STREAMSCOPE = {"RETAIN_EVENTS_DAYS": 30}

    done = retention.prune(now=NOW)

    assert done == {"streams": 0, "events": 722, "event_streams": 1}
    days = partitions.days()
    assert day_of(gone) not in days  # dropped, not emptied
    assert day_of(kept_by_project) in days and day_of(young) in days
    assert stored_events.count(gone.pk) == 0
    assert retention.pruned_at(Stream.objects.get(pk=gone.pk)) == NOW  # (by its day)
    assert what_reads(kept_by_project) == kept_before
    assert what_reads(young) == young_before
    assert retention.pruned_at(Stream.objects.get(pk=kept_by_project.pk)) is None
    assert retention.pruned_at(Stream.objects.get(pk=young.pk)) is None
    assert retention.prune(now=NOW) == {"streams": 0, "events": 0, "event_streams": 0}


def test_a_dropped_day_marks_no_stream_row():
    """The drop records the day; no UPDATE of the streams' rows (91 % of a day's retention at
    100M events was that UPDATE), then or in the batches after it."""
    gone = [recorded(days_ago=40), recorded(days_ago=40, name="openai_text_basic.sse")]
    compact.sweep(limit=None, grace_s=-3600)
    with override_settings(STREAMSCOPE={"RETAIN_EVENTS_DAYS": 30}):
        with CaptureQueriesContext(connection) as queries:
            done = retention.prune(now=NOW)
        again = retention.prune(now=NOW)

    assert done["event_streams"] == 2 and again == {"streams": 0, "events": 0, "event_streams": 0}
    table = Stream._meta.db_table
    assert not [q["sql"] for q in queries if q["sql"].startswith(f'UPDATE "{table}"')]
    assert [s.events_pruned_at for s in Stream.objects.filter(pk__in=[g.pk for g in gone])] == [
        None,
        None,
    ]
    assert PrunedDay.objects.get(day=day_of(gone[0])).at == NOW


def test_a_day_with_a_stream_not_packed_is_left_to_the_batches():
    """A day holding a stream whose events are still rows (not packed yet) is not dropped: the
    batches delete what is due and mark each stream, the day keeps no record."""
    packed = recorded(days_ago=40)
    compact.sweep(limit=None, grace_s=-3600)
    rows = recorded(days_ago=40, name="openai_text_basic.sse")  # (after the sweep: rows)
    with override_settings(STREAMSCOPE={"RETAIN_EVENTS_DAYS": 30}):
        done = retention.prune(now=NOW)

    assert done["event_streams"] == 2
    assert day_of(packed) in partitions.days()  # kept, emptied by the batches
    assert not PrunedDay.objects.exists()
    for stream in (packed, rows):
        assert Stream.objects.get(pk=stream.pk).events_pruned_at == NOW
        assert stored_events.count(stream.pk) == 0


def test_the_job_makes_today_and_the_days_ahead():
    from streams.run import compaction

    later = NOW + dt.timedelta(days=50)
    partitions.ensure_ahead(later)
    compaction.make_partitions()  # (today's: made by the migration already, asked again)
    wanted = {later.date() + dt.timedelta(days=n) for n in range(partitions.AHEAD_DAYS + 1)}
    assert wanted <= set(partitions.days())
    assert NOW.date() in partitions.days()
