"""The routing page (/routing/): for requests with `model: "auto"`, which model the router
picked (shares, per category and source, over time), how long the decision took, sample
reasoning, auto against pinned requests, and pinned requests that were routed anyway.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from django.db import connection

from dashboard.stats import cube
from dashboard.stats.pairs import (
    _group_where,
    _series_bounds,
    _summary,
    fold,
    model_pairs,
    pair_aggregates,
    time_series,
)
from dashboard.stats.sql import (
    IDX_CREATED,
    IDX_PAIR,
    IDX_PINNED_ROUTED,
    PERCENTILES,
    Scope,
    _dicts,
    _findings_in_scope,
    _from,
    _pct,
    _q,
    _rows,
    _scalars,
    _versioned,
    buckets,
    index_for,
    percentiles,
    scope_where,
)
from streams.store.aggregates import DECISION, ERROR_BOUND, HOUR, TTFT

AUTO = "auto"
SAMPLE_REASONS = 3


@dataclass
class RoutingReport:
    scope: Scope
    empty: bool
    version: str = ""
    total: int = 0
    shares: list = field(default_factory=list)
    categories: list = field(default_factory=list)
    matrix: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    decision: list = field(default_factory=list)
    series: dict | None = None
    trend_models: list = field(default_factory=list)
    trend_rows: list = field(default_factory=list)
    reasons: list = field(default_factory=list)
    auto_vs_pinned: list = field(default_factory=list)
    pinned_routed: list = field(default_factory=list)
    pinned_routed_count: int = 0
    pinned_routed_findings: int = 0
    models_chosen: int = 0  # resolved models among the shares, "(none)" not counted
    # cube.EXACT (raw rows) or cube.AGGREGATED (percentiles within `error_bound_pct`)
    method: str = cube.EXACT
    error_bound_pct: float = 100 * ERROR_BOUND


def _routing_groups(scope, pairs):
    """(routing_category, routing_source, resolved_model) → count over auto streams, one small
    GROUP BY per resolved model on the pair index."""
    base = scope_where(scope, skip=("resolved_model", "requested_model"))
    parts = []
    models = sorted({r for r, q in pairs if q == AUTO})
    for i, model in enumerate(models):
        w = base.copy().eq("resolved_model", model).eq("requested_model", AUTO)
        cat, src = _q("routing_category"), _q("routing_source")
        parts.append(
            (
                f"SELECT {i}, {cat}, {src}, COUNT(*) FROM {_from(IDX_PAIR, w)} WHERE {w.sql()} "
                f"GROUP BY {cat}, {src}",
                w.params,
            )
        )
    return [(models[i], cat, src, n) for i, cat, src, n in _rows(parts)]


@_versioned
def routing_report(scope, *, now=None):
    """Everything the routing page shows, for requests with `model: "auto"`."""
    now = now or dt.datetime.now(dt.UTC)
    scope = replace(scope, requested_model="", resolved_model="")
    if cube.method(scope) == cube.AGGREGATED:
        return _aggregated(scope, now)
    pairs = model_pairs(scope)
    aggregates = pair_aggregates(scope, pairs)
    report = RoutingReport(scope=scope, empty=True)
    report.auto_vs_pinned = _auto_vs_pinned(scope, aggregates)
    report.pinned_routed, report.pinned_routed_count = pinned_with_routing(scope)
    report.pinned_routed_findings = pinned_routing_findings(scope)
    auto = {p: a for p, a in aggregates.items() if p[1] == AUTO}
    if not auto:
        return report
    report.empty = False
    auto_scope = replace(scope, requested_model=AUTO)
    per_model = fold(auto, lambda p: p[0])
    total = sum(a["count"] for a in per_model.values())
    report.total = total
    pairs_auto = list(auto)
    wheres = {
        m: (_group_where(auto_scope, pairs_auto, lambda p, m=m: p[0] == m), a["ttft_n"])
        for m, a in per_model.items()
    }
    pcts = percentiles(wheres, _q("ttft_ms"), (500, 950))
    # time to the routing decision: routing event − request written, in ms
    decision_value = f"({_q('routing_us')} - {_q('request_written_us')}) / 1000.0"
    routed = {m: a["routed"] for m, a in per_model.items()}
    decision_where = {
        m: (wheres[m][0].copy().add(f"{_q('request_written_us')} IS NOT NULL"), 0)
        for m in per_model
    }
    # the count of values for the ranks must use exactly the same conditions
    n_decision = _scalars(
        [
            (
                f"SELECT COUNT({decision_value}) FROM {_from(index_for(w, ordered=False), w)} "
                f"WHERE {w.sql()}",
                w.params,
            )
            for w, _ in decision_where.values()
        ]
    )
    decision_where = {
        m: (w, n) for (m, (w, _)), n in zip(decision_where.items(), n_decision, strict=True)
    }
    dpcts = percentiles(decision_where, decision_value, (500, 950), narrow=True)
    for model, agg in sorted(per_model.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
        report.shares.append(_share(model, agg, total, pcts, dpcts, routed[model]))
        report.models_chosen += bool(model)
    groups = _routing_groups(scope, pairs_auto)
    models = [s["model"] for s in report.shares]
    categories = {}
    sources = {}
    for model, cat, src, n in groups:
        categories.setdefault(cat, {}).setdefault(model, 0)
        categories[cat][model] += n
        sources[src] = sources.get(src, 0) + n
    _fill_matrix(report, categories, sources, models, total)
    report.series = time_series(auto_scope, auto, [m for m in models if m], now, value="*", qs=())
    _fill_trend(report)
    report.reasons = sample_reasons(auto_scope, [c for c in report.categories if c])
    return report


def _auto_vs_pinned(scope, aggregates):
    def side(pair):
        if pair[1] == AUTO:
            return "auto"
        if pair[1]:
            return "pinned"
        return None

    groups = fold(aggregates, side)
    pairs = list(aggregates)
    wheres = {
        g: (_group_where(scope, pairs, lambda p, g=g: side(p) == g), agg["ttft_n"])
        for g, agg in groups.items()
    }
    pcts = percentiles(wheres, _q("ttft_ms"))
    return [{"side": g, **_summary(groups[g], pcts[g])} for g in ("auto", "pinned") if g in groups]


def sample_reasons(scope, categories, per_category=SAMPLE_REASONS, look_at=50):
    """Up to `per_category` distinct recent reasoning strings per routing category (the most
    recent `look_at` routed streams of each are read; the text is untrusted and escaped by
    the template)."""
    out = []
    for cat in categories:
        where = scope_where(scope).eq("routing_category", cat)
        where.add(f"{_q('routing_us')} IS NOT NULL")
        sql = (
            f"SELECT {_q('routing_reasoning')}, {_q('resolved_model')} "
            f"FROM {_from(IDX_CREATED, where)} "
            f"WHERE {where.sql()} ORDER BY {_q('created_at')} DESC LIMIT {int(look_at)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, where.params)
            rows = cursor.fetchall()
        seen = []
        for text, model in rows:
            if text and text not in [t for t, _ in seen]:
                seen.append((text, model))
            if len(seen) >= per_category:
                break
        out.append({"category": cat, "samples": [{"text": t, "model": m} for t, m in seen]})
    return out


PINNED_ROUTED_SHOWN = 50


def _pinned_routed_where(scope):
    where = scope_where(scope, skip=("requested_model",))
    # exactly the condition of the partial index stream_pinned_routed
    where.add(f"{_q('routing_us')} IS NOT NULL")
    where.add(f"NOT ({_q('requested_model')} IN ('auto', ''))")
    return where


def pinned_with_routing(scope, limit=PINNED_ROUTED_SHOWN):
    """Pinned requests that still got a routing event (the protocol says the router is skipped
    when the model is pinned): the newest `limit`, and how many in all."""
    where = _pinned_routed_where(scope)
    cols = [
        "id",
        "created_at",
        "requested_model",
        "resolved_model",
        "routing_category",
        "routing_source",
        "status",
    ]
    rows = _dicts(
        f"SELECT {', '.join(_q(c) for c in cols)} FROM {_from(IDX_PINNED_ROUTED, where)} "
        f"WHERE {where.sql()} ORDER BY {_q('created_at')} DESC LIMIT {int(limit)}",
        where.params,
        cols,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM {_from(IDX_PINNED_ROUTED, where)} WHERE {where.sql()}",
            where.params,
        )
        count = cursor.fetchone()[0]
    return rows, count


def pinned_routing_findings(scope):
    """How many `routing_on_pinned_model` findings the checker reported in scope."""
    return _findings_in_scope(scope).filter(code="routing_on_pinned_model").count()


# ---------------------------------------------------------------------------------------------
# The same report from the pre-aggregates (dashboard/stats/cube.py): counts and shares exact,
# percentiles from log buckets (within ERROR_BOUND).


def _aggregated(scope, now):
    report = RoutingReport(scope=scope, empty=True, method=cube.AGGREGATED)
    c = cube.Cube(scope)
    aggregates = cube.pair_aggregates(c)
    hists = c.histograms(TTFT, ("resolved_model", "requested_model"))

    def side(pair):
        if pair[1] == AUTO:
            return "auto"
        return "pinned" if pair[1] else None

    groups = fold(aggregates, side)
    members = {g: [p for p in aggregates if side(p) == g] for g in groups}
    pcts = cube.group_percentiles(
        hists, members, PERCENTILES, {g: a["ttft_max"] for g, a in groups.items()}
    )
    report.auto_vs_pinned = [
        {"side": g, **_summary(groups[g], pcts[g])} for g in ("auto", "pinned") if g in groups
    ]
    report.pinned_routed, report.pinned_routed_count = pinned_with_routing(scope)
    report.pinned_routed_findings = sum(c.findings((), code="routing_on_pinned_model").values())
    auto = {p: a for p, a in aggregates.items() if p[1] == AUTO}
    if not auto:
        return report
    report.empty = False
    auto_scope = replace(scope, requested_model=AUTO)
    per_model = fold(auto, lambda p: p[0])
    total = sum(a["count"] for a in per_model.values())
    report.total = total
    members = {m: [p for p in auto if p[0] == m] for m in per_model}
    maxima = {m: a["ttft_max"] for m, a in per_model.items()}
    pcts = cube.group_percentiles(hists, members, (500, 950), maxima)
    decisions = c.histograms(DECISION, ("resolved_model", "requested_model"))
    dpcts = cube.group_percentiles(decisions, members, (500, 950))
    for model, a in sorted(per_model.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
        report.shares.append(_share(model, a, total, pcts, dpcts, a["routed"]))
        report.models_chosen += bool(model)
    models = [s["model"] for s in report.shares]
    categories, sources = {}, {}
    routed = c.routing(("resolved_model", "routing_category", "routing_source"))
    for (model, cat, src), n in routed.items():
        if not n:
            continue
        categories.setdefault(cat, {}).setdefault(model, 0)
        categories[cat][model] += n
        sources[src] = sources.get(src, 0) + n
    _fill_matrix(report, categories, sources, models, total)
    series_models = [m for m in models if m]
    report.series = _series_counts(auto_scope, auto, series_models, now)
    _fill_trend(report)
    report.reasons = sample_reasons(auto_scope, [c_ for c_ in report.categories if c_])
    return report


def _share(model, agg, total, pcts, dpcts, routed):
    """One model's row of the share table (exact and pre-aggregated paths alike)."""
    summary = _summary(agg, pcts[model])
    return {
        "model": model,
        "count": agg["count"],
        "share": agg["count"] / total if total else None,
        "share_pct": _pct(agg["count"] / total) if total else None,
        "ttft_p50": pcts[model][500],
        "ttft_p95": pcts[model][950],
        "error_rate": summary["error_rate"],
        "error_pct": summary["error_pct"],
        "routed": routed,
        "decision_p50": dpcts[model][500],
        "decision_p95": dpcts[model][950],
    }


