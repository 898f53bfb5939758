"""What a stream cost: its usage times the price per million tokens valid when it started.

Pure rules, no database: `Rate` is one price (a team's own entry, or one the maintained price
list gave), `pick` chooses among a team's entries, `cost` multiplies. Costs are integers of
nano-units of their currency (`NANO`: 10⁻⁹ EUR or USD), so sums over a million streams stay
exact on SQLite and PostgreSQL alike; `decimal` gives the amount as a `Decimal`.

Billing follows OpenAI's: cached input tokens are part of the input count and billed at the
cached rate (the input rate when an entry has none); reasoning tokens are part of the output
count and billed at the reasoning rate (the output rate when none). A stream whose input or
output count is unknown has no cost, never a partial one.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

NANO = 10**9  # nano-units per unit of currency
CURRENCIES = ("EUR", "USD")
TEAM, MAINTAINED = "team", "genai-prices"  # where a rate came from (`Rate.source`)
# the built-in simulator's made-up prices (streams/simulator/models.py): a rate's source, and
# how its ref begins ("simulator example price: qwen3-coder"), which the pages say is an example
EXAMPLE = "simulator example price"
PER_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Rate:
    """A price: per million tokens, in `currency`, valid from `effective_from` on."""

    pattern: str  # the model ids it is for: exact, or a glob (`gpt-4o*`), case-insensitive
    effective_from: dt.datetime
    currency: str
    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None  # None: the input rate
    reasoning: Decimal | None = None  # None: the output rate
    source: str = TEAM
    ref: str = ""  # which price it is, for the pages ("team price 12", "genai-prices …")
    project: int | None = None  # a project's own price (None: the instance's, for every one)

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model.lower(), self.pattern.lower())

    @property
    def specificity(self):
        """Exact ids before globs, then the longest literal text before the first wildcard."""
        wild = any(c in self.pattern for c in "*?[")
        literal = len(self.pattern.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0])
        return (not wild, literal)


def example_model(ref: str) -> str | None:
    """The model whose simulator example price `ref` names (a stored `price_ref`), else None."""
    prefix = f"{EXAMPLE}: "
    return ref[len(prefix) :] if ref.startswith(prefix) else None


def pick(rates, model: str, at: dt.datetime, project: int | None = None) -> Rate | None:
    """The team's rate for `model` at `at` for a stream of `project`: among the entries for it
    already in effect, the project's own first, else the instance's (a project's price never
    prices another project's streams); among those the most specific pattern, then the latest
    start."""
    if not model:
        return None
    valid = [
        r
        for r in rates
        if r.effective_from <= at and r.project in (None, project) and r.matches(model)
    ]
    if not valid:
        return None
    return max(valid, key=lambda r: (r.project is not None, r.specificity, r.effective_from))


def cost(rate: Rate, usage) -> int | None:
    """`usage`'s cost at `rate`, in nano-units (rounded half to even), or None when its input
    or output count is unknown."""
    if usage.input_tokens is None or usage.output_tokens is None:
        return None
    cached = min(usage.cached_input_tokens or 0, usage.input_tokens)
    reasoning = min(usage.reasoning_tokens or 0, usage.output_tokens)
    cached_rate = rate.input if rate.cached_input is None else rate.cached_input
    reasoning_rate = rate.output if rate.reasoning is None else rate.reasoning
    amount = (
        (usage.input_tokens - cached) * rate.input
        + cached * cached_rate
        + (usage.output_tokens - reasoning) * rate.output
        + reasoning * reasoning_rate
    ) / PER_MILLION
    return int((amount * NANO).to_integral_value(rounding=ROUND_HALF_EVEN))


def decimal(nanos: int | None) -> Decimal | None:
    """An amount of nano-units as a `Decimal` of its currency (nine places)."""
    return None if nanos is None else Decimal(nanos).scaleb(-9)


def amount_text(nanos: int | None) -> str:
    """An amount of nano-units as data writes it: plain decimals with nine places
    ("0.000000123", never "1.23E-7"); "" for none."""
    return "" if nanos is None else format(decimal(nanos), "f")
