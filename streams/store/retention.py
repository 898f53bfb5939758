"""Retention: events, and whole streams, older than STREAMSCOPE_RETAIN_EVENTS_DAYS /
STREAMSCOPE_RETAIN_STREAMS_DAYS are deleted (docs/analytics.md, "Retention"); a project with
a retention of its own (`Project.retain_*_days`, set by its admins) has its streams kept for
that long instead.

Small batches, one short transaction each, so the recorder's writer never waits for more than
one batch commit. Only finished streams are touched. The pre-aggregates are left as they are:
they keep the history the raw rows lose (the analytics pages go on showing it). A stream whose
events were deleted keeps its row, metrics and findings, and says so: `pruned_at` is the one
answer every page, export, share page and the API give (the stream's own `events_pruned_at`,
set by the batches, else the record of its day, `PrunedDay`, left by a dropped partition).

Run by `manage.py prune [--dry-run]` and, at most once an hour per process, by the periodic
sweep of every server and worker (`streams.run.runner`).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import time

from django.db import connection, transaction
from django.db.models import Q, Sum

from streams.core import conf
from streams.models import Event, Project, PrunedDay, Stream
from streams.store import aggregates, audit, compact, partitions

log = logging.getLogger(__name__)

STREAMS_PER_BATCH = 200  # ~2 000 events at 10 a stream: a commit of a few ms
EVERY_S = 3600.0
_last_run = [0.0]


def cutoffs(now=None, settings=None):
    """(events cutoff, streams cutoff) of the instance (STREAMSCOPE_RETAIN_*_DAYS): datetimes,
    None where nothing is to be deleted. A project may have its own (`by_project`)."""
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


EVENTS, STREAMS = "retain_events_days", "retain_streams_days"  # Project's fields


@dataclasses.dataclass(frozen=True)
class Ages:
    """Which streams are old enough, each by its project's retention (its own, else the
    instance's): `older` and `younger` are conditions on Stream rows (`older` None: nothing
    anywhere is old enough)."""

    older: Q | None
    younger: Q
    latest: dt.datetime | None = None  # the newest cutoff of any group: nothing younger is due


def by_project(field, now=None, settings=None):
    """The `Ages` of retention `field` (EVENTS or STREAMS) at `now`: the projects with a
    retention of their own are grouped by its days (one condition per distinct value, not
    per project), the rest (and streams of no project) keep the instance's."""
    now = now or dt.datetime.now(dt.UTC)
    instance = cutoffs(now, settings)[0 if field == EVENTS else 1]
    own = collections.defaultdict(list)
    for pk, days in Project.objects.filter(**{f"{field}__isnull": False}).values_list("pk", field):
        own[days].append(pk)
    every_own = [pk for ids in own.values() for pk in ids]
    groups = [(~Q(project_id__in=every_own) if every_own else Q(), instance)]
    groups += [
        (Q(project_id__in=ids), now - dt.timedelta(days=days)) for days, ids in sorted(own.items())
    ]
    older, younger = None, None
    cutoffs_set = [cutoff for _group, cutoff in groups if cutoff is not None]
    for group, cutoff in groups:
        old = None if cutoff is None else group & Q(created_at__lt=cutoff)
        young = group if cutoff is None else group & Q(created_at__gte=cutoff)
        if old is not None:
            older = old if older is None else older | old
        younger = young if younger is None else younger | young
    return Ages(older, younger, max(cutoffs_set, default=None))


def any_due(fields=(EVENTS, STREAMS), settings=None):
    """Whether retention of `fields` is set anywhere: the instance's or a project's."""
    instance = dict(zip((EVENTS, STREAMS), cutoffs(settings=settings), strict=True))
    if any(instance[field] is not None for field in fields):
        return True
    own = Q()
    for field in fields:
        own |= Q(**{f"{field}__isnull": False})
    return Project.objects.filter(own).exists()


def _finished(older):
    return Stream.objects.filter(_finished_q(older))


