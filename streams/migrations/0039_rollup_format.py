"""The stream's format in every rollup key (issue 48, docs/analytics.md "By format").

Every rollup table gets `format` (Stream.format: responses | chat | messages) as the last
column of its primary key, so the analytics pages' format filter reads the rollups like any
other filter. Every row stored before gets `responses`: every stream before 0032 spoke it, and
so does the history retention deleted before then. A Chat Completions or Messages stream
recorded between 0032 and this migration was added as Responses; `manage.py
rebuild_aggregates` restates such rows from the raw rows (what the docs tell an instance that
recorded them to run; it refuses when retention has deleted raw rows, whose history would go).

The tables are rebuilt as 0023 made them (SQLite: WITHOUT ROWID, the key's columns first;
PostgreSQL: the key INCLUDEs `n` in the narrow tables), and 0023's covering indexes come back
on SQLite (a table made anew loses them; PostgreSQL keeps them, their columns unchanged). The
code is frozen here. One transaction.
"""

from django.db import migrations, models

OLD_KEYS = {
    "usagerollup": (
        "span", "tag", "project_key", "t", "resolved_model", "requested_model", "source",
        "user_key", "status", "error_code",
    ),
    "histogramrollup": (
        "metric", "full", "span", "tag", "project_key", "t", "user_key", "source",
        "resolved_model", "requested_model", "status", "bucket",
    ),
    "routingrollup": (
        "span", "tag", "project_key", "t", "resolved_model", "source", "user_key",
        "routing_category", "routing_source", "status",
    ),
    "findingrollup": (
        "span", "tag", "project_key", "t", "code", "severity", "resolved_model",
        "requested_model", "source", "user_key", "status",
    ),
    "scorerollup": (
        "span", "tag", "project_key", "t", "score_type", "resolved_model", "requested_model",
        "source", "user_key", "status",
    ),
}  # fmt: skip
KEYS = {name: (*key, "format") for name, key in OLD_KEYS.items()}
BEFORE = "responses"  # every stream's format before 0032 (Stream.format's default)
# 0023's covering indexes (SQLite: a WITHOUT ROWID table's index holds its whole key)
INDEXES = {
    "usagerollup": ("usage_rollup_count", ("span", "tag", "project_key", "user_key", "n")),
    "histogramrollup": (
        "histogram_rollup_user",
        ("metric", "full", "span", "tag", "project_key", "user_key", "t", "n"),
    ),
}


def _rebuild(schema_editor, model, name):
    connection, qn = schema_editor.connection, schema_editor.quote_name
    table = model._meta.db_table
    key = KEYS[name]
    t = qn(table)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            # the key's columns first, in its order, then the values (0023: SQLite's
            # integrity_check misreads a WITHOUT ROWID table with a key column after a value)
            fields = sorted(
                (f for f in model._meta.local_concrete_fields if f.column),
                key=lambda f: key.index(f.column) if f.column in key else len(key),
            )
            defs = []
            for f in fields:
                sql, params = schema_editor.column_sql(model, f)
                assert not params
                defs.append(f"{qn(f.column)} {sql}")
            target = qn(f"new__{table}")
            cursor.execute(
                f"CREATE TABLE {target} ({', '.join(defs)}, "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)})) WITHOUT ROWID"
            )
            old = ", ".join(qn(f.column) for f in fields if f.column != "format")
            cursor.execute(
                f"INSERT INTO {target} ({old}, {qn('format')}) SELECT {old}, '{BEFORE}' FROM {t}"
            )
            cursor.execute(f"DROP TABLE {t}")
            cursor.execute(f"ALTER TABLE {target} RENAME TO {t}")
            if name in INDEXES:
                index, cols = INDEXES[name]
                cursor.execute(
                    f"CREATE INDEX {qn(index)} ON {t} ({', '.join(qn(c) for c in cols)})"
                )
        else:
            # (a literal: DDL takes no parameters where they are bound by the server)
            cursor.execute(
                f"ALTER TABLE {t} ADD COLUMN {qn('format')} varchar(10) NOT NULL DEFAULT '{BEFORE}'"
            )
            cursor.execute(f"ALTER TABLE {t} ALTER COLUMN {qn('format')} DROP DEFAULT")
            cursor.execute(f"ALTER TABLE {t} DROP CONSTRAINT {qn(table + '_pkey')}")
            narrow = name in ("histogramrollup", "routingrollup", "findingrollup")
            include = f" INCLUDE ({qn('n')})" if narrow else ""
            cursor.execute(
                f"ALTER TABLE {t} ADD CONSTRAINT {qn(table + '_pkey')} "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)}){include}"
            )


def forwards(apps, schema_editor):
    for name in KEYS:
        _rebuild(schema_editor, apps.get_model("streams", name), name)


def backwards(apps, schema_editor):
    """Back to the keys without a format: the rows of one key summed over the formats (every
    value adds up). PostgreSQL only (its columns are altered in place); SQLite's tables are
    made anew going forward, as 0023's."""
    if schema_editor.connection.vendor != "postgresql":
        return
    qn = schema_editor.quote_name
    with schema_editor.connection.cursor() as cursor:
        for name, key in OLD_KEYS.items():
            table = apps.get_model("streams", name)._meta.db_table
            t = qn(table)
            cursor.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "ORDER BY ordinal_position",
                [table],
            )
            values = [c for (c,) in cursor.fetchall() if c not in KEYS[name]]
            grouped = ", ".join(qn(c) for c in key)
            summed = ", ".join(f"SUM({qn(c)}) AS {qn(c)}" for c in values)
            cursor.execute(
                f"CREATE TEMPORARY TABLE rollup_back AS SELECT {grouped}, {summed} FROM {t} "
                f"GROUP BY {grouped}"
            )
            cursor.execute(f"DELETE FROM {t}")
            cursor.execute(f"ALTER TABLE {t} DROP CONSTRAINT IF EXISTS {qn(table + '_pkey')}")
            cursor.execute(f"ALTER TABLE {t} DROP COLUMN {qn('format')}")
            cols = ", ".join(qn(c) for c in (*key, *values))
            cursor.execute(f"INSERT INTO {t} ({cols}) SELECT * FROM rollup_back")
            cursor.execute("DROP TABLE rollup_back")
            narrow = name in ("histogramrollup", "routingrollup", "findingrollup")
            include = f" INCLUDE ({qn('n')})" if narrow else ""
            cursor.execute(
                f"ALTER TABLE {t} ADD CONSTRAINT {qn(table + '_pkey')} "
                f"PRIMARY KEY ({grouped}){include}"
            )


def _state_operations():
    ops = []
    for name, key in KEYS.items():
        ops.append(
            migrations.AddField(
                model_name=name,
                name="format",
                field=models.CharField(default=BEFORE, max_length=10, verbose_name="format"),
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
        ("streams", "0038_event_preamble"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=_state_operations(),
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
