"""Reading the pre-aggregates (streams/aggregates.py) for a scope, exactly where they can be.

A range [start, end) is split into whole UTC days (day rows), whole hours at its ends (hour
rows), and the partial hours at its edges, read from the raw stream rows — as are the few
active streams, which are not aggregated yet. All three add up, so counts, sums and rates are
exact; percentiles come from the merged log-bucketed histograms (within
`aggregates.ERROR_BOUND`), maxima from the raw rows' ttft-ordered index (exact).

`answers(scope)`: the aggregates hold no tags, sessions or per-status histograms, so a scope
with a tag, session or status filter is computed from the raw rows (exact) by the callers; so
is a small history (`EXACT_BELOW` streams), where the raw queries are fast anyway and every
figure is exact. The pages say which was used (`report.method`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import replace

from django.contrib.auth import get_user_model
from django.db import connection

from dashboard.stats.sql import _q, _scalars, scope_where
from streams import aggregates as agg
from streams.models import FindingRollup, HistogramRollup, RoutingRollup, Stream, UsageRollup

EXACT_BELOW = 20_000  # streams visible to the scope: below this every figure is exact (raw)

EXACT = "exact"
AGGREGATED = "aggregated"


def _table(model):
    return _q(model._meta.db_table)


def visible_streams(scope):
    """Finished streams the scope's user may see, all time, from the day rows (one seek)."""
    where, params = [f"{_q('span')} = %s"], [agg.DAY]
    if scope.user_id is not None:
        where.append(f"{_q('user_key')} = %s")
        params.append(scope.user_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM({_q('n')}), 0) FROM {_table(UsageRollup)} "
            f"WHERE {' AND '.join(where)}",
            params,
        )
        return cursor.fetchone()[0]


def first_day(scope):
    """The start of the oldest aggregated day the scope's user may see (None: none)."""
    import datetime as dt

    where, params = [f"{_q('span')} = %s"], [agg.DAY]
    if scope.user_id is not None:
        where.append(f"{_q('user_key')} = %s")
        params.append(scope.user_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MIN({_q('t')}) FROM {_table(UsageRollup)} WHERE {' AND '.join(where)}",
            params,
        )
        t = cursor.fetchone()[0]
    return None if t is None else dt.datetime.fromtimestamp(t, dt.UTC)


def method(scope):
    """EXACT (raw rows) or AGGREGATED for this scope."""
    if scope.tag or scope.session or scope.status:
        return EXACT
    if visible_streams(scope) < EXACT_BELOW:
        return EXACT
    return AGGREGATED


def windows(start, end, step=None):
    """[(span, lo, hi)] in epoch seconds covering [start, end): span "raw", HOUR or DAY.
    `start` None is the whole history. Day rows only when `step` is a whole number of days."""
    end_s = end.timestamp()
    h1 = math.floor(end_s / agg.HOUR) * agg.HOUR
    if start is None:
        lo_s, h0 = None, None
    else:
        lo_s = start.timestamp()
        h0 = math.ceil(lo_s / agg.HOUR) * agg.HOUR
        if h0 >= h1:
            return [("raw", lo_s, end_s)]
    out = []
    if lo_s is not None and lo_s < h0:
        out.append(("raw", lo_s, h0))
    if end_s > h1:
        out.append(("raw", h1, end_s))
    days_ok = step is None or step % agg.DAY == 0
    if not days_ok:
        out.append((agg.HOUR, h0, h1))
        return out
    d0 = None if h0 is None else math.ceil(h0 / agg.DAY) * agg.DAY
    d1 = math.floor(h1 / agg.DAY) * agg.DAY
    if d0 is not None and d0 >= d1:
        out.append((agg.HOUR, h0, h1))
        return out
    if h0 is not None and h0 < d0:
        out.append((agg.HOUR, h0, d0))
    out.append((agg.DAY, d0, d1))
    if d1 < h1:
        out.append((agg.HOUR, d1, h1))
    return out


