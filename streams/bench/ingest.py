"""`python manage.py bench ingest`: the recording pipeline's throughput against its ceiling.

In one run, with the simulator in `fast` mode (events as fast as it can write them):
  (a) a bare httpx-sse consumer that parses events and throws them away: the ceiling;
  (b) the full pipeline (receipt times, checker, batched commits, publish to the channel layer);
for 1 stream and for 100 concurrent streams. Each database configuration runs in a child
process of its own on a fresh, migrated database (`--database sqlite,postgres`), against one
simulator process, so the figures of one run are comparable. Each consumer runs `--repeat`
times (default 3), bare and pipeline alternating, and the best run of each counts. `lost_events`
compares what was stored with what the simulator says it sent, summed over all runs, and
`failed_streams` counts pipeline streams that did not end `completed`; either, or events the bare
consumer missed, makes the run exit non-zero after printing its figures.

No server and no user: the child records with `runner.run_stream` on rows without an owner, so
none of the per-user, per-token or per-socket limits of streams/core/conf.py apply (see
streams.bench.NOT_LOAD_LIMITS for the rest; the recorder's queue is backpressure, not a limit).
"""

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import httpx

from streams.bench import BASE_DIR, fail_if, free_port, migrate, run_child, wait_for_port

CONFIGS = [(1, 20_000), (100, 2_000)]  # (streams, events per stream)


def add_arguments(parser):
    add_database_arguments(parser)
    parser.add_argument("--streams", default="", help="stream counts, e.g. 1,100")
    parser.add_argument("--events", type=int, default=0, help="events per stream")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each consumer per configuration, bare and pipeline alternating; the best "
        "of each counts (a noisy neighbour slows single runs by up to half on a small VM)",
    )
    parser.add_argument(
        "--metrics",
        default="on",
        help="on, off or on,off: the pipeline with Prometheus figures kept, without, or both in "
        "each round (alternating order), printing what keeping them costs",
    )
    parser.add_argument(
        "--transport",
        default="",
        help="lean, httpcore or lean,httpcore: the pipeline on the upstream client's transports "
        "(streams/ingest/transport.py, httpcore), both in each round (alternating order) with "
        "their events/s and CPU per event; default: the configured one only",
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)


def add_database_arguments(parser):
    """--database and --postgres-url (the recording benches', for `fresh_databases`)."""
    parser.add_argument(
        "--database",
        default="sqlite",
        help="comma-separated list of: sqlite, postgres (the database at --postgres-url)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", ""),
        help="postgres://… of a database the bench may fill (default: $BENCH_POSTGRES_URL)",
    )


def run(command, opts):
    if opts["child"]:
        return _child_main(command, opts)
    configs = _configs(opts)
    results = []
    with simulator_upstream() as upstream:
        for database, env in fresh_databases(opts):
            for streams, events in configs:
                spec = {
                    "streams": streams,
                    "events": events,
                    "repeat": opts["repeat"],
                    "metrics": opts["metrics"],
                    "transport": opts["transport"],
                    "upstream": upstream,
                }
                out = run_child("ingest", spec, env)[-1]
                out = {
                    "database": database,
                    "layer": "redis" if env.get("REDIS_URL") else "memory",
                    **out,
                }
                results.append(out)
                _print(command, out, opts["json"])
    fail_if(_problems(results), "ingest")
    return results


@contextlib.contextmanager
def simulator_upstream():
    """One `simulate_upstream` process for the run (the recording benches'); its /v1 URL."""
    sim_port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "manage.py", "simulate_upstream", "--port", str(sim_port)],
        cwd=BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(sim_port)
        yield f"http://127.0.0.1:{sim_port}/v1"
    finally:
        sim.terminate()
        sim.wait(10)


def fresh_databases(opts):
    """(name, environment) of each `--database` in turn, migrated (SQLite's in a temporary
    folder that goes after it)."""
    for database in [d.strip() for d in opts["database"].split(",") if d.strip()]:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "DATABASE_URL": _database_url(database, opts, tmp)}
            migrate(env)
            yield database, env


def _configs(opts):
    """[(streams, events per stream)] to measure: CONFIGS, or those of --streams / --events."""
    if opts["streams"]:
        return [(int(s), opts["events"] or 2_000) for s in opts["streams"].split(",")]
    if opts["events"]:
        return [(s, opts["events"]) for s, _ in CONFIGS]
    return CONFIGS


