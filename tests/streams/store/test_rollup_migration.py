"""The rollup migrations on a database that already holds aggregates.

0007: the rollup tables keep every row under their new keys, and the 3-hour rows it adds equal
what the write path would have written (the sums of the hour rows). 0008: the rows are
restated with the stream's status and tags from the raw rows where those are complete, and
keep the history retention deleted (status unknown, no tag rows) where not. An upgraded
install reads the same figures."""

import contextlib
import io
import os

import pytest

from streams.models import Stream
from streams.store import aggregates
from tests.support.migrations import own_database
from tests.support.processes import last_json

# Scripts (`_shell`) run at an older migration; they write a history's aggregates as that time's
# write path did: today's contributions without what 0008 added (the tag rows and column, the
# status in three of the tables) and, for 0006, without the 3-hour periods.
OLD = """
import datetime as dt, json, random
from django.db import connection, transaction
from streams.store import aggregates
from streams.models import Event, Finding, Stream, UsageRollup

# the rollup tables 0007 and 0008 restate (those added since are not in these old schemas)
RESTATED = {
    m: v for m, v in aggregates.rollup_tables().items()
    if m.__name__ in ("UsageRollup", "HistogramRollup", "RoutingRollup", "FindingRollup")
}

def history(n, seed):
    rng = random.Random(seed)
    now = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
    rows = []
    for i in range(n):
        created = now - dt.timedelta(seconds=rng.randint(0, 4 * 86400))
        rows.append(Stream(
            created_at=created, status=rng.choice(["completed", "failed", "stalled"]),
            requested_model=rng.choice(["auto", "gpt-oss-20b"]),
            resolved_model=rng.choice(["a", "b"]), source=rng.choice(["live", "proxy"]),
            ttft_ms=rng.uniform(20, 900), request_written_us=100,
            routing_us=rng.choice([None, 5000]), output_tokens=rng.randint(1, 50),
            routing_category=rng.choice(["code", "chat"]),
            tags=rng.choice([[], [], ["a"], ["a", "b"], ["b"]]), request_body={},
        ))
    Stream._meta.get_field("created_at").auto_now_add = False
    made = insert_present(rows)
    insert_present(
        [Finding(stream=s, code=rng.choice(["stall", "sequence_gap"]), severity="warning")
         for s in made if rng.random() < 0.3]
    )
    return [s.pk for s in made]

def insert_present(rows):
    # `rows` (of one model) inserted with the columns this (older) schema has: a column added
    # since is left out, as the migration that adds it will fill it. Returns them with their ids.
    if not rows:
        return rows
    model = type(rows[0])
    qn = connection.ops.quote_name
    table = model._meta.db_table
    with connection.cursor() as cursor:
        present = {c.name for c in connection.introspection.get_table_description(cursor, table)}
        fields = [
            f for f in model._meta.concrete_fields if not f.primary_key and f.column in present
        ]
        pg = connection.vendor == "postgresql"
        for row in rows:
            cursor.execute(
                f"INSERT INTO {qn(table)} ({', '.join(qn(f.column) for f in fields)}) "
                f"VALUES ({', '.join(['%s'] * len(fields))})" + (" RETURNING id" if pg else ""),
                [f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields],
            )
            row.pk = cursor.fetchone()[0] if pg else cursor.lastrowid
    return rows

# Columns renamed since (0012: the delta count), by today's name.
RENAMED = {"output_deltas": "output_tokens"}

def present(model):
    with connection.cursor() as cursor:
        table = model._meta.db_table
        return {c.name for c in connection.introspection.get_table_description(cursor, table)}

def column(there, name):
    # today's column `name` as a schema with the columns `there` calls it, or None
    if not set(RENAMED) & there:  # (before the renames: their old names meant them)
        if name in RENAMED.values() and name not in RENAMED:
            return None
        name = RENAMED.get(name, name)
    return name if name in there else None

def then(model, names):
    # `names` (today's) as this schema calls them, those it has
    there = present(model)
    return [column(there, c) for c in names if column(there, c)]

def old_key(model):
    key, values = RESTATED[model]
    # (the project came with 0019, the format with 0039)
    new = ("tag", "project_key", "format")
    return [c for c in key if c not in new and (c != "status" or model is UsageRollup)], values

def snapshot(ids):
    # aggregates.snapshot over this schema's stream columns (one added since reads as empty)
    qn = connection.ops.quote_name
    there = present(Stream)
    select = [qn(column(there, c)) if column(there, c) else "NULL" for c in aggregates.COLUMNS]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(select)} FROM {qn(Stream._meta.db_table)} "
                       f"WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
        streams = [dict(zip(aggregates.COLUMNS, r)) for r in cursor.fetchall()]
        cursor.execute(f"SELECT stream_id, code, severity, COUNT(*) FROM "
                       f"{qn(Finding._meta.db_table)} GROUP BY stream_id, code, severity")
        findings = {}
        for sid, code, severity, n in cursor.fetchall():
            findings.setdefault(sid, []).append((code, severity, n))
    out = aggregates.Contributions()
    for row in streams:
        row.update({c: row[c] or "" for c in ("usage_source", "cost_currency")})
        out.add_stream(row, findings.get(row["id"], ()))
    return out

def write_old(ids, spans):
    aggregates.SPANS = spans
    qn = connection.ops.quote_name
    for model, rows in snapshot(ids).tables.items():
        if model not in RESTATED:
            continue  # (the project rollup: 0035, filled from the usage rollup)
        key, values = RESTATED[model]
        old, _ = old_key(model)
        at = [key.index(c) for c in old]
        kept = [i for i, c in enumerate(values) if then(model, [c])]  # (values it has)
        merged = {}
        for k, v in rows.items():
            # (nor the rows of every project, 0019's)
            if k[key.index("tag")] or k[key.index("project_key")] == aggregates.EVERY_PROJECT:
                continue
            acc = merged.setdefault(tuple(k[i] for i in at), [0] * len(kept))
            for j, i in enumerate(kept):
                acc[j] += v[i]
        cols = old + then(model, values)
        with connection.cursor() as cursor:
            for k, v in merged.items():
                cursor.execute(
                    f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(map(qn, cols))}) "
                    f"VALUES ({', '.join(['%s'] * len(cols))})", [*k, *v])

def old_rows(model):
    old, values = old_key(model)
    cols = old + then(model, values)
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(map(qn, cols))} FROM {qn(model._meta.db_table)}")
        return cols, [list(r) for r in cursor.fetchall()]

def write_summed(ids, dropped, every_project=True):
    # today's contributions of `ids` summed over the key columns `dropped` (which the schema
    # has not yet), without the rows of every project unless `every_project`; {table: rows}
    qn = connection.ops.quote_name
    written = {}
    for model, rows in snapshot(ids).tables.items():
        if model not in RESTATED:
            continue  # (the project rollup: 0035, filled from the usage rollup)
        key, values = aggregates.rollup_tables()[model]
        old = [c for c in key if c not in dropped]
        at = [key.index(c) for c in old]
        merged = {}
        for k, v in rows.items():
            if not every_project and k[key.index("project_key")] == aggregates.EVERY_PROJECT:
                continue
            acc = merged.setdefault(tuple(k[i] for i in at), [0] * len(v))
            for i, x in enumerate(v):
                acc[i] += x
        cols = old + list(values)
        with connection.cursor() as cursor:
            for k, v in merged.items():
                cursor.execute(
                    f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(map(qn, cols))}) "
                    f"VALUES ({', '.join(['%s'] * len(cols))})", [*k, *v])
        written[model.__name__] = len(merged)
    return written
"""
# 0006 → today: hour and day rows only.
BEFORE_0007 = (
    OLD
    + """
with transaction.atomic():
    write_old(history(400, 5), (aggregates.HOUR, aggregates.DAY))
print(json.dumps({m.__name__: len(old_rows(m)[1]) for m in RESTATED}))
"""
)
# After the migration: the stored tables, and what a rebuild from the raw rows gives.
AFTER = """
import json
from django.db import connection, transaction
from streams.store import aggregates
stored = aggregates.stored()
with transaction.atomic():
    aggregates.rebuild()
rebuilt = aggregates.stored()
with connection.cursor() as cursor:
    cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'streams_histogramrollup'")
    ddl = cursor.fetchone()[0]
    cursor.execute("PRAGMA integrity_check")
    integrity = cursor.fetchall()
print(json.dumps({"ddl": ddl, "same": stored == rebuilt, "integrity": integrity,
                  "three_hours": sum(1 for t in stored.values() for k in t if 10800 in k)}))
"""
# 0007 → today: a history with findings and tags, then retention deletes the streams before a
# cutoff in the middle of an hour and keeps their aggregates (their periods are thinned).
BEFORE_0008 = (
    OLD
    + """
with transaction.atomic():
    write_old(history(600, 8), aggregates.SPANS)
    cutoff = dt.datetime(2026, 11, 17, 9, 30, tzinfo=dt.UTC)
    gone = Stream.objects.filter(created_at__lt=cutoff).only("pk", "created_at")
    thinned = sorted({(span, int(s.created_at.timestamp()) // span * span)
                      for s in gone for span in aggregates.SPANS})
    # what retention does, with the aggregates kept, in SQL: the ORM's delete would read the
    # rows' columns of today's model, which this older schema may not have
    doomed = [s.pk for s in gone]
    marks = ", ".join(["%s"] * len(doomed))
    with connection.cursor() as cursor:
        for model in (Finding, Event):
            cursor.execute(
                f"DELETE FROM {model._meta.db_table} WHERE stream_id IN ({marks})", doomed
            )
        cursor.execute(f"DELETE FROM {Stream._meta.db_table} WHERE id IN ({marks})", doomed)
        deleted = cursor.rowcount
out = {"deleted": deleted, "thinned": thinned}
for m in RESTATED:
    out[m.__name__] = old_rows(m)
print(json.dumps(out))
"""
)
AFTER_0008 = (
    OLD
    + """
out = {}
stored = aggregates.stored()
with transaction.atomic():
    aggregates.rebuild()
    rebuilt = aggregates.stored()
    transaction.set_rollback(True)
thinned = set()  # the periods with rows of status unknown, in any table
for m, (key, values) in RESTATED.items():
    s, t, st = key.index("span"), key.index("t"), key.index("status")
    thinned |= {(k[s], k[t]) for k in stored[m] if k[st] == ""}
for m, (key, values) in RESTATED.items():
    old, _ = old_key(m)
    at = [key.index(c) for c in old]
    s, t, tag, st = key.index("span"), key.index("t"), key.index("tag"), key.index("status")
    summed = {}  # the "" rows, summed over the statuses
    every = key.index("project_key")  # (0019's rows of every project: the same again)
    for k, v in stored[m].items():
        if k[tag] == "" and k[every] != aggregates.EVERY_PROJECT:
            acc = summed.setdefault(tuple(k[i] for i in at), [0] * len(v))
            for i, x in enumerate(v):
                acc[i] += x
    unknown = {(k[s], k[t]) for k in stored[m] if k[st] == ""}
    kept = {k: v for k, v in stored[m].items() if (k[s], k[t]) not in thinned}
    again = {k: v for k, v in rebuilt[m].items() if (k[s], k[t]) not in thinned}
    out[m.__name__] = {
        "summed": [[list(k), v] for k, v in summed.items()], "unknown": sorted(unknown),
        "kept_equals_rebuild": kept == again,
        "tagged": sorted({(k[s], k[t]) for k in stored[m] if k[tag]}),
        "tags": sorted({k[tag] for k in stored[m]}),
        "statuses": sorted({k[st] for k in stored[m]})}
print(json.dumps(out))
"""
)


