"""dashboard.stats against numbers computed by hand on small data: nearest-rank percentiles (on
the ordered-index path and the window path), shares, the category × model matrix, filters,
access, empty scopes, the admin figures and the refresh version."""

import datetime as dt
import random
from dataclasses import replace

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.stats import latency
from dashboard.stats.admin import admin_report
from dashboard.stats.latency import latency_report
from dashboard.stats.routing import routing_report, sample_reasons
from dashboard.stats.usage import CSV_COLUMNS, export_rows, usage_report
from streams.core.figures import nearest_rank, rank, weighted_nearest_ranks
from streams.core.usage import ESTIMATED, REPORTED
from streams.management.commands.seed_demo import _settable_created_at
from streams.models import Finding, Project, Stream
from streams.stats.exact import ExactSource
from streams.stats.sql import PCT_NAMES, Scope, version

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)


def make(user=None, resolved="m-a", requested="auto", ttft=None, status="completed", **kw):
    """A finished stream row with consistent milestones (µs) for the given TTFT (ms)."""
    fields = {
        "user": user,
        "resolved_model": resolved,
        "requested_model": requested,
        "status": status,
        "ttft_ms": ttft,
        "created_at": kw.pop("created_at", NOW - HOUR),
        "source": kw.pop("source", "live"),
    }
    if ttft is not None:
        written = 1_000
        fields.update(
            request_written_us=written,
            headers_us=written + 10_000,
            created_event_us=written + 11_000,
            first_token_us=written + int(ttft * 1000),
        )
        if requested == "auto" and kw.get("routing_category", "x") is not None:
            fields["routing_us"] = written + 31_000
    fields.update(kw)
    if fields.get("routing_category") is None:
        fields.pop("routing_category", None)
    return Stream(**fields)


def save(*streams):
    with _settable_created_at():
        return Stream.objects.bulk_create(streams)


def everyone(**kw):
    return Scope(project_id=None, start=NOW - 7 * DAY, end=NOW, **kw)


@pytest.fixture
def users(db):
    User = get_user_model()
    return User.objects.create_user("owner"), User.objects.create_user("stranger")


class TestRank:
    def test_it_is_the_nearest_rank(self):
        assert rank(500, 10) == 5
        assert rank(750, 10) == 8
        assert rank(950, 20) == 19
        assert rank(990, 10) == 10
        assert rank(500, 1) == 1
        # where q·n in floating point lands just above an integer (0.9 × 70 = 63.000…01)
        assert rank(900, 70) == 63

    def test_nearest_rank_of_a_list(self):
        assert nearest_rank([5, 1, 4, 2, 3], 500) == 3
        assert nearest_rank([5, 1, 4, 2, 3], 990) == 5
        assert nearest_rank([], 500) is None

    def test_several_quantiles_from_one_sort_are_each_the_nearest_rank(self):
        rng = random.Random(44)
        for _ in range(500):
            pairs = [(rng.randint(-5, 300), rng.randint(0, 4)) for _ in range(rng.randint(0, 25))]
            qs = rng.sample([1, 10, 250, 500, 900, 950, 990, 999, 1000], rng.randint(1, 4))
            flat = [v for v, n in pairs for _ in range(n)]
            got = weighted_nearest_ranks(pairs, qs)
            assert got == {q: nearest_rank(flat, q) for q in qs}, (pairs, qs)


