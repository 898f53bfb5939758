"""A token's own limits, checked before a request of it is served: its spend caps per UTC day
and month (the proxy) and its requests per minute (the proxy and the API). A refusal is a 429
with `Retry-After`: until the next UTC day or month for a cap, until the sliding minute has
room for the rate.

A cap is checked against what the token's finished streams cost (streams/store/spend.py): a
request is refused once that reached the cap, so the last stream let through may pass it, by
at most its own cost, and by one stream's cost per request in flight at once (a stream's cost
is known when it ends; at most PROXY_MAX_CONCURRENT of a token's are in flight)."""

import dataclasses
import datetime as dt
import math

from streams.access import throttle
from streams.core import pricing
from streams.store import spend

DAY, MONTH = "day", "month"


@dataclasses.dataclass(frozen=True)
class Over:
    """A refused request: the error `code`, its `message`, seconds until it may come again,
    and what the error's body says besides (a cap: `cap`, `spent`, `currency`, `period`)."""

    code: str
    message: str
    retry_after: int
    extra: dict = dataclasses.field(default_factory=dict)


def until_next(period, now):
    """Whole seconds from `now` to the start of the next UTC day or month (at least 1)."""
    day, month = spend.periods(now)
    if period == DAY:
        start = day + dt.timedelta(days=1)
    else:
        start = (month + dt.timedelta(days=32)).replace(day=1)
    boundary = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    return max(1, math.ceil((boundary - now).total_seconds()))


def caps(token):
    """[(period, cap in nano-units)] of `token`'s spend caps."""
    return [
        (period, cap)
        for period, cap in ((DAY, token.spend_cap_day_nanos), (MONTH, token.spend_cap_month_nanos))
        if cap is not None
    ]


def spend_over(bearer, now=None):
    """`Over` when `bearer`'s token spent its cap for today or this month, else None (sync)."""
    token = bearer.token
    limits = caps(token)
    if not limits:
        return None
    now = now or dt.datetime.now(dt.UTC)
    spent = spend.figures(token.pk, now)
    currency = bearer.project.currency
    for period, cap in limits:
        used = spent.day_nanos if period == DAY else spent.month_nanos
        if used >= cap:
            cap_text, used_text = pricing.amount_text(cap), pricing.amount_text(used)
            return Over(
                "spend_cap_reached",
                f"This token spent {used_text} {currency} this {period} (UTC); "
                f"its cap is {cap_text} {currency}.",
                until_next(period, now),
                {"cap": cap_text, "spent": used_text, "currency": currency, "period": period},
            )
    return None


def rate_over(bearer):
    """`Over` when `bearer`'s token sent its requests per minute, else None and the request
    counted (sync)."""
    limit = bearer.token.requests_per_minute
    if not limit:
        return None
    retry = throttle.token_request_allowed(bearer.token.pk, limit)
    if retry is None:
        return None
    return Over(
        "rate_limited",
        f"This token may send {limit} requests per minute: retry in {retry} s.",
        retry,
        {"limit": limit},
    )


def over(bearer, *, spending=False, now=None):
    """`Over` for a request of `bearer` that its limits refuse, else None, and the request
    counted against its rate (sync). `spending`: the request may cost (the proxy's). A request
    refused for a cap is not counted against the rate."""
    if spending:
        refused = spend_over(bearer, now)
        if refused is not None:
            return refused
    return rate_over(bearer)


def limited(bearer):
    """Whether any limit applies to `bearer`'s token (else `over` need not be asked)."""
    token = bearer.token
    return bool(token.requests_per_minute) or bool(caps(token))
