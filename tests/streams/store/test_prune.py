"""streams.store.retention and `manage.py prune`: what is old goes in small batches, active streams
stay, the aggregates keep the history, and the timeline says the events are gone."""

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.test import Client

from dashboard.stats.admin import admin_report
from streams.models import Event, Finding, Stream, UsageRollup
from streams.stats import cube
from streams.stats.sql import Scope
from streams.store import aggregates, retention

NOW = dt.datetime.now(dt.UTC)


@pytest.fixture
def history(db):
    from streams.management.commands.seed_demo import _settable_created_at, seed

    seed(300, days=10, seed=3, events_per_stream=8, users=("alice",), now=NOW)
    # an active stream from long ago (its process is recording it): never pruned
    with _settable_created_at():
        old = Stream.objects.create(status="streaming", created_at=NOW - dt.timedelta(days=9))
    Event.objects.create(stream=old, index=0, data="{}")
    return old


def _old(days):
    return Stream.objects.filter(created_at__lt=NOW - dt.timedelta(days=days))


def test_it_deletes_old_events_and_marks_their_streams(history, settings):
    settings.STREAMSCOPE = {"RETAIN_EVENTS_DAYS": 4}
    doomed = _old(4).exclude(pk=history.pk)
    n_streams, n_events = doomed.count(), Event.objects.filter(stream__in=doomed).count()
    assert n_streams and n_events
    kept_events = Event.objects.count() - n_events
    done = retention.prune(now=NOW, batch=7)
    assert done == {"streams": 0, "events": n_events, "event_streams": n_streams}
    assert Event.objects.count() == kept_events
    assert Event.objects.filter(stream=history).exists()  # active: left alone
    assert set(doomed.values_list("events_pruned_at", flat=True)) == {NOW}
    assert Stream.objects.count() == 301  # rows, metrics and findings stay
    # idempotent: nothing more to do
    assert retention.prune(now=NOW)["events"] == 0


def test_it_deletes_old_streams_and_the_aggregates_keep_them(history, settings, monkeypatch):
    before = aggregates.stored()[UsageRollup]
    totals = admin_report(Scope(project_id=None, end=NOW), now=NOW)
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 5}
    doomed = list(_old(5).exclude(pk=history.pk).values_list("pk", flat=True))
    done = retention.prune(now=NOW, batch=13)
    assert done["streams"] == len(doomed) > 0
    assert not Stream.objects.filter(pk__in=doomed).exists()
    assert not Event.objects.filter(stream_id__in=doomed).exists()
    assert not Finding.objects.filter(stream_id__in=doomed).exists()
    assert Stream.objects.filter(pk=history.pk).exists()
    assert aggregates.stored()[UsageRollup] == before
    # the admin page from the aggregates still shows the whole history
    monkeypatch.setattr(cube, "EXACT_BELOW", 0)
    after = admin_report(Scope(project_id=None, end=NOW), now=NOW)
    assert after.method == cube.AGGREGATED
    assert after.totals["streams"] == totals.totals["streams"] == 301


def test_the_dry_run_counts_and_deletes_nothing(history, settings):
    settings.STREAMSCOPE = {"RETAIN_EVENTS_DAYS": 4, "RETAIN_STREAMS_DAYS": 8}
    events = Event.objects.count()
    out = io.StringIO()
    call_command("prune", "--dry-run", stdout=out)
    assert "would delete" in out.getvalue()
    assert Event.objects.count() == events and Stream.objects.count() == 301


def test_a_retry_younger_than_the_limit_keeps_its_chain(db, settings):
    from streams.management.commands.seed_demo import _settable_created_at

    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 30}
    with _settable_created_at():
        first = Stream.objects.create(status="failed", created_at=NOW - dt.timedelta(days=40))
        today = Stream.objects.create(
            status="completed", attempt=2, first_attempt=first, created_at=NOW
        )
        gone = Stream.objects.create(status="failed", created_at=NOW - dt.timedelta(days=41))
        gone_retry = Stream.objects.create(
            status="failed", attempt=2, first_attempt=gone, created_at=NOW - dt.timedelta(days=40)
        )
        alone = Stream.objects.create(status="failed", created_at=NOW - dt.timedelta(days=35))
    out = io.StringIO()
    call_command("prune", "--dry-run", stdout=out)
    assert "3 streams" in out.getvalue(), out.getvalue()  # what goes, counted as it goes
    assert retention.prune(now=NOW)["streams"] == 3
    left = set(Stream.objects.values_list("pk", flat=True))
    assert {first.pk, today.pk} <= left and not {gone.pk, gone_retry.pk, alone.pk} & left


def test_retention_is_off_by_default(history):
    out = io.StringIO()
    call_command("prune", stdout=out)
    assert "retention is off" in out.getvalue()
    assert retention.prune_if_due() is None