class TestLatency:
    @pytest.fixture(autouse=True)
    def data(self, users):
        owner, stranger = users
        self.owner, self.stranger = owner, stranger
        # m-a: TTFT 10, 20, … 100 ms (auto); m-b: 200, 400 ms (pinned); one m-a failure, one
        # stranger's stream and one stream out of range.
        rows = [make(owner, "m-a", "auto", 10.0 * i) for i in range(1, 11)]
        rows += [make(owner, "m-b", "m-b", 200.0), make(owner, "m-b", "m-b", 400.0)]
        rows.append(make(owner, "m-a", "auto", None, status="failed", error_code="server_error"))
        rows.append(make(stranger, "m-a", "auto", 5000.0, source="proxy"))
        rows.append(make(owner, "m-a", "auto", 9000.0, created_at=NOW - 30 * DAY))
        save(*rows)

    def report(self, scope):
        return latency_report(scope, now=NOW)

    def test_it_computes_percentiles_per_resolved_model(self):
        scope = Scope(project_id=Project.personal(self.owner).pk, start=NOW - 7 * DAY, end=NOW)
        report = self.report(scope)
        rows = {r["model"]: r for r in report.by_resolved}
        a = rows["m-a"]
        assert a["count"] == 11 and a["ttft_n"] == 10
        assert (a["p50"], a["p75"], a["p90"], a["p95"], a["p99"], a["max"]) == (
            50.0,
            80.0,
            90.0,
            100.0,
            100.0,
            100.0,
        )
        b = rows["m-b"]
        assert (b["count"], b["p50"], b["p95"], b["max"]) == (2, 200.0, 400.0, 400.0)

    def test_it_computes_rates_over_finished_streams(self):
        report = self.report(
            Scope(project_id=Project.personal(self.owner).pk, start=NOW - 7 * DAY, end=NOW)
        )
        a = {r["model"]: r for r in report.by_resolved}["m-a"]
        assert a["error_rate"] == pytest.approx(1 / 11)
        assert a["error_pct"] == pytest.approx(100 / 11)
        assert a["stall_rate"] == 0

    def test_it_groups_by_requested_model_and_overall(self):
        report = self.report(
            Scope(project_id=Project.personal(self.owner).pk, start=NOW - 7 * DAY, end=NOW)
        )
        by_requested = {r["model"]: r for r in report.by_requested}
        assert by_requested["auto"]["count"] == 11 and by_requested["m-b"]["count"] == 2
        # overall: 10, 20 … 100, 200, 400 → 12 values; p50 = 6th = 60, p90 = 11th = 200
        assert report.overall["count"] == 13
        assert report.overall["p50"] == 60.0 and report.overall["p90"] == 200.0
        assert report.overall["p99"] == 400.0

    def test_staff_scope_sees_everyone(self):
        report = self.report(everyone())
        a = {r["model"]: r for r in report.by_resolved}["m-a"]
        assert a["count"] == 12 and a["max"] == 5000.0

    def test_a_user_sees_only_their_own_streams(self):
        report = self.report(
            Scope(project_id=Project.personal(self.stranger).pk, start=NOW - 7 * DAY, end=NOW)
        )
        assert [r["model"] for r in report.by_resolved] == ["m-a"]
        assert report.by_resolved[0]["count"] == 1
        assert report.resolved_models == ["m-a"]
        assert [s["ttft_ms"] for s in report.slowest] == [5000.0]

    def test_it_filters(self):
        assert self.report(everyone(source="proxy")).overall["count"] == 1
        assert self.report(everyone(status="failed")).overall["count"] == 1
        only_b = self.report(everyone(resolved_model="m-b"))
        assert [r["model"] for r in only_b.by_resolved] == ["m-b"]
        assert self.report(everyone(requested_model="m-b")).overall["p50"] == 200.0

    def test_the_range_excludes_older_streams(self):
        wide = self.report(Scope(project_id=None, start=NOW - 60 * DAY, end=NOW))
        assert wide.overall["max"] == 9000.0
        assert self.report(everyone()).overall["max"] == 5000.0

    def test_the_narrow_path_gives_the_same_percentiles(self):
        scope = everyone()
        ordered = latency.table_rows(ExactSource(scope, NOW, narrow=False), lambda p: p[0])
        narrow = latency.table_rows(ExactSource(scope, NOW, narrow=True), lambda p: p[0])
        assert ordered == narrow
        assert {r["model"]: r["p50"] for r in narrow} == {"m-a": 60.0, "m-b": 200.0}

    def test_histogram_counts_every_stream_with_a_ttft(self):
        report = self.report(everyone())
        for series in report.histogram["series"]:
            row = {r["model"]: r for r in report.by_resolved}[series["model"]]
            assert sum(series["counts"]) == row["ttft_n"]
        edges = report.histogram["edges"]
        assert edges[0] == 0 and edges == sorted(edges)

    def test_phases_add_up_to_the_mean_ttft(self):
        report = self.report(
            Scope(project_id=Project.personal(self.owner).pk, start=NOW - 7 * DAY, end=NOW)
        )
        a = {r["model"]: r for r in report.by_resolved}["m-a"]
        phases = {p["key"]: p["ms"] for p in a["phases"]}
        assert phases["connect"] == pytest.approx(1.0)
        assert phases["headers"] == pytest.approx(10.0)
        assert phases["routing"] == pytest.approx(20.0)
        after_written = sum(v for k, v in phases.items() if k != "connect")
        assert after_written == pytest.approx(a["ttft_mean"])

    def test_slowest_lists_the_highest_ttft_first(self):
        report = self.report(
            Scope(project_id=Project.personal(self.owner).pk, start=NOW - 7 * DAY, end=NOW)
        )
        ttfts = [s["ttft_ms"] for s in report.slowest]
        assert ttfts[:3] == [400.0, 200.0, 100.0]

    def test_time_series_buckets_the_range(self):
        scope = Scope(project_id=None, start=NOW - 6 * HOUR, end=NOW)
        report = self.report(scope)
        assert report.series["step"] == 900  # 6 h in 15 min buckets
        a = next(s for s in report.series["series"] if s["model"] == "m-a")
        # all of m-a's in-range streams started an hour ago: one bucket holds them
        assert sum(a["n"]) == 11
        i = max(range(len(a["n"])), key=lambda i: a["n"][i])
        assert a["p50"][i] == nearest_rank([10.0 * k for k in range(1, 11)] + [5000.0], 500)

    def test_compare_two_models(self):
        scope = everyone()
        a = Scope(**{**scope.__dict__, "resolved_model": "m-a"})
        b = Scope(**{**scope.__dict__, "resolved_model": "m-b"})
        report = latency_report(scope, now=NOW, compare_with=("m-a", a, "m-b", b))
        deltas = {d["key"]: d for d in report.comparison.deltas}
        assert deltas["p50"]["a"] == 60.0 and deltas["p50"]["b"] == 200.0
        assert deltas["p50"]["change_pct"] == pytest.approx(100 * 140 / 60)

    def test_an_empty_scope_is_an_empty_report(self):
        report = self.report(Scope(project_id=None, start=NOW - 365 * DAY, end=NOW - 300 * DAY))
        assert report.empty and report.overall is None and report.by_resolved == []