class Cube:
    """The aggregates of one scope and range; each method returns sums keyed by the columns
    asked for (and the time bucket `t` of `step` seconds when given)."""

    def __init__(self, scope, start=None, end=None):
        self.scope = scope
        self.start = scope.start if start is None and scope.start else start
        self.end = end or scope.end
        self.user_key = scope.user_id
        self.nobody = False
        if scope.username:
            pk = (
                get_user_model()
                .objects.filter(username=scope.username)
                .values_list("pk", flat=True)
                .first()
            )
            if pk is None or (self.user_key is not None and pk != self.user_key):
                self.nobody = True
            self.user_key = pk
        self._raw = {}

    # -- filters ---------------------------------------------------------------------------

    def _filters(self, with_user_source=True, models=True):
        where, params = [], []
        s = self.scope
        if models:
            for col in ("resolved_model", "requested_model"):
                if getattr(s, col):
                    where.append(f"{_q(col)} = %s")
                    params.append(getattr(s, col))
        if with_user_source:
            if self.user_key is not None:
                where.append(f"{_q('user_key')} = %s")
                params.append(self.user_key)
            if s.source:
                where.append(f"{_q('source')} = %s")
                params.append(s.source)
        return where, params

    @property
    def full(self):
        """Whether histogram rows must be the per-user-and-source ones."""
        return self.user_key is not None or bool(self.scope.source)

    # -- raw rows: the partial hours at the edges, and the active streams --------------------

    def raw_rows(self, step=None):
        """[(row, findings)] of the finished streams in the raw windows and of the active
        streams in the range."""
        key = step is not None and step % agg.DAY != 0
        if key in self._raw:
            return self._raw[key]
        import datetime as dt

        rows = []
        if not self.nobody:
            for span, lo, hi in windows(self.start, self.end, step):
                if span != "raw":
                    continue
                w = scope_where(
                    replace(
                        self.scope,
                        start=dt.datetime.fromtimestamp(lo, dt.UTC),
                        end=dt.datetime.fromtimestamp(hi, dt.UTC),
                    )
                ).add(f"{_q('status')} NOT IN ('pending', 'streaming')")
                rows += agg.read_streams(w.sql(), w.params)
            w = scope_where(replace(self.scope, start=self.start, end=self.end)).add(
                f"{_q('status')} IN ('pending', 'streaming')"
            )
            rows += agg.read_streams(w.sql(), w.params)
        self._raw[key] = rows
        return rows

    @staticmethod
    def _raw_key(row, by, step):
        out = []
        for col in by:
            if col == "user_key":
                out.append(row["user_id"] or 0)
            elif col == "t":
                out.append(int(agg.epoch_s(row["created_at"]) // step) * step)
            else:
                out.append(row[col])
        return tuple(out)

    def _rollup(
        self, model, value_cols, by, step, extra=(), extra_params=(), full_filter=True, models=True
    ):
        """{key: [sums]} from the hour and day rows of `model` in the range."""
        out = {}
        if self.nobody:
            return out
        cols = [c for c in by if c != "t"]
        select = [_q(c) for c in cols]
        group = list(select)
        if "t" in by:
            tb = f"(({_q('t')} / {int(step)}) * {int(step)})"
            select.insert(by.index("t"), tb)
            group.append(tb)
        # the cast: PostgreSQL's SUM of bigint is numeric, slow to turn into Decimals
        sums = [f"CAST(SUM({_q(v)}) AS BIGINT)" for v in value_cols]
        where_f, params_f = self._filters(with_user_source=full_filter, models=models)
        parts = []
        for span, lo, hi in windows(self.start, self.end, step):
            if span == "raw":
                continue
            where = [f"{_q('span')} = %s", *extra, *where_f]
            params = [span, *extra_params, *params_f]
            if lo is not None:
                where.append(f"{_q('t')} >= %s")
                params.append(int(lo))
            where.append(f"{_q('t')} < %s")
            params.append(int(hi))
            sql = (
                f"SELECT {', '.join(select + sums)} FROM {_table(model)} "
                f"WHERE {' AND '.join(where)}"
            )
            if group:
                sql += f" GROUP BY {', '.join(group)}"
            parts.append((sql, params))
        with connection.cursor() as cursor:
            for sql, params in parts:
                cursor.execute(sql, params)
                for r in cursor.fetchall():
                    # int(): PostgreSQL's SUM of bigint is numeric (Decimal)
                    k, v = tuple(r[: len(by)]), [int(x or 0) for x in r[len(by) :]]
                    acc = out.get(k)
                    if acc is None:
                        out[k] = [x or 0 for x in v]
                    else:
                        for i, x in enumerate(v):
                            acc[i] += x or 0
        return out

    # -- the four kinds of figures -----------------------------------------------------------

    def usage(self, by, step=None):
        """{key: {value name: sum}} over USAGE_VALUES; `by` from USAGE_KEY columns and "t"."""
        by = tuple(by)
        out = self._rollup(UsageRollup, agg.USAGE_VALUES, by, step)
        for row, _ in self.raw_rows(step):
            k = self._raw_key(row, by, step)
            values = agg.usage_values(row)
            acc = out.get(k)
            if acc is None:
                out[k] = [int(v) for v in values]
            else:
                for i, v in enumerate(values):
                    acc[i] += int(v)
        return {k: dict(zip(agg.USAGE_VALUES, v, strict=True)) for k, v in out.items()}

    def histograms(self, metric, by, step=None):
        """{key: Counter(bucket: n)} of TTFT or DECISION; `by` from resolved_model,
        requested_model (and user_key, source), "t"."""
        by = tuple(by)
        rows = self._rollup(
            HistogramRollup,
            ("n",),
            (*by, "bucket"),
            step,
            extra=(f"{_q('metric')} = %s", f"{_q('full')} = %s"),
            extra_params=(metric, self.full),
            full_filter=self.full,
        )
        out = defaultdict(Counter)
        for k, (n,) in rows.items():
            if n:
                out[k[:-1]][k[-1]] += n
        for row, _ in self.raw_rows(step):
            value = row["ttft_ms"] if metric == agg.TTFT else agg.decision_ms(row)
            if value is not None:
                out[self._raw_key(row, by, step)][agg.bucket(value)] += 1
        return out

    def routing(self, by):
        out = self._rollup(RoutingRollup, ("n",), tuple(by), None, models=False)
        for row, _ in self.raw_rows():
            if row["requested_model"] == "auto":
                k = self._raw_key(row, by, None)
                out[k] = [out.get(k, [0])[0] + 1]
        return {k: v[0] for k, v in out.items()}

    def findings(self, by, code=None):
        extra, params = (), ()
        if code is not None:
            extra, params = (f"{_q('code')} = %s",), (code,)
        out = self._rollup(FindingRollup, ("n",), tuple(by), None, extra, params)
        for row, found in self.raw_rows():
            for c, severity, n in found:
                if code is not None and c != code:
                    continue
                values = {**row, "code": c, "severity": severity}
                k = self._raw_key(values, by, None)
                out[k] = [out.get(k, [0])[0] + n]
        return {k: v[0] for k, v in out.items()}

    def raw_values(self, start, end, value_sql):
        """[(resolved_model, created_at epoch s, value)] of every stream in [start, end) with
        a value: for short ranges, whose few rows are cheaper to read once than to aggregate."""
        w = scope_where(replace(self.scope, start=start, end=end)).add(f"{value_sql} IS NOT NULL")
        sql = (
            f"SELECT {_q('resolved_model')}, {_q('created_at')}, {value_sql} "
            f"FROM {_q(Stream._meta.db_table)} WHERE {w.sql()}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, w.params)
            return [(m, agg.epoch_s(t), v) for m, t, v in cursor.fetchall()]

    def ttft_max(self, pairs):
        """{(resolved, requested): exact max TTFT} from the raw rows' ttft-ordered index."""
        from dashboard.stats.sql import _ranked

        jobs = []
        for resolved, requested in pairs:
            w = scope_where(replace(self.scope, start=self.start, end=self.end))
            if not self.scope.resolved_model:
                w.eq("resolved_model", resolved)
            if not self.scope.requested_model:
                w.eq("requested_model", requested)
            jobs.append(_ranked(w, _q("ttft_ms"), 0, descending=True))
        return dict(zip(pairs, _scalars(jobs), strict=True))


def pair_aggregates(cube, pairs=None):
    """What `pairs.pair_aggregates` returns, from the cube: {(resolved, requested): {count,
    active, failed, stalled, truncated, ttft_n, ttft_sum, ttft_max, itl_n, itl_sum, routed}}."""
    usage = cube.usage(("resolved_model", "requested_model", "status"))
    out = {}
    for (resolved, requested, status), v in usage.items():
        if not v["n"]:
            continue
        a = out.setdefault(
            (resolved, requested),
            {
                "count": 0, "active": 0, "failed": 0, "stalled": 0, "truncated": 0,
                "ttft_n": 0, "ttft_sum": 0, "ttft_max": None, "itl_n": 0, "itl_sum": 0,
                "routed": 0,
            },
        )  # fmt: skip
        a["count"] += v["n"]
        if status in agg.ACTIVE:
            a["active"] += v["n"]
        if status in ("failed", "stalled", "truncated"):
            a[status] += v["n"]
        a["ttft_n"] += v["ttft_n"]
        a["ttft_sum"] += v["ttft_sum_ns"]
        a["itl_n"] += v["itl_n"]
        a["itl_sum"] += v["itl_sum_ns"]
        a["routed"] += v["routed"]
    for a in out.values():
        a["ttft_sum"] = a["ttft_sum"] / 1e6 if a["ttft_n"] else None
        a["itl_sum"] = a["itl_sum"] / 1e6 if a["itl_n"] else None
    if pairs is not None:
        out = {p: a for p, a in out.items() if p in set(pairs)}
    maxima = cube.ttft_max([p for p, a in out.items() if a["ttft_n"]])
    for p, m in maxima.items():
        out[p]["ttft_max"] = m
    return out


def short_series(scope, models, bounds, step, windows, value_sql, qs):
    """A time series of a short range (steps under an hour: ranges up to ~28 h) from its raw
    rows, read once: per model and bucket the count and exact nearest-rank percentiles."""
    from dashboard.stats.sql import PCT_NAMES, nearest_rank

    c = Cube(scope, bounds[0], bounds[1])
    values = defaultdict(list)
    wanted = set(models)
    for model, t, v in c.raw_values(bounds[0], bounds[1], value_sql):
        if model in wanted:
            values[(model, int(t // step) * step)].append(v)
    ts = [int(lo.timestamp()) for lo, _ in windows]
    series = []
    for model in models:
        entry = {"model": model, "n": [len(values.get((model, t), ())) for t in ts]}
        for q in qs:
            entry[PCT_NAMES[q]] = [nearest_rank(values.get((model, t), ()), q) for t in ts]
        series.append(entry)
    return {"step": step, "t": ts, "series": series}


def group_percentiles(hists, groups, qs, maxima=None):
    """{group: {q: value}} from per-pair histograms {pair: Counter} and groups {group: [pairs]}."""
    out = {}
    for g, members in groups.items():
        merged = Counter()
        for p in members:
            merged.update(hists.get(p, ()))
        top = maxima.get(g) if maxima else None
        out[g] = {q: agg.percentile(merged, q, top) for q in qs}
    return out
