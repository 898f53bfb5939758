"""streams.store.aggregates and streams.stats.cube: the pre-aggregates kept by the write path
equal a rebuild from the raw rows on seeded random histories, the percentiles they give are within
the stated bound, and every figure the pages are built from (streams.stats.source) reads the
same from them (`rollup.RollupSource`) as from the raw rows (`exact.ExactSource`); the reports,
written once against a source, then give the same page from either."""

import datetime as dt
import decimal
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import F, Q

from dashboard.stats.admin import PROBLEM_STATUSES, admin_report
from dashboard.stats.latency import latency_report, slowest
from dashboard.stats.routing import routing_report
from streams.core.figures import nearest_rank
from streams.models import Finding, Project, Stream, UsageRollup, rollup_dimensions, rollup_key
from streams.stats import cube
from streams.stats.exact import ExactSource
from streams.stats.rollup import RollupSource
from streams.stats.sql import PCT_NAMES, PERCENTILES, Scope
from streams.store import aggregates
from streams.store import rows as stored

NOW = dt.datetime(2026, 3, 2, 12, 17, 41, tzinfo=dt.UTC)
STATUSES = ["completed", "completed", "completed", "failed", "stalled", "truncated",
            "incomplete", "cancelled"]  # fmt: skip
MODELS = ["m-a", "m-b", "m-c", ""]


class _Rec:
    """What `write_batch` needs of a recording: its stream id (hashable, as a dict key)."""

    def __init__(self, stream_id):
        self.stream_id = stream_id


def _finished_fields(rng, requested):
    ttft = None if rng.random() < 0.1 else rng.lognormvariate(6, 0.8)
    written = rng.randint(500, 3000)
    fields = {
        "status": rng.choice(STATUSES),
        "resolved_model": rng.choice(MODELS) if requested == "auto" else requested,
        "ttft_ms": ttft,
        "inter_token_ms": None if ttft is None else rng.uniform(5, 50),
        "request_written_us": written,
        "headers_us": written + rng.randint(1000, 9000),
        "created_event_us": written + rng.randint(9000, 12000),
        "first_token_us": None if ttft is None else written + int(ttft * 1000),
        "output_deltas": rng.randint(0, 300),
        "bytes_received": rng.randint(100, 90000),
        "event_count": rng.randint(1, 40),
        "error_code": rng.choice(["", "", "server_error", "rate_limit_exceeded"]),
    }
    if requested == "auto" and rng.random() < 0.9:
        fields.update(
            routing_us=written + rng.randint(5000, 90000),
            routing_category=rng.choice(["chat", "code", "tools"]),
            routing_source=rng.choice(["rules", "classifier"]),
        )
    return fields


def _random_history(rng, users, n=120):
    """Streams created pending, started, finished through the recorder's write_batch (some
    more than once: a late final write), ended by the runner, imported, and deleted."""
    from streams.management.commands.seed_demo import _settable_created_at

    with _settable_created_at():
        rows = Stream.objects.bulk_create(
            Stream(
                user=rng.choice(users),
                source=rng.choice(["live", "proxy", "import"]),
                format=rng.choice(["responses", "chat", "messages"]),
                requested_model=rng.choice(["auto", "auto", "m-a", "m-b"]),
                created_at=NOW - dt.timedelta(seconds=rng.randint(0, 5 * 86400)),
                status="pending",
            )
            for _ in range(n)
        )
    recs = {row.pk: _Rec(row.pk) for row in rows}
    for row in rows:
        stored.write_batch([], {recs[row.pk]: {"status": "streaming"}}, [], retry_for_s=0)
    pending = [r for r in rows]
    rng.shuffle(pending)
    while pending:
        batch = [pending.pop() for _ in range(min(len(pending), rng.randint(1, 7)))]
        updates, findings = {}, []
        for row in batch:
            updates[recs[row.pk]] = _finished_fields(rng, row.requested_model)
            for _ in range(rng.randint(0, 3)):
                findings.append(
                    Finding(
                        stream_id=row.pk,
                        code=rng.choice(["stall", "sequence_gap"]),
                        severity=rng.choice(["error", "warning"]),
                    )  # fmt: skip
                )
        stored.write_batch([], updates, findings, retry_for_s=0)
    # a finished row that changes again (as the late final write after a storage outage and
    # the runner's ending of abandoned rows do, inside `tracking`)
    for row in rng.sample(rows, 10):
        with transaction.atomic(), aggregates.tracking([row.pk]):
            Stream.objects.filter(pk=row.pk).update(status="failed", ttft_ms=rng.random() * 900,
                                                   error_code="storage_unavailable")  # fmt: skip
    # deletions through the ORM (admin, the stream page)
    for row in rng.sample(rows, 8):
        Stream.objects.filter(pk=row.pk).delete()