@pytest.mark.django_db
def test_percentiles_match_the_definition_on_random_data():
    rng = random.Random(7)
    values = {m: [round(rng.lognormvariate(5, 0.6), 3) for _ in range(n)] for m, n in
              (("x", 37), ("y", 101), ("z", 3))}  # fmt: skip
    save(*[make(None, m, "auto", v) for m, vs in values.items() for v in vs])
    report = latency_report(everyone(), now=NOW)
    for row in report.by_resolved:
        for q, name in PCT_NAMES.items():
            assert row[name] == nearest_rank(values[row["model"]], q), (row["model"], name)
    every = [v for vs in values.values() for v in vs]
    assert report.overall["p95"] == nearest_rank(every, 950)


class TestRouting:
    @pytest.fixture(autouse=True)
    def data(self, users):
        owner, _ = users
        self.owner = owner
        rows = []
        # auto: chat → m-a ×3, code → m-b ×1, chat → m-b ×1 (fallback); 1 failed before routing
        for ttft in (100.0, 200.0, 300.0):
            rows.append(
                make(
                    owner,
                    "m-a",
                    "auto",
                    ttft,
                    routing_category="chat",
                    routing_source="rules",
                    routing_reasoning="Short input <b>chat</b>",
                )  # fmt: skip
            )
        rows.append(
            make(
                owner,
                "m-b",
                "auto",
                400.0,
                routing_category="code",
                routing_source="rules",
                routing_reasoning="Looks like code",
            )  # fmt: skip
        )
        rows.append(
            make(
                owner,
                "m-b",
                "auto",
                500.0,
                routing_category="chat",
                routing_source="fallback",
                routing_reasoning="m-a at capacity",
                status="failed",
            )  # fmt: skip
        )
        rows.append(make(owner, "", "auto", None, status="failed", routing_category=None))
        # pinned: two, one of which got a routing event (a violation, with its finding)
        rows.append(make(owner, "m-a", "m-a", 50.0))
        violating = make(owner, "m-b", "m-b", 60.0, routing_us=20_000, routing_category="code")
        rows.append(violating)
        saved = save(*rows)
        Finding.objects.create(
            stream=saved[-1], code="routing_on_pinned_model", severity="warning", event_index=1
        )
        self.violating = saved[-1]

    def test_shares_of_resolved_models(self):
        report = routing_report(everyone(), now=NOW)
        shares = {s["model"]: s for s in report.shares}
        assert report.total == 6
        assert shares["m-a"]["count"] == 3 and shares["m-a"]["share"] == pytest.approx(0.5)
        assert shares["m-b"]["count"] == 2 and shares["m-b"]["share_pct"] == pytest.approx(100 / 3)
        assert shares[""]["count"] == 1
        assert shares["m-a"]["ttft_p50"] == 200.0 and shares["m-a"]["ttft_p95"] == 300.0
        assert shares["m-b"]["error_rate"] == pytest.approx(0.5)

    def test_the_category_model_matrix(self):
        report = routing_report(everyone(), now=NOW)
        matrix = {
            row["category"]: {c["model"]: c["count"] for c in row["cells"]} for row in report.matrix
        }
        assert matrix["chat"] == {"m-a": 3, "m-b": 1, "": 0}
        assert matrix["code"] == {"m-a": 0, "m-b": 1, "": 0}
        assert matrix[""] == {"m-a": 0, "m-b": 0, "": 1}
        chat = next(r for r in report.matrix if r["category"] == "chat")
        assert chat["total"] == 4 and chat["cells"][0]["share"] == pytest.approx(0.75)

    def test_sources_and_decision_time(self):
        report = routing_report(everyone(), now=NOW)
        assert {s["source"]: s["count"] for s in report.sources} == {
            "rules": 4,
            "fallback": 1,
            "": 1,
        }
        decision = {d["model"]: d for d in report.decision}
        # routing_us − request_written_us = 31 000 µs = 31 ms for every routed stream
        assert decision["m-a"]["p50"] == pytest.approx(31.0) and decision["m-a"]["n"] == 3

    def test_sample_reasons_are_distinct_per_category(self):
        report = routing_report(everyone(), now=NOW)
        reasons = {r["category"]: [s["text"] for s in r["samples"]] for r in report.reasons}
        assert sorted(reasons["chat"]) == ["Short input <b>chat</b>", "m-a at capacity"]
        assert reasons["code"] == ["Looks like code"]

    def test_sample_reasons_of_every_category_are_read_in_one_walk(self):
        """One read for every category (a walk each passed nearly all of a project's streams
        when a tag filters them); a category whose newest lie beyond it is read again alone,
        four times as far. The texts are each category's newest distinct ones."""
        save(
            *[
                make(
                    self.owner,
                    "m-b",
                    "auto",
                    400.0,
                    routing_category="code",
                    routing_reasoning=f"code {i % 3}",
                    created_at=NOW - HOUR + i * dt.timedelta(seconds=1),
                )
                for i in range(1, 21)
            ]
        )
        auto = replace(everyone(), requested_model="auto")
        for kw, limits, code in (
            ({}, [400], ["code 2", "code 1", "code 0"]),
            # 16 rows of code read first, chat's beyond them
            ({"look_at": 2}, [16, 32], ["code 2", "code 1"]),
        ):
            with CaptureQueriesContext(connection) as queries:
                got = sample_reasons(auto, ["code", "chat"], **kw)
            reads = [q["sql"] for q in queries.captured_queries if "routing_reasoning" in q["sql"]]
            assert [int(sql.rsplit("LIMIT", 1)[1]) for sql in reads] == limits, kw
            texts = {r["category"]: [s["text"] for s in r["samples"]] for r in got}
            assert texts["code"] == code
            assert texts["chat"] and set(texts["chat"]) <= {
                "Short input <b>chat</b>",
                "m-a at capacity",
            }

    def test_auto_vs_pinned(self):
        report = routing_report(everyone(), now=NOW)
        sides = {r["side"]: r for r in report.auto_vs_pinned}
        assert sides["auto"]["count"] == 6 and sides["pinned"]["count"] == 2
        assert sides["pinned"]["p50"] == 50.0 and sides["pinned"]["max"] == 60.0

    def test_pinned_requests_with_a_routing_event_are_listed(self):
        report = routing_report(everyone(), now=NOW)
        assert [s["id"] for s in report.pinned_routed] == [self.violating.pk]
        assert report.pinned_routed_count == 1
        assert report.pinned_routed_findings == 1

    def test_no_auto_requests_is_an_empty_report(self):
        report = routing_report(everyone(source="import"), now=NOW)
        assert report.empty and report.shares == []


