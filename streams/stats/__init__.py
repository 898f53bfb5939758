"""The figures of a scope, computed in the database: the one place that knows how.

Moved down from `dashboard/stats/` so that work in `streams` (an alert rule's evaluation) reads
the same figures as the analytics pages, not a copy of them:

- `sql`: scopes and the one rule for their conditions (raw rows and rollups), index choice,
  percentiles by ordered offset, time buckets, the version a poll compares.
- `pairs`: aggregates per (resolved, requested) model pair, folded into groups.
- `source`: the figures a report is built from (`Source`) and which source a scope is read from
  (`source_for`); `exact` reads them from the raw rows, `rollup` from the pre-aggregates
  (`cube`: whole periods from the rollups, the partial hours at the ends from the raw rows);
  the scores both alike (`score_figures`).

The pages' reports built on these are in `dashboard/stats/`.
"""
