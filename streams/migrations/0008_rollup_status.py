"""The stream's status in the histogram, routing and finding rollup keys.

A page filtered by status (`?status=failed`) read every raw row of its range (8.4 s at 1M
streams over 30 days); with the status in these keys, as it already is in the usage rollup's,
it reads the same rollup rows as an unfiltered page.

The existing rows do not say which status their streams had, so they are restated from the
raw rows, one UTC day of streams at a time: a period (an hour, 3 hours or a day) whose raw
finished streams are all still there (their count equals the usage rollup's, which counts
every stream ever aggregated) gets its rows rebuilt with the status. A period that retention
has thinned keeps its rows, with status "" ("not known"): summed over statuses every figure
stays what it was, and only a status-filtered page misses those streams' histograms, routing
and findings (docs/analytics.md). One transaction on both databases.

What a stream adds is written out here rather than imported from `streams.aggregates`: a
migration must keep doing what it did when that module changes.
"""

import datetime as dt
import math
from collections import defaultdict

from django.db import migrations, models

HOUR, THREE_HOURS, DAY = 3600, 10800, 86400
SPANS = (HOUR, THREE_HOURS, DAY)
KEYS = {
    "histogramrollup": (
        "metric", "full", "span", "t", "user_key", "source", "resolved_model",
        "requested_model", "status", "bucket",
    ),
    "routingrollup": (
        "span", "t", "resolved_model", "source", "user_key", "routing_category",
        "routing_source", "status",
    ),
    "findingrollup": (
        "span", "t", "code", "severity", "resolved_model", "requested_model", "source",
        "user_key", "status",
    ),
}  # fmt: skip
COLUMNS = (
    "id", "created_at", "status", "resolved_model", "requested_model", "source", "user_id",
    "ttft_ms", "routing_us", "request_written_us", "routing_category", "routing_source",
)  # fmt: skip
_LOG_GAMMA = math.log(1.02)
ZERO = -32768
TTFT, DECISION = 1, 2


def _bucket(value):
    if value is None or value <= 0.001:
        return ZERO
    return math.ceil(math.log(value) / _LOG_GAMMA)


def _epoch(value):
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def _add_status_column(schema_editor, model, key):
    connection, qn = schema_editor.connection, schema_editor.quote_name
    table = model._meta.db_table
    fields = [f for f in model._meta.local_concrete_fields if f.column]
    cols = ", ".join(qn(f.column) for f in fields)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            defs = []
            before = "bucket" if "bucket" in key else "n"
            for f in fields:
                if f.column == before:
                    # where the model declares it: SQLite's (3.40) integrity_check misreads a
                    # WITHOUT ROWID table with a key column after its value columns
                    defs.append(f"{qn('status')} varchar(12) NOT NULL")
                sql, params = schema_editor.column_sql(model, f)
                assert not params
                defs.append(f"{qn(f.column)} {sql}")
            new = qn(f"new__{table}")
            cursor.execute(
                f"CREATE TABLE {new} ({', '.join(defs)}, "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)})) WITHOUT ROWID"
            )
            cursor.execute(
                f"INSERT INTO {new} ({cols}, {qn('status')}) SELECT {cols}, '' FROM {qn(table)}"
            )
            cursor.execute(f"DROP TABLE {qn(table)}")
            cursor.execute(f"ALTER TABLE {new} RENAME TO {qn(table)}")
        else:
            t = qn(table)
            cursor.execute(
                f"ALTER TABLE {t} ADD COLUMN {qn('status')} varchar(12) NOT NULL DEFAULT ''"
            )
            cursor.execute(f"ALTER TABLE {t} ALTER COLUMN {qn('status')} DROP DEFAULT")
            cursor.execute(f"ALTER TABLE {t} DROP CONSTRAINT {qn(table + '_pkey')}")
            cursor.execute(
                f"ALTER TABLE {t} ADD CONSTRAINT {qn(table + '_pkey')} "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)}) INCLUDE ({qn('n')})"
            )


def _day_rows(connection, stream_table, finding_table, lo, hi):
    """The finished streams created in [lo, hi) and their findings {id: [(code, sev, n)]}."""
    qn = connection.ops.quote_name
    params = [connection.ops.adapt_datetimefield_value(v) for v in (lo, hi)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(qn(c) for c in COLUMNS)} FROM {qn(stream_table)} "
            f"WHERE {qn('created_at')} >= %s AND {qn('created_at')} < %s "
            f"AND {qn('status')} NOT IN ('pending', 'streaming')",
            params,
        )
        rows = [dict(zip(COLUMNS, r, strict=True)) for r in cursor.fetchall()]
        found = defaultdict(list)
        ids = [r["id"] for r in rows]
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            cursor.execute(
                f"SELECT {qn('stream_id')}, {qn('code')}, {qn('severity')}, COUNT(*) "
                f"FROM {qn(finding_table)} WHERE {qn('stream_id')} IN "
                f"({', '.join(['%s'] * len(chunk))}) "
                f"GROUP BY {qn('stream_id')}, {qn('code')}, {qn('severity')}",
                chunk,
            )
            for sid, code, severity, n in cursor.fetchall():
                found[sid].append((code, severity, n))
    return rows, found


