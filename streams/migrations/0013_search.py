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

# Frozen here, as streams/store/search.py had them when this migration was written (the same
# from 59a89a1 to 52ea435): a later change to the search module must not change what this
# migration does to a database that runs it then.
INDEXED_MAX_CHARS = 200_000
OTHER_MAX_CHARS = INDEXED_MAX_CHARS
TABLE = "streams_search"

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


# ---- frozen: what the search text of a row was, and how it was filled -------------------


def prompt_of(input):
    """The last user text of an input, for lists and search."""
    if isinstance(input, str):
        return input
    for item in reversed(input if isinstance(input, list) else ()):
        if isinstance(item, dict) and item.get("role", "user") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    c["text"]
                    for c in content
                    if isinstance(c, dict) and isinstance(c.get("text"), str)
                )
    return ""


def other_text(request_body, parts) -> str:
    """What a search finds besides the prompt, the output text and the error: the request's
    instructions and its input texts (the prompt is its last one), the reasoning summaries,
    message parts that are not the output text (refusals), and each tool call's name,
    arguments and output. Cut to OTHER_MAX_CHARS."""
    pieces = []
    body = request_body if isinstance(request_body, dict) else {}
    if isinstance(body.get("instructions"), str):
        pieces.append(body["instructions"])
    prompt = prompt_of(body.get("input"))  # (a column of its own)
    pieces += [t for t in _input_texts(body.get("input")) if t != prompt]
    for item in parts if isinstance(parts, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            pieces += [s for s in item.get("summary") or () if isinstance(s, str)]
        elif kind == "message":
            pieces += [
                p["text"]
                for p in item.get("parts") or ()
                if isinstance(p, dict)
                and p.get("type") not in ("output_text", None)
                and isinstance(p.get("text"), str)
            ]
        elif "arguments" in item or "name" in item:  # a tool call
            for key in ("name", "arguments", "output"):
                value = item.get(key)
                if isinstance(value, str):
                    pieces.append(value)
                elif value is not None:
                    pieces.append(_text_of(value))
    text = "\n".join(p for p in pieces if p)
    return text[:OTHER_MAX_CHARS]


def _input_texts(value):
    if isinstance(value, str):
        return [value]
    out = []
    for item in value if isinstance(value, list) else ():
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [
                c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)
            ]
        elif isinstance(item.get("output"), str):  # a tool's output sent back
            out.append(item["output"])
    return out


def _text_of(value):
    """The strings inside a JSON value (a tool's structured output), space-separated."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(_text_of(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_text_of(v) for v in value)
    return "" if value is None or isinstance(value, bool) else str(value)


def refill(Stream, chunk=2000) -> int:
    """`search_other` of every row made again from its request and output parts, unredacted
    (`Stream`: the historical model); how many rows changed."""
    changed = 0
    pending = []
    rows = Stream.objects.order_by("pk").values_list("pk", "request_body", "parts", "search_other")
    for pk, body, parts, before in rows.iterator(chunk_size=chunk):
        text = other_text(body, parts)
        if text != before:
            pending.append(Stream(pk=pk, search_other=text))
        if len(pending) >= chunk:
            changed += len(pending)
            Stream.objects.bulk_update(pending, ["search_other"])
            pending = []
    if pending:
        changed += len(pending)
        Stream.objects.bulk_update(pending, ["search_other"])
    return changed


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
