"""The writer: one per event loop, it commits the queued events of all that loop's streams in
batches, then publishes them.

```
reader (per stream: recorder) ─► bounded queue ─► writer ─► DB commit ─► publish batch
                                 (backpressure)   (N events or T ms)   (channel layer)
```
- A reader never waits for the database per event: it appends to the writer's bounded queue and
  only waits when that queue is full, which stops it reading the socket, so TCP slows the
  upstream instead of memory growing.
- The writer drains what is queued, across streams, into one transaction on its own thread
  (multi-row inserts; a stream's row only when a field of it changed, its event_count at most
  every COUNT_WRITE_INTERVAL_MS), and only after the commit publishes one channel-layer message
  per stream. Terminal events, cancellation and the end of a stream flush at once.
- The SQL of a batch is `streams/store/rows.py`'s (`rows.write_batch`): a stream whose rows the
  database refuses loses its events of the batch and ends `failed` (`storage_refused`), the
  other streams of the batch are stored.
- A proxied stream's own row is queued here too (`create`): made on the writer's thread and
  inserted first in the next batch, which commits at once, as for a flush.
"""

import asyncio
import collections
import datetime as dt
import functools
import logging
from concurrent.futures import ThreadPoolExecutor

from streams.core import conf
from streams.live import relay
from streams.observe import telemetry
from streams.shapes import public
from streams.shapes.event_message import INDEX
from streams.store import rows
from streams.store.event_row import PROXIED_ROW_COLUMNS, ROW_COLUMNS
from streams.store.rows import StorageUnavailable

log = logging.getLogger(__name__)

# The rows slot of a queued new stream row (`Writer.create`): not events.
NEW_ROW = object()

_db_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamscope-writer")


def db_executor():
    """The writer's own thread (and so its own database connection)."""
    return _db_executor


