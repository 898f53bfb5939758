"""Full-text search (streams/store/search.py): `search_other`, the rest of what a search finds
(instructions, earlier inputs, reasoning summaries, tool calls), and the index over it, the
prompt, the output text and the error message, kept by the database itself.

- SQLite: an FTS5 table (external content: a view of the four columns, each cut as the index
  cuts it) and triggers on the stream table that keep it;
- PostgreSQL: a generated `tsvector` column (`simple` configuration, the prompt weighted A,
  the output B) and its GIN index.

`search_other` of rows stored before is filled here from their request and output parts, and the
index is built from every row; `manage.py rebuild_search` does both again."""

from django.db import migrations, models

from streams.store.search import INDEXED_MAX_CHARS, TABLE, refill

FIELD = models.TextField(blank=True, verbose_name="other searchable text")
INDEXED = ", ".join(
    [
        "prompt",
        f"substr(output_text, 1, {INDEXED_MAX_CHARS}) AS output_text",
        f"substr(error_message, 1, {INDEXED_MAX_CHARS}) AS error_message",
        "search_other",
    ]
)


def _values(row):
    return (
        f"{row}.prompt, substr({row}.output_text, 1, {INDEXED_MAX_CHARS}), "
        f"substr({row}.error_message, 1, {INDEXED_MAX_CHARS}), {row}.search_other"
    )


COLUMNS = "prompt, output_text, error_message, search_other"
SQLITE = [
    f"CREATE VIEW {TABLE}_source AS SELECT id, {INDEXED} FROM streams_stream",
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5({COLUMNS}, content='{TABLE}_source', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER {TABLE}_insert AFTER INSERT ON streams_stream BEGIN "
    f"INSERT INTO {TABLE}(rowid, {COLUMNS}) VALUES (new.id, {_values('new')}); END",
    f"CREATE TRIGGER {TABLE}_delete AFTER DELETE ON streams_stream BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, {COLUMNS}) VALUES ('delete', old.id, {_values('old')}); "
    "END",
    f"CREATE TRIGGER {TABLE}_update AFTER UPDATE OF {COLUMNS} ON streams_stream BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, {COLUMNS}) VALUES ('delete', old.id, {_values('old')}); "
    f"INSERT INTO {TABLE}(rowid, {COLUMNS}) VALUES (new.id, {_values('new')}); END",
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {TABLE}_update",
    f"DROP TRIGGER IF EXISTS {TABLE}_delete",
    f"DROP TRIGGER IF EXISTS {TABLE}_insert",
    f"DROP TABLE IF EXISTS {TABLE}",
    f"DROP VIEW IF EXISTS {TABLE}_source",
]
VECTOR = (
    "setweight(to_tsvector('simple', coalesce(prompt, '')), 'A') || "
    f"setweight(to_tsvector('simple', left(coalesce(output_text, ''), {INDEXED_MAX_CHARS})), 'B') "
    f"|| to_tsvector('simple', left(coalesce(error_message, ''), {INDEXED_MAX_CHARS})) || "
    f"to_tsvector('simple', left(coalesce(search_other, ''), {INDEXED_MAX_CHARS}))"
)
POSTGRES = [
    f"ALTER TABLE streams_stream ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({VECTOR}) "
    "STORED",
    "CREATE INDEX stream_search ON streams_stream USING gin (search_vector)",
]
POSTGRES_DROP = [
    "DROP INDEX IF EXISTS stream_search",
    "ALTER TABLE streams_stream DROP COLUMN IF EXISTS search_vector",
]


def _add_column(apps, schema_editor):
    """The column in place (SQLite: ALTER TABLE ADD COLUMN, not Django's copy of the table)."""
    Stream = apps.get_model("streams", "Stream")
    field = FIELD.clone()
    field.set_attributes_from_name("search_other")
    field.model = Stream
    if schema_editor.connection.vendor == "sqlite":
        sql, params = schema_editor.column_sql(Stream, field, include_default=True)
        sql = sql % tuple(schema_editor.quote_value(p) for p in params)
        schema_editor.execute(f"ALTER TABLE streams_stream ADD COLUMN search_other {sql}")
    else:
        schema_editor.add_field(Stream, field)


def _index(apps, schema_editor):
    """The older rows' `search_other`, then the index over all of it."""
    refill(apps.get_model("streams", "Stream"))
    sqlite = schema_editor.connection.vendor == "sqlite"
    for statement in SQLITE if sqlite else POSTGRES:
        schema_editor.execute(statement)
    if sqlite:
        schema_editor.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")


def _drop_index(apps, schema_editor):
    sqlite = schema_editor.connection.vendor == "sqlite"
    for statement in SQLITE_DROP if sqlite else POSTGRES_DROP:
        schema_editor.execute(statement)


def _drop_column(apps, schema_editor):
    Stream = apps.get_model("streams", "Stream")
    field = FIELD.clone()
    field.set_attributes_from_name("search_other")
    field.model = Stream
    schema_editor.remove_field(Stream, field)


class Migration(migrations.Migration):
    dependencies = [("streams", "0012_usage_and_cost")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(model_name="stream", name="search_other", field=FIELD)
            ],
            database_operations=[migrations.RunPython(_add_column, _drop_column)],
        ),
        migrations.RunPython(_index, _drop_index),
    ]
