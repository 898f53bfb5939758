"""Read-side queries of the analytics pages (latency, routing, admin): plain data out.

Everything is computed in the database, from the metrics the recorder denormalises onto `Stream`
rows; no function here loads stream rows into Python. What comes back are aggregates (a few
hundred numbers) and short lists (the slowest N streams, sample reasoning strings).

Percentiles: nearest rank, exact. For the n non-null values of a group sorted ascending,
x_1 ≤ … ≤ x_n, the q-quantile is x_k with k = ⌈q·n⌉ (and x_1 for k = 0); p100 is the maximum.
k is computed with integers (q in per mille), so tests can use the same definition without
floating-point doubts: `rank(q_permille, n)`.

How, and why it is fast on large histories: each percentile of each group is one scalar
subquery, `SELECT v … WHERE <group> AND <filters> ORDER BY v LIMIT 1 OFFSET k-1`, many of them
in one statement. With `ORDER BY ttft_ms` the database walks an index that is ordered by
(group, ttft_ms) and carries every filter column (see the indexes on `Stream.Meta`), skipping
k entries without touching a table row; percentiles above the median walk from the top, so one
group's p50…p99 cost about 0.9·n index entries in all. Narrow time windows (the buckets of a
time series, short ranges) instead read only the window's rows through the (model, requested
model, created_at) index and sort those few (SQLite is told which index to use, see `_from`).
Counts and sums come from per-group aggregate subqueries that seek the same covering index, and
are folded in Python (counts and sums add up; percentiles never are). On SQLite, window
functions and GROUP BY over 100 000 rows cost 150–700 ms (they sort in a temporary B-tree);
these shapes cost a few ms. SQL text is built here, with parameters, because the ORM cannot put
hundreds of ordered-offset subqueries into one statement; the same SQL runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import zlib
from dataclasses import dataclass, field, replace

from django.db import connection
from django.db.models import Count as models_Count

from streams import public
from streams.models import Finding, Stream

PERCENTILES = (500, 750, 900, 950, 990)  # per mille
PCT_NAMES = {500: "p50", 750: "p75", 900: "p90", 950: "p95", 990: "p99"}
SERIES_PERCENTILES = (500, 950)
SLOWEST = 20
HISTOGRAM_BINS = 40
MAX_BUCKETS = 56  # 1h by 2 min, 24h by 30 min, 7d by 3 h, 30d by day, 90d by 2 days
# Steps for time buckets, aligned on the Unix epoch (so UTC days and hours) and stable across
# refreshes.
BUCKET_STEPS = (60, 120, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400,
                7 * 86400)  # fmt: skip
# One statement holds at most this many subqueries (SQLite allows 2000 result columns and 500
# compound terms; PostgreSQL 1664 target entries).
CHUNK = 250
FINISHED_EXCLUDES = ("pending", "streaming")
AUTO = "auto"
SAMPLE_REASONS = 3

TABLE = Stream._meta.db_table


# ---------------------------------------------------------------------------------------------
# Refreshing: pages poll; a poll recomputes only when something changed


def version(scope, now):
    """A fingerprint of what could change a page: the newest stream, the running ones, and
    the minute (relative ranges move). Two small index reads."""
    where = Where()
    if scope.user_id is not None:
        where.eq("user_id", scope.user_id)
    active = where.copy().among("status", FINISHED_EXCLUDES)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX({_q('id')}) FROM {_q(TABLE)} WHERE {where.sql()}", where.params)
        newest = cursor.fetchone()[0] or 0
        cursor.execute(
            f"SELECT {_q('id')} FROM {_q(TABLE)} WHERE {active.sql()} ORDER BY {_q('id')}",
            active.params,
        )
        running = [r[0] for r in cursor.fetchall()]
    minute = int(now.timestamp() // 60)
    running_crc = zlib.crc32(",".join(map(str, running)).encode())
    return f"{newest}-{len(running)}-{running_crc:x}-{minute}"


def _versioned(build):
    """`build(scope, …)` that returns None (nothing changed) when called with the version the
    caller already shows (`known_version`), and otherwise a report carrying its version."""

    @functools.wraps(build)
    def wrapper(scope, *args, known_version=None, now=None, **kwargs):
        now = now or dt.datetime.now(dt.UTC)
        current = version(scope, now)
        if known_version and known_version == current:
            return None
        report = build(scope, *args, now=now, **kwargs)
        report.version = current
        return report

    return wrapper


# ---------------------------------------------------------------------------------------------
# Definitions shared with the tests


def rank(q_permille, n):
    """1-based nearest rank of the q-quantile (q in per mille) among n values."""
    return max(1, (q_permille * n + 999) // 1000)


def nearest_rank(values, q_permille):
    """The definition, for lists in Python (tests, and nothing that reads the database)."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    return ordered[rank(q_permille, len(ordered)) - 1]