class Writer:
    """Commits queued events of all streams of one event loop in batches.

    The queue is a deque of `(rec, rows, payloads, done)` entries, one per received chunk
    (`rows` flat, see `Recording.ingest`) or per flush request (`rows` None, `done` a future),
    rather than an asyncio.Queue: asyncio.Queue's bookkeeping cost more than the rest of the
    reader's per-event work together (docs/performance.md, "Recorder")."""

    def __init__(self, max_events=None, max_age_ms=None, queue_max=None):
        self.max_events = max_events or conf.get().batch_max_events
        self.max_age_s = (
            max_age_ms if max_age_ms is not None else conf.get().batch_max_age_ms
        ) / 1e3
        self.capacity = queue_max or conf.get().queue_max_events
        self.buffer = collections.deque()
        self.queued = 0  # events in the buffer
        self.batches = 0
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()  # the buffer is not empty
        self._space = asyncio.Event()  # the buffer is below capacity
        self._space.set()
        self._kick = None  # a pending batch's timer: resolve it to commit early
        self._flushes = 0  # flush requests in the buffer: commit without waiting
        self._oldest = 0.0  # loop time when the buffer last became non-empty
        self._batch = ()  # the batch being committed
        self.task = self._loop.create_task(self._run(), name="streamscope-writer")
        self.task.add_done_callback(self._stopped)

    def _stopped(self, task):
        # A writer that is gone (its loop shutting down, cancelled) answers every flush still
        # waiting, so that no recording waits for a commit that will never come.
        for entry in (*self._batch, *self.buffer):
            done = entry[3]
            if done is not None and not done.done():
                done.set_exception(StorageUnavailable("the writer stopped"))

    async def put(self, rec, rows, payloads):
        """Queue the events of one received chunk (what `Recording.ingest` returned): one call
        per chunk, not per event (a fast upstream sends a hundred events per chunk)."""
        self.buffer.append((rec, rows, payloads, None))
        if not self._ready.is_set():
            self._ready.set()
            self._oldest = self._loop.time()
        n = self.queued = self.queued + len(payloads)
        if n >= self.max_events:
            self._wake()
            if n >= self.capacity:
                # Backpressure: the reader stops reading its socket until the writer catches up.
                self._space.clear()
                await self._space.wait()

    async def create(self, make):
        """The new stream row `make()` builds (unsaved, `rows.new`; called on the writer's
        thread), inserted with the next batch, committed at once like a flush; returns it once
        committed, or raises why it could not be made or inserted. A row in a transaction of
        its own wrote the row's and its indexes' pages to the log once more for every stream,
        on a thread of its own (docs/performance.md, "Recorder")."""
        new_row = rows.NewRow(make)
        await self._at_once(new_row, NEW_ROW)
        if new_row.error is not None:
            raise new_row.error
        return new_row.stream

    async def flush(self, rec):
        """Commit everything queued so far (and `rec`'s pending fields); wait for it."""
        await self._at_once(rec, None)

    async def _at_once(self, item, kind):
        """Queue `item` (a flush's recording, or a NEW_ROW) for a commit that does not wait
        for the batch's age, and wait for that commit."""
        if self.task.done():
            raise StorageUnavailable("the writer stopped")
        done = self._loop.create_future()
        self.buffer.append((item, kind, None, done))
        self._flushes += 1
        self._ready.set()
        self._wake()
        await done

    def _wake(self):
        kick = self._kick
        if kick is not None and not kick.done():
            kick.set_result(None)

    async def _run(self):
        while True:
            await self._ready.wait()
            await self._let_fill()
            batch, events = self._take_batch()
            self._batch = batch
            try:
                await self._commit(batch)
            except Exception as exc:
                log.exception("writer: a batch of %d events could not be stored", events)
                _fail_batch(batch, exc)

    async def _let_fill(self):
        """Let the batch fill until its oldest event is max_age old (or until full, or a
        flush). From the oldest event, not from now: what queued during the last commit has
        waited already (docs/performance.md, "Recorder")."""
        loop = self._loop
        wait_s = self._oldest + self.max_age_s - loop.time()
        if not self._flushes and self.queued < self.max_events and wait_s > 0:
            self._kick = kick = loop.create_future()
            timer = loop.call_later(wait_s, _resolve, kick)
            await kick
            timer.cancel()
            self._kick = None

    def _take_batch(self):
        """The next batch and its event count: everything queued (whole chunks, up to
        max_events), flush requests included, so that one commit answers them all. (A flush
        that ended its batch made 100 streams starting or ending together 100 commits in a
        row, and every event queued behind them waited; docs/performance.md, "Recorder".)"""
        buffer = self.buffer
        batch = []
        events = 0
        while buffer and events < self.max_events:
            entry = buffer.popleft()
            batch.append(entry)
            if entry[3] is not None:
                self._flushes -= 1
            else:
                events += len(entry[2])
        self.queued -= events
        if not buffer:
            self._ready.clear()
        else:
            self._oldest = self._loop.time()  # (a full batch's rest: committed without waiting)
        if self.queued < self.capacity and not self._space.is_set():
            self._space.set()
        return batch, events

    async def _commit(self, batch):
        event_rows, proxied_rows, per_stream, flushes, new_rows = _sort_batch(batch)
        updates, findings = self._stream_changes(per_stream)
        started = telemetry.batch_started(self.queued, self.capacity)
        refused = await self._loop.run_in_executor(
            db_executor(),
            functools.partial(
                rows.write_batch, event_rows, updates, findings, None, proxied_rows, new_rows
            ),
        )
        self.batches += 1
        telemetry.batch_committed(
            len(event_rows) // len(ROW_COLUMNS),
            len(proxied_rows) // len(PROXIED_ROW_COLUMNS),
            started,
        )
        if refused:
            _refused(refused, per_stream, flushes)
        await _publish(per_stream, updates)
        for _, done in flushes:
            if not done.done():
                done.set_result(None)

    def _stream_changes(self, per_stream):
        """`({rec: fields}, findings)` of the batch's streams: each one's pending fields and
        findings, taken from it, its event_count when due, and `heartbeat_at` on every row
        written."""
        now = dt.datetime.now(dt.UTC)
        now_s = self._loop.time()
        count_interval_s = conf.get().count_write_interval_ms / 1e3
        updates = {}
        findings = []
        for rec, payloads in per_stream.items():
            fields = rec.pending_fields
            rec.pending_fields = {}
            if payloads and (fields or now_s >= rec.count_due_s):
                # Not at every batch: a stream row touched at every 5 ms commit made each commit
                # rewrite one page per active stream (WAL), much of the writer's time with many
                # paced streams (docs/performance.md, "Recorder"). Its events are committed
                # either way; the count is exact whenever anything else of the row changes,
                # and at the end.
                fields["event_count"] = max(fields.get("event_count", 0), payloads[-1][INDEX] + 1)
                rec.count_due_s = now_s + count_interval_s
            if fields:
                fields["heartbeat_at"] = now
                updates[rec] = fields
            if rec.pending_findings:
                findings.extend(rec.pending_findings)
                rec.pending_findings = []
        return updates, findings


