"""The staff analytics page (/analytics/; not Django's admin): streams, failures and events per
day, usage per user, error codes, checker findings, and the largest and slowest streams.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from django.db import connection
from django.db.models import Count as models_Count

from dashboard.stats import cube
from dashboard.stats.sql import (
    IDX_CREATED,
    IDX_USER,
    TABLE,
    Scope,
    _dicts,
    _div,
    _findings_in_scope,
    _from,
    _pct,
    _q,
    _scalars,
    _versioned,
    history_start,
    scope_where,
)


@dataclass
class AdminReport:
    scope: Scope
    empty: bool
    version: str = ""
    totals: dict = field(default_factory=dict)
    days: list = field(default_factory=list)
    users: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    findings: dict = field(default_factory=dict)
    largest: list = field(default_factory=list)
    slowest: list = field(default_factory=list)
    daily_chart: dict | None = None
    method: str = cube.EXACT  # counts are exact either way; this says where they came from


PROBLEM_STATUSES = ("failed", "stalled", "truncated", "interrupted", "cancelled", "incomplete")
TOP_USERS = 50
TOP_STREAMS = 10


def per_day(scope, now):
    """Streams, failed streams and events per UTC day: one index range count per day; events
    are the `event_count` of the streams started that day (the only admin figure that reads
    table rows — the recorder bumps event_count on every batch, so it is kept out of indexes)."""
    end = scope.end or now
    start = scope.start or history_start(scope)
    if start is None:
        return []
    day0 = dt.datetime.combine(start.date(), dt.time(), dt.UTC)
    days = []
    d = day0
    while d < end and len(days) < 400:
        days.append(d)
        d += dt.timedelta(days=1)
    table = _from(IDX_CREATED if scope.user_id is None else None)
    events = f"COALESCE(SUM({_q('event_count')}), 0)"
    subqueries = []
    for d in days:
        window = replace(scope, start=max(d, start), end=min(d + dt.timedelta(days=1), end))
        w = scope_where(window)
        wf = scope_where(window).eq("status", "failed")
        subqueries += [
            (f"SELECT COUNT(*) FROM {table} WHERE {w.sql()}", w.params),
            (f"SELECT COUNT(*) FROM {_q(TABLE)} WHERE {wf.sql()}", wf.params),
            (f"SELECT {events} FROM {table} WHERE {w.sql()}", w.params),
        ]
    values = _scalars(subqueries)
    return [
        {
            "day": d.date(),
            "streams": values[3 * i],
            "failed": values[3 * i + 1],
            "events": values[3 * i + 2],
        }
        for i, d in enumerate(days)
    ]


def usage_per_user(scope, limit=TOP_USERS):
    """Per user: streams, failures, output tokens, bytes, last stream; busiest first."""
    from django.contrib.auth import get_user_model

    w = scope_where(scope)
    user, status = _q("user_id"), _q("status")
    sql = (
        f"SELECT {user}, COUNT(*), COUNT(CASE WHEN {status} = 'failed' THEN 1 END), "
        f"SUM({_q('output_tokens')}), SUM({_q('bytes_received')}), MAX({_q('created_at')}), "
        f"SUM({_q('findings_count')}) FROM {_from(IDX_USER)} WHERE {w.sql()} GROUP BY {user}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, w.params)
        rows = cursor.fetchall()
    rows.sort(key=lambda r: (-r[1], r[0] or 0))
    shown = rows[:limit]
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[r[0] for r in shown if r[0] is not None])
        .values_list("pk", "username")
    )
    out = []
    for uid, n, failed, tokens, size, last, findings in shown:
        if isinstance(last, str):
            last = dt.datetime.fromisoformat(last).replace(tzinfo=dt.UTC)
        out.append(
            {
                "user_id": uid,
                "username": names.get(uid, "") if uid is not None else "",
                "streams": n,
                "failed": failed,
                "error_rate": _div(failed, n),
                "error_pct": _pct(_div(failed, n)),
                "output_tokens": tokens or 0,
                "bytes": size or 0,
                "findings": findings or 0,
                "last": last,
            }
        )
    # "(no user)" (streams recorded from the CLI) is a row of the table, not a user
    return out, sum(1 for r in rows if r[0] is not None)


def error_codes(scope):
    """(status, error code) of the streams that did not complete, most frequent first."""
    w = scope_where(scope).among("status", PROBLEM_STATUSES)
    status, code = _q("status"), _q("error_code")
    sql = (
        f"SELECT {status}, {code}, COUNT(*) FROM {_q(TABLE)} WHERE {w.sql()} "
        f"GROUP BY {status}, {code}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, w.params)
        rows = cursor.fetchall()
    rows.sort(key=lambda r: (-r[2], r[0], r[1]))
    return [{"status": s, "code": c, "count": n} for s, c, n in rows]


def findings_by_code(scope):
    """Checker findings per (code, severity) and resolved model: {"models", "rows"}."""
    rows = (
        _findings_in_scope(scope)
        .values_list("code", "severity", "stream__resolved_model")
        .annotate(n=models_Count("id"))
        .order_by()
    )
    return findings_table(rows)


def findings_table(rows):
    """(code, severity, resolved model, count) rows as the page's table: {"models", "rows"},
    for the exact and the pre-aggregated paths alike."""
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
    model_list = sorted(model_names)
    out = sorted(table.values(), key=lambda e: (-e["total"], e["code"]))
    for e in out:
        e["cells"] = [e["models"].get(m, 0) for m in model_list]
    return {"models": model_list, "rows": out}


def top_streams(scope, column, limit=TOP_STREAMS):
    """The streams with the highest `column` (bytes_received, duration_ms) in scope."""
    w = scope_where(scope).add(f"{_q(column)} IS NOT NULL")
    cols = [
        "id",
        "created_at",
        "user_id",
        "resolved_model",
        "status",
        "output_tokens",
        "bytes_received",
        "duration_ms",
    ]
    rows = _dicts(
        f"SELECT {', '.join(_q(c) for c in cols)} FROM {_from(TOP_INDEX[column])} "
        f"WHERE {w.sql()} ORDER BY {_q(column)} DESC LIMIT {int(limit)}",
        w.params,
        cols,
    )
    for r in rows:
        r["duration_s"] = r["duration_ms"] / 1000 if r["duration_ms"] is not None else None
    return rows


# walked from the top, the range checked in the index entry (streams/models.py)
TOP_INDEX = {"bytes_received": "stream_bytes_top", "duration_ms": "stream_duration_top"}


def _daily_chart(days):
    """The per-day chart's series (exact and pre-aggregated paths alike)."""
    return {
        "t": [int(dt.datetime.combine(d["day"], dt.time(), dt.UTC).timestamp()) for d in days],
        "streams": [d["streams"] for d in days],
        "failed": [d["failed"] for d in days],
    }


