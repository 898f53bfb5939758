"""The figures of `source.Source` read from the pre-aggregates (`cube.Cube`): counts, sums,
rates and maxima exact; percentiles and histogram bins from the merged log-bucketed histograms,
within `aggregates.ERROR_BOUND` of the exact value.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import replace

from streams.stats import cube
from streams.stats.exact import usage_columns, usage_windows
from streams.stats.pairs import series_bounds
from streams.stats.score_figures import ScoreFigures
from streams.stats.sql import (
    PCT_NAMES,
    PERCENTILES,
    SERIES_PERCENTILES,
    TABLE,
    USAGE_FIGURES,
    buckets,
    day_starts,
    history_start,
    next_day,
    quote,
    scalars,
    scope_where,
)
from streams.store.aggregates import (
    HOUR,
    TTFT,
    bucket_value,
    percentiles,
    top_band,
)

DAY = 86400
# The usage rollup's columns that `sql.USAGE_FIGURES` are (streams: `n`), the only ones the
# usage tables read: each column summed costs its share of a scan of the rows.
_FIGURE_VALUES = ("n", *USAGE_FIGURES[1:])
_NO_USAGE = dict.fromkeys(_FIGURE_VALUES, 0)
# what the staff page's days, users and errors sum (`RollupSource._staff_usage`)
_STAFF_VALUES = ("n", "events", "output_deltas", "bytes_received", "findings")


def _usage_figures(v):
    """`sql.USAGE_FIGURES` of the usage rollup's sums {value name: sum}."""
    return {"streams": v["n"], **{name: v[name] for name in USAGE_FIGURES[1:]}}