class TestAdmin:
    @pytest.fixture(autouse=True)
    def data(self, users):
        owner, stranger = users
        self.owner, self.stranger = owner, stranger
        rows = [
            make(owner, "m-a", "auto", 100.0, created_at=NOW - 2 * DAY, event_count=10,
                 bytes_received=1000, output_deltas=5, duration_ms=900.0),
            make(owner, "m-a", "auto", None, status="failed", error_code="server_error",
                 created_at=NOW - 2 * DAY, event_count=0, duration_ms=20.0),
            make(stranger, "m-b", "m-b", 50.0, created_at=NOW - DAY + HOUR, event_count=30,
                 bytes_received=5000, output_deltas=20, duration_ms=3000.0, findings_count=2),
            make(stranger, "m-b", "m-b", None, status="stalled", created_at=NOW - HOUR,
                 event_count=7, duration_ms=60000.0),
        ]  # fmt: skip
        saved = save(*rows)
        Finding.objects.create(stream=saved[2], code="sequence_gap", severity="error")
        Finding.objects.create(stream=saved[2], code="stall", severity="warning")
        Finding.objects.create(stream=saved[3], code="stall", severity="warning")
        self.saved = saved

    def report(self):
        return admin_report(everyone(), now=NOW)

    def test_streams_and_events_per_day(self):
        days = {d["day"]: d for d in self.report().days}
        two_days_ago = (NOW - 2 * DAY).date()
        assert days[two_days_ago] == {"day": two_days_ago, "streams": 2, "failed": 1, "events": 10}
        assert days[(NOW - DAY + HOUR).date()]["events"] == 30
        assert days[NOW.date()]["events"] == 7

    def test_usage_per_user(self):
        users = {u["username"]: u for u in self.report().users}
        assert users["owner"]["streams"] == 2 and users["owner"]["failed"] == 1
        assert users["stranger"]["output_deltas"] == 20 and users["stranger"]["bytes"] == 5000

    def test_error_codes_and_findings(self):
        report = self.report()
        assert {(e["status"], e["code"]): e["count"] for e in report.errors} == {
            ("failed", "server_error"): 1,
            ("stalled", ""): 1,
        }
        findings = {(r["code"], r["severity"]): r["total"] for r in report.findings["rows"]}
        assert findings == {("stall", "warning"): 2, ("sequence_gap", "error"): 1}
        assert report.findings["models"] == ["m-b"]

    def test_largest_and_slowest(self):
        report = self.report()
        assert report.largest[0]["id"] == self.saved[2].pk
        assert [s["id"] for s in report.slowest[:2]] == [self.saved[3].pk, self.saved[2].pk]


