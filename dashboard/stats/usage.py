"""The usage and cost page (/usage/): what the streams in scope used and cost, per model, per
user (staff), per tag and per day (the page's local days), with the spend over time; and the
per-model table as CSV (/usage/export.csv).

Costs are summed per currency, in nano-units (`streams.core.pricing`): EUR and USD are never
added together. A stream without a price (a model no price knows, usage not known, or still
running) is counted as such ("no price"), never as a cost of 0. Token counts include the
estimated ones (`usage_source` "estimated": counted offline, streams/core/usage.py), and every
table says how many streams' counts were estimated. Reasoning and cached input tokens are never
estimated: their sums are over the streams that reported them.

Every figure is a count or a sum: exact from either source (`source.Source.usage…`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model

from dashboard import dates
from streams.core import pricing
from streams.models import Project
from streams.stats import cube
from streams.stats.pairs import model_pairs
from streams.stats.source import source_for
from streams.stats.sql import USAGE_FIGURES, Scope, divide, percent, versioned
from streams.store import known_secrets

TOP_USERS = 50
TOP_TAGS = 50
# each currency and the figure its nano-units are summed in
CURRENCY_FIGURES = tuple(zip(pricing.CURRENCIES, ("cost_eur_nanos", "cost_usd_nanos"), strict=True))


def usage_row(figures, currencies=pricing.CURRENCIES):
    """A table row of `sql.USAGE_FIGURES`: the figures, plus `unpriced` (streams without a
    cost), `reported_n` (streams with usage the upstream reported), `estimated_pct` (of the
    streams with usage, the share estimated), `tokens` (input + output) and `costs`
    [(currency, nano-units)] of `currencies`."""
    row = dict(figures)
    row["unpriced"] = row["streams"] - row["priced_n"]
    # cached input and reasoning tokens are never estimated: known only from reported usage
    row["reported_n"] = row["usage_n"] - row["estimated_n"]
    row["estimated_pct"] = percent(divide(row["estimated_n"], row["usage_n"]))
    row["tokens"] = row["input_tokens"] + row["output_tokens"]
    row["costs"] = [(c, row[name]) for c, name in CURRENCY_FIGURES if c in currencies]
    return row


def _sum(rows):
    total = dict.fromkeys(USAGE_FIGURES, 0)
    for r in rows:
        for name in USAGE_FIGURES:
            total[name] += r[name]
    return total


def _fold(per_key, at):
    """{key[at]: summed figures} of `Source.usage`'s {key: figures}."""
    out = {}
    for key, figures in per_key.items():
        acc = out.setdefault(key[at], dict.fromkeys(USAGE_FIGURES, 0))
        for name in USAGE_FIGURES:
            acc[name] += figures[name]
    return out


def spend_order(row):
    """Most spent first: the costs, currency by currency (EUR, then USD: never added), then
    tokens, then streams."""
    return (*(-n for _, n in row["costs"]), -row["tokens"], -row["streams"])


def model_rows(per_model, currencies=pricing.CURRENCIES):
    """Per resolved model ("" for a stream that failed before the upstream named one), most
    spent first, from `Source.usage` keyed by the resolved model first."""
    rows = [{"model": m, **usage_row(f, currencies)} for m, f in _fold(per_model, 0).items()]
    rows.sort(key=lambda r: (*spend_order(r), known_secrets.label_key(r["model"])))
    return rows


@dataclass
class UsageReport:
    scope: Scope
    empty: bool
    version: str = ""
    totals: dict = field(default_factory=dict)
    currencies: list = field(default_factory=list)  # those with a cost in scope
    models: list = field(default_factory=list)
    users: list | None = None  # staff only
    user_count: int = 0
    tags: list = field(default_factory=list)
    tag_count: int = 0
    days: list = field(default_factory=list)  # days with streams, newest first
    chart: dict | None = None
    series_rows: list = field(default_factory=list)
    resolved_models: list = field(default_factory=list)
    requested_models: list = field(default_factory=list)
    method: str = cube.EXACT  # every figure is exact either way; this says where it came from


def _users(per_user, currencies, limit=TOP_USERS):
    rows = sorted(
        ({"user_id": u, **usage_row(f, currencies)} for u, f in per_user.items()),
        key=lambda r: (*spend_order(r), r["user_id"] or 0),
    )
    shown = rows[:limit]
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[r["user_id"] for r in shown if r["user_id"] is not None])
        .values_list("pk", "username")
    )
    for r in shown:
        r["username"] = names.get(r["user_id"], "") if r["user_id"] is not None else ""
    return shown, sum(1 for r in rows if r["user_id"] is not None)


TOP_PROJECTS = 50


