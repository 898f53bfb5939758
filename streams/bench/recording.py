"""Recording at its minimum: the SQL alone that stores N proxied event rows, B per commit.

What no recorder on this database can go below, per event: one transaction per batch holding
one multi-row INSERT (SQLite) or COPY (PostgreSQL) of the batch's rows, nothing read, parsed,
checked, queued, published or handed between threads. Two figures per batch size, CPU of this
process only (the database's own, PostgreSQL's server, is not counted: it is a process apart
that a proxy on SQLite does not have):

- **SQL alone**: the driver's calls and nothing else (sqlite3's BEGIN IMMEDIATE, one INSERT per
  batch, COMMIT; psycopg's COPY in a transaction), the rows made and their receipt times as
  text beforehand, outside the measurement;
- **as written**: the same rows through the writer's own call (`rows.insert_flat` in Django's
  `transaction.atomic`): what the product's SQL path adds to the driver's.

`bench proxy` runs it after its rounds on its own database, at the batch size the proxy
committed in that run, so that its line can say "floor + recording's own minimum against the
target" from one run. Alone: a fresh SQLite database, or `--database-url` (PostgreSQL; the rows
it writes are deleted afterwards).
"""

import argparse
import json
import os
import resource
import tempfile

from streams.bench import migrate, run_child

ROWS_TEXT = (
    '{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1",'
    '"output_index":0,"content_index":0,"delta":" word"}'
)


def add_arguments(parser):
    parser.add_argument("--batch", default="1,4,16,64,256", help="events per commit, e.g. 4,16")
    parser.add_argument("--events", type=int, default=20_000, help="events per batch size")
    parser.add_argument(
        "--database-url", default="", help="a database (migrated first; its rows deleted after)"
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)


def run(command, opts):
    if opts["child"]:
        for line in measure(**json.loads(opts["child"])):
            command.stdout.write(json.dumps(line))
        return None
    spec = {"batches": [int(b) for b in opts["batch"].split(",") if b.strip()]}
    spec["events"] = opts["events"]
    if opts["database_url"]:
        env = {**os.environ, "DATABASE_URL": opts["database_url"]}
        migrate(env)
        lines = run_child("recording", spec, env)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
            env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3"}
            migrate(env)
            lines = run_child("recording", spec, env)
    for line in lines:
        command.stdout.write(json.dumps(line) if opts["json"] else text(line))
    return lines


def in_the_same_run(env, batch, events=5_000):
    """The minimum at `batch` events per commit on the database of `env` (a bench's own)."""
    return run_child("recording", {"batches": [batch], "events": events}, env)[0]


def text(line):
    return (
        f"{line['database']}: {line['batch']} event(s) per commit: the SQL alone "
        f"{line['sql_us_per_event']} µs CPU/event ({line['sql_us_per_commit']} µs a commit), "
        f"as written (rows.insert_flat in transaction.atomic) {line['written_us_per_event']} "
        f"µs/event ({line['written_us_per_commit']} µs a commit)"
    )


# ---------------------------------------------------------------------------------------------
# The child: one database, this process


def measure(batches, events):
    """One line per batch size: the CPU of storing `events` proxied rows `batch` per commit."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from streams.models import Event, Stream

    user, _ = get_user_model().objects.get_or_create(username="bench-recording")
    stream = Stream.objects.create(user=user, request_body={})
    try:
        out = []
        for batch in batches:
            n = max(1, events // batch)
            sql = _cpu_per_event(_sql_alone, stream.id, batch, n)
            written = _cpu_per_event(_as_written, stream.id, batch, n)
            out.append(
                {
                    "database": connection.vendor,
                    "batch": batch,
                    "events": n * batch,
                    "sql_us_per_event": round(sql, 2),
                    "sql_us_per_commit": round(sql * batch, 1),
                    "written_us_per_event": round(written, 2),
                    "written_us_per_commit": round(written * batch, 1),
                }
            )
        return out
    finally:
        Event.objects.filter(stream_id=stream.id).delete()
        stream.delete()


_next_index = [0]


def _batches(stream_id, batch, n):
    """`n` flat batches of `batch` proxied rows each (`event_row.proxied_row`'s shape), their
    receipt times already as text."""
    import datetime as dt

    from django.db import connection

    from streams.store.event_row import Checked, Received, proxied_row

    # (as `rows.insert_flat` stores it: UTC, "+00" for PostgreSQL's COPY)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(" ")
    now += "+00" if connection.vendor == "postgresql" else ""
    checked = Checked("response.output_text.delta", 0, 0, 0, True)
    out = []
    for _ in range(n):
        flat = []
        for _ in range(batch):
            i = _next_index[0]
            _next_index[0] += 1
            sse = Received("", "", ROWS_TEXT % i, None)
            flat += proxied_row(stream_id, i, i * 1000, now, sse, checked._replace(
                sequence_number=i), i * 1000 + 40)  # fmt: skip
        out.append(flat)
    return out


def _cpu_per_event(store, stream_id, batch, n):
    made = _batches(stream_id, batch, n)
    before = _cpu_s()
    store(made)
    return (_cpu_s() - before) * 1e6 / (batch * n)


def _cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _sql_alone(made):
    from django.db import connection

    from streams.store import rows
    from streams.store.event_row import PROXIED_ROW_COLUMNS

    connection.ensure_connection()
    if connection.vendor == "postgresql":
        pg = connection.connection
        copy_sql = rows.copy_sql(PROXIED_ROW_COLUMNS)
        width = len(PROXIED_ROW_COLUMNS)
        for flat in made:
            with pg.transaction(), pg.cursor() as cursor, cursor.copy(copy_sql) as copy:
                for start in range(0, len(flat), width):
                    copy.write_row(flat[start : start + width])
        return
    raw = connection.connection
    width = len(PROXIED_ROW_COLUMNS)
    for flat in made:
        insert = rows.sqlite_insert(len(flat) // width, PROXIED_ROW_COLUMNS)
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(insert, flat)
        raw.execute("COMMIT")


def _as_written(made):
    from django.db import transaction

    from streams.store import rows
    from streams.store.event_row import PROXIED_ROW_COLUMNS

    for flat in made:
        with transaction.atomic():
            rows.insert_flat(flat, columns=PROXIED_ROW_COLUMNS)