def _problems(results):
    """What makes the run fail: events not stored, events the bare consumer missed, streams
    that did not complete."""
    problems = []
    for r in results:
        label = f"{r['database']} {r['streams']} stream(s)"
        if r["lost_events"]:
            problems.append(f"{label}: {r['lost_events']} event(s) not stored")
        if r["bare_lost_events"]:
            problems.append(f"{label}: the bare consumer missed {r['bare_lost_events']} event(s)")
        if r["failed_streams"]:
            problems.append(f"{label}: {r['failed_streams']} stream(s) did not complete")
    return problems


def _print(command, out, as_json):
    if as_json:
        command.stdout.write(json.dumps(out))
        return
    command.stdout.write(
        f"{out['database']:8} {out['streams']:>3} stream(s) × {out['events'] // out['streams']:>6,}"
        f" events   bare {out['bare_events_per_s']:>9,.0f} ev/s   pipeline "
        f"{out['pipeline_events_per_s']:>9,.0f} ev/s   ratio {out['ratio']:.2f}   "
        f"lost {out['lost_events']}   peak RSS {out['peak_rss_mb']:.0f} MB"
        + (f"   {out['failed_streams']} stream(s) not completed" if out["failed_streams"] else "")
        + (
            f"   metrics off {out['metrics_off_events_per_s']:,.0f} ev/s: metrics cost "
            f"{out['metrics_cost_pct']:+.2f} % of throughput, "
            f"{out['metrics_cpu_cost_pct']:+.2f} % of CPU per event"
            if "metrics_cost_pct" in out
            else ""
        )
        + "".join(
            f"   {name}: {out[f'{name}_events_per_s']:,.0f} ev/s, "
            f"{out[f'{name}_cpu_us_per_event']} µs CPU/event"
            for name in ("lean", "httpcore")
            if f"{name}_events_per_s" in out
        )
        + (
            f"   {out['bytes_per_event']:.0f} B/event (table {out['table_bytes_per_event']:.0f}"
            f", indexes {out['index_bytes_per_event']}, received_at "
            f"{out['received_at_bytes_per_event']:.0f})"
            if "bytes_per_event" in out
            else ""
        )
        + (
            f"   packed {out['packed_bytes_per_event']:.0f} B/event "
            f"({out['packed_events_per_s']:,} events/s packing)"
            if out.get("packed_events")
            else ""
        )
    )


def _database_url(database, opts, tmp):
    if database == "sqlite":
        return f"sqlite:///{tmp}/bench.sqlite3"
    if database == "postgres":
        if not opts["postgres_url"]:
            raise SystemExit("--database postgres needs --postgres-url or $BENCH_POSTGRES_URL")
        return opts["postgres_url"]
    raise SystemExit(f"unknown database {database!r} (sqlite, postgres)")


# ---------------------------------------------------------------------------------------------
# The child: one configuration, one process, one database.


def _child_main(command, opts):
    spec = json.loads(opts["child"])
    result = asyncio.run(_measure(spec))
    command.stdout.write(json.dumps(result))


def _body(events):
    return {
        "model": "gpt-oss-20b",
        "input": "benchmark",
        "stream": True,
        "metadata": {"scenario": "fast", "events": str(events), "batch": "100"},
    }


async def _sent_counts(client, upstream, ids):
    root = upstream.rsplit("/v1", 1)[0]
    counts = []
    for rid in ids:
        r = await client.get(f"{root}/_simulator/responses/{rid}")
        if r.status_code == 404:
            raise SystemExit(
                "the simulator's log no longer holds a response of this run (it keeps 2,000,000 "
                "events in all): run fewer streams × events per configuration"
            )
        counts.append(r.json()["event_count"])
    return counts


async def _bare(client, upstream, streams, events):
    from httpx_sse import aconnect_sse

    async def one():
        received = 0
        rid = None
        async with aconnect_sse(
            client, "POST", upstream + "/responses", json=_body(events)
        ) as source:
            rid = source.response.headers.get("x-simulator-response-id")
            async for sse in source.aiter_sse():
                if sse.data:
                    json.loads(sse.data)  # a consumer that looks at events parses them
                    received += 1
        return rid, received

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one() for _ in range(streams)))
    elapsed = time.perf_counter() - t0
    sent = await _sent_counts(client, upstream, [rid for rid, _ in results])
    received = sum(n for _, n in results)
    return received / elapsed, sum(sent) - received


