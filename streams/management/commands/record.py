"""Run streams through the recording pipeline without a web server."""

import asyncio
import json
import sys

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from streams import services
from streams.models import Stream


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
        body = services.build_request_body(
            opts["prompt"],
            opts["model"],
            instructions=opts["instructions"],
            scenario=opts["scenario"],
        )
        results = asyncio.run(self.record_all(body, user, opts))
        broken = [r for r in results if r.get("error")]
        if broken:
            sys.exit(1)

    async def record_all(self, body, user, opts):
        semaphore = asyncio.Semaphore(opts["concurrency"])
        base_url = opts["upstream"].rstrip("/") or None
        indent = None if opts["json"] else 2

        async def one():
            async with semaphore:
                stream = await sync_to_async(services.new_row)(user, body, claimed=True)
                try:
                    last = await services.record(stream, base_url=base_url)
                    result = await sync_to_async(summary)(last.pk)
                except Exception as exc:  # recording itself failed: say so, keep going
                    result = {"id": stream.pk, "error": f"{type(exc).__name__}: {exc}"}
                self.stdout.write(json.dumps(result, indent=indent))
                return result

        return await asyncio.gather(*(one() for _ in range(opts["count"])))


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