def _finished_q(older):
    """The condition on a stream row of `_finished`: old enough, ended, and not in a project
    being deleted (that is its deletion's, streams/access/members.py: it subtracts the streams
    from the analytics, which retention keeps; both at once could do both)."""
    found = older & ~Q(status__in=Stream.ACTIVE_STATUSES)
    going = list(Project.objects.filter(deleting_at__isnull=False).values_list("pk", flat=True))
    return found & ~Q(project_id__in=going) if going else found


def _streams_due(ages):
    """Finished streams old enough whose chain of attempts is all due: deleting a first
    attempt deletes its retries, so a chain waits for its youngest attempt (a retry made
    today keeps its 40-day-old first attempt, and is never deleted with it)."""
    young = Stream.objects.filter(first_attempt__isnull=False).filter(
        ages.younger | Q(status__in=Stream.ACTIVE_STATUSES)
    )
    return _finished(ages.older).exclude(pk__in=young.values("first_attempt_id"))


def prune(now=None, dry_run=False, batch=STREAMS_PER_BATCH, pause_s=0.0):
    """Delete what retention says is due; returns {"streams", "events", "event_streams"}
    (with `dry_run`, what would be deleted, counted without deleting)."""
    now = now or dt.datetime.now(dt.UTC)
    if not dry_run:
        audit.retention_in_effect(conf.get())
    out = {"streams": 0, "events": 0, "event_streams": 0}
    streams_ages = by_project(STREAMS, now)
    if streams_ages.older is not None:
        doomed = _streams_due(streams_ages)
        if dry_run:
            out["streams"] = doomed.count()
            out["events"] += Event.objects.filter(stream__in=doomed).count()
            out["events"] += compact.held(doomed)
        else:
            deleted = audit.Deletions(by="retention")  # (one entry per project for the run)
            while True:
                ids = list(doomed.order_by("created_at").values_list("pk", flat=True)[:batch])
                if not ids:
                    break
                with transaction.atomic():
                    deleted.add(ids)  # (in the batch's transaction, before it deletes)
                    out["events"] += delete_streams(ids, keep_aggregates=True)
                out["streams"] += len(ids)
                if pause_s:
                    time.sleep(pause_s)
    events_ages = by_project(EVENTS, now)
    if not dry_run and partitions.partitioned():
        dropped = _drop_days(now, events_ages, streams_ages)
        out["events"] += dropped["events"]
        out["event_streams"] += dropped["streams"]
    if events_ages.older is not None:
        unmarked = _finished(events_ages.older).filter(events_pruned_at__isnull=True)
        for pending in _between_pruned_days(unmarked):
            if dry_run:
                out["event_streams"] += pending.count()
                out["events"] += Event.objects.filter(stream__in=pending).count()
                out["events"] += compact.held(pending)
                continue
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


def pruned_at(stream):
    """When retention deleted the events of `stream` (None: it has not): its own
    `events_pruned_at` (the batches mark each stream), else the time its day's partition was
    dropped (`PrunedDay`: every stream created that day lost its events then, and no row was
    touched). The one answer: the stream's page, a share page, the API and the exports ask here.
    """
    if stream.events_pruned_at is not None or not partitions.partitioned():
        return stream.events_pruned_at  # (SQLite drops no day: the batches mark each stream)
    day = stream.created_at.astimezone(dt.UTC).date()
    return PrunedDay.objects.filter(day=day).values_list("at", flat=True).first()


def _between_pruned_days(streams):
    """`streams` (a queryset) cut into the stretches of creation time between the dropped
    days, oldest first: their streams are told pruned by their day's record, so the batches
    neither mark them nor walk past them (each stretch is a range of the creation index)."""
    stretches, start = [], None
    for day in PrunedDay.objects.order_by("day").values_list("day", flat=True):
        begin, end = partitions.bounds(day)
        if start is None or begin > start:
            stretches.append((start, begin))
        start = end
    stretches.append((start, None))
    for begin, end in stretches:
        part = streams
        if begin is not None:
            part = part.filter(created_at__gte=begin)
        if end is not None:
            part = part.filter(created_at__lt=end)
        yield part