async def _pipeline(client, upstream, streams, events, pool=None):
    from asgiref.sync import sync_to_async

    from streams.models import Event, Stream
    from streams.run import runner
    from streams.store import rows

    created = [await sync_to_async(rows.new_row)(None, _body(events)) for _ in range(streams)]
    t0 = time.perf_counter()
    await asyncio.gather(*(runner.run_stream(s, base_url=upstream, client=pool) for s in created))
    elapsed = time.perf_counter() - t0
    ids = [s.pk for s in created]
    ended = [
        r async for r in Stream.objects.filter(pk__in=ids).values_list("upstream_id", "status")
    ]
    failed = sum(1 for upstream_id, status in ended if status != "completed" or not upstream_id)
    stored = await Event.objects.filter(stream_id__in=ids).acount()
    sent = await _sent_counts(client, upstream, [u for u, _ in ended if u])
    return stored / elapsed, sum(sent) - stored, failed


async def _measure(spec):
    streams, events, upstream = spec["streams"], spec["events"], spec["upstream"]
    async with httpx.AsyncClient(
        timeout=None, limits=httpx.Limits(max_connections=1000), trust_env=False
    ) as client:
        # Warm both paths (connections, imports, the writer, the test database).
        await _bare(client, upstream, 2, 200)
        await _pipeline(client, upstream, 2, 200)
        bares = []
        modes = [m.strip() for m in spec.get("metrics", "on").split(",") if m.strip()]
        by_mode = {mode: [] for mode in modes}
        pools = _transport_pools(spec.get("transport", ""))
        by_transport = {transport: [] for transport in pools}
        variants = [(mode, transport) for mode in modes for transport in pools or (None,)]
        every = []  # every pipeline run: what was lost or failed counts whichever it was
        for pool in pools.values():  # (their connections, warm)
            await _pipeline(client, upstream, 2, 200, pool)
        for i in range(spec["repeat"]):
            # alternating, so that a slow spell of the machine hits both alike
            bares.append(await _bare(client, upstream, streams, events))
            for mode, transport in variants if i % 2 == 0 else variants[::-1]:
                _set_metrics(mode)
                cpu0 = time.process_time()
                run = await _pipeline(client, upstream, streams, events, pools.get(transport))
                run = (*run, (time.process_time() - cpu0) / (streams * events))
                every.append(run)
                if transport == next(iter(pools), None):
                    by_mode[mode].append(run)
                if mode == modes[0] and transport is not None:
                    by_transport[transport].append(run)
        for pool in pools.values():
            await pool.aclose()
        pipes = [run[:3] for run in every]
        bare, pipe = max(bares), max(by_mode[modes[0]])
    return {
        "streams": streams,
        "events": streams * events,
        "bare_events_per_s": round(bare[0]),
        "pipeline_events_per_s": round(pipe[0]),
        "ratio": round(pipe[0] / bare[0], 3),
        "lost_events": sum(lost for _, lost, _ in pipes),
        "failed_streams": sum(failed for _, _, failed in pipes),
        "bare_lost_events": sum(lost for _, lost in bares),
        "runs": spec["repeat"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        **_metrics_cost(by_mode),
        **_transports(by_transport),
        **await asyncio.to_thread(_storage),
    }


def _transport_pools(names):
    """transport -> its own upstream.ClientPool, for --transport (none: the runner's own)."""
    from streams.core.conf import UPSTREAM_TRANSPORTS
    from streams.ingest.upstream import ClientPool

    pools = {}
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in UPSTREAM_TRANSPORTS:
            raise SystemExit(f"--transport: {name!r} is not one of {UPSTREAM_TRANSPORTS}")
        pools[name] = ClientPool(transport=name)
    return pools


def _transports(by_transport):
    """Per transport: the best run's events/s, the least CPU per event (µs, this process's, all
    threads), and every run's events/s. `by_transport`: {transport: [(events/s, lost, failed
    streams, CPU s per event)]}."""
    return {
        f"{name}_{key}": value
        for name, runs in by_transport.items()
        if runs
        for key, value in (
            ("events_per_s", round(max(runs)[0])),
            ("cpu_us_per_event", round(min(r[3] for r in runs) * 1e6, 2)),
            ("runs", [round(r[0]) for r in runs]),
        )
    }


def _set_metrics(mode):
    """Prometheus figures kept (`on`, the default) or not (`off`), from now on."""
    from django.conf import settings

    if mode not in ("on", "off"):
        raise SystemExit(f"--metrics: {mode!r} is not on or off")
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS": mode == "on"}


def _metrics_cost(by_mode):
    """With both modes: the best run of each, and what keeping the figures cost in % — of
    throughput, and of this process's CPU time per event (both threads; much less disturbed by
    a busy neighbour than wall-clock throughput, which moves single runs by half on a shared VM).
    `by_mode`: {mode: [(events/s, lost, failed streams, CPU s per event)]}."""
    if set(by_mode) != {"on", "off"}:
        return {}
    on, off = max(by_mode["on"])[0], max(by_mode["off"])[0]
    cpu_on = min(r[3] for r in by_mode["on"])
    cpu_off = min(r[3] for r in by_mode["off"])
    return {
        "metrics_on_events_per_s": round(on),
        "metrics_off_events_per_s": round(off),
        "metrics_cost_pct": round((off - on) / off * 100, 2),
        "metrics_on_cpu_us_per_event": round(cpu_on * 1e6, 3),
        "metrics_off_cpu_us_per_event": round(cpu_off * 1e6, 3),
        "metrics_cpu_cost_pct": round((cpu_on - cpu_off) / cpu_off * 100, 2),
        # every round of both, for the spread
        "metrics_on_runs": [round(r[0]) for r in by_mode["on"]],
        "metrics_off_runs": [round(r[0]) for r in by_mode["off"]],
    }


def _storage():
    """Bytes per stored event: the event table and its indexes (what the database holds on
    disk for them, over every event of this database), and the parts the "drop received_at /
    composite key" idea would save (docs/analytics.md, "Storage per event"); then every stream
    packed (streams/store/compact.py) and the blocks' table, indexes and TOAST per event
    (docs/recorder.md, "At rest")."""
    from django.db import close_old_connections

    from streams.models import Event

    close_old_connections()
    n = Event.objects.count()
    if not n:
        return {}
    out = {"stored_events": n, **_rows_storage(n)}
    out.update(packed_storage(n))
    return out


def relation_bytes(table):
    """(table bytes with TOAST, {index: bytes}) of `table` as the database holds it."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name, SUM(pgsize) FROM dbstat WHERE name = %s OR name IN "
                "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = %s) "
                "GROUP BY name",
                [table, table],
            )
            sizes = dict(cursor.fetchall())
            return sizes.pop(table, 0), sizes
        # a partitioned table (the event blocks, by day) holds nothing itself: its partitions
        # do (pg_partition_tree lists no member of a plain table: the table itself is added)
        members = "SELECT %s::regclass UNION SELECT relid FROM pg_partition_tree(%s)"
        cursor.execute(
            f"SELECT SUM(pg_table_size(r)) FROM ({members}) AS m(r)",  # (with their TOAST)
            [table, table],
        )
        heap = cursor.fetchone()[0] or 0
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            f"WHERE indrelid IN ({members})",
            [table, table],
        )
        return int(heap), dict(cursor.fetchall())


def packed_storage(n):
    """Every stream of the bench packed at once (no grace: they have all ended)."""
    from django.db import connection

    from streams.models import EventBlock
    from streams.store import compact

    started = time.perf_counter()
    done = compact.sweep(limit=None, grace_s=-86_400)
    elapsed = time.perf_counter() - started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {EventBlock._meta.db_table}")
    heap, indexes = relation_bytes(EventBlock._meta.db_table)
    return {
        "packed_events": done["events"],
        "packed_bytes_per_event": round((heap + sum(indexes.values())) / n, 1),
        "packed_events_per_s": round(done["events"] / elapsed) if elapsed else None,
    }


def _rows_storage(n):
    from django.db import connection

    from streams.models import Event

    table = Event._meta.db_table
    heap, sizes = relation_bytes(table)
    received = 8  # timestamptz
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT AVG(LENGTH(received_at)) FROM {table}")
            received = cursor.fetchone()[0] or 0
    index_bytes = sum(sizes.values())
    return {
        "bytes_per_event": round((heap + index_bytes) / n, 1),
        "table_bytes_per_event": round(heap / n, 1),
        "index_bytes_per_event": {k: round(v / n, 1) for k, v in sizes.items()},
        "received_at_bytes_per_event": round(received, 1),
    }