@pytest.mark.django_db
def test_the_version_changes_when_a_stream_starts_or_finishes():
    scope = everyone()
    [stream] = save(make(None, "m-a", "auto", None, status="streaming"))
    v1 = version(scope, NOW)
    assert latency_report(scope, now=NOW, known_version=v1) is None
    Stream.objects.filter(pk=stream.pk).update(status="completed")
    v2 = version(scope, NOW)
    assert v2 != v1
    save(make(None, "m-a", "auto", 10.0))
    assert version(scope, NOW) != v2
    report = latency_report(scope, now=NOW, known_version=v1)
    assert report is not None and report.version == version(scope, NOW)


@pytest.mark.django_db
def test_seed_demo_makes_a_history_the_pages_can_show():
    from streams.management.commands.seed_demo import seed
    from streams.models import Event

    counts = seed(400, days=3, seed=5, events_per_stream=12, users=("alice", "bob"), now=NOW)
    assert counts["streams"] == 400 == Stream.objects.count()
    assert counts["events"] == Event.objects.count() > 400 * 8
    streams = Stream.objects.all()
    assert set(streams.values_list("requested_model", flat=True)) >= {"auto", "gpt-oss-120b"}
    assert streams.filter(status="failed").exists() and streams.filter(ttft_ms__gt=0).count() > 300
    assert min(streams.values_list("created_at", flat=True)) >= NOW - 3 * DAY
    # the denormalised counters agree with the stored rows, as the recorder's would
    total = sum(streams.values_list("event_count", flat=True))
    assert total == counts["events"]
    assert sum(streams.values_list("findings_count", flat=True)) == Finding.objects.count()
    report = routing_report(Scope(project_id=None, start=NOW - 3 * DAY, end=NOW), now=NOW)
    assert {s["model"] for s in report.shares} >= {"eu-reasoner", "qwen3-coder"}
    assert {row["category"] for row in report.matrix} >= {"chat", "code", "tools", "reasoning"}


