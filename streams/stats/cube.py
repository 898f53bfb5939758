"""Reading the pre-aggregates (streams/store/aggregates.py) for a scope, exactly where they can be.

A range [start, end) is split into whole UTC days (day rows), whole hours at its ends (hour
rows), and the partial hours at its edges, read from the raw stream rows — as are the few
active streams, which are not aggregated yet. All three add up, so counts, sums and rates are
exact; percentiles come from the merged log-bucketed histograms (within
`aggregates.ERROR_BOUND`), maxima from the raw rows' ttft-ordered index (exact).

`method(scope)`: the aggregates hold no sessions, so a scope with a session filter is
computed from the raw rows (exact) by the callers, on the session index; so is a small
history (`EXACT_BELOW` streams), where the raw queries are fast anyway and every figure is
exact. What counts is the instance's history, not the scope's: the raw indexes hold every
project's streams (the project is checked in each entry), so a small project of a large
instance would walk them all. Status and tag filters read the rollups: every table is keyed
by the stream's status and tag (a tagged stream's rows are there once per tag besides its ""
ones). The pages say which was used (`report.method`).
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from django.contrib.auth import get_user_model
from django.db import connection

from streams.core.figures import rank
from streams.models import (
    FindingRollup,
    HistogramRollup,
    ProjectRollup,
    RoutingRollup,
    ScoreRollup,
    UsageRollup,
)
from streams.stats.sql import (
    IDX_PAIR,
    PCT_NAMES,
    ROLLUPS,
    access_where,
    epoch_seconds,
    from_clause,
    index_for,
    memoized,
    quote,
    scalars,
    scope_where,
    time_index,
)
from streams.store import aggregates as agg

EXACT_BELOW = 20_000  # streams of the instance: below this every figure is exact (raw)

EXACT = "exact"
AGGREGATED = "aggregated"


def _table(model):
    return quote(model._meta.db_table)


def visible_streams(scope):
    """Finished streams the scope may see (its project's, or every project's), all time,
    from the day rows (once per report)."""
    return memoized(("visible_streams", scope.project_id), lambda: _visible_streams(scope))


def small_history(scope):
    """Whether the raw rows are few enough to read every figure from them exactly: the
    instance's (every project's) streams, whatever the scope (module docstring)."""
    return visible_streams(replace(scope, project_id=None)) < EXACT_BELOW


def _visible_streams(scope):
    # (the project rollup's day rows: one a project and day, where the usage rollup has
    # hundreds; every page asks, through `method`)
    where = access_where(scope, ROLLUPS).eq("span", agg.DAY)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM({quote('n')}), 0) FROM {_table(ProjectRollup)} "
            f"WHERE {where.sql()}",
            where.params,
        )
        return cursor.fetchone()[0]


def first_day(scope):
    """The start of the oldest aggregated day the scope may see (None: none)."""
    import datetime as dt

    where = access_where(scope, ROLLUPS).eq("span", agg.DAY)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MIN({quote('t')}) FROM {_table(ProjectRollup)} WHERE {where.sql()}",
            where.params,
        )
        t = cursor.fetchone()[0]
    return None if t is None else dt.datetime.fromtimestamp(t, dt.UTC)


def tags_known():
    """Every tag with aggregated streams, from the day rows (whose key begins (span, tag): a
    loose index scan, one seek per tag); once per report."""
    return memoized(("tags_known",), _tags_known)


def _tags_known():
    table, span, tag = _table(UsageRollup), quote("span"), quote("tag")
    sql = (
        f"WITH RECURSIVE v(x) AS ("
        f"SELECT MIN({tag}) FROM {table} WHERE {span} = %s AND {tag} > '' "
        f"UNION ALL SELECT (SELECT MIN({tag}) FROM {table} WHERE {span} = %s AND {tag} > v.x) "
        f"FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [agg.DAY, agg.DAY])
        return [r[0] for r in cursor.fetchall()]


def projects_known():
    """Every project key with aggregated streams (0: of no project), from the project rollup's
    day rows (key (span, tag, project_key, t): a loose index scan, one seek per project); once
    per report."""
    return memoized(("projects_known",), _projects_known)


def _projects_known():
    table, span, tag, key = _table(ProjectRollup), quote("span"), quote("tag"), quote("project_key")
    where = f"{span} = %s AND {tag} = ''"
    sql = (
        f"WITH RECURSIVE v(x) AS (SELECT MIN({key}) FROM {table} WHERE {where} AND {key} > %s "
        f"UNION ALL SELECT (SELECT MIN({key}) FROM {table} WHERE {where} AND {key} > v.x) "
        f"FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [agg.DAY, agg.EVERY_PROJECT, agg.DAY])
        return [r[0] for r in cursor.fetchall()]


def method(scope):
    """EXACT (raw rows) or AGGREGATED for this scope."""
    if scope.session or scope.token_id is not None:
        return EXACT
    if small_history(scope):
        return EXACT
    return AGGREGATED


def windows(start, end, step=None):
    """[(span, lo, hi)] in epoch seconds covering [start, end): span "raw" or one of
    `agg.SPANS`. `start` None is the whole history. Whole periods of the coarsest span that
    divides `step` (any, without a step) fill the middle, finer spans the remaining edges, and
    the partial hours at the ends are raw: so a row of any period lies inside one step bucket."""
    spans = [s for s in agg.SPANS if step is None or step % s == 0]
    out = []

    def cover(lo, hi, spans):
        if not spans:
            if lo is None or lo < hi:
                out.append(("raw", lo, hi))
            return
        span = spans[-1]
        a = None if lo is None else math.ceil(lo / span) * span
        b = math.floor(hi / span) * span
        if a is not None and a >= b:
            return cover(lo, hi, spans[:-1])
        if lo is not None and lo < a:
            cover(lo, a, spans[:-1])
        out.append((span, a, b))
        if b < hi:
            cover(b, hi, spans[:-1])

    cover(None if start is None else start.timestamp(), end.timestamp(), spans)
    return out


def _bucket_sql(step, starts):
    """SQL of a rollup row's bucket: its period's `t` floored to the `step` (epoch-aligned), or
    the start of the grid bucket it lies in (`starts`, ascending: a CASE over them)."""
    t = quote("t")
    if starts is None:
        return f"(({t} / {int(step)}) * {int(step)})"
    if len(starts) == 1:
        return str(int(starts[0]))
    whens = " ".join(
        f"WHEN {t} < {int(b)} THEN {int(a)}" for a, b in zip(starts, starts[1:], strict=False)
    )
    return f"(CASE {whens} ELSE {int(starts[-1])} END)"


@dataclass(frozen=True)
class Grid:
    """Time buckets [edges[i], edges[i+1]) in epoch seconds, of any lengths: the local days or
    hours of a zone other than UTC (`sql.buckets`, `sql.day_starts`), which the epoch-aligned
    `step` of the rollups' SQL cannot express."""

    edges: tuple

    def key(self, ts):
        """The start of the bucket `ts` is in (the first or last bucket's, outside them)."""
        i = bisect.bisect_right(self.edges, ts) - 1
        return self.edges[min(max(i, 0), len(self.edges) - 2)]


