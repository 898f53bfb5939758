"""The routing page (/routing/): for requests with `model: "auto"`, which model the router
picked (shares, per category and source, over time), how long the decision took, sample
reasoning, auto against pinned requests, and pinned requests that were routed anyway.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from django.db import connection

from streams.stats import cube
from streams.stats.pairs import fold, pair_summary
from streams.stats.source import source_for
from streams.stats.sql import (
    IDX_PINNED_ROUTED,
    Scope,
    dict_rows,
    from_clause,
    percent,
    quote,
    scope_where,
    time_index,
    versioned,
)
from streams.store import known_secrets
from streams.store.aggregates import DECISION, ERROR_BOUND

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


@versioned
def routing_report(scope, *, now=None):
    """Everything the routing page shows, for requests with `model: "auto"`."""
    now = now or dt.datetime.now(dt.UTC)
    scope = replace(scope, requested_model="", resolved_model="")
    source = source_for(scope, now)
    report = RoutingReport(scope=scope, empty=True, method=source.method)
    aggregates = source.aggregates()
    report.auto_vs_pinned = _auto_vs_pinned(source)
    report.pinned_routed, report.pinned_routed_count = pinned_with_routing(scope)
    found = source.findings((), code="routing_on_pinned_model")
    report.pinned_routed_findings = sum(found.values())
    auto = {p: a for p, a in aggregates.items() if p[1] == AUTO}
    if not auto:
        return report
    report.empty = False
    per_model = fold(auto, lambda p: p[0])
    total = sum(a["count"] for a in per_model.values())
    report.total = total
    members = {m: [p for p in auto if p[0] == m] for m in per_model}
    pcts = source.percentiles(members, (500, 950))
    dpcts = source.percentiles(members, (500, 950), metric=DECISION)
    by_count = sorted(
        per_model.items(), key=lambda kv: (-kv[1]["count"], known_secrets.label_key(kv[0]))
    )
    for model, a in by_count:
        report.shares.append(_share(model, a, total, pcts, dpcts))
        report.models_chosen += bool(model)
    models = [s["model"] for s in report.shares]
    categories, sources = {}, {}
    for (model, cat, src), n in source.routing().items():
        if not n:
            continue
        categories.setdefault(cat, {}).setdefault(model, 0)
        categories[cat][model] += n
        sources[src] = sources.get(src, 0) + n
    _fill_matrix(report, categories, sources, models, total)
    report.series = source.series([m for m in models if m], qs=(), requested_model=AUTO)
    _fill_trend(report)
    auto_scope = replace(scope, requested_model=AUTO)
    report.reasons = sample_reasons(auto_scope, [c for c in report.categories if c])
    return report


def _auto_vs_pinned(source):
    """The auto and the pinned requests' table rows (counts, rates, TTFT percentiles)."""

    def side(pair):
        if pair[1] == AUTO:
            return "auto"
        return "pinned" if pair[1] else None

    aggregates = source.aggregates()
    groups = fold(aggregates, side)
    pcts = source.percentiles({g: [p for p in aggregates if side(p) == g] for g in groups})
    return [
        {"side": g, **pair_summary(groups[g], pcts[g])} for g in ("auto", "pinned") if g in groups
    ]


def sample_reasons(scope, categories, per_category=SAMPLE_REASONS, look_at=50):
    """Up to `per_category` distinct recent reasoning strings per routing category (the most
    recent `look_at` routed streams of each are read; the text is untrusted and escaped by
    the template).

    The categories are read together, in one walk down the time index (the newest `look_at`
    × 4 a category), not one walk each: with a filter the index does not hold (a tag), a walk
    for 50 streams of a category passed nearly all of the project's streams in the range
    (a member's 30 days with a tag at 1M streams: 4 walks of ~50 ms CPU). A category whose
    newest `look_at` lie further back and whose texts have not shown yet is read again with
    the others left, four times as far."""
    found = {}
    pending = sorted(set(categories))
    factor = 4
    while pending:
        limit = look_at * len(pending) * factor
        where = _routed(scope).among("routing_category", pending)
        rows = _newest(where, limit, ("routing_category", "routing_reasoning", "resolved_model"))
        newest = {cat: [] for cat in pending}
        for cat, text, model in rows:
            if len(newest[cat]) < look_at:
                newest[cat].append((text, model))
        left = []
        for cat in pending:
            seen = _distinct_texts(newest[cat], per_category)
            if len(seen) >= per_category or len(newest[cat]) >= look_at or len(rows) < limit:
                found[cat] = seen
            else:
                left.append(cat)
        pending, factor = left, factor * 4
    return [
        {"category": cat, "samples": [{"text": t, "model": m} for t, m in found[cat]]}
        for cat in categories
    ]


def _routed(scope):
    return scope_where(scope).add(f"{quote('routing_us')} IS NOT NULL")


def _newest(where, limit, cols):
    """`cols` of the newest `limit` streams matching `where`, newest first."""
    sql = (
        f"SELECT {', '.join(quote(c) for c in cols)} "
        f"FROM {from_clause(time_index(where), where)} "
        f"WHERE {where.sql()} ORDER BY {quote('created_at')} DESC LIMIT {int(limit)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, where.params)
        return cursor.fetchall()


def _distinct_texts(rows, n):
    """The first `n` distinct non-empty texts of (text, model) rows, with their models."""
    seen = []
    for text, model in rows:
        if text and text not in [t for t, _ in seen]:
            seen.append((text, model))
        if len(seen) >= n:
            break
    return seen


PINNED_ROUTED_SHOWN = 50


def _pinned_routed_where(scope):
    where = scope_where(scope, skip=("requested_model",))
    # exactly the condition of the partial index stream_pinned_routed
    where.add(f"{quote('routing_us')} IS NOT NULL")
    where.add(f"NOT ({quote('requested_model')} IN ('auto', ''))")
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
    rows = dict_rows(
        f"SELECT {', '.join(quote(c) for c in cols)} FROM {from_clause(IDX_PINNED_ROUTED, where)} "
        f"WHERE {where.sql()} ORDER BY {quote('created_at')} DESC LIMIT {int(limit)}",
        where.params,
        cols,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM {from_clause(IDX_PINNED_ROUTED, where)} WHERE {where.sql()}",
            where.params,
        )
        count = cursor.fetchone()[0]
    return rows, count


def _share(model, agg, total, pcts, dpcts):
    """One model's row of the share table."""
    summary = pair_summary(agg, pcts[model])
    return {
        "model": model,
        "count": agg["count"],
        "share": agg["count"] / total if total else None,
        "share_pct": percent(agg["count"] / total) if total else None,
        "ttft_p50": pcts[model][500],
        "ttft_p95": pcts[model][950],
        "error_rate": summary["error_rate"],
        "error_pct": summary["error_pct"],
        "routed": agg["routed"],
        "decision_p50": dpcts[model][500],
        "decision_p95": dpcts[model][950],
    }


def _fill_trend(report):
    """The share-over-time table's rows from `report.series`."""
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
    """The category × model matrix, the sources and the decision-time rows of `report`."""
    report.categories = sorted(
        categories, key=lambda c: (-sum(categories[c].values()), known_secrets.label_key(c))
    )
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
                        "share_pct": percent(categories[cat].get(m, 0) / row_total)
                        if row_total
                        else None,
                    }
                    for m in models
                ],
            }
        )
    report.sources = [
        {"source": s, "count": n, "share": n / total, "share_pct": percent(n / total)}
        for s, n in sorted(sources.items(), key=lambda kv: (-kv[1], known_secrets.label_key(kv[0])))
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
