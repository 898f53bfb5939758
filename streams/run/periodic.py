"""Background jobs of every long-lived process (Daphne's and each `stream_worker`'s), off the loop.

A job is a plain function registered once with `@periodic.job(name, every_s)` (its module is
imported by `StreamsConfig.ready`, so every process knows every job). Each process runs its due
jobs on one task per loop, each job in a thread of its own (never the ORM's shared sync thread,
so a slow job delays no request), one job at a time (a job is never run twice at once by one
process), with its failures logged once per kind until it works again.

Every process runs every job: a job whose work must happen once across processes (an alert's
evaluation, a notification's delivery, a deletion's batch) claims that work in the database
with a conditional UPDATE, as the work queue does (`runner.claim_pending`). Tests call a job's
function, or `run_due(now)`, directly: nothing here needs a server.

Where a job runs (`where`): ANY, in a thread of the serving process, for light work and I/O
(a thread waiting on a socket or the database holds no GIL); APART, in the child process each
serving process owns (`streams/run/apart.py`), for work whose Python would hold the GIL for
long: a thread of the server's own, however off the loop, keeps the relay's loop waiting while
it runs (`bench alerts`: one tick of 1,000 rules added 42 ms to the loop's p99 from a thread).
The child runs the APART jobs on this same scheduler (`run_here`). With
`STREAMSCOPE_JOBS_APART` off, every job runs in the serving process.
"""

import asyncio
import contextvars
import dataclasses
import logging
import time

from asgiref.sync import sync_to_async
from django.db import close_old_connections

log = logging.getLogger(__name__)

# How often the loop looks for due jobs: a job's period is honoured to within this.
TICK_S = 1.0

ANY = "any"  # in a thread of the serving process
APART = "apart"  # in the serving process's child (streams/run/apart.py)
WHERE = (ANY, APART)


@dataclasses.dataclass
class Job:
    name: str
    every_s: float
    fn: object
    where: str = ANY
    due_at: float = 0.0  # time.monotonic() of its next run; 0: at the first tick
    failing: set = dataclasses.field(default_factory=set)  # exception kinds logged

    def run(self):
        close_old_connections()  # a long-lived thread: replace a connection the database dropped
        try:
            self.fn()
        except Exception as exc:
            kind = type(exc).__name__
            if kind not in self.failing:
                self.failing.add(kind)
                log.warning("%s failed (%s: %s); retrying, logged once", self.name, kind, exc)
        else:
            if self.failing:
                log.info("%s works again", self.name)
                self.failing.clear()
        finally:
            close_old_connections()


_jobs = {}


def job(name, every_s, where=ANY):
    """Register the decorated function as the job `name`, run every `every_s` seconds by every
    long-lived process, in it (ANY) or in its child (APART). Registering a name again replaces
    it (a module imported twice)."""
    if where not in WHERE:
        raise ValueError(f"job {name!r}: where={where!r} is not one of {WHERE}")

    def register(fn):
        _jobs[name] = Job(name, float(every_s), fn, where)
        return fn

    return register


def jobs():
    return dict(_jobs)


def names(where=None):
    return sorted(n for n, each in _jobs.items() if where is None or each.where == where)


def due(now=None, where=None):
    """The jobs due at `now` (time.monotonic()), their next time set; only those that run
    `where` if given."""
    now = time.monotonic() if now is None else now
    found = []
    for each in list(_jobs.values()):
        if where is not None and each.where != where:
            continue
        if each.due_at <= now:
            each.due_at = now + each.every_s
            found.append(each)
    return found


def run_due(now=None):
    """Run the due jobs here, one after the other (for tests and commands)."""
    for each in due(now):
        each.run()


_loops = {}


def start():
    """Run the jobs for as long as the running loop runs (one task per loop): the ANY jobs
    here, the APART jobs in a child this task keeps running (all of them here with
    `STREAMSCOPE_JOBS_APART` off); called with the sweeper (`runner.sweep_periodically`), so
    exactly the processes that sweep run jobs. Returns the task; cancelling it stops the child."""
    loop = asyncio.get_running_loop()
    task = _loops.get(loop)
    if task is None or task.done():
        task = _loops[loop] = loop.create_task(
            _serve(), name="streamscope-jobs", context=contextvars.Context()
        )
    return task


async def _serve():
    from streams.core import conf

    if not conf.get().jobs_apart:
        return await run_here(None)
    from streams.run import apart

    child = None
    if names(APART):
        child = asyncio.create_task(apart.keep(TICK_S), name="streamscope-jobs-apart")
    try:
        await run_here(ANY)
    finally:
        if child is not None:
            child.cancel()
            await asyncio.gather(child, return_exceptions=True)


def _in_thread(fn):
    # asgiref's, not asyncio.to_thread: a job that starts or awaits a stream with
    # `async_to_sync` (a judge, an experiment's item) then runs it on this process's own loop,
    # where its relay, heartbeat and cancel live, not on a loop of the job's thread.
    return sync_to_async(fn, thread_sensitive=False)


async def run_here(where):
    """Run the jobs that run `where` (None: every job) on this loop, each in a thread of its
    own, until cancelled."""
    running = {}
    try:
        while True:
            for each in due(where=where):
                if each.name not in running or running[each.name].done():
                    running[each.name] = asyncio.create_task(_in_thread(each.run)())
            await asyncio.sleep(TICK_S)
    finally:
        for task in running.values():
            task.cancel()