def _sort_batch(batch):
    """A batch's entries sorted out: `(event rows, proxied rows, {rec: payloads in arrival
    order}, [(rec, flush future)], [new rows])` (a new row's future is among the flushes: it
    is answered with them)."""
    event_rows = []
    proxied_rows = []
    per_stream = {}
    flushes = []
    new_rows = []
    for rec, chunk_rows, payloads, done in batch:
        if chunk_rows is NEW_ROW:
            new_rows.append(rec)
            flushes.append((None, done))
        elif done is None:
            if rec.proxied:
                proxied_rows += chunk_rows
            else:
                event_rows += chunk_rows
            mine = per_stream.get(rec)
            if mine is None:
                # a copy: the batch's entries keep their own counts (a failed commit
                # reports per stream how many events it lost)
                per_stream[rec] = list(payloads)
            else:
                mine += payloads
        else:
            per_stream.setdefault(rec, [])
            flushes.append((rec, done))
    return event_rows, proxied_rows, per_stream, flushes, new_rows


async def _publish(per_stream, updates):
    """One channel-layer message per stream of a committed batch: its events and the public
    fields of its row that changed."""
    publishes = []
    for rec, payloads in per_stream.items():
        fields = updates.get(rec, ())
        shown = {k: v for k, v in fields.items() if k in public.PUBLIC_FIELDS} if fields else {}
        if payloads or shown:
            pending = relay.publish(rec.stream_id, rec.project_id, payloads, shown)
            if pending is not None:
                publishes.append(pending)
    if publishes:
        await asyncio.gather(*publishes)


def _fail_batch(batch, exc):
    """A batch that could not be stored (`exc`): every stream with events in it loses them,
    and every flush waiting on it fails."""
    lost = collections.Counter()
    for rec, _, payloads, _ in batch:
        if payloads:
            lost[rec] += len(payloads)
    for rec, n in lost.items():
        # The reader stops at its next chunk and the stream ends `failed` with a status saying
        # how much was lost: never a silent gap.
        _lose(rec, n, "storage_unavailable", "database unavailable", str(exc))
    for entry in batch:
        done = entry[3]
        if done is not None and not done.done():
            done.set_exception(StorageUnavailable(str(exc)))


def _lose(rec, n, code, cause, error):
    """`rec` lost `n` events of a batch (and its row's pending changes): its reader stops at
    its next chunk and the stream ends `failed` with `code`, saying how much was lost."""
    rec.lost_events += n
    if n:
        telemetry.events_lost(rec, n)
    rec.storage_code, rec.storage_cause = code, cause
    if rec.lost_events:
        lost = f"{rec.lost_events} event(s) could not be stored"
    else:
        lost = "the stream's row could not be written"
    rec.storage_error = f"{lost}: {error}; recording stopped"


def _refused(refused, per_stream, flushes):
    """The streams whose rows the database refused (`rows.write_batch` wrote the others): they
    lose this batch's events, are not published, and their flushes fail."""
    for rec in [r for r in per_stream if r.stream_id in refused]:
        why = rows.describe_refusal(refused[rec.stream_id])
        payloads = per_stream.pop(rec)
        _lose(rec, len(payloads), "storage_refused", f"refused by the database: {why}", why)
    for rec, done in flushes:
        if rec is not None and rec.stream_id in refused and not done.done():
            done.set_exception(StorageUnavailable(rec.storage_error))


def _resolve(future):
    if not future.done():
        future.set_result(None)


_writers = {}


def get_writer():
    """The writer of the running event loop (one per loop: the server's, or a command's)."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None or writer.task.done():
        writer = _writers[loop] = Writer()
        # Forget writers of closed loops.
        for other in [lp for lp in _writers if lp.is_closed()]:
            del _writers[other]
    return writer
