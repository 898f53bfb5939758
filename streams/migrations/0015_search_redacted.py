"""The search index built from the redacted text (streams/store/search.py, docs/search.md).

An upstream that echoes a key into an answer or an error had it indexed verbatim: a prefix
search (`q=incorrect 406b*`) found the stream for the right next character and not for a wrong
one, and walked the key out of an index that the pages only ever showed `[redacted]` from.
From here on the index reads, per row:

- `search_prompt`, `search_output`, `search_error`: the prompt, output and error with every
  known secret taken out, kept only where that changed something (NULL: the column itself, so
  the 99.9 % of rows without a secret store nothing twice); `search_other` is stored redacted;
- `search_derived_ns`: when those were derived. A statement that changes an indexed column or
  a copy without a new value here (a writer that did not derive) leaves it NULL, and a row
  with NULL there is indexed as nothing: a forgotten writer makes a row unfindable for a few
  seconds (`search.maintain` derives it), never findable by a secret.

SQLite: the FTS5 table stays; its view and triggers are made again over `search.source_sql`,
plus a trigger that notices a write that did not derive. PostgreSQL: the generated
`search_vector` is made again over the same text, and a BEFORE UPDATE trigger notices such a
write. Every row is derived here, under the secrets known now (the configured ones and the
sealed pass-through keys), which are recorded as swept."""

import importlib
import threading
import time

from django.db import migrations, models, transaction

# Which secrets the server knows and how a text loses them are the running code's, by design:
# the rows are derived under the secrets known when this runs, redacted as well as the code
# that runs it can. Everything else this migration does is frozen below, as
# streams/store/search.py had it when this was written (52ea435), so a later change there
# cannot change what this migration does to a database that runs it then.
from streams.store import known_secrets, sealed

TABLE = "streams_search"
MARK = "search_derived_ns"
OTHER = "search_other"
INDEXED_MAX_CHARS = 200_000
OTHER_MAX_CHARS = INDEXED_MAX_CHARS
_CUT_MARGIN = 1024  # a secret cut by INDEXED_MAX_CHARS is still seen whole: this much more
CHUNK = 200  # rows derived per transaction
SEARCH_COPIES = {"prompt": "search_prompt", "output_text": "search_output",
                 "error_message": "search_error"}  # fmt: skip
DERIVED = (*SEARCH_COPIES.values(), OTHER, MARK)
INDEXED = ("prompt", "output_text", "error_message", "search_other")
COPIES = tuple(SEARCH_COPIES.values())
WATCHED = (*INDEXED, *COPIES)  # a change to any of these needs a new MARK
COLUMNS = ", ".join(INDEXED)  # the FTS5 table's columns (0013)


def source_sql(row=""):
    """The four texts the index holds of a stream row, in INDEXED order, as SQL over `row`: the
    redacted copy where there is one, cut to INDEXED_MAX_CHARS; nothing for an underived row."""
    p = f"{row}." if row else ""
    texts = (
        f"coalesce({p}search_prompt, {p}prompt)",
        f"substr(coalesce({p}search_output, {p}output_text), 1, {INDEXED_MAX_CHARS})",
        f"substr(coalesce({p}search_error, {p}error_message), 1, {INDEXED_MAX_CHARS})",
        f"substr({p}search_other, 1, {INDEXED_MAX_CHARS})",
    )
    return [f"CASE WHEN {p}{MARK} IS NULL THEN '' ELSE {t} END" for t in texts]


def _values(row):
    return ", ".join(source_sql(row))


def _changed(columns):
    return "(" + " OR ".join(f"new.{c} IS NOT old.{c}" for c in columns) + ")"


