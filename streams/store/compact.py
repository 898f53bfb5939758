"""Finished streams' events stored compact (issue 49; docs/recorder.md, "At rest").

While a stream runs its events are rows, one per event (the live relay, catch-up, exactly
once). Once it has ended and `COMPACT_AFTER_S` has passed (a viewer's catch-up reads rows
meanwhile), `pack` replaces its rows by `EventBlock`s of `BLOCK` consecutive events each:
every column of the block's events laid out one after the other (integers as deltas, texts
and bytes concatenated with their lengths), the whole compressed with zstandard. A window of the
timeline opens the blocks it overlaps only.

A block describes itself: its head names each column it holds, its kind and its section's
size, and the columns are the event row's (streams/store/event_row.py), so a new column of
`Event` is packed without a word here. A block read after a column came reads it as the model
field's default; a column the event has dropped is skipped. Blocks of versions 1 and 2 (a fixed
list of columns) still read (tests/fixtures/blocks).

Exact on the way back: the verbatim data, the raw bytes and every time come back as stored,
so the `.sse` export of a packed stream is byte-identical and a re-check finds the same.

One transaction writes a stream's blocks and deletes its rows: a crash in the middle leaves
the rows (and the next sweep packs them). The stream's row is locked first, so two processes
sweeping at once pack it once (the second finds no rows left). The reader checks blocks, then
rows, then blocks again when the rows were gone (packed between its two reads): every event is
read exactly once whichever side of the commit it reads.
"""

import datetime as dt
import functools
import logging
import struct
import time
from array import array

import zstandard
from django.db import models, transaction

from streams.core import conf
from streams.models import Event, EventBlock, Stream
from streams.store import event_row, partitions
from streams.store import outline as outlines

log = logging.getLogger(__name__)

BLOCK = 1000  # events per block: a timeline window (200) opens one or two
LEVEL = 6  # zstandard's level (docs/recorder.md, "At rest": sizes and speeds measured)
VERSION = 3  # 3: the block names its columns and their kinds (1, 2: a fixed list, `_LEGACY`)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# How a column is packed, by its kind. The codes are written into blocks: never renumber one.
INT, TIME, TEXT, BOOL, BYTES = 1, 2, 3, 4, 5
# The kind of each model field a column may be (another is refused: `layout`).
_KINDS = {
    "IntegerField": INT,
    "BigIntegerField": INT,
    "SmallIntegerField": INT,
    "PositiveIntegerField": INT,
    "PositiveBigIntegerField": INT,
    "PositiveSmallIntegerField": INT,
    "DateTimeField": TIME,
    "CharField": TEXT,
    "TextField": TEXT,
    "SlugField": TEXT,
    "EmailField": TEXT,
    "BooleanField": BOOL,
    "BinaryField": BYTES,
}
# The sections' order: alike data side by side is what the compressor feeds on.
_ORDER = (INT, TIME, TEXT, BOOL, BYTES)

# What blocks of versions 1 and 2 hold, in their order: bytes already written, never changed.
_V2 = (
    *(("index", INT), ("t_us", INT), ("sequence_number", INT), ("output_index", INT)),
    *(("content_index", INT), ("sent_us", INT), ("received_at", TIME), ("event_name", TEXT)),
    *(("sse_id", TEXT), ("type", TEXT), ("data", TEXT), ("preamble", TEXT)),
    *(("is_json", BOOL), ("raw", BYTES)),
)
_LEGACY = {1: tuple(c for c in _V2 if c[0] != "preamble"), 2: _V2}


def _names(shape):
    """The columns' names and kinds as a block's head lists them."""
    return b"".join(struct.pack(f"<B{len(c)}sB", len(c), c.encode("ascii"), k) for c, k in shape)


# Compression starts from the names of version 2's columns, as if they came before each block:
# a head naming the same columns costs ~15 bytes, not the ~90 its names cost alone (over the
# captures' streams, mostly a block each: +0.4 B/event, unprimed +1.4). Frozen with `_LEGACY`:
# changing it would make every block written since unreadable. A column added later compresses
# unprimed.
_PRIMER = zstandard.ZstdCompressionDict(_names(_V2), dict_type=zstandard.DICT_TYPE_RAWCONTENT)

