"""`python manage.py bench pages`: server time of the analytics pages on large histories.

For each size (`--sizes`, default 10 000 and 100 000 streams): a fresh temporary SQLite
database (or a throw-away PostgreSQL database on the server of `--postgres-url`) is migrated
and filled by `manage.py seed_demo` (30 days, `--events-per-stream` events a stream), then a
child process requests each page with Django's test Client, logged in as staff: one warm-up
request, then `--repeat` timed ones (middleware, view, queries and template rendering; no
network), and the CPU time they took (this process's, and its PostgreSQL backend's when the
server runs on this machine: a figure a busy machine does not inflate as it does the wall
time). The query count comes from one more request with the queries captured. Pages: latency
and routing at every range they offer (1 h, 24 h, 7 days — the default —, 30 days, all; latency
also with a model, a user and a source filter), usage and cost (the same five ranges, 30 days
with a model, a user and a tag filter, and its CSV export), admin analytics (24 h, 30 days —
the default —, all), and the streams list `/` when it exists (URL name `stream_list`), and its
full-text search (a word in nearly every answer, a prompt's word, a phrase, a prefix, a word
with filters), and the admin's changelists of streams, events and findings (whole, filtered,
searched). `--database postgres` without `--postgres-url` starts a throw-away server on $PGPORT
(default 55710). Target: ≤ 300 ms a page at 100 000 streams on SQLite, and growth well below
linear in the number of streams.

Projects (docs/teams.md): staff work in every project at once (the switcher's "all"), as an
instance administrator reading everything does. `--projects N` seeds the streams over N team
projects (`seed_demo --projects`: demo-1 …, two of the users each) and times every page twice:
as staff over every project, and as a member (alice, a member of demo-1) working in demo-1
(`"as"` in each line: "staff" or "member"). Target per issue 44: ≤ 300 ms p50 a page for both,
at 1M streams over 50 projects, on SQLite and PostgreSQL.

No server and no limits: the pages are requested in-process by a user logged in with
`force_login`, and none of streams/core/conf.py's limits applies to reading them (streams.bench.
NOT_LOAD_LIMITS). The child checks that the database holds as many streams as were seeded and
that every page answers 200; otherwise the run exits non-zero.

A standing database, to time a change again without seeding anew (1M streams take minutes):
seed it once as the bench does (`migrate`, then `seed_demo --streams N --days 30
--events-per-stream 10 --seed 1 --users alice,bob,carol` with DATABASE_URL set), then `bench
pages --database-url sqlite:////path/db.sqlite3` times the pages on it (its stream count read
from it; nothing seeded, migrated or removed) and `--pages search` keeps to the pages whose
name holds that text.
"""

import argparse
import json
import os
import tempfile
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

from streams.bench import MIGRATED_POSTGRES, manage, migrate, run_child, server_limits
from streams.core import figures