def _shell(script):
    """What `script` prints, run here on the database the test migrates (once `manage.py shell
    -c` in a process of its own: ~2-3 s of CPU a start). What the scripts change of today's code
    for themselves (the spans written, `created_at` set by hand) is put back after each."""
    created_at = Stream._meta.get_field("created_at")
    kept = aggregates.SPANS, created_at.auto_now_add
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(script, {"__name__": "__main__"})
    finally:
        aggregates.SPANS, created_at.auto_now_add = kept
    return printed.getvalue()


pytestmark = [
    pytest.mark.skipif(
        os.environ.get("DATABASE_URL", "").startswith("postgres"),
        reason="SQLite's DDL and integrity read; tier 2 migrates PostgreSQL from scratch each run",
    ),
    pytest.mark.django_db,  # (each migrates a database of its own: tests/support/migrations.py)
]


def test_0007_keeps_the_aggregates_and_adds_three_hour_rows():
    with own_database() as db:
        db.forward(("streams", "0006_aggregates"))
        before = last_json(_shell(BEFORE_0007))
        assert before["HistogramRollup"] and before["UsageRollup"] and before["FindingRollup"]
        db.forward()
        after = last_json(_shell(AFTER))
    # the upgraded tables equal a rebuild under today's write path (hour, 3-hour and day rows,
    # status and tags: no stream was deleted)
    assert after["same"] is True
    assert after["three_hours"] > 0
    assert "WITHOUT ROWID" in after["ddl"]
    assert '"id"' not in after["ddl"]
    assert after["integrity"] == [["ok"]]


