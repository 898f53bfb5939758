"""`python manage.py reprice [--since D] [--until D] [--model GLOB] [--recount]`: the cost of
stored streams again, at the prices valid at each one's start as the price table says now
(after an edit in the admin), the analytics rollups following (streams/store/rows.py,
`reprice`). `--recount` also reads each stream's usage again from its stored events (rows
stored before usage was kept get theirs either way)."""

import datetime as dt
import fnmatch

from django.core.management.base import BaseCommand, CommandError

from streams.models import Stream
from streams.store import rows


def _day(text):
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    except ValueError:
        raise CommandError(f"not a date (YYYY-MM-DD): {text!r}") from None


class Command(BaseCommand):
    help = "Compute the cost of stored streams again (after a price change), rollups included."

    def add_arguments(self, parser):
        parser.add_argument("--since", type=_day, help="streams created on or after (UTC)")
        parser.add_argument("--until", type=_day, help="streams created before (UTC)")
        parser.add_argument("--model", help="only models matching this glob (gpt-4o*)")
        parser.add_argument(
            "--recount", action="store_true", help="read the usage again from stored events"
        )

    def handle(self, *args, since=None, until=None, model=None, recount=False, **opts):
        streams = Stream.objects.all()
        if since:
            streams = streams.filter(created_at__gte=since)
        if until:
            streams = streams.filter(created_at__lt=until)
        if model:
            names = set(streams.values_list("resolved_model", flat=True).distinct())
            names |= set(streams.values_list("requested_model", flat=True).distinct())
            matching = [n for n in names if n and fnmatch.fnmatchcase(n.lower(), model.lower())]
            streams = streams.filter(resolved_model__in=matching) | streams.filter(
                resolved_model="", requested_model__in=matching
            )
        done = rows.reprice(streams, recount=recount)
        self.stdout.write(
            f"repriced {done['streams']:,} streams: {done['changed']:,} changed, "
            f"{done['unpriced']:,} without a price"
        )
