"""The staff analytics page (/analytics/; not Django's admin): streams, failures and events per
day, usage per user, spend per project (over every project), error codes, checker findings,
and the largest and slowest streams — of the page's project, or of every project.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model

from dashboard.stats.usage import project_spend
from streams.stats import cube
from streams.stats.source import source_for
from streams.stats.sql import (
    Scope,
    dict_rows,
    divide,
    from_clause,
    percent,
    quote,
    scope_where,
    versioned,
)
from streams.store import known_secrets


@dataclass
class AdminReport:
    scope: Scope
    empty: bool
    version: str = ""
    totals: dict = field(default_factory=dict)
    days: list = field(default_factory=list)
    users: list = field(default_factory=list)
    # which project spends what: over every project only (None: the page is one project's)
    projects: list | None = None
    project_count: int = 0
    project_currencies: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    findings: dict = field(default_factory=dict)
    largest: list = field(default_factory=list)
    slowest: list = field(default_factory=list)
    daily_chart: dict | None = None
    method: str = cube.EXACT  # counts are exact either way; this says where they came from


PROBLEM_STATUSES = ("failed", "stalled", "truncated", "interrupted", "cancelled", "incomplete")
TOP_USERS = 50
TOP_STREAMS = 10


def users_table(source, limit=TOP_USERS):
    """The busiest `limit` users' rows (streams, failures, output tokens, bytes, findings,
    last stream), and how many users there are ("(no user)", streams recorded from the CLI,
    is a row of the table, not a user)."""
    rows = sorted(source.users().items(), key=lambda r: (-r[1]["streams"], r[0] or 0))
    shown = rows[:limit]
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[u for u, _ in shown if u is not None])
        .values_list("pk", "username")
    )
    last = source.last_streams([u for u, _ in shown])
    table = [
        {
            "user_id": u,
            "username": names.get(u, "") if u is not None else "",
            "streams": e["streams"],
            "failed": e["failed"],
            "error_rate": divide(e["failed"], e["streams"]),
            "error_pct": percent(divide(e["failed"], e["streams"])),
            "output_deltas": e["output_deltas"],
            "bytes": e["bytes"],
            "findings": e["findings"],
            "last": last.get(u),
        }
        for u, e in shown
    ]
    return table, sum(1 for u, _ in rows if u is not None)


def errors_table(source):
    """(status, error code) of the streams that did not complete, most frequent first."""
    rows = [
        {"status": s, "code": c, "count": n}
        for (s, c), n in source.errors(PROBLEM_STATUSES).items()
        if n
    ]
    rows.sort(key=lambda r: (-r["count"], r["status"], r["code"]))
    return rows


def findings_table(rows):
    """(code, severity, resolved model, count) rows as the page's table: {"models", "rows"}."""
    table = {}
    model_names = set()
    for code, severity, model, n in rows:
        if not n:
            continue
        entry = table.setdefault(
            (code, severity), {"code": code, "severity": severity, "total": 0, "models": {}}
        )
        entry["total"] += n
        entry["models"][model] = entry["models"].get(model, 0) + n
        model_names.add(model)
    model_list = known_secrets.label_order(model_names)
    out = sorted(table.values(), key=lambda e: (-e["total"], e["code"]))
    for e in out:
        e["cells"] = [e["models"].get(m, 0) for m in model_list]
    return {"models": model_list, "rows": out}


def top_streams(scope, column, limit=TOP_STREAMS):
    """The streams with the highest `column` (bytes_received, duration_ms) in scope."""
    w = scope_where(scope).add(f"{quote(column)} IS NOT NULL")
    cols = [
        "id",
        "created_at",
        "user_id",
        "resolved_model",
        "status",
        "output_deltas",
        "bytes_received",
        "duration_ms",
    ]
    rows = dict_rows(
        f"SELECT {', '.join(quote(c) for c in cols)} FROM {from_clause(TOP_INDEX[column])} "
        f"WHERE {w.sql()} ORDER BY {quote(column)} DESC LIMIT {int(limit)}",
        w.params,
        cols,
    )
    for r in rows:
        r["duration_s"] = r["duration_ms"] / 1000 if r["duration_ms"] is not None else None
    return rows


# walked from the top, the range checked in the index entry (streams/models.py)
TOP_INDEX = {"bytes_received": "stream_bytes_top", "duration_ms": "stream_duration_top"}


def _daily_chart(days, zone=dt.UTC):
    """The per-day chart's series (a day starts at the midnight of `zone`)."""
    return {
        "t": [int(dt.datetime.combine(d["day"], dt.time(), zone).timestamp()) for d in days],
        "streams": [d["streams"] for d in days],
        "failed": [d["failed"] for d in days],
    }


@versioned
def admin_report(scope, *, now=None):
    """Everything the staff analytics page shows."""
    now = now or dt.datetime.now(dt.UTC)
    source = source_for(scope, now)
    report = AdminReport(scope=scope, empty=True, method=source.method)
    report.days = source.days()
    if not any(d["streams"] for d in report.days):
        return report
    report.empty = False
    report.daily_chart = _daily_chart(report.days, scope.zone)
    report.users, user_count = users_table(source)
    if scope.project_id is None:
        report.projects, report.project_currencies, report.project_count = project_spend(source)
    report.errors = errors_table(source)
    found = source.findings(("code", "severity", "resolved_model"))
    report.findings = findings_table((*key, n) for key, n in found.items())
    report.largest = top_streams(scope, "bytes_received")
    report.slowest = top_streams(scope, "duration_ms")
    report.totals = {
        "streams": sum(d["streams"] for d in report.days),
        "failed": sum(d["failed"] for d in report.days),
        "events": sum(d["events"] for d in report.days),
        "users": user_count,
        "findings": sum(r["total"] for r in report.findings["rows"]),
    }
    return report
