"""The rollup tables keyed by their own key, and 3-hour periods beside hours and days.

- Each rollup table's primary key becomes its key (a composite primary key; the surrogate `id`
  and the separate unique constraint go). On SQLite the tables become `WITHOUT ROWID`: the
  rows are stored in key order, so a page's read of a (span, t) range is one sequential,
  index-only scan instead of an index walk plus a table lookup per row (at 1M streams the
  histogram reads were most of the latency page's time; docs/analytics.md). On PostgreSQL the
  primary key INCLUDEs the counted column of the three narrow tables, for index-only scans.
- 3-hour periods (span 10800) are filled from the hour rows, which hold the whole history
  (retention keeps aggregates), so a series in 3-, 6- or 12-hour steps reads a third of the
  rows.

The table rebuild copies every rollup row once; the aggregates stay exact throughout (one
transaction on both databases).
"""

from django.db import migrations, models

KEYS = {
    "usagerollup": (
        "span", "t", "resolved_model", "requested_model", "source", "user_key", "status",
        "error_code",
    ),
    "histogramrollup": (
        "metric", "full", "span", "t", "user_key", "source", "resolved_model",
        "requested_model", "bucket",
    ),
    "routingrollup": (
        "span", "t", "resolved_model", "source", "user_key", "routing_category",
        "routing_source",
    ),
    "findingrollup": (
        "span", "t", "code", "severity", "resolved_model", "requested_model", "source",
        "user_key",
    ),
}  # fmt: skip
CONSTRAINTS = {
    "usagerollup": "usage_rollup_key",
    "histogramrollup": "histogram_rollup_key",
    "routingrollup": "routing_rollup_key",
    "findingrollup": "finding_rollup_key",
}
HOUR, THREE_HOURS = 3600, 10800


def forwards(apps, schema_editor):
    connection = schema_editor.connection
    qn = schema_editor.quote_name
    for name, key in KEYS.items():
        model = apps.get_model("streams", name)
        table = model._meta.db_table
        fields = [f for f in model._meta.local_concrete_fields if f.name != "id"]
        cols = [f.column for f in fields]
        values = [c for c in cols if c not in key]
        col_list = ", ".join(qn(c) for c in cols)
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                defs = []
                for f in fields:
                    sql, params = schema_editor.column_sql(model, f)
                    assert not params
                    defs.append(f"{qn(f.column)} {sql}")
                new = qn(f"new__{table}")
                cursor.execute(
                    f"CREATE TABLE {new} ({', '.join(defs)}, "
                    f"PRIMARY KEY ({', '.join(qn(c) for c in key)})) WITHOUT ROWID"
                )
                cursor.execute(f"INSERT INTO {new} ({col_list}) SELECT {col_list} FROM {qn(table)}")
                cursor.execute(f"DROP TABLE {qn(table)}")
                cursor.execute(f"ALTER TABLE {new} RENAME TO {qn(table)}")
            else:
                cursor.execute(f"ALTER TABLE {qn(table)} DROP CONSTRAINT {qn(CONSTRAINTS[name])}")
                cursor.execute(f"ALTER TABLE {qn(table)} DROP COLUMN {qn('id')}")
                include = f" INCLUDE ({qn('n')})" if values == ["n"] else ""
                cursor.execute(
                    f"ALTER TABLE {qn(table)} ADD CONSTRAINT {qn(table + '_pkey')} "
                    f"PRIMARY KEY ({', '.join(qn(c) for c in key)}){include}"
                )
            # 3-hour rows: sums of the hour rows
            select, group = [], []
            for c in key:
                if c == "span":
                    select.append(str(THREE_HOURS))
                    continue
                expr = f"(({qn(c)} / {THREE_HOURS}) * {THREE_HOURS})" if c == "t" else qn(c)
                select.append(expr)
                group.append(expr)
            select += [f"SUM({qn(c)})" for c in values]
            cursor.execute(
                f"INSERT INTO {qn(table)} ({', '.join(qn(c) for c in (*key, *values))}) "
                f"SELECT {', '.join(select)} FROM {qn(table)} WHERE {qn('span')} = {HOUR} "
                f"GROUP BY {', '.join(group)}"
            )


def _state_operations():
    ops = []
    for name, constraint in CONSTRAINTS.items():
        ops.append(migrations.RemoveConstraint(model_name=name, name=constraint))
        ops.append(migrations.RemoveField(model_name=name, name="id"))
        ops.append(
            migrations.AddField(
                model_name=name,
                name="pk",
                field=models.CompositePrimaryKey(
                    *KEYS[name],
                    blank=True,
                    editable=False,
                    primary_key=True,
                    serialize=False,
                ),
            )
        )
    return ops


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0006_aggregates"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards)],
            state_operations=_state_operations(),
        ),
    ]