def grid(step, edges):
    """What a Cube is asked with for buckets starting at `edges` (epoch seconds, the last
    one the end): `step` where they are `step` apart and epoch-aligned (UTC; a zone whose
    offset is a multiple of it), else a Grid."""
    edges = tuple(int(e) for e in edges)
    if all(e % step == 0 for e in edges) and all(
        b - a == step for a, b in zip(edges, edges[1:], strict=False)
    ):
        return step
    return Grid(edges)


def grid_windows(start, end, g):
    """[(span, lo, hi, starts)] covering [start, end) ∩ the grid's buckets: each bucket covered
    as `windows` covers a range (whole days, hours, raw partial hours), so a period lies inside
    one bucket; adjacent windows of one span are joined, `starts` being the starts of the
    buckets a joined window reaches into (a local day's 24 hour rows, or 23, are one window;
    with a half-hour offset every bucket's hour rows are apart, its half hours raw)."""
    lo_all = None if start is None else start.timestamp()
    hi_all = end.timestamp()
    out, last = [], {}
    for a, b in zip(g.edges, g.edges[1:], strict=False):
        lo = a if lo_all is None else max(a, lo_all)
        hi = min(b, hi_all)
        if lo >= hi:
            continue
        for span, x, y in windows(
            dt.datetime.fromtimestamp(lo, dt.UTC), dt.datetime.fromtimestamp(hi, dt.UTC)
        ):
            run = last.get(span)
            if run is not None and run[2] == x:
                run[2] = y
                if run[3][-1] != a:
                    run[3].append(a)
            else:
                last[span] = run = [span, x, y, [a]]
                out.append(run)
    return [(span, lo, hi, tuple(starts)) for span, lo, hi, starts in out]


