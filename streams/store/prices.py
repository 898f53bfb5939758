"""Which price a stream gets, and its cost fields: the team's own table first, else the
maintained list (genai-prices, bundled with its package: it is never updated over the network
here, so a figure does not change under anyone's feet).

A stream the built-in simulator answered, which no team price names, gets the simulator's
example price of its model (labelled as one wherever the price is named), so that costs work
out of the box; a real upstream's streams never do.

The team's table (`Price`, edited in the admin) is read into a snapshot, reloaded when it is
older than `STALE_S` by whoever asks from a thread (the recorder's writer does, every batch);
a stream finishing on the event loop prices against the snapshot as it is, never touching the
database from the loop. An edit therefore applies to streams that finish a few seconds later,
and `manage.py reprice` applies it to a range that is already stored.

`cost_fields(usage, model, at)` is what `rows.finished` writes: `cost_nanos` (None: no price),
`cost_currency`, `price_ref` (which price it was, shown beside the figure).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import threading
import time
from decimal import Decimal

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from streams.core import pricing
from streams.core.pricing import MAINTAINED, NANO, Rate
from streams.simulator import built_in_upstream
from streams.simulator.models import EXAMPLE_CURRENCY, MODELS
from streams.store import known_secrets

log = logging.getLogger(__name__)

STALE_S = 10.0
PROVIDER = "openai"  # the maintained list's provider for EU GPT's OpenAI-style model ids


class _Book:
    """The team's rates, as last read."""

    def __init__(self):
        self.rates: tuple[Rate, ...] = ()
        self.read_at = None  # monotonic seconds; None: never read
        self.lock = threading.Lock()

    def current(self) -> tuple[Rate, ...]:
        if self.read_at is None or time.monotonic() - self.read_at > STALE_S:
            if not _on_event_loop():
                self.reload()
        return self.rates

    def reload(self) -> None:
        from django.db import DatabaseError

        from streams.models import Price

        with self.lock:
            try:
                self.rates = tuple(entry.rate() for entry in Price.objects.all())
            except DatabaseError as exc:  # (kept as they were; the writer has its own retries)
                log.warning("prices: the team's table could not be read (%s)", exc)
            self.read_at = time.monotonic()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


_book = _Book()


def refresh() -> None:
    """Reload the team's table when the snapshot is stale (from a thread, not the loop)."""
    _book.current()


def forget() -> None:
    """Read the table again at the next price (after an edit in this process)."""
    _book.read_at = None


@receiver([post_save, post_delete], sender="streams.Price", dispatch_uid="prices-forget")
def _on_price_change(sender, **kwargs):
    """An edit in this process applies to the next stream that finishes here (other
    processes reread the table within STALE_S)."""
    forget()


def install(rates) -> None:
    """Price with `rates` as the team's table, without reading it (the usage bench: no
    database); `forget` reads the table again."""
    _book.rates, _book.read_at = tuple(rates), float("inf")


@functools.cache
def _maintained():
    import genai_prices  # (~200 ms: only when a stream needs it)

    return genai_prices


def warm() -> None:
    """genai-prices (pydantic under it) imported and its tables built: ~160 ms at its first
    use otherwise (streams/core/warmup.py)."""
    _maintained().calc_price(
        _maintained().Usage(input_tokens=1, output_tokens=1), "gpt-4o", provider_id=PROVIDER
    )


_UNKNOWN_MAX = 4096
_unknown: set[str] = set()  # model ids the list does not know (the lookup walks every provider)


def maintained_rate(model: str, usage, at: dt.datetime):
    """(nano-units, ref) of `usage` at the maintained list's price for `model` at `at` (USD),
    or None when the list does not know the model."""
    if model in _unknown:
        return None
    genai_prices = _maintained()
    tokens = genai_prices.Usage(
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cached_input_tokens or None,
        output_tokens=usage.output_tokens,
    )
    for provider in (PROVIDER, None):  # (then any provider the list has for the id)
        try:
            price = genai_prices.calc_price(
                tokens, model, provider_id=provider, genai_request_timestamp=at
            )
            break
        except LookupError:
            continue
    else:
        if len(_unknown) < _UNKNOWN_MAX:
            _unknown.add(model)
        return None
    nanos = int((Decimal(price.total_price) * NANO).to_integral_value())
    ref = f"{MAINTAINED} {genai_prices.__version__}: {price.provider.id}/{price.model.id}"
    return nanos, ref


NO_PRICE = {"cost_nanos": None, "cost_currency": "", "price_ref": ""}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def example_rate(model: str) -> Rate | None:
    """The built-in simulator's example price of `model` (streams/simulator/models.py), or
    None for a model it does not have."""
    profile = MODELS.get(model)
    if profile is None:
        return None
    return Rate(
        pattern=model, effective_from=_EPOCH, currency=EXAMPLE_CURRENCY,
        input=profile.input_per_million, output=profile.output_per_million,
        source=pricing.EXAMPLE, ref=f"{pricing.EXAMPLE}: {model}",
    )  # fmt: skip


def cost_fields(usage, model: str, at: dt.datetime | None, *, imported=False, project=None) -> dict:
    """A finished stream's cost columns: its usage at the price for `model` valid at `at` (its
    start), the team's first (its `project`'s own, else the instance's: `pricing.pick`); then,
    for a stream the built-in simulator answered (recorded, not `imported`, while it is this
    instance's upstream), its example price; then the maintained list. No price (unknown
    model, unknown usage): `cost_nanos` None."""
    if not model or at is None or usage.input_tokens is None or usage.output_tokens is None:
        return dict(NO_PRICE)
    # The team's patterns are globs (`gpt-4o*`) staff write and `reprice` applies: matched
    # against an upstream's model id as stored, `m-sk-4*` priced or not would tell a key's
    # characters one at a time. Matched against it redacted, a key in it matches nothing.
    model = known_secrets.redact(model)
    rate = pricing.pick(_book.current(), model, at, project)
    if rate is None and not imported and built_in_upstream():
        rate = example_rate(model)
    if rate is not None:
        return {
            "cost_nanos": pricing.cost(rate, usage),
            "cost_currency": rate.currency,
            "price_ref": rate.ref,
        }
    found = maintained_rate(model, usage, at)
    if found is None:
        return dict(NO_PRICE)
    nanos, ref = found
    return {"cost_nanos": nanos, "cost_currency": "USD", "price_ref": ref}
