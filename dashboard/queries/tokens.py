"""The token page's rows (dashboard/views/tokens.py): each token the user may see, with what
it used against its limits: requests in the sliding minute (counted for tokens with a limit
only) and spend today and this month (UTC, streams/store/spend.py)."""

import dataclasses
import datetime as dt

from streams.access import throttle, tokens
from streams.store import spend

Scope = tokens.Scope

MAX_ROWS = 200  # (live tokens first: those past it are revoked or old)


@dataclasses.dataclass(frozen=True)
class TokenRow:
    token: object  # the ApiToken
    status: str  # "active", "expired" or "revoked"
    spent: spend.Spent
    requests: int | None  # in the sliding minute; None: no limit, not counted
    scopes: list  # the labels of its scopes


def token_rows(user, project, now=None):
    """(the rows of the tokens `user` may see in `project`, how many more there are)."""
    now = now or dt.datetime.now(dt.UTC)
    found = tokens.visible(user, project)
    rows = []
    for token in found[:MAX_ROWS]:
        if token.revoked:
            status = "revoked"
        elif token.expires_at is not None and token.expires_at <= now:
            status = "expired"
        else:
            status = "active"
        counters = (
            token.spent_day,
            token.spent_day_nanos,
            token.spent_month,
            token.spent_month_nanos,
        )
        requests = throttle.token_requests(token.pk) if token.requests_per_minute else None
        scopes = [Scope(s).label for s in Scope.values if s in token.scopes]
        rows.append(TokenRow(token, status, spend.of_row(*counters, now=now), requests, scopes))
    more = max(0, found.count() - MAX_ROWS) if len(rows) == MAX_ROWS else 0
    return rows, more
