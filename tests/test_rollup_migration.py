"""Migration 0007 on a database that already holds aggregates: the rollup tables keep every
row under their new keys, and the 3-hour rows it adds equal what the write path would have
written (the sums of the hour rows), so an upgraded install reads the same figures."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Run in a child process at migration 0006: a history through the write path of that time
# (hour and day rows only), the stored tables printed as JSON.
BEFORE = """
import datetime as dt, json, random
from streams import aggregates
from streams.models import Stream
from django.db import transaction
aggregates.SPANS = (aggregates.HOUR, aggregates.DAY)  # what 0006's write path kept
rng = random.Random(5)
now = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
rows = []
for i in range(400):
    created = now - dt.timedelta(seconds=rng.randint(0, 4 * 86400))
    rows.append(Stream(
        created_at=created, status=rng.choice(["completed", "failed", "stalled"]),
        requested_model=rng.choice(["auto", "gpt-oss-20b"]), resolved_model=rng.choice(["a", "b"]),
        source=rng.choice(["live", "proxy"]), ttft_ms=rng.uniform(20, 900),
        request_written_us=100, routing_us=rng.choice([None, 5000]),
        output_tokens=rng.randint(1, 50),
        request_body={},
    ))
field = Stream._meta.get_field("created_at")
field.auto_now_add = False
with transaction.atomic():
    made = Stream.objects.bulk_create(rows)
    aggregates.add_streams([s.pk for s in made])
print(json.dumps({m.__name__: [[list(k), v] for k, v in t.items()]
                  for m, t in aggregates.stored().items()}))
"""
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
print(json.dumps({"ddl": ddl, "same": stored == rebuilt,
                  "stored": {m.__name__: len(t) for m, t in stored.items()},
                  "three_hours": sum(1 for t in stored.values() for k in t if 10800 in k)}))
"""


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
    before = json.loads(_manage(env, "shell", "-c", BEFORE).strip().splitlines()[-1])
    assert before["HistogramRollup"] and before["UsageRollup"]
    assert not any(10800 in k for rows in before.values() for k, _ in rows)
    _manage(env, "migrate", "-v", "0")
    after = json.loads(_manage(env, "shell", "-c", AFTER).strip().splitlines()[-1])
    # the upgraded tables equal a rebuild under today's write path (hour, 3-hour, day rows)
    assert after["same"] is True
    assert after["three_hours"] > 0
    assert "WITHOUT ROWID" in after["ddl"]
    assert '"id"' not in after["ddl"]
