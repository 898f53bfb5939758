"""dashboard.stats.scores: the latency page's scores per model, against the figures computed
here from the raw Score rows — per model and per time bucket, with the page's filters, a
running stream's scores folded in, after retention deleted the streams, after a stream was
deleted, and for a session (raw rows). Scores are written through the ORM inside
`aggregates.tracking`, as the write path keeps the rollups."""

import datetime as dt
import random

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from dashboard.stats import scores as scores_stats
from dashboard.stats.latency import latency_report
from dashboard.stats.scores import scores_report
from streams.management.commands.seed_demo import _settable_created_at
from streams.models import Project, Score, ScoreRollup, ScoreType, Stream
from streams.stats.sql import Scope
from streams.store import aggregates, retention

# not on an hour: the range has partial hours at both ends (raw rows), whole hours and days
NOW = dt.datetime(2026, 3, 2, 12, 17, 41, tzinfo=dt.UTC)
START = NOW - dt.timedelta(days=7)
MODELS = {"m-fast": 120.0, "m-slow": 900.0, "m-mid": 400.0}
QUALITY = (1, 2, 2.5, 3, 4.5, 5)  # halves: their sums are exact in floating point


def scope(**kw):
    return Scope(project_id=None, start=kw.pop("start", START), end=kw.pop("end", NOW), **kw)


def _stream(rng, user, created_at, status="completed", **kw):
    model = kw.pop("resolved_model", rng.choice(list(MODELS)))
    ttft = MODELS[model] * rng.uniform(0.5, 1.5) if status == "completed" else None
    written = 1_000
    fields = {
        "user": user,
        "resolved_model": model,
        "requested_model": rng.choice(["auto", model]),
        "status": status,
        "ttft_ms": ttft,
        "created_at": created_at,
        "source": rng.choice(["live", "proxy"]),
        "tags": rng.choice([[], [], ["checkout"], ["checkout", "canary"]]),
    }
    if ttft is not None:
        fields.update(
            request_written_us=written,
            headers_us=written + 10_000,
            created_event_us=written + 11_000,
            first_token_us=written + int(ttft * 1000),
        )
    fields.update(kw)
    return Stream(**fields)


def give(stream, kind, value, author=None, key=""):
    """A score written as the write path does: the stream's rollups follow in the same
    transaction."""
    with transaction.atomic(), aggregates.tracking([stream.pk]):
        Score.objects.create(
            stream=stream, score_type=kind, value=value, author=author, key=key, source="person"
        )


@pytest.fixture
def world(db):
    """~90 streams over 9 days (some before the range, some in its partial hours), each
    finished one added to the rollups as the write path adds it; most scored, under thumbs by
    one or two people and under a numeric type by an application; a running stream scored."""
    rng = random.Random(35)
    User = get_user_model()
    owner, other = User.objects.create_user("owner"), User.objects.create_user("other")
    quality = ScoreType.objects.create(name="quality", kind="numeric", minimum=1, maximum=5)
    thumbs = ScoreType.objects.get(name="thumbs")
    times = [NOW - dt.timedelta(seconds=rng.randint(60, 9 * 86400)) for _ in range(80)]
    # the partial hours at the range's ends, and just outside it
    times += [START + dt.timedelta(minutes=5), START - dt.timedelta(minutes=5)]
    times += [NOW - dt.timedelta(minutes=3), NOW - dt.timedelta(minutes=12)]
    with _settable_created_at():
        streams = Stream.objects.bulk_create(
            [_stream(rng, rng.choice([owner, other, None]), t) for t in times]
            + [
                _stream(
                    rng,
                    owner,
                    NOW - dt.timedelta(minutes=1),
                    status="streaming",
                    resolved_model="m-fast",
                )
            ]  # fmt: skip
        )
    aggregates.add_streams([s.pk for s in streams])
    for s in streams:
        if rng.random() < 0.15:
            continue
        give(s, thumbs, rng.choice([0, 1, 1]), author=owner)
        if rng.random() < 0.5:
            give(s, thumbs, rng.choice([0, 1]), author=other)
        if rng.random() < 0.7:
            give(s, quality, rng.choice(QUALITY), key="eval-run-1")
    running = streams[-1]
    give(running, thumbs, 1, author=other)
    give(running, quality, 5, key="eval-run-1")
    return {"owner": owner, "other": other, "thumbs": thumbs, "quality": quality,
            "running": running}  # fmt: skip


