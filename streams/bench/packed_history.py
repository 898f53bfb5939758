"""A history of packed events at the size of a big deployment, written fast (issue 49's 100M-event
proof; `seed_demo --packed-events N`, docs/performance.md "A hundred million events").

Packing a hundred million events one stream at a time would take the packer (~100k events/s)
most of an hour after seeding them as rows; this writes the blocks directly. The events are
the simulator's: `seed_demo.make_stream` makes streams of realistic lengths (`LENGTHS`, from
the simulator's profiles: mostly 50–2,000 events, a few of about 100k), wire-faithful Responses
API JSON with receipt offsets, and `compact.encode` packs them as the packer would. Each
seeded stream is given one of these templates whole (a block's payload names no stream, so
its bytes are reused): its rows are replaced by the template's blocks and its `event_count`
set to theirs. The stream's other figures (its output text, findings) stay those seed_demo
made, so the pages' figures and the timeline's events do not tell the same story; for timing
the pages and the storage that does not matter, and nothing but a benchmark should run on it.
"""

import datetime as dt
import random

from django.db import connection, transaction

from streams.models import Event, EventBlock, Stream
from streams.store import compact, partitions
from streams.store import outline as outlines

# (events a stream asks the maker for on average, weight): most streams are short answers,
# some long ones, a few agents' sessions of ~100k events (the maker's own spread around each)
LENGTHS = ((60, 30), (200, 30), (500, 20), (1_000, 12), (2_000, 7.9), (100_000, 0.1))
TEMPLATES_PER_LENGTH = 4
USERS = [("alice", 1.0)]


def templates(rng, make_stream, lengths=LENGTHS, per_length=TEMPLATES_PER_LENGTH):
    """[(weight, [block rows])] of streams made by `make_stream` (seed_demo's, which hands
    itself in: the command is above this module): a block row is (first, last, count,
    t_first_us, t_last_us, payload, outline)."""
    made = []
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for length, weight in lengths:
        for _ in range(per_length):
            _fields, rows, _findings = make_stream(rng, base, USERS, length)
            events = [_as_columns(i, row, base) for i, row in enumerate(rows)]
            made.append((weight / per_length, _blocks(events)))
    return made


def _as_columns(index, row, base):
    """seed_demo's event row (t_us, type, sequence_number, output_index, content_index,
    is_json, data) as a block's row (`compact.columns()`)."""
    t_us, type_, seq, out_i, content_i, is_json, data = row
    named = {
        "index": index,
        "t_us": t_us,
        "sequence_number": seq,
        "output_index": out_i,
        "content_index": content_i,
        "sent_us": None,
        "received_at": base + dt.timedelta(microseconds=t_us),
        "event_name": "",
        "sse_id": "",
        "type": type_,
        "data": data,
        "is_json": is_json,
        "raw": None,
        "preamble": "",
    }
    return tuple(named[c] for c in compact.columns())


def _blocks(events):
    """The blocks (and their outlines, a long stream's only) the packer would write of `events`."""
    out = []
    names = compact.columns()
    index, at_t = names.index("index"), names.index("t_us")
    picked = [names.index(c) for c in outlines.COLUMNS]
    span = outlines.span([e[at_t] for e in events if e[at_t] is not None][-1])
    before = None
    for at in range(0, len(events), compact.BLOCK):
        chunk = events[at : at + compact.BLOCK]
        t_us = [e[at_t] for e in chunk if e[at_t] is not None]
        first, last = chunk[0][index], chunk[-1][index]
        payload = compact.encode(chunk)
        outline = None
        if len(events) > outlines.ABOVE:
            made = [tuple(e[i] for i in picked) for e in chunk]
            outline = outlines.dumps(outlines.of_events(made, before_us=before, span_us=span))
        out.append((first, last, len(chunk), t_us[0], t_us[-1], payload, outline))
        before = t_us[-1]
    return out


def fill(total_events, make_stream, seed=1, progress=None):
    """Give the seeded streams (oldest first) templates' blocks until `total_events` are held;
    returns {"streams", "events", "blocks", "payload_bytes"}. Every event row is deleted first
    (seed_demo's short streams), and the streams left over have none."""
    rng = random.Random(seed)
    made = templates(rng, make_stream)
    weights = [w for w, _ in made]
    streams = Stream.objects.order_by("created_at").values_list("pk", "created_at")
    out = {"streams": 0, "events": 0, "blocks": 0, "payload_bytes": 0}
    with transaction.atomic():
        _delete_rows()
        Stream.objects.update(event_count=0, events_packed_at=dt.datetime.now(dt.UTC))
    days = streams.values_list("created_at", flat=True)
    partitions.ensure({c.astimezone(dt.UTC).date() for c in days})
    batch, counts = [], {}
    for pk, created_at in streams.iterator(chunk_size=10_000):
        if out["events"] >= total_events:
            break
        [(_, blocks)] = rng.choices(made, weights)
        n = sum(b[2] for b in blocks)
        counts.setdefault(n, []).append(pk)
        batch += [(pk, created_at, *b) for b in blocks]
        out["streams"] += 1
        out["events"] += n
        out["blocks"] += len(blocks)
        out["payload_bytes"] += sum(len(b[5]) for b in blocks)
        if len(batch) >= 2_000:
            _write(batch)
            batch = []
            if progress:
                progress(out)
    _write(batch)
    for n, ids in counts.items():
        for at in range(0, len(ids), 5_000):
            Stream.objects.filter(pk__in=ids[at : at + 5_000]).update(event_count=n)
    return out


def _delete_rows():
    if connection.vendor != "postgresql":
        Event.objects.all().delete()
        return
    with connection.cursor() as cursor:
        # (rows written in the caller's transaction have their foreign-key checks deferred:
        # PostgreSQL truncates no table with checks pending)
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"TRUNCATE {connection.ops.quote_name(Event._meta.db_table)}")


def _write(batch):
    if not batch:
        return
    columns = ("stream_id", "stream_created_at", "first", "last", "count", "t_first_us")
    columns += ("t_last_us", "payload", "outline")
    if connection.vendor == "postgresql":
        qn = connection.ops.quote_name
        names = ", ".join(qn(c) for c in columns)
        with connection.cursor() as cursor:
            sql = f"COPY {qn(EventBlock._meta.db_table)} ({names}) FROM STDIN"
            with cursor.cursor.copy(sql) as copy:
                for row in batch:
                    copy.write_row(row)
        return
    EventBlock.objects.bulk_create(
        [EventBlock(**dict(zip(columns, row, strict=True))) for row in batch], batch_size=500
    )
