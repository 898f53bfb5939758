"""`python manage.py rebuild_aggregates`: recompute the analytics pre-aggregates from the raw
stream and finding rows (streams/store/aggregates.py). History whose raw rows retention deleted is
lost from the aggregates too: the command says so and asks for --force."""

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from streams.store import aggregates, retention


class Command(BaseCommand):
    help = "Rebuild the analytics pre-aggregates from the raw rows."

    def add_arguments(self, parser):
        parser.add_argument(
            "--force", action="store_true", help="rebuild although retention deleted raw rows"
        )

    def handle(self, *args, **opts):
        if retention.any_due((retention.STREAMS,)) and not opts["force"]:
            raise CommandError(
                "STREAMSCOPE_RETAIN_STREAMS_DAYS (or a project's own) is set: the aggregates hold "
                "history whose raw rows are gone, and a rebuild would drop it (use --force to "
                "rebuild anyway)"
            )
        t0 = time.perf_counter()
        with transaction.atomic():
            n = aggregates.rebuild()
        self.stdout.write(
            f"aggregates rebuilt from {n:,} finished streams in {time.perf_counter() - t0:.1f} s"
        )
