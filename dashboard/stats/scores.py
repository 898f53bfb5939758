"""Scores on the latency page (issue 35): per resolved model, the scores of one type given to
the streams in scope — how many, their mean, the share positive — beside that model's TTFT
from the latency report's own figures, and the mean and count per time bucket. So "is the
faster model worse?" has an answer on one page.

Read from the score rollups (`ScoreRollup`, streams/store/aggregates.py) through the cube
(`cube.Cube.scores`), which adds the scores of the raw rows the rollups do not hold yet (the
finished streams of the partial hours at the range's edges, and the running streams): every
figure is a count or a sum, so exact, and kept when retention deletes the streams. The raw
rows are read instead where the rollups cannot answer: a session filter (sessions are not in
their key; exact, as every figure of that page) and the sub-hour buckets of the 1 h and 24 h
ranges' chart (rollup periods are an hour at least), as the TTFT chart does.

What is counted is scores, not streams: a stream scored by two people (or by an application
under two keys) counts twice. A score belongs to the period its stream was created in.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from django.db import connection

from dashboard.stats import cube
from dashboard.stats.pairs import series_bounds
from dashboard.stats.sql import buckets, from_clause, history_span, index_for, quote, scope_where
from streams.models import Score, ScoreType
from streams.store import aggregates, known_secrets
from streams.store.aggregates import DAY, HOUR, epoch_s

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


def _raw_scores(scope, score_type):
    """[(resolved model, created_at, value)] of the scores of `score_type` on the stream rows
    in `scope` (running ones included): the stream rows of the scope's index, each joined with
    its scores by the (score type, stream) index."""
    w = scope_where(scope)
    streams = (
        f"SELECT {quote('id')}, {quote('resolved_model')}, {quote('created_at')} "
        f"FROM {from_clause(index_for(w, ordered=False), w)} WHERE {w.sql()}"
    )
    sql = (
        f"SELECT st.{quote('resolved_model')}, st.{quote('created_at')}, sc.{quote('value')} "
        f"FROM ({streams}) st JOIN {quote(Score._meta.db_table)} sc "
        f"ON sc.{quote('stream_id')} = st.{quote('id')} WHERE sc.{quote('score_type_id')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*w.params, score_type.pk])
        return cursor.fetchall()


def _fold_raw(rows, score_type, key):
    """{key(model, created_at): [n, sum_milli, positive]} of `_raw_scores` rows."""
    out = {}
    for model, created_at, value in rows:
        values = aggregates.score_values(value, score_type.is_positive(value))
        cube.add_to(out, key(model, created_at), values)
    return out


def per_model(scope, score_type, now, source=None):
    """{resolved model: [n, sum_milli, positive]} of the scores of `score_type` in scope.
    `source`: the page's, whose cube (a rollup source's) has read the raw rows already."""
    if scope.session:
        rows = _raw_scores(scope, score_type)
        per = _fold_raw(rows, score_type, lambda model, _: model)
    else:
        c = getattr(source, "cube", None) or cube.Cube(scope, scope.start, scope.end or now)
        per = {k[0]: v for k, v in c.scores(score_type.pk, ("resolved_model",)).items()}
    return {m: v for m, v in per.items() if v[0]}


def _bounds(scope, now, source=None):
    """The chart's span: the TTFT chart's (`series_bounds`: the range narrowed to its
    streams; the page's `source` has it already), reaching back to the oldest aggregated day
    where retention deleted the stream rows of the days before the oldest kept one (their
    scores are in the rollups)."""
    known = getattr(source, "series_bounds", None)
    bounds = known(scope) if known else series_bounds(scope, now)
    oldest = cube.first_day(scope)
    if oldest is None or scope.session:
        return bounds
    first = history_span(scope)[0]
    if first is not None and first < oldest + dt.timedelta(seconds=DAY):
        return bounds  # the stream rows reach back to the oldest day's: nothing deleted
    start = oldest if scope.start is None else max(scope.start, oldest)
    end = bounds[1] if bounds else (scope.end or now)
    return (start, end) if start < end else None


def series(scope, score_type, models, now, source=None):
    """{"step", "t": [bucket starts], "minimum", "maximum", "series": [{"model", "n": [scores],
    "mean": [mean or None]}]} per bucket of the page's step (`sql.buckets`, as the TTFT
    chart), or None without scores."""
    bounds = _bounds(scope, now, source)
    if bounds is None or not models:
        return None
    step, windows = buckets(*bounds, tz=scope.tz)
    ts = [int(lo.timestamp()) for lo, _ in windows]
    edges = [*ts, int(windows[-1][1].timestamp())]
    if scope.session or step % HOUR:
        g = cube.Grid(tuple(edges))
        rows = _raw_scores(replace(scope, start=bounds[0], end=bounds[1]), score_type)
        per = _fold_raw(rows, score_type, lambda m, at: (m, g.key(epoch_s(at))))
    else:
        shared = getattr(source, "series_cube", None)
        c = shared(scope, bounds) if shared else cube.Cube(scope, bounds[0], bounds[1])
        per = c.scores(score_type.pk, ("resolved_model", "t"), cube.grid(step, edges))
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
                when = dt.datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M")
                rows.append({"model": s["model"], "t": when, "scores": s["n"][i],
                             "mean": s["mean"][i]})  # fmt: skip
    return rows


def scores_report(scope, score_type=None, *, ttft, now=None, source=None):
    """The scores section of the latency page (`latency.latency_report` builds it). `score_type`:
    a ScoreType (default: thumbs); `ttft`: the latency report's rows per resolved model
    (`by_resolved`), whose stream count and TTFT p50 and p95 the table shows beside the scores
    (TTFT has one derivation: this builder takes the latency page's figures, never its own);
    `source`: the latency report's (`per_model`)."""
    now = now or dt.datetime.now(dt.UTC)
    score_type = score_type or default_type()
    report = ScoresReport(score_type=score_type)
    if score_type is None:
        return report
    if scope.session:
        report.method = cube.EXACT
    per = per_model(scope, score_type, now, source)
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
    report.series = series(scope, score_type, models, now, source)
    if report.series:
        report.series_rows = series_rows(report.series, zone=scope.zone)
    return report