class RollupSource(ScoreFigures):
    """The figures of one scope from the rollup tables (and the raw rows of the partial hours
    at the range's edges and of the running streams, which `cube.Cube` adds in)."""

    method = cube.AGGREGATED

    def __init__(self, scope, now):
        self.scope = scope
        self.now = now
        self._aggregates = None
        self._usage_days = None

    def aggregates(self):
        if self._aggregates is None:
            self._aggregates = cube.pair_aggregates(self.cube)
        return self._aggregates

    def _hists(self, metric):
        return self.cube.histograms(metric, ("resolved_model", "requested_model"))

    # -- percentiles --------------------------------------------------------------------------

    def percentiles(self, groups, qs=PERCENTILES, metric=TTFT):
        aggregates = self.aggregates()
        members = {g: list(aggregates) if m is None else m for g, m in groups.items()}
        maxima = None
        if metric == TTFT:  # the exact maxima cap the top bucket's value
            maxima = {
                g: max(
                    (m for p in ps if (m := aggregates.get(p, {}).get("ttft_max")) is not None),
                    default=None,
                )
                for g, ps in members.items()
            }
        return cube.group_percentiles(self._hists(metric), members, qs, maxima)

    # -- the latency page ---------------------------------------------------------------------

    def phases(self):
        out = {}
        for (model,), v in self.cube.usage(("resolved_model",)).items():
            if v["phase_n"]:
                out[model] = (
                    v["phase_n"],
                    v["written_sum_us"],
                    v["headers_sum_us"],
                    v["created_sum_us"],
                    v["routed_or_created_sum_us"],
                    v["first_token_sum_us"],
                )
        return out

    def histogram(self, models, edges):
        """Each bucket's streams in the bin of the value the bucket stands for (so a bin may
        differ from the exact one by the streams within the bound of its edges)."""
        nbins = len(edges) - 1
        width = edges[1] - edges[0]
        merged = {m: Counter() for m in models}
        for (resolved, _), h in self._hists(TTFT).items():
            if resolved in merged:
                merged[resolved].update(h)
        out = {}
        for model in models:
            counts = [0] * (nbins + 1)
            for b, n in merged[model].items():
                counts[min(nbins, int(bucket_value(b) // width))] += n
            out[model] = counts
        return out

    def series(self, models, qs=SERIES_PERCENTILES, requested_model=""):
        """From the cube when its steps are whole hours (ranges over ~28 h); shorter ranges
        read their few rows raw (`cube.short_series`, exact)."""
        scope, pairs = self.scope, list(self.aggregates())
        if requested_model:
            scope = replace(scope, requested_model=requested_model)
            pairs = [p for p in pairs if p[1] == requested_model]
        bounds = self.series_bounds(scope)
        if bounds is None or not models:
            return None
        step, windows = buckets(*bounds, tz=scope.tz)
        if step % HOUR:
            value = quote("ttft_ms") if qs else quote("id")
            return cube.short_series(scope, models, bounds, step, windows, value, qs, pairs=pairs)
        c = self.series_cube(scope)
        ts = [int(lo.timestamp()) for lo, _ in windows]
        # the buckets of another zone than UTC: local hours and days (a Grid), unless they are
        # the epoch-aligned ones anyway
        by_t = cube.grid(step, [*ts, int(windows[-1][1].timestamp())])
        if not qs:
            usage = c.usage(("resolved_model", "t"), by_t)
            series = [
                {"model": m, "n": [usage.get((m, t), {}).get("n", 0) for t in ts]} for m in models
            ]
            return {"step": step, "t": ts, "series": series}
        hists = c.histograms(TTFT, ("resolved_model", "t"), by_t)
        series = []
        for model in models:
            entry = {"model": model, "n": []}
            for q in qs:
                entry[PCT_NAMES[q]] = []
            for t in ts:
                h = hists.get((model, t), {})
                entry["n"].append(sum(h.values()))
                values = percentiles(h, qs)
                for q in qs:
                    entry[PCT_NAMES[q]].append(values[q])
            series.append(entry)
        return {"step": step, "t": ts, "series": series}

    def top_band(self, k):
        """With a tag filter, where the k highest TTFTs lie, from the merged histogram."""
        if not self.scope.tag:
            return None
        merged = Counter()
        for h in self._hists(TTFT).values():
            merged.update(h)
        return top_band(merged, k)

    # -- the routing page ---------------------------------------------------------------------

    def routing(self):
        if self.scope.requested_model not in ("", "auto"):
            return {}
        # (the routing rollups are not keyed by model filters: the resolved one is in the key)
        counts = self.cube.routing(("resolved_model", "routing_category", "routing_source"))
        resolved = self.scope.resolved_model
        return {k: n for k, n in counts.items() if n and (not resolved or k[0] == resolved)}

    def findings(self, by, code=None):
        return self.cube.findings(tuple(by), code=code)

    # -- the staff analytics page -------------------------------------------------------------

    def _staff_usage(self, by, values):
        """The staff page's days, users and errors, folded from one read of the usage rows
        by day, user, status and error code (three groupings of the same rows, which
        PostgreSQL reads scattered over the heap, a page each: one scan instead of three) when
        the days (`_days`) cover the range; else read as asked."""
        days, by_day = self._days()
        if not days or next_day(days[-1]) < (self.scope.end or self.now):
            return self.cube.usage(by, values=values)
        self.cube.usage(("t", "user_key", "status", "error_code"), by_day, _STAFF_VALUES)
        return self.cube.usage(by, by_day, values)

    def days(self):
        """All time begins with the oldest aggregated day: retention may have deleted its
        rows, not its day's aggregates (`_days`). Local days: whole UTC days' rows only where
        they are the UTC days (else hour rows, and the raw rows of the half hours of a zone
        with a half-hour offset)."""
        days, _ = self._days()
        if not days:
            return []
        per = {}
        for (t, status), v in self._staff_usage(("t", "status"), ("n", "events")).items():
            e = per.setdefault(t, [0, 0, 0])
            e[0] += v["n"]
            e[1] += v["n"] if status == "failed" else 0
            e[2] += v["events"]
        out = []
        for d in days:
            streams, failed, events = per.get(int(d.timestamp()), (0, 0, 0))
            out.append({"day": d.date(), "streams": streams, "failed": failed, "events": events})
        return out

    def users(self):
        out = {}
        values = ("n", "output_deltas", "bytes_received", "findings")
        for (user, status), v in self._staff_usage(("user_key", "status"), values).items():
            e = out.setdefault(
                user or None,
                {"streams": 0, "failed": 0, "output_deltas": 0, "bytes": 0, "findings": 0},
            )
            e["streams"] += v["n"]
            e["failed"] += v["n"] if status == "failed" else 0
            e["output_deltas"] += v["output_deltas"]
            e["bytes"] += v["bytes_received"]
            e["findings"] += v["findings"]
        return {u: e for u, e in out.items() if e["streams"]}

    def last_streams(self, users):
        """One seek of (user, created_at) each."""
        subqueries = []
        for u in users:
            w = scope_where(self.scope)
            w.add(f"{quote('user_id')} IS NULL") if u is None else w.eq("user_id", u)
            subqueries.append(
                (f"SELECT MAX({quote('created_at')}) FROM {quote(TABLE)} WHERE {w.sql()}", w.params)
            )
        out = {}
        for u, value in zip(users, scalars(subqueries), strict=True):
            if isinstance(value, str):
                value = dt.datetime.fromisoformat(value)
            if value is not None and value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)
            out[u] = value
        return out

    def errors(self, statuses):
        return {
            (s, code): v["n"]
            for (s, code), v in self._staff_usage(("status", "error_code"), ("n",)).items()
            if s in statuses and v["n"]
        }

    # -- the usage page -----------------------------------------------------------------------

    def _days(self):
        """(the local days of `days`, all time from the oldest aggregated day; what the cube is
        asked with for them: `cube.grid`), once per source."""
        if self._usage_days is None:
            scope = self.scope
            start = scope.start
            if start is None:
                known = [x for x in (history_start(scope), cube.first_day(scope)) if x is not None]
                start = min(known) if known else None
            days = [] if start is None else day_starts(start, scope.end or self.now, tz=scope.tz)
            edges = [*(d.timestamp() for d in days), next_day(days[-1]).timestamp()] if days else []
            self._usage_days = (days, cube.grid(DAY, edges) if days else None)
        return self._usage_days

    def usage(self, by):
        """Read per day (`_days`) when the days cover the range: the per-day figures then fold
        from the same read (one scan of the rollup rows for both tables). Not per project:
        over every project those are each project's rows, ~100 a project and day at 1M
        streams (the staff's spend per project: 154,000 rows for 30 days), and no per-day
        table folds from them; grouped by day too they took twice as long."""
        cols = tuple(_ROLLUP_COLUMNS.get(c, c) for c in by)
        days, by_day = self._days()
        step = None
        if days and next_day(days[-1]) >= (self.scope.end or self.now) and "project" not in by:
            step = by_day
            self.cube.usage((*cols, "t"), step=step, values=_FIGURE_VALUES)
        out = {}
        for k, v in self.cube.usage(cols, step=step, values=_FIGURE_VALUES).items():
            if v["n"]:
                # (the rollups' key of no user, or no project, is 0)
                pairs = zip(by, k, strict=True)
                key = tuple(None if c in _ROLLUP_COLUMNS and x == 0 else x for c, x in pairs)
                out[key] = _usage_figures(v)
        return out

    def usage_tags(self):
        tags = self.cube.tag_usage(_FIGURE_VALUES)
        return {tag: _usage_figures(v) for tag, v in tags.items() if v["n"]}

    def usage_days(self):
        days, by_day = self._days()
        if not days:
            return []
        per = self.cube.usage(("t",), step=by_day, values=_FIGURE_VALUES)
        return [
            {"day": d.date(), **_usage_figures(per.get((int(d.timestamp()),), _NO_USAGE))}
            for d in days
        ]

    def usage_series(self):
        """From the cube when its steps are whole hours (the page's own cube: the range's rows
        all lie within the series' bounds, and a step of a day folds from the days' read);
        shorter steps (ranges up to ~28 h) from their raw rows, summed per bucket by the
        database (exact, as `series`)."""
        scope = self.scope
        bounds = series_bounds(scope, self.now)
        if bounds is None:
            return None
        step, windows = buckets(*bounds, tz=scope.tz)
        if step % HOUR:
            clipped = [(max(lo, bounds[0]), min(hi, bounds[1])) for lo, hi in windows]
            return usage_columns(step, windows, usage_windows(scope, clipped))
        ts = [int(lo.timestamp()) for lo, _ in windows]
        by_t = cube.grid(step, [*ts, int(windows[-1][1].timestamp())])
        per = self.cube.usage(("t",), by_t, values=_FIGURE_VALUES)
        return usage_columns(step, windows, [_usage_figures(per.get((t,), _NO_USAGE)) for t in ts])


# Source.usage's grouping names that the rollups spell otherwise (their numeric keys; 0: none)
_ROLLUP_COLUMNS = {"user": "user_key", "project": "project_key"}