@_versioned
def admin_report(scope, *, now=None):
    now = now or dt.datetime.now(dt.UTC)
    report = AdminReport(scope=scope, empty=True)
    if cube.method(scope) == cube.AGGREGATED:
        report.method = cube.AGGREGATED
        return _aggregated(report, scope, now)
    report.days = per_day(scope, now)
    if not any(d["streams"] for d in report.days):
        return report
    report.empty = False
    report.daily_chart = _daily_chart(report.days)
    report.users, user_count = usage_per_user(scope)
    report.errors = error_codes(scope)
    report.findings = findings_by_code(scope)
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


# ---------------------------------------------------------------------------------------------
# The same report from the pre-aggregates (dashboard/stats/cube.py): every figure exact.


def _days(scope, now, first=None):
    end = scope.end or now
    start = scope.start
    if start is None:
        known = [x for x in (history_start(scope), first) if x is not None]
        start = min(known) if known else None
    if start is None:
        return None, []
    day0 = dt.datetime.combine(start.date(), dt.time(), dt.UTC)
    days = []
    d = day0
    while d < end and len(days) < 400:
        days.append(d)
        d += dt.timedelta(days=1)
    return start, days


def _aggregated(report, scope, now):
    from django.contrib.auth import get_user_model

    # all time begins with the oldest aggregated day: retention may have deleted its rows
    start, days = _days(scope, now, None if scope.start else cube.first_day(scope))
    if not days:
        return report
    c = cube.Cube(scope, scope.start, scope.end or now)
    by_day = c.usage(("t", "status"), step=86400)
    per = {}
    for (t, status), v in by_day.items():
        e = per.setdefault(t, [0, 0, 0])
        e[0] += v["n"]
        e[1] += v["n"] if status == "failed" else 0
        e[2] += v["events"]
    report.days = []
    for d in days:
        streams, failed, events = per.get(int(d.timestamp()), (0, 0, 0))
        report.days.append(
            {"day": d.date(), "streams": streams, "failed": failed, "events": events}
        )
    if not any(d["streams"] for d in report.days):
        return report
    report.empty = False
    report.daily_chart = _daily_chart(report.days)
    per_user = {}
    for (user, status), v in c.usage(("user_key", "status")).items():
        e = per_user.setdefault(user, {"n": 0, "failed": 0, "tokens": 0, "bytes": 0, "f": 0})
        e["n"] += v["n"]
        e["failed"] += v["n"] if status == "failed" else 0
        e["tokens"] += v["output_tokens"]
        e["bytes"] += v["bytes_received"]
        e["f"] += v["findings"]
    rows = sorted(((u or None, e) for u, e in per_user.items() if e["n"]),
                  key=lambda r: (-r[1]["n"], r[0] or 0))  # fmt: skip
    shown = rows[:TOP_USERS]
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[u for u, _ in shown if u is not None])
        .values_list("pk", "username")
    )
    last = _last_streams(scope, [u for u, _ in shown])
    report.users = [
        {
            "user_id": u,
            "username": names.get(u, "") if u is not None else "",
            "streams": e["n"],
            "failed": e["failed"],
            "error_rate": _div(e["failed"], e["n"]),
            "error_pct": _pct(_div(e["failed"], e["n"])),
            "output_tokens": e["tokens"],
            "bytes": e["bytes"],
            "findings": e["f"],
            "last": last.get(u),
        }
        for u, e in shown
    ]
    errors = [
        {"status": s, "code": code, "count": v["n"]}
        for (s, code), v in c.usage(("status", "error_code")).items()
        if s in PROBLEM_STATUSES and v["n"]
    ]
    errors.sort(key=lambda r: (-r["count"], r["status"], r["code"]))
    report.errors = errors
    found = c.findings(("code", "severity", "resolved_model")).items()
    report.findings = findings_table((*key, n) for key, n in found)
    report.largest = top_streams(scope, "bytes_received")
    report.slowest = top_streams(scope, "duration_ms")
    report.totals = {
        "streams": sum(d["streams"] for d in report.days),
        "failed": sum(d["failed"] for d in report.days),
        "events": sum(d["events"] for d in report.days),
        "users": sum(1 for u, _ in rows if u is not None),
        "findings": sum(r["total"] for r in report.findings["rows"]),
    }
    return report


def _last_streams(scope, users):
    """{user id: newest created_at in scope}: one seek of (user, created_at) each."""
    subqueries = []
    for u in users:
        w = scope_where(scope)
        w.add(f"{_q('user_id')} IS NULL") if u is None else w.eq("user_id", u)
        subqueries.append((f"SELECT MAX({_q('created_at')}) FROM {_q(TABLE)} WHERE {w.sql()}",
                           w.params))  # fmt: skip
    out = {}
    for u, value in zip(users, _scalars(subqueries), strict=True):
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        out[u] = value
    return out
