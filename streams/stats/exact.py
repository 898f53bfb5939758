"""The figures of `source.Source` read from the raw stream and finding rows: every figure exact
(percentiles by ordered offset, `sql.percentiles`), computed in the database.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import replace

from django.db import connection
from django.db.models import Count

from streams.models import MAX_TAG_CHARS
from streams.stats import cube
from streams.stats.pairs import (
    group_where,
    pair_aggregates,
    per_pair_selects,
    series_bounds,
)
from streams.stats.score_figures import ScoreFigures
from streams.stats.sql import (
    IDX_CREATED,
    IDX_PAIR,
    IDX_PROJECT_CREATED,
    IDX_USAGE,
    PCT_NAMES,
    PERCENTILES,
    SERIES_PERCENTILES,
    TABLE,
    USAGE_FIGURES,
    buckets,
    day_starts,
    findings_in_scope,
    from_clause,
    history_start,
    index_for,
    next_day,
    percentiles,
    quote,
    scalars,
    scope_where,
    union_rows,
    usage_figures,
    usage_index,
    usage_select,
)
from streams.store.aggregates import DECISION, TTFT

# Finding columns by the names the rollups use
_FINDING_COLUMNS = {
    "code": "code",
    "severity": "severity",
    "resolved_model": "stream__resolved_model",
    "requested_model": "stream__requested_model",
    "status": "stream__status",
}


class ExactSource(ScoreFigures):
    """The figures of one scope from its raw rows. `narrow` (None: decided from the range):
    percentiles read a time window's rows and sort them instead of walking a model's
    ttft-ordered index (`_is_narrow`); the figures are the same either way."""

    method = cube.EXACT

    def __init__(self, scope, now, narrow=None):
        self.scope = scope
        self.now = now
        self._narrow = narrow
        self._aggregates = None
        self._users = None

    @property
    def narrow(self):
        if self._narrow is None:
            self._narrow = bool(self.scope.start) and _is_narrow(
                self.scope.span_s, (self.now - self.scope.start).total_seconds()
            )
        return self._narrow

    def aggregates(self):
        if self._aggregates is None:
            self._aggregates = pair_aggregates(self.scope)
        return self._aggregates

    # -- percentiles --------------------------------------------------------------------------

    def percentiles(self, groups, qs=PERCENTILES, metric=TTFT):
        aggregates = self.aggregates()
        pairs = list(aggregates)
        wheres = {}
        for g, members in groups.items():
            if members is None:
                wheres[g] = scope_where(self.scope)
            else:
                chosen = set(members)
                wheres[g] = group_where(self.scope, pairs, lambda p, c=chosen: p in c)
        if metric == TTFT:
            counted = {
                g: sum(a["ttft_n"] or 0 for p, a in aggregates.items() if m is None or p in m)
                for g, m in groups.items()
            }
            jobs = {g: (w, counted[g]) for g, w in wheres.items()}
            return percentiles(jobs, quote("ttft_ms"), qs, narrow=self.narrow)
        if metric == DECISION:
            # time to the routing decision: routing event − request written, in ms; the count
            # of values for the ranks uses exactly the same conditions
            value = f"({quote('routing_us')} - {quote('request_written_us')}) / 1000.0"
            for w in wheres.values():
                w.add(f"{quote('request_written_us')} IS NOT NULL")
            counts = scalars(
                [
                    (
                        f"SELECT COUNT({value}) FROM {from_clause(index_for(w, ordered=False), w)} "
                        f"WHERE {w.sql()}",
                        w.params,
                    )
                    for w in wheres.values()
                ]
            )
            jobs = {g: (w, n) for (g, w), n in zip(wheres.items(), counts, strict=True)}
            return percentiles(jobs, value, qs, narrow=True)
        raise ValueError(f"no such metric: {metric!r}")

    # -- the latency page ---------------------------------------------------------------------

    def phases(self):
        """One seek per pair of the index of milestones, summed per resolved model."""
        complete, select = _phase_sql()
        base = scope_where(self.scope, skip=("resolved_model", "requested_model")).add(complete)
        pairs = list(self.aggregates())
        sums = {}
        for i, n, *values in union_rows(per_pair_selects(base, pairs, select)):
            if not n:
                continue
            acc = sums.setdefault(pairs[i][0], [0] * 6)
            for j, v in enumerate([n, *values]):
                acc[j] += v or 0
        return {m: tuple(s) for m, s in sums.items()}

    def histogram(self, models, edges):
        """One index range count per bin and model."""
        nbins = len(edges) - 1
        pairs = list(self.aggregates())
        ttft = quote("ttft_ms")
        subqueries = []
        for model in models:
            where = group_where(self.scope, pairs, lambda p, m=model: p[0] == m)
            for i in range(nbins + 1):
                w = where.copy().add(f"{ttft} >= %s", edges[i])
                if i < nbins:
                    w.add(f"{ttft} < %s", edges[i + 1])
                index = index_for(w, ordered=True)
                subqueries.append(
                    (f"SELECT COUNT(*) FROM {from_clause(index, w)} WHERE {w.sql()}", w.params)
                )
        counts = scalars(subqueries)
        return {
            model: counts[j * (nbins + 1) : (j + 1) * (nbins + 1)] for j, model in enumerate(models)
        }

    def series(self, models, qs=SERIES_PERCENTILES, requested_model=""):
        scope, pairs = self.scope, list(self.aggregates())
        if requested_model:
            scope = replace(scope, requested_model=requested_model)
            pairs = [p for p in pairs if p[1] == requested_model]
        return _time_series(scope, pairs, models, self.now, qs)

    def top_band(self, k):
        return None

    # -- the routing page ---------------------------------------------------------------------

    def routing(self):
        """One small GROUP BY per resolved model on the pair index."""
        base = scope_where(self.scope, skip=("resolved_model", "requested_model"))
        models = sorted({r for r, q in self.aggregates() if q == "auto"})
        cat, src = quote("routing_category"), quote("routing_source")
        parts = []
        for i, model in enumerate(models):
            w = base.copy().eq("resolved_model", model).eq("requested_model", "auto")
            parts.append(
                (
                    f"SELECT {i}, {cat}, {src}, COUNT(*) FROM {from_clause(IDX_PAIR, w)} "
                    f"WHERE {w.sql()} GROUP BY {cat}, {src}",
                    w.params,
                )
            )
        return {(models[i], c, s): n for i, c, s, n in union_rows(parts)}

    def findings(self, by, code=None):
        qs = findings_in_scope(self.scope)
        if code is not None:
            qs = qs.filter(code=code)
        if not by:
            return {(): qs.count()}
        rows = qs.values_list(*(_FINDING_COLUMNS[c] for c in by)).annotate(n=Count("id"))
        return {tuple(r[:-1]): r[-1] for r in rows.order_by()}

    # -- the staff analytics page -------------------------------------------------------------

    def days(self):
        """One index range count per day; events are the `event_count` of the streams started
        that day (the only figure here that reads table rows — the recorder bumps
        event_count on every batch, so it is kept out of indexes)."""
        scope = self.scope
        end = scope.end or self.now
        start = scope.start or history_start(scope)
        if start is None:
            return []
        days = day_starts(start, end, tz=scope.tz)
        # (a user filter: the planner picks the user's index)
        table = from_clause(
            None if scope.username else IDX_PROJECT_CREATED if scope.project_id else IDX_CREATED
        )
        events = f"COALESCE(SUM({quote('event_count')}), 0)"
        subqueries = []
        for d in days:
            window = replace(scope, start=max(d, start), end=min(next_day(d), end))
            w = scope_where(window)
            wf = scope_where(window).eq("status", "failed")
            subqueries += [
                (f"SELECT COUNT(*) FROM {table} WHERE {w.sql()}", w.params),
                (f"SELECT COUNT(*) FROM {quote(TABLE)} WHERE {wf.sql()}", wf.params),
                (f"SELECT {events} FROM {table} WHERE {w.sql()}", w.params),
            ]
        values = scalars(subqueries)
        return [
            {
                "day": d.date(),
                "streams": values[3 * i],
                "failed": values[3 * i + 1],
                "events": values[3 * i + 2],
            }
            for i, d in enumerate(days)
        ]

    def users(self):
        """One GROUP BY over the user index; the newest stream of each comes with it."""
        if self._users is None:
            w = scope_where(self.scope)
            user, status = quote("user_id"), quote("status")
            sql = (
                f"SELECT {user}, COUNT(*), COUNT(CASE WHEN {status} = 'failed' THEN 1 END), "
                f"SUM({quote('output_deltas')}), SUM({quote('bytes_received')}), "
                f"SUM({quote('findings_count')}), MAX({quote('created_at')}) "
                f"FROM {from_clause(IDX_USAGE)} WHERE {w.sql()} GROUP BY {user}"
            )
            with connection.cursor() as cursor:
                cursor.execute(sql, w.params)
                rows = cursor.fetchall()
            self._users = {
                uid: {
                    "streams": n,
                    "failed": failed,
                    "output_deltas": tokens or 0,
                    "bytes": size or 0,
                    "findings": found or 0,
                    "last": _as_utc(last),
                }
                for uid, n, failed, tokens, size, found, last in rows
            }
        return {u: {k: v for k, v in e.items() if k != "last"} for u, e in self._users.items()}

    def last_streams(self, users):
        if self._users is None:
            self.users()
        return {u: self._users[u]["last"] for u in users if u in self._users}

    def errors(self, statuses):
        w = scope_where(self.scope).among("status", statuses)
        status, code = quote("status"), quote("error_code")
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {status}, {code}, COUNT(*) FROM {quote(TABLE)} WHERE {w.sql()} "
                f"GROUP BY {status}, {code}",
                w.params,
            )
            return {(s, c): n for s, c, n in cursor.fetchall()}

    # -- the usage page -----------------------------------------------------------------------

    def usage(self, by):
        """One GROUP BY over the scope's rows."""
        cols = [_USAGE_COLUMNS[c] for c in by]
        w = scope_where(self.scope)
        select, params = usage_select()
        keys = ", ".join(quote(c) for c in cols)
        sql = (
            f"SELECT {keys + ', ' if keys else ''}{select} "
            f"FROM {from_clause(usage_index(self.scope, w), w)} WHERE {w.sql()}"
        )
        if cols:
            sql += f" GROUP BY {keys}"
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, *w.params])
            rows = cursor.fetchall()
        out = {}
        for r in rows:
            figures = usage_figures(r[len(cols) :])
            if figures["streams"]:
                out[tuple(r[: len(cols)])] = figures
        return out

    def usage_tags(self):
        """One GROUP BY over the scope's rows joined with their distinct tags (`_tag_rows`)."""
        scope = self.scope
        w = scope_where(scope)
        select, params = usage_select()
        tag, rows, conditions, extra = _tag_rows(f"{quote(TABLE)}.{quote('tags')}")
        if scope.tag:
            conditions += f" AND {tag} = %s"
            extra = [*extra, scope.tag]
        sql = (
            f"SELECT {tag}, {select} FROM {from_clause(usage_index(scope, w), w)}{rows} "
            f"WHERE {w.sql()} AND {conditions} GROUP BY {tag}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, *w.params, *extra])
            found = cursor.fetchall()
        return {r[0]: usage_figures(r[1:]) for r in found}

    def usage_days(self):
        """Each local day's sums, a SELECT each (the days of `days`)."""
        scope = self.scope
        end = scope.end or self.now
        start = scope.start or history_start(scope)
        if start is None:
            return []
        days = day_starts(start, end, tz=scope.tz)
        windows = [(max(d, start), min(next_day(d), end)) for d in days]
        sums = usage_windows(scope, windows)
        return [{"day": d.date(), **f} for d, f in zip(days, sums, strict=True)]

    def usage_series(self):
        bounds = series_bounds(self.scope, self.now)
        if bounds is None:
            return None
        step, windows = buckets(*bounds, tz=self.scope.tz)
        clipped = [(max(lo, bounds[0]), min(hi, bounds[1])) for lo, hi in windows]
        return usage_columns(step, windows, usage_windows(self.scope, clipped))


# Source.usage's grouping names: their columns of the stream table
_USAGE_COLUMNS = {
    "resolved_model": "resolved_model",
    "requested_model": "requested_model",
    "user": "user_id",
    "project": "project_id",
    "status": "status",
    "source": "source",
}


def usage_windows(scope, windows):
    """[{figure: value}] (`sql.USAGE_FIGURES`) of `scope`'s rows in each [lo, hi) window
    (datetimes): one SELECT each, a few statements in all."""
    select, params = usage_select()
    parts = []
    for i, (lo, hi) in enumerate(windows):
        w = scope_where(replace(scope, start=lo, end=hi))
        table = from_clause(usage_index(scope, w), w)
        parts.append(
            (
                f"SELECT {i}, {select} FROM {table} WHERE {w.sql()}",
                [*params, *w.params],
            )
        )
    out = [dict.fromkeys(USAGE_FIGURES, 0) for _ in windows]
    for i, *values in union_rows(parts):
        out[i] = usage_figures(values)
    return out


def usage_columns(step, windows, sums):
    """`Source.usage_series`' shape: {"step", "t": [bucket starts], figure: [per bucket]}."""
    out = {"step": step, "t": [int(lo.timestamp()) for lo, _ in windows]}
    for name in USAGE_FIGURES:
        out[name] = [s[name] for s in sums]
    return out


def _tag_rows(tags):
    """(the tag's SQL, what joins each stream row with its tags, the conditions, their
    params): one row per stream and distinct tag, as `aggregates.stream_tags` keeps them
    (non-empty strings of at most MAX_TAG_CHARS) from the JSON list `tags` (quoted SQL)."""
    if connection.vendor == "postgresql":
        rows = (
            f" CROSS JOIN LATERAL (SELECT DISTINCT e.value #>> '{{}}' AS tag FROM "
            f"jsonb_array_elements(CASE WHEN jsonb_typeof({tags}) = 'array' THEN {tags} "
            f"ELSE '[]'::jsonb END) AS e(value) WHERE jsonb_typeof(e.value) = 'string') AS t"
        )
        return "t.tag", rows, "t.tag <> '' AND length(t.tag) <= %s", [MAX_TAG_CHARS]
    # SQLite: json_each's rows, each tag at its first place in the list only
    rows = f", json_each({tags}) AS j"
    conditions = (
        f"json_type({tags}) = 'array' AND j.type = 'text' AND j.value <> '' "
        f"AND length(j.value) <= %s AND j.key = (SELECT MIN(k.key) FROM json_each({tags}) AS k "
        f"WHERE k.type = 'text' AND k.value = j.value)"
    )
    return "j.value", rows, conditions, [MAX_TAG_CHARS]


def _as_utc(value):
    if isinstance(value, str):  # SQLite hands back text
        value = dt.datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def _is_narrow(span_s, history_s):
    """Whether a time window holds few of a group's rows: then reading the window's rows and
    sorting them beats walking the group's ttft-ordered index (which visits all its rows)."""
    if span_s is None or not history_s:
        return False
    # The crossover measured on SQLite (docs/performance.md, "Analytics").
    return span_s / history_s < 0.08


@functools.cache
def _phase_sql():
    """(the condition that a stream reached every milestone up to the first token, the SELECT
    of its count and the sums of those milestones, routing falling back to created)."""
    m = {
        n: quote(n)
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


def _time_series(scope, pairs, models, now, qs):
    """Per model and time bucket: the count and the percentiles `qs` of TTFT (no `qs`: the
    count of streams), each bucket its own index seek."""
    bounds = series_bounds(scope, now)
    if bounds is None or not models:
        return None
    step, windows = buckets(*bounds, tz=scope.tz)
    value = quote("ttft_ms") if qs else "*"
    groups = {}
    for model in models:
        for b, (lo, hi) in enumerate(windows):
            # the bucket replaces the page's range, so the index seek covers the bucket only
            window = replace(scope, start=max(lo, bounds[0]), end=min(hi, bounds[1]))
            groups[(model, b)] = group_where(window, pairs, lambda p, m=model: p[0] == m)
    counts = scalars(
        [
            (
                f"SELECT COUNT({value}) FROM {from_clause(index_for(w, ordered=False), w)} "
                f"WHERE {w.sql()}",
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
