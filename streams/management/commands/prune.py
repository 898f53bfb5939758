"""`python manage.py prune [--dry-run]`: apply retention now (streams/store/retention.py)."""

from django.core.management.base import BaseCommand

from streams.core import conf
from streams.store import retention


class Command(BaseCommand):
    help = (
        "Delete events and streams older than STREAMSCOPE_RETAIN_EVENTS_DAYS / "
        "STREAMSCOPE_RETAIN_STREAMS_DAYS (or their project's own retention), in small batches "
        "(the analytics aggregates stay)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    def handle(self, *args, **opts):
        if not retention.any_due():
            self.stdout.write(
                "retention is off (STREAMSCOPE_RETAIN_*_DAYS are 0 and no project has its own): "
                "nothing to do"
            )
            return
        done = retention.prune(dry_run=opts["dry_run"])
        verb = "would delete" if opts["dry_run"] else "deleted"
        s = conf.get()
        self.stdout.write(
            f"{verb} {done['streams']:,} streams older than {s.retain_streams_days:g} days, "
            f"and the events of {done['event_streams']:,} more older than "
            f"{s.retain_events_days:g} days ({done['events']:,} events in all; a project with "
            "a retention of its own by its days)"
        )