def test_0008_restates_the_rollups_by_status_and_tag_and_keeps_what_retention_deleted():
    with own_database() as db:
        check_0008(db)


def check_0008(db):
    """(Also run by hand on PostgreSQL: there `own_database` is a database on its server.)"""
    db.forward(("streams", "0007_rollup_keys"))
    db.forward(("dashboard", "0002_saved_views"))  # (deletions reach turns)
    before = last_json(_shell(BEFORE_0008))
    assert before["deleted"] > 50
    db.forward()
    after = last_json(_shell(AFTER_0008))
    thinned = {tuple(p) for p in before["thinned"]}
    for name in ("UsageRollup", "HistogramRollup", "RoutingRollup", "FindingRollup"):
        cols, rows = before[name]
        assert rows, name
        nv = 17 if name == "UsageRollup" else 1
        old = {tuple(r[:-nv]): r[-nv:] for r in rows}
        # the "" rows summed over the statuses are what the table held: nothing lost or doubled
        # (and the usage and cost sums 0012 added are 0: no stream had any yet)
        summed = {tuple(k): v for k, v in after[name]["summed"]}
        assert {k: v[:nv] for k, v in summed.items()} == old, name
        assert not any(x for v in summed.values() for x in v[nv:]), name
        span, t = cols.index("span"), cols.index("t")
        periods = {(k[span], k[t]) for k in old}
        if name != "UsageRollup":
            # the periods retention thinned keep their rows, status unknown ("")
            assert {tuple(p) for p in after[name]["unknown"]} == thinned & periods, name
            assert {"completed", "failed", "stalled"} <= set(after[name]["statuses"]), name
        # all other periods are restated, tag rows included: equal to a rebuild
        assert after[name]["kept_equals_rebuild"] is True, name
        assert after[name]["tags"] == ["", "a", "b"], name
        # and the thinned periods get no tag rows: their tagged streams are gone
        tagged = {tuple(p) for p in after[name]["tagged"]}
        assert tagged and not tagged & thinned, name


