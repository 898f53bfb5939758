"""The latency page (/latency/): TTFT per resolved and requested model (counts, percentiles,
rates, the phases of TTFT), a histogram, a time series, the slowest streams, and a comparison
of two models or of a range with the one before it.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections import Counter
from dataclasses import dataclass, field

from dashboard.stats import cube
from dashboard.stats.pairs import (
    SERIES_PERCENTILES,
    _group_where,
    _series_bounds,
    _summary,
    fold,
    model_pairs,
    pair_aggregates,
    time_series,
)
from dashboard.stats.sql import (
    IDX_PAIR,
    PCT_NAMES,
    PERCENTILES,
    Scope,
    _dicts,
    _from,
    _q,
    _rows,
    _scalars,
    _versioned,
    buckets,
    history_start,
    index_for,
    percentiles,
    scope_where,
)
from streams.store.aggregates import ERROR_BOUND, HOUR, TTFT, bucket_value, percentile, top_band

SLOWEST = 20
HISTOGRAM_BINS = 40


# The phases of TTFT, from the milestones (µs since the attempt started). Means, not medians:
# means add up, so the phases of a model sum to its mean time to first token (+ connect).
PHASES = (
    ("connect", "connect + send request"),
    ("headers", "wait for response headers"),
    ("created", "headers → response.created"),
    ("routing", "routing decision (auto only)"),
    ("first_token", "→ first output token"),
)


@functools.cache
def _phase_sql():
    m = {
        n: _q(n)
        for n in (
            "request_written_us",
            "headers_us",
            "created_event_us",
            "routing_us",
            "first_token_us",
        )
    }
    complete = " AND ".join(f"{m[n]} IS NOT NULL" for n in m if n != "routing_us")
    select = ", ".join(
        [
            "COUNT(*)",
            f"SUM({m['request_written_us']})",
            f"SUM({m['headers_us']})",
            f"SUM({m['created_event_us']})",
            f"SUM(COALESCE({m['routing_us']}, {m['created_event_us']}))",
            f"SUM({m['first_token_us']})",
        ]
    )
    return complete, select


def phases(scope, aggregates, key):
    """{group: [{key, label, ms}]}: mean duration of each phase, over the streams of each
    group that reached every milestone up to the first token (one seek per pair)."""
    complete, select = _phase_sql()
    base = scope_where(scope, skip=("resolved_model", "requested_model")).add(complete)
    pairs = list(aggregates)
    parts = []
    for i, (resolved, requested) in enumerate(pairs):
        where = base.copy().eq("resolved_model", resolved).eq("requested_model", requested)
        parts.append(
            (
                f"SELECT {i}, {select} FROM {_from(IDX_PAIR, where)} WHERE {where.sql()}",
                where.params,
            )
        )
    sums = {}
    for i, n, *values in _rows(parts):
        if not n:
            continue
        k = key(pairs[i])
        acc = sums.setdefault(k, [0] * 6)
        for j, v in enumerate([n, *values]):
            acc[j] += v or 0
    out = {}
    for k, (n, written, headers, created, routed_or_created, first) in sums.items():
        ms = [
            written,
            headers - written,
            created - headers,
            routed_or_created - created,
            first - routed_or_created,
        ]
        out[k] = [
            {"key": key_, "label": label, "ms": v / n / 1000}
            for (key_, label), v in zip(PHASES, ms, strict=True)
        ]
    return out


def _is_narrow(span_s, history_s):
    """Whether a time window holds few of a group's rows: then reading the window's rows and
    sorting them beats walking the group's ttft-ordered index (which visits all its rows)."""
    if span_s is None or not history_s:
        return False
    # The crossover measured on SQLite (docs/performance.md, "Analytics").
    return span_s / history_s < 0.08


