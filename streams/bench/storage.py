"""`python manage.py bench storage`: bytes per event at rest, each simulator scenario apart.

For each scenario of the simulator (streams/simulator/scenarios.py; `--scenarios` to choose;
`fast` only when asked), `--streams` streams are recorded through the real pipeline
(`runner.run_stream` against one simulator process, no pacing: `time_scale` 0), then measured
as the database holds them: the event rows' table, its indexes and TOAST per event, then every
stream packed (streams/store/compact.py) and the blocks' table, indexes and TOAST per event
(the figures of `bench ingest`, there for its one `fast` stream shape only). Each scenario
starts from empty event tables, so its figures are its own; the last line is every scenario's
together. Each database (`--database sqlite,postgres`) runs in a child process on a fresh,
migrated database. The bytes counted are those the scenario's events added to the emptied
tables; a relation grows by whole pages (4 KiB SQLite, 8 KiB PostgreSQL), so a scenario of few
events (an HTTP error stores one a stream) reads high or, on SQLite, as nothing: the line says
how many events it had. Exits non-zero when a stream was not stored.
"""

import argparse
import asyncio
import json

from streams.bench import fail_if, run_child
from streams.bench.ingest import (
    add_database_arguments,
    fresh_databases,
    packed_storage,
    relation_bytes,
    simulator_upstream,
)

TARGET_B = 60  # issue 49: at rest, a finished stream's events take at most this per event
# the 1 MB delta of `huge_delta` made 100 kB: the bytes of one scenario stay those of a page
METADATA = {"time_scale": "0", "huge_bytes": "100000"}
# `fast` is `bench ingest`'s throughput stream (10,000 alike deltas): by default left out, or
# its 15,000 events a stream would be most of the "(every one)" line
LEFT_OUT = {"fast"}


def add_arguments(parser):
    add_database_arguments(parser)
    parser.add_argument("--streams", type=int, default=50, help="streams per scenario")
    parser.add_argument(
        "--scenarios", default="", help="comma-separated scenario names (default: every one)"
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)


def scenarios(opts):
    from streams.simulator import SCENARIOS

    every = [name for name in SCENARIOS if name not in LEFT_OUT]
    wanted = [s.strip() for s in opts["scenarios"].split(",") if s.strip()] or every
    unknown = sorted(set(wanted) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}")
    return wanted


def run(command, opts):
    if opts["child"]:
        spec = json.loads(opts["child"])
        command.stdout.write(json.dumps(asyncio.run(_measure(spec))))
        return None
    wanted = scenarios(opts)
    results = []
    with simulator_upstream() as upstream:
        for database, env in fresh_databases(opts):
            spec = {"scenarios": wanted, "streams": opts["streams"], "upstream": upstream}
            for line in run_child("storage", spec, env)[-1]:
                line = {"database": database, **line}
                results.append(line)
                _print(command, line, opts["json"])
    fail_if(
        [
            f"{r['database']} {r['scenario']}: {r['unstored_streams']} stream(s) not stored"
            for r in results
            if r["unstored_streams"]
        ],
        "storage",
    )
    return results


def _print(command, line, as_json):
    if as_json:
        command.stdout.write(json.dumps(line))
        return
    if not line["events"]:
        command.stdout.write(f"{line['database']:8} {line['scenario']:18} no events stored")
        return
    packed = line["packed_bytes_per_event"]
    command.stdout.write(
        f"{line['database']:8} {line['scenario']:18} {line['events']:>8,} events "
        f"({line['events'] / line['streams']:,.0f} a stream): rows "
        f"{line['rows_bytes_per_event']:>7,.1f} B/event, packed {packed:>6,.1f} B/event"
        + ("" if packed <= TARGET_B else f" (over {TARGET_B})")
    )


# ---------------------------------------------------------------------------------------------
# The child: every scenario, one process, one database.


def _body(scenario, n):
    return {
        "model": "gpt-oss-20b",
        "input": f"Storage benchmark {n}: describe the scenario {scenario} in a few sentences.",
        "stream": True,
        "metadata": {"scenario": scenario, **METADATA},
    }


async def _measure(spec):
    from asgiref.sync import sync_to_async

    lines, rows_total, packed_total, events_total = [], 0, 0, 0
    for scenario in spec["scenarios"]:
        empty = await sync_to_async(_empty)()
        recorded = await _record(spec["upstream"], scenario, spec["streams"])
        line = {"scenario": scenario, "streams": spec["streams"], **recorded}
        line.update(await sync_to_async(_sizes)(empty))
        if line["events"]:
            rows_total += line["rows_bytes"]
            packed_total += line["packed_bytes"]
            events_total += line["events"]
        lines.append(line)
    every = {
        "scenario": "(every one)",
        "streams": spec["streams"] * len(spec["scenarios"]),
        "events": events_total,
        "unstored_streams": sum(line["unstored_streams"] for line in lines),
        "rows_bytes": rows_total,
        "packed_bytes": packed_total,
        "rows_bytes_per_event": round(rows_total / events_total, 1) if events_total else None,
        "packed_bytes_per_event": round(packed_total / events_total, 1) if events_total else None,
    }
    return [*lines, every]


async def _record(upstream, scenario, streams):
    """`streams` streams of `scenario` recorded; how many events were stored, and how many
    streams left no row of their own (the recording failed before it began)."""
    from asgiref.sync import sync_to_async

    from streams.models import Stream
    from streams.run import runner
    from streams.store import rows

    created = [await sync_to_async(rows.new_row)(None, _body(scenario, n)) for n in range(streams)]
    await asyncio.gather(*(runner.run_stream(s, base_url=upstream) for s in created))
    ids = [s.pk for s in created]
    stored = await Stream.objects.filter(pk__in=ids).acount()
    return {"unstored_streams": streams - stored}


def _empty():
    """Empty event tables (and the streams they belong to), so a scenario's sizes are its own;
    the bytes they still take (a relation's first pages, PostgreSQL's partitions of the days
    ahead: ~120 KiB there, 27 B an event of a 4,500-event scenario), which are not its."""
    from django.db import connection

    from streams.models import Event, EventBlock, Stream

    tables = [Event._meta.db_table, EventBlock._meta.db_table]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(tables)}")
        else:
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")
    Stream.objects.all().delete()
    return {"rows": _bytes(Event), "packed": _bytes(EventBlock)}


def _bytes(model):
    heap, indexes = relation_bytes(model._meta.db_table)
    return heap + sum(indexes.values())


def _sizes(empty):
    """What the scenario's events added to the empty tables, as rows and then packed."""
    from django.db import close_old_connections, connection

    from streams.models import Event, EventBlock

    close_old_connections()
    n = Event.objects.count()
    if not n:
        return {"events": 0, "rows_bytes": 0, "packed_bytes": 0}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Event._meta.db_table}")
    rows = _bytes(Event) - empty["rows"]
    packed = packed_storage(n)  # (packs every stream, then VACUUMs the blocks)
    blocks = _bytes(EventBlock) - empty["packed"]
    return {
        "events": n,
        "packed_events": packed["packed_events"],
        "rows_bytes": rows,
        "rows_bytes_per_event": round(rows / n, 1),
        "packed_bytes": blocks,
        "packed_bytes_per_event": round(blocks / n, 1),
    }
