"""The SQL the analytics pages share: scopes and their conditions, index choice, percentiles by
ordered offset, statements of many subqueries, time buckets, and the version a poll compares.

Everything is computed in the database, from the metrics the recorder denormalises onto `Stream`
rows; nothing here (nor in the pages' reports, `dashboard.stats`) loads stream rows into
Python. What comes back are aggregates (a few hundred numbers) and short lists (the slowest N
streams, sample reasoning strings).

Percentiles: nearest rank, exact, as `streams.core.figures.rank` defines it (the one
definition: x_k of the n values sorted, k = ⌈q·n⌉ with q in per mille); the SQL offset of a
percentile is that rank's.

How, and why it is fast on large histories: each percentile of each group is one scalar
subquery, `SELECT v … WHERE <group> AND <filters> ORDER BY v LIMIT 1 OFFSET k-1`, many of them
in one statement. With `ORDER BY ttft_ms` the database walks an index that is ordered by
(group, ttft_ms) and carries every filter column (see the indexes on `Stream.Meta`), skipping
k entries without touching a table row; percentiles above the median walk from the top, so one
group's p50…p99 cost about 0.9·n index entries in all. Narrow time windows (the buckets of a
time series, short ranges) instead read only the window's rows through the (model, requested
model, created_at) index and sort those few (SQLite is told which index to use, see `from_clause`).
Counts and sums come from per-group aggregate subqueries that seek the same covering index, and
are folded in Python (counts and sums add up; percentiles never are). On SQLite, window
functions and GROUP BY sort in a temporary B-tree over the whole history; these shapes avoid
that sort (docs/performance.md, "Analytics"). SQL text is built here, with parameters, because
the ORM cannot put hundreds of ordered-offset subqueries into one statement; the same SQL runs
on SQLite and PostgreSQL.

What the report modules share is public here (`quote`, `from_clause`, `scalars`, `union_rows`,
`dict_rows`, …); a leading underscore means this module alone (tests/test_layers.py holds every
module to that).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import functools
import math
import zlib
import zoneinfo
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from streams.access import projects
from streams.core.figures import rank
from streams.core.pricing import CURRENCIES
from streams.core.usage import ESTIMATED
from streams.models import Finding, Stream
from streams.store.aggregates import EVERY_PROJECT
from streams.store.lookups import distinct_stream_values, has_tag_sql

PERCENTILES = (500, 750, 900, 950, 990)  # per mille
PCT_NAMES = {500: "p50", 750: "p75", 900: "p90", 950: "p95", 990: "p99"}
SERIES_PERCENTILES = (500, 950)  # per mille: what the over-time charts draw
MAX_BUCKETS = 56  # 1h by 2 min, 24h by 30 min, 7d by 3 h, 30d by day, 90d by 2 days
# Steps for time buckets, aligned on the Unix epoch (so UTC days and hours) and stable across
# refreshes.
BUCKET_STEPS = (60, 120, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400,
                7 * 86400)  # fmt: skip
# One statement holds at most this many subqueries (SQLite allows 2000 result columns and 500
# compound terms; PostgreSQL 1664 target entries).
CHUNK = 250
# The statuses of a stream not finished yet (Stream.ACTIVE_STATUSES), as SQL values.
ACTIVE = tuple(str(s) for s in Stream.ACTIVE_STATUSES)

TABLE = Stream._meta.db_table


# The usage and cost figures of a set of streams (the usage page, dashboard/stats/usage.py),
# as `Source.usage` gives them: streams; of them with usage (reported or estimated) and with an
# estimate; the tokens (estimates included; reasoning and cached tokens where known); with a
# cost; the costs per currency in nano-units (never added across currencies).
USAGE_FIGURES = (
    "streams", "usage_n", "estimated_n", "input_tokens", "output_tokens", "cached_input_tokens",
    "reasoning_tokens", "priced_n", "cost_eur_nanos", "cost_usd_nanos",
)  # fmt: skip


@functools.cache
def usage_select():
    """(SQL, params): the SELECT list of USAGE_FIGURES over raw stream rows, by the rules the
    rollups sum them by (`aggregates._usage_values`); each sum a BIGINT (PostgreSQL's SUM of
    bigint is numeric)."""
    source, cost, currency = quote("usage_source"), quote("cost_nanos"), quote("cost_currency")
    eur, usd = CURRENCIES

    def total(sql):
        return f"CAST(COALESCE(SUM({sql}), 0) AS BIGINT)"

    sql = ", ".join(
        [
            "COUNT(*)",
            f"COUNT(CASE WHEN {source} <> '' THEN 1 END)",
            f"COUNT(CASE WHEN {source} = %s THEN 1 END)",
            *(total(quote(c)) for c in USAGE_FIGURES[3:7]),
            f"COUNT({cost})",
            total(f"CASE WHEN {currency} = %s THEN {cost} END"),
            total(f"CASE WHEN {currency} = %s THEN {cost} END"),
        ]
    )
    return sql, (ESTIMATED, eur, usd)


def usage_figures(values):
    """{figure: value} of one row of `usage_select`'s columns."""
    return dict(zip(USAGE_FIGURES, (int(v or 0) for v in values), strict=True))


