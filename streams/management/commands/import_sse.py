"""Import captured streams (raw SSE bodies or HAR exports) and report what the checker found."""

import json
from collections import Counter
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from streams.ingest.importer import CaptureError, import_capture
from streams.management import cli

SEVERITIES = ("error", "warning", "info")
EXCERPT_CHARS = 120


class Command(BaseCommand):
    help = (
        "Import .sse files or HAR exports as streams (one per SSE response) and report their "
        "status and findings. Exit status 2 when a file could not be imported; the others are."
    )

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument("--json", action="store_true", help="one JSON object per stream")
        parser.add_argument("--model", default="", help="the model the request asked for")
        parser.add_argument("--user", default="", help="owner of the imported streams (username)")

    def handle(self, *args, **opts):
        # Each file is stored in one transaction (streams.ingest.importer): a file cut short by a
        # stop leaves no row behind, and the files before it stay imported.
        with cli.stoppable(self, "import_sse"):
            self.import_files(opts)

    def import_files(self, opts):
        user = None
        if opts["user"]:
            try:
                user = get_user_model().objects.get(username=opts["user"])
            except get_user_model().DoesNotExist as exc:
                raise CommandError(f"no user {opts['user']!r}") from exc
        failed = []
        for name in opts["files"]:
            try:
                content = Path(name).read_bytes()
                streams = import_capture(content, Path(name).name, user=user, model=opts["model"])
            except (OSError, CaptureError) as exc:
                message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                failed.append(name)
                if opts["json"]:
                    self.stdout.write(json.dumps({"file": name, "error": message}))
                self.stderr.write(f"{name}: cannot import: {message}")
                continue
            for stream in streams:
                findings = list(
                    stream.findings.order_by("event_index", "id").values(
                        "code", "severity", "event_index", "detail"
                    )
                )
                if opts["json"]:
                    self.stdout.write(json.dumps(self.summary(name, stream, findings)))
                else:
                    self.report(name, stream, findings)
        if failed:
            raise CommandError(
                f"{len(failed)} of {len(opts['files'])} files could not be imported", returncode=2
            )

    @staticmethod
    def summary(name, stream, findings):
        return {
            "file": name,
            "stream_id": stream.pk,
            "status": stream.status,
            "events": stream.event_count,
            "output_text": stream.output_text,
            "violations": findings,
        }

    def report(self, name, stream, findings):
        w = self.stdout.write
        w(f"{name}: stream {stream.pk}, {stream.status}, {stream.event_count} events")
        text = " ".join(stream.output_text.split())
        if len(text) > EXCERPT_CHARS:
            text = text[:EXCERPT_CHARS] + "…"
        w(f"  output: {text!r}" if text else "  output: (none)")
        counts = Counter(f["severity"] for f in findings)
        w("  findings: " + ", ".join(f"{counts[s]} {s}" for s in SEVERITIES))
        for f in findings:
            where = "end" if f["event_index"] is None else f"event {f['event_index']}"
            detail = f["detail"] if len(f["detail"]) <= 100 else f["detail"][:100] + "…"
            line = f"    {f['severity']:<7} {f['code']} @ {where}"
            w(line + (f": {detail}" if detail else ""))