def test_the_timeline_says_the_events_were_pruned(history, settings, django_user_model):
    settings.STREAMSCOPE = {"RETAIN_EVENTS_DAYS": 4}
    retention.prune(now=NOW)
    stream = _old(4).exclude(pk=history.pk).first()
    staff = django_user_model.objects.create_user("boss", is_staff=True)
    client = Client()
    client.force_login(staff)
    page = client.get(f"/streams/{stream.pk}/").content.decode()
    assert 'id="events-pruned"' in page


def test_rebuild_refuses_to_drop_pruned_history(history, settings):
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 5}
    with pytest.raises(Exception, match="force"):
        call_command("rebuild_aggregates")


def _aged(project, *days, status="completed"):
    from streams.management.commands.seed_demo import _settable_created_at

    made = []
    with _settable_created_at():
        for n in days:
            stream = Stream.objects.create(
                project=project, status=status, created_at=NOW - dt.timedelta(days=n)
            )
            Event.objects.create(stream=stream, index=0, data="{}")
            made.append(stream.pk)
    return made


def test_a_projects_own_retention_prunes_only_its_streams(db, settings):
    from streams.models import AuditEntry, Project

    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 20}  # the instance's
    short = Project.objects.create(name="Short", slug="short", retain_streams_days=3)
    long = Project.objects.create(name="Long", slug="long", retain_streams_days=60)
    plain = Project.objects.create(name="Plain", slug="plain")
    short_old, short_young = _aged(short, 4, 5, 6, 7, 8), _aged(short, 1, 2)
    long_kept = _aged(long, 10, 30, 50)  # older than the instance's 20 days, within its 60
    long_old = _aged(long, 61)
    plain_kept, plain_old = _aged(plain, 4, 10), _aged(plain, 21, 25)
    running = _aged(short, 9, status="streaming")  # active: never pruned
    done = retention.prune(now=NOW, batch=2)  # (batches still: 2 streams a transaction)
    assert done["streams"] == len(short_old + long_old + plain_old) == 8
    left = set(Stream.objects.values_list("pk", flat=True))
    assert left == set(short_young + long_kept + plain_kept + running)
    # one entry per project for the whole run, counting its streams
    entries = AuditEntry.objects.filter(action="streams.deleted")
    assert {e.project_id: e.changes["count"] for e in entries} == {
        short.pk: 5,
        long.pk: 1,
        plain.pk: 2,
    }


def test_a_projects_own_event_retention_with_none_for_the_instance(db, settings):
    from streams.models import Project

    settings.STREAMSCOPE = {}  # the instance keeps everything
    short = Project.objects.create(name="Short", slug="short", retain_events_days=2)
    other = Project.objects.create(name="Other", slug="other")
    pruned, kept = _aged(short, 3, 4), _aged(short, 1) + _aged(other, 3, 400)
    assert retention.any_due()
    done = retention.prune(now=NOW, batch=1)
    assert done == {"streams": 0, "events": 2, "event_streams": 2}
    assert set(Event.objects.values_list("stream_id", flat=True)) == set(kept)
    assert set(Stream.objects.filter(events_pruned_at=NOW).values_list("pk", flat=True)) == set(
        pruned
    )


def test_retention_leaves_a_project_being_deleted_to_its_deletion(db, settings):
    from streams.models import Project

    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 3}
    going = Project.objects.create(name="Going", slug="going", deleting_at=NOW)
    staying = Project.objects.create(name="Staying", slug="staying")
    kept, pruned = _aged(going, 5, 6), _aged(staying, 5)
    assert retention.prune(now=NOW)["streams"] == 1
    assert set(Stream.objects.values_list("pk", flat=True)) == set(kept)
    assert not Stream.objects.filter(pk__in=pruned).exists()


def test_packed_streams_events_are_counted_and_deleted_like_rows(history, settings):
    """Issue 49: a finished stream's events may be blocks; retention's dry run counts them and
    its run deletes them."""
    from streams.models import EventBlock
    from streams.store import compact

    settings.STREAMSCOPE = {"RETAIN_EVENTS_DAYS": 4}
    doomed = _old(4).exclude(pk=history.pk)
    n_events = Event.objects.filter(stream__in=doomed).count()
    ids = list(doomed.order_by("pk").values_list("pk", flat=True))
    packed = sum(compact.pack(pk, grace_s=-(10**9)) for pk in ids[::2])
    assert packed and EventBlock.objects.exists()
    assert retention.prune(now=NOW, dry_run=True)["events"] == n_events
    done = retention.prune(now=NOW, batch=7)
    assert done["events"] == n_events
    assert not EventBlock.objects.filter(stream_id__in=ids).exists()