@pytest.fixture
def people(_without_history, db):
    User = get_user_model()
    return [User.objects.create_user("ann"), User.objects.create_user("ben"), None]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rebuild_equals_incremental_on_random_histories(people, seed):
    _random_history(random.Random(seed), people)
    incremental = aggregates.stored()
    # (a stream's rows: per period under its project, and again under every project's)
    assert (
        sum(v[0] for k, v in incremental[UsageRollup].items() if not k[1])
        == 2 * len(aggregates.SPANS) * Stream.objects.count()
    )
    aggregates.rebuild()
    assert aggregates.stored() == incremental


def test_the_rollups_agree_with_the_raw_rows_per_project(people, monkeypatch):
    """Streams of two users, some moved into a team project after they finished (inside
    `tracking`, as any change to a finished row is): each project's figures from the rollups
    equal its raw rows', a filter on one member narrows within the project, and the tables
    equal a rebuild."""
    from streams.models import Membership

    _random_history(random.Random(7), people)
    team = Project.objects.create(name="Team", slug="team")
    ann, ben = people[0], people[1]
    for user in (ann, ben):
        Membership.objects.create(project=team, user=user, role="member")
    moved = list(Stream.objects.order_by("pk").values_list("pk", flat=True))[::2]
    with transaction.atomic(), aggregates.tracking(moved):
        Stream.objects.filter(pk__in=moved).update(project=team)
    aggregates_now = aggregates.stored()
    aggregates.rebuild()
    assert aggregates.stored() == aggregates_now
    assert Stream.objects.filter(project=team, user=ann).exists()
    for project in (team, Project.personal(ann), Project.personal(ben)):
        for username in ("", "ann"):
            scope = Scope(project_id=project.pk, end=NOW, username=username)
            exact, fast = _both(latency_report, scope, monkeypatch)
            raw = Stream.objects.filter(project=project)
            if username:
                raw = raw.filter(user__username=username)
            counts = [r.overall["count"] if r.overall else 0 for r in (exact, fast)]
            assert counts == [raw.count()] * 2, (project, username)
            if not counts[0]:
                continue
            _same_row(exact.overall, fast.overall)
            for a, b in zip(exact.by_resolved, fast.by_resolved, strict=True):
                _same_row(a, b)


def test_a_running_stream_is_not_aggregated_until_it_ends(people):
    row = Stream.objects.create(status="pending", requested_model="m-a")
    stored.write_batch([], {_Rec(row.pk): {"status": "streaming"}}, [], retry_for_s=0)
    assert not UsageRollup.objects.exists()
    stored.write_batch([], {_Rec(row.pk): {"status": "completed"}}, [], retry_for_s=0)
    mine = UsageRollup.objects.exclude(project_key=aggregates.EVERY_PROJECT)
    assert sorted(mine.values_list("span", "n")) == [
        (3600, 1),
        (10800, 1),
        (86400, 1),
    ]
    Stream.objects.get(pk=row.pk).delete()
    assert set(UsageRollup.objects.values_list("n", flat=True)) == {0}


def test_percentiles_from_buckets_are_within_the_bound():
    rng = random.Random(7)
    for _ in range(30):
        values = [rng.lognormvariate(rng.uniform(0, 9), rng.uniform(0.1, 2)) for _ in range(500)]
        hist = {}
        for v in values:
            hist[aggregates.bucket(v)] = hist.get(aggregates.bucket(v), 0) + 1
        for q in (500, 750, 900, 950, 990):
            exact = nearest_rank(values, q)
            got = aggregates.percentile(hist, q)
            assert abs(got - exact) <= aggregates.ERROR_BOUND * exact
    assert aggregates.ERROR_BOUND < 0.01


def test_the_top_band_holds_the_k_largest_values_and_little_else():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 300)
        values = [rng.lognormvariate(rng.uniform(0, 8), rng.uniform(0.05, 2)) for _ in range(n)]
        # values on bucket edges, where float rounding would bite
        values += [aggregates.GAMMA ** rng.randint(1, 400) for _ in range(rng.randint(0, 5))]
        hist = {}
        for v in values:
            hist[aggregates.bucket(v)] = hist.get(aggregates.bucket(v), 0) + 1
        k = rng.choice([1, 1, 10, 50])
        lo, hi = aggregates.top_band(hist, k)
        top = sorted(values, reverse=True)[:k]
        assert all(lo < v <= hi for v in top)
        # narrow: from the k-th largest's bucket to the largest's
        assert hi <= max(values) * aggregates.GAMMA * 1.0001
        assert lo >= top[-1] / aggregates.GAMMA / 1.0001
    assert aggregates.top_band({}, 1) is None
    assert aggregates.top_band({aggregates.ZERO: 4}, 1) is None