SIZES = (10_000, 100_000)
PAGES = [
    ("latency 1h", "/latency/?range=1h"),
    ("latency 24h", "/latency/?range=24h"),
    ("latency", "/latency/"),
    ("latency 30d", "/latency/?range=30d"),
    ("latency all", "/latency/?range=all"),
    ("latency 30d model", "/latency/?range=30d&model=gpt-oss-120b"),
    ("latency 30d user", "/latency/?range=30d&user=alice"),
    ("latency 30d source", "/latency/?range=30d&source=proxy"),
    ("latency 30d completed", "/latency/?range=30d&status=completed"),
    ("latency 7d failed", "/latency/?range=7d&status=failed"),
    ("latency 30d tag", "/latency/?range=30d&tag=checkout"),
    ("latency 30d rare tag", "/latency/?range=30d&tag=canary"),
    ("latency 24h tag", "/latency/?range=24h&tag=checkout"),
    ("latency 30d session", "/latency/?range=30d&session=s-1"),
    ("latency 7d vs before", "/latency/?range=7d&compare=previous"),
    ("routing 1h", "/routing/?range=1h"),
    ("routing 24h", "/routing/?range=24h"),
    ("routing", "/routing/"),
    ("routing 30d", "/routing/?range=30d"),
    ("routing all", "/routing/?range=all"),
    ("routing 30d tag", "/routing/?range=30d&tag=support-bot"),
    ("usage 1h", "/usage/?range=1h"),
    ("usage 24h", "/usage/?range=24h"),
    ("usage", "/usage/"),
    ("usage 30d", "/usage/?range=30d"),
    ("usage all", "/usage/?range=all"),
    ("usage 30d model", "/usage/?range=30d&model=gpt-oss-120b"),
    ("usage 30d user", "/usage/?range=30d&user=alice"),
    ("usage 30d tag", "/usage/?range=30d&tag=checkout"),
    ("usage csv 30d", "/usage/export.csv?range=30d"),
    ("admin 24h", "/analytics/?range=24h"),
    ("admin_analytics", "/analytics/"),
    ("admin all", "/analytics/?range=all"),
    ("stream_list", "stream_list"),  # a URL name: skipped when it does not exist
    # full-text search (streams/store/search.py): a word in nearly every answer, a prompt's
    # word (one stream in ~18), a phrase, a prefix, and a word with a user's and a status filter
    ("search word", "/?q=latency"),
    ("search prompt word", "/?q=amsterdam"),
    ("search phrase", "/?q=%22square+root%22"),
    ("search prefix", "/?q=kilomet*"),
    ("search word user failed", "/?q=latency&user=alice&status=failed"),
    # the admin's big tables (streams/admin.py counts up to a cap, then estimates or says
    # "more than"): whole, filtered, a search with no hit
    ("admin streams", "/admin/streams/stream/"),
    ("admin streams failed", "/admin/streams/stream/?status__exact=failed"),
    ("admin streams no hit", "/admin/streams/stream/?q=resp_none"),
    ("admin events", "/admin/streams/event/"),
    ("admin events type", "/admin/streams/event/?type=response.output_text.delta"),
    ("admin events rare type", "/admin/streams/event/?type=error"),
    ("admin events of a stream", "/admin/streams/event/?q=5"),
    ("admin findings", "/admin/streams/finding/"),
]

STAFF_ONLY = ("/analytics/", "/admin/")  # pages a member is refused (timed as staff only)


def add_arguments(parser):
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="stream counts")
    parser.add_argument("--repeat", type=int, default=5, help="timed requests per page")
    parser.add_argument("--events-per-stream", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--database",
        default="sqlite",
        help="comma-separated list of: sqlite, postgres (a throw-away database on the server "
        "of --postgres-url)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", ""),
        help="postgres://… of a server where the bench may create and drop a database",
    )
    parser.add_argument(
        "--database-url",
        default="",
        help="time the pages on this database, already seeded as the bench seeds (kept as it is)",
    )
    parser.add_argument("--pages", default="", help="only the pages whose name holds this text")
    parser.add_argument(
        "--projects",
        type=int,
        default=0,
        help="spread the streams over this many team projects and time the pages as staff "
        "(every project) and as a member of one (0: the users' personal projects, as staff)",
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)


def run(command, opts):
    if opts["child"]:
        return _child_main(command, opts)
    if opts["database_url"]:
        return _standing(command, opts)
    results = []
    sizes = [int(s) for s in opts["sizes"].split(",") if s.strip()]
    for database in [d.strip() for d in opts["database"].split(",") if d.strip()]:
        by_page = {}
        for size in sizes:
            with _database(database, opts) as url:
                spec = {"streams": size, "repeat": opts["repeat"], "projects": opts["projects"]}
                env = _env(url, opts)
                # Seeding runs in a process of its own: a process that has just created and
                # freed millions of objects answered the same requests markedly slower than a
                # fresh one (docs/performance.md, "The benchmarks themselves"), and a server
                # never seeds.
                migrate(env)
                seeded = manage(
                    env, "seed_demo", "--streams", str(size), "--days", "30",
                    "--events-per-stream", str(opts["events_per_stream"]),
                    "--seed", str(opts["seed"]), "--users", "alice,bob,carol",
                    "--projects", str(opts["projects"]),
                )  # fmt: skip
                if not opts["json"]:
                    command.stdout.write(f"{database}: {seeded.strip().splitlines()[-1]}")
                    index = manage(
                        env, "shell", "-c",
                        "from streams.store import search; print(search.index_bytes())",
                    )  # fmt: skip
                    per_stream = int(index.split()[-1]) / max(1, size)
                    command.stdout.write(
                        f"{database}: the search index, {per_stream:,.0f} bytes per stream"
                    )
                lines = run_child("pages", {**spec, "pages": opts["pages"]}, env)
            for out in lines:
                out = {**out, "database": database}
                results.append(out)
                previous = by_page.get((out["page"], out["as"]))
                by_page[(out["page"], out["as"])] = out
                _print(command, out, previous, opts["json"])
    return results


