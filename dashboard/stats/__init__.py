"""Read-side queries of the analytics pages: plain data out, computed in the database.

- `sql`: scopes and conditions, index choice, percentiles by ordered offset, time buckets,
  the version a poll compares (and the definition of a percentile, `rank`).
- `pairs`: aggregates per (resolved, requested) model pair, folded into the pages' groups;
  per-model time series.
- `latency`, `routing`, `admin`: one report per page (`latency_report`, `routing_report`,
  `admin_report`), each what its page shows.

Callers import from the submodule (`from dashboard.stats.latency import latency_report`).
"""
