"""The stream's status and tags in the rollup keys.

- **Status** joins the histogram, routing and finding rollup keys (the usage rollup has it):
  a page filtered by status (`?status=failed`) read every raw row of its range (8.4 s at 1M
  streams over 30 days); now it reads the rollup rows an unfiltered page reads.
- **Tags**: every rollup table gets a `tag` key column, "" in the rows every stream adds; a
  tagged stream adds its rows once more under each of its tags, so a tag filter is a key
  range (it read every raw row too: 5.8 s).

The existing rows do not say which status or tags their streams had, so they are restated
from the raw rows, one UTC day of streams at a time: a period (an hour, 3 hours or a day)
whose raw finished streams are all still there (their count equals the usage rollup's, which
counts every stream ever aggregated) gets its histogram, routing and finding rows rebuilt
with the status, and every table its tag rows. A period that retention has thinned keeps its
rows, with status "" ("not known") and no tag rows: summed over statuses every figure stays
what it was; only a status- or tag-filtered page misses those streams (docs/analytics.md).
One transaction on both databases.

What a stream adds is written out here rather than imported from `streams.store.aggregates`: a
migration must keep doing what it did when that module changes.
"""

import datetime as dt
import json
import math
from collections import defaultdict

from django.db import migrations, models

HOUR, THREE_HOURS, DAY = 3600, 10800, 86400
SPANS = (HOUR, THREE_HOURS, DAY)
KEYS = {
    "usagerollup": (
        "span", "tag", "t", "resolved_model", "requested_model", "source", "user_key",
        "status", "error_code",
    ),
    "histogramrollup": (
        "metric", "full", "span", "tag", "t", "user_key", "source", "resolved_model",
        "requested_model", "status", "bucket",
    ),
    "routingrollup": (
        "span", "tag", "t", "resolved_model", "source", "user_key", "routing_category",
        "routing_source", "status",
    ),
    "findingrollup": (
        "span", "tag", "t", "code", "severity", "resolved_model", "requested_model", "source",
        "user_key", "status",
    ),
}  # fmt: skip
USER_INDEX = ("metric", "full", "span", "tag", "user_key", "t", "n")
COUNT_INDEX = ("span", "tag", "user_key", "n")
USAGE_VALUES = (
    "n", "ttft_n", "ttft_sum_ns", "itl_n", "itl_sum_ns", "routed", "decision_n", "phase_n",
    "written_sum_us", "headers_sum_us", "created_sum_us", "routed_or_created_sum_us",
    "first_token_sum_us", "output_tokens", "bytes_received", "events", "findings",
)  # fmt: skip
# New columns: (name, definition, the column it goes before in the model's order).
NEW = {
    "usagerollup": [("tag", "varchar(64)", "t")],
    "histogramrollup": [("tag", "varchar(64)", "t"), ("status", "varchar(12)", "bucket")],
    "routingrollup": [("tag", "varchar(64)", "t"), ("status", "varchar(12)", "n")],
    "findingrollup": [("tag", "varchar(64)", "t"), ("status", "varchar(12)", "n")],
}
COLUMNS = (
    "id", "created_at", "status", "resolved_model", "requested_model", "source", "user_id",
    "error_code", "ttft_ms", "inter_token_ms", "routing_us", "request_written_us",
    "headers_us", "created_event_us", "first_token_us", "output_tokens", "bytes_received",
    "event_count", "findings_count", "routing_category", "routing_source", "tags",
)  # fmt: skip
_LOG_GAMMA = math.log(1.02)
ZERO = -32768
TTFT, DECISION = 1, 2
MAX_TAGS, MAX_TAG_CHARS = 20, 64


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


def _tags(value):
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list):
        return []
    ok = [t for t in dict.fromkeys(x for x in value if isinstance(x, str)) if t]
    return [t for t in ok if len(t) <= MAX_TAG_CHARS][:MAX_TAGS]


def _ns(ms):
    return round(ms * 1_000_000)


def _usage_values(row):
    ttft, itl = row["ttft_ms"], row["inter_token_ms"]
    written, headers = row["request_written_us"], row["headers_us"]
    created, routing, first = row["created_event_us"], row["routing_us"], row["first_token_us"]
    phased = None not in (written, headers, created, first)
    return (
        1,
        int(ttft is not None),
        _ns(ttft) if ttft is not None else 0,
        int(itl is not None),
        _ns(itl) if itl is not None else 0,
        int(routing is not None),
        int(routing is not None and written is not None),
        int(phased),
        written if phased else 0,
        headers if phased else 0,
        created if phased else 0,
        (routing if routing is not None else created) if phased else 0,
        first if phased else 0,
        row["output_tokens"] or 0,
        row["bytes_received"] or 0,
        row["event_count"] or 0,
        row["findings_count"] or 0,
    )


