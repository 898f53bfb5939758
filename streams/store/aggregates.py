"""Pre-aggregates of finished streams: the policy in one place (docs/analytics.md).

What a finished stream adds to the rollup tables of `streams.models` (`contributions`), how
that is written (`apply`: one upsert per table that adds, or subtracts, in the caller's
transaction), and the ways rows get there:

- the recorder's `write_batch` (and its late final write), the runner's ending of abandoned
  rows and the importer wrap their changes in `tracking(ids)`: the rows' contributions are
  read before and after, in the same transaction, and the difference is applied — so a crash
  never leaves stream rows and aggregates disagreeing, and a row that changes again after it
  finished is moved, not counted twice;
- deleting a stream (admin, the stream page) subtracts it (a `pre_delete` receiver);
- retention (streams/store/retention.py) deletes raw rows and leaves the aggregates alone: they keep
  the history the raw rows lost;
- `rebuild()` (`manage.py rebuild_aggregates`) recomputes every table from the raw rows.

Only finished streams are aggregated: a `pending`/`streaming` row still changes at every
batch, and the pages read the few active ones from the raw rows (`is_finished`).

Histograms are log-bucketed: bucket b holds the values in (γ^(b-1), γ^b] with γ = 1.02, and
stands for 2γ^b/(γ+1), so a value read back is within (γ-1)/(γ+1) < 0.99 % of any value in
its bucket (values ≤ 1 µs fall in bucket ZERO, read as 0). A nearest-rank percentile over a
merged histogram is then the k-th smallest value's bucket: within ERROR_BOUND of the exact one.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import operator
from collections import defaultdict

from django.db import connection, models

from streams.core import figures
from streams.models import (
    MAX_TAG_CHARS,
    MAX_TAGS,
    Finding,
    FindingRollup,
    HistogramRollup,
    ProjectRollup,
    RoutingRollup,
    Score,
    ScoreRollup,
    ScoreType,
    Stream,
    UsageRollup,
)

HOUR = 3600
THREE_HOURS = 10800  # what a series in 3-, 6- or 12-hour steps reads (7- to 28-day ranges)
DAY = 86400
SPANS = (HOUR, THREE_HOURS, DAY)  # each divides the next; epoch-aligned periods

GAMMA = 1.02
ERROR_BOUND = (GAMMA - 1) / (GAMMA + 1)  # 0.0099: the relative error of a percentile
_LOG_GAMMA = math.log(GAMMA)
ZERO = -32768
MIN_VALUE = 0.001  # ms: the clock's resolution (1 µs); anything below reads as 0

# The project key of the rows every stream adds once more, whatever its project: what a page of
# every project reads, as one key range (the others are a project's id, or 0 for none)
EVERY_PROJECT = -1

TTFT = 1  # HistogramRollup.metric: time to first token (ms)
DECISION = 2  # routing decision − request written (ms)

# Stream.ACTIVE_STATUSES as plain strings (SQL parameters), and the placeholders they fill.
ACTIVE = tuple(str(s) for s in Stream.ACTIVE_STATUSES)
ACTIVE_MARKS = ", ".join(["%s"] * len(ACTIVE))

# The Stream columns a contribution is made of (raw rows the pages fold in use the same).
COLUMNS = (
    "id", "created_at", "status", "resolved_model", "requested_model", "source", "user_id",
    "project_id", "error_code", "ttft_ms", "inter_token_ms", "routing_us", "request_written_us",
    "headers_us", "created_event_us", "first_token_us", "output_deltas", "bytes_received",
    "event_count", "findings_count", "routing_category", "routing_source", "tags",
    "usage_source", "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
    "cost_nanos", "cost_currency", "format",
)  # fmt: skip


def key_of(model):
    """A rollup's key columns, in its primary key's order (the model is their one spelling;
    a key tuple `Contributions` makes is in this order)."""
    return tuple(f.column for f in model._meta.pk.fields)


# `tag`: "" in the rows of every stream; a tagged stream adds the same rows once more per tag
# (at most models.MAX_TAGS), so a tag's figures are a key range like a period's.
USAGE_KEY = key_of(UsageRollup)
USAGE_VALUES = (
    "n", "ttft_n", "ttft_sum_ns", "itl_n", "itl_sum_ns", "routed", "decision_n", "phase_n",
    "written_sum_us", "headers_sum_us", "created_sum_us", "routed_or_created_sum_us",
    "first_token_sum_us", "output_deltas", "bytes_received", "events", "findings",
    "usage_n", "estimated_n", "input_tokens", "output_tokens", "cached_input_tokens",
    "reasoning_tokens", "priced_n", "cost_eur_nanos", "cost_usd_nanos",
)  # fmt: skip
HISTOGRAM_KEY = key_of(HistogramRollup)
ROUTING_KEY = key_of(RoutingRollup)
FINDING_KEY = key_of(FindingRollup)
SCORE_KEY = key_of(ScoreRollup)
SCORE_VALUES = ("n", "sum_milli", "positive")
COUNT = ("n",)
# The project rollup: the usage rollup's figures of streams, usage and spend (`PROJECT_VALUES`,
# a subset of USAGE_VALUES) summed over every dimension but the period, the tag and the
# project; a scope filtering on one of `PROJECT_DIMENSIONS` (what it sums over) cannot read it.
PROJECT_KEY = key_of(ProjectRollup)
PROJECT_VALUES = tuple(
    v for v in USAGE_VALUES if v in {f.column for f in ProjectRollup._meta.concrete_fields}
)
PROJECT_DIMENSIONS = tuple(c for c in USAGE_KEY if c not in PROJECT_KEY)
_PROJECT_AT = tuple(USAGE_VALUES.index(v) for v in PROJECT_VALUES)


def rollup_tables():
    return {
        UsageRollup: (USAGE_KEY, USAGE_VALUES),
        HistogramRollup: (HISTOGRAM_KEY, COUNT),
        RoutingRollup: (ROUTING_KEY, COUNT),
        FindingRollup: (FINDING_KEY, COUNT),
        ScoreRollup: (SCORE_KEY, SCORE_VALUES),
        ProjectRollup: (PROJECT_KEY, PROJECT_VALUES),
    }


# A key tuple from a dict of its columns' values, per table.
_KEY_OF = {model: operator.itemgetter(*key) for model, (key, _v) in rollup_tables().items()}


# ---------------------------------------------------------------------------------------------
# Buckets and percentiles


def bucket(value):
    """The histogram bucket of a value (ms)."""
    if value is None or value <= MIN_VALUE:
        return ZERO
    return math.ceil(math.log(value) / _LOG_GAMMA)


def bucket_value(b):
    """The value a bucket stands for: within ERROR_BOUND of every value in it."""
    if b == ZERO:
        return 0.0
    return 2 * GAMMA**b / (GAMMA + 1)


def percentile(counts, q_permille, maximum=None):
    """Nearest-rank q-quantile (q in per mille, `figures.rank`) of a histogram {bucket: n}: the
    value of the bucket holding that rank, capped at the exact `maximum` when known. None
    when empty."""
    return percentiles(counts, (q_permille,), maximum)[q_permille]


def percentiles(counts, qs, maximum=None):
    """{q: `percentile(counts, q, maximum)`} for each q of `qs`, from one sort of the buckets."""
    ranked = figures.weighted_nearest_ranks(counts.items(), qs)
    out = {}
    for q in qs:  # (in the order asked)
        b = ranked[q]
        if b is None:
            out[q] = None
        else:
            v = bucket_value(b)
            out[q] = min(v, maximum) if maximum is not None else v
    return out


def top_band(counts, k):
    """(lo, hi): values such that the k largest of a histogram {bucket: n} all lie in (lo, hi]
    — from the bottom of the bucket holding the k-th largest to the top of the top bucket,
    widened by a millionth of a percent for the float edges (a bucket is `ceil(log(v) / log
    γ)`, exact to ~1e-15). None when unknown (no histogram, or the k-th largest reads as 0)."""
    if not counts:
        return None
    seen, top, kth = 0, None, None
    for b in sorted(counts, reverse=True):
        if not counts[b]:
            continue
        top = b if top is None else top
        seen += counts[b]
        kth = b
        if seen >= k:
            break
    if top is None or kth == ZERO:
        return None
    return GAMMA ** (kth - 1) * (1 - 1e-8), GAMMA**top * (1 + 1e-8)


# ---------------------------------------------------------------------------------------------
# What a stream adds


def is_finished(status):
    return status not in ACTIVE


def epoch_s(value):
    """Seconds since the epoch of a stored datetime (SQLite hands back naive UTC or text)."""
    import datetime as dt

    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def _ns(ms):
    return round(ms * 1_000_000)


def usage_values(row):
    """The additive values of one stream row (a dict of COLUMNS) in USAGE_VALUES order."""
    ttft, itl = row["ttft_ms"], row["inter_token_ms"]
    written, headers = row["request_written_us"], row["headers_us"]
    created, routing, first = row["created_event_us"], row["routing_us"], row["first_token_us"]
    phased = None not in (written, headers, created, first)
    return (
        1,
        ttft is not None,
        _ns(ttft) if ttft is not None else 0,
        itl is not None,
        _ns(itl) if itl is not None else 0,
        routing is not None,
        routing is not None and written is not None,
        phased,
        written if phased else 0,
        headers if phased else 0,
        created if phased else 0,
        (routing if routing is not None else created) if phased else 0,
        first if phased else 0,
        row["output_deltas"] or 0,
        row["bytes_received"] or 0,
        row["event_count"] or 0,
        row["findings_count"] or 0,
        *_usage_values(row),
    )


def _usage_values(row):
    """A stream's usage and cost as USAGE_VALUES has them (usage_n … cost_usd_nanos)."""
    source, cost, currency = row["usage_source"], row["cost_nanos"], row["cost_currency"]
    return (
        bool(source),
        source == "estimated",
        row["input_tokens"] or 0,
        row["output_tokens"] or 0,
        row["cached_input_tokens"] or 0,
        row["reasoning_tokens"] or 0,
        cost is not None,
        cost if cost is not None and currency == "EUR" else 0,
        cost if cost is not None and currency == "USD" else 0,
    )


