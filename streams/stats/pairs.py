"""Aggregates per (resolved model, requested model) pair: the latency and routing pages fold
their groups from these (counts and sums add up; percentiles never do, so a group's are
computed over its own conditions, `group_where`, or its pairs' merged histograms).
"""

from __future__ import annotations

import datetime as dt
import functools

from django.db import connection

from streams.stats.sql import (
    ACTIVE,
    IDX_PAIR,
    IDX_STATUS,
    PCT_NAMES,
    PERCENTILES,
    ROLLUPS,
    access_where,
    distinct_values,
    divide,
    from_clause,
    history_span,
    memoized,
    percent,
    quote,
    scope_where,
    union_rows,
)

_STATUS_COUNTS = ("failed", "stalled", "truncated")
# Stream.ACTIVE_STATUSES as SQL literals (enum values: lowercase words, nothing to quote)
_ACTIVE_LITERALS = ", ".join(f"'{s}'" for s in ACTIVE if s.isalpha())


@functools.cache
def _pair_columns():
    """(name, SQL, fold) of the aggregates of one pair; fold is "sum" or "max". Each column
    costs time for every row read on SQLite (decoding the index record; docs/performance.md,
    "Analytics"), so only what the pages show is here."""
    status = quote("status")
    ttft, itl = quote("ttft_ms"), quote("inter_token_ms")
    cols = [
        ("count", "COUNT(*)", "sum"),
        ("active", f"COUNT(CASE WHEN {status} IN ({_ACTIVE_LITERALS}) THEN 1 END)", "sum"),
    ]
    for name in _STATUS_COUNTS:
        cols.append((name, f"COUNT(CASE WHEN {status} = '{name}' THEN 1 END)", "sum"))
    cols += [
        ("ttft_n", f"COUNT({ttft})", "sum"),
        ("ttft_sum", f"SUM({ttft})", "sum"),
        ("ttft_max", f"MAX({ttft})", "max"),
        ("itl_n", f"COUNT({itl})", "sum"),
        ("itl_sum", f"SUM({itl})", "sum"),
        ("routed", f"COUNT({quote('routing_us')})", "sum"),
    ]
    return tuple(cols)


def model_pairs(scope):
    """The (resolved, requested) pairs that occur among the streams `scope` may see (all time,
    which keeps the filter menus stable). On a large history from the day rollups, which hold
    every finished stream (also those retention deleted), and the few active rows: the loose
    index scan of the raw rows, with a user's filter, walked every row of each model the user
    never used (on SQLite, most of the page's time at 1M streams). On a small one by that
    scan, exact for rows written by any means. Read once per report."""
    return memoized(("model_pairs", scope.project_id), lambda: _model_pairs(scope))


def _model_pairs(scope):
    from streams.stats import cube

    if cube.small_history(scope):
        access = access_where(scope)
        pairs = []
        for resolved in [""] + distinct_values("resolved_model", access):
            where = access.copy().eq("resolved_model", resolved)
            for requested in [""] + distinct_values("requested_model", where):
                pairs.append((resolved, requested))
        # "" pairs are probed by the aggregates and dropped when empty
        return pairs
    from streams.models import UsageRollup
    from streams.store.aggregates import ACTIVE, DAY

    models = f"{quote('resolved_model')}, {quote('requested_model')}"
    rollup = access_where(scope, ROLLUPS).eq("span", DAY)
    active = access_where(scope).among("status", ACTIVE)
    pairs = set()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT {models} FROM {quote(UsageRollup._meta.db_table)} "
            f"WHERE {rollup.sql()}",
            rollup.params,
        )
        pairs.update(cursor.fetchall())
        cursor.execute(
            f"SELECT DISTINCT {models} FROM {from_clause(IDX_STATUS)} WHERE {active.sql()}",
            active.params,
        )
        pairs.update(cursor.fetchall())
    return sorted(pairs)


def per_pair_selects(base, pairs, select):
    """(SQL, params) of one `SELECT i, <select>` per (resolved, requested) pair `i` under the
    conditions `base`, each a seek of the pair index."""
    parts = []
    for i, (resolved, requested) in enumerate(pairs):
        where = base.copy().eq("resolved_model", resolved).eq("requested_model", requested)
        sql = f"SELECT {i}, {select} FROM {from_clause(IDX_PAIR, where)} WHERE {where.sql()}"
        parts.append((sql, where.params))
    return parts