@pytest.mark.parametrize("seed", [4, 5])
def test_the_project_rollup_is_the_usage_rollup_summed(people, seed):
    """Its rows are the usage rollup's summed over the dimensions it leaves out, as written by
    the write path, by a rebuild, and by its migration from the usage rollup."""
    import importlib

    from django.apps import apps

    from streams.models import ProjectRollup

    _random_history(random.Random(seed), people)

    def summed():
        out = {}
        at = [aggregates.USAGE_KEY.index(c) for c in aggregates.PROJECT_KEY]
        values = [aggregates.USAGE_VALUES.index(v) for v in aggregates.PROJECT_VALUES]
        for key, v in aggregates.stored()[UsageRollup].items():
            cube.add_to(out, tuple(key[i] for i in at), [v[i] for i in values])
        return {k: v for k, v in out.items() if any(v)}

    incremental = aggregates.stored()[ProjectRollup]
    assert incremental and incremental == summed()
    assert {k[2] for k in incremental} >= {aggregates.EVERY_PROJECT}
    ProjectRollup.objects.all().delete()
    migration = importlib.import_module("streams.migrations.0035_project_rollup")
    # (what the migration's RunPython uses of its schema editor: SQLite's refuses to open
    # inside the case's transaction)
    with connection.cursor() as cursor:
        migration.fill(apps, SimpleNamespace(connection=connection, execute=cursor.execute))
    assert aggregates.stored()[ProjectRollup] == incremental
    aggregates.rebuild()
    assert aggregates.stored()[ProjectRollup] == incremental


# ---------------------------------------------------------------------------------------------
# The pages from aggregates against the raw (exact) path, on a seed_demo history


class _SharedHistory:
    """The history, seeded once for the cases that read it (seeding is nearly all of such a
    case's time) in a transaction left open across them and rolled back at the module's end.
    Each case's own transaction (`db`) is a savepoint inside it, rolled back after the case:
    whatever a case writes is gone before the next one, which sees the history as seeded. The
    cases that need an empty database (`people`) come first in the file; should one run after
    the history is seeded (`--failed-first`, another order), it is rolled back for that case
    and seeded again for the next case that reads it."""

    def __init__(self, blocker):
        self.blocker = blocker
        self.outer = None  # the open transaction holding the history

    def seeded(self):
        from streams.management.commands.seed_demo import seed

        if self.outer is not None:
            return
        with self.blocker.unblock():
            assert not connection.in_atomic_block, "seeded inside a case's own transaction"
            self.outer = transaction.atomic()
            self.outer.__enter__()
            try:
                seed(1500, days=4, seed=11, events_per_stream=8, users=("alice", "bob"), now=NOW)
                assert _with_reported_usage_in_both_currencies()
                _in_other_formats()
            except BaseException:
                self.gone()
                raise

    def gone(self):
        if self.outer is None:
            return
        outer, self.outer = self.outer, None
        with self.blocker.unblock():
            assert connection.atomic_blocks[-1] is outer, "a case's own transaction is open"
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def _in_other_formats():
    """Every third stream of the demo history (all Responses) told as Chat Completions, every
    seventh as Messages, moved in the rollups as a finished row that changes is (`tracking`):
    the format filter then selects a part of every figure."""
    ids = list(Stream.objects.order_by("pk").values_list("pk", flat=True))
    for fmt, step in (("chat", 3), ("messages", 7)):
        chosen = ids[::step]
        with aggregates.tracking(chosen):
            Stream.objects.filter(pk__in=chosen).update(format=fmt)


@pytest.fixture(scope="module")
def _shared_history(django_db_setup, django_db_blocker):
    shared = _SharedHistory(django_db_blocker)
    yield shared
    shared.gone()


# (before `db`, which opens the case's own transaction: these fixtures are asked for first)
@pytest.fixture
def _with_history(_shared_history):
    _shared_history.seeded()


@pytest.fixture
def _without_history(_shared_history):
    _shared_history.gone()


@pytest.fixture
def history(_with_history, db):
    return get_user_model().objects.get(username="alice")


def _both(build, scope, monkeypatch):
    monkeypatch.setattr(cube, "EXACT_BELOW", 10**9)
    exact = build(scope, now=NOW)
    monkeypatch.setattr(cube, "EXACT_BELOW", 0)
    fast = build(scope, now=NOW)
    assert (exact.method, fast.method) == (cube.EXACT, cube.AGGREGATED)
    return exact, fast


def _close(a, b, bound=aggregates.ERROR_BOUND):
    if a is None or b is None:
        return a is b
    a, b = float(a), float(b)  # (the exact path's figures are Decimals on PostgreSQL)
    return abs(a - b) <= bound * abs(a) + 1e-9


PERCENTILE_KEYS = {PCT_NAMES[q] for q in PERCENTILES} | {
    "ttft_p50", "ttft_p95", "decision_p50", "decision_p95"
}  # fmt: skip


def _same_row(exact, fast):
    for key, value in exact.items():
        if key in PERCENTILE_KEYS:
            assert _close(value, fast[key]), key
        elif isinstance(value, float | decimal.Decimal):  # (Decimals on PostgreSQL)
            # sums in whole ns: a mean is within half a ns of the exact one, so a mean
            # inter-token time of ~30 µs and the rate from it within 2e-5
            assert float(fast[key]) == pytest.approx(float(value), rel=5e-5, abs=1e-6), key
        elif key != "phases":
            assert fast[key] == value, key