_NULL = -(2**63)  # an int column's None (no stored value comes near it)


def layout():
    """((column, kind), …) a block carries: the event row's columns (streams/store/event_row.py,
    the one place a new column of `Event` is placed) but the stream's, each of its model
    field's kind, in section order."""
    return _layout(event_row.PROXIED_ROW_COLUMNS, Event._meta.concrete_fields)


@functools.lru_cache(maxsize=4)
def _layout(row_columns, fields):
    """(Keyed on what it derives from: every block read asks, a short stream's block per 15
    events or so.)"""
    by_name = {f.attname: f for f in fields}
    named = [(c, _kind(by_name[c])) for c in row_columns if c != "stream_id"]
    return tuple(sorted(named, key=lambda ck: _ORDER.index(ck[1])))


def _kind(field):
    kind = _KINDS.get(field.get_internal_type())
    if kind is None:
        raise TypeError(f"Event.{field.name}: no way to pack a {field.get_internal_type()}")
    return kind


def columns():
    """The columns a block carries, in the order `encode` takes a row's values."""
    return tuple(c for c, _ in layout())


def packed_columns():
    """Event's columns a block must carry (to check `layout` against)."""
    return {f.attname for f in Event._meta.concrete_fields} - {"id", "stream_id"}


# ---------------------------------------------------------------------------------------------
# The block's bytes


def _ints(values):
    """Delta-encoded signed 64-bit integers, None as `_NULL` (deltas of receipt times and
    indexes are small and alike: what the compressor feeds on)."""
    out = array("q")
    previous = 0
    for v in values:
        if v is None:
            out.append(_NULL)
        else:
            out.append(v - previous)
            previous = v
    return out.tobytes()


def _unints(buf, n):
    values = array("q")
    values.frombytes(buf)
    out = []
    previous = 0
    for v in values:
        if v == _NULL:
            out.append(None)
        else:
            previous += v
            out.append(previous)
    assert len(out) == n
    return out


def _blobs(values):
    """Lengths (-1: None) then the bytes, concatenated."""
    lengths = array("q", (-1 if v is None else len(v) for v in values))
    return lengths.tobytes() + b"".join(v for v in values if v is not None)


def _unblobs(buf, n):
    lengths = array("q")
    lengths.frombytes(buf[: 8 * n])
    out = []
    at = 8 * n
    for length in lengths:
        if length < 0:
            out.append(None)
        else:
            out.append(buf[at : at + length])
            at += length
    return out


def _us(value):
    if value is None:
        return None
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _at(us):
    return None if us is None else _EPOCH + dt.timedelta(microseconds=us)


_PACK = {
    INT: _ints,
    TIME: lambda values: _ints([_us(v) for v in values]),
    TEXT: lambda values: _blobs([v.encode("utf-8", "surrogatepass") for v in values]),
    BOOL: lambda values: bytes(bytearray(1 if v else 0 for v in values)),
    BYTES: lambda values: _blobs([None if v is None else bytes(v) for v in values]),
}
_UNPACK = {
    INT: _unints,
    TIME: lambda buf, n: [_at(v) for v in _unints(buf, n)],
    TEXT: lambda buf, n: [v.decode("utf-8", "surrogatepass") for v in _unblobs(buf, n)],
    BOOL: lambda buf, n: [bool(b) for b in buf],
    BYTES: _unblobs,
}


def encode(rows, shape=None):
    """A block's payload from rows (tuples of `columns()`, in index order; `shape`: `layout()`
    when the caller has it): the version, the count of events and of columns, each column's
    name and kind (`_names`), the sections' sizes, then the sections."""
    shape = shape or layout()
    values = list(zip(*rows, strict=True)) if rows else [() for _ in shape]
    sections = [_PACK[kind](v) for (_, kind), v in zip(shape, values, strict=True)]
    head = struct.pack("<BIH", VERSION, len(rows), len(shape)) + _names(shape)
    sizes = struct.pack(f"<{len(sections)}I", *map(len, sections))
    compressor = zstandard.ZstdCompressor(level=LEVEL, dict_data=_PRIMER)
    return compressor.compress(b"".join([head, sizes, *sections]))


