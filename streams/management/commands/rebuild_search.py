"""`python manage.py rebuild_search`: what the search index reads of every stream derived again
(`search_other` from its request and output parts, and every indexed text with the secrets
known now taken out), and SQLite's index remade from the rows (streams/store/search.py;
docs/search.md). After a change to what is indexed or to the redaction's rules (a new
STREAMSCOPE_REDACT_KEY_PREFIXES), or to repair an index a table rebuild left stale."""

import time

from django.core.management.base import BaseCommand

from streams.models import Stream, SweptSecret
from streams.store import search


class Command(BaseCommand):
    help = (
        "Derive what the search index reads of every stream again (redacted), and remake the "
        "index from the rows."
    )

    def handle(self, *args, **opts):
        started = time.monotonic()
        changed = search.rederive(Stream, from_source=True)
        search.swept_all(SweptSecret)
        search.rebuild()
        self.stdout.write(
            f"search: {changed} stream(s) with new text, index rebuilt "
            f"({time.monotonic() - started:.1f} s)"
        )
