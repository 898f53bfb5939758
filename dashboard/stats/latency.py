"""The latency page (/latency/): TTFT per resolved and requested model (counts, percentiles,
rates, the phases of TTFT), a histogram, a time series, the slowest streams, and a comparison
of two models or of a range with the one before it.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _

from dashboard import dates
from dashboard.stats.scores import ScoresReport, scores_report
from streams.stats import cube
from streams.stats.pairs import fold, model_pairs, pair_summary
from streams.stats.source import source_for
from streams.stats.sql import (
    PCT_NAMES,
    PERCENTILES,
    SERIES_PERCENTILES,
    Scope,
    dict_rows,
    from_clause,
    index_for,
    quote,
    scope_where,
    versioned,
)
from streams.store import known_secrets
from streams.store.aggregates import ERROR_BOUND

SLOWEST = 20
HISTOGRAM_BINS = 40


# The phases of TTFT, from the milestones (µs since the attempt started). Means, not medians:
# means add up, so the phases of a model sum to its mean time to first token (+ connect).
PHASES = (
    ("connect", _("connect + send request")),
    ("headers", _("wait for response headers")),
    ("created", _("headers → response.created")),
    ("routing", _("routing decision (auto only)")),
    ("first_token", _("→ first output token")),
)


def phases(source):
    """{resolved model: [{key, label, ms}]}: the mean duration of each phase over the model's
    streams that reached every milestone up to the first token (`Source.phases`' sums)."""
    out = {}
    for model, (n, written, headers, created, routed, first) in source.phases().items():
        ms = [written, headers - written, created - headers, routed - created, first - routed]
        out[model] = [
            {"key": key, "label": label, "ms": v / n / 1000}
            for (key, label), v in zip(PHASES, ms, strict=True)
        ]
    return out


def table_rows(source, key, label="model"):
    """Table rows (counts, rates, TTFT percentiles) of the groups key(pair), busiest first."""
    aggregates = source.aggregates()
    groups = fold(aggregates, key)
    members = {g: [p for p in aggregates if key(p) == g] for g in groups}
    pcts = source.percentiles(members)
    rows = [{label: g, **pair_summary(a, pcts[g])} for g, a in groups.items()]
    rows.sort(key=lambda r: (-r["count"], known_secrets.label_key(str(r[label]))))
    return rows


def overall(source):
    """The 'all streams' row: folded aggregates, percentiles over the whole scope."""
    agg = fold(source.aggregates(), lambda p: "all").get("all")
    if agg is None:
        return None
    return pair_summary(agg, source.percentiles({"all": None})["all"])


def histogram(source, rows):
    """TTFT histogram per resolved model (`rows`): equal bins from 0 to a round number above
    the highest p99 (one overflow bin holds the rest)."""
    top = max((r["p99"] for r in rows if r["p99"] is not None), default=None)
    if top is None:
        return None
    width = _nice(top / HISTOGRAM_BINS)
    nbins = max(1, min(HISTOGRAM_BINS, math.ceil(top / width)))
    edges = [i * width for i in range(nbins + 1)]
    models = [r["model"] for r in rows]
    counts = source.histogram(models, edges)
    series = [{"model": m, "counts": counts[m]} for m in models]
    return {"edges": edges, "width": width, "series": series}


def histogram_rows(hist):
    """The histogram as table rows: [{lo, hi (None for the last bin), counts per model}]."""
    edges = hist["edges"]
    return [
        {
            "lo": lo,
            "hi": edges[i + 1] if i + 1 < len(edges) else None,
            "counts": [s["counts"][i] for s in hist["series"]],
        }
        for i, lo in enumerate(edges)
    ]


def series_rows(series, qs=SERIES_PERCENTILES, zone=dt.UTC):
    """A time series as table rows: [{model, t, n, p50, p95}] (buckets with streams only),
    ready to print (ms rounded, times as text, in `zone`): hundreds of rows, and Django's
    floatformat and date filters are slow per cell (docs/performance.md, "Analytics")."""
    rows = []
    for s in series["series"]:
        for i, t in enumerate(series["t"]):
            if s["n"][i]:
                when = dates.write(dt.datetime.fromtimestamp(t, zone), "minute", zone=False)
                row = {"model": s["model"], "t": when, "n": s["n"][i]}
                for q in qs:
                    v = s[PCT_NAMES[q]][i]
                    row[PCT_NAMES[q]] = None if v is None else round(v)
                rows.append(row)
    return rows


def _nice(x):
    """The smallest of 1, 2, 2.5, 5 × 10^k that is ≥ x."""
    if x <= 0:
        return 1
    exp = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10**exp >= x:
            return m * 10**exp
    return 10 ** (exp + 1)


def slowest(scope, limit=SLOWEST, band=None):
    """The streams with the highest TTFT in scope. `band` (lo, hi): where the scope's `limit`
    highest values lie, from its histogram (`aggregates.top_band`) — a rare tag's walk down
    the ttft order then reads only that band, not the history above and below it."""
    where = scope_where(scope).add(f"{quote('ttft_ms')} IS NOT NULL")
    if band is not None:
        where.add(f"{quote('ttft_ms')} > %s AND {quote('ttft_ms')} <= %s", *band)
    index = index_for(where, ordered=True)  # the top of the ttft order: O(limit / selectivity)
    cols = [
        "id",
        "created_at",
        "requested_model",
        "resolved_model",
        "status",
        "source",
        "ttft_ms",
        "duration_ms",
        "output_deltas",
    ]
    sql = (
        f"SELECT {', '.join(quote(c) for c in cols)} FROM {from_clause(index, where)} "
        f"WHERE {where.sql()} "
        f"ORDER BY {quote('ttft_ms')} DESC LIMIT {int(limit)}"
    )
    return dict_rows(sql, where.params, cols)


@dataclass
class Comparison:
    label_a: str
    label_b: str
    a: dict | None
    b: dict | None
    deltas: list = field(default_factory=list)


COMPARED = (
    [("count", _("Streams"), "count")]
    + [(PCT_NAMES[q], f"TTFT {PCT_NAMES[q]} (ms)", "ms") for q in PERCENTILES]
    + [
        ("max", _("TTFT max (ms)"), "ms"),
        ("itl_mean", _("Inter-token latency, mean (ms)"), "ms"),
        ("tps", _("Output tokens/s (1000 / mean gap)"), "rate"),
        ("error_pct", _("Error rate (%)"), "pct"),
        ("stall_pct", _("Stall rate (%)"), "pct"),
        ("truncation_pct", _("Truncation rate (%)"), "pct"),
    ]
)


def compare(scope_a, label_a, scope_b, label_b, now, known=None):
    """Two scopes side by side (two models, or one range and the one before it): B − A as a
    relative change, and in percentage points for rates. `known`: {scope: its overall row}
    already computed."""
    known = known or {}
    a = known[scope_a] if scope_a in known else overall(source_for(scope_a, now))
    b = known[scope_b] if scope_b in known else overall(source_for(scope_b, now))
    deltas = []
    for key, name, unit in COMPARED:
        va = a.get(key) if a else None
        vb = b.get(key) if b else None
        diff = vb - va if va is not None and vb is not None else None
        change_pct = 100 * diff / va if diff is not None and va and unit != "pct" else None
        deltas.append(
            {
                "key": key,
                "label": name,
                "unit": unit,
                "a": va,
                "b": vb,
                "diff": diff,
                "change_pct": change_pct,
            }  # fmt: skip
        )
    return Comparison(label_a, label_b, a, b, deltas)


@dataclass
class LatencyReport:
    scope: Scope
    empty: bool
    version: str = ""
    overall: dict | None = None
    by_resolved: list = field(default_factory=list)
    by_requested: list = field(default_factory=list)
    histogram: dict | None = None
    histogram_rows: list = field(default_factory=list)
    series: dict | None = None
    series_rows: list = field(default_factory=list)
    slowest: list = field(default_factory=list)
    comparison: Comparison | None = None
    resolved_models: list = field(default_factory=list)
    requested_models: list = field(default_factory=list)
    # cube.EXACT (raw rows) or cube.AGGREGATED (percentiles within `error_bound_pct`)
    method: str = cube.EXACT
    error_bound_pct: float = 100 * ERROR_BOUND
    # scores per resolved model beside TTFT (dashboard/stats/scores.py)
    scores: ScoresReport | None = None


@versioned
def latency_report(scope, *, now=None, compare_with=None, score_type=None):
    """Everything the latency page shows. `compare_with`: (label_a, scope_a, label_b, scope_b);
    `score_type`: the ScoreType of the scores section (default: thumbs)."""
    now = now or dt.datetime.now(dt.UTC)
    pairs = model_pairs(scope)
    source = source_for(scope, now)
    report = LatencyReport(
        scope=scope,
        empty=True,
        resolved_models=known_secrets.label_order({r for r, _ in pairs if r}),
        requested_models=known_secrets.label_order({q for _, q in pairs if q}),
        method=source.method,
    )
    report.overall = overall(source)
    if compare_with is not None:
        label_a, scope_a, label_b, scope_b = compare_with
        # "this range" against the one before is this report's own overall row
        known = {scope: report.overall and dict(report.overall)}
        report.comparison = compare(scope_a, label_a, scope_b, label_b, now, known)
    if report.overall is None:
        # (the scores of streams retention deleted are still in the rollups)
        report.scores = scores_report(scope, score_type, now=now, ttft=[], source=source)
        return report
    report.empty = False
    report.by_resolved = table_rows(source, lambda p: p[0])
    phase_means = phases(source)
    for row in report.by_resolved:
        row["phases"] = phase_means.get(row["model"])
    report.by_requested = table_rows(source, lambda p: p[1])
    report.histogram = histogram(source, [r for r in report.by_resolved if r["model"]])
    if report.histogram:
        report.histogram_rows = histogram_rows(report.histogram)
    models = [r["model"] for r in report.by_resolved if r["model"] and r["ttft_n"]]
    report.series = source.series(models)
    if report.series:
        report.series_rows = series_rows(report.series, zone=scope.zone)
    report.slowest = slowest(scope, band=source.top_band(SLOWEST))
    report.scores = scores_report(
        scope, score_type, now=now, ttft=report.by_resolved, source=source
    )
    return report
