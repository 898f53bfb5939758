"""The project in every rollup key (docs/teams.md, "Analytics by project").

Every rollup table gets `project_key` (the stream's project's id, 0 for none) after span and
tag in its primary key, so a page's read of one project's periods is one key range. The data
is exact: 0018 put each user's streams in their personal project, so a row's project is its
`user_key`'s personal project, and the rows of user_key 0 (no user, or a user since deleted)
get project_key 0. The histograms' summed rows (`full` false) leave out the user, so their
project cannot be read off them: they are restated from the `full` rows of the same keys
(their sums over user and source, which is what the write path adds to them). Then every
table's rows are added once more over every project (project key -1, EVERY_PROJECT: what a
page of every project reads, as one key range, as many rows as before projects).

The covering indexes of 0008 lead with the project too: `usage_rollup_count` (span, tag,
project_key, user_key, n) for the counts every page reads first, and `histogram_rollup_user`
(metric, full, span, tag, project_key, user_key, t, n) for a user's filter within a project.

The tables are rebuilt as 0007 made them (SQLite: WITHOUT ROWID; PostgreSQL: the key
INCLUDEs `n` in the narrow tables). The code is frozen here: later
changes to the models cannot change what this migration does. One transaction.
"""

import importlib

from django.conf import settings
from django.db import migrations, models

KEYS = {
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
COUNT_INDEX = ("span", "tag", "project_key", "user_key", "n")
EVERY_PROJECT = -1  # the project key of the rows of every project
USER_INDEX = ("metric", "full", "span", "tag", "project_key", "user_key", "t", "n")


def _personal(qn, project_table, user_column):
    """SQL: the personal project's id of the user in `user_column`, 0 without one."""
    return (
        f"COALESCE((SELECT p.{qn('id')} FROM {qn(project_table)} p "
        f"WHERE p.{qn('personal_of_id')} = {user_column}), 0)"
    )


def _rebuild(schema_editor, model, name, project_table):
    connection, qn = schema_editor.connection, schema_editor.quote_name
    table = model._meta.db_table
    key = KEYS[name]
    # the key's columns first, in its order, then the values: SQLite's integrity_check (as of
    # 3.40) misreads a WITHOUT ROWID table with a key column after a value column
    fields = sorted(
        (f for f in model._meta.local_concrete_fields if f.column),
        key=lambda f: KEYS[name].index(f.column) if f.column in KEYS[name] else len(KEYS[name]),
    )
    old = [f.column for f in fields if f.column != "project_key"]
    values = [c for c in (f.column for f in fields) if c not in key]
    project = _personal(qn, project_table, f"{qn(table)}.{qn('user_key')}")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
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
            cols = ", ".join(qn(c) for c in old)
            cursor.execute(
                f"INSERT INTO {target} ({cols}, {qn('project_key')}) "
                f"SELECT {cols}, {project} FROM {qn(table)}"
            )
            cursor.execute(f"DROP TABLE {qn(table)}")
            cursor.execute(f"ALTER TABLE {target} RENAME TO {qn(table)}")
        else:
            t = qn(table)
            cursor.execute(f"DROP INDEX IF EXISTS {qn('usage_rollup_count')}")
            cursor.execute(f"DROP INDEX IF EXISTS {qn('histogram_rollup_user')}")
            cursor.execute(
                f"ALTER TABLE {t} ADD COLUMN {qn('project_key')} bigint NOT NULL DEFAULT 0"
            )
            cursor.execute(f"ALTER TABLE {t} ALTER COLUMN {qn('project_key')} DROP DEFAULT")
            cursor.execute(f"UPDATE {t} SET {qn('project_key')} = {project}")
            cursor.execute(f"ALTER TABLE {t} DROP CONSTRAINT {qn(table + '_pkey')}")
            include = f" INCLUDE ({qn('n')})" if values == ["n"] else ""
            cursor.execute(
                f"ALTER TABLE {t} ADD CONSTRAINT {qn(table + '_pkey')} "
                f"PRIMARY KEY ({', '.join(qn(c) for c in key)}){include}"
            )
        if name == "histogramrollup":
            _restate_summed(cursor, qn, table, key)
        _every_project(cursor, qn, table, key, values)
        if name == "histogramrollup":
            _index(schema_editor, "histogram_rollup_user", table, USER_INDEX, key)
        if name == "usagerollup":
            _index(
                schema_editor,
                "usage_rollup_count",
                table,
                COUNT_INDEX,
                ("resolved_model", "requested_model"),
            )


def _restate_summed(cursor, qn, table, key):
    """The summed histogram rows per project: the sums of the `full` rows over user and
    source (every stream with a bucket adds one row of each)."""
    t, full = qn(table), qn("full")
    cursor.execute(f"DELETE FROM {t} WHERE {full} = %s", [False])
    _insert_sums(
        cursor, qn, table, key, ["n"], {"full": "%s", "user_key": "0", "source": "''"},
        f"{full} = %s", [False, True],
    )  # fmt: skip


def _every_project(cursor, qn, table, key, values):
    """Every row once more under EVERY_PROJECT: the sums over the projects."""
    project = qn("project_key")
    _insert_sums(
        cursor, qn, table, key, values, {"project_key": str(EVERY_PROJECT)}, f"{project} <> %s",
        [EVERY_PROJECT],
    )  # fmt: skip


def _insert_sums(cursor, qn, table, key, values, fixed, where, params):
    """INSERT the sums of `values` of `table`'s rows matching `where`, grouped by `key` but the
    `fixed` columns (SQL of their value instead)."""
    select, group = [], []
    for c in key:
        if c in fixed:
            select.append(fixed[c])
        else:
            select.append(qn(c))
            group.append(qn(c))
    t = qn(table)
    cursor.execute(
        f"INSERT INTO {t} ({', '.join(qn(c) for c in (*key, *values))}) "
        f"SELECT {', '.join(select)}, {', '.join(f'SUM({qn(v)})' for v in values)} FROM {t} "
        f"WHERE {where} GROUP BY {', '.join(group)}",
        params,
    )


def _index(schema_editor, name, table, cols, include):
    """A covering index (0008's, by project): on PostgreSQL INCLUDE what the reads select; a
    WITHOUT ROWID table's index holds its whole primary key."""
    qn = schema_editor.quote_name
    sql = f"CREATE INDEX {qn(name)} ON {qn(table)} ({', '.join(qn(c) for c in cols)}"
    if schema_editor.connection.vendor == "postgresql":
        rest = [c for c in include if c not in cols]
        if rest:
            sql += f") INCLUDE ({', '.join(qn(c) for c in rest)}"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql + ")")


