"""Scores on the latency page (issue 35): per resolved model, the scores of one type given to
the streams in scope — how many, their mean, the share positive — beside that model's TTFT
from the latency report's own figures, and the mean and count per time bucket. So "is the
faster model worse?" has an answer on one page.

The figures are a `Source`'s (`Source.scores`, `Source.score_series`), as every other figure
of the page; both sources read them alike (streams/stats/score_figures.py): from the score
rollups through the cube, which adds the scores of the raw rows the rollups do not hold yet,
so every figure is a count or a sum, exact, and kept when retention deletes the streams; from
the raw rows where the rollups cannot answer (a session filter, sub-hour buckets).

What is counted is scores, not streams: a stream scored by two people (or by an application
under two keys) counts twice. A score belongs to the period its stream was created in.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from dashboard import dates
from streams.models import ScoreType
from streams.stats import cube
from streams.stats.source import source_for
from streams.stats.sql import buckets, history_span
from streams.store import known_secrets
from streams.store.aggregates import DAY

# Models in the table and lines in the chart, busiest (most scores) first: the cap of the
# other analytics tables (admin.TOP_USERS, usage.TOP_USERS and TOP_TAGS).
TOP_MODELS = 50
DEFAULT_TYPE = "thumbs"  # on every instance (migration 0014)


@dataclass
class ScoresReport:
    score_type: ScoreType | None
    empty: bool = True
    overall: dict | None = None  # every model's scores together
    rows: list = field(default_factory=list)  # per resolved model, most scores first
    more_models: int = 0  # models with scores beyond TOP_MODELS, not shown
    series: dict | None = None
    series_rows: list = field(default_factory=list)
    # raw rows read for the table (a session filter): "exact"; else "aggregated"
    method: str = cube.AGGREGATED


def default_type():
    """The score type a page shows when none is asked for: thumbs, else the first by name."""
    types = list(ScoreType.objects.all())
    return next((t for t in types if t.name == DEFAULT_TYPE), types[0] if types else None)


def figures(n, sum_milli, positive):
    """{scores, mean, positive, positive_pct} of one group's sums (`SCORE_VALUES`)."""
    return {
        "scores": n,
        "mean": sum_milli / 1000 / n if n else None,
        "positive": positive,
        "positive_pct": 100 * positive / n if n else None,
    }


def per_model(source, score_type):
    """{resolved model: [n, sum_milli, positive]} of the scores of `score_type` in the
    source's scope (`Source.scores`), the models with scores."""
    return {m: v for m, v in source.scores(score_type).items() if v[0]}


def _bounds(source):
    """The chart's span: the TTFT chart's (`Source.series_bounds`: the range narrowed to its
    streams), reaching back to the oldest aggregated day where retention deleted the stream
    rows of the days before the oldest kept one (their scores are in the rollups)."""
    scope, now = source.scope, source.now
    bounds = source.series_bounds(scope)
    oldest = cube.first_day(scope)
    if oldest is None or scope.session:
        return bounds
    first = history_span(scope)[0]
    if first is not None and first < oldest + dt.timedelta(seconds=DAY):
        return bounds  # the stream rows reach back to the oldest day's: nothing deleted
    start = oldest if scope.start is None else max(scope.start, oldest)
    end = bounds[1] if bounds else (scope.end or now)
    return (start, end) if start < end else None


def series(source, score_type, models):
    """{"step", "t": [bucket starts], "minimum", "maximum", "series": [{"model", "n": [scores],
    "mean": [mean or None]}]} per bucket of the page's step (`sql.buckets`, as the TTFT
    chart), or None without scores."""
    bounds = _bounds(source)
    if bounds is None or not models:
        return None
    step, windows = buckets(*bounds, tz=source.scope.tz)
    ts = [int(lo.timestamp()) for lo, _ in windows]
    edges = [*ts, int(windows[-1][1].timestamp())]
    per = source.score_series(score_type, bounds, step, edges)
    out = []
    for model in models:
        sums = [per.get((model, t), (0, 0, 0)) for t in ts]
        out.append(
            {
                "model": model,
                "n": [n for n, _, _ in sums],
                "mean": [figures(*s)["mean"] for s in sums],
            }
        )
    if not any(any(s["n"]) for s in out):
        return None
    return {
        "step": step,
        "t": ts,
        "minimum": score_type.minimum,
        "maximum": score_type.maximum,
        "series": out,
    }


def series_rows(chart, zone=dt.UTC):
    """The chart as table rows [{model, t, scores, mean}] (buckets with scores only)."""
    rows = []
    for s in chart["series"]:
        for i, t in enumerate(chart["t"]):
            if s["n"][i]:
                when = dates.write(dt.datetime.fromtimestamp(t, zone), "minute", zone=False)
                rows.append({"model": s["model"], "t": when, "scores": s["n"][i],
                             "mean": s["mean"][i]})  # fmt: skip
    return rows


def scores_report(scope, score_type=None, *, ttft, now=None, source=None):
    """The scores section of the latency page (`latency.latency_report` builds it). `score_type`:
    a ScoreType (default: thumbs); `ttft`: the latency report's rows per resolved model
    (`by_resolved`), whose stream count and TTFT p50 and p95 the table shows beside the scores
    (TTFT has one derivation: this builder takes the latency page's figures, never its own);
    `source`: the latency report's (default: `source_for` the scope), whose `Source.scores`
    and `Source.score_series` the figures are."""
    now = now or dt.datetime.now(dt.UTC)
    source = source or source_for(scope, now)
    score_type = score_type or default_type()
    report = ScoresReport(score_type=score_type)
    if score_type is None:
        return report
    if scope.session:
        report.method = cube.EXACT
    per = per_model(source, score_type)
    if not per:
        return report
    report.empty = False
    ranked = sorted(per.items(), key=lambda kv: (-kv[1][0], known_secrets.label_key(kv[0])))
    shown, report.more_models = ranked[:TOP_MODELS], max(0, len(ranked) - TOP_MODELS)
    ttft = {r["model"]: r for r in ttft}
    for model, sums in shown:
        latency = ttft.get(model, {})
        report.rows.append(
            {
                "model": model,
                **figures(*sums),
                "streams": latency.get("count"),
                "ttft_p50": latency.get("p50"),
                "ttft_p95": latency.get("p95"),
            }
        )
    report.overall = figures(*(sum(v[i] for v in per.values()) for i in range(3)))
    models = [m for m, _ in shown if m]
    report.series = series(source, score_type, models)
    if report.series:
        report.series_rows = series_rows(report.series, zone=scope.zone)
    return report
