"""Worker processes: run streams for the web processes (`python manage.py stream_worker`).

The queue is the database: a page or the API creates a `pending` row with no runner, and a
worker claims it with a conditional UPDATE (see `runner.claim_pending`), so a stream waits
durably for a worker and two workers never run the same stream. The channel layer only carries
nudges to the `streamscope.workers` group: `worker.wake` (a row is waiting: claim now rather
than at the next poll) and `worker.cancel` (stop a stream, wherever it runs). A nudge lost to a
Redis restart costs one poll interval, never a stream.

Each worker also sweeps (every SWEEP_INTERVAL_S): a stream whose process died (same host: its
pid is gone; any host: its heartbeat is older than HEARTBEAT_STALE_S) becomes `interrupted`,
and with RETRY_INTERRUPTED a new attempt waits for the next free worker.
"""

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import DatabaseError, close_old_connections

from streams.core import conf
from streams.core.lifecycle import RUNNER_ID
from streams.run import runner, shutdown

log = logging.getLogger(__name__)


@sync_to_async
def _db(fn, *args):
    """`fn` on the ORM's thread, surviving a database outage: a dead connection is replaced
    at the next call (CONN_HEALTH_CHECKS), and a failed call counts as "nothing to do"."""
    close_old_connections()
    try:
        return fn(*args)
    except DatabaseError as exc:
        log.warning("worker: database unavailable (%s); retrying at the next poll", exc)
        close_old_connections()
        return []


class StreamWorker:
    def __init__(self, concurrency=None, poll_s=None):
        self.concurrency = concurrency or conf.get().worker_concurrency
        self.poll_s = poll_s if poll_s is not None else conf.get().worker_poll_s
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.started = 0

    async def run(self, drain_s=30.0):
        log.info("stream worker %s: up to %d streams", RUNNER_ID, self.concurrency)
        listener = asyncio.create_task(self._listen(), name="worker-listen")
        # the sweep's retries, if any, are waiting: claim them now
        sweeper = runner.sweep_periodically(on_swept=lambda _: self.wake.set())
        try:
            while not self.stopping.is_set():
                free = self.concurrency - len(runner.running_here())
                claimed = await _db(runner.claim_pending, free) if free > 0 else []
                for stream in claimed:
                    runner.start(stream)
                    self.started += 1
                if claimed and len(claimed) == free:
                    await asyncio.sleep(0)  # full: let the streams start before polling again
                self.wake.clear()
                try:
                    async with asyncio.timeout(self.poll_s):
                        await self.wake.wait()
                except TimeoutError:
                    pass
        finally:
            listener.cancel()
            sweeper.cancel()
            await self._drain(drain_s)

    async def _listen(self):
        """Nudges from the channel layer; re-subscribes after a layer outage."""
        layer = get_channel_layer()
        if layer is None:
            return
        while True:
            try:
                channel = await layer.new_channel()
                await layer.group_add(runner.WORKERS_GROUP, channel)
                while True:
                    message = await layer.receive(channel)
                    kind = message.get("type")
                    if kind == "worker.wake":
                        self.wake.set()
                    elif kind == "worker.cancel":
                        stream_id = message.get("stream")
                        if stream_id in runner.running_here():
                            runner.cancel(stream_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("worker: channel layer unavailable; polling only, retrying in 1 s")
                await asyncio.sleep(1.0)

    async def _drain(self, drain_s):
        """Let running streams finish (a deploy should not cut answers short), then interrupt
        the rest: the servers' graceful stop (streams/run/shutdown.py), one mechanism."""
        await shutdown.drain(drain_s)