def _env(url, opts):
    """The environment of the processes that seed and time a database at `url`."""
    env = {**os.environ, "DATABASE_URL": url}
    # every search page: a warm-up, the timed requests, the one whose queries count
    searches = sum(u.startswith("/?q=") for _, u in PAGES) * (opts["repeat"] + 2)
    return env | server_limits(env, searches=searches)


def _standing(command, opts):
    """The pages timed on an existing database (`--database-url`), in a process of its own."""
    env = _env(opts["database_url"], opts)
    count = manage(
        env, "shell", "-c", "from streams.models import Stream; print(Stream.objects.count())"
    )
    spec = {
        "streams": int(count.split()[-1]),
        "repeat": opts["repeat"],
        "pages": opts["pages"],
        "projects": opts["projects"],
    }
    database = urlsplit(opts["database_url"]).scheme.replace("postgresql", "postgres")
    results = []
    for out in run_child("pages", spec, env):
        results.append({**out, "database": database})
        _print(command, results[-1], None, opts["json"])
    return results


def _print(command, out, previous, as_json):
    if as_json:
        command.stdout.write(json.dumps(out))
        return
    growth = ""
    if previous and previous["server_ms_p50"]:
        ratio = out["server_ms_p50"] / previous["server_ms_p50"]
        size_ratio = out["streams"] / previous["streams"]
        growth = f"   ×{ratio:.1f} for ×{size_ratio:.0f} streams"
    command.stdout.write(
        f"{out['database']:8} {out['as']:6} {out['page']:20} {out['streams']:>8,} streams   "
        f"p50 {out['server_ms_p50']:7.1f} ms   max {out['server_ms_max']:7.1f} ms   "
        f"CPU p50 {out.get('cpu_ms_p50', 0):7.1f} ms   "
        f"{out['queries']:>3} queries{growth}"
    )


class _database:
    """A fresh database URL for one child, removed afterwards."""

    def __init__(self, database, opts):
        self.database = database
        self.opts = opts

    def __enter__(self):
        if self.database == "sqlite":
            self.tmp = tempfile.TemporaryDirectory(prefix="bench-pages-")
            return f"sqlite:///{self.tmp.name}/bench.sqlite3"
        if self.database == "postgres":
            if not self.opts["postgres_url"]:
                # a throw-away server of our own, as .ci/test-suite starts one
                self.server = ThrowawayPostgres()
                self.opts = {**self.opts, "postgres_url": self.server.start()}
            self.name = f"bench_pages_{uuid.uuid4().hex[:8]}"
            template = os.environ.get(MIGRATED_POSTGRES)
            self._admin(
                f'CREATE DATABASE "{self.name}"' + (f' TEMPLATE "{template}"' * bool(template))
            )
            parts = urlsplit(self.opts["postgres_url"])
            return urlunsplit(parts._replace(path="/" + self.name))
        raise SystemExit(f"unknown database {self.database!r} (sqlite, postgres)")

    def __exit__(self, *exc):
        if self.database == "sqlite":
            self.tmp.cleanup()
        else:
            self._admin(f'DROP DATABASE IF EXISTS "{self.name}"')
            if getattr(self, "server", None) is not None:
                self.server.stop()

    def _admin(self, sql):
        import psycopg

        parts = urlsplit(self.opts["postgres_url"])
        with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as c:
            c.execute(sql)


# ---------------------------------------------------------------------------------------------
# The child: one size, one process, one database.