def _contributions(rows, found):
    """({table: {key: n}}, {(span, t): streams}) of one day's finished streams."""
    out = {name: defaultdict(int) for name in KEYS}
    hist, routing, findings = out["histogramrollup"], out["routingrollup"], out["findingrollup"]
    counts = defaultdict(int)
    for row in rows:
        ts = _epoch(row["created_at"])
        user, source, status = row["user_id"] or 0, row["source"], row["status"]
        resolved, requested = row["resolved_model"], row["requested_model"]
        decision = None
        if row["routing_us"] is not None and row["request_written_us"] is not None:
            decision = (row["routing_us"] - row["request_written_us"]) / 1000.0
        for span in SPANS:
            t = int(ts // span) * span
            counts[(span, t)] += 1
            for metric, value in ((TTFT, row["ttft_ms"]), (DECISION, decision)):
                if value is None:
                    continue
                b = _bucket(value)
                hist[(metric, False, span, t, 0, "", resolved, requested, status, b)] += 1
                hist[(metric, True, span, t, user, source, resolved, requested, status, b)] += 1
            if requested == "auto":
                key = (span, t, resolved, source, user, row["routing_category"],
                       row["routing_source"], status)  # fmt: skip
                routing[key] += 1
            for code, severity, n in found.get(row["id"], ()):
                findings[(span, t, code, severity, resolved, requested, source, user, status)] += n
    return out, counts


def forwards(apps, schema_editor):
    connection, qn = schema_editor.connection, schema_editor.quote_name
    for name, key in KEYS.items():
        _add_status_column(schema_editor, apps.get_model("streams", name), key)
    stream_table = apps.get_model("streams", "stream")._meta.db_table
    finding_table = apps.get_model("streams", "finding")._meta.db_table
    usage_table = apps.get_model("streams", "usagerollup")._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MIN({qn('created_at')}), MAX({qn('created_at')}) FROM {qn(stream_table)}"
        )
        first, last = cursor.fetchone()
    if first is None:
        return
    day = int(_epoch(first) // DAY) * DAY
    stop = _epoch(last)
    while day <= stop:
        lo, hi = (dt.datetime.fromtimestamp(x, dt.UTC) for x in (day, day + DAY))
        rows, found = _day_rows(connection, stream_table, finding_table, lo, hi)
        day += DAY
        if not rows:
            continue
        tables, counts = _contributions(rows, found)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {qn('span')}, {qn('t')}, SUM({qn('n')}) FROM {qn(usage_table)} "
                f"WHERE {qn('t')} >= %s AND {qn('t')} < %s GROUP BY {qn('span')}, {qn('t')}",
                [day - DAY, day],
            )
            aggregated = {(span, t): n for span, t, n in cursor.fetchall()}
            whole = {p for p, n in counts.items() if aggregated.get(p) == n}
            for name, key in KEYS.items():
                table = qn(apps.get_model("streams", name)._meta.db_table)
                for span, t in sorted(whole):
                    cursor.execute(
                        f"DELETE FROM {table} WHERE {qn('span')} = %s AND {qn('t')} = %s",
                        [span, t],
                    )
                span_at, t_at = key.index("span"), key.index("t")
                items = [
                    (*k, n) for k, n in tables[name].items() if (k[span_at], k[t_at]) in whole
                ]
                cols = ", ".join(qn(c) for c in (*key, "n"))
                per = 30000 // (len(key) + 1)
                for at in range(0, len(items), per):
                    chunk = items[at : at + per]
                    marks = ", ".join(["(" + ", ".join(["%s"] * (len(key) + 1)) + ")"] * len(chunk))
                    cursor.execute(
                        f"INSERT INTO {table} ({cols}) VALUES {marks}",
                        [v for item in chunk for v in item],
                    )


def _state_operations():
    ops = []
    for name, key in KEYS.items():
        ops.append(
            migrations.AddField(
                model_name=name,
                name="status",
                field=models.CharField(default="", max_length=12),
                preserve_default=False,
            )
        )
        ops.append(
            migrations.AlterField(
                model_name=name,
                name="pk",
                field=models.CompositePrimaryKey(
                    *key, blank=True, editable=False, primary_key=True, serialize=False
                ),
            )
        )
    return ops


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0007_rollup_keys"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards)],
            state_operations=_state_operations(),
        ),
    ]
