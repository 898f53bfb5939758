"""Run streams through the recording pipeline without a web server."""

import asyncio
import json
import sys
import threading

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from streams.core.lifecycle import RUNNER_ID
from streams.management import cli
from streams.models import Stream
from streams.run import runner, services
from streams.store import rows


class Command(BaseCommand):
    help = "Record N streams from the upstream (default: the simulator); one JSON line each."

    def add_arguments(self, parser):
        parser.add_argument("--prompt", required=True)
        parser.add_argument("--model", default="auto")
        parser.add_argument("--scenario", default="")
        parser.add_argument("--instructions", default="")
        parser.add_argument(
            "--upstream", default="", help="API root including /v1 (as UPSTREAM_BASE_URL)"
        )
        parser.add_argument("--count", type=int, default=1)
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--user", default="", help="record the streams as this username")
        parser.add_argument("--json", action="store_true", help="compact JSON lines")

    def handle(self, *args, **opts):
        if opts["count"] < 1 or opts["concurrency"] < 1:
            raise CommandError("--count and --concurrency must be at least 1")
        user = None
        if opts["user"]:
            try:
                user = get_user_model().objects.get(username=opts["user"])
            except get_user_model().DoesNotExist as exc:
                raise CommandError(f"no user {opts['user']!r}") from exc
        body = rows.build_request_body(
            opts["prompt"],
            opts["model"],
            instructions=opts["instructions"],
            scenario=opts["scenario"],
        )
        with cli.stoppable(self, "record", cleanup=cancel_unfinished):
            results = asyncio.run(self.record_all(body, user, opts))
        broken = [r for r in results if r.get("error")]
        if broken:
            sys.exit(1)

    async def record_all(self, body, user, opts):
        """Record the streams; on SIGINT/SIGTERM or a closed stdout raise `cli.Stopped` once
        every recording has ended (or CANCEL_GRACE_S passed)."""
        semaphore = asyncio.Semaphore(opts["concurrency"])
        base_url = opts["upstream"].rstrip("/") or None
        indent = None if opts["json"] else 2
        loop = asyncio.get_running_loop()
        stop = loop.create_future()

        def stopping(code, reason):
            if not stop.done():
                stop.set_result(cli.Stopped(code, reason))

        async def one():
            async with semaphore:
                if stop.done():
                    return None
                result = await _recorded(user, body, base_url)
                try:
                    self.stdout.write(json.dumps(result, indent=indent))
                    self.stdout.flush()  # a line per stream as it ends, also into a pipe
                except BrokenPipeError:
                    stopping(*cli.BROKEN_PIPE)
                return result

        # (only the main thread may handle signals: not so when a test runs this in a thread)
        signals = cli.SIGNALS if threading.current_thread() is threading.main_thread() else ()
        for sig, (code, reason) in signals:
            loop.add_signal_handler(sig, stopping, code, reason)
        tasks = [asyncio.create_task(one()) for _ in range(opts["count"])]
        try:
            everything = asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.wait([everything, stop], return_when=asyncio.FIRST_COMPLETED)
            if stop.done():
                raise stop.result()
            return everything.result()
        finally:
            # Stop the recordings here, while this loop's writer still runs: each one ends by
            # writing its status through the writer. Left to asyncio.run, the writer would be
            # cancelled together with them, and a recording waiting for its last write would
            # wait for ever (the hang in asyncio.run's _cancel_all_tasks, issue 17).
            await _stop_all(tasks)
            for sig, _ in signals:
                loop.remove_signal_handler(sig)


async def _recorded(user, body, base_url):
    """One stream recorded: its summary, or {"id", "error"} when recording itself failed (the
    run goes on)."""
    stream = None
    try:
        stream = await _created(user, body)
        last = await services.record(stream, base_url=base_url)
        return await sync_to_async(summary)(last.pk)
    except Exception as exc:
        return {"id": getattr(stream, "pk", None), "error": f"{type(exc).__name__}: {exc}"}


async def _created(user, body):
    """A new row for this run. A stop that comes while it is being inserted waits for the
    insert: the thread would finish it anyway, after `cancel_unfinished` had looked, and leave
    the row `pending` for good."""
    creating = asyncio.ensure_future(sync_to_async(rows.new_row)(user, body, claimed=True))
    try:
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        await asyncio.wait([creating])
        raise


# How long stopped recordings may take to write their final status before they are left to
# `cancel_unfinished` (normally a few ms: one commit).
CANCEL_GRACE_S = 5.0


async def _stop_all(tasks):
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        _, pending = await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
    for task in pending:
        # Still waiting for its last write (a database that does not answer): a second cancel
        # ends the wait; `cancel_unfinished` writes its status instead.
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=1.0)


def cancel_unfinished():
    """The note for the stop message: this run's streams that ended `cancelled`, those the
    recorder could not end itself among them."""
    runner.cancel_unfinished_here("cancelled: manage.py record was stopped")
    n = Stream.objects.filter(runner=RUNNER_ID, status=Stream.Status.CANCELLED).count()
    return f"{n} stream(s) cancelled" if n else ""


def summary(stream_id):
    s = Stream.objects.get(pk=stream_id)
    return {
        "id": s.pk,
        "status": s.status,
        "requested_model": s.requested_model,
        "resolved_model": s.resolved_model,
        "events": s.event_count,
        "ttft_ms": None if s.ttft_ms is None else round(s.ttft_ms, 3),
        "duration_ms": None if s.duration_ms is None else round(s.duration_ms, 3),
        "violations": s.error_findings,
        "findings": s.findings_count,
        "attempt": s.attempt,
        "first_attempt": s.first_attempt_id,
        "error_code": s.error_code,
    }
