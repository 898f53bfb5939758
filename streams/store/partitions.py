"""The event blocks' partitions by day on PostgreSQL (issue 49; docs/recorder.md, "At rest").

On PostgreSQL `EventBlock`'s table is partitioned by range of `stream_created_at` (the stream's
own creation, copied onto its blocks), one partition a UTC day named `<table>_pYYYYMMDD`, and a
default partition that catches a block whose day has none (a day created late; its blocks are
read the same and leave by retention's batches). Migration 0040 made the table; this module
makes the days ahead (`ensure`, from the periodic job and before each packing sweep) and drops
whole days for retention (`drop_day`: one DROP TABLE, milliseconds, where deleting a day's
blocks row by row took a batch per 200 streams).

The live event rows are not partitioned: a stream's rows live from its start until it is
packed a few minutes after its end (`STREAMSCOPE_COMPACT_AFTER_S`), so their table holds the
streams of the last minutes whatever the history's length, and retention finds nothing old
there once packing keeps up. SQLite keeps one table of blocks: everything here is a no-op there.
"""

import datetime as dt
import logging

from django.db import connection, transaction

from streams.models import EventBlock, Stream

log = logging.getLogger(__name__)

AHEAD_DAYS = 3  # partitions made ahead of today: a job that misses a day or two still finds one
_made = set()  # days this process knows exist (a sweep asks the catalog once per day)


def partitioned():
    return connection.vendor == "postgresql"


def table():
    return EventBlock._meta.db_table


def name_of(day):
    return f"{table()}_p{day:%Y%m%d}"


def _day_of(name):
    prefix = f"{table()}_p"
    if not name.startswith(prefix):
        return None
    try:
        return dt.datetime.strptime(name[len(prefix) :], "%Y%m%d").date()
    except ValueError:
        return None


def bounds(day):
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=1)


def days():
    """The days that have a partition, oldest first (the default partition is none of them)."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [table()],
        )
        found = (_day_of(name) for (name,) in cursor.fetchall())
        return sorted(day for day in found if day is not None)


def ensure(wanted):
    """Make the partitions of the days `wanted` (dates) that are missing. A day whose blocks
    already went to the default partition is left there (logged): its blocks are read and
    retained the same, only not dropped a day at once."""
    if not partitioned():
        return
    qn = connection.ops.quote_name
    for day in sorted(set(wanted) - _made):
        start, end = bounds(day)
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {qn(name_of(day))} PARTITION OF {qn(table())} "
                    "FOR VALUES FROM (%s) TO (%s)",
                    [start, end],
                )
        except Exception as exc:  # (the default partition holds rows of that day)
            log.warning("event blocks: no partition for %s (%s)", day, exc)
            continue
        _made.add(day)


def ensure_ahead(now=None):
    """Today's partition and the next `AHEAD_DAYS`' (the periodic job)."""
    today = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).date()
    ensure(today + dt.timedelta(days=n) for n in range(AHEAD_DAYS + 1))


def ensure_for(stream_ids):
    """The partitions the blocks of `stream_ids` go to (before packing them)."""
    if not partitioned() or not stream_ids:
        return
    created = Stream.objects.filter(pk__in=list(stream_ids)).values_list("created_at", flat=True)
    ensure({c.astimezone(dt.UTC).date() for c in created})


def blocks_of_day(day):
    """The blocks of the day's partition (a queryset)."""
    start, end = bounds(day)
    return EventBlock.objects.filter(stream_created_at__gte=start, stream_created_at__lt=end)


def lock_day(day):
    """Lock the day's partition (in the caller's transaction) before reading what to drop: a
    block packed into it meanwhile waits, then fails with the partition gone (its packer's
    transaction leaves the stream's rows, which retention's batches then delete)."""
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {qn(name_of(day))} IN ACCESS EXCLUSIVE MODE")


def drop_day(day):
    """Drop the day's partition, in the caller's transaction (after `lock_day`)."""
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        # the deferred foreign-key checks of blocks written in this transaction are run now:
        # PostgreSQL refuses to drop a table with checks pending (only a caller that packed and
        # dropped in one transaction, as a test does, has any)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DROP TABLE {qn(name_of(day))}")
    _made.discard(day)