def _rows_for(scope, aggregates, key, label, narrow):
    """Table rows (with TTFT percentiles) of the groups key(pair)."""
    groups = fold(aggregates, key)
    pairs = list(aggregates)
    wheres = {
        g: (_group_where(scope, pairs, lambda p, g=g: key(p) == g), agg["ttft_n"])
        for g, agg in groups.items()
    }
    pcts = percentiles(wheres, _q("ttft_ms"), narrow=narrow)
    rows = [{label: g, **_summary(agg, pcts[g])} for g, agg in groups.items()]
    rows.sort(key=lambda r: (-r["count"], str(r[label])))
    return rows


def overall(scope, aggregates, narrow):
    """The 'all streams' row: folded aggregates, percentiles over the whole scope."""
    agg = fold(aggregates, lambda p: "all").get("all")
    if agg is None:
        return None
    where = scope_where(scope)
    pcts = percentiles({"all": (where, agg["ttft_n"])}, _q("ttft_ms"), narrow=narrow)["all"]
    return _summary(agg, pcts)


def histogram(scope, aggregates, rows):
    """TTFT histogram per resolved model: equal bins from 0 to a round number above the
    highest p99 (one overflow bin holds the rest)."""
    top = max((r["p99"] for r in rows if r["p99"] is not None), default=None)
    if top is None:
        return None
    width = _nice(top / HISTOGRAM_BINS)
    nbins = max(1, min(HISTOGRAM_BINS, math.ceil(top / width)))
    edges = [i * width for i in range(nbins + 1)]
    models = [r["model"] for r in rows]
    pairs = list(aggregates)
    subqueries = []
    for model in models:
        where = _group_where(scope, pairs, lambda p, m=model: p[0] == m)
        for i in range(nbins + 1):
            w = where.copy().add(f"{_q('ttft_ms')} >= %s", edges[i])
            if i < nbins:
                w.add(f"{_q('ttft_ms')} < %s", edges[i + 1])
            index = index_for(w, ordered=True)
            subqueries.append((f"SELECT COUNT(*) FROM {_from(index, w)} WHERE {w.sql()}", w.params))
    counts = _scalars(subqueries)
    series = []
    for j, model in enumerate(models):
        series.append({"model": model, "counts": counts[j * (nbins + 1) : (j + 1) * (nbins + 1)]})
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


def series_rows(series, qs=SERIES_PERCENTILES):
    """A time series as table rows: [{model, t, n, p50, p95}] (buckets with streams only),
    ready to print (ms rounded, times as text): hundreds of rows, and Django's floatformat
    and date filters are slow per cell (docs/performance.md, "Analytics")."""
    rows = []
    for s in series["series"]:
        for i, t in enumerate(series["t"]):
            if s["n"][i]:
                when = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")
                row = {"model": s["model"], "t": when, "n": s["n"][i]}
                for q in qs:
                    v = s[PCT_NAMES[q]][i]
                    row[PCT_NAMES[q]] = None if v is None else round(v)
                rows.append(row)
    return rows


def _finish(report, scope, band=None):
    """What both ways of computing a report end with: the table forms of the histogram and the
    series, and the slowest streams (raw rows, exact, either way; `band`: see `slowest`)."""
    if report.histogram:
        report.histogram_rows = histogram_rows(report.histogram)
    if report.series:
        report.series_rows = series_rows(report.series)
    report.slowest = slowest(scope, band=band)
    return report


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
    where = scope_where(scope).add(f"{_q('ttft_ms')} IS NOT NULL")
    if band is not None:
        where.add(f"{_q('ttft_ms')} > %s AND {_q('ttft_ms')} <= %s", *band)
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
        "output_tokens",
    ]
    sql = (
        f"SELECT {', '.join(_q(c) for c in cols)} FROM {_from(index, where)} WHERE {where.sql()} "
        f"ORDER BY {_q('ttft_ms')} DESC LIMIT {int(limit)}"
    )
    return _dicts(sql, where.params, cols)


@dataclass
class Comparison:
    label_a: str
    label_b: str
    a: dict | None
    b: dict | None
    deltas: list = field(default_factory=list)


