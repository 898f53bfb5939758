"""`python manage.py jobs_apart --parent PID`: the heavy background jobs of one serving process
(`where="apart"` in streams/run/periodic.py), in the child that process owns and keeps running
(streams/run/apart.py); not a command to run by hand.

It runs the apart jobs on periodic's own scheduler, at a lower CPU priority, and ends with its
parent: at SIGTERM/SIGINT, when its stdin (the parent's end of a pipe) closes, or when it finds
itself adopted by another process (the parent died and something else kept the pipe open).
Claimed work cut short is claimed again at its next time (a rule at the next tick); a job's
thread still running is not waited for, nor is its transaction (the database undoes it).
"""

import asyncio
import logging
import os
import signal
import sys
import threading

from django.core.management.base import BaseCommand

from streams.run import apart, periodic

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "The heavy background jobs of one server or worker, in its child (not run by hand)."

    def add_arguments(self, parser):
        parser.add_argument("--parent", type=int, default=0, help="end when this process ends")

    def handle(self, *args, **opts):
        apart.lower_priority()
        asyncio.run(serve(opts["parent"]))
        logging.shutdown()
        os._exit(0)  # (job threads still running are not waited for)


async def serve(parent):
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def read_until_eof():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        loop.call_soon_threadsafe(stop.set)

    if parent:
        threading.Thread(target=read_until_eof, name="parent-watch", daemon=True).start()
    jobs = loop.create_task(periodic.run_here(periodic.APART))
    names = ", ".join(periodic.names(periodic.APART))
    log.info("background jobs' process %d runs %s", os.getpid(), names)
    while not stop.is_set():
        if parent and os.getppid() != parent:
            break  # adopted: the parent died without closing our stdin (a fork kept it open)
        try:
            async with asyncio.timeout(periodic.TICK_S):
                await stop.wait()
        except TimeoutError:
            pass
    jobs.cancel()
