"""Read-side queries of the analytics pages: plain data out, computed in the database.

- `sql`: scopes and the one rule for their conditions (raw rows and rollups), index choice,
  percentiles by ordered offset (at the rank `streams.core.figures.rank` defines), time
  buckets, the version a poll compares.
- `pairs`: aggregates per (resolved, requested) model pair, folded into the pages' groups.
- `source`: the figures a report is built from (`Source`: pair aggregates, group percentiles,
  phases, histogram bins, time series, routing and findings counts, per-day and per-user
  usage, scores), and which source a scope is read from (`source_for`);
  `exact` reads them from the raw rows, `rollup` from the pre-aggregates (`cube`); the
  scores both alike (`score_figures`).
- `scores`: the latency page's scores section, from its source.
- `latency`, `routing`, `usage`, `admin`: one report per page (`latency_report`,
  `routing_report`, `usage_report`, `admin_report`), each what its page shows, each written
  once against a `Source`.

- `compare`: two streams side by side (their figures, arrival curves and word diff), read
  from their rows and events for one page.

Callers import from the submodule (`from dashboard.stats.latency import latency_report`).
"""
