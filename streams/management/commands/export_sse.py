"""Write a stored stream as an SSE body (byte-identical for imports) or as its JSON document."""

import io
import sys

from django.core.management.base import BaseCommand, CommandError

from streams.management import cli
from streams.models import Stream
from streams.serve.export import iter_document, iter_sse
from streams.store import known_secrets


class Command(BaseCommand):
    help = "Export a stream as SSE bytes (default) or as the .json document, to stdout or -o FILE."

    def add_arguments(self, parser):
        parser.add_argument("stream_id", type=int, metavar="STREAM_ID")
        parser.add_argument("-o", "--output", default="", metavar="FILE")
        parser.add_argument("--json", action="store_true", help="the JSON document instead")
        parser.add_argument("--no-events", action="store_true", help="--json without the events")

    def handle(self, *args, **opts):
        # `export_sse 42 | head`: the reader leaving early is no error worth a traceback
        with cli.stoppable(self, "export_sse"):
            self.export(opts)

    def export(self, opts):
        try:
            stream = Stream.objects.get(pk=opts["stream_id"])
        except Stream.DoesNotExist as exc:
            raise CommandError(f"no stream {opts['stream_id']}") from exc
        if opts["json"]:
            pieces = (p.encode() for p in iter_document(stream, events=not opts["no_events"]))
        else:
            pieces = iter_sse(stream)
        pieces = known_secrets.redact_pieces(pieces)  # a file leaves too: through the gate's rules
        if opts["output"]:
            with open(opts["output"], "wb") as f:
                f.writelines(pieces)
            return
        out = self.stdout._out if self.stdout._out is not None else sys.stdout
        # Binary-safe: SSE data that was not UTF-8 is written as the bytes that arrived.
        target = getattr(out, "buffer", out)
        if isinstance(target, io.TextIOBase):
            for piece in pieces:
                target.write(piece.decode("utf-8", errors="replace"))
        else:
            target.writelines(pieces)
            target.flush()