def project_spend(source, limit=TOP_PROJECTS):
    """Which project spends what (the staff page over every project): the `limit` projects
    that spent most, as usage table rows with `project_id`, `name` and `slug` ("(no
    project)": streams of none, a row, not a project), the currencies they spent in, and how
    many projects there are."""
    per = {key[0]: figures for key, figures in source.usage(("project",)).items()}
    currencies = [c for c, name in CURRENCY_FIGURES if any(f[name] for f in per.values())]
    rows = sorted(
        ({"project_id": p, **usage_row(f, currencies)} for p, f in per.items()),
        key=lambda r: (*spend_order(r), r["project_id"] or 0),
    )
    shown = rows[:limit]
    named = {
        pk: (name, slug)
        for pk, name, slug in Project.objects.filter(
            pk__in=[r["project_id"] for r in shown if r["project_id"] is not None]
        ).values_list("pk", "name", "slug")
    }
    for r in shown:
        r["name"], r["slug"] = named.get(r["project_id"], ("", ""))
    return shown, currencies, sum(1 for r in rows if r["project_id"] is not None)


def _series(series, currencies, zone):
    """(the chart's data, the table view's rows) of `Source.usage_series`: per currency the
    spend of each bucket in nano-units, None where nothing in the bucket had a price."""
    priced = series["priced_n"]
    chart = {
        "step": series["step"],
        "t": series["t"],
        "series": [
            {
                "currency": c,
                "nanos": [v if p else None for v, p in zip(series[name], priced, strict=True)],
            }
            for c, name in CURRENCY_FIGURES
            if c in currencies
        ],
    }
    rows = []
    for i, t in enumerate(series["t"]):
        if series["streams"][i]:
            figures = {name: series[name][i] for name in USAGE_FIGURES}
            row = usage_row(figures, currencies)
            row["t"] = dates.write(dt.datetime.fromtimestamp(t, zone), "minute", zone=False)
            rows.append(row)
    return chart, rows


@versioned
def usage_report(scope, *, now=None):
    """Everything the usage page shows."""
    now = now or dt.datetime.now(dt.UTC)
    pairs = model_pairs(scope)
    source = source_for(scope, now)
    report = UsageReport(
        scope=scope,
        empty=True,
        resolved_models=known_secrets.label_order({r for r, _ in pairs if r}),
        requested_models=known_secrets.label_order({q for _, q in pairs if q}),
        method=source.method,
    )
    per_pair = source.usage(("resolved_model", "user"))  # (one read: the tables fold it)
    totals = _sum(per_pair.values())
    if not totals["streams"]:
        return report
    report.empty = False
    currencies = [c for c, name in CURRENCY_FIGURES if totals[name]]
    report.currencies = currencies
    report.totals = usage_row(totals, currencies)
    report.models = model_rows(per_pair, currencies)
    if scope.project_id is None:  # staff, every project: everyone's streams
        report.users, report.user_count = _users(_fold(per_pair, 1), currencies)
    tags = [{"tag": t, **usage_row(f, currencies)} for t, f in source.usage_tags().items()]
    tags.sort(key=lambda r: (*spend_order(r), known_secrets.label_key(r["tag"])))
    report.tags, report.tag_count = tags[:TOP_TAGS], len(tags)
    days = [usage_row(d, currencies) for d in source.usage_days()]
    report.days = [d for d in reversed(days) if d["streams"]]
    series = source.usage_series()
    if series is not None and currencies:
        report.chart, report.series_rows = _series(series, currencies, scope.zone)
    return report


# ---------------------------------------------------------------------------------------------
# The CSV export: the per-model table as data (English column names, UTC, plain numbers,
# amounts as decimal strings of their currency)

CSV_COLUMNS = (
    "resolved_model", "streams", "streams_with_usage", "streams_estimated", "input_tokens",
    "output_tokens", "cached_input_tokens", "reasoning_tokens", "streams_priced",
    "streams_without_price", "cost_eur", "cost_usd", "range_start_utc", "range_end_utc",
)  # fmt: skip


_NEVER_ESTIMATED = ("cached_input_tokens", "reasoning_tokens")


def _utc(value):
    return "" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _amount(nanos, priced):
    """An amount as a decimal string with the nine places of its nano-units ("0.001230000");
    "" where no stream had a price (no price is not a cost of 0)."""
    return format(pricing.decimal(nanos), "f") if priced else ""


def export_rows(scope, now=None):
    """The rows of the per-model CSV (after CSV_COLUMNS), one per resolved model, most spent
    first. Each says the range it sums (UTC; an open start is empty)."""
    now = now or dt.datetime.now(dt.UTC)
    start, end = _utc(scope.start), _utc(scope.end or now)
    return [
        [
            *(r[name] for name in ("model", "streams", "usage_n", "estimated_n")),
            r["input_tokens"],
            r["output_tokens"],
            # (never estimated: unknown, not 0, where no stream reported its usage)
            *(r[name] if r["reported_n"] else "" for name in _NEVER_ESTIMATED),
            r["priced_n"],
            r["unpriced"],
            *(_amount(r[name], r["priced_n"]) for _, name in CURRENCY_FIGURES),
            start,
            end,
        ]
        for r in model_rows(source_for(scope, now).usage(("resolved_model",)))
    ]