def stream_tags(row):
    """The tags a stream row is aggregated under: distinct, as stored (a JSON list; raw SQL
    hands back its text), at most MAX_TAGS of at most MAX_TAG_CHARS (`streams.models`; longer
    ones, which only a hand-written row could hold, are left to the raw path)."""

    tags = row.get("tags") or ()
    if isinstance(tags, str):
        import json

        tags = json.loads(tags)
    if not isinstance(tags, list):
        return []
    ok = [t for t in dict.fromkeys(x for x in tags if isinstance(x, str)) if t]
    return [t for t in ok if len(t) <= MAX_TAG_CHARS][:MAX_TAGS]


def decision_ms(row):
    if row["routing_us"] is None or row["request_written_us"] is None:
        return None
    return (row["routing_us"] - row["request_written_us"]) / 1000.0


def score_values(value, positive):
    """What one score adds to SCORE_VALUES: (n, sum_milli: the value in thousandths,
    rounded, positive)."""
    return (1, round(value * 1000), int(positive))


def _dimensions(row):
    """What a stream row gives the rollups' keys besides the period and the tag, by column
    name (each table's key picks its own; a dimension added to the rollups' base gets its
    value here)."""
    return {
        "resolved_model": row["resolved_model"],
        "requested_model": row["requested_model"],
        "source": row["source"],
        "user_key": row["user_id"] or 0,
        "project_key": row["project_id"] or 0,
        "status": row["status"],
        "format": row["format"],
    }


