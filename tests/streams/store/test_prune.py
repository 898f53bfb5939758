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
