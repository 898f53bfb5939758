"""The scores figures of a source (`Source.scores`, `Source.score_series`), one implementation
for both: `exact.ExactSource` and `rollup.RollupSource` inherit `ScoreFigures`.

Scores are counts and sums, exact in the score rollups (`ScoreRollup`), which keep the scores
of the streams retention deleted; so either source reads them through a `cube.Cube` (the
rollups, plus the scores of the raw rows they do not hold yet: the finished streams of the
partial hours at the range's edges, and the running streams). The raw rows are read instead
where the rollups cannot answer: a session filter (sessions are not in their key) and buckets
under an hour (rollup periods are an hour at least), as the TTFT chart does.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from django.db import connection

from streams.models import Score
from streams.stats import cube
from streams.stats.pairs import series_bounds
from streams.stats.sql import from_clause, index_for, quote, scope_where
from streams.store import aggregates
from streams.store.aggregates import HOUR, epoch_s


def raw_scores(scope, score_type, key):
    """{key(model, created_at): [n, sum_milli, positive]} of the scores of `score_type` on the
    stream rows in `scope` (running ones included): the stream rows of the scope's index, each
    joined with its scores by the (score type, stream) index."""
    w = scope_where(scope)
    streams = (
        f"SELECT {quote('id')}, {quote('resolved_model')}, {quote('created_at')} "
        f"FROM {from_clause(index_for(w, ordered=False), w)} WHERE {w.sql()}"
    )
    sql = (
        f"SELECT st.{quote('resolved_model')}, st.{quote('created_at')}, sc.{quote('value')} "
        f"FROM ({streams}) st JOIN {quote(Score._meta.db_table)} sc "
        f"ON sc.{quote('stream_id')} = st.{quote('id')} WHERE sc.{quote('score_type_id')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*w.params, score_type.pk])
        rows = cursor.fetchall()
    out = {}
    for model, created_at, value in rows:
        values = aggregates.score_values(value, score_type.is_positive(value))
        cube.add_to(out, key(model, created_at), values)
    return out


class ScoreFigures:
    """`scores` and `score_series` of a source's `scope` at `now`, and what they share with the
    TTFT chart (its span, `series_bounds`, and the cube of that span), each read once a page."""

    scope: object
    now: object

    @functools.cached_property
    def cube(self):
        """The cube of the scope's range."""
        return cube.Cube(self.scope, self.scope.start, self.scope.end or self.now)

    @functools.cached_property
    def _spans(self):
        return {}

    @functools.cached_property
    def _cubes(self):
        return {}

    def series_bounds(self, scope):
        """`pairs.series_bounds` of `scope` (this source's, or it narrowed to a requested
        model), once a page: the TTFT chart's span, which the scores' chart shares."""
        if scope not in self._spans:
            self._spans[scope] = series_bounds(scope, self.now)
        return self._spans[scope]

    def series_cube(self, scope):
        """The cube a chart of `scope` (this source's, or it narrowed to a requested model) is
        read from: its range's, once a page; this source's own `cube` for its own scope. Not
        one of the chart's span: the span (`series_bounds`) holds every stream of the range, so
        both give the same figures per bucket, and a cube of the span read the raw rows of its
        partial hours again (the last stream's hour, the range's start) — at 1M streams ~1,800
        rows a page, as many as the page's own cube reads."""
        if scope == self.scope:
            return self.cube
        if scope not in self._cubes:
            self._cubes[scope] = cube.Cube(scope, self.scope.start, self.scope.end or self.now)
        return self._cubes[scope]

    def scores(self, score_type):
        if self.scope.session:
            return raw_scores(self.scope, score_type, lambda model, _: model)
        per = self.cube.scores(score_type.pk, ("resolved_model",))
        return {k[0]: v for k, v in per.items()}

    def score_series(self, score_type, bounds, step, edges):
        if self.scope.session or step % HOUR:
            g = cube.Grid(tuple(edges))
            scope = replace(self.scope, start=bounds[0], end=bounds[1])
            return raw_scores(scope, score_type, lambda m, at: (m, g.key(epoch_s(at))))
        c = self.series_cube(self.scope)
        return c.scores(score_type.pk, ("resolved_model", "t"), cube.grid(step, edges))
