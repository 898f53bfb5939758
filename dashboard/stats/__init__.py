"""The analytics pages' reports: plain data out, computed in the database.

The figures they are built from (scopes, `Source` and its exact and rollup readings, percentiles,
buckets) are in `streams/stats/`, where an alert rule's evaluation reads the same ones.

- `scores`: the latency page's scores section, from its source.
- `latency`, `routing`, `usage`, `admin`: one report per page (`latency_report`,
  `routing_report`, `usage_report`, `admin_report`), each what its page shows, each written
  once against a `Source` (`streams.stats.source`).

- `compare`: two streams side by side (their figures, arrival curves and word diff), read
  from their rows and events for one page.

Callers import from the submodule (`from dashboard.stats.latency import latency_report`).
"""