def raw(kind, start=START, end=NOW, keep=lambda stream: True):
    """{model: (scores, mean, % positive)} from the Score rows, computed here."""
    sums = {}
    for s in Score.objects.filter(score_type=kind).select_related("stream"):
        stream = s.stream
        if not (start <= stream.created_at < end) or not keep(stream):
            continue
        e = sums.setdefault(stream.resolved_model, [0, 0.0, 0])
        e[0] += 1
        e[1] += s.value
        e[2] += kind.is_positive(s.value)
    return {m: (n, total / n, 100 * positive / n) for m, (n, total, positive) in sums.items()}


def shown(report):
    return {r["model"]: (r["scores"], r["mean"], r["positive_pct"]) for r in report.rows}


@pytest.mark.parametrize("kind", ["thumbs", "quality"])
def test_the_figures_per_model_are_the_raw_scores(world, kind):
    report = scores_report(scope(), world[kind], now=NOW, ttft=[])
    expected = raw(world[kind])
    assert not report.empty and len(expected) == 3
    assert shown(report) == expected
    total = sum(n for n, _, _ in expected.values())
    assert report.overall["scores"] == total
    # the running stream's score (not aggregated yet) is in, and so are the range's edges
    assert Score.objects.filter(stream=world["running"], score_type=world[kind]).exists()
    assert ScoreRollup.objects.filter(score_type=world[kind].pk, status="streaming").count() == 0


def test_thumbs_is_the_default_type(world):
    report = scores_report(scope(), now=NOW, ttft=[])
    assert report.score_type == world["thumbs"]
    assert shown(report) == raw(world["thumbs"])


def test_ttft_beside_the_scores_is_the_latency_reports(world):
    page = latency_report(scope(), now=NOW, score_type=world["quality"])
    ttft = {r["model"]: r for r in page.by_resolved}
    assert page.scores.rows and shown(page.scores) == raw(world["quality"])
    for row in page.scores.rows:
        assert row["ttft_p50"] == ttft[row["model"]]["p50"] is not None
        assert row["ttft_p95"] == ttft[row["model"]]["p95"]
        assert row["streams"] == ttft[row["model"]]["count"]


@pytest.mark.parametrize(
    "filters, keep",
    [
        ({"resolved_model": "m-slow"}, lambda s: s.resolved_model == "m-slow"),
        ({"username": "owner"}, lambda s: s.user is not None and s.user.username == "owner"),
        ({"tag": "checkout"}, lambda s: "checkout" in s.tags),
        (
            {"tag": "canary", "source": "proxy"},
            lambda s: "canary" in s.tags and s.source == "proxy",
        ),
        ({"status": "completed"}, lambda s: s.status == "completed"),
        ({"requested_model": "auto"}, lambda s: s.requested_model == "auto"),
    ],
)
def test_the_filters_narrow_the_figures(world, filters, keep):
    for kind in (world["thumbs"], world["quality"]):
        expected = raw(kind, keep=keep)
        assert expected and expected != raw(kind)
        assert shown(scores_report(scope(**filters), kind, now=NOW, ttft=[])) == expected


def test_a_user_sees_the_scores_of_their_own_streams(world):
    owner = world["owner"]
    mine = Scope(project_id=Project.personal(owner).pk, start=START, end=NOW)
    expected = raw(world["thumbs"], keep=lambda s: s.user_id == owner.pk)
    assert shown(scores_report(mine, world["thumbs"], now=NOW, ttft=[])) == expected


@pytest.mark.parametrize("days", [7, 1])
def test_the_series_is_the_raw_scores_per_bucket(world, days):
    """7 days: 3-hour buckets from the rollups; 24 hours: 30-minute buckets from the raw
    rows (rollup periods are hours)."""
    kind = world["quality"]
    start = NOW - dt.timedelta(days=days)
    report = scores_report(scope(start=start), kind, now=NOW, ttft=[])
    chart = report.series
    step = chart["step"]
    assert step == (3 * 3600 if days == 7 else 1800)
    assert chart["minimum"] == 1 and chart["maximum"] == 5
    for s in chart["series"]:
        for i, t in enumerate(chart["t"]):
            lo = max(dt.datetime.fromtimestamp(t, dt.UTC), start)
            hi = min(dt.datetime.fromtimestamp(t + step, dt.UTC), NOW)
            n, mean, _ = raw(kind, lo, hi).get(s["model"], (0, None, None))
            assert (s["n"][i], s["mean"][i]) == (n, mean), (s["model"], i)
    per_model = {s["model"]: sum(s["n"]) for s in chart["series"]}
    assert per_model == {m: n for m, (n, _, _) in raw(kind, start).items()}
    assert len(report.series_rows) == sum(1 for s in chart["series"] for n in s["n"] if n)


# all time, and 7 days from a whole hour: a range's partial first hour is read from its stream
# rows (the hour's rollup row holds streams outside the range), which retention deletes
KEPT_RANGES = [None, START.replace(minute=0, second=0)]


