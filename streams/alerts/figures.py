"""The value of a rule's figure over one window: read through `streams.stats`, the analytics
pages' own computation (the rollups' whole hours plus the raw rows of the partial ones, or the
raw rows when the history is small or the scope has a session or token), never a copy of it.

A `Reading` is what one evaluation saw: the value (None: nothing to measure, e.g. no TTFT in
the window) and the streams it was read over, which `Rule.min_streams` asks for.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db import connection
from django.db.models import Count

from streams.models import Rule, Stream
from streams.stats.source import source_for
from streams.stats.sql import (
    Scope,
    findings_in_scope,
    from_clause,
    index_for,
    percentiles,
    quote,
    scalars,
    scope_where,
)

Figure = Rule.Figure

# (the figure's percentile in per mille) for the TTFT ones, read from the source
_TTFT = {Figure.TTFT_P50: 500, Figure.TTFT_P95: 950, Figure.TTFT_P99: 990}
# (column, per mille) of the figures the rollups do not keep: read raw over the window
_RAW = {
    Figure.DURATION_P50: ("duration_ms", 500),
    Figure.DURATION_P95: ("duration_ms", 950),
    Figure.PROXY_ADDED_MS: ("proxy_added_p99_ms", 990),
}
# the status a rate counts (the source's `errors`: exact counts, rollups or raw)
_RATES = {
    Figure.ERROR_RATE: Stream.Status.FAILED,
    Figure.INTERRUPTED_RATE: Stream.Status.INTERRUPTED,
    Figure.STALLED_RATE: Stream.Status.STALLED,
}
PERCENT = frozenset({*_RATES, Figure.FINDINGS_SHARE, Figure.POSITIVE_SCORE_SHARE})
# what each figure can be: a threshold outside is a mistake (the form's 400)
RANGES = {f: (0.0, 100.0) if f in PERCENT else (0.0, 1e12) for f in Figure.values}

SCOPE_FIELDS = ("requested_model", "resolved_model", "username", "source", "tag", "session")


@dataclasses.dataclass(frozen=True)
class Reading:
    value: float | None
    streams: int


def scope_of(rule, end, *, shift_s=0):
    """The rule's scope over the window ending at `end` (`shift_s` earlier: its baseline)."""
    end = end - dt.timedelta(seconds=shift_s)
    return Scope(
        project_id=rule.project_id,
        start=end - dt.timedelta(seconds=rule.window_s),
        end=end,
        token_id=rule.token_id,
        **{name: getattr(rule, name) for name in SCOPE_FIELDS},
    )


def read(rule, end, *, shift_s=0):
    """The Reading of `rule`'s figure over its window ending at `end` (minus `shift_s`)."""
    scope = scope_of(rule, end, shift_s=shift_s)
    source = source_for(scope, end)
    streams = sum(a["count"] for a in source.aggregates().values())
    figure = Figure(rule.figure)
    if not streams:
        return Reading(None if figure != Figure.STREAMS_COUNT else 0.0, 0)
    if figure == Figure.STREAMS_COUNT:
        value = float(streams)
    elif figure in _TTFT:
        q = _TTFT[figure]
        value = source.percentiles({None: None}, qs=(q,))[None][q]
    elif figure in _RATES:
        counted = sum(source.errors((str(_RATES[figure]),)).values())
        value = 100.0 * counted / streams
    elif figure in _RAW:
        value = _raw_percentile(scope, *_RAW[figure])
    elif figure == Figure.FINDINGS_SHARE:
        found = findings_in_scope(scope).filter(severity=rule.severity)
        value = 100.0 * found.aggregate(n=Count("stream", distinct=True))["n"] / streams
    elif figure == Figure.COST:
        usage = source.usage(()).get((), {})
        currency = rule.project.currency.lower()
        value = usage.get(f"cost_{currency}_nanos", 0) / 1e9
    elif figure == Figure.POSITIVE_SCORE_SHARE:
        if rule.score_type is None:
            return Reading(None, streams)
        per_model = source.scores(rule.score_type).values()
        n = sum(v[0] for v in per_model)
        value = 100.0 * sum(v[2] for v in per_model) / n if n else None
    else:  # pragma: no cover - every choice is handled above
        raise ValueError(figure)
    return Reading(None if value is None else float(value), streams)


def _raw_percentile(scope, column, q):
    """The nearest-rank `q` (per mille) of `column` over the scope's raw rows (`sql.percentiles`,
    the pages' definition)."""
    where = scope_where(scope).add(f"{quote(column)} IS NOT NULL")
    count_sql = (
        f"SELECT COUNT(*) FROM {from_clause(index_for(where, ordered=False), where)} "
        f"WHERE {where.sql()}"
    )
    n = scalars([(count_sql, where.params)])[0]
    return percentiles({None: (where, n)}, quote(column), (q,), narrow=True)[None][q]


def worst_streams(rule, end, k=3):
    """The ids of the k streams of the window that did worst on the rule's figure (the
    slowest for a latency, the newest failed for a rate; else the slowest TTFT)."""
    scope = scope_of(rule, end)
    where = scope_where(scope)
    figure = Figure(rule.figure)
    if figure in _RATES:
        where.eq("status", str(_RATES[figure]))
        order = quote("created_at")
    elif figure in _RAW:
        order = quote(_RAW[figure][0])
    else:
        order = quote("ttft_ms")
    sql = (
        f"SELECT {quote('id')} FROM {from_clause(index_for(where, ordered=False), where)} "
        f"WHERE {where.sql()} AND {order} IS NOT NULL ORDER BY {order} DESC LIMIT {int(k)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, where.params)
        return [r[0] for r in cursor.fetchall()]
