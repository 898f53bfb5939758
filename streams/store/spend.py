"""What each token's proxied streams cost: a counter on the token's row per UTC day and month
(`ApiToken.spent_*`), the one figure spend caps are checked against (streams/access/limits.py).

Why a counter and not a sum over `Stream.token`: the check runs before every request of a
capped token, and a month of a busy token's streams is many rows to add up each time; the
counter is one row, whatever the volume. It is added to in the same transaction that writes a
stream's cost (`count`, from rows.write_batch), so it never disagrees with the rows: a stream
counts once its cost is stored, for the UTC day and month in which it finished, and only when
priced in its project's currency (there are no exchange rates here; docs/teams.md says so).
`Stream.token` says which streams they were, and tests compare the two.

Reading it (`figures`) goes through Django's cache, with a generation per token that every
counted stream bumps after its commit: a reader that read the row before a commit stores what
it read under the old generation, where nobody looks again. A request that starts after a
stream's response ended therefore sees that stream's cost."""

import dataclasses
import datetime as dt

from django.core.cache import cache
from django.db import models, transaction

from streams.models import ApiToken

_GEN_KEY = "streamscope:spendgen:{}"
_FIGURES_KEY = "streamscope:spend:{}:{}"
FRESH_S = 5  # how long a read of the row is kept (a stream counted meanwhile drops it)


@dataclasses.dataclass(frozen=True)
class Spent:
    """What a token spent (nano-units of its project's currency) in the UTC day and month of
    `at`."""

    day_nanos: int
    month_nanos: int


def periods(at):
    """(the UTC day, the first day of its month) of the moment `at`."""
    day = at.astimezone(dt.UTC).date()
    return day, day.replace(day=1)


def count(updates):
    """Add the cost of every stream in `updates` (the writer's `{rec: fields}`) that came
    through a token and got its cost, to that token's counters (inside the batch's
    transaction)."""
    counted = []
    for rec, fields in updates.items():
        token_id, nanos = getattr(rec, "token_id", None), fields.get("cost_nanos")
        if token_id is None or not nanos:
            continue
        day, month = periods(fields.get("finished_at") or dt.datetime.now(dt.UTC))
        added = ApiToken.objects.filter(
            pk=token_id, project__currency=fields.get("cost_currency")
        ).update(
            spent_day_nanos=_add_within("spent_day", day, "spent_day_nanos", nanos),
            spent_day=day,
            spent_month_nanos=_add_within("spent_month", month, "spent_month_nanos", nanos),
            spent_month=month,
        )
        if added:
            counted.append(token_id)
    if counted:
        transaction.on_commit(lambda: changed(counted))


def _add_within(period_field, period, total_field, nanos):
    # (both SET expressions read the row as it was: a new period starts from this stream)
    return models.Case(
        models.When(**{period_field: period}, then=models.F(total_field) + nanos),
        default=models.Value(nanos),
        output_field=models.BigIntegerField(),
    )


def changed(token_ids):
    """Drop what readers remember of these tokens' counters (after their commit)."""
    for token_id in token_ids:
        key = _GEN_KEY.format(token_id)
        if not cache.add(key, 1, timeout=None):
            try:
                cache.incr(key)
            except ValueError:  # (evicted meanwhile)
                cache.add(key, 1, timeout=None)


def figures(token_id, now=None):
    """What token `token_id` spent today and this month (UTC, by `now`), read from its row at
    most once per FRESH_S and after every counted stream (sync)."""
    generation = cache.get(_GEN_KEY.format(token_id), 0)
    key = _FIGURES_KEY.format(token_id, generation)
    row = cache.get(key)
    if row is None:
        row = (
            ApiToken.objects.filter(pk=token_id)
            .values_list("spent_day", "spent_day_nanos", "spent_month", "spent_month_nanos")
            .first()
        ) or (None, 0, None, 0)
        cache.set(key, row, timeout=FRESH_S)
    return of_row(*row, now=now)


def of_row(spent_day, spent_day_nanos, spent_month, spent_month_nanos, now=None):
    """`Spent` of a token's counters as of `now`: a counter of an earlier day or month is 0."""
    day, month = periods(now or dt.datetime.now(dt.UTC))
    return Spent(
        spent_day_nanos if spent_day == day else 0,
        spent_month_nanos if spent_month == month else 0,
    )