@dataclass(frozen=True)
class Scope:
    """Which streams a page looks at. `user_id` None means every stream (staff)."""

    user_id: int | None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    resolved_model: str = ""
    requested_model: str = ""
    status: str = ""
    source: str = ""

    @classmethod
    def for_user(cls, user, **filters):
        return cls(user_id=None if user.is_staff else user.pk, **filters)

    @property
    def span_s(self):
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds()


# ---------------------------------------------------------------------------------------------
# SQL building blocks


@functools.cache
def _q(name):
    # SQLite and PostgreSQL both quote with double quotes
    return connection.ops.quote_name(name)


def _dt(value):
    return connection.ops.adapt_datetimefield_value(value)


class Where:
    """A conjunction of SQL conditions with their parameters. It remembers which columns it
    pins to one value (`eqs`) or a few (`ins`), from which `index_for` picks the index."""

    def __init__(self, parts=(), params=(), eqs=(), ins=()):
        self.parts = list(parts)
        self.params = list(params)
        self.eqs = set(eqs)
        self.ins = set(ins)

    def add(self, sql, *params):
        self.parts.append(sql)
        self.params.extend(params)
        return self

    def eq(self, column, value):
        self.eqs.add(column)
        return self.add(f"{_q(column)} = %s", value)

    def among(self, column, values):
        values = list(values)
        if not values:
            return self.add("1 = 0")
        if len(values) == 1:
            return self.eq(column, values[0])
        self.ins.add(column)
        return self.add(f"{_q(column)} IN ({', '.join(['%s'] * len(values))})", *values)

    def between(self, start, end):
        if start is not None:
            self.add(f"{_q('created_at')} >= %s", _dt(start))
        if end is not None:
            self.add(f"{_q('created_at')} < %s", _dt(end))
        return self

    def copy(self):
        return Where(self.parts, self.params, self.eqs, self.ins)

    def sql(self):
        return " AND ".join(self.parts) if self.parts else "1 = 1"


def scope_where(scope, *, skip=()):
    """The conditions of a scope (access, range, filters), leaving out the columns in `skip`."""
    where = Where()
    if scope.user_id is not None:
        where.eq("user_id", scope.user_id)
    where.between(scope.start, scope.end)
    for column in ("resolved_model", "requested_model", "status", "source"):
        value = getattr(scope, column)
        if value and column not in skip:
            where.eq(column, value)
    return where


# The indexes of Stream.Meta these queries are shaped for (see streams/models.py).
IDX_RESOLVED_TTFT = "stream_resolved_ttft_cov"
IDX_REQUESTED_TTFT = "stream_requested_ttft_cov"
IDX_TTFT = "stream_ttft_cov"
IDX_PAIR = "stream_pair_metrics"
IDX_CREATED = "stream_created"
IDX_PINNED_ROUTED = "stream_pinned_routed"
IDX_USER = "stream_user_usage"