def _drop_days(now, events_ages, streams_ages):
    """PostgreSQL: drop each day's partition of event blocks (streams/store/partitions.py)
    when every stream created that day has its events due (finished, old enough by its
    project's retention, not in a project being deleted) and is packed, and record the day
    (`PrunedDay`), in one transaction a day. No stream row is touched: `pruned_at` answers
    from the day (marking each stream's `events_pruned_at` was 91 % of the day's time at 100M
    events, docs/performance.md). A day with a stream retention keeps (a project keeping its
    events longer, a stream still running or not yet packed) is left to the batches, which
    delete only what is due and mark each stream. (A day's blocks are of its streams only:
    their `stream_created_at` is the stream's `created_at`, which is set once, at creation.)"""
    latest = max((a.latest for a in (events_ages, streams_ages) if a.latest), default=None)
    if latest is None:
        return {"streams": 0, "events": 0}
    out = {"streams": 0, "events": 0}
    for day in partitions.days():
        start, end = partitions.bounds(day)
        if end > latest:
            break
        with transaction.atomic():
            partitions.lock_day(day)  # (a block packed into it now waits, then fails: kept)
            of_day = Stream.objects.filter(created_at__gte=start, created_at__lt=end)
            if _kept(of_day, events_ages).exists():
                continue
            out["events"] += partitions.blocks_of_day(day).aggregate(n=Sum("count"))["n"] or 0
            out["streams"] += of_day.filter(events_pruned_at__isnull=True).count()
            PrunedDay.objects.get_or_create(day=day, defaults={"at": now})  # (the first time)
            partitions.drop_day(day)
    return out


def _kept(streams, events_ages):
    """Those of `streams` whose events retention keeps: not due by the events' retention
    (streams due by the streams' are deleted before the days are looked at), or not packed."""
    if events_ages.older is None:
        return streams
    # (conditions on the day's rows, not a look-up of every due stream of the history)
    return streams.filter(~_finished_q(events_ages.older) | Q(events_packed_at__isnull=True))


def delete_streams(ids, keep_aggregates):
    """Deletes the streams `ids` (a batch: finished ones), in the caller's transaction; returns
    how many events went with them. `keep_aggregates`: the analytics keep counting them
    (retention: the history stays); else they are subtracted, the batch at once (a project's
    deletion: what is gone is gone from its analytics too)."""
    with aggregates.keeping():
        if not keep_aggregates:
            aggregates.apply(aggregates.snapshot(ids), sign=-1)
        events = Event.objects.filter(stream_id__in=ids).delete()[0] + compact.drop(ids)
        # the ORM's delete follows every relation to a stream (findings, capture, retries,
        # other apps' rows); events went first, by one ranged DELETE
        Stream.objects.filter(pk__in=ids).delete()
    return events


def _delete_events(ids):
    # by the (stream, index) unique index, without loading rows; a packed stream's blocks too
    packed = compact.drop(ids)
    qn = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {qn(Event._meta.db_table)} WHERE {qn('stream_id')} IN ({marks})", ids
        )
        return cursor.rowcount + packed


def prune_if_due():
    """From the periodic sweep: prune when retention is set (the instance's or a project's)
    and an hour has passed since this process last looked. A short pause between batches
    leaves the writer its turn."""
    audit.retention_in_effect(conf.get())  # (retention switched off is a change too)
    if time.monotonic() - _last_run[0] < EVERY_S and _last_run[0]:
        return None
    _last_run[0] = time.monotonic()  # (before the look: a sweep every few seconds asks once)
    if not any_due():
        return None
    done = prune(pause_s=0.01)
    if any(done.values()):
        log.info("retention: deleted %(streams)d streams and %(events)d events", done)
    return done
