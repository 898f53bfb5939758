"""The process apart: where a serving process's heavy background jobs run (`where="apart"` in
`streams/run/periodic.py`), so that their Python never holds the GIL the relay's loop waits for.

Each process that runs jobs (each Daphne, each `stream_worker`) owns one child,
`manage.py jobs_apart --parent <pid>`, started with its jobs' task (`keep`) and started
again if it dies (at once if it lived a while, after a doubling pause if it keeps dying at
start). The child runs the apart jobs on periodic's own scheduler and nothing else; it ends with
its parent in every way a parent ends: the parent's task cancelled or its interpreter exiting
(`stop`), or the parent killed outright (its end of the child's stdin closes, and the child
also sees itself adopted by another parent within a tick). Work that must happen once across
processes stays claimed in the database, so the children of several servers never run one
rule's tick twice.
"""

import asyncio
import atexit
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

# (the project's directory, with manage.py: the child runs this code, not another copy)
ROOT = Path(__file__).resolve().parents[2]
# A child that dies sooner than this after its start is started again after a pause that doubles
# each time, up to PAUSE_MAX_S (a child that cannot start at all costs a start a minute).
SHORT_LIFE_S = 10.0
PAUSE_MIN_S = 1.0
PAUSE_MAX_S = 60.0
# How long a stopped child may take to end before it is killed.
STOP_S = 5.0
# The child's CPU priority below its parent's (nice): on a busy machine a child at the
# parent's priority still takes the core the relay's loop waits for (bench alerts, load 20 on
# 2 cores: a tick apart at the same priority added 13 ms to the loop's p99); background work
# waits for the serving processes instead.
NICER = 10


class Child:
    """The child process of this process that runs its apart jobs."""

    def __init__(self):
        self.proc = None
        self.started_at = 0.0
        self.pause_s = 0.0
        self.next_start = 0.0
        self.starts = 0

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        from django.conf import settings

        env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "jobs_apart", "--parent", str(os.getpid())],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,  # (its EOF tells the child its parent is gone)
        )
        self.started_at = time.monotonic()
        self.starts += 1
        return self.proc

    def ended(self, now):
        """The child is found dead at `now`: when to start it again."""
        code = self.proc.returncode
        lived = now - self.started_at
        self.pause_s = (
            min(PAUSE_MAX_S, max(PAUSE_MIN_S, self.pause_s * 2)) if lived < SHORT_LIFE_S else 0.0
        )
        self.next_start = now + self.pause_s
        log.warning(
            "background jobs' process %d ended (exit %s) after %.0f s; starting another in %.0f s",
            self.proc.pid, code, lived, self.pause_s,
        )  # fmt: skip
        self.proc = None

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_S)


_children = set()


def _stop_all():
    for child in list(_children):
        child.stop()


atexit.register(_stop_all)  # (a parent that exits without cancelling its jobs' task)


async def keep(tick_s):
    """Keep this process's child running for as long as this task runs; stop it when the task
    ends. Looks every `tick_s`."""
    child = Child()
    _children.add(child)
    try:
        while True:
            now = time.monotonic()
            if child.proc is not None and child.proc.poll() is not None:
                child.ended(now)
            if child.proc is None and now >= child.next_start:
                try:
                    child.start()
                except OSError as exc:
                    child.pause_s = min(PAUSE_MAX_S, max(PAUSE_MIN_S, child.pause_s * 2))
                    child.next_start = now + child.pause_s
                    log.warning("background jobs' process not started (%s)", exc)
            await asyncio.sleep(tick_s)
    finally:
        _children.discard(child)
        child.stop()


def lower_priority():
    """This process's CPU priority NICER below what it was (where the system lets it)."""
    try:
        os.nice(NICER)
    except (AttributeError, OSError):  # (no nice here: the child is apart all the same)
        pass