COMPARED = (
    [("count", "Streams", "count")]
    + [(PCT_NAMES[q], f"TTFT {PCT_NAMES[q]} (ms)", "ms") for q in PERCENTILES]
    + [
        ("max", "TTFT max (ms)", "ms"),
        ("itl_mean", "Inter-token latency, mean (ms)", "ms"),
        ("tps", "Output tokens/s (1000 / mean gap)", "rate"),
        ("error_pct", "Error rate (%)", "pct"),
        ("stall_pct", "Stall rate (%)", "pct"),
        ("truncation_pct", "Truncation rate (%)", "pct"),
    ]
)


def compare(scope_a, label_a, scope_b, label_b, known=None):
    """Two scopes side by side (two models, or one range and the one before it): B − A as a
    relative change, and in percentage points for rates. `known`: {scope: its overall row}
    already computed."""
    known = known or {}
    a = known[scope_a] if scope_a in known else _one_row(scope_a)
    b = known[scope_b] if scope_b in known else _one_row(scope_b)
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


def _one_row(scope):
    if cube.method(scope) == cube.AGGREGATED:
        c = cube.Cube(scope)
        aggregates = cube.pair_aggregates(c)
        hists = c.histograms(TTFT, ("resolved_model", "requested_model"))
        return _overall_from(aggregates, hists)
    aggregates = pair_aggregates(scope)
    return overall(scope, aggregates, narrow=False)


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


@_versioned
def latency_report(scope, *, now=None, compare_with=None):
    """Everything the latency page shows. `compare_with`: (label_a, scope_a, label_b, scope_b)."""
    now = now or dt.datetime.now(dt.UTC)
    pairs = model_pairs(scope)
    report = LatencyReport(
        scope=scope,
        empty=True,
        resolved_models=sorted({r for r, _ in pairs if r}),
        requested_models=sorted({q for _, q in pairs if q}),
    )
    if cube.method(scope) == cube.AGGREGATED:
        return _aggregated(report, scope, now, compare_with)
    aggregates = pair_aggregates(scope, pairs)
    if compare_with is not None:
        label_a, scope_a, label_b, scope_b = compare_with
        report.comparison = compare(scope_a, label_a, scope_b, label_b)
    if not aggregates:
        return report
    report.empty = False
    start = scope.start or history_start(scope)
    history_s = (now - start).total_seconds() if start else None
    narrow = _is_narrow(scope.span_s, history_s) if scope.start else False
    report.overall = overall(scope, aggregates, narrow)
    report.by_resolved = _rows_for(scope, aggregates, lambda p: p[0], "model", narrow)
    phase_means = phases(scope, aggregates, lambda p: p[0])
    for row in report.by_resolved:
        row["phases"] = phase_means.get(row["model"])
    report.by_requested = _rows_for(scope, aggregates, lambda p: p[1], "model", narrow)
    report.histogram = histogram(scope, aggregates, [r for r in report.by_resolved if r["model"]])
    models = [r["model"] for r in report.by_resolved if r["model"] and r["ttft_n"]]
    report.series = time_series(scope, aggregates, models, now)
    return _finish(report, scope)


# ---------------------------------------------------------------------------------------------
# The same report from the pre-aggregates (dashboard/stats/cube.py): counts, sums, rates and
# maxima exact, percentiles and the histogram's bins from log buckets (within ERROR_BOUND).


def _rows_from(aggregates, hists, key, label):
    groups = fold(aggregates, key)
    members = {g: [p for p in aggregates if key(p) == g] for g in groups}
    maxima = {g: a["ttft_max"] for g, a in groups.items()}
    pcts = cube.group_percentiles(hists, members, PERCENTILES, maxima)
    rows = [{label: g, **_summary(a, pcts[g])} for g, a in groups.items()]
    rows.sort(key=lambda r: (-r["count"], str(r[label])))
    return rows


def _overall_from(aggregates, hists):
    if not aggregates:
        return None
    rows = _rows_from(aggregates, hists, lambda p: "all", "model")
    row = rows[0]
    del row["model"]
    return row


