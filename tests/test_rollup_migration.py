"""The rollup migrations on a database that already holds aggregates.

0007: the rollup tables keep every row under their new keys, and the 3-hour rows it adds equal
what the write path would have written (the sums of the hour rows). 0008: the histogram,
routing and finding rows are restated by status from the raw rows where those are complete,
and keep the history retention deleted (status unknown) where not. An upgraded install reads
the same figures."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Child processes run at an older migration; they write a history's aggregates as that time's
# write path did (today's contributions, without the keys and periods it did not have yet).
OLD = """
import datetime as dt, json, random
from django.db import connection, transaction
from streams import aggregates
from streams.models import Stream, UsageRollup

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
            routing_category=rng.choice(["code", "chat"]), findings_count=0,
            request_body={},
        ))
    Stream._meta.get_field("created_at").auto_now_add = False
    made = Stream.objects.bulk_create(rows)
    from streams.models import Finding
    Finding.objects.bulk_create(
        [Finding(stream=s, code=rng.choice(["stall", "sequence_gap"]), severity="warning")
         for s in made if rng.random() < 0.3]
    )
    return [s.pk for s in made]

def write_old(ids, spans, status_keys):
    aggregates.SPANS = spans
    qn = connection.ops.quote_name
    for model, rows in aggregates.snapshot(ids).tables.items():
        key, values = aggregates._tables()[model]
        drop = None if status_keys or model is UsageRollup else key.index("status")
        merged = {}
        for k, v in rows.items():
            if drop is not None:
                k = k[:drop] + k[drop + 1:]
            acc = merged.setdefault(k, [0] * len(v))
            for i, x in enumerate(v):
                acc[i] += x
        cols = [c for i, c in enumerate(key) if i != drop] + list(values)
        with connection.cursor() as cursor:
            for k, v in merged.items():
                cursor.execute(
                    f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(map(qn, cols))}) "
                    f"VALUES ({', '.join(['%s'] * len(cols))})", [*k, *v])

def old_rows(model, status_kept):
    key, values = aggregates._tables()[model]
    cols = [c for c in key if c != "status" or status_kept] + list(values)
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(map(qn, cols))} FROM {qn(model._meta.db_table)}")
        return cols, cursor.fetchall()
"""
# 0006 → today: hour and day rows only, and 0006's keys.
BEFORE_0007 = (
    OLD
    + """
with transaction.atomic():
    write_old(history(400, 5), (aggregates.HOUR, aggregates.DAY), status_keys=False)
print(json.dumps({m.__name__: len(old_rows(m, m is UsageRollup)[1])
                  for m in aggregates._tables()}))
"""
)
# After the migration: the stored tables, and what a rebuild from the raw rows gives.
AFTER = """
import json
from django.db import connection, transaction
from streams import aggregates
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
                  "stored": {m.__name__: len(t) for m, t in stored.items()},
                  "three_hours": sum(1 for t in stored.values() for k in t if 10800 in k)}))
"""
# 0007 → today: a history with findings, then retention deletes the streams before a cutoff
# in the middle of an hour, keeping their aggregates (the periods they were in are thinned).
BEFORE_0008 = (
    OLD
    + """