# ---------------------------------------------------------------------------------------------
# Refreshing: pages poll; a poll recomputes only when something changed


def version(scope, now):
    """A fingerprint of what could change a page: the newest stream, the running ones, and
    the minute (relative ranges move). Two small index reads."""
    where = access_where(scope)
    active = where.copy().among("status", ACTIVE)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MAX({quote('id')}) FROM {quote(TABLE)} WHERE {where.sql()}", where.params
        )
        newest = cursor.fetchone()[0] or 0
        cursor.execute(
            f"SELECT {quote('id')} FROM {quote(TABLE)} WHERE {active.sql()} ORDER BY {quote('id')}",
            active.params,
        )
        running = [r[0] for r in cursor.fetchall()]
    minute = int(now.timestamp() // 60)
    running_crc = zlib.crc32(",".join(map(str, running)).encode())
    return f"{newest}-{len(running)}-{running_crc:x}-{minute}"


_memo = contextvars.ContextVar("streamscope_report_memo", default=None)


def memoized(key, compute):
    """compute(), once per report being built (`versioned`): figures several parts of one
    page ask for, such as how many streams the scope sees."""
    memo = _memo.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


@contextlib.contextmanager
def shared_figures():
    """Within it, what `memoized` computes is computed once: for work that reads many scopes
    at one moment as one report does (an alert tick's rules)."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def versioned(build):
    """`build(scope, …)` that returns None (nothing changed) when called with the version the
    caller already shows (`known_version`), and otherwise a report carrying its version."""

    @functools.wraps(build)
    def wrapper(scope, *args, known_version=None, now=None, **kwargs):
        now = now or dt.datetime.now(dt.UTC)
        current = version(scope, now)
        if known_version and known_version == current:
            return None
        token = _memo.set({})
        try:
            report = build(scope, *args, now=now, **kwargs)
        finally:
            _memo.reset(token)
        report.version = current
        return report

    return wrapper


@dataclass(frozen=True)
class Scope:
    """Which streams a page looks at: those of project `project_id` (None: of every project,
    which only staff may ask for; `for_user` is the one way a page makes a scope)."""

    project_id: int | None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    resolved_model: str = ""
    requested_model: str = ""
    status: str = ""
    source: str = ""
    # the API the streams' bytes spoke (Stream.format; a key of every rollup)
    format: str = ""
    # a proxied request's labels, and whose streams: a username that narrows the project's
    # streams to that user's
    tag: str = ""
    session: str = ""
    username: str = ""
    # the API token a proxied stream came through (an alert rule's scope; the rollups keep no
    # tokens, so such a scope is read raw, `cube.method`)
    token_id: int | None = None
    # the IANA zone whose days and hours the buckets and per-day figures are (the page's:
    # dashboard/timezone.py); the range itself is in instants, whatever the zone
    tz: str = "UTC"

    @classmethod
    def for_user(cls, user, project, **filters):
        """The scope of `user` working in `project` (the page's: `request.project`, which
        the access rule has already let them into; None = every project, staff's choice).
        Anyone else without one works in their home project, never in all of them."""
        if project is None and not user.is_staff:
            project = projects.home(user)
        if project is not None and not isinstance(project, int):
            project = project.pk
        return cls(project_id=project, **filters)

    @property
    def zone(self):
        return zone_of(self.tz)

    @property
    def span_s(self):
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds()


# ---------------------------------------------------------------------------------------------
# SQL building blocks


@functools.cache
def quote(name):
    # SQLite and PostgreSQL both quote with double quotes
    return connection.ops.quote_name(name)


def epoch_seconds(column):
    """SQL for the whole seconds since the epoch of a datetime column (for time buckets in the
    database). SQLite stores text; its '%s' is doubled for the parameter substitution."""
    if connection.vendor == "sqlite":
        return f"CAST(strftime('%%s', {column}) AS INTEGER)"
    return f"CAST(FLOOR(EXTRACT(EPOCH FROM {column})) AS BIGINT)"


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
        return self.add(f"{quote(column)} = %s", value)

    def among(self, column, values):
        values = list(values)
        if not values:
            return self.add("1 = 0")
        if len(values) == 1:
            return self.eq(column, values[0])
        self.ins.add(column)
        return self.add(f"{quote(column)} IN ({', '.join(['%s'] * len(values))})", *values)

    def between(self, start, end, column="created_at"):
        if start is not None:
            self.add(f"{quote(column)} >= %s", _dt(start))
        if end is not None:
            self.add(f"{quote(column)} < %s", _dt(end))
        return self

    def copy(self):
        return Where(self.parts, self.params, self.eqs, self.ins)

    def sql(self):
        return " AND ".join(self.parts) if self.parts else "1 = 1"


@dataclass(frozen=True)
class Rows:
    """Where a scope's filters land in one kind of table: the raw stream rows (`STREAMS`) or
    the rollups (`ROLLUPS`, `streams.store.aggregates`), whose rows are keyed by the same
    model, status and source columns."""

    project: str  # the column of which project's streams
    user: str  # the column of whose streams
    created: str | None  # the range's column; None: the caller bounds it (rollup periods by t)
    sessions: bool  # rollups hold no sessions (`cube.method` reads such a scope raw)
    # rollups: every stream's rows are under the tag "", a tagged stream's also under each of
    # its tags, so one tag is one key range; raw rows: the stream's `tags` hold the tag
    tag_key: bool


STREAMS = Rows(
    project="project_id", user="user_id", created="created_at", sessions=True, tag_key=False
)
# (a stream of no project is under project_key 0: only an all-projects scope reads it)
ROLLUPS = Rows(project="project_key", user="user_key", created=None, sessions=False, tag_key=True)
FILTERS = ("resolved_model", "requested_model", "status", "source", "format", "session")


def scope_where(scope, *, skip=(), rows=STREAMS, tags=None):
    """The conditions of a scope (access, range, filters) on `rows`, leaving out the filters in
    `skip` (of "user", "project" — an all-projects scope's rollup rows per project, not
    those of every project — and `FILTERS`). The one rule for both kinds of table; a rollup's
    `scope.username` is resolved by the caller (`cube.Cube`: its user key is a number). The
    project comes first (after a rollup's tag): every index the pages read leads with it.
    `tags` (rollups): the rows of these tags instead of the scope's."""
    where = Where()
    if rows.tag_key:
        if tags is None:
            where.eq("tag", scope.tag or "")
        else:
            where.among("tag", tags)
    if scope.project_id is not None:
        where.eq(rows.project, scope.project_id)
    elif rows.tag_key and "project" not in skip:
        # every project's: the rows every stream adds once more (one key range, not one per
        # project; and no stream counted twice)
        where.eq(rows.project, EVERY_PROJECT)
    if rows.created:
        where.between(scope.start, scope.end, rows.created)
    for column in FILTERS:
        value = getattr(scope, column)
        if not value or column in skip:
            continue
        if column == "session" and not rows.sessions:
            raise ValueError("the rollups hold no sessions: read a session's scope raw")
        where.eq(column, value)
    if scope.session and "session" not in skip:
        # the session index is partial; SQLite uses it only when the query says so itself
        where.add(f"NOT ({quote('session')} = '')")
    if scope.token_id is not None:
        if not rows.sessions:
            raise ValueError("the rollups hold no tokens: read a token's scope raw")
        where.eq("token_id", scope.token_id)
    if scope.tag and not rows.tag_key:
        sql, params = has_tag_sql(f"{quote(TABLE)}.{quote('tags')}", scope.tag, connection)
        where.add(sql, *params)
    if scope.username and "user" not in skip:
        # one scalar subquery, evaluated once: the user_id columns of the indexes still serve
        # (an unknown name is NULL, which matches nothing)
        users = get_user_model()._meta.db_table
        where.add(
            f"{quote(rows.user)} = (SELECT {quote('id')} FROM {quote(users)} "
            f"WHERE {quote('username')} = %s)",
            scope.username,
        )
    return where


def access_where(scope, rows=STREAMS):
    """Whose streams `scope` may see, alone (its range and filters left out), on `rows` (on
    `ROLLUPS`: the rows of every stream, tag ""): the access part of `scope_where`."""
    return scope_where(Scope(project_id=scope.project_id), rows=rows)


def findings_in_scope(scope):
    """The findings of the streams in `scope`, as a queryset: joined with their stream rows
    and filtered by `scope_where` (the one rule; not a third spelling of it in the ORM). The
    join lets the database start from the scope's streams on their index (an `IN` list or an
    `EXISTS` per finding measured 3-16x slower). The rule's columns are the stream table's,
    unqualified: a finding has none of their names."""
    w = scope_where(scope)
    qs = Finding.objects.all()
    if not w.parts:
        return qs
    joined = qs.filter(stream__created_at__isnull=False)  # never null: only the join
    return joined.filter(RawSQL(w.sql(), w.params, output_field=BooleanField()))


# The indexes of Stream.Meta these queries are shaped for (see streams/models.py).
IDX_RESOLVED_TTFT = "stream_resolved_ttft_cov"
IDX_REQUESTED_TTFT = "stream_requested_ttft_cov"
IDX_TTFT = "stream_ttft_cov"
IDX_PAIR = "stream_pair_metrics"
IDX_CREATED = "stream_created"
IDX_PINNED_ROUTED = "stream_pinned_routed"
IDX_USAGE = "stream_project_usage"
IDX_STATUS = "stream_status_created"
IDX_SESSION = "stream_session_created"  # partial: WHERE NOT (session = '')
IDX_USER_CREATED = "stream_user_created"
IDX_PROJECT_CREATED = "stream_project_created"


def usage_index(scope, where):
    """The index the usage and cost sums of `scope`'s rows are read through (they are in no
    index: each row is a table lookup, so the index only narrows the range): one user's rows
    (the user filter) by (user, created_at), one project's by (project, created_at), else
    `index_for`."""
    if scope.username:
        return IDX_USER_CREATED
    if scope.project_id is not None:
        return IDX_PROJECT_CREATED
    return index_for(where, ordered=False)


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
    return time_index(where)


def time_index(where):
    """The index of `where`'s rows in time order: one project's, else every stream's (a
    project's rows walked through every project's read ~50 times as many at 50 projects)."""
    return IDX_PROJECT_CREATED if "project_id" in where.eqs else IDX_CREATED


def from_clause(index=None, where=None):
    """The table, with an index named for SQLite: without statistics (ANALYZE) its planner
    guesses, and on a large history it guessed a non-covering index for a time range plus a
    sort, far slower than the covering one (docs/performance.md, "Analytics"). PostgreSQL
    plans from its statistics. A session filter (`where` has it) selects a handful of rows:
    its own index, whatever the query's shape would otherwise want."""
    table = quote(TABLE)
    if where is not None and "session" in where.eqs:
        index = IDX_SESSION
    if index and connection.vendor == "sqlite":
        return f"{table} INDEXED BY {quote(index)}"
    return table


def scalars(subqueries):
    """Values of scalar subqueries [(sql, params)], in order, a few statements in all."""
    values = []
    with connection.cursor() as cursor:
        for lo in range(0, len(subqueries), CHUNK):
            chunk = subqueries[lo : lo + CHUNK]
            sql = "SELECT " + ", ".join(f"({s})" for s, _ in chunk)
            cursor.execute(sql, [p for _, ps in chunk for p in ps])
            values.extend(cursor.fetchone())
    return values


def union_rows(parts):
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


def dict_rows(sql, params, cols):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = [dict(zip(cols, r, strict=True)) for r in cursor.fetchall()]
    for r in rows:
        if "created_at" in r:
            # SQLite hands back text or a naive datetime: UTC, aware, so a page shows it in its
            # zone (a naive one would be written as it is, in UTC)
            r["created_at"] = _as_datetime(r["created_at"])
    return rows


def divide(a, b):
    return a / b if a is not None and b else None


def percent(fraction):
    return None if fraction is None else 100 * fraction


def offset_subquery(where, value, offset, *, descending=False, narrow=False):
    """The scalar subquery for the value at `offset` of `value` ordered over `where`. `narrow`:
    read the rows of `where` through the (model, created_at) index and sort them, instead of
    walking the ttft-ordered one (SQLite is told which index; PostgreSQL costs both)."""
    direction = " DESC" if descending else ""
    ordered = value == quote("ttft_ms") and (
        # without a model to seek, a window's rows would come through the created_at index
        # and a table lookup each: walking the ttft-ordered covering index is cheaper
        not narrow or index_for(where, ordered=False) in (IDX_CREATED, IDX_PROJECT_CREATED)
    )
    sql = (
        f"SELECT {value} FROM {from_clause(index_for(where, ordered=ordered), where)} "
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
            out.append(offset_subquery(where, value, n - k, descending=True, narrow=narrow))
        else:
            out.append(offset_subquery(where, value, k - 1, narrow=narrow))
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
    values = scalars([sq for _, _, sq in jobs])
    out = {key: dict.fromkeys(qs) for key in groups}
    for (key, q, _), v in zip(jobs, values, strict=True):
        out[key][q] = v
    return out


def distinct_values(column, where=None):
    """The distinct non-empty values of an indexed column within `where`, by a loose index
    scan (streams.store.lookups.distinct_stream_values)."""
    where = where or Where()
    return distinct_stream_values(column, where.sql(), where.params)


# ---------------------------------------------------------------------------------------------
# Time ranges and buckets


def bucket_step(span_s):
    for step in BUCKET_STEPS:
        if span_s / step <= MAX_BUCKETS:
            return step
    return BUCKET_STEPS[-1]


UTC = "UTC"


@functools.cache
def zone_of(name):
    """The tzinfo of an IANA name ("UTC": datetime's own)."""
    return dt.UTC if name in (UTC, None, "") else zoneinfo.ZoneInfo(name)


def buckets(start, end, tz=UTC):
    """[lo, hi) windows covering start…end, at most ~MAX_BUCKETS of them, aligned on the
    wall clock of zone `tz`: a step of hours starts at a multiple of it since local midnight,
    a step of days at a local midnight (days counted from 1970-01-01). In UTC they are
    epoch-aligned and all `step` long; in another zone a window over a DST change is an hour
    shorter or longer (a local day of 23 or 25 hours), and a zone's half-hour offset moves
    every edge of an hourly step half an hour off the UTC hours."""
    step = bucket_step((end - start).total_seconds())
    stop = end.timestamp()
    if tz in (UTC, None, ""):
        first = math.floor(start.timestamp() / step) * step
        edges = []
        t = first
        while t < stop:
            edges.append(t)
            t += step
        edges.append(t)
    else:
        edges = _local_edges(start, stop, step, zone_of(tz))
    as_dt = [dt.datetime.fromtimestamp(e, dt.UTC) for e in edges]
    return step, list(zip(as_dt, as_dt[1:], strict=False))


EPOCH_DATE = dt.date(1970, 1, 1)


def _instants(naive, zone):
    """The epoch seconds at which the wall clock of `zone` reads `naive`: one, or two where
    the clock is set back (the repeated hour); a time the clock skips is the moment it
    skips it."""
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    if first.utcoffset() > second.utcoffset():  # repeated: both
        return [first.timestamp(), second.timestamp()]
    return [first.timestamp()]


def _local_edges(start, stop, step, zone):
    """Bucket edges (epoch seconds) from the one at or before `start` to the first at or
    after `stop`, on the wall clock of `zone`."""
    local = start.astimezone(zone).replace(tzinfo=None)
    if step >= DAY_S:
        days = step // DAY_S
        n = (local.date() - EPOCH_DATE).days
        naive = dt.datetime.combine(EPOCH_DATE + dt.timedelta(days=(n // days) * days), dt.time())
    else:
        midnight = dt.datetime.combine(local.date(), dt.time())
        into = (local - midnight).total_seconds()
        naive = midnight + dt.timedelta(seconds=(into // step) * step)
    advance = dt.timedelta(seconds=step)
    found = set()
    while not found or max(found) < stop:
        found.update(_instants(naive, zone))
        naive += advance
    edges = sorted(found)
    # from the last edge at or before the start (the floor's instants are all at or before it)
    first = max(i for i, t in enumerate(edges) if t <= start.timestamp())
    return edges[first:]


DAY_S = 86400


def day_starts(start, end, limit=400, tz=UTC):
    """The midnights (aware, in zone `tz`) of the days from `start`'s up to before `end` (at
    most `limit`): local days, 23 or 25 hours long over a DST change."""
    zone = zone_of(tz)
    day = start.astimezone(zone).date()
    days = []
    while len(days) < limit:
        # (a midnight the clock skips: the day starts when it skips it)
        d = dt.datetime.combine(day, dt.time(), zone)
        if d.astimezone(dt.UTC) >= end:
            break
        days.append(d)
        day += dt.timedelta(days=1)
    return days


def next_day(d):
    """The midnight after `d` (one of `day_starts`)."""
    return dt.datetime.combine(d.date() + dt.timedelta(days=1), dt.time(), d.tzinfo)


def history_start(scope):
    """The oldest stream in scope (for "all time"); one index seek."""
    return history_span(scope)[0]


def history_span(scope):
    """(oldest, newest) stream's creation in scope (None, None without any): two index seeks
    (one statement of two subqueries: SQLite seeks MIN or MAX only when it stands alone)."""
    where = access_where(scope)
    col, cond = quote("created_at"), where.sql()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT MIN({col}) FROM {quote(TABLE)} WHERE {cond}), "
            f"(SELECT MAX({col}) FROM {quote(TABLE)} WHERE {cond})",
            [*where.params, *where.params],
        )
        return tuple(_as_datetime(v) for v in cursor.fetchone())


def _as_datetime(value):
    if value is None:
        return None
    if isinstance(value, str):  # SQLite hands back text
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value