def forwards(apps, schema_editor):
    project_table = apps.get_model("streams", "Project")._meta.db_table
    for name in KEYS:
        _rebuild(schema_editor, apps.get_model("streams", name), name, project_table)


def backwards(apps, schema_editor):
    """Back to one row per key without a project (PostgreSQL: its columns are altered in
    place, so they are altered back; SQLite's tables are made anew going forward). The rows of
    every project go, the projects' rows are summed per key (every value adds up), and 0008's
    covering indexes come back as 0008 made them."""
    if schema_editor.connection.vendor != "postgresql":
        return
    qn = schema_editor.quote_name
    made = importlib.import_module("streams.migrations.0008_rollup_status_tags")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {qn('usage_rollup_count')}")
        cursor.execute(f"DROP INDEX IF EXISTS {qn('histogram_rollup_user')}")
        for name, key in KEYS.items():
            table = apps.get_model("streams", name)._meta.db_table
            t = qn(table)
            cursor.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "ORDER BY ordinal_position",
                [table],
            )
            columns = [row[0] for row in cursor.fetchall()]
            old = [c for c in key if c != "project_key"]
            values = [c for c in columns if c not in key]
            summed = ", ".join(f"SUM({qn(c)}) AS {qn(c)}" for c in values)
            cols = ", ".join(qn(c) for c in (*old, *values))
            grouped = ", ".join(qn(c) for c in old)
            cursor.execute(
                f"CREATE TEMPORARY TABLE rollup_back AS SELECT {grouped}, {summed} FROM {t} "
                f"WHERE {qn('project_key')} <> %s GROUP BY {grouped}",
                [EVERY_PROJECT],
            )
            cursor.execute(f"DELETE FROM {t}")
            cursor.execute(f"ALTER TABLE {t} DROP CONSTRAINT IF EXISTS {qn(table + '_pkey')}")
            cursor.execute(f"ALTER TABLE {t} DROP COLUMN {qn('project_key')}")
            cursor.execute(f"INSERT INTO {t} ({cols}) SELECT * FROM rollup_back")
            cursor.execute("DROP TABLE rollup_back")
            include = f" INCLUDE ({qn('n')})" if values == ["n"] else ""
            cursor.execute(
                f"ALTER TABLE {t} ADD CONSTRAINT {qn(table + '_pkey')} "
                f"PRIMARY KEY ({grouped}){include}"
            )
            if name == "usagerollup":
                made._count_index(schema_editor, table)
            if name == "histogramrollup":
                made._user_index(schema_editor, table)


def _state_operations():
    ops = []
    for name, key in KEYS.items():
        ops.append(
            migrations.AddField(
                model_name=name,
                name="project_key",
                field=models.BigIntegerField(default=0, verbose_name="project key"),
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
        ("streams", "0022_audit"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=_state_operations(),
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