@pytest.mark.parametrize("start", KEPT_RANGES)
def test_retention_keeps_the_score_figures(world, settings, start):
    kinds = ("thumbs", "quality")
    before = {k: scores_report(scope(start=start), world[k], now=NOW, ttft=[]) for k in kinds}
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 3}
    done = retention.prune(now=NOW)
    assert done["streams"] > 20
    assert (
        not Stream.objects.filter(created_at__lt=NOW - dt.timedelta(days=3))
        .exclude(status="streaming")
        .exists()
    )
    for kind, was in before.items():
        now = scores_report(scope(start=start), world[kind], now=NOW, ttft=[])
        assert shown(now) == shown(was) != {}
        assert now.overall == was.overall
        # the chart reaches back to the deleted streams' days
        totals = {s["model"]: sum(s["n"]) for s in now.series["series"]}
        assert totals == {r["model"]: r["scores"] for r in was.rows}


def test_deleting_a_stream_takes_its_scores_once(world):
    kind = world["thumbs"]
    victim = (
        Score.objects.filter(
            score_type=kind, stream__created_at__gte=START, stream__status="completed"
        )
        .first()
        .stream
    )
    victim.delete()
    assert shown(scores_report(scope(), kind, now=NOW, ttft=[])) == raw(kind)


def test_the_rollups_equal_a_rebuild(world):
    kept = aggregates.stored()[ScoreRollup]
    assert kept
    with transaction.atomic():
        aggregates.rebuild()
    assert aggregates.stored()[ScoreRollup] == kept


def test_a_session_is_read_from_the_raw_rows(world):
    ids = list(Stream.objects.filter(created_at__gte=START).values_list("pk", flat=True)[:30])
    Stream.objects.filter(pk__in=ids).update(session="chat-1")
    kind = world["quality"]
    report = scores_report(scope(session="chat-1"), kind, now=NOW, ttft=[])
    assert report.method == "exact"
    expected = raw(kind, keep=lambda s: s.pk in ids)
    assert expected and shown(report) == expected


def test_no_scores_is_an_empty_report(world):
    kind = ScoreType.objects.create(name="helpful", kind="numeric", minimum=0, maximum=10)
    report = scores_report(scope(), kind, now=NOW, ttft=[])
    assert report.empty and report.rows == [] and report.series is None
    assert report.score_type == kind


def test_the_models_shown_are_capped(world, monkeypatch):
    monkeypatch.setattr(scores_stats, "TOP_MODELS", 2)
    report = scores_report(scope(), world["thumbs"], now=NOW, ttft=[])
    expected = raw(world["thumbs"])
    busiest = sorted(expected, key=lambda m: (-expected[m][0], m))[:2]
    assert [r["model"] for r in report.rows] == busiest
    assert report.more_models == 1
    assert [s["model"] for s in report.series["series"]] == busiest
    # the overall row is every model's
    assert report.overall["scores"] == sum(n for n, _, _ in expected.values())


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"resolved_model": "m-slow"},
        {"username": "owner"},
        {"tag": "checkout", "source": "proxy"},
        {"status": "completed"},
        {"start": NOW - dt.timedelta(days=1)},  # sub-hour chart buckets: the raw rows
        {"start": None},
    ],
)
def test_both_sources_give_the_same_scores(world, filters):
    """Scores are a `Source` figure like every other: the exact and the rollup source give the
    same per model and per bucket, and what the page shows is the source's."""
    from streams.stats.exact import ExactSource
    from streams.stats.pairs import series_bounds
    from streams.stats.rollup import RollupSource
    from streams.stats.sql import buckets

    s = scope(**filters)
    exact, rolled = ExactSource(s, NOW), RollupSource(s, NOW)
    bounds = series_bounds(s, NOW)
    assert exact.series_bounds(s) == rolled.series_bounds(s) == bounds
    step, windows = buckets(*bounds, tz=s.tz)
    edges = [int(lo.timestamp()) for lo, _ in windows] + [int(windows[-1][1].timestamp())]
    for kind in (world["thumbs"], world["quality"]):
        per = exact.scores(kind)
        assert per == rolled.scores(kind) and any(v[0] for v in per.values())
        if not filters:
            assert {m: v[0] for m, v in per.items() if v[0]} == {
                m: n for m, (n, _, _) in raw(kind).items()
            }
        chart = exact.score_series(kind, bounds, step, edges)
        assert chart == rolled.score_series(kind, bounds, step, edges)
        assert sum(v[0] for v in chart.values()) == sum(v[0] for v in per.values())
        report = scores_report(s, kind, now=NOW, ttft=[], source=rolled)
        assert shown(report) == shown(scores_report(s, kind, now=NOW, ttft=[], source=exact))