RANGES = [dt.timedelta(hours=1), dt.timedelta(hours=24), dt.timedelta(days=3), None]


FILTERS = [
    {},
    {"resolved_model": "gpt-oss-20b"},
    {"source": "proxy"},
    {"username": "alice"},
    {"requested_model": "auto"},
    {"format": "chat"},
]
# The status is in every rollup's key, and every tagged stream's rows are there once more per
# tag: these on two ranges (a day of hour rows and raw edges; all time's day rows).
KEYED = [
    {"status": "failed"},
    {"status": "completed", "source": "proxy"},
    {"status": "stalled", "username": "alice"},
    {"tag": "checkout"},
    {"tag": "canary", "status": "completed"},
    {"tag": "eval", "username": "bob", "resolved_model": "gpt-oss-120b"},
    {"tag": "no-stream-has-this"},
    {"format": "messages", "source": "proxy"},
    {"format": "responses", "tag": "checkout", "status": "completed"},
]
KEYED_RANGES = [dt.timedelta(hours=24), None]


def _cases(filters, ranges, keyed, keyed_ranges):
    return [(f, r) for f in filters for r in ranges] + [(f, r) for f in keyed for r in keyed_ranges]


def _sources(scope):
    return ExactSource(scope, NOW), RollupSource(scope, NOW)


def _same_aggregates(exact, rollup):
    """Counts and maxima equal; sums (ms) in whole ns: within half a ns per value."""
    assert set(exact) == set(rollup)
    for pair, a in exact.items():
        for key, value in a.items():
            if key in ("ttft_sum", "itl_sum") and value is not None:
                n = a[key.replace("_sum", "_n")]
                assert float(rollup[pair][key]) == pytest.approx(float(value), abs=n * 5e-7), key
            else:
                assert rollup[pair][key] == value, (pair, key)


def _same_percentiles(exact, rollup):
    assert exact.keys() == rollup.keys()
    for g, values in exact.items():
        for q, v in values.items():
            assert _close(v, rollup[g][q]), (g, q, v, rollup[g][q])


def _groups(pairs):
    """Every way a page groups pairs: each pair, each resolved and requested model, auto and
    pinned, everything."""
    groups = {("pair", p): [p] for p in pairs}
    for i, kind in enumerate(("resolved", "requested")):
        for m in {p[i] for p in pairs}:
            groups[(kind, m)] = [p for p in pairs if p[i] == m]
    groups[("side", "pinned")] = [p for p in pairs if p[1] not in ("auto", "")]
    groups[("all",)] = None
    return groups


@pytest.mark.parametrize("filters, span", _cases(FILTERS, RANGES, KEYED, KEYED_RANGES))
def test_the_rollup_source_gives_the_exact_sources_figures(history, span, filters):
    """What every report is built from, read both ways: equal, percentiles within the bound."""
    scope = Scope(project_id=None, start=NOW - span if span else None, end=NOW, **filters)
    exact, rollup = _sources(scope)
    _same_aggregates(exact.aggregates(), rollup.aggregates())
    pairs = list(exact.aggregates())
    if span is None and filters.get("tag") != "no-stream-has-this":
        assert pairs, "a case that reads nothing compares nothing"
    _same_percentiles(exact.percentiles(_groups(pairs)), rollup.percentiles(_groups(pairs)))
    auto = {("pair", p): [p] for p in pairs if p[1] == "auto"}
    _same_percentiles(
        exact.percentiles(auto, (500, 950), aggregates.DECISION),
        rollup.percentiles(auto, (500, 950), aggregates.DECISION),
    )
    assert exact.phases() == rollup.phases()
    models = sorted({r for r, _ in pairs})
    edges = [0, 250, 500, 1000, 2000]
    a, b = exact.histogram(models, edges), rollup.histogram(models, edges)
    # every stream with a TTFT counted; a bin may differ by the streams within the bound of
    # an edge
    assert {m: sum(c) for m, c in a.items()} == {m: sum(c) for m, c in b.items()}
    for qs, requested in (((500, 950), ""), ((), "auto")):
        a, b = exact.series(models, qs, requested), rollup.series(models, qs, requested)
        assert (a is None) == (b is None)
        if a is not None:
            assert (a["step"], a["t"]) == (b["step"], b["t"])
            for sa, sb in zip(a["series"], b["series"], strict=True):
                assert sa["n"] == sb["n"]
                for q in qs:
                    name = PCT_NAMES[q]
                    assert all(map(_close, sa[name], sb[name])), name
    assert exact.top_band(20) is None
    band = rollup.top_band(20)
    if band is not None:
        top = Stream.objects.filter(pk__in=[r["id"] for r in slowest(scope)])
        assert all(band[0] < x.ttft_ms <= band[1] for x in top)
    assert exact.routing() == rollup.routing()
    for by, code in (((), "routing_on_pinned_model"), ((), None), (("code", "severity"), None),
                     (("code", "severity", "resolved_model"), None)):  # fmt: skip
        a, b = exact.findings(by, code), rollup.findings(by, code)
        assert {k: n for k, n in a.items() if n} == {k: n for k, n in b.items() if n}, by
    assert exact.days() == rollup.days()
    assert exact.users() == rollup.users()
    users = list(exact.users())
    assert exact.last_streams(users) == rollup.last_streams(users)
    assert exact.errors(PROBLEM_STATUSES) == rollup.errors(PROBLEM_STATUSES)
    _same_usage(scope, span, filters)