def _child_main(command, opts):
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from streams.models import Stream

    spec = json.loads(opts["child"])
    seeded = Stream.objects.count()
    if seeded != spec["streams"]:
        raise SystemExit(
            f"bench pages: {seeded:,} streams in the database, {spec['streams']:,} seeded"
        )
    if connection.vendor == "postgresql":
        # what autovacuum does within a minute of a bulk load: planner statistics, and the
        # visibility map that lets index-only scans skip the table
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    # (a superuser: the admin's pages are timed too; get: a standing database keeps the staff
    # user of its previous run)
    staff, _ = get_user_model().objects.get_or_create(
        username="bench-staff", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(staff)
    client.post("/projects/switch/", {"project": "all", "next": "/"})  # every project
    who = [("staff", client)]
    if spec.get("projects"):
        member = Client(HTTP_HOST="127.0.0.1")
        member.force_login(get_user_model().objects.get(username="alice"))
        member.get("/latency/?project=demo-1")  # (remembered by the session from then on)
        who.append(("member", member))
    for as_, client in who:
        _time_pages(command, spec, as_, client, connection)


def _time_pages(command, spec, as_, client, connection):
    from django.test.utils import CaptureQueriesContext
    from django.urls import NoReverseMatch, reverse

    for page, url in PAGES:
        if spec.get("pages", "") not in page:
            continue
        if as_ != "staff" and url.startswith(STAFF_ONLY):
            continue
        if not url.startswith("/"):
            try:
                url = reverse(url)
            except NoReverseMatch:
                continue
        response = client.get(url)  # warm-up: imports, templates, SQLite page cache
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code}")
        times, cpu = [], []
        _cpu_s(connection)  # (the backend's pid, asked once outside the timing)
        for _ in range(spec["repeat"]):
            c, t = _cpu_s(connection), time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((_cpu_s(connection) - c) * 1000)
        with CaptureQueriesContext(connection) as queries:
            client.get(url)
        result = {
            "page": page,
            "as": as_,
            "streams": spec["streams"],
            "server_ms_p50": round(figures.nearest_rank(times, 500), 1),
            "server_ms_max": round(max(times), 1),
            "cpu_ms_p50": round(figures.nearest_rank(cpu, 500), 1),
            "queries": len(queries.captured_queries),
        }
        command.stdout.write(json.dumps(result))


# The throw-away server configured for a million streams (14 GB with their events), as a server
# kept for such a history would be: PostgreSQL's default 128 MB of shared buffers hold little
# more than the rollups, and its 1 GB max_wal_size means a checkpoint every 1 GB of the seed's
# ~9 GB of WAL. (The 1M figures of docs/performance.md, "Pages at 1M", are on these settings;
# the defaults were not timed against them.)
SERVER_SETTINGS = "shared_buffers = 1GB\nmax_wal_size = 4GB\n"


def _cpu_s(connection):
    """CPU seconds used so far by this process and, on PostgreSQL, by its connection's
    backend (when it runs on this machine: /proc): what a page costs whatever else runs. On a
    machine busy with other work a page's wall time is mostly waiting for a core; its CPU time
    is not (docs/performance.md, "Pages at 1M")."""
    total = time.process_time()
    if connection.vendor == "postgresql":
        pid = getattr(connection, "_bench_backend", None)
        if pid is None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid = connection._bench_backend = cursor.fetchone()[0]
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass  # (a server elsewhere: this process's CPU alone)
    return total


class ThrowawayPostgres:
    """initdb + pg_ctl in a temporary folder on $PGPORT (default 55710), fsync off; stopped
    and removed by `stop`. As root, the server runs as the `postgres` user."""

    def start(self):
        import glob
        import shutil

        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
        if not bins:
            raise SystemExit("no PostgreSQL under /usr/lib/postgresql: pass --postgres-url")
        self.bin = bins[-1]
        self.port = int(os.environ.get("PGPORT", "55710"))
        self.dir = tempfile.mkdtemp(prefix="bench-pg-")
        os.makedirs(f"{self.dir}/data")
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
            shutil.chown(f"{self.dir}/data", "postgres")
        self._run(f"{self.bin}/initdb -D {self.dir}/data -U postgres --auth=trust -E UTF8 "
                  "--no-instructions")  # fmt: skip
        with open(f"{self.dir}/data/postgresql.conf", "a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.dir}'\nfsync = off\n")  # fmt: skip
            conf.write(SERVER_SETTINGS)
        self._run(f"{self.bin}/pg_ctl -D {self.dir}/data -l {self.dir}/server.log -w start")
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, cmd):
        import subprocess

        args = ["su", "postgres", "-c", cmd] if self.as_postgres else ["sh", "-c", cmd]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        import shutil

        try:
            self._run(f"{self.bin}/pg_ctl -D {self.dir}/data -m immediate -w stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