SQLITE = [
    f"CREATE VIEW {TABLE}_source AS SELECT id, "
    + ", ".join(f"{sql} AS {name}" for sql, name in zip(source_sql(), INDEXED, strict=True))
    + " FROM streams_stream",
    f"CREATE TRIGGER {TABLE}_insert AFTER INSERT ON streams_stream BEGIN "
    f"INSERT INTO {TABLE}(rowid, {COLUMNS}) VALUES (new.id, {_values('new')}); END",
    f"CREATE TRIGGER {TABLE}_delete AFTER DELETE ON streams_stream BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, {COLUMNS}) VALUES ('delete', old.id, {_values('old')}); "
    "END",
    # A text or copy changed: the index follows; and when the statement left the mark as it
    # was, nothing derived the new text: the row is left underived (the nested UPDATE sets
    # only the mark, which `_mark` below carries into the index).
    f"CREATE TRIGGER {TABLE}_update AFTER UPDATE OF {', '.join((*WATCHED, MARK))} "
    f"ON streams_stream WHEN {_changed(WATCHED)} BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, {COLUMNS}) VALUES ('delete', old.id, {_values('old')}); "
    f"INSERT INTO {TABLE}(rowid, {COLUMNS}) VALUES (new.id, {_values('new')}); "
    f"UPDATE streams_stream SET {MARK} = NULL WHERE id = new.id "
    f"AND new.{MARK} IS old.{MARK} AND new.{MARK} IS NOT NULL; END",
    # Only the mark changed, from or to NULL: the row enters or leaves the index. (Exclusive
    # with `_update`, whose WHEN is the opposite, so no row is deleted from the index twice.)
    f"CREATE TRIGGER {TABLE}_mark AFTER UPDATE OF {MARK} ON streams_stream "
    f"WHEN (old.{MARK} IS NULL) IS NOT (new.{MARK} IS NULL) AND NOT {_changed(WATCHED)} BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, {COLUMNS}) VALUES ('delete', old.id, {_values('old')}); "
    f"INSERT INTO {TABLE}(rowid, {COLUMNS}) VALUES (new.id, {_values('new')}); END",
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {TABLE}_mark",
    f"DROP TRIGGER IF EXISTS {TABLE}_update",
    f"DROP TRIGGER IF EXISTS {TABLE}_delete",
    f"DROP TRIGGER IF EXISTS {TABLE}_insert",
    f"DROP VIEW IF EXISTS {TABLE}_source",
]

PROMPT, OUTPUT, ERROR, OTHER_TEXT = source_sql()
VECTOR = (
    f"setweight(to_tsvector('simple', {PROMPT}), 'A') || "
    f"setweight(to_tsvector('simple', {OUTPUT}), 'B') || "
    f"to_tsvector('simple', {ERROR}) || to_tsvector('simple', {OTHER_TEXT})"
)
_NEW = ", ".join(f"NEW.{c}" for c in WATCHED)
_OLD = ", ".join(f"OLD.{c}" for c in WATCHED)
POSTGRES = [
    f"ALTER TABLE streams_stream ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ({VECTOR}) "
    "STORED",
    "CREATE INDEX stream_search ON streams_stream USING gin (search_vector)",
    # a statement that changed a text or a copy but left the mark as it was derived nothing:
    # the row is left underived (its generated vector, computed after this, is empty)
    "CREATE FUNCTION streams_search_underived() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF NEW.{MARK} IS NOT DISTINCT FROM OLD.{MARK} AND ({_NEW}) IS DISTINCT FROM ({_OLD}) THEN "
    f"NEW.{MARK} := NULL; END IF; RETURN NEW; END $$",
    f"CREATE TRIGGER streams_search_underived BEFORE UPDATE OF {', '.join(WATCHED)} "
    "ON streams_stream FOR EACH ROW EXECUTE FUNCTION streams_search_underived()",
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS streams_search_underived ON streams_stream",
    "DROP FUNCTION IF EXISTS streams_search_underived()",
    "DROP INDEX IF EXISTS stream_search",
    "ALTER TABLE streams_stream DROP COLUMN IF EXISTS search_vector",
]


def _before():
    return importlib.import_module("streams.migrations.0013_search")


def _derive(apps, schema_editor):
    """Away with the index over the stored text, every row derived, the index over the
    derived text (derived first: no trigger or generated column works per row meanwhile)."""
    sqlite = schema_editor.connection.vendor == "sqlite"
    before = _before()
    for statement in before.SQLITE_DROP[:3] + before.SQLITE_DROP[4:] if sqlite else POSTGRES_DROP:
        schema_editor.execute(statement)  # (SQLite: the FTS5 table stays, rebuilt below)
    _rederive(apps.get_model("streams", "Stream"))
    _swept_all(apps.get_model("streams", "SweptSecret"))
    for statement in SQLITE if sqlite else POSTGRES:
        schema_editor.execute(statement)
    if sqlite:
        schema_editor.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")