def _with_reported_usage_in_both_currencies():
    """seed_demo's usage is all estimated, its prices all in EUR (the built-in simulator's
    example prices): a tenth of the finished streams get reported usage (cached and reasoning
    tokens) and a cost in USD, another tenth reported usage without reasoning, through the
    write path's tracking (once, as the history is seeded)."""
    finished = Stream.objects.exclude(status__in=Stream.ACTIVE_STATUSES)
    ids = list(finished.order_by("pk").values_list("pk", flat=True))
    dollars, reported = ids[::10], ids[5::10]
    with transaction.atomic(), aggregates.tracking(dollars + reported):
        Stream.objects.filter(pk__in=dollars, input_tokens__isnull=False).update(
            usage_source="reported", cached_input_tokens=F("input_tokens") / 3,
            reasoning_tokens=F("output_tokens") / 4, cost_nanos=F("input_tokens") * 1000 + 7,
            cost_currency="USD",
        )  # fmt: skip
        Stream.objects.filter(pk__in=reported, input_tokens__isnull=False).update(
            usage_source="reported", cached_input_tokens=0, reasoning_tokens=None
        )
    return len(dollars)


def _same_usage(scope, span, filters):
    """The usage page's figures, read both ways: equal (counts and sums), in the scope's days
    and buckets and in a zone with a half-hour offset (its days' edges are raw half hours)."""
    for s in (scope, replace(scope, tz="Asia/Kolkata")):
        exact, rollup = _sources(s)
        for by in (("resolved_model", "user"), ("requested_model", "status", "source"), ()):
            assert exact.usage(by) == rollup.usage(by), by
        assert exact.usage_tags() == rollup.usage_tags()
        assert exact.usage_days() == rollup.usage_days()
        assert exact.usage_series() == rollup.usage_series()
    total = exact.usage(()).get((), {})
    if span is None and not filters:  # every kind of figure is there to compare
        assert all(total.values()), total
        assert exact.usage_tags()


# The reports, written once against a source, built from each: the same page within the bound.


@pytest.mark.parametrize("filters, span", [({}, dt.timedelta(hours=24)), ({}, None),
                                           ({"tag": "checkout"}, None)])  # fmt: skip
def test_the_latency_page_from_either_source(history, monkeypatch, span, filters):
    scope = Scope(project_id=None, start=NOW - span if span else None, end=NOW, **filters)
    exact, fast = _both(latency_report, scope, monkeypatch)
    assert not exact.empty and not fast.empty
    _same_row(exact.overall, fast.overall)
    for rows in ("by_resolved", "by_requested"):
        assert [r["model"] for r in getattr(exact, rows)] == [
            r["model"] for r in getattr(fast, rows)
        ]
        for a, b in zip(getattr(exact, rows), getattr(fast, rows), strict=True):
            _same_row(a, b)
    for a, b in zip(exact.by_resolved, fast.by_resolved, strict=True):
        assert [p["key"] for p in a["phases"] or []] == [p["key"] for p in b["phases"] or []]
        for pa, pb in zip(a["phases"] or [], b["phases"] or [], strict=True):
            # (the exact sums are Decimals on PostgreSQL)
            assert float(pb["ms"]) == pytest.approx(float(pa["ms"]), rel=1e-12)
    assert [s["n"] for s in exact.series["series"]] == [s["n"] for s in fast.series["series"]]
    assert exact.slowest == fast.slowest
    assert exact.histogram["edges"] == fast.histogram["edges"]
    assert len(exact.histogram_rows) == len(fast.histogram_rows)
    assert [(r["model"], r["t"], r["n"]) for r in exact.series_rows] == [
        (r["model"], r["t"], r["n"]) for r in fast.series_rows
    ]


def test_a_comparison_with_the_range_before_from_aggregates(history, monkeypatch):
    scope = Scope(project_id=None, start=NOW - dt.timedelta(days=1), end=NOW)
    before = Scope(project_id=None, start=NOW - dt.timedelta(days=2), end=scope.start)
    both = ("Range before", before, "This range", scope)

    def build(s, now):
        return latency_report(s, now=now, compare_with=both)

    exact, fast = _both(build, scope, monkeypatch)
    # "this range" is the report's own overall row, not computed a second time
    assert fast.comparison.b == fast.overall
    for side in ("a", "b"):
        _same_row(getattr(exact.comparison, side), getattr(fast.comparison, side))
    assert (
        fast.comparison.a["count"]
        == Stream.objects.filter(created_at__gte=before.start, created_at__lt=before.end).count()
    )


