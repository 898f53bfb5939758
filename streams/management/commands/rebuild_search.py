"""`python manage.py rebuild_search`: the search index's input (`search_other`) made again for
every stream from its request and output parts, and SQLite's index remade from the rows
(streams/store/search.py; docs/search.md). After a change to what is indexed, or to repair an
index a table rebuild left stale."""

import time

from django.core.management.base import BaseCommand

from streams.models import Stream
from streams.store import search


class Command(BaseCommand):
    help = "Make the search index's text again from every stream, and the index from the rows."

    def handle(self, *args, **opts):
        started = time.monotonic()
        changed = search.refill(Stream)
        search.rebuild()
        self.stdout.write(
            f"search: {changed} stream(s) with new text, index rebuilt "
            f"({time.monotonic() - started:.1f} s)"
        )
