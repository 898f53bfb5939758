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

from django.db import models

from streams.models import Event
from streams.store import compact

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
    else an iterator read in chunks."""

    where = {"after": after, "before": before, "indexes": indexes, "types": types}
    where["handed"] = handed
    if indexes is not None:
        indexes = list(indexes)
        where["indexes"] = indexes
    blocks = compact.blocks_of(stream_id, after=after, before=before, indexes=indexes)
    if blocks is not None:
        rows = compact.read(
            blocks,
            columns,
            after=after,
            before=before,
            indexes=indexes,
            types=types,
            handed=handed,
            descending=descending,
        )
        if limit is None:
            return rows
        out = []
        for row in rows:
            if len(out) >= limit:
                break
            out.append(row)
        return out
    qs = _filtered(stream_id, after, before, indexes, types, handed)
    qs = qs.order_by("-index" if descending else "index").values_list(*columns)
    if limit is not None:
        rows = list(qs[:limit])
        if rows or not compact.blocks_of(stream_id):
            return rows
        # Packed between the two reads (one statement sees all the rows or none of them).
        return read(stream_id, columns, **where, descending=descending, limit=limit)
    return _rows_then_blocks(qs, stream_id, columns, where, descending)


def _rows_then_blocks(qs, stream_id, columns, where, descending):
    empty = True
    for row in qs.iterator(chunk_size=CHUNK):
        empty = False
        yield row
    if empty and compact.blocks_of(stream_id):
        yield from read(stream_id, columns, **where, descending=descending)


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

    stored = compact.count(stream_id)
    if stored is not None:
        return stored
    return Event.objects.filter(stream_id=stream_id).count()


def type_counts(stream_id):
    """[(type, how many events of it)] of the stream, in no particular order."""

    if compact.blocks_of(stream_id) is None:
        rows = Event.objects.filter(stream_id=stream_id).values_list("type")
        return list(rows.annotate(n=models.Count("id")).values_list("type", "n"))
    counts = {}
    for (type_,) in read(stream_id, ("type",)):
        counts[type_] = counts.get(type_, 0) + 1
    return list(counts.items())


def last_data(stream_ids):
    """{stream id: the data of its last stored event} of `stream_ids` (the rows' in two
    queries however many streams: reprice reads a batch of them)."""

    ids = set(stream_ids)
    packed = compact.compacted(ids)
    out = {}
    for stream_id in packed:
        row = first(stream_id, ("data",), descending=True)
        if row is not None:
            out[stream_id] = row[0]
    last = (
        Event.objects.filter(stream_id__in=ids - packed)
        .values("stream_id")
        .annotate(index=models.Max("index"))
    )
    wanted = models.Q()
    for row in last:
        wanted |= models.Q(stream_id=row["stream_id"], index=row["index"])
    if wanted:
        out.update(Event.objects.filter(wanted).values_list("stream_id", "data"))
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
