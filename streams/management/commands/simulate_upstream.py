"""``python manage.py simulate_upstream`` — run the upstream simulator standalone."""

from __future__ import annotations

import asyncio
import gc
import signal

from django.core.management.base import BaseCommand

from streams.simulator.scenarios import SCENARIOS
from streams.simulator.server import SimulatorServer


class Command(BaseCommand):
    help = "Run the built-in EU GPT / OpenAI Responses API simulator (POST /v1/responses)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument(
            "--seed", default="0", help="Server seed mixed into every request's seed."
        )
        parser.add_argument(
            "--time-scale",
            type=float,
            default=1.0,
            help="Default time scale for requests (0 = no sleeps); metadata.time_scale wins.",
        )
        parser.add_argument(
            "--list-scenarios", action="store_true", help="Print the scenarios and exit."
        )

    def handle(self, *args, **opts):
        if opts["list_scenarios"]:
            for name, desc in SCENARIOS.items():
                self.stdout.write(f"{name:20} {desc}")
            return
        asyncio.run(self._run(opts))

    async def _run(self, opts) -> None:
        server = SimulatorServer(seed=opts["seed"], time_scale=opts["time_scale"])
        await server.start(opts["host"], opts["port"])
        # Its send and receipt times are what tests measure us against: keep collections of
        # the long-lived heap (start-up, then the growing response log) from pausing the loop
        # mid-stream. Otherwise groups of streams drift off their schedule once the log has
        # grown (docs/performance.md, "Simulator").
        gc.freeze()
        freezer = asyncio.get_running_loop().create_task(_freeze_every(1.0))
        self.stdout.write(server.base_url)
        self.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            freezer.cancel()
            await server.stop()
            self.stderr.write("simulator stopped")


async def _freeze_every(seconds):
    """Move what survived into the permanent generation (reference counting still frees it;
    only cyclic garbage, rare here, stays)."""
    while True:
        await asyncio.sleep(seconds)
        gc.freeze()
