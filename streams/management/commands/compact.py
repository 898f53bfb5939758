"""Pack finished streams' events into compressed blocks now (what the `compact` background job
does a few streams at a time): docs/recorder.md, "At rest"."""

from django.core.management.base import BaseCommand

from streams.store import compact


class Command(BaseCommand):
    help = "Pack the events of ended streams into compressed blocks, with progress."

    def add_arguments(self, parser):
        parser.add_argument(
            "--grace",
            type=float,
            default=None,
            help="seconds after a stream ended before it is packed (default: COMPACT_AFTER_S)",
        )
        parser.add_argument("--limit", type=int, default=None, help="at most this many streams")

    def handle(self, *args, grace, limit, **options):
        def report(done, due, events):
            if done % 100 == 0 or done == due:
                self.stderr.write(f"  {done:,} of {due:,} streams, {events:,} events…")

        done = compact.sweep(limit=limit, grace_s=grace, report=report)
        self.stdout.write(f"packed {done['streams']:,} streams, {done['events']:,} events")