def _new_keys(schema_editor, model, name):
    connection, qn = schema_editor.connection, schema_editor.quote_name
    table = model._meta.db_table
    key = KEYS[name]
    fields = [f for f in model._meta.local_concrete_fields if f.column]
    cols = ", ".join(qn(f.column) for f in fields)
    new = NEW[name]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            # the table again, its columns in the model's order (SQLite's integrity_check, as
            # of 3.40, misreads a WITHOUT ROWID table with a key column after its values)
            defs = []
            for f in fields:
                for column, sql, before in new:
                    if before == f.column:
                        defs.append(f"{qn(column)} {sql} NOT NULL")
                sql, params = schema_editor.column_sql(model, f)
                assert not params
                defs.append(f"{qn(f.column)} {sql}")
            target = qn(f"new__{table}")
            cursor.execute(
                f"CREATE TABLE {target} ({', '.join(defs)}, "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)})) WITHOUT ROWID"
            )
            added = ", ".join(qn(c) for c, _, _ in new)
            blanks = ", ".join("''" for _ in new)
            cursor.execute(
                f"INSERT INTO {target} ({cols}, {added}) SELECT {cols}, {blanks} FROM {qn(table)}"
            )
            cursor.execute(f"DROP TABLE {qn(table)}")
            cursor.execute(f"ALTER TABLE {target} RENAME TO {qn(table)}")
        else:
            t = qn(table)
            for column, sql, _ in new:
                cursor.execute(f"ALTER TABLE {t} ADD COLUMN {qn(column)} {sql} NOT NULL DEFAULT ''")
                cursor.execute(f"ALTER TABLE {t} ALTER COLUMN {qn(column)} DROP DEFAULT")
            cursor.execute(f"ALTER TABLE {t} DROP CONSTRAINT {qn(table + '_pkey')}")
            include = f" INCLUDE ({qn('n')})" if name != "usagerollup" else ""
            cursor.execute(
                f"ALTER TABLE {t} ADD CONSTRAINT {qn(table + '_pkey')} "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)}){include}"
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
    """({table: {key: [values]}}, {(span, t): streams}) of one day's finished streams: the
    histogram, routing and finding rows under "" and each tag, the usage rows under each tag
    (its "" rows are right as they are)."""
    out = {name: {} for name in KEYS}
    usage, hist = out["usagerollup"], out["histogramrollup"]
    routing, findings = out["routingrollup"], out["findingrollup"]
    counts = defaultdict(int)

    def add(rows, key, values):
        acc = rows.get(key)
        if acc is None:
            rows[key] = list(values)
        else:
            for i, v in enumerate(values):
                acc[i] += v

    for row in rows:
        ts = _epoch(row["created_at"])
        user, source, status = row["user_id"] or 0, row["source"], row["status"]
        resolved, requested = row["resolved_model"], row["requested_model"]
        decision = None
        if row["routing_us"] is not None and row["request_written_us"] is not None:
            decision = (row["routing_us"] - row["request_written_us"]) / 1000.0
        buckets = [
            (metric, _bucket(value))
            for metric, value in ((TTFT, row["ttft_ms"]), (DECISION, decision))
            if value is not None
        ]
        tags = _tags(row["tags"])
        values = _usage_values(row) if tags else None
        for span in SPANS:
            t = int(ts // span) * span
            counts[(span, t)] += 1
            for tag in ("", *tags):
                if tag:
                    add(usage, (span, tag, t, resolved, requested, source, user, status,
                                row["error_code"]), values)  # fmt: skip
                for metric, b in buckets:
                    add(hist, (metric, False, span, tag, t, 0, "", resolved, requested, status,
                               b), (1,))  # fmt: skip
                    add(hist, (metric, True, span, tag, t, user, source, resolved, requested,
                               status, b), (1,))  # fmt: skip
                if requested == "auto":
                    add(routing, (span, tag, t, resolved, source, user, row["routing_category"],
                                  row["routing_source"], status), (1,))  # fmt: skip
                for code, severity, n in found.get(row["id"], ()):
                    add(findings, (span, tag, t, code, severity, resolved, requested, source,
                                   user, status), (n,))  # fmt: skip
    return out, counts


def _insert(cursor, qn, table, cols, items):
    width = len(cols)
    names = ", ".join(qn(c) for c in cols)
    per = 30000 // width
    for at in range(0, len(items), per):
        chunk = items[at : at + per]
        marks = ", ".join(["(" + ", ".join(["%s"] * width) + ")"] * len(chunk))
        cursor.execute(
            f"INSERT INTO {table} ({names}) VALUES {marks}", [v for item in chunk for v in item]
        )


def forwards(apps, schema_editor):
    for name in KEYS:
        _new_keys(schema_editor, apps.get_model("streams", name), name)
    _restate(apps, schema_editor)
    _user_index(schema_editor, apps.get_model("streams", "histogramrollup")._meta.db_table)
    _count_index(schema_editor, apps.get_model("streams", "usagerollup")._meta.db_table)


def _restate(apps, schema_editor):
    connection, qn = schema_editor.connection, schema_editor.quote_name
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
                f"WHERE {qn('span')} IN (%s, %s, %s) AND {qn('tag')} = '' AND {qn('t')} >= %s "
                f"AND {qn('t')} < %s GROUP BY {qn('span')}, {qn('t')}",
                [*SPANS, day - DAY, day],
            )
            aggregated = {(span, t): n for span, t, n in cursor.fetchall()}
            whole = {p for p, n in counts.items() if aggregated.get(p) == n}
            for name, key in KEYS.items():
                model = apps.get_model("streams", name)
                table = qn(model._meta.db_table)
                values = USAGE_VALUES if name == "usagerollup" else ("n",)
                if name != "usagerollup":  # (the usage rows stay: only tag rows are added)
                    # the key's columns before span (the histogram's metric and full)
                    # enumerated: each delete is a seek on the primary key, not a table scan
                    lead = key[: key.index("span")]
                    where = [f"{qn(c)} IN (%s, %s)" for c in lead]
                    where += [f"{qn('span')} = %s", f"{qn('t')} = %s"]
                    enum = {"metric": (TTFT, DECISION), "full": (False, True)}
                    params = [v for c in lead for v in enum[c]]
                    for span, t in sorted(whole):
                        cursor.execute(
                            f"DELETE FROM {table} WHERE {' AND '.join(where)}", [*params, span, t]
                        )
                span_at, t_at = key.index("span"), key.index("t")
                items = [
                    (*k, *v) for k, v in tables[name].items() if (k[span_at], k[t_at]) in whole
                ]
                _insert(cursor, qn, table, (*key, *values), items)


