"""The one reader of stored events: every page, export, the API, the relay's catch-up and the
re-check read a stream's events through here, never `Event.objects` or SQL on its table
(tests/streams/store/test_event_reader.py fails on a module that does). Only the writer
(streams/store/rows.py's inserts), retention's deletes, `seed_demo` and the benches touch the
table themselves.

Why one reader: how a stream's events are stored can then change in one place. A finished
stream's events are packed into compressed blocks (streams/store/compact.py); the reader
serves rows and blocks alike, so none of its callers knows which a stream has.

Every read is by one stream (or a handful, `last_data`) and a range of its arrival indexes, so
it stays on the unique (stream, index) index; a filter on `type` narrows within that range.
Columns are `Event`'s names (streams/store/event_row.py, `ROW_COLUMNS`), values as the row
stores them (`raw` as bytes or None).
"""

import itertools

from django.db import models

from streams.models import Event
from streams.store import compact
from streams.store import outline as outlines

# A bounded read's chunk when iterating (a 100 000-event stream is read in pieces).
CHUNK = 2000


def read(
    stream_id,
    columns,
    *,
    after=None,
    before=None,
    indexes=None,
    types=None,
    handed=False,
    descending=False,
    limit=None,
):
    """Tuples of `columns` of the stream's events in index order (`descending`: the reverse):
    those with after < index < before, of `indexes` (an iterable), of `types`, only those handed
    to the client (`handed`: sent_us is set), at most `limit`. A list when `limit` is given,
    else an iterator read in chunks.

    Rows first (a stream's rows are all there or all packed: one statement sees one or the
    other), the blocks only when no row matched: a stream stored as rows costs the one query it
    always did, and a read racing the pack's commit finds the blocks after missing the rows."""
    if indexes is not None:
        indexes = list(indexes)
    where = {"after": after, "before": before, "indexes": indexes, "types": types}
    where.update(handed=handed, descending=descending)
    qs = _filtered(stream_id, after, before, indexes, types, handed)
    qs = qs.order_by("-index" if descending else "index").values_list(*columns)
    if limit is not None:
        rows = list(qs[:limit])
        if rows:
            return rows
        return list(itertools.islice(_packed(stream_id, columns, where), limit))
    return _rows_then_blocks(qs, stream_id, columns, where)


def _rows_then_blocks(qs, stream_id, columns, where):
    empty = True
    for row in qs.iterator(chunk_size=CHUNK):
        empty = False
        yield row
    if empty:
        yield from _packed(stream_id, columns, where)


def _packed(stream_id, columns, where):
    ranged = {k: where[k] for k in ("after", "before", "indexes")}
    return compact.read(stream_id, compact.blocks_of(stream_id, **ranged), columns, **where)


def first(stream_id, columns, **where):
    """The first (by index; `descending=True`: the last) event's `columns` matching `where`
    (`read`'s filters), or None."""
    rows = read(stream_id, columns, limit=1, **where)
    return rows[0] if rows else None


def exists(stream_id, **where):
    """Whether any event of the stream matches `where` (`read`'s filters)."""
    return first(stream_id, ("index",), **where) is not None


def last_index(stream_id):
    """The stream's last stored arrival index (None: none stored)."""
    row = first(stream_id, ("index",), descending=True)
    return None if row is None else row[0]


def count(stream_id):
    """How many of the stream's events are stored."""
    return Event.objects.filter(stream_id=stream_id).count() or compact.count(stream_id)


def type_counts(stream_id):
    """[(type, how many events of it)] of the stream, in no particular order."""
    rows = Event.objects.filter(stream_id=stream_id).values_list("type")
    found = list(rows.annotate(n=models.Count("id")).values_list("type", "n"))
    if found:
        return found
    return list(compact.outline(stream_id, points=False)["types"].items())


def outline(stream_id):
    """The stream's outline (streams/store/outline.py: its types' counts, the timing chart's
    points and figures) from its rows, or its blocks' stored ones: one shape from either."""
    rows = Event.objects.filter(stream_id=stream_id).order_by("index")
    rows = list(rows.values_list(*outlines.COLUMNS))
    if not rows:
        return compact.outline(stream_id)
    timed = [r[1] for r in rows if r[1] is not None]
    span = outlines.span(timed[-1] if timed else None)
    return outlines.merged([outlines.of_events(rows, before_us=None, span_us=span)])


def last_data(stream_ids):
    """{stream id: the data of its last stored event} of `stream_ids` (the rows' in two
    queries however many streams: reprice reads a batch of them; then each packed one's)."""
    ids = set(stream_ids)
    last = (
        Event.objects.filter(stream_id__in=ids)
        .values("stream_id")
        .annotate(index=models.Max("index"))
    )
    wanted = models.Q()
    for row in last:
        wanted |= models.Q(stream_id=row["stream_id"], index=row["index"])
    out = {}
    if wanted:
        out.update(Event.objects.filter(wanted).values_list("stream_id", "data"))
    for stream_id in ids - set(out):
        row = first(stream_id, ("data",), descending=True)
        if row is not None:
            out[stream_id] = row[0]
    return out


def _filtered(stream_id, after, before, indexes, types, handed):
    qs = Event.objects.filter(stream_id=stream_id)
    if after is not None:
        qs = qs.filter(index__gt=after)
    if before is not None:
        qs = qs.filter(index__lt=before)
    if indexes is not None:
        qs = qs.filter(index__in=list(indexes))
    if types is not None:
        qs = qs.filter(type__in=list(types))
    if handed:
        qs = qs.filter(sent_us__isnull=False)
    return qs