def test_a_user_sees_only_their_own_aggregates(history, monkeypatch):
    scope = Scope(
        project_id=Project.personal(history).pk, start=NOW - dt.timedelta(days=3), end=NOW
    )
    exact, fast = _both(latency_report, scope, monkeypatch)
    assert (
        fast.overall["count"]
        == exact.overall["count"]
        == Stream.objects.filter(user=history, created_at__gte=NOW - dt.timedelta(days=3)).count()
    )


@pytest.mark.parametrize("filters, span", [({}, dt.timedelta(hours=24)), ({}, None),
                                           ({"tag": "support-bot"}, None)])  # fmt: skip
def test_the_routing_page_from_either_source(history, monkeypatch, span, filters):
    scope = Scope(project_id=None, start=NOW - span if span else None, end=NOW, **filters)
    exact, fast = _both(routing_report, scope, monkeypatch)
    assert (exact.total, exact.models_chosen) == (fast.total, fast.models_chosen)
    assert fast.models_chosen == len([s for s in fast.shares if s["model"]])
    for a, b in zip(exact.shares, fast.shares, strict=True):
        _same_row(a, b)
    assert exact.matrix == fast.matrix
    assert exact.sources == fast.sources
    assert exact.series == fast.series
    assert exact.pinned_routed_findings == fast.pinned_routed_findings
    for a, b in zip(exact.auto_vs_pinned, fast.auto_vs_pinned, strict=True):
        _same_row(a, b)


@pytest.mark.parametrize("filters, span", [({}, dt.timedelta(hours=24)), ({}, None),
                                           ({"status": "failed"}, None)])  # fmt: skip
def test_the_admin_page_from_either_source(history, monkeypatch, span, filters):
    scope = Scope(project_id=None, start=NOW - span if span else None, end=NOW, **filters)
    exact, fast = _both(admin_report, scope, monkeypatch)
    assert exact.days == fast.days
    assert exact.totals == fast.totals
    assert exact.users == fast.users
    assert exact.errors == fast.errors
    assert exact.findings == fast.findings
    assert exact.largest == fast.largest and exact.slowest == fast.slowest
    lo = scope.start or NOW - 10 * dt.timedelta(days=1)
    columns = {k: v for k, v in filters.items() if k != "tag"}
    streams = [x for x in Stream.objects.filter(created_at__gte=lo, **columns)
               if "tag" not in filters or filters["tag"] in x.tags]  # fmt: skip
    # "(no user)" is not a user
    assert exact.totals["users"] == len({x.user_id for x in streams if x.user_id is not None})
    # the filter is applied: the streams it selects in the range, no others
    assert fast.totals["streams"] == len(streams)


def _statements(build, table):
    """The statements `build()` sends that read `table` (a model)."""
    from django.test.utils import CaptureQueriesContext

    name = f'"{table._meta.db_table}"'
    with CaptureQueriesContext(connection) as queries:
        build()
    return [q["sql"] for q in queries.captured_queries if f"FROM {name}" in q["sql"]]


def test_the_spend_per_project_reads_the_project_rollup(history, monkeypatch):
    """Staff over every project, 1M streams over 50 projects: the spend per project read each
    project's usage rollup rows (~100 a project and day: 146,568 for 30 days), which
    PostgreSQL reads scattered over the heap, a page each (the admin page 661 ms). Now the
    project rollup's, one a project and day; the same figures as the raw rows'. A filter the
    project rollup does not hold (a model) reads the usage rollup's, still the same figures."""
    scope = Scope(project_id=None, start=NOW - dt.timedelta(days=30), end=NOW)
    exact, fast = _both(admin_report, scope, monkeypatch)
    assert len(fast.projects) > 1 and exact.projects == fast.projects
    assert exact.project_count == fast.project_count

    def build(s):
        return lambda: admin_report(s, now=NOW)

    from streams.models import ProjectRollup

    per_project = _statements(build(scope), ProjectRollup)
    assert any('"project_key" IN' in sql for sql in per_project), per_project
    usage = _statements(build(scope), UsageRollup)
    assert not [sql for sql in usage if '"project_key" IN' in sql], usage

    model = replace(scope, resolved_model="gpt-oss-20b")
    exact, fast = _both(admin_report, model, monkeypatch)
    assert fast.projects and exact.projects == fast.projects
    assert not [s for s in _statements(build(model), ProjectRollup) if '"project_key" IN' in s]
    assert [s for s in _statements(build(model), UsageRollup) if '"project_key" IN' in s]


