"""What an analytics report is built from: the figures of one scope, read from one of two
sources, and which source a scope is read from.

A report (`latency_report`, `routing_report`, `admin_report`, `usage_report`) is written once
against `Source`; `source_for` hands it `exact.ExactSource` (the raw stream and finding rows: every
figure exact) or `rollup.RollupSource` (the pre-aggregates, `cube`: counts, sums, rates and
maxima exact, percentiles and histogram bins within `aggregates.ERROR_BOUND`). `cube.method`
decides which (a session filter or a small history: exact), and the report says which
(`report.method`). The slowest and largest streams, sample reasoning and the pinned-but-routed
list are short lists of rows, read raw by the reports whatever the source.

A *pair* is (resolved model, requested model); a *group* is a set of pairs, given as a list of
pairs, or None for every stream in the scope.
"""

from __future__ import annotations

from typing import Protocol

from streams.stats import cube
from streams.stats.exact import ExactSource
from streams.stats.rollup import RollupSource
from streams.stats.sql import PERCENTILES, SERIES_PERCENTILES
from streams.store.aggregates import TTFT


def source_for(scope, now):
    """The source `scope` is read from (`cube.method`), for reports built at `now`."""
    if cube.method(scope) == cube.AGGREGATED:
        return RollupSource(scope, now)
    return ExactSource(scope, now)


class Source(Protocol):
    """The figures of one scope (`scope`, at `now`); `method` is cube.EXACT or
    cube.AGGREGATED."""

    scope: object
    now: object
    method: str

    def aggregates(self) -> dict:
        """{pair: {count, active, failed, stalled, truncated, ttft_n, ttft_sum, ttft_max,
        itl_n, itl_sum, routed}} of the pairs with streams in scope (`pairs.fold` adds them
        up into groups)."""

    def percentiles(self, groups: dict, qs=PERCENTILES, metric=TTFT) -> dict:
        """{group key: {q: value or None}}: the nearest-rank q-quantiles (q in per mille) of
        `metric` (aggregates.TTFT, or aggregates.DECISION: routing event − request written,
        ms) over each group of `groups` {key: pairs or None}."""

    def phases(self) -> dict:
        """{resolved model: (n, Σ request written, Σ headers, Σ response.created, Σ routing
        (else created), Σ first token)}, µs since the attempt started, over the streams that
        reached every milestone up to the first token."""

    def histogram(self, models: list, edges: list) -> dict:
        """{resolved model: [streams per bin]} of TTFT: bin i is [edges[i], edges[i+1]), the
        last one everything from edges[-1] up."""

    def series(self, models: list, qs=SERIES_PERCENTILES, requested_model="") -> dict | None:
        """Per resolved model and time bucket of the over-time charts (`pairs.series_bounds`,
        `sql.buckets`): {"step", "t": [bucket starts], "series": [{"model", "n": [count],
        "p50": [...], …}]}: with `qs`, the count and quantiles of TTFT; without, the count of
        streams. `requested_model`: only the streams requested as that. None: no data."""

    def series_bounds(self, scope) -> tuple | None:
        """(start, end) of the over-time charts (`pairs.series_bounds`: the range narrowed to
        its streams) of `scope` (this source's, or it narrowed to a requested model). None:
        no streams."""

    def scores(self, score_type) -> dict:
        """{resolved model: [n, sum_milli, positive]} (`aggregates.SCORE_VALUES`) of the scores
        of `score_type` (a ScoreType) given to the streams in scope, running ones included,
        and kept for the streams retention deleted (score_figures.py)."""

    def score_series(self, score_type, bounds: tuple, step: int, edges: list) -> dict:
        """{(resolved model, bucket start): [n, sum_milli, positive]} of those scores per bucket
        of the over-time chart over `bounds`: buckets of `step` seconds starting at `edges`
        (epoch seconds, the last one the end; `sql.buckets`)."""

    def top_band(self, k: int) -> tuple | None:
        """(lo, hi): a TTFT band that holds the k highest values in scope, when the source
        knows one cheaply (the slowest streams are then read from it); else None."""

    def routing(self) -> dict:
        """{(resolved model, routing category, routing source): streams} over the requests
        for model "auto"."""

    def findings(self, by: tuple, code=None) -> dict:
        """{key: findings}: checker findings of the streams in scope, keyed by the columns
        `by` (of code, severity, resolved_model, requested_model, status; () for the total),
        of one `code` or all."""

    def days(self) -> list:
        """[{day, streams, failed, events}] per UTC day of the range (all time: from the
        oldest stream), events being the streams' `event_count`."""

    def users(self) -> dict:
        """{user id or None: {streams, failed, output_deltas, bytes, findings}} of every user
        with streams in scope."""

    def last_streams(self, users: list) -> dict:
        """{user id or None: when their newest stream in scope was created}."""

    def errors(self, statuses: tuple) -> dict:
        """{(status, error code): streams} of the streams in scope with one of `statuses`."""

    def usage(self, by: tuple) -> dict:
        """{key: {figure: value}} (`sql.USAGE_FIGURES`: streams, with usage, estimated, the
        token sums, with a cost, the cost per currency in nano-units) of the streams in scope
        keyed by `by` (of resolved_model, requested_model, user (its id, None for none),
        project (likewise), status, source; () for the total); keys without streams are left
        out."""

    def usage_tags(self) -> dict:
        """{tag: {figure: value}} per tag of the streams in scope (a stream with two tags is
        counted under each; with a tag filter, that tag alone)."""

    def usage_days(self) -> list:
        """[{day, figure: value…}] per day of `days`' (the scope's local days)."""

    def usage_series(self) -> dict | None:
        """The figures per time bucket of the over-time charts (as `series` buckets them):
        {"step", "t": [bucket starts], figure: [value per bucket]}. None: no data."""
