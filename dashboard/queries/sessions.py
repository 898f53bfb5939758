"""A session: the streams a proxied client labelled with one X-Streamscope-Session, a page at a
time with the totals of all of them (its own page and a shared session's)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Max, Min, Q, Sum

from dashboard.queries.common import rows_for
from streams.access.rules import streams_for
from streams.core.pricing import CURRENCIES
from streams.models import Stream

SESSION_PAGE = 200


@dataclass
class UsageTotals:
    """The usage and cost of a set of streams, summed from their rows (`usage_aggregates`)."""

    with_usage: int = 0  # streams with usage, reported or estimated
    estimated: int = 0  # of them, estimates (the upstream reported none)
    input_tokens: int | None = None  # the sums over the streams that know them
    output_tokens: int | None = None
    costs: list = field(default_factory=list)  # [(currency, nano-units, streams)], priced only
    unpriced: int = 0  # finished streams without a price (shown as such, never as 0)


# What `usage_totals` reads from an aggregate over stream rows (one query with the rest).
_FINISHED = ~Q(status__in=Stream.ACTIVE_STATUSES)
_PRICED = Q(cost_nanos__isnull=False)


def usage_aggregates():
    """The aggregate expressions `usage_totals` reads, to add to a query's own."""
    sums = {
        "usage_n": Count("pk", filter=~Q(usage_source="")),
        "usage_estimated": Count("pk", filter=Q(usage_source=Stream.UsageSource.ESTIMATED)),
        "usage_input": Sum("input_tokens"),
        "usage_output": Sum("output_tokens"),
        "usage_unpriced": Count("pk", filter=_FINISHED & ~_PRICED),
    }
    for currency in CURRENCIES:
        priced = _PRICED & Q(cost_currency=currency)
        sums[f"cost_{currency}"] = Sum("cost_nanos", filter=priced)
        sums[f"cost_{currency}_n"] = Count("pk", filter=priced)
    return sums


def usage_totals(row):
    """`UsageTotals` from an aggregate row with `usage_aggregates()`: the costs per currency
    (a sum across currencies means nothing), each with how many streams it is over."""
    costs = [
        (currency, row[f"cost_{currency}"] or 0, row[f"cost_{currency}_n"])
        for currency in CURRENCIES
        if row[f"cost_{currency}_n"]
    ]
    return UsageTotals(
        with_usage=row["usage_n"],
        estimated=row["usage_estimated"],
        input_tokens=row["usage_input"],
        output_tokens=row["usage_output"],
        costs=costs,
        unpriced=row["usage_unpriced"],
    )


@dataclass
class SessionPage:
    session: str
    streams: list
    count: int  # the session's streams `user` may see, on every page
    statuses: list  # [(status, n)], most frequent first
    first_at: object = None  # the first one's created_at
    last_at: object = None  # the last finished_at (or created_at while none has finished)
    later: int | None = None  # cursor (a stream id) for ?after=
    after: int | None = None  # the cursor this page continues from
    usage: UsageTotals = field(default_factory=UsageTotals)  # over all of them, every page


def session_page(user, session, *, after=None, limit=None, project=None):
    """The streams of `session` that `user` may see (of `project` when given: the page's), in
    creation order, a page at a time after the stream `after`, with the totals of all of them
    (count, times, usage and cost: one aggregate); None when there are none (the page is a
    404: whether someone else used that session name is not told)."""
    if not session:
        return None
    limit = limit or SESSION_PAGE
    qs = streams_for(user, project).filter(session=session)
    figures = qs.aggregate(
        n=Count("pk"),
        first=Min("created_at"),
        finished=Max("finished_at"),
        last=Max("created_at"),
        **usage_aggregates(),
    )
    if not figures["n"]:
        return None
    statuses = sorted(
        qs.values_list("status").annotate(n=Count("pk")).values_list("status", "n"),
        key=lambda r: (-r[1], r[0]),
    )
    ordered = qs.order_by("created_at", "pk")
    anchor = None
    if after:
        anchor = qs.filter(pk=after).values_list("created_at", flat=True).first()
    if anchor is not None:
        ordered = ordered.filter(created_at__gte=anchor).exclude(created_at=anchor, pk__lte=after)
    rows = list(ordered[: limit + 1])
    page = SessionPage(
        session=session,
        streams=rows[:limit],
        count=figures["n"],
        statuses=statuses,
        first_at=figures["first"],
        last_at=max(filter(None, (figures["finished"], figures["last"])), default=None),
        later=rows[limit - 1].pk if len(rows) > limit else None,
        after=after if anchor is not None else None,
        usage=usage_totals(figures),
    )
    rows_for(user, page.streams)
    return page