# 0018 → today: streams of two users (in their personal projects) and of none, aggregated as
# 0018's write path did: today's contributions without the project (summed over it).
BEFORE_0019 = (
    OLD
    + """
from django.contrib.auth import get_user_model
with transaction.atomic():
    # (their personal projects 0018 made: read in SQL, the model has columns added since)
    users = list(get_user_model().objects.filter(username__in=("ann", "ben")))
    with connection.cursor() as cursor:
        cursor.execute("SELECT personal_of_id, id FROM streams_project")
        projects = dict(cursor.fetchall())
    ids = history(500, 19)
    rng = random.Random(19)
    for pk in ids:
        user = rng.choice([*users, None])
        Stream.objects.filter(pk=pk).update(
            user=user, project_id=None if user is None else projects[user.pk])
    # (0019 adds the rows of every project; 0039 the format)
    written = write_summed(ids, ("project_key", "format"), every_project=False)
print(json.dumps({"written": written, "projects": sorted(projects.values())}))
"""
)
AFTER_0019 = """
import json
from django.db import connection, transaction
from streams.models import HistogramRollup, UsageRollup
from streams.store import aggregates
stored = aggregates.stored()
with transaction.atomic():
    aggregates.rebuild()
    rebuilt = aggregates.stored()
    transaction.set_rollback(True)
key = aggregates.key_of(UsageRollup)
p, tag, span = key.index("project_key"), key.index("tag"), key.index("span")
per_project = {}
for k, v in stored[UsageRollup].items():
    if k[tag] == "" and k[span] == aggregates.DAY:
        per_project[k[p]] = per_project.get(k[p], 0) + v[0]
hkey = aggregates.key_of(HistogramRollup)
hp, full = hkey.index("project_key"), hkey.index("full")
summed = {k[hp] for k in stored[HistogramRollup] if not k[full]}
integrity = [["ok"]]
if connection.vendor == "sqlite":
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        integrity = cursor.fetchall()
print(json.dumps({
    "same": stored == rebuilt, "tables": {m.__name__: len(r) for m, r in stored.items()},
    "per_project": sorted(per_project.items()), "summed_projects": sorted(summed),
    "integrity": integrity,
}))
"""