def test_the_staff_page_reads_the_usage_rows_once(history, monkeypatch):
    """Its days, users and errors are three groupings of the same usage rows: read once, in
    one grouping (a statement per run of periods of one length), not three times."""
    monkeypatch.setattr(cube, "EXACT_BELOW", 0)
    scope = Scope(project_id=None, start=NOW - dt.timedelta(days=3), end=NOW)
    usage = _statements(lambda: admin_report(scope, now=NOW), UsageRollup)
    assert len({sql.split("GROUP BY")[1] for sql in usage}) == 1, usage
    windows = [w for w in cube.windows(scope.start, scope.end, aggregates.DAY) if w[0] != "raw"]
    assert len(usage) == len(windows)


def test_the_latency_page_reads_its_edges_raw_rows_once_and_no_findings(history, monkeypatch):
    """The partial hours at the range's ends are read raw once a page: the TTFT chart and the
    scores' chart read the page's own cube, not one of the chart's span (which read the
    partial hours again: staff's 30 days at 1M streams, ~1,800 rows more); and the page shows
    no findings, so none are read for them."""
    from streams.models import Finding

    monkeypatch.setattr(cube, "EXACT_BELOW", 0)
    scope = Scope(project_id=None, start=NOW - dt.timedelta(days=2, minutes=55), end=NOW)
    read = []
    real = aggregates.read_streams

    def counting(sql, params, **kw):
        rows = real(sql, params, **kw)
        read.extend(row["id"] for row, _, _ in rows)
        return rows

    monkeypatch.setattr(aggregates, "read_streams", counting)
    findings = _statements(lambda: latency_report(scope, now=NOW), Finding)
    hour = 3600
    first_hour = -(-scope.start.timestamp() // hour) * hour
    last_hour = scope.end.timestamp() // hour * hour
    in_range = Stream.objects.filter(created_at__gte=scope.start, created_at__lt=scope.end)
    edges = in_range.filter(
        Q(created_at__lt=dt.datetime.fromtimestamp(first_hour, dt.UTC))
        | Q(created_at__gte=dt.datetime.fromtimestamp(last_hour, dt.UTC))
    )
    expected = sorted(
        set(edges.values_list("id", flat=True))
        | set(in_range.filter(status__in=Stream.ACTIVE_STATUSES).values_list("id", flat=True))
    )
    assert len(expected) >= 8, expected
    assert sorted(read) == expected  # each once
    assert findings == []


@pytest.mark.parametrize(
    "filters, table",
    [({}, "project"), ({"tag": "checkout"}, "project"), ({"resolved_model": "m"}, "usage"),
     ({"requested_model": "auto"}, "usage"), ({"source": "proxy"}, "usage"),
     ({"status": "failed"}, "usage"), ({"username": "alice"}, "usage")],
)  # fmt: skip
def test_only_a_scope_the_project_rollup_holds_reads_it(history, filters, table):
    """Every filter on a dimension the project rollup sums over keeps the usage figures on the
    usage rollup (whose key has it); so does a value it does not hold."""
    from streams.models import ProjectRollup

    models = {"project": ProjectRollup, "usage": UsageRollup}
    for project_id in (None, Project.personal(history).pk):
        c = cube.Cube(Scope(project_id=project_id, end=NOW, **filters))
        for by in ((), ("t",), ("project_key",), ("tag",)):
            assert c._usage_model(by, ("n", "cost_eur_nanos")) is models[table], by
        assert c._usage_model(("status",), ("n",)) is UsageRollup
        assert c._usage_model((), ("n", "ttft_n")) is UsageRollup


def test_a_session_filter_falls_back_to_the_raw_rows(history, monkeypatch):
    monkeypatch.setattr(cube, "EXACT_BELOW", 0)
    report = latency_report(Scope(project_id=None, end=NOW, session="x"), now=NOW)
    assert report.method == cube.EXACT


def test_the_history_has_the_tags_the_filters_ask_for(history):
    tagged = Stream.objects.exclude(tags=[]).values_list("tags", flat=True)
    assert {t for tags in tagged for t in tags} >= {"checkout", "canary", "eval", "support-bot"}


def test_one_scope_rule_renders_every_filter_on_both_kinds_of_rows():
    """`sql.scope_where` is the one rule from a scope to conditions: every filter a `Scope`
    has lands on the raw rows and on the rollups (a session or a token, which the rollups do
    not hold, is refused rather than dropped); a filter added to `Scope` and not to the rule
    fails."""
    from dataclasses import fields

    from streams.stats.sql import ROLLUPS, STREAMS, scope_where

    base = Scope(project_id=None)
    values = {
        "project_id": 7, "start": NOW - dt.timedelta(days=1), "end": NOW, "tag": "t-1",
        "token_id": 3,
    }  # fmt: skip
    not_filters = {"tz"}  # how the figures are bucketed, not which streams
    for field in fields(Scope):
        if field.name in not_filters:
            continue
        scope = replace(base, **{field.name: values.get(field.name, "x")})
        raw = scope_where(scope)
        assert raw.parts and raw.params, f"{field.name}: no condition on the stream rows"
        assert scope_where(base).sql() != raw.sql(), field.name
        if field.name in ("session", "token_id"):
            with pytest.raises(ValueError):
                scope_where(scope, rows=ROLLUPS)
            continue
        rolled, unfiltered = scope_where(scope, rows=ROLLUPS), scope_where(base, rows=ROLLUPS)
        same = (rolled.sql(), rolled.params) == (unfiltered.sql(), unfiltered.params)
        if field.name in ("start", "end"):  # the rollup periods bound the range (cube.windows)
            assert same, field.name
            continue
        assert not same, f"{field.name}: no condition on the rollups"
    # the same columns, each table's own spelling of which project and which tag
    scope = replace(base, project_id=7, resolved_model="m-a", status="failed", source="proxy")
    raw, rolled = scope_where(scope, rows=STREAMS), scope_where(scope, rows=ROLLUPS)
    assert '"project_id" = %s' in raw.sql() and '"project_key" = %s' in rolled.sql()
    assert raw.params == [7, "m-a", "failed", "proxy"]
    assert rolled.params == ["", 7, "m-a", "failed", "proxy"]  # every stream's rows: tag ""
    # the project is access: no filter leaves it out
    skipped = scope_where(scope, rows=ROLLUPS, skip=("user", "source", "resolved_model"))
    assert skipped.params == ["", 7, "failed"]
    # findings_in_scope joins the stream rows and applies the rule's unqualified columns:
    # none of them may be a finding's too
    from streams.stats.sql import FILTERS

    finding = {f.column for f in Finding._meta.concrete_fields}
    assert not finding & {"user_id", "created_at", "tags", *FILTERS}


def test_a_dimension_on_the_rollups_base_is_in_every_key():
    shared = rollup_dimensions()
    assert set(shared) == {
        "span", "tag", "t", "resolved_model", "source", "user_key", "project_key", "status",
        "format",
    }  # fmt: skip
    from streams.models import ProjectRollup

    for model, (key, _values) in aggregates.rollup_tables().items():
        assert key == tuple(model._meta.pk.field_names)  # the model spells it once
        if model is ProjectRollup:
            # (summed over the others on purpose: read only by a scope filtering on none of
            # them, `test_only_a_scope_the_project_rollup_holds_reads_it`)
            assert set(key) < set(shared) and set(_values) < set(aggregates.USAGE_VALUES)
            continue
        assert set(shared) <= set(key), model
    # one left out of a key's list joins it at the end
    assert rollup_key("bucket", "t").field_names == (
        "bucket",
        "t",
        *(d for d in shared if d != "t"),
    )


def shared_by_every_rollup(models):
    """The fields (name and class) that each of `models` declares itself (not inherited from
    an abstract base, whose fields Django copies into each), in every one of them."""

    def inherited(m):
        bases = [b for b in m.__mro__[1:] if getattr(getattr(b, "_meta", None), "abstract", 0)]
        return {f.name for b in bases for f in b._meta.local_fields}

    declared = [
        {(f.name, type(f).__name__) for f in m._meta.local_fields if f.name not in inherited(m)}
        - {("pk", "CompositePrimaryKey")}  # (each key is its own order, made by rollup_key)
        for m in models
    ]
    return set.intersection(*declared)


def test_what_every_rollup_declares_is_declared_once_on_their_base():
    """A dimension or value every rollup has lives on `_Rollup`, not once per rollup."""
    base = UsageRollup.__mro__[1]  # (`_Rollup`)
    rollups = [m for m in aggregates.rollup_tables() if issubclass(m, base)]
    assert len(rollups) == 5  # (the project rollup is not one: it sums over their dimensions)
    assert shared_by_every_rollup(rollups) == set()

    # the check sees what it is for: a field declared in each of them is found
    def rollup(*names):
        fields = [SimpleNamespace(name=n) for n in names]
        return type("Rollup", (), {"_meta": SimpleNamespace(local_fields=fields, abstract=0)})

    found = shared_by_every_rollup([rollup("code", "region"), rollup("region", "bucket")])
    assert found == {("region", "SimpleNamespace")}
    assert ("requested_model", "CharField") in shared_by_every_rollup([UsageRollup])
    assert ("span", "IntegerField") not in shared_by_every_rollup([UsageRollup])  # the base's


def test_a_scope_is_a_project_and_only_staff_get_every_project(people):
    """`Scope.for_user`: the page's project; without one, staff read every project and anyone
    else their home project (never every project)."""
    ann = people[0]
    staff = get_user_model().objects.create_user("root", is_staff=True)
    team = Project.objects.create(name="Team", slug="team")
    assert Scope.for_user(ann, team).project_id == team.pk
    assert Scope.for_user(ann, None).project_id == Project.personal(ann).pk
    assert Scope.for_user(staff, None).project_id is None
    assert Scope.for_user(staff, team.pk, username="ann").project_id == team.pk