def _directory(raw):
    """(n, [(column, kind, size)], where the sections start) of a block's bytes."""
    version, n = struct.unpack_from("<BI", raw)
    if version in _LEGACY:
        held = _LEGACY[version]
        sizes = struct.unpack_from(f"<{len(held)}Q", raw, 5)
        return n, [(c, k, s) for (c, k), s in zip(held, sizes, strict=True)], 5 + 8 * len(held)
    if version != VERSION:
        raise ValueError(f"event block version {version} unknown")
    (count,) = struct.unpack_from("<H", raw, 5)
    at = 7
    held = []
    for _ in range(count):
        length = raw[at]
        held.append((raw[at + 1 : at + 1 + length].decode("ascii"), raw[at + 1 + length]))
        at += length + 2
    sizes = struct.unpack_from(f"<{count}I", raw, at)
    return n, [(c, k, s) for (c, k), s in zip(held, sizes, strict=True)], at + 4 * count


def decode(payload, only=None):
    """{column: [values]} of a block's payload, for each column of `layout()` (of those in
    `only`: a read of a few columns leaves the texts it does not show undecoded): one the block
    lacks (packed before it existed) is the model field's default; one the block holds that
    the event no longer has is skipped."""
    raw = zstandard.ZstdDecompressor(dict_data=_PRIMER).decompress(bytes(payload))
    n, held, at = _directory(raw)
    wanted = set(columns()) if only is None else set(columns()) & set(only)
    out = {}
    for column, kind, size in held:
        if column in wanted:
            out[column] = _UNPACK[kind](raw[at : at + size], n)
        at += size
    for column in wanted - out.keys():
        field = Event._meta.get_field(column)
        out[column] = [field.get_default() for _ in range(n)]
    return out


# ---------------------------------------------------------------------------------------------
# Reading (streams/store/events.py asks here first)


def blocks_of(stream_id, *, after=None, before=None, indexes=None):
    """The stream's blocks a read of after < index < before (of `indexes`) overlaps, as
    (first, last) in index order; `read` fetches their payloads as it reaches them."""
    qs = stream_blocks(stream_id)
    if after is not None:
        qs = qs.filter(last__gt=after)
    if before is not None:
        qs = qs.filter(first__lt=before)
    found = list(qs.order_by("first").values_list("first", "last"))
    if indexes is not None:
        wanted = sorted(set(indexes))
        found = [b for b in found if any(b[0] <= i <= b[1] for i in wanted)]
    return found


def stream_blocks(stream_id):
    """The stream's blocks. On PostgreSQL the query names the stream's `created_at` (a
    subquery), the blocks' partition key, so it opens that day's partition only (pruned when
    the query runs) instead of probing one index per day of history."""
    created = Stream.objects.filter(pk=stream_id).values("created_at")[:1]
    return EventBlock.objects.filter(
        stream_id=stream_id, stream_created_at=models.Subquery(created)
    )


PAYLOADS_AT_ONCE = 64  # the most payloads one query fetches (a whole stream's read)


def _payloads(stream_id, blocks):
    """(first, last, payload) of `blocks` in their order, the payloads fetched in batches that
    double from one: a timeline window opens one or two blocks and fetches only those, a read
    of a whole 100k-event stream takes a handful of queries. A block deleted meanwhile (the
    stream's retention) ends the read there."""
    at, size = 0, 1
    while at < len(blocks):
        chunk = blocks[at : at + size]
        fetched = stream_blocks(stream_id).filter(first__in=[b[0] for b in chunk])
        payloads = dict(fetched.values_list("first", "payload"))
        for first, last in chunk:
            if first not in payloads:
                return
            yield first, last, payloads[first]
        at += size
        size = min(size * 2, PAYLOADS_AT_ONCE)