USERS = """
from django.contrib.auth import get_user_model
for name in ("ann", "ben"):
    get_user_model().objects.create_user(name)
"""


def test_0019_puts_each_rollup_row_in_its_users_personal_project():
    """Every row's project is its user's personal project (0 without a user), and the
    histograms' summed rows are split by project and summed over every project: the upgraded
    tables equal a rebuild under today's write path, row for row."""
    with own_database() as db:
        check_0019(db)


def check_0019(db):
    """(Also run by hand on PostgreSQL: there `own_database` is a database on its server.)"""
    db.forward("auth")
    _shell(USERS)
    db.forward(("streams", "0018_projects"))  # (their personal projects)
    before = last_json(_shell(BEFORE_0019))
    assert all(before["written"][m] for m in ("UsageRollup", "HistogramRollup"))
    db.forward()
    after = last_json(_shell(AFTER_0019))
    assert after["same"] is True
    projects = dict(after["per_project"])
    assert sorted(projects) == [-1, 0, *before["projects"]]
    assert sum(projects.values()) == 2 * 500 and all(projects.values())
    # (and once more over every project: EVERY_PROJECT)
    assert after["summed_projects"] == [-1, 0, *before["projects"]]
    assert projects[-1] == 500  # and every stream once more under every project's rows
    assert after["integrity"] == [["ok"]]


# 0038 → today: a history in all three formats, aggregated as 0038's write path did (today's
# contributions summed over the format, which its keys did not have).
BEFORE_0039 = (
    OLD
    + """
with transaction.atomic():
    ids = history(300, 39)
    formats = ("responses", "chat", "messages")
    for i, pk in enumerate(ids):
        Stream.objects.filter(pk=pk).update(format=formats[i % 3])
    written = write_summed(ids, ("format",))
print(json.dumps({"written": written}))
"""
)
AFTER_0039 = """
import json
from django.core.management import call_command
from django.db import connection
from streams.store import aggregates
def as_responses(tables):
    # every row under the format "responses", summed: what 0033's keys held, told as 0039 does
    out = {}
    for model, rows in tables.items():
        f = aggregates.key_of(model).index("format")
        merged = out.setdefault(model.__name__, {})
        for k, v in rows.items():
            acc = merged.setdefault(json.dumps([*k[:f], "responses", *k[f + 1 :]]), [0] * len(v))
            for i, x in enumerate(v):
                acc[i] += x
    return out
# (the project rollup sums over the format: 0039 leaves it as it was)
def keyed(tables):
    return {m: rows for m, rows in tables.items() if "format" in aggregates.key_of(m)}
stored = keyed(aggregates.stored())
call_command("rebuild_aggregates", stdout=open("/dev/null", "w"))
rebuilt = keyed(aggregates.stored())
formats = {m.__name__: sorted({k[aggregates.key_of(m).index("format")] for k in rows})
           for m, rows in stored.items()}
again = {m.__name__: sorted({k[aggregates.key_of(m).index("format")] for k in rows})
         for m, rows in rebuilt.items()}
with connection.cursor() as cursor:
    cursor.execute("PRAGMA integrity_check")
    integrity = cursor.fetchall()
print(json.dumps({
    "kept": as_responses(stored) == as_responses(rebuilt), "formats": formats, "again": again,
    "integrity": integrity,
}))
"""


def test_0039_keys_every_rollup_by_format_and_a_rebuild_restates_the_other_formats():
    """Every row stored before is Responses (nothing lost or doubled: summed over the format a
    rebuild gives the same), and `rebuild_aggregates` restates the Chat and Messages streams
    recorded before it under their own format."""
    with own_database() as db:
        db.forward(("streams", "0038_event_preamble"))
        before = last_json(_shell(BEFORE_0039))
        assert all(before["written"][m] for m in ("UsageRollup", "HistogramRollup"))
        db.forward()
        after = last_json(_shell(AFTER_0039))
    assert after["kept"] is True
    for name in ("UsageRollup", "HistogramRollup", "RoutingRollup", "FindingRollup"):
        assert after["formats"][name] == ["responses"], name
        assert after["again"][name] == ["chat", "messages", "responses"], name
    assert after["integrity"] == [["ok"]]
