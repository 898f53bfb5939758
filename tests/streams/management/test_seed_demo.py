"""seed_demo's shapes (one made stream stamped out for many): every stream stays a stream the
recorder could have written (its own ids, times and owner; its events, fields and findings
agree as the checker says), the pre-aggregates equal a rebuild, and the bulk load into empty
tables (indexes dropped and rebuilt, a writer thread) leaves the schema as it was."""

import collections
import datetime as dt
import json
import statistics

import pytest
from django.db import connection

from streams.core.checks import Checker
from streams.management.commands import seed_demo
from streams.models import Event, Finding, Stream
from streams.store import aggregates

NOW = dt.datetime(2026, 3, 2, 12, 17, 41, 123456, tzinfo=dt.UTC)
UNCLOSED = {"stalled", "cancelled", "interrupted"}  # closed by us, not by the upstream


@pytest.fixture
def small_pools(monkeypatch):
    """Pools far smaller than the history, so shapes are reused (as at 1M streams)."""
    monkeypatch.setattr(seed_demo, "MIN_SHAPES", 60)
    monkeypatch.setattr(seed_demo, "SHAPE_EVERY", 8)


@pytest.mark.django_db
def test_reused_shapes_still_make_streams_the_recorder_could_have_written(small_pools):
    counts = seed_demo.seed(900, days=3, seed=4, events_per_stream=10, users=("alice", "bob"),
                            now=NOW)  # fmt: skip
    streams = list(Stream.objects.order_by("id"))
    assert counts["streams"] == len(streams) == 900
    assert counts["events"] == Event.objects.count()
    assert counts["findings"] == Finding.objects.count()
    # shapes were reused: far fewer distinct outputs than streams
    assert len({(s.output_text, s.ttft_ms) for s in streams}) < 300
    events = collections.defaultdict(list)
    for e in Event.objects.order_by("stream_id", "index"):
        events[e.stream_id].append(e)
    findings = collections.defaultdict(list)
    for f in Finding.objects.order_by("id"):
        findings[f.stream_id].append(f.code)
    upstream_ids, message_ids = set(), set()
    for s in streams:
        assert (
            s.finished_at == s.heartbeat_at == s.created_at + dt.timedelta(microseconds=s.closed_us)
        )
        assert s.started_at == s.created_at
        evs = events[s.pk]
        assert s.event_count == len(evs) and s.findings_count == len(findings[s.pk])
        assert s.bytes_received == sum(len(e.data) for e in evs)
        if not evs:  # an HTTP error: no events, no upstream id
            assert s.http_status in (429, 500) and s.upstream_id == ""
            continue
        assert s.upstream_id.startswith("resp_") and s.upstream_id not in upstream_ids
        upstream_ids.add(s.upstream_id)
        checker = Checker(pinned_model=s.requested_model != "auto")
        got = []
        items = set()
        for e in evs:
            assert e.received_at == s.created_at + dt.timedelta(microseconds=e.t_us)
            obj = json.loads(e.data)
            assert "@@@" not in e.data and "~~~" not in e.data and "9876543210" not in e.data
            if "response" in obj:
                assert obj["response"]["id"] == s.upstream_id
                assert obj["response"]["created_at"] == int(s.created_at.timestamp())
            if obj.get("item_id"):
                items.add(obj["item_id"])
            got.extend(v.code for v in checker.feed(e.index, "message", e.data, t_us=e.t_us)
                       .violations)  # fmt: skip
        got.extend(
            v.code
            for v in checker.close(connection_closed=s.status not in UNCLOSED, t_us=s.closed_us)
        )
        # the checker, reading the stored events, says what the stored row says
        assert got == findings[s.pk]
        assert checker.output_text == s.output_text
        assert checker.items() == s.parts
        assert len(items) == 1 and items.isdisjoint(message_ids)
        message_ids |= items
        if s.parts:
            assert s.parts[0]["id"] in items


@pytest.mark.django_db
def test_the_seed_paths_aggregates_equal_a_rebuild(small_pools):
    seed_demo.seed(1200, days=4, seed=9, events_per_stream=9, users=("alice", "bob", "carol"),
                   now=NOW)  # fmt: skip
    stored = aggregates.stored()
    usage = stored[next(iter(stored))]
    at, project = aggregates.USAGE_KEY.index("tag"), aggregates.USAGE_KEY.index("project_key")
    every = aggregates.EVERY_PROJECT
    for theirs in (True, False):  # (each stream's rows: under its project, and every project's)
        rows = [v for k, v in usage.items() if not k[at] and (k[project] != every) == theirs]
        assert sum(v[0] for v in rows) == 1200 * len(aggregates.SPANS)
    assert any(k[at] for k in usage)  # and the proxied streams' tag rows
    aggregates.rebuild()
    assert aggregates.stored() == stored