def read(stream_id, blocks, columns, *, after, before, indexes, types, handed, descending):
    """The rows of the stream's `blocks` (`blocks_of`) as `events.read` gives them."""
    wanted = None if indexes is None else set(indexes)
    types = None if types is None else set(types)
    ordered = list(reversed(blocks)) if descending else blocks
    needed = {*columns, "index", "type", "sent_us"}
    for _first, _last, payload in _payloads(stream_id, ordered):
        block = decode(payload, needed)
        picked = range(len(block["index"]))
        if descending:
            picked = reversed(picked)
        values = [block[c] for c in columns]
        for i in picked:
            index = block["index"][i]
            if after is not None and index <= after:
                continue
            if before is not None and index >= before:
                continue
            if wanted is not None and index not in wanted:
                continue
            if types is not None and block["type"][i] not in types:
                continue
            if handed and block["sent_us"][i] is None:
                continue
            yield tuple(v[i] for v in values)


def count(stream_id):
    """How many events the stream's blocks hold."""
    held = EventBlock.objects.filter(stream_id=stream_id).aggregate(n=models.Sum("count"))["n"]
    return held or 0


def held(streams):
    """How many events the blocks of `streams` (a queryset of them) hold."""
    blocks = EventBlock.objects.filter(stream__in=streams)
    return blocks.aggregate(n=models.Sum("count"))["n"] or 0


def drop(stream_ids):
    """Delete the blocks of `stream_ids` (retention); returns how many events they held."""
    blocks = EventBlock.objects.filter(stream_id__in=list(stream_ids))
    held = blocks.aggregate(n=models.Sum("count"))["n"] or 0
    blocks.delete()
    return held


# ---------------------------------------------------------------------------------------------
# Packing


def pack(stream_id, grace_s=None, now=None):
    """Pack the stream's event rows into blocks if it has ended `grace_s` ago; returns how many
    events it packed (0: not due, already packed, or none)."""
    grace_s = conf.get().compact_after_s if grace_s is None else grace_s
    now = now or dt.datetime.now(dt.UTC)
    with transaction.atomic():
        stream = (
            Stream.objects.select_for_update()
            .filter(pk=stream_id)
            .filter(_ended_before(now - dt.timedelta(seconds=grace_s)))
            .only("pk", "created_at")
            .first()
        )
        if stream is None:
            return 0
        rows = Event.objects.filter(stream_id=stream_id).order_by("index")
        timed = rows.filter(t_us__isnull=False).order_by("-index")
        span = outlines.span(timed.values_list("t_us", flat=True).first())
        if rows.count() <= outlines.ABOVE:
            span = None  # (a short stream's blocks keep no outline)
        shape = layout()
        packed = 0
        batch = []
        before = None  # (the first block's first event is the stream's first)
        for row in rows.values_list(*(c for c, _ in shape)).iterator(chunk_size=BLOCK):
            batch.append(row)
            if len(batch) == BLOCK:
                before = _write(stream, batch, shape, before, span)
                packed += len(batch)
                batch = []
        if batch:
            _write(stream, batch, shape, before, span)
            packed += len(batch)
        if packed:
            Event.objects.filter(stream_id=stream_id).delete()
        # (none to pack is done too: the sweep looks no more at it)
        Stream.objects.filter(pk=stream_id).update(events_packed_at=now)
        return packed


def _write(stream, rows, shape, before, span):
    """Write a block of `rows` with its outline (`before`: the previous block's last receipt
    time, `span`: the stream's, None: no outline; streams/store/outline.py); returns its own
    last receipt time."""
    names = [c for c, _ in shape]
    index, at = names.index("index"), names.index("t_us")
    t_us = [r[at] for r in rows if r[at] is not None]
    picked = [names.index(c) for c in outlines.COLUMNS]
    events = [tuple(r[i] for i in picked) for r in rows]
    outline = None
    if span is not None:
        outline = outlines.dumps(outlines.of_events(events, before_us=before, span_us=span))
    block = EventBlock.objects.create(
        stream_id=stream.pk,
        stream_created_at=stream.created_at,
        first=rows[0][index],
        last=rows[-1][index],
        count=len(rows),
        t_first_us=t_us[0] if t_us else None,
        t_last_us=t_us[-1] if t_us else None,
        payload=encode(rows, shape),
        outline=outline,
    )
    return block.t_last_us


