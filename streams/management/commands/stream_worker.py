"""`python manage.py stream_worker`: run the streams web processes start (RUNNER=worker)."""

import asyncio
import signal

from django.core.management.base import BaseCommand

from streams.core import conf, lifecycle, warmup
from streams.core.lifecycle import RUNNER_ID
from streams.run.worker import StreamWorker


class Command(BaseCommand):
    help = "Claim and record streams started by the web processes (see streams/run/worker.py)."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=0, help="streams at once")
        parser.add_argument(
            "--drain",
            type=float,
            default=None,
            help="seconds to finish on stop (default: STREAMSCOPE_SHUTDOWN_GRACE_S)",
        )

    def handle(self, *args, **opts):
        # Before claiming work: a stream claimed now would wait here for the load (no stream
        # starts before it, streams/core/warmup.py) while another worker could record it.
        warmup.now()
        asyncio.run(self.main(opts))

    async def main(self, opts):
        worker = StreamWorker(concurrency=opts["concurrency"] or None)
        loop = asyncio.get_running_loop()

        def stop():
            lifecycle.stopping = True  # (what it cuts short ends `interrupted`, not cancelled)
            worker.stopping.set()
            worker.wake.set()  # (out of its wait for work)

        # one handler per signal: a second add_signal_handler replaces the first
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        self.stdout.write(f"stream worker {RUNNER_ID} ready")
        self.stdout.flush()
        drain = opts["drain"] if opts["drain"] is not None else conf.get().shutdown_grace_s
        await worker.run(drain_s=drain)
        self.stdout.write(f"stream worker stopped after {worker.started} stream(s)")