def _underive(apps, schema_editor):
    """Back to 0013's index over the stored text (`search_other` stays redacted: `manage.py
    rebuild_search` of that version makes it again from the requests and parts)."""
    sqlite = schema_editor.connection.vendor == "sqlite"
    before = _before()
    for statement in SQLITE_DROP if sqlite else POSTGRES_DROP:
        schema_editor.execute(statement)
    if sqlite:
        schema_editor.execute(before.SQLITE[0])  # the view
        for statement in before.SQLITE[2:]:  # the triggers (the FTS5 table stayed)
            schema_editor.execute(statement)
        schema_editor.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")
    else:
        for statement in before.POSTGRES:
            schema_editor.execute(statement)


# ---- frozen: deriving every row's search text ---------------------------------------------

_mark_lock = threading.Lock()
_last_mark = 0


def _new_mark():
    global _last_mark
    with _mark_lock:
        _last_mark = max(time.time_ns(), _last_mark + 1)
        return _last_mark


def _redacted(text):
    rules = known_secrets.fresh_rules()
    return rules.text(text) if rules else text


def _derived(fields):
    """The search columns of the indexed columns among `fields`: a copy is None where the
    redaction changed nothing of what the index reads."""
    out = {}
    for column, copy in SEARCH_COPIES.items():
        if column in fields:
            text = fields[column] or ""
            indexed = text[:INDEXED_MAX_CHARS]
            clean = _redacted(text[: INDEXED_MAX_CHARS + _CUT_MARGIN])[:INDEXED_MAX_CHARS]
            out[copy] = None if clean == indexed else clean
    if OTHER in fields:
        out[OTHER] = _redacted(fields[OTHER] or "")[:OTHER_MAX_CHARS]
    return out


def _rederive_rows(Stream, ids):
    """The search text of the rows `ids` derived (`search_other` redacted as stored), written
    where it changes or the row had none, with a new mark; in one transaction."""
    columns = ["pk", *SEARCH_COPIES, OTHER, *SEARCH_COPIES.values(), MARK]
    changed, marked = [], []
    with transaction.atomic():
        rows = Stream.objects.filter(pk__in=list(ids)).select_for_update().values_list(*columns)
        for values in rows:
            row = dict(zip(columns, values, strict=True))
            new = _derived({column: row[column] for column in (*SEARCH_COPIES, OTHER)})
            if any(new[column] != row[column] for column in new):
                changed.append(Stream(pk=row["pk"], **new))
            elif row[MARK] is None:
                marked.append(row["pk"])
        mark = _new_mark()
        for stream in changed:
            setattr(stream, MARK, mark)
        if changed:
            Stream.objects.bulk_update(changed, list(DERIVED))
        if marked:
            Stream.objects.filter(pk__in=marked).update(**{MARK: mark})


def _rederive(Stream):
    last = 0
    while True:
        ids = list(
            Stream.objects.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:CHUNK]
        )
        if not ids:
            return
        _rederive_rows(Stream, ids)
        last = ids[-1]


def _swept_all(SweptSecret):
    """Every secret known now recorded as swept (every row was derived under them)."""
    rules = known_secrets.fresh_rules()
    prints = {sealed.fingerprint(s) for s in (rules.secrets if rules else ())}
    SweptSecret.objects.bulk_create(
        [SweptSecret(fingerprint=fp) for fp in prints], ignore_conflicts=True, batch_size=500
    )


class Migration(migrations.Migration):
    dependencies = [("streams", "0014_scores_and_share_links")]

    operations = [
        migrations.AddField(
            model_name="stream",
            name="search_prompt",
            field=models.TextField(blank=True, null=True, verbose_name="prompt as searched"),
        ),
        migrations.AddField(
            model_name="stream",
            name="search_output",
            field=models.TextField(blank=True, null=True, verbose_name="output as searched"),
        ),
        migrations.AddField(
            model_name="stream",
            name="search_error",
            field=models.TextField(blank=True, null=True, verbose_name="error as searched"),
        ),
        migrations.AddField(
            model_name="stream",
            name="search_derived_ns",
            field=models.BigIntegerField(
                blank=True, null=True, verbose_name="search text derived (ns)"
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                condition=models.Q(("search_derived_ns__isnull", True)),
                fields=["id"],
                name="stream_search_underived",
            ),
        ),
        migrations.CreateModel(
            name="SweptSecret",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "fingerprint",
                    models.CharField(max_length=64, unique=True, verbose_name="fingerprint"),
                ),
                ("swept_at", models.DateTimeField(auto_now_add=True, verbose_name="swept at")),
            ],
            options={"verbose_name": "swept secret", "verbose_name_plural": "swept secrets"},
        ),
        migrations.RunPython(_derive, _underive),
    ]