@pytest.mark.django_db
def test_streams_spread_over_projects_are_their_members_and_aggregated_by_project(small_pools):
    """`--projects N`: each of N team projects gets about a share of the streams, each stream
    of a member of its project (or of no user), and the rollups are keyed by the project as
    the write path keys them (equal to a rebuild)."""
    from streams.models import Membership, Project

    seed_demo.seed(1500, days=3, seed=4, events_per_stream=9, users=("alice", "bob", "carol"),
                   now=NOW, projects=5)  # fmt: skip
    teams = dict(Project.objects.filter(slug__startswith="demo-").values_list("pk", "slug"))
    assert len(teams) == 5
    per = collections.Counter(Stream.objects.values_list("project_id", flat=True))
    assert set(per) == set(teams) and min(per.values()) > 1500 / 5 / 2
    members = set(Membership.objects.values_list("project_id", "user_id"))
    for project, user in Stream.objects.exclude(user=None).values_list("project_id", "user_id"):
        assert (project, user) in members
    stored = aggregates.stored()
    key = aggregates.USAGE_KEY
    at, tag, span = key.index("project_key"), key.index("tag"), key.index("span")
    day = collections.Counter()
    for k, v in stored[next(iter(stored))].items():
        if not k[tag] and k[span] == aggregates.DAY:
            day[k[at]] += v[0]
    assert day.pop(aggregates.EVERY_PROJECT) == 1500
    assert day == per
    aggregates.rebuild()
    assert aggregates.stored() == stored


@pytest.mark.django_db
def test_the_regression_survives_reused_shapes(small_pools):
    seed_demo.seed(3000, days=6, seed=2, events_per_stream=8, users=("alice",), now=NOW)
    start = NOW - dt.timedelta(days=seed_demo.REGRESSION_DAYS)
    rows = Stream.objects.filter(resolved_model=seed_demo.REGRESSED_MODEL, ttft_ms__isnull=False,
                                 requested_model=seed_demo.REGRESSED_MODEL)  # fmt: skip
    before = [s.ttft_ms for s in rows if s.created_at <= start]
    after = [s.ttft_ms for s in rows if s.created_at > start]
    assert len(before) > 100 and len(after) > 30
    assert statistics.median(after) > 1.3 * statistics.median(before)
    # … and only there
    other = Stream.objects.filter(resolved_model="gpt-oss-20b", ttft_ms__isnull=False)
    early = statistics.median(s.ttft_ms for s in other if s.created_at <= start)
    late = statistics.median(s.ttft_ms for s in other if s.created_at > start)
    assert 0.7 < late / early < 1.3


def _schema():
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
        else:
            cursor.execute(
                "SELECT tablename, indexname, indexdef FROM pg_indexes "
                "WHERE schemaname = current_schema() ORDER BY indexname"
            )
        return cursor.fetchall()


def _pragma(name):
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_the_bulk_load_into_empty_tables_keeps_the_schema(small_pools):
    """Outside a transaction into empty tables: indexes dropped and built again, SQLite's sync
    off for the seeding connection only, a writer thread, rollup rows inserted — and after it
    the same schema, settings and (rebuilt) aggregates."""
    before = _schema()
    settings = connection.vendor == "sqlite" and (_pragma("synchronous"), _pragma("foreign_keys"))
    used = []
    real = seed_demo._Writer.__init__

    def spy(self, shapes, columns, threaded, fresh_rollups):
        used.append((threaded, fresh_rollups))
        real(self, shapes, columns, threaded, fresh_rollups)

    seed_demo._Writer.__init__ = spy
    try:
        counts = seed_demo.seed(700, days=3, seed=6, events_per_stream=8, users=("alice",),
                                now=NOW)  # fmt: skip
    finally:
        seed_demo._Writer.__init__ = real
    assert used == [(True, True)]
    assert _schema() == before
    assert Stream.objects.count() == counts["streams"] == 700
    assert Event.objects.count() == counts["events"]
    if connection.vendor == "sqlite":
        assert (_pragma("synchronous"), _pragma("foreign_keys")) == settings
        assert _pragma("foreign_key_check") == []
        assert _pragma("integrity_check") == [("ok",)]
    stored = aggregates.stored()
    aggregates.rebuild()
    assert aggregates.stored() == stored
    # a second seed adds to a full database: the ordinary path (indexes kept, upserts)
    seed_demo.seed(50, days=1, seed=7, events_per_stream=8, users=("alice",), now=NOW)
    assert Stream.objects.count() == 750 and _schema() == before
    stored = aggregates.stored()
    aggregates.rebuild()
    assert aggregates.stored() == stored


def test_copy_text_is_what_copy_reads():
    """The COPY text the producer makes for PostgreSQL: one %-format when no value needs
    escaping, value by value otherwise; NULLs, booleans and escapes either way."""
    assert seed_demo._copy_text([1, None, "gpt-oss-20b", True, 2.5, False], 3) == (
        "1\t\\N\tgpt-oss-20b\nTrue\t2.5\tFalse\n"
    )
    tricky = [7, "a\tb", None, "c\\N", "line\nbreak\r", False]
    assert seed_demo._copy_text(tricky, 3) == "7\ta\\tb\t\\N\nc\\\\N\tline\\nbreak\\r\tf\n"