def pair_aggregates(scope, pairs=None):
    """{(resolved, requested): {aggregate: value}} over the scope, one index seek per pair."""
    pairs = model_pairs(scope) if pairs is None else pairs
    base = scope_where(scope, skip=("resolved_model", "requested_model"))
    wanted = [
        (r, q)
        for r, q in pairs
        if (not scope.resolved_model or r == scope.resolved_model)
        and (not scope.requested_model or q == scope.requested_model)
    ]
    cols = _pair_columns()
    select = ", ".join(sql for _, sql, _ in cols)
    out = {}
    for row in union_rows(per_pair_selects(base, wanted, select)):
        if row[1]:
            out[wanted[row[0]]] = {name: v for (name, _, _), v in zip(cols, row[1:], strict=True)}
    return out


def fold(aggregates, key=lambda pair: pair):
    """Add up pair aggregates into groups {key(pair): aggregates}; None keys are dropped."""
    folds = {name: how for name, _, how in _pair_columns()}
    out = {}
    for pair, agg in aggregates.items():
        k = key(pair)
        if k is None:
            continue
        acc = out.get(k)
        if acc is None:
            out[k] = dict(agg)
            continue
        for name, v in agg.items():
            if v is None:
                continue
            if acc[name] is None:
                acc[name] = v
            elif folds[name] == "max":
                acc[name] = max(acc[name], v)
            else:
                acc[name] += v
    return out


def pair_summary(agg, pcts):
    """The numbers of one table row from folded aggregates and its percentiles."""
    finished = agg["count"] - (agg["active"] or 0)
    itl_mean = divide(agg["itl_sum"], agg["itl_n"])
    row = {
        "count": agg["count"],
        "ttft_n": agg["ttft_n"],
        "ttft_mean": divide(agg["ttft_sum"], agg["ttft_n"]),
        "max": agg["ttft_max"],
        "itl_mean": itl_mean,
        # Output rate from the mean gap, not the mean of per-stream rates: a stream that came
        # through a buffering proxy has gaps of microseconds and a rate of 10^4-10^5 tokens/s,
        # which would swamp a mean of rates (seen on the demo data: 3 700 "tokens/s").
        "tps": 1000 / itl_mean if itl_mean else None,
        "finished": finished,
        "error_rate": divide(agg["failed"], finished),
        "stall_rate": divide(agg["stalled"], finished),
        "truncation_rate": divide(agg["truncated"], finished),
    }
    for rate in ("error", "stall", "truncation"):
        row[f"{rate}_pct"] = percent(row[f"{rate}_rate"])
    for q in PERCENTILES:
        row[PCT_NAMES[q]] = pcts.get(q)
    for s in _STATUS_COUNTS:
        row[s] = agg[s] or 0
    return row


def group_where(scope, pairs, want):
    """Conditions selecting the pairs for which want(pair) is true, plus the scope filters. A
    single resolved or requested model becomes an equality (so an ordered index applies)."""
    base = scope_where(scope, skip=("resolved_model", "requested_model"))
    chosen = [p for p in pairs if want(p)]
    if not chosen:
        return base.add("1 = 0")
    resolved = {r for r, _ in chosen}
    requested = {q for _, q in chosen}
    where = base.copy()
    if len(resolved) == 1:
        where.eq("resolved_model", next(iter(resolved)))
    if len(requested) == 1:
        where.eq("requested_model", next(iter(requested)))
    if len(resolved) > 1 and len(requested) > 1:
        # a union of pairs: only needed for "pinned" (every requested model but auto)
        where.among("requested_model", sorted(requested))
    elif len(resolved) > 1:
        where.among("resolved_model", sorted(resolved))
    elif len(requested) > 1:
        where.among("requested_model", sorted(requested))
    return where


# The shortest span over-time buckets are chosen for (a lone stream still gets a few points).
SERIES_MIN_SPAN = dt.timedelta(minutes=10)


def series_bounds(scope, now):
    """The span of the over-time charts: the page's range narrowed to the data's own span in
    it, so the bucket width follows the data (a day of data on a 7-day range is still a line
    of half-hour points, not one 3-hour point). None without data in the range."""
    end = scope.end or now
    first, last = history_span(scope)
    if first is None:
        return None
    start = max(scope.start or first, first)
    end = min(end, max(last + dt.timedelta(seconds=1), start + SERIES_MIN_SPAN))
    if start >= end:
        return None
    return start, end