class Cube:
    """The aggregates of one scope and range; each method returns sums keyed by the columns
    asked for (and the time bucket `t` of `step` seconds when given, or of a `Grid`'s buckets:
    the start of its bucket)."""

    def __init__(self, scope, start=None, end=None):
        self.scope = scope
        self.start = scope.start if start is None and scope.start else start
        self.end = end or scope.end
        self.user_key = None  # the user filter's, resolved to a key
        self.nobody = False
        if scope.username:
            self.user_key = (
                get_user_model()
                .objects.filter(username=scope.username)
                .values_list("pk", flat=True)
                .first()
            )
            self.nobody = self.user_key is None
        self._raw = {}
        self._found = None  # the findings of raw_rows() (`_raw_findings`)
        self._raw_values = {}  # stream id -> its USAGE_VALUES (`raw_usage_values`)
        self._usage = {}  # (by, step, values) -> what usage() returned
        self._hists = {}  # (metric, by, step) -> what histograms() returned

    # -- filters ---------------------------------------------------------------------------

    def _where(self, with_user_source=True, models=True, tags=None, by_project=False):
        """The scope's conditions on the rollup rows (`sql.scope_where` on `sql.ROLLUPS`), its
        user resolved to a key; the range is the periods' (`_windows`). `tags`: the rows of
        those tags instead (one key range each). `by_project`: grouped by project, so an
        all-projects scope reads each project's rows, not those of every project."""
        skip = ()
        if not models:
            skip += ("resolved_model", "requested_model")
        if not with_user_source:
            skip += ("user", "source")
        every = by_project and self.scope.project_id is None
        if every:
            skip += ("project",)
        w = scope_where(replace(self.scope, username=""), skip=skip, rows=ROLLUPS, tags=tags)
        if every:
            # per project, of every project: one key range each (the project is before `t`)
            w.among("project_key", projects_known())
        if self.user_key is not None and with_user_source:
            w.eq("user_key", self.user_key)
        return w

    def _filters(self, with_user_source=True, models=True, tags=None, by_project=False):
        w = self._where(with_user_source, models, tags, by_project)
        return w.parts, w.params

    def _usage_model(self, by, values):
        """The table usage figures `by` these columns are read from: the project rollup when it
        holds them (its key has every column grouped by and every one the scope's conditions
        name, its values every value asked for), else the usage rollup. Its few rows a
        project and day are what an unfiltered page's totals, days and spend per project sum
        (`ProjectRollup`)."""
        w = self._where(by_project="project_key" in by)
        named = {c for c in by if c != "t"} | w.eqs | w.ins
        # (a condition that names no column, whatever it is, keeps to the usage rollup)
        unnamed = len(w.parts) > len(w.eqs) + len(w.ins)
        if unnamed or not named <= set(agg.PROJECT_KEY):
            return UsageRollup
        return ProjectRollup if set(values) <= set(agg.PROJECT_VALUES) else UsageRollup

    @property
    def full(self):
        """Whether histogram rows must be the per-user-and-source ones (the summed ones are
        per project too)."""
        return self.user_key is not None or bool(self.scope.source)

    def _windows(self, step):
        """[(span, lo, hi, starts)]: `windows` (starts None: the SQL buckets by `step`), or
        `grid_windows` of a Grid."""
        if isinstance(step, Grid):
            return grid_windows(self.start, self.end, step)
        return [(*w, None) for w in windows(self.start, self.end, step)]

    # -- raw rows: the partial hours at the edges, and the active streams --------------------

    def raw_rows(self, step=None):
        """[(row, (), ())] (`aggregates.read_streams`) of the finished streams in the raw
        windows and of the active streams in the range (their findings and scores: `findings`
        and `scores` read them, the only figures that need them; the latency and usage pages
        never do)."""
        # the raw windows are the partial hours at the ends, whatever the coarser periods (a
        # grid's: each bucket's partial hours)
        key = step if isinstance(step, Grid) else (step is None or step % agg.HOUR == 0)
        if key in self._raw:
            return self._raw[key]

        rows = []
        if not self.nobody:
            for span, lo, hi, _ in self._windows(step):
                if span != "raw":
                    continue
                w = scope_where(
                    replace(
                        self.scope,
                        start=None if lo is None else dt.datetime.fromtimestamp(lo, dt.UTC),
                        end=dt.datetime.fromtimestamp(hi, dt.UTC),
                    )
                ).add(f"{quote('status')} NOT IN ({agg.ACTIVE_MARKS})", *agg.ACTIVE)
                # under an hour of rows: by time (a model's index would read all its history)
                rows += agg.read_streams(
                    w.sql(), w.params, index=time_index(w), with_scores=False, with_findings=False
                )
            w = scope_where(replace(self.scope, start=self.start, end=self.end)).add(
                f"{quote('status')} IN ({agg.ACTIVE_MARKS})", *agg.ACTIVE
            )
            # the few active rows, by status (a user's index would read all their history)
            rows += agg.read_streams(
                w.sql(), w.params, index="stream_status_created", with_scores=False,
                with_findings=False,
            )  # fmt: skip
        self._raw[key] = rows
        return rows

    @staticmethod
    def _raw_key(row, by, step):
        out = []
        for col in by:
            if col == "user_key":
                out.append(row["user_id"] or 0)
            elif col == "project_key":
                out.append(row["project_id"] or 0)
            elif col == "t" and isinstance(step, Grid):
                out.append(step.key(agg.epoch_s(row["created_at"])))
            elif col == "t":
                out.append(int(agg.epoch_s(row["created_at"]) // step) * step)
            else:
                out.append(row[col])
        return tuple(out)

    def _rollup_rows(
        self, model, value_cols, by, step, extra=(), extra_params=(), full_filter=True, models=True,
        tags=None,
    ):  # fmt: skip
        """The grouped rows (key columns, then sums) of `model`'s periods in the range, one
        statement per kind of period (per run of them, on a Grid). `tags`: the rows of these
        tags (`_filters`)."""
        if self.nobody or tags == []:
            return
        cols = [c for c in by if c != "t"]
        # the cast: PostgreSQL's SUM of bigint is numeric, slow to turn into Decimals
        sums = [f"CAST(SUM({quote(v)}) AS BIGINT)" for v in value_cols]
        where_f, params_f = self._filters(
            with_user_source=full_filter, models=models, tags=tags, by_project="project_key" in by
        )
        parts = []
        for span, lo, hi, starts in self._windows(step):
            if span == "raw":
                continue
            select = [quote(c) for c in cols]
            group = list(select)
            if "t" in by:
                tb = _bucket_sql(step, starts)
                select.insert(by.index("t"), tb)
                if len(starts or ()) != 1:  # (never a bare number: GROUP BY 1 is a column)
                    group.append(tb)
            where = [f"{quote('span')} = %s", *extra, *where_f]
            params = [span, *extra_params, *params_f]
            if lo is not None:
                where.append(f"{quote('t')} >= %s")
                params.append(int(lo))
            where.append(f"{quote('t')} < %s")
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
                yield from cursor.fetchall()

    def _rollup(self, model, value_cols, by, step, **kwargs):
        """{key: [sums]} from the rollup periods of `model` in the range."""
        out = {}
        nk = len(by)
        for r in self._rollup_rows(model, value_cols, by, step, **kwargs):
            # (the sums are CAST to BIGINT: ints on both databases; NULL only without GROUP
            # BY over no rows)
            k, values = r[:nk], r[nk:]
            if None in values:
                values = [x or 0 for x in values]
            add_to(out, k, values)
        return out

    # -- the four kinds of figures -----------------------------------------------------------

    def usage(self, by, step=None, values=agg.USAGE_VALUES):
        """{key: {value name: sum}} over `values` (of USAGE_VALUES: all of them unless a
        caller needs fewer; each summed column costs its share of a scan); `by` from USAGE_KEY
        columns and "t". Folded from a finer grouping this cube already read, when there is
        one (a page asks per pair and status, then per model: one scan of the usage rows, not
        two)."""
        by, values = tuple(by), tuple(v for v in agg.USAGE_VALUES if v in values)
        for (finer, s, read), rows in self._usage.items():
            if s == step and set(by) <= set(finer) and set(values) <= set(read):
                at = [finer.index(c) for c in by]
                out = {}
                for k, v in rows.items():
                    key = tuple(k[i] for i in at)
                    acc = out.get(key)
                    if acc is None:
                        out[key] = {name: v[name] for name in values}
                    else:
                        for name in values:
                            acc[name] += v[name]
                return out
        self._usage[(by, step, values)] = out = self._usage_read(by, step, values)
        return out

    def raw_usage_values(self, row):
        """A raw row's USAGE_VALUES as ints, computed once per cube (the groupings and steps a
        page asks for fold the same few thousand edge rows again)."""
        values = self._raw_values.get(row["id"])
        if values is None:
            values = self._raw_values[row["id"]] = list(map(int, agg.usage_values(row)))
        return values

    def _usage_read(self, by, step, values):
        out = self._rollup(self._usage_model(by, values), values, by, step)
        at = [agg.USAGE_VALUES.index(v) for v in values]
        for row, _, _ in self.raw_rows(step):
            k = self._raw_key(row, by, step)
            every = self.raw_usage_values(row)
            acc = out.get(k)
            if acc is None:
                out[k] = [every[i] for i in at]
            else:
                for j, i in enumerate(at):
                    acc[j] += every[i]
        return {k: dict(zip(values, v, strict=True)) for k, v in out.items()}

    def tag_usage(self, values=agg.USAGE_VALUES):
        """{tag: {value name: sum}} over `values` (of USAGE_VALUES) per tag of the streams in
        range (with a tag filter, that tag alone): the tag rows, which hold a tagged stream
        once per tag, one key range per tag (`tags`), and the raw rows' tags
        (`aggregates.stream_tags`)."""
        values = tuple(v for v in agg.USAGE_VALUES if v in values)
        tags = [self.scope.tag] if self.scope.tag else tags_known()
        model = self._usage_model(("tag",), values)
        out = self._rollup(model, values, ("tag",), None, tags=tags)
        at = [agg.USAGE_VALUES.index(v) for v in values]
        for row, _, _ in self.raw_rows():
            every = self.raw_usage_values(row)
            values_ = [every[i] for i in at]
            for tag in agg.stream_tags(row):
                if self.scope.tag and tag != self.scope.tag:
                    continue
                add_to(out, (tag,), values_)
        return {k[0]: dict(zip(values, v, strict=True)) for k, v in out.items()}

    def histograms(self, metric, by, step=None):
        """{key: Counter(bucket: n)} of TTFT or DECISION; `by` from resolved_model,
        requested_model (and user_key, source), "t". Read once per cube and grouping."""
        key = (metric, tuple(by), step)
        if key not in self._hists:
            self._hists[key] = self._histograms(metric, tuple(by), step)
        return self._hists[key]

    def _histograms(self, metric, by, step):
        nk = len(by)
        rows = self._rollup_rows(
            HistogramRollup,
            ("n",),
            (*by, "bucket"),
            step,
            extra=(f"{quote('metric')} = %s", f"{quote('full')} = %s"),
            extra_params=(metric, self.full),
            full_filter=self.full,
        )
        out = defaultdict(Counter)
        # (key…, bucket, n): tens of thousands of rows on long ranges (a 7-day chart's 3-hour
        # rows: 21,000 at 1M streams), each (key, bucket) once per statement: set with `get`,
        # not `+=` (Counter's __missing__, a Python call, for every new bucket)
        for r in rows:
            n = r[-1]
            if n:
                k = r[:nk]
                counts = out.get(k)
                if counts is None:
                    counts = out[k] = Counter()
                b = r[nk]
                counts[b] = counts.get(b, 0) + n
        for row, _, _ in self.raw_rows(step):
            value = row["ttft_ms"] if metric == agg.TTFT else agg.decision_ms(row)
            if value is not None:
                out[self._raw_key(row, by, step)][agg.bucket(value)] += 1
        return out

    def routing(self, by):
        out = self._rollup(RoutingRollup, ("n",), tuple(by), None, models=False)
        for row, _, _ in self.raw_rows():
            if row["requested_model"] == "auto":
                k = self._raw_key(row, by, None)
                out[k] = [out.get(k, [0])[0] + 1]
        return {k: v[0] for k, v in out.items()}

    def findings(self, by, code=None):
        extra, params = (), ()
        if code is not None:
            extra, params = (f"{quote('code')} = %s",), (code,)
        out = self._rollup(FindingRollup, ("n",), tuple(by), None, extra=extra, extra_params=params)
        raw = self.raw_rows()
        found = self._raw_findings()
        for row, _, _ in raw:
            for c, severity, n in found.get(row["id"], ()):
                if code is not None and c != code:
                    continue
                values = {**row, "code": c, "severity": severity}
                k = self._raw_key(values, by, None)
                out[k] = [out.get(k, [0])[0] + n]
        return {k: v[0] for k, v in out.items()}

    def _raw_findings(self):
        """{stream id: [(code, severity, n)]} of the raw rows (`raw_rows`), read once per cube:
        the findings figures ask by several groupings."""
        if self._found is None:
            self._found = agg.read_findings([row["id"] for row, _, _ in self.raw_rows()])
        return self._found

    def scores(self, score_type, by, step=None):
        """{key: [n, sum_milli, positive]} of the scores of one type (its id), `by` columns of
        the score rollup's key (resolved_model, requested_model, source, user_key, status)
        and "t". The raw rows' scores (the edges' finished streams, the running ones) are
        added as the write path adds them (`aggregates.Contributions.add_scores`)."""
        out = self._rollup(
            ScoreRollup,
            agg.SCORE_VALUES,
            tuple(by),
            step,
            extra=(f"{quote('score_type')} = %s",),
            extra_params=(score_type,),
        )
        raw = self.raw_rows(step)
        given = agg.read_scores([row["id"] for row, _, _ in raw])
        for row, _, _ in raw:
            for type_id, value, positive in given.get(row["id"], ()):
                if type_id != score_type:
                    continue
                add_to(out, self._raw_key(row, by, step), agg.score_values(value, positive))
        return out

    def ttft_max(self, pairs):
        """{(resolved, requested): exact max TTFT} from the raw rows' ttft-ordered index.

        With a tag filter the walk down that index stops only at a row with the tag (the index
        does not hold tags): for a rare tag that is most of a model's history; for a small
        project likewise (the index holds the project, but every project's entries). The pair's
        histogram says which bucket its maximum is in, so the walk starts at that bucket's top
        and ends at its bottom (`agg.top_band`): exact, and only the rows within 2 % of the
        maximum's value are read."""
        from streams.stats.sql import offset_subquery

        by = ("resolved_model", "requested_model")
        # (a project's too: its entries are among every project's)
        banded = self.scope.tag or self.scope.project_id is not None
        hists = self.histograms(agg.TTFT, by) if banded else {}
        jobs = []
        for resolved, requested in pairs:
            w = scope_where(replace(self.scope, start=self.start, end=self.end))
            if not self.scope.resolved_model:
                w.eq("resolved_model", resolved)
            if not self.scope.requested_model:
                w.eq("requested_model", requested)
            band = agg.top_band(hists.get((resolved, requested)), 1)
            if band is not None:
                w.add(f"{quote('ttft_ms')} > %s AND {quote('ttft_ms')} <= %s", *band)
            jobs.append(offset_subquery(w, quote("ttft_ms"), 0, descending=True))
        return dict(zip(pairs, scalars(jobs), strict=True))


def add_to(sums, key, values):
    """`values` added, column by column, to `sums[key]` ({key: [sums]})."""
    acc = sums.get(key)
    if acc is None:
        sums[key] = list(values)
    else:
        for i, x in enumerate(values):
            acc[i] += x


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


def short_series(scope, models, bounds, step, windows, value_sql, qs, pairs=()):
    """A time series of a short range (steps under an hour: ranges up to ~28 h) from its raw
    rows: per model and bucket the count and exact nearest-rank percentiles, ranked by the
    database (window functions), so only the rows at the ranks come back — at 1M streams a
    day is ~33 000 rows, and reading them into Python was most of the page's time."""
    ts = [int(lo.timestamp()) for lo, _ in windows]
    w, table = _short_series_rows(replace(scope, start=bounds[0], end=bounds[1]), models, pairs)
    w.add(f"{value_sql} IS NOT NULL")
    b = f"(({epoch_seconds(quote('created_at'))} - {ts[0]}) / {int(step)})"
    model = quote("resolved_model")
    counts, values = {}, {}
    with connection.cursor() as cursor:
        if not qs:
            cursor.execute(
                f"SELECT {model}, {b}, COUNT(*) FROM {table} WHERE {w.sql()} GROUP BY {model}, {b}",
                w.params,
            )
            for m, i, n in cursor.fetchall():
                counts[(m, i)] = n
        else:
            ranked = (
                f"SELECT m, b, v, ROW_NUMBER() OVER (PARTITION BY m, b ORDER BY v) AS rn, "
                f"COUNT(*) OVER (PARTITION BY m, b) AS n FROM (SELECT {model} AS m, {b} AS b, "
                f"{value_sql} AS v FROM {table} WHERE {w.sql()}) AS s"
            )
            # figures.rank in SQL (integer division; q·n ≥ 1, so the rank is at least 1)
            at = " OR ".join(f"rn = ({int(q)} * n + 999) / 1000" for q in qs)
            cursor.execute(
                f"SELECT m, b, n, rn, v FROM ({ranked}) AS r WHERE rn = 1 OR {at}", w.params
            )
            for m, i, n, rn, v in cursor.fetchall():
                counts[(m, i)] = n
                values[(m, i, rn)] = v
    series = []
    for m in models:
        entry = {"model": m, "n": [counts.get((m, i), 0) for i in range(len(ts))]}
        for q in qs:
            entry[PCT_NAMES[q]] = [
                values.get((m, i, rank(q, n))) if (n := counts.get((m, i))) else None
                for i in range(len(ts))
            ]
        series.append(entry)
    return {"step": step, "t": ts, "series": series}


def _short_series_rows(window, models, pairs):
    """(conditions, FROM clause) of a short series' raw rows. Both models named: the pair
    index (covering, in time order within a pair) is read in one range per pair instead of a
    table lookup per row from the time index."""
    wanted = set(models)
    requested = sorted({q for r, q in pairs if r in wanted})
    if requested:
        w = scope_where(window, skip=("resolved_model", "requested_model"))
        w.among("resolved_model", sorted(models)).among("requested_model", requested)
        return w, from_clause(IDX_PAIR, w)
    w = scope_where(window)
    return w, from_clause(index_for(w, ordered=False), w)  # (a time window, not a model's history)


def group_percentiles(hists, groups, qs, maxima=None):
    """{group: {q: value}} from per-pair histograms {pair: Counter} and groups {group: [pairs]}."""
    out = {}
    for g, members in groups.items():
        merged = Counter()
        for p in members:
            merged.update(hists.get(p, ()))
        top = maxima.get(g) if maxima else None
        out[g] = agg.percentiles(merged, qs, top)
    return out