@pytest.mark.django_db
def test_over_time_buckets_follow_the_datas_own_span():
    """A day of data on the 7-day range is a line of many points, not one 3-hour bucket (the
    charts drew nothing); the latency and routing pages alike."""
    day = NOW - 3 * DAY
    save(*(make(ttft=100.0 + i, created_at=day + i * HOUR) for i in range(24)))
    scope = everyone()
    for report in (latency_report(scope, now=NOW), routing_report(scope, now=NOW)):
        series = report.series
        assert series["step"] <= 1800, series["step"]
        counts = next(s for s in series["series"] if s["model"] == "m-a")["n"]
        assert sum(1 for n in counts if n) == 24 and sum(counts) == 24
        assert series["t"][0] <= day.timestamp() < series["t"][0] + series["step"]


class TestUsage:
    """The usage page's report on a handful of streams, from the raw rows and from the rollups
    (rebuilt from them): per currency, never added; no price counted, never a cost of 0."""

    @pytest.fixture(autouse=True)
    def data(self, users):
        owner, stranger = users
        self.owner, self.stranger = owner, stranger
        reported = {"usage_source": REPORTED}
        estimated = {"usage_source": ESTIMATED}
        rows = [
            # 2026-02-28 12:00 UTC (21:00 in Tokyo)
            make(owner, "m-a", ttft=100.0, created_at=NOW - 2 * DAY, tags=["checkout"],
                 input_tokens=1000, output_tokens=200, cached_input_tokens=300,
                 reasoning_tokens=50, cost_nanos=1_500_000, cost_currency="EUR", **reported),
            # 2026-02-28 16:00 UTC: 2026-03-01 01:00 in Tokyo
            make(owner, "m-a", ttft=120.0, created_at=NOW - 2 * DAY + 4 * HOUR,
                 tags=["checkout", "beta"], input_tokens=400, output_tokens=100,
                 cost_nanos=2_000_000, cost_currency="USD", **estimated),
            # no price
            make(owner, "m-b", "m-b", 80.0, input_tokens=50, output_tokens=10, **estimated),
            make(stranger, "m-b", "m-b", 90.0, created_at=NOW - DAY, input_tokens=10,
                 output_tokens=5, cached_input_tokens=0, cost_nanos=7, cost_currency="USD",
                 **reported),
            # failed before a model was named; and one still running
            make(owner, "", "auto", None, status="failed"),
            make(owner, "m-a", ttft=None, status="streaming", created_at=NOW - HOUR / 2),
            # out of range
            make(owner, "m-a", ttft=10.0, created_at=NOW - 30 * DAY, input_tokens=9,
                 output_tokens=9, cost_nanos=9, cost_currency="EUR", **reported),
        ]  # fmt: skip
        save(*rows)

    def report(self, scope, exact=True):
        from streams.stats import cube
        from streams.store import aggregates

        if not exact:
            aggregates.rebuild()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cube, "EXACT_BELOW", 10**9 if exact else 0)
            report = usage_report(scope, now=NOW)
        assert report.method == (cube.EXACT if exact else cube.AGGREGATED)
        return report

    @pytest.mark.parametrize("exact", [True, False])
    def test_per_model_with_costs_per_currency(self, exact):
        report = self.report(everyone(), exact)
        assert report.currencies == ["EUR", "USD"]
        rows = {r["model"]: r for r in report.models}
        assert [r["model"] for r in report.models] == ["m-a", "m-b", ""]  # most spent first
        a = rows["m-a"]
        assert (a["streams"], a["usage_n"], a["estimated_n"], a["estimated_pct"]) == (3, 2, 1, 50)
        assert (a["input_tokens"], a["output_tokens"], a["tokens"]) == (1400, 300, 1700)
        assert (a["cached_input_tokens"], a["reasoning_tokens"], a["reported_n"]) == (300, 50, 1)
        # EUR and USD apart; the running stream has no price (yet)
        assert a["costs"] == [("EUR", 1_500_000), ("USD", 2_000_000)]
        assert (a["priced_n"], a["unpriced"]) == (2, 1)
        b = rows["m-b"]
        assert (b["streams"], b["priced_n"], b["unpriced"], b["costs"]) == (
            2, 1, 1, [("EUR", 0), ("USD", 7)]
        )  # fmt: skip
        none = rows[""]
        assert (none["usage_n"], none["priced_n"], none["estimated_pct"]) == (0, 0, None)
        totals = report.totals
        assert (totals["streams"], totals["priced_n"], totals["unpriced"]) == (6, 3, 3)
        assert totals["costs"] == [("EUR", 1_500_000), ("USD", 2_000_007)]

    @pytest.mark.parametrize("exact", [True, False])
    def test_per_user_for_staff_only(self, exact):
        report = self.report(everyone(), exact)
        users = {u["username"]: u for u in report.users}
        assert (users["owner"]["streams"], users["stranger"]["streams"]) == (5, 1)
        assert report.user_count == 2
        assert users["stranger"]["costs"] == [("EUR", 0), ("USD", 7)]
        own = self.report(
            Scope(project_id=Project.personal(self.owner).pk, start=NOW - 7 * DAY, end=NOW), exact
        )
        assert own.users is None
        assert own.currencies == ["EUR", "USD"] and own.totals["streams"] == 5
        assert {r["model"]: r["streams"] for r in own.models} == {"m-a": 3, "m-b": 1, "": 1}

    @pytest.mark.parametrize("exact", [True, False])
    def test_per_tag_and_a_tag_filter(self, exact):
        report = self.report(everyone(), exact)
        tags = {t["tag"]: t for t in report.tags}
        assert set(tags) == {"checkout", "beta"} and report.tag_count == 2
        assert tags["checkout"]["streams"] == 2
        assert tags["checkout"]["costs"] == [("EUR", 1_500_000), ("USD", 2_000_000)]
        assert (tags["beta"]["streams"], tags["beta"]["estimated_n"]) == (1, 1)
        report = self.report(everyone(tag="beta"), exact)
        assert [t["tag"] for t in report.tags] == ["beta"]
        assert report.currencies == ["USD"] and report.totals["input_tokens"] == 400

    @pytest.mark.parametrize("exact", [True, False])
    def test_per_local_day(self, exact):
        utc = {d["day"]: d["streams"] for d in self.report(everyone(), exact).days}
        assert utc == {
            dt.date(2026, 2, 28): 2, dt.date(2026, 3, 1): 1, dt.date(2026, 3, 2): 3
        }  # fmt: skip
        report = self.report(everyone(tz="Asia/Tokyo"), exact)
        tokyo = {d["day"]: d for d in report.days}
        assert {day: d["streams"] for day, d in tokyo.items()} == {
            dt.date(2026, 2, 28): 1, dt.date(2026, 3, 1): 2, dt.date(2026, 3, 2): 3
        }  # fmt: skip
        assert tokyo[dt.date(2026, 3, 1)]["costs"] == [("EUR", 0), ("USD", 2_000_007)]
        assert [d["day"] for d in report.days] == sorted(tokyo, reverse=True)  # newest first

    @pytest.mark.parametrize("exact", [True, False])
    def test_spend_over_time_per_currency(self, exact):
        chart = self.report(everyone(), exact).chart
        assert chart["step"] == 3 * 3600  # (7 days: the oldest stream in range is a week old)
        series = {s["currency"]: s["nanos"] for s in chart["series"]}
        assert set(series) == {"EUR", "USD"}
        assert sum(v or 0 for v in series["EUR"]) == 1_500_000
        assert sum(v or 0 for v in series["USD"]) == 2_000_007
        # a bucket without a priced stream is a gap, not a cost of 0
        first = chart["t"].index(int((NOW - 2 * DAY).timestamp()))
        assert (series["EUR"][first], series["USD"][first]) == (1_500_000, 0)
        assert (series["EUR"][first + 1], series["USD"][first + 1]) == (0, 2_000_000)
        assert series["EUR"][first + 2] is series["USD"][first + 2] is None

    def test_no_price_anywhere_has_no_currency(self):
        report = usage_report(everyone(status="failed"), now=NOW)
        assert report.currencies == [] and report.chart is None
        assert report.totals["costs"] == [] and report.totals["unpriced"] == 1

    @pytest.mark.parametrize("exact", [True, False])
    def test_the_csv_rows(self, exact):
        from streams.stats import cube
        from streams.store import aggregates

        if not exact:
            aggregates.rebuild()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cube, "EXACT_BELOW", 10**9 if exact else 0)
            rows = export_rows(everyone(), now=NOW)
            own = export_rows(Scope(project_id=Project.personal(self.owner).pk, end=NOW), now=NOW)
        assert len(CSV_COLUMNS) == len(rows[0])
        by_model = {r[0]: dict(zip(CSV_COLUMNS, r, strict=True)) for r in rows}
        assert by_model["m-a"] == {
            "resolved_model": "m-a", "streams": 3, "streams_with_usage": 2,
            "streams_estimated": 1, "input_tokens": 1400, "output_tokens": 300,
            "cached_input_tokens": 300, "reasoning_tokens": 50, "streams_priced": 2,
            "streams_without_price": 1, "cost_eur": "0.001500000", "cost_usd": "0.002000000",
            "range_start_utc": "2026-02-23T12:00:00Z", "range_end_utc": "2026-03-02T12:00:00Z",
        }  # fmt: skip
        # no price: empty, not 0; never-estimated counts unknown without a reported usage
        assert (by_model[""]["cost_eur"], by_model[""]["cost_usd"]) == ("", "")
        assert by_model["m-b"]["cost_usd"] == "0.000000007"
        mine = {r[0]: dict(zip(CSV_COLUMNS, r, strict=True)) for r in own}
        assert mine["m-b"]["cached_input_tokens"] == "" and mine["m-b"]["streams"] == 1
        # all time: an open start, and the stream 30 days ago
        assert mine["m-a"]["range_start_utc"] == "" and mine["m-a"]["streams"] == 4
        assert mine["m-a"]["cost_eur"] == "0.001500009"