def index_for(where, *, ordered):
    """The index that serves `where`: `ordered` = rows are wanted in ttft order (an ordered
    offset); otherwise the rows of a time window are read and sorted or counted."""
    if ordered:
        if "resolved_model" in where.eqs:
            return IDX_RESOLVED_TTFT
        if "requested_model" in where.eqs:
            return IDX_REQUESTED_TTFT
        return IDX_TTFT
    if "resolved_model" in where.eqs or (
        "requested_model" in where.eqs and "resolved_model" in where.ins
    ):
        return IDX_PAIR
    return IDX_CREATED


def _from(index=None):
    """The table, with an index named for SQLite: without statistics (ANALYZE) its planner
    guesses, and at 100k streams it guessed a non-covering index for a time range plus a sort
    (700 ms) where the covering one takes 5 ms. PostgreSQL plans from its statistics."""
    table = _q(TABLE)
    if index and connection.vendor == "sqlite":
        return f"{table} INDEXED BY {_q(index)}"
    return table


def _scalars(subqueries):
    """Values of scalar subqueries [(sql, params)], in order, a few statements in all."""
    values = []
    with connection.cursor() as cursor:
        for lo in range(0, len(subqueries), CHUNK):
            chunk = subqueries[lo : lo + CHUNK]
            sql = "SELECT " + ", ".join(f"({s})" for s, _ in chunk)
            cursor.execute(sql, [p for _, ps in chunk for p in ps])
            values.extend(cursor.fetchone())
    return values


def _rows(parts):
    """Rows of several SELECTs [(sql, params)] whose first column says which part they are,
    joined with UNION ALL, a few statements in all."""
    rows = []
    with connection.cursor() as cursor:
        for lo in range(0, len(parts), CHUNK):
            chunk = parts[lo : lo + CHUNK]
            sql = " UNION ALL ".join(f"SELECT * FROM ({s}) t{i}" for i, (s, _) in enumerate(chunk))
            cursor.execute(sql, [p for _, ps in chunk for p in ps])
            rows.extend(cursor.fetchall())
    return rows


def _ranked(where, value, offset, *, descending=False, narrow=False):
    """The scalar subquery for the value at `offset` of `value` ordered over `where`. `narrow`:
    read the rows of `where` through the (model, created_at) index and sort them, instead of
    walking the ttft-ordered one (SQLite is told which index; PostgreSQL costs both)."""
    direction = " DESC" if descending else ""
    ordered = value == _q("ttft_ms") and (
        # without a model to seek, a window's rows would come through the created_at index
        # and a table lookup each: walking the ttft-ordered covering index is cheaper
        not narrow or index_for(where, ordered=False) == IDX_CREATED
    )
    sql = (
        f"SELECT {value} FROM {_from(index_for(where, ordered=ordered))} "
        f"WHERE {where.sql()} AND {value} IS NOT NULL "
        f"ORDER BY {value}{direction} LIMIT 1 OFFSET {int(offset)}"
    )
    return sql, list(where.params)


def percentile_queries(where, value, n, qs=PERCENTILES, *, narrow=False):
    """Subqueries for the percentiles `qs` of `value` over the n non-null values in `where`."""
    out = []
    for q in qs:
        k = rank(q, n)
        if k > n // 2:  # nearer the top: walk down from the maximum
            out.append(_ranked(where, value, n - k, descending=True, narrow=narrow))
        else:
            out.append(_ranked(where, value, k - 1, narrow=narrow))
    return out


def percentiles(groups, value, qs=PERCENTILES, *, narrow=False):
    """{key: {q: value}} for groups {key: (where, n)}; groups with n = 0 get None values."""
    jobs = []
    for key, (where, n) in groups.items():
        if n:
            jobs.extend(
                (key, q, sq)
                for q, sq in zip(
                    qs, percentile_queries(where, value, n, qs, narrow=narrow), strict=True
                )
            )
    values = _scalars([sq for _, _, sq in jobs])
    out = {key: dict.fromkeys(qs) for key in groups}
    for (key, q, _), v in zip(jobs, values, strict=True):
        out[key][q] = v
    return out