from streams.models import HistogramRollup, RoutingRollup, FindingRollup
with transaction.atomic():
    ids = history(600, 8)
    write_old(ids, aggregates.SPANS, status_keys=False)
    cutoff = dt.datetime(2026, 11, 17, 9, 30, tzinfo=dt.UTC)
    gone = Stream.objects.filter(created_at__lt=cutoff)
    thinned = sorted({(span, int(s.created_at.timestamp()) // span * span)
                      for s in gone for span in aggregates.SPANS})
    with aggregates.keeping():
        deleted = gone.delete()[1].get("streams.Stream", 0)
out = {"deleted": deleted, "thinned": thinned}
for m in (HistogramRollup, RoutingRollup, FindingRollup):
    cols, rows = old_rows(m, False)
    out[m.__name__] = [cols, [list(r) for r in rows]]
print(json.dumps(out))
"""
)
AFTER_0008 = (
    OLD
    + """
from streams.models import HistogramRollup, RoutingRollup, FindingRollup
out = {}
stored = aggregates.stored()
with transaction.atomic():
    aggregates.rebuild()
    rebuilt = aggregates.stored()
    transaction.set_rollback(True)
for m in (HistogramRollup, RoutingRollup, FindingRollup):
    key, values = aggregates._tables()[m]
    s, t, st = key.index("span"), key.index("t"), key.index("status")
    summed = {}
    for k, v in stored[m].items():
        old = k[:st] + k[st + 1:]
        summed[old] = summed.get(old, 0) + v[0]
    unknown = sorted({(k[s], k[t]) for k in stored[m] if k[st] == ""})
    kept = {k: v for k, v in stored[m].items() if (k[s], k[t]) not in set(unknown)}
    again = {k: v for k, v in rebuilt[m].items() if (k[s], k[t]) not in set(unknown)}
    out[m.__name__] = {"summed": [[list(k), n] for k, n in summed.items()],
                       "unknown": unknown, "kept_equals_rebuild": kept == again,
                       "statuses": sorted({k[st] for k in stored[m]})}
print(json.dumps(out))
"""
)


def _manage(env, *args):
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="a throw-away SQLite file; tier 2 migrates PostgreSQL from scratch for every run",
)
def test_0007_keeps_the_aggregates_and_adds_three_hour_rows(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'old.db'}"}
    env.pop("REDIS_URL", None)
    _manage(env, "migrate", "-v", "0", "streams", "0006")
    before = json.loads(_manage(env, "shell", "-c", BEFORE_0007).strip().splitlines()[-1])
    assert before["HistogramRollup"] and before["UsageRollup"] and before["FindingRollup"]
    _manage(env, "migrate", "-v", "0")
    after = json.loads(_manage(env, "shell", "-c", AFTER).strip().splitlines()[-1])
    # the upgraded tables equal a rebuild under today's write path (hour, 3-hour, day rows)
    assert after["same"] is True
    assert after["three_hours"] > 0
    assert "WITHOUT ROWID" in after["ddl"]
    assert '"id"' not in after["ddl"]
    assert after["integrity"] == [["ok"]]


SQLITE_ONLY = pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="a throw-away SQLite file; tier 2 migrates PostgreSQL from scratch for every run",
)


@SQLITE_ONLY
def test_0008_restates_the_rollups_by_status_and_keeps_what_retention_deleted(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'old.db'}"}
    env.pop("REDIS_URL", None)
    _manage(env, "migrate", "-v", "0", "streams", "0007")
    _manage(env, "migrate", "-v", "0", "dashboard")  # (a stream's deletion reaches its turns)
    before = json.loads(_manage(env, "shell", "-c", BEFORE_0008).strip().splitlines()[-1])
    assert before["deleted"] > 50
    _manage(env, "migrate", "-v", "0")
    after = json.loads(_manage(env, "shell", "-c", AFTER_0008).strip().splitlines()[-1])
    thinned = {tuple(p) for p in before["thinned"]}
    for name in ("HistogramRollup", "RoutingRollup", "FindingRollup"):
        cols, rows = before[name]
        assert rows, name
        old = {tuple(r[:-1]): r[-1] for r in rows}
        # summed over the statuses, every row is what it was: nothing lost, nothing doubled
        assert {tuple(k): n for k, n in after[name]["summed"]} == old, name
        # the periods retention thinned keep their rows, status unknown; all others are
        # restated with the status, equal to a rebuild from the raw rows
        unknown = {tuple(p) for p in after[name]["unknown"]}
        span, t = cols.index("span"), cols.index("t")
        assert unknown == thinned & {(k[span], k[t]) for k in old}, name
        assert after[name]["kept_equals_rebuild"] is True, name
        assert {"", "completed", "failed", "stalled"} <= set(after[name]["statuses"]) | {""}
    assert {"completed", "failed", "stalled"} <= set(after["HistogramRollup"]["statuses"])