def _periods(row, own=None):
    """A stream row's dimensions (with `own`) once per period and tag it is added under, each
    under its project and under EVERY_PROJECT."""
    ts = epoch_s(row["created_at"])
    dims = {**_dimensions(row), **(own or {})}
    for tag in ("", *stream_tags(row)):
        for span in SPANS:
            at = {**dims, "span": span, "tag": tag, "t": int(ts // span) * span}
            yield at
            yield {**at, "project_key": EVERY_PROJECT}


class Contributions:
    """{model: {key tuple: [values]}}: what a set of streams adds to each rollup table."""

    def __init__(self):
        self.tables = defaultdict(dict)

    def _add(self, model, key, values, sign=1):
        rows = self.tables[model]
        acc = rows.get(key)
        if acc is None:
            rows[key] = [sign * int(v) for v in values]
        else:
            for i, v in enumerate(values):
                acc[i] += sign * int(v)

    def add_stream(self, row, findings=(), scores=(), sign=1):
        """Add one finished stream row (dict of COLUMNS), its findings [(code, severity, n)]
        and its scores [(score type id, value, positive)]."""

        values = usage_values(row)
        decision = decision_ms(row)
        buckets = [
            (metric, bucket(value))
            for metric, value in ((TTFT, row["ttft_ms"]), (DECISION, decision))
            if value is not None
        ]
        self.add_scores(row, scores, sign)
        auto = row["requested_model"] == "auto"
        own = {
            "error_code": row["error_code"],
            "routing_category": row["routing_category"],
            "routing_source": row["routing_source"],
        }
        usage, histogram, routing, finding, project = (
            _KEY_OF[m]
            for m in (UsageRollup, HistogramRollup, RoutingRollup, FindingRollup, ProjectRollup)
        )
        spend = [values[i] for i in _PROJECT_AT]
        for dims in _periods(row, own):
            self._add(UsageRollup, usage(dims), values, sign)
            self._add(ProjectRollup, project(dims), spend, sign)
            if buckets:
                # the summed rows (not `full`) leave out who and where
                summed = {**dims, "full": False, "user_key": 0, "source": ""}
                full = {**dims, "full": True}
                for metric, b in buckets:
                    for at in (summed, full):
                        at["metric"], at["bucket"] = metric, b
                        self._add(HistogramRollup, histogram(at), (1,), sign)
            if auto:
                self._add(RoutingRollup, routing(dims), (1,), sign)
            for code, severity, n in findings:
                dims["code"], dims["severity"] = code, severity
                self._add(FindingRollup, finding(dims), (n,), sign)

    def add_scores(self, row, scores, sign=1):
        """Add the scores [(score type id, value, positive)] of one finished stream row."""
        if not scores:
            return
        key = _KEY_OF[ScoreRollup]
        for dims in _periods(row):
            for score_type, value, positive in scores:
                dims["score_type"] = score_type
                self._add(ScoreRollup, key(dims), score_values(value, positive), sign)

    def merge(self, other, sign=1):
        for model, rows in other.tables.items():
            for key, values in rows.items():
                self._add(model, key, values, sign)

    def nonzero(self):
        """{model: {key: values}} without rows that cancelled out."""
        return {
            model: {k: v for k, v in rows.items() if any(v)} for model, rows in self.tables.items()
        }


def _chunks(ids, size=500):
    """(chunk, its placeholders) of `ids`, `size` at a time: an `IN (…)` of a bounded size."""
    ids = list(ids)
    for lo in range(0, len(ids), size):
        chunk = ids[lo : lo + size]
        yield chunk, ", ".join(["%s"] * len(chunk))


def _rows(where_sql, params, index=None):
    """The stream rows (dicts of COLUMNS) matching a condition."""
    qn = connection.ops.quote_name
    cols = ", ".join(qn(c) for c in COLUMNS)
    table = qn(Stream._meta.db_table)
    if index and connection.vendor == "sqlite":
        table += f" INDEXED BY {qn(index)}"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {cols} FROM {table} WHERE {where_sql}", params)
        return [dict(zip(COLUMNS, r, strict=True)) for r in cursor.fetchall()]


def read_streams(where_sql, params, index=None, with_scores=True, with_findings=True):
    """[(row dict, findings, scores)] of the stream rows matching a condition (raw SQL on
    Stream); without `with_scores` or `with_findings`, those are () (a reader that wants them
    for some of the rows reads them with `read_scores` or `read_findings`).
    `index`: the index SQLite must use (its planner has no statistics: for the few active rows
    of one user it chose the user's index and read all of their history)."""
    rows = _rows(where_sql, params, index)
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    findings = read_findings(ids) if with_findings else {}
    scores = read_scores(ids) if with_scores else {}
    return [(r, findings.get(r["id"], ()), scores.get(r["id"], ())) for r in rows]


def read_findings(ids):
    """{stream id: [(code, severity, n)]} of the streams `ids`."""
    qn = connection.ops.quote_name
    findings = defaultdict(list)
    for chunk, marks in _chunks(ids):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {qn('stream_id')}, {qn('code')}, {qn('severity')}, COUNT(*) "
                f"FROM {qn(Finding._meta.db_table)} WHERE {qn('stream_id')} IN ({marks}) "
                f"GROUP BY {qn('stream_id')}, {qn('code')}, {qn('severity')}",
                chunk,
            )
            for sid, code, severity, n in cursor.fetchall():
                findings[sid].append((code, severity, n))
    return findings


def read_scores(ids):
    """{stream id: [(score type id, value, positive)]} of the streams `ids`."""
    qn = connection.ops.quote_name
    score, kind = qn(Score._meta.db_table), qn(ScoreType._meta.db_table)
    out = defaultdict(list)
    for chunk, marks in _chunks(ids):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT s.{qn('stream_id')}, s.{qn('score_type_id')}, s.{qn('value')}, "
                f"k.{qn('minimum')}, k.{qn('maximum')} FROM {score} s "
                f"JOIN {kind} k ON k.{qn('id')} = s.{qn('score_type_id')} "
                f"WHERE s.{qn('stream_id')} IN ({marks})",
                chunk,
            )
            for sid, type_id, value, lo_, hi in cursor.fetchall():
                out[sid].append((type_id, value, ScoreType.positive(value, lo_, hi)))
    return out


