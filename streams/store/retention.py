"""Retention: events, and whole streams, older than STREAMSCOPE_RETAIN_EVENTS_DAYS /
STREAMSCOPE_RETAIN_STREAMS_DAYS are deleted (docs/analytics.md, "Retention").

Small batches, one short transaction each, so the recorder's writer never waits for more than
one batch commit. Only finished streams are touched. The pre-aggregates are left as they are:
they keep the history the raw rows lose (the analytics pages go on showing it). A stream whose
events were deleted keeps its row, metrics and findings, with `events_pruned_at` set (its
timeline says so).

Run by `manage.py prune [--dry-run]` and, at most once an hour per process, by the periodic
sweep of every server and worker (`streams.run.runner`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from django.db import connection, transaction
from django.db.models import Q

from streams.core import conf
from streams.models import Event, Stream
from streams.store import aggregates

log = logging.getLogger(__name__)

STREAMS_PER_BATCH = 200  # ~2 000 events at 10 a stream: a commit of a few ms
EVERY_S = 3600.0
_last_run = [0.0]


def cutoffs(now=None, settings=None):
    """(events cutoff, streams cutoff): datetimes, None where nothing is to be deleted."""
    settings = settings or conf.get()
    now = now or dt.datetime.now(dt.UTC)
    events = (
        now - dt.timedelta(days=settings.retain_events_days)
        if settings.retain_events_days > 0
        else None
    )
    streams = (
        now - dt.timedelta(days=settings.retain_streams_days)
        if settings.retain_streams_days > 0
        else None
    )
    return events, streams


def _finished_before(cutoff):
    return Stream.objects.filter(created_at__lt=cutoff).exclude(status__in=Stream.ACTIVE_STATUSES)


def _streams_due(cutoff):
    """Finished streams older than `cutoff` whose chain of attempts is all due: deleting a
    first attempt deletes its retries, so a chain waits for its youngest attempt (a retry made
    today keeps its 40-day-old first attempt, and is never deleted with it)."""
    young = Stream.objects.filter(first_attempt__isnull=False).filter(
        Q(created_at__gte=cutoff) | Q(status__in=Stream.ACTIVE_STATUSES)
    )
    return _finished_before(cutoff).exclude(pk__in=young.values("first_attempt_id"))


def prune(now=None, dry_run=False, batch=STREAMS_PER_BATCH, pause_s=0.0):
    """Delete what retention says is due; returns {"streams", "events", "event_streams"}
    (with `dry_run`, what would be deleted, counted without deleting)."""
    now = now or dt.datetime.now(dt.UTC)
    events_cutoff, streams_cutoff = cutoffs(now)
    out = {"streams": 0, "events": 0, "event_streams": 0}
    if streams_cutoff is not None:
        doomed = _streams_due(streams_cutoff)
        if dry_run:
            out["streams"] = doomed.count()
            out["events"] += Event.objects.filter(stream__in=doomed).count()
        else:
            while True:
                ids = list(doomed.order_by("created_at").values_list("pk", flat=True)[:batch])
                if not ids:
                    break
                with transaction.atomic():
                    out["events"] += delete_streams(ids, keep_aggregates=True)
                out["streams"] += len(ids)
                if pause_s:
                    time.sleep(pause_s)
    if events_cutoff is not None:
        pending = _finished_before(events_cutoff).filter(events_pruned_at__isnull=True)
        if dry_run:
            out["event_streams"] = pending.count()
            out["events"] += Event.objects.filter(stream__in=pending).count()
        else:
            while True:
                ids = list(pending.order_by("created_at").values_list("pk", flat=True)[:batch])
                if not ids:
                    break
                with transaction.atomic():
                    out["events"] += _delete_events(ids)
                    Stream.objects.filter(pk__in=ids).update(events_pruned_at=now)
                out["event_streams"] += len(ids)
                if pause_s:
                    time.sleep(pause_s)
    return out


def delete_streams(ids, keep_aggregates):
    """Deletes the streams `ids` (a batch: finished ones), in the caller's transaction; returns
    how many events went with them. `keep_aggregates`: the analytics keep counting them
    (retention: the history stays); else they are subtracted, the batch at once (a project's
    deletion: what is gone is gone from its analytics too)."""
    with aggregates.keeping():
        if not keep_aggregates:
            aggregates.apply(aggregates.snapshot(ids), sign=-1)
        events = Event.objects.filter(stream_id__in=ids).delete()[0]
        # the ORM's delete follows every relation to a stream (findings, capture, retries,
        # other apps' rows); events went first, by one ranged DELETE
        Stream.objects.filter(pk__in=ids).delete()
    return events


def _delete_events(ids):
    # by the (stream, index) unique index, without loading rows
    qn = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {qn(Event._meta.db_table)} WHERE {qn('stream_id')} IN ({marks})", ids
        )
        return cursor.rowcount


def prune_if_due():
    """From the periodic sweep: prune when retention is set and an hour has passed since this
    process last did. A short pause between batches leaves the writer its turn."""
    events_cutoff, streams_cutoff = cutoffs()
    if events_cutoff is None and streams_cutoff is None:
        return None
    if time.monotonic() - _last_run[0] < EVERY_S and _last_run[0]:
        return None
    _last_run[0] = time.monotonic()
    done = prune(pause_s=0.01)
    if any(done.values()):
        log.info("retention: deleted %(streams)d streams and %(events)d events", done)
    return done