def outline(stream_id, points=True):
    """The outline (streams/store/outline.py) of the stream's blocks, merged (`points=False`:
    without the chart's points). A long stream's (`outlines.ABOVE`) are stored, and a block
    packed before outlines gets its own now, from its decoded events, and keeps it; a short
    stream's blocks are decoded and outlined as they are read."""
    blocks = stream_blocks(stream_id).order_by("first")
    blocks = list(blocks.values_list("first", "t_last_us", "count", "outline"))
    timed = [b[1] for b in blocks if b[1] is not None]
    span = outlines.span(timed[-1] if timed else None)
    keep = sum(b[2] for b in blocks) > outlines.ABOVE
    parts = []
    for at, (first, _, _, stored) in enumerate(blocks):
        if stored is None:
            before = blocks[at - 1][1] if at else None
            parts.append(_outline_anew(stream_id, first, before, span, keep))
        else:
            parts.append(outlines.loads(stored, points))
    return outlines.merged(p for p in parts if p is not None)


def _outline_anew(stream_id, first, before, span, keep):
    payload = stream_blocks(stream_id).filter(first=first).values_list("payload", flat=True)
    payload = payload.first()
    if payload is None:
        return None  # deleted meanwhile (the stream's retention)
    block = decode(payload, outlines.COLUMNS)
    events = list(zip(*(block[c] for c in outlines.COLUMNS), strict=True))
    made = outlines.of_events(events, before_us=before, span_us=span)
    if keep:
        stream_blocks(stream_id).filter(first=first).update(outline=outlines.dumps(made))
    return made


def _ended_before(cut):
    """Streams that ended before `cut` (an import has no finished time: its creation)."""
    ended = ~models.Q(status__in=Stream.ACTIVE_STATUSES)
    when = models.Q(finished_at__lte=cut) | models.Q(finished_at__isnull=True, created_at__lte=cut)
    return ended & when


def _due(grace_s=None, now=None):
    grace_s = conf.get().compact_after_s if grace_s is None else grace_s
    now = now or dt.datetime.now(dt.UTC)
    unpacked = Stream.objects.filter(events_packed_at__isnull=True)
    return unpacked.filter(_ended_before(now - dt.timedelta(seconds=grace_s)))


def due(grace_s=None, now=None, limit=None):
    """Ids of ended streams past their grace not packed yet, in id order.

    A range of the partial index `stream_unpacked` (the running streams and the ended ones
    not yet packed), not a look at every ended stream's rows: that asked the (stream, index)
    index of each, 0.15 s over 100,000 streams on SQLite with none due (2026-12-05)."""
    qs = _due(grace_s, now).order_by("pk").values_list("pk", flat=True)
    return list(qs if limit is None else qs[:limit])


# What /metrics shows: the backlog the last sweep saw and what packing has done.
progress = {"backlog": 0, "streams": 0, "events": 0, "seconds": 0.0}


def sweep(limit, grace_s=None, report=None):
    """Pack up to `limit` (None: every) due streams; returns {"streams", "events"} packed.
    `report`: called after each stream with (done streams, due streams, events so far)."""
    ids = due(grace_s, limit=limit)
    partitions.ensure_for(ids)  # (a partition is made outside the packing's transactions)
    progress["backlog"] = len(ids) if limit is None else _backlog(grace_s, ids, limit)
    done = {"streams": 0, "events": 0}
    for stream_id in ids:
        started = time.perf_counter()
        events = pack(stream_id, grace_s)
        progress["seconds"] += time.perf_counter() - started
        if events:
            done["streams"] += 1
            done["events"] += events
            progress["streams"] += 1
            progress["events"] += events
        if report:
            report(done["streams"], len(ids), done["events"])
    progress["backlog"] = max(0, progress["backlog"] - done["streams"])
    return done


def _backlog(grace_s, ids, limit):
    if len(ids) < limit:
        return len(ids)
    return _due(grace_s).count()