def _count_index(schema_editor, table):
    """The usage rows' stream counts and model pairs by (span, tag, user): what every page
    reads first (how many streams the scope may see, which pairs exist) without a table
    lookup per day row (31 ms of a page on PostgreSQL at 1M streams; the table row is 26
    columns wide). Covering as `_user_index` is."""
    qn = schema_editor.quote_name
    cols = ", ".join(qn(c) for c in COUNT_INDEX)
    sql = f"CREATE INDEX {qn('usage_rollup_count')} ON {qn(table)} ({cols}"
    if schema_editor.connection.vendor == "postgresql":
        sql += f") INCLUDE ({qn('resolved_model')}, {qn('requested_model')}"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql + ")")


def _user_index(schema_editor, table):
    """The histogram rows of one user in key order, with their counts: a user's filter read
    every user's rows of its range (the key has the user after `t`), ~4× the rows with three
    users. Covering on both databases: a WITHOUT ROWID table's index holds its whole primary
    key; PostgreSQL INCLUDEs what the reads select. Not in the model's Meta, where `include`
    would warn on SQLite."""
    qn = schema_editor.quote_name
    cols = ", ".join(qn(c) for c in USER_INDEX)
    sql = f"CREATE INDEX {qn('histogram_rollup_user')} ON {qn(table)} ({cols}"
    if schema_editor.connection.vendor == "postgresql":
        rest = [c for c in KEYS["histogramrollup"] if c not in USER_INDEX]
        sql += f") INCLUDE ({', '.join(qn(c) for c in rest)}"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql + ")")


def _state_operations():
    ops = []
    for name, key in KEYS.items():
        for column, sql, _ in NEW[name]:
            ops.append(
                migrations.AddField(
                    model_name=name,
                    name=column,
                    field=models.CharField(default="", max_length=int(sql[8:-1])),
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