def snapshot(ids):
    """The contributions of the finished streams among `ids`, as stored now."""
    out = Contributions()
    for chunk, marks in _chunks(ids):
        qn = connection.ops.quote_name
        where = f"{qn('id')} IN ({marks}) AND {qn('status')} NOT IN ({ACTIVE_MARKS})"
        for row, findings, scores in read_streams(where, [*chunk, *ACTIVE]):
            out.add_stream(row, findings, scores)
    return out


# ---------------------------------------------------------------------------------------------
# Writing


def apply(contributions, sign=1):
    """Add (sign 1) or subtract (-1) contributions: one multi-row upsert per table and chunk,
    in the caller's transaction. ON CONFLICT … DO UPDATE adds to the stored row atomically, so
    concurrent writers (several workers on PostgreSQL) never lose each other's counts."""
    qn = connection.ops.quote_name
    for model, (key, values) in rollup_tables().items():
        rows = contributions.tables.get(model)
        if not rows:
            continue
        table = qn(model._meta.db_table)
        cols = key + values
        width = len(cols)
        updates = ", ".join(f"{qn(v)} = {table}.{qn(v)} + excluded.{qn(v)}" for v in values)
        items = list(rows.items())
        per_statement = max(1, 30000 // width)
        with connection.cursor() as cursor:
            for lo in range(0, len(items), per_statement):
                chunk = items[lo : lo + per_statement]
                marks = ", ".join(["(" + ", ".join(["%s"] * width) + ")"] * len(chunk))
                params = []
                for k, v in chunk:
                    params.extend(k)
                    params.extend(sign * x for x in v)
                cursor.execute(
                    f"INSERT INTO {table} ({', '.join(qn(c) for c in cols)}) VALUES {marks} "
                    f"ON CONFLICT ({', '.join(qn(c) for c in key)}) DO UPDATE SET {updates}",
                    params,
                )


@contextlib.contextmanager
def tracking(ids):
    """Around changes to the stream rows `ids` (and their findings), inside a transaction:
    the aggregates follow whatever the changes did to the finished ones."""
    ids = [i for i in ids if i is not None]
    if not ids:
        yield
        return
    before = snapshot(ids)
    yield
    after = snapshot(ids)
    after.merge(before, sign=-1)
    apply(after)


def scores_changed(stream_id, before, after):
    """A stream's scores changed from `before` to `after` ([(score type id, value,
    positive)]), in the caller's transaction: if it has finished, its score rows move by the
    difference (a running stream's scores are added with it when it finishes)."""
    qn = connection.ops.quote_name
    where = f"{qn('id')} = %s AND {qn('status')} NOT IN ({ACTIVE_MARKS})"
    found = _rows(where, [stream_id, *ACTIVE])
    if not found:
        return
    row = found[0]
    out = Contributions()
    out.add_scores(row, after)
    out.add_scores(row, before, sign=-1)
    apply(out)


def add_streams(ids):
    """Streams just written finished (an import): add them."""
    apply(snapshot(ids))


_keeping = contextvars.ContextVar("streamscope_aggregates_keeping", default=False)


@contextlib.contextmanager
def keeping():
    """Deletions inside leave the aggregates as they are (retention: the history stays)."""
    token = _keeping.set(True)
    try:
        yield
    finally:
        _keeping.reset(token)


def on_stream_delete(sender, instance, **kwargs):
    """pre_delete of a Stream (admin, the stream page): subtract it while its row and findings
    are still there, unless retention is deleting it (`keeping`)."""
    if not _keeping.get() and is_finished(instance.status):
        apply(snapshot([instance.pk]), sign=-1)


# Every way of deleting a stream row through the ORM (admin, the stream page, a cascade)
# passes this receiver; the app's `ready` imports this module, so it is always connected.
models.signals.pre_delete.connect(
    on_stream_delete, sender=Stream, dispatch_uid="streams.store.aggregates.delete"
)


# ---------------------------------------------------------------------------------------------
# Rebuilding


def rebuild(progress=None, chunk_s=DAY):
    """Recompute every rollup table from the raw stream and finding rows, one UTC day of
    streams at a time (each day's rows are complete once its streams are read). Run inside a
    transaction; returns the number of streams read."""
    from django.db.models import Max, Min

    for model in rollup_tables():
        model.objects.all().delete()
    bounds = Stream.objects.aggregate(lo=Min("created_at"), hi=Max("created_at"))
    if bounds["lo"] is None:
        return 0
    qn = connection.ops.quote_name
    start = int(epoch_s(bounds["lo"]) // chunk_s) * chunk_s
    stop = epoch_s(bounds["hi"])
    total = 0
    t = start
    import datetime as dt

    while t <= stop:
        lo = dt.datetime.fromtimestamp(t, dt.UTC)
        hi = dt.datetime.fromtimestamp(t + chunk_s, dt.UTC)
        where = (
            f"{qn('created_at')} >= %s AND {qn('created_at')} < %s "
            f"AND {qn('status')} NOT IN ({ACTIVE_MARKS})"
        )
        params = [*(connection.ops.adapt_datetimefield_value(v) for v in (lo, hi)), *ACTIVE]
        out = Contributions()
        rows = read_streams(where, params)
        for row, findings, scores in rows:
            out.add_stream(row, findings, scores)
        apply(out)
        total += len(rows)
        if progress:
            progress(total)
        t += chunk_s
    return total


def stored():
    """{model: {key: values}} as stored, without zero rows (what rebuild == incremental
    compares)."""
    out = {}
    for model, (key, values) in rollup_tables().items():
        rows = {}
        for r in model.objects.values_list(*key, *values):
            k, v = tuple(r[: len(key)]), list(r[len(key) :])
            if any(v):
                rows[k] = v
        out[model] = rows
    return out