def distinct_values(column, where=None):
    """The distinct non-empty values of an indexed column, by a loose index scan: one index
    seek per value (`MIN(col) WHERE col > previous`), instead of reading every row."""
    where = where or Where()
    col = _q(column)
    cond = where.sql()
    sql = (
        f"WITH RECURSIVE v(x) AS ("
        f"SELECT MIN({col}) FROM {_q(TABLE)} WHERE {col} > %s AND {cond} "
        f"UNION ALL SELECT (SELECT MIN({col}) FROM {_q(TABLE)} WHERE {col} > v.x AND {cond}) "
        f"FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, ["", *where.params, *where.params])
        return [r[0] for r in cursor.fetchall()]


# ---------------------------------------------------------------------------------------------
# Aggregates per (resolved model, requested model) pair: everything else folds from these


_STATUS_COUNTS = ("failed", "stalled", "truncated")


@functools.cache
def _pair_columns():
    """(name, SQL, fold) of the aggregates of one pair; fold is "sum" or "max". Each column
    costs ~5-10 ms per 100k rows read on SQLite (decoding the index record), so only what the
    pages show is here."""
    status = _q("status")
    ttft, itl = _q("ttft_ms"), _q("inter_token_ms")
    cols = [
        ("count", "COUNT(*)", "sum"),
        ("active", f"COUNT(CASE WHEN {status} IN ('pending', 'streaming') THEN 1 END)", "sum"),
    ]
    for name in _STATUS_COUNTS:
        cols.append((name, f"COUNT(CASE WHEN {status} = '{name}' THEN 1 END)", "sum"))
    cols += [
        ("ttft_n", f"COUNT({ttft})", "sum"),
        ("ttft_sum", f"SUM({ttft})", "sum"),
        ("ttft_max", f"MAX({ttft})", "max"),
        ("itl_n", f"COUNT({itl})", "sum"),
        ("itl_sum", f"SUM({itl})", "sum"),
        ("routed", f"COUNT({_q('routing_us')})", "sum"),
    ]
    return tuple(cols)


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
            (f"SELECT {i}, {select} FROM {_from(IDX_PAIR)} WHERE {where.sql()}", where.params)
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


def model_pairs(scope):
    """The (resolved, requested) pairs that occur among the streams `scope` may see (all time,
    which keeps the filter menus stable), by loose index scans."""
    access = Where()
    if scope.user_id is not None:
        access.eq("user_id", scope.user_id)
    pairs = []
    for resolved in [""] + distinct_values("resolved_model", access):
        where = access.copy().eq("resolved_model", resolved)
        for requested in [""] + distinct_values("requested_model", where):
            pairs.append((resolved, requested))
    # "" pairs are probed by the aggregates and dropped when empty
    return pairs


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
    parts = []
    for i, (resolved, requested) in enumerate(wanted):
        where = base.copy().eq("resolved_model", resolved).eq("requested_model", requested)
        parts.append(
            (f"SELECT {i}, {select} FROM {_from(IDX_PAIR)} WHERE {where.sql()}", where.params)
        )
    out = {}
    for row in _rows(parts):
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


def _div(a, b):
    return a / b if a is not None and b else None


def _pct(fraction):
    return None if fraction is None else 100 * fraction


def _summary(agg, pcts):
    """The numbers of one table row from folded aggregates and its percentiles."""
    finished = agg["count"] - (agg["active"] or 0)
    itl_mean = _div(agg["itl_sum"], agg["itl_n"])
    row = {
        "count": agg["count"],
        "ttft_n": agg["ttft_n"],
        "ttft_mean": _div(agg["ttft_sum"], agg["ttft_n"]),
        "max": agg["ttft_max"],
        "itl_mean": itl_mean,
        # Output rate from the mean gap, not the mean of per-stream rates: a stream that came
        # through a buffering proxy has gaps of microseconds and a rate of 10^4-10^5 tokens/s,
        # which would swamp a mean of rates (seen on the demo data: 3 700 "tokens/s").
        "tps": 1000 / itl_mean if itl_mean else None,
        "finished": finished,
        "error_rate": _div(agg["failed"], finished),
        "stall_rate": _div(agg["stalled"], finished),
        "truncation_rate": _div(agg["truncated"], finished),
    }
    for rate in ("error", "stall", "truncation"):
        row[f"{rate}_pct"] = _pct(row[f"{rate}_rate"])
    for q in PERCENTILES:
        row[PCT_NAMES[q]] = pcts.get(q)
    for s in _STATUS_COUNTS:
        row[s] = agg[s] or 0
    return row


# ---------------------------------------------------------------------------------------------
# Time ranges and buckets


def bucket_step(span_s):
    for step in BUCKET_STEPS:
        if span_s / step <= MAX_BUCKETS:
            return step
    return BUCKET_STEPS[-1]


def buckets(start, end):
    """Epoch-aligned [lo, hi) windows covering start…end, at most ~MAX_BUCKETS of them."""
    step = bucket_step((end - start).total_seconds())
    first = math.floor(start.timestamp() / step) * step
    edges = []
    t = first
    stop = end.timestamp()
    while t < stop:
        edges.append(t)
        t += step
    edges.append(t)
    as_dt = [dt.datetime.fromtimestamp(e, dt.UTC) for e in edges]
    return step, list(zip(as_dt, as_dt[1:], strict=False))


def history_start(scope):
    """The oldest stream in scope (for "all time"); one index seek."""
    where = Where()
    if scope.user_id is not None:
        where.eq("user_id", scope.user_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MIN({_q('created_at')}) FROM {_q(TABLE)} WHERE {where.sql()}", where.params
        )
        value = cursor.fetchone()[0]
    if value is None:
        return None
    if isinstance(value, str):  # SQLite hands back text
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def _series_bounds(scope, now):
    end = scope.end or now
    start = scope.start or history_start(scope)
    if start is None or start >= end:
        return None
    return start, end


def _is_narrow(span_s, history_s):
    """Whether a time window holds few of a group's rows: then reading the window's rows and
    sorting them beats walking the group's ttft-ordered index (which visits all its rows)."""
    if span_s is None or not history_s:
        return False
    # measured at 100k streams over 30 days (SQLite): per-model p50…p99 of 1 day: ordered
    # 10 ms, narrow 4 ms; of 3 days: 15 vs 19 ms; of 7 days: 12 vs 32 ms
    return span_s / history_s < 0.08


# ---------------------------------------------------------------------------------------------
# The latency page


def _group_where(scope, pairs, want):
    """Conditions selecting the pairs for which want(pair) is true, plus the scope filters. A
    single resolved or requested model becomes an equality (so an ordered index applies)."""
    base = scope_where(scope, skip=("resolved_model", "requested_model"))
    chosen = [p for p in pairs if want(p)]
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
            subqueries.append((f"SELECT COUNT(*) FROM {_from(index)} WHERE {w.sql()}", w.params))
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
    and date filters cost ~0.1 ms a cell."""
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


def _nice(x):
    """The smallest of 1, 2, 2.5, 5 × 10^k that is ≥ x."""
    if x <= 0:
        return 1
    exp = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10**exp >= x:
            return m * 10**exp
    return 10 ** (exp + 1)


def time_series(scope, aggregates, models, now, value=None, qs=SERIES_PERCENTILES):
    """Per model and time bucket: the count and the percentiles `qs` of TTFT (or `value`;
    "*" with no `qs` counts streams)."""
    bounds = _series_bounds(scope, now)
    if bounds is None or not models:
        return None
    step, windows = buckets(*bounds)
    value = value or _q("ttft_ms")
    pairs = list(aggregates)
    groups = {}
    for model in models:
        for b, (lo, hi) in enumerate(windows):
            # the bucket replaces the page's range, so the index seek covers the bucket only
            window = replace(scope, start=max(lo, bounds[0]), end=min(hi, bounds[1]))
            groups[(model, b)] = _group_where(window, pairs, lambda p, m=model: p[0] == m)
    counts = _scalars(
        [
            (
                f"SELECT COUNT({value}) FROM {_from(index_for(w, ordered=False))} WHERE {w.sql()}",
                w.params,
            )
            for w in groups.values()
        ]
    )
    groups = {key: (w, n) for (key, w), n in zip(groups.items(), counts, strict=True)}
    pcts = percentiles(groups, value, qs, narrow=True)
    return {
        "step": step,
        "t": [int(lo.timestamp()) for lo, _ in windows],
        "series": [
            {
                "model": model,
                "n": [groups[(model, b)][1] for b in range(len(windows))],
                **{PCT_NAMES[q]: [pcts[(model, b)][q] for b in range(len(windows))] for q in qs},
            }
            for model in models
        ],
    }


def slowest(scope, limit=SLOWEST):
    """The streams with the highest TTFT in scope."""
    where = scope_where(scope).add(f"{_q('ttft_ms')} IS NOT NULL")
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
        f"SELECT {', '.join(_q(c) for c in cols)} FROM {_from(index)} WHERE {where.sql()} "
        f"ORDER BY {_q('ttft_ms')} DESC LIMIT {int(limit)}"
    )
    return _dicts(sql, where.params, cols)


def _dicts(sql, params, cols):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = [dict(zip(cols, r, strict=True)) for r in cursor.fetchall()]
    for r in rows:
        if isinstance(r.get("created_at"), str):
            r["created_at"] = dt.datetime.fromisoformat(r["created_at"]).replace(tzinfo=dt.UTC)
    return rows


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


def compare(scope_a, label_a, scope_b, label_b):
    """Two scopes side by side (two models, or one range and the one before it): B − A as a
    relative change, and in percentage points for rates."""
    a = _one_row(scope_a)
    b = _one_row(scope_b)
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
    if report.histogram:
        report.histogram_rows = histogram_rows(report.histogram)
    if report.series:
        report.series_rows = series_rows(report.series)
    report.slowest = slowest(scope)
    return report


# ---------------------------------------------------------------------------------------------
# The routing page


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
                f"SELECT {i}, {cat}, {src}, COUNT(*) FROM {_from(IDX_PAIR)} WHERE {w.sql()} "
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
                f"SELECT COUNT({decision_value}) FROM {_from(index_for(w, ordered=False))} "
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
        summary = _summary(agg, pcts[model])
        report.shares.append(
            {
                "model": model,
                "count": agg["count"],
                "share": agg["count"] / total if total else None,
                "share_pct": _pct(agg["count"] / total) if total else None,
                "ttft_p50": pcts[model][500],
                "ttft_p95": pcts[model][950],
                "error_rate": summary["error_rate"],
                "error_pct": summary["error_pct"],
                "routed": routed[model],
                "decision_p50": dpcts[model][500],
                "decision_p95": dpcts[model][950],
            }
        )
    groups = _routing_groups(scope, pairs_auto)
    models = [s["model"] for s in report.shares]
    categories = {}
    sources = {}
    for model, cat, src, n in groups:
        categories.setdefault(cat, {}).setdefault(model, 0)
        categories[cat][model] += n
        sources[src] = sources.get(src, 0) + n
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
            "n": routed[s["model"]],
        }
        for s in report.shares
    ]
    report.series = time_series(auto_scope, auto, [m for m in models if m], now, value="*", qs=())
    if report.series:
        report.trend_models = [x["model"] for x in report.series["series"]]
        report.trend_rows = [
            {
                "t": dt.datetime.fromtimestamp(t, dt.UTC),
                "counts": [x["n"][i] for x in report.series["series"]],
            }
            for i, t in enumerate(report.series["t"])
        ]
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
            f"SELECT {_q('routing_reasoning')}, {_q('resolved_model')} FROM {_from(IDX_CREATED)} "
            f"WHERE {where.sql()} ORDER BY {_q('created_at')} DESC LIMIT {int(look_at)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, where.params)
            rows = cursor.fetchall()
        seen = []
        for text, model in public.scrub(rows):
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
        f"SELECT {', '.join(_q(c) for c in cols)} FROM {_from(IDX_PINNED_ROUTED)} "
        f"WHERE {where.sql()} ORDER BY {_q('created_at')} DESC LIMIT {int(limit)}",
        where.params,
        cols,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM {_from(IDX_PINNED_ROUTED)} WHERE {where.sql()}", where.params
        )
        count = cursor.fetchone()[0]
    return rows, count


def pinned_routing_findings(scope):
    """How many `routing_on_pinned_model` findings the checker reported in scope."""
    return _findings_in_scope(scope).filter(code="routing_on_pinned_model").count()


def _findings_in_scope(scope):
    qs = Finding.objects.all()
    if scope.user_id is not None:
        qs = qs.filter(stream__user_id=scope.user_id)
    if scope.start is not None:
        qs = qs.filter(stream__created_at__gte=scope.start)
    if scope.end is not None:
        qs = qs.filter(stream__created_at__lt=scope.end)
    if scope.source:
        qs = qs.filter(stream__source=scope.source)
    return qs


# ---------------------------------------------------------------------------------------------
# Admin analytics (staff only)


@dataclass
class AdminReport:
    scope: Scope
    empty: bool
    version: str = ""
    totals: dict = field(default_factory=dict)
    days: list = field(default_factory=list)
    users: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    findings: dict = field(default_factory=dict)
    largest: list = field(default_factory=list)
    slowest: list = field(default_factory=list)
    daily_chart: dict | None = None


PROBLEM_STATUSES = ("failed", "stalled", "truncated", "interrupted", "cancelled", "incomplete")
TOP_USERS = 50
TOP_STREAMS = 10


def per_day(scope, now):
    """Streams, failed streams and events per UTC day: one index range count per day; events
    are the `event_count` of the streams started that day (the only admin figure that reads
    table rows — the recorder bumps event_count on every batch, so it is kept out of indexes)."""
    end = scope.end or now
    start = scope.start or history_start(scope)
    if start is None:
        return []
    day0 = dt.datetime.combine(start.date(), dt.time(), dt.UTC)
    days = []
    d = day0
    while d < end and len(days) < 400:
        days.append(d)
        d += dt.timedelta(days=1)
    table = _from(IDX_CREATED if scope.user_id is None else None)
    events = f"COALESCE(SUM({_q('event_count')}), 0)"
    subqueries = []
    for d in days:
        window = replace(scope, start=max(d, start), end=min(d + dt.timedelta(days=1), end))
        w = scope_where(window)
        wf = scope_where(window).eq("status", "failed")
        subqueries += [
            (f"SELECT COUNT(*) FROM {table} WHERE {w.sql()}", w.params),
            (f"SELECT COUNT(*) FROM {_q(TABLE)} WHERE {wf.sql()}", wf.params),
            (f"SELECT {events} FROM {table} WHERE {w.sql()}", w.params),
        ]
    values = _scalars(subqueries)
    return [
        {
            "day": d.date(),
            "streams": values[3 * i],
            "failed": values[3 * i + 1],
            "events": values[3 * i + 2],
        }
        for i, d in enumerate(days)
    ]


def usage_per_user(scope, limit=TOP_USERS):
    """Per user: streams, failures, output tokens, bytes, last stream; busiest first."""
    from django.contrib.auth import get_user_model

    w = scope_where(scope)
    user, status = _q("user_id"), _q("status")
    sql = (
        f"SELECT {user}, COUNT(*), COUNT(CASE WHEN {status} = 'failed' THEN 1 END), "
        f"SUM({_q('output_tokens')}), SUM({_q('bytes_received')}), MAX({_q('created_at')}), "
        f"SUM({_q('findings_count')}) FROM {_from(IDX_USER)} WHERE {w.sql()} GROUP BY {user}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, w.params)
        rows = cursor.fetchall()
    rows.sort(key=lambda r: (-r[1], r[0] or 0))
    shown = rows[:limit]
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[r[0] for r in shown if r[0] is not None])
        .values_list("pk", "username")
    )
    out = []
    for uid, n, failed, tokens, size, last, findings in shown:
        if isinstance(last, str):
            last = dt.datetime.fromisoformat(last).replace(tzinfo=dt.UTC)
        out.append(
            {
                "user_id": uid,
                "username": names.get(uid, "") if uid is not None else "",
                "streams": n,
                "failed": failed,
                "error_rate": _div(failed, n),
                "error_pct": _pct(_div(failed, n)),
                "output_tokens": tokens or 0,
                "bytes": size or 0,
                "findings": findings or 0,
                "last": last,
            }
        )
    return out, len(rows)


def error_codes(scope):
    """(status, error code) of the streams that did not complete, most frequent first."""
    w = scope_where(scope).among("status", PROBLEM_STATUSES)
    status, code = _q("status"), _q("error_code")
    sql = (
        f"SELECT {status}, {code}, COUNT(*) FROM {_q(TABLE)} WHERE {w.sql()} "
        f"GROUP BY {status}, {code}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, w.params)
        rows = cursor.fetchall()
    rows.sort(key=lambda r: (-r[2], r[0], r[1]))
    return [{"status": s, "code": c, "count": n} for s, c, n in rows]


def findings_by_code(scope):
    """Checker findings per (code, severity) and resolved model: {"models", "rows"}."""
    rows = (
        _findings_in_scope(scope)
        .values_list("code", "severity", "stream__resolved_model")
        .annotate(n=models_Count("id"))
        .order_by()
    )
    table = {}
    model_names = set()
    for code, severity, model, n in rows:
        entry = table.setdefault(
            (code, severity), {"code": code, "severity": severity, "total": 0, "models": {}}
        )
        entry["total"] += n
        entry["models"][model] = entry["models"].get(model, 0) + n
        model_names.add(model)
    model_list = sorted(model_names)
    out = sorted(table.values(), key=lambda e: (-e["total"], e["code"]))
    for e in out:
        e["cells"] = [e["models"].get(m, 0) for m in model_list]
    return {"models": model_list, "rows": out}


def top_streams(scope, column, limit=TOP_STREAMS):
    """The streams with the highest `column` (bytes_received, duration_ms) in scope."""
    w = scope_where(scope).add(f"{_q(column)} IS NOT NULL")
    cols = [
        "id",
        "created_at",
        "user_id",
        "resolved_model",
        "status",
        "output_tokens",
        "bytes_received",
        "duration_ms",
    ]
    rows = _dicts(
        f"SELECT {', '.join(_q(c) for c in cols)} FROM {_from(IDX_USER)} WHERE {w.sql()} "
        f"ORDER BY {_q(column)} DESC LIMIT {int(limit)}",
        w.params,
        cols,
    )
    for r in rows:
        r["duration_s"] = r["duration_ms"] / 1000 if r["duration_ms"] is not None else None
    return rows


@_versioned
def admin_report(scope, *, now=None):
    now = now or dt.datetime.now(dt.UTC)
    report = AdminReport(scope=scope, empty=True)
    report.days = per_day(scope, now)
    if not any(d["streams"] for d in report.days):
        return report
    report.empty = False
    report.daily_chart = {
        "t": [
            int(dt.datetime.combine(d["day"], dt.time(), dt.UTC).timestamp()) for d in report.days
        ],
        "streams": [d["streams"] for d in report.days],
        "failed": [d["failed"] for d in report.days],
    }
    report.users, user_count = usage_per_user(scope)
    report.errors = error_codes(scope)
    report.findings = findings_by_code(scope)
    report.largest = top_streams(scope, "bytes_received")
    report.slowest = top_streams(scope, "duration_ms")
    report.totals = {
        "streams": sum(d["streams"] for d in report.days),
        "failed": sum(d["failed"] for d in report.days),
        "events": sum(d["events"] for d in report.days),
        "users": user_count,
        "findings": sum(r["total"] for r in report.findings["rows"]),
    }
    return report