def _fill_trend(report):
    """The share-over-time table's rows from `report.series` (both paths)."""
    if report.series:
        report.trend_models = [x["model"] for x in report.series["series"]]
        report.trend_rows = [
            {
                "t": dt.datetime.fromtimestamp(t, dt.UTC),
                "counts": [x["n"][i] for x in report.series["series"]],
            }
            for i, t in enumerate(report.series["t"])
        ]


def _fill_matrix(report, categories, sources, models, total):
    """The category × model matrix, the sources and the decision-time rows of `report`, for
    the exact and the pre-aggregated paths alike."""
    report.categories = sorted(categories, key=lambda c: (-sum(categories[c].values()), c))
    for cat in report.categories:
        row_total = sum(categories[cat].values())
        report.matrix.append(
            {
                "category": cat,
                "total": row_total,
                "cells": [
                    {
                        "model": m,
                        "count": categories[cat].get(m, 0),
                        "share": categories[cat].get(m, 0) / row_total if row_total else None,
                        "share_pct": _pct(categories[cat].get(m, 0) / row_total)
                        if row_total
                        else None,
                    }
                    for m in models
                ],
            }
        )
    report.sources = [
        {"source": s, "count": n, "share": n / total, "share_pct": _pct(n / total)}
        for s, n in sorted(sources.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    report.decision = [
        {
            "model": s["model"],
            "p50": s["decision_p50"],
            "p95": s["decision_p95"],
            "n": s["routed"],
        }
        for s in report.shares
    ]


def _series_counts(auto_scope, auto, models, now):
    bounds = _series_bounds(auto_scope, now)
    if bounds is None or not models:
        return None
    step, windows = buckets(*bounds)
    if step % HOUR:
        return cube.short_series(
            auto_scope, models, bounds, step, windows, _q("id"), (), pairs=list(auto)
        )
    usage = cube.Cube(auto_scope, bounds[0], bounds[1]).usage(("resolved_model", "t"), step)
    ts = [int(lo.timestamp()) for lo, _ in windows]
    return {
        "step": step,
        "t": ts,
        "series": [
            {"model": m, "n": [usage.get((m, t), {}).get("n", 0) for t in ts]} for m in models
        ],
    }