def _phases_from(c):
    out = {}
    for (model,), v in c.usage(("resolved_model",)).items():
        n = v["phase_n"]
        if not n:
            continue
        written, headers = v["written_sum_us"], v["headers_sum_us"]
        created, routed = v["created_sum_us"], v["routed_or_created_sum_us"]
        first = v["first_token_sum_us"]
        ms = [written, headers - written, created - headers, routed - created, first - routed]
        out[model] = [
            {"key": k, "label": label, "ms": x / n / 1000}
            for (k, label), x in zip(PHASES, ms, strict=True)
        ]
    return out


def _histogram_from(hists, rows):
    top = max((r["p99"] for r in rows if r["p99"] is not None), default=None)
    if top is None:
        return None
    width = _nice(top / HISTOGRAM_BINS)
    nbins = max(1, min(HISTOGRAM_BINS, math.ceil(top / width)))
    edges = [i * width for i in range(nbins + 1)]
    series = []
    for r in rows:
        counts = [0] * (nbins + 1)
        merged = {}
        for (resolved, _), h in hists.items():
            if resolved == r["model"]:
                for b, n in h.items():
                    merged[b] = merged.get(b, 0) + n
        for b, n in merged.items():
            counts[min(nbins, int(bucket_value(b) // width))] += n
        series.append({"model": r["model"], "counts": counts})
    return {"edges": edges, "width": width, "series": series}


def _series_from(scope, aggregates, models, now, metric=TTFT, qs=SERIES_PERCENTILES):
    """time_series from the cube when its steps are whole hours (ranges over ~28 h); shorter
    ranges read their few rows raw."""
    bounds = _series_bounds(scope, now)
    if bounds is None or not models:
        return None
    step, windows = buckets(*bounds)
    if step % HOUR:
        return cube.short_series(
            scope, models, bounds, step, windows, _q("ttft_ms"), qs, pairs=list(aggregates)
        )
    c = cube.Cube(scope, bounds[0], bounds[1])
    hists = c.histograms(metric, ("resolved_model", "t"), step)
    ts = [int(lo.timestamp()) for lo, _ in windows]
    series = []
    for model in models:
        entry = {"model": model, "n": []}
        for q in qs:
            entry[PCT_NAMES[q]] = []
        for t in ts:
            h = hists.get((model, t), {})
            entry["n"].append(sum(h.values()))
            for q in qs:
                entry[PCT_NAMES[q]].append(percentile(h, q))
        series.append(entry)
    return {"step": step, "t": ts, "series": series}


def _aggregated(report, scope, now, compare_with):
    report.method = cube.AGGREGATED
    c = cube.Cube(scope)
    aggregates = cube.pair_aggregates(c)
    hists = c.histograms(TTFT, ("resolved_model", "requested_model")) if aggregates else {}
    overall = _overall_from(aggregates, hists)
    if compare_with is not None:
        label_a, scope_a, label_b, scope_b = compare_with
        # "this range" against the one before is this report's own overall row
        report.comparison = compare(
            scope_a, label_a, scope_b, label_b, known={scope: overall and dict(overall)}
        )
    if not aggregates:
        return report
    report.empty = False
    report.overall = overall
    report.by_resolved = _rows_from(aggregates, hists, lambda p: p[0], "model")
    phase_means = _phases_from(c)
    for row in report.by_resolved:
        row["phases"] = phase_means.get(row["model"])
    report.by_requested = _rows_from(aggregates, hists, lambda p: p[1], "model")
    report.histogram = _histogram_from(hists, [r for r in report.by_resolved if r["model"]])
    models = [r["model"] for r in report.by_resolved if r["model"] and r["ttft_n"]]
    report.series = _series_from(scope, aggregates, models, now)
    band = None
    if scope.tag:
        merged = Counter()
        for h in hists.values():
            merged.update(h)
        band = top_band(merged, SLOWEST)
    return _finish(report, scope, band)
