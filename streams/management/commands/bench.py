"""`python manage.py bench <what>`: benchmarks that print ratios against a baseline measured in
the same run. Each benchmark is a module of `streams.bench` with `add_arguments(parser)` and
`run(command, opts)`. A benchmark sizes the limits of the servers it starts for its own load
(`streams.bench.server_limits`) and exits non-zero, after printing its figures, when it lost or
was refused anything (`streams.bench.fail_if`); tests/streams/bench/test_bench.py runs each once,
tiny."""

import importlib

from django.core.management.base import BaseCommand, CommandError

BENCHMARKS = {
    "ingest": "streams.bench.ingest",
    "relay": "streams.bench.relay",
    "pages": "streams.bench.pages",
    "proxy": "streams.bench.proxy",
    "egress": "streams.bench.egress",
    "usage": "streams.bench.usage",
    "simulator": "streams.bench.simulator",
    "capacity": "streams.bench.capacity",
    "alerts": "streams.bench.alerts",
    "experiment": "streams.bench.experiment",
    "timeline": "streams.bench.timeline",
    "storage": "streams.bench.storage",
    "recording": "streams.bench.recording",
    "formats": "streams.bench.formats",
}


class Command(BaseCommand):
    help = (
        "Run a benchmark: " + ", ".join(BENCHMARKS) + ". With BENCH_MIGRATED_SQLITE=<a SQLite "
        "file `migrate` made> (BENCH_MIGRATED_POSTGRES=<a database name>: `bench pages`' "
        "template) a fresh database is a copy of it, not migrated anew (the tests' runs)"
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="what", required=True)
        for name, module in BENCHMARKS.items():
            p = sub.add_parser(name, help=importlib.import_module(module).__doc__.splitlines()[0])
            p.add_argument("--json", action="store_true", help="one JSON object per line")
            importlib.import_module(module).add_arguments(p)

    def handle(self, *args, **opts):
        what = opts["what"]
        if what not in BENCHMARKS:
            raise CommandError(f"unknown benchmark {what!r}")
        # The benches sit below the commands (tests/test_layers.py): seed_demo's maker of
        # realistic simulator streams is handed down to those that seed their own.
        from streams.management.commands.seed_demo import make_stream

        importlib.import_module(BENCHMARKS[what]).run(self, {**opts, "make_stream": make_stream})
