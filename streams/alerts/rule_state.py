"""How a rule moves between ok, pending and firing, one evaluation at a time: a pure function
(`step`), the one rule of it, which the live evaluation (`evaluate.py`) and the backtest both
run, so what the backtest says is what the live evaluation would have done.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

from streams.models import Rule, RuleState

State = RuleState.State
Comparison = Rule.Comparison

# what step() asks the caller to send: the start of a firing, a reminder, its recovery
FIRED = "fired"
REMINDED = "reminded"
RECOVERED = "recovered"

BASELINE_S = {Rule.Baseline.DAY: 86400, Rule.Baseline.WEEK: 7 * 86400}


@dataclasses.dataclass(frozen=True)
class Status:
    """Where a rule stands: its state, since when, and (firing) when it last notified."""

    state: str = State.OK
    since: dt.datetime | None = None
    notified_at: dt.datetime | None = None


def breached(rule, reading, baseline=None):
    """Whether the reading (and, for a change rule, its baseline reading) meets the rule's
    condition; too few streams, or nothing to measure, never do."""
    if reading.value is None or reading.streams < rule.min_streams:
        return False
    value, threshold = reading.value, rule.threshold
    if rule.comparison == Comparison.CHANGED:
        if baseline is None or baseline.value is None or not baseline.value:
            return False
        return abs(value - baseline.value) / abs(baseline.value) * 100.0 > threshold
    return {
        Comparison.GT: value > threshold,
        Comparison.LT: value < threshold,
        Comparison.GE: value >= threshold,
        Comparison.LE: value <= threshold,
    }[Comparison(rule.comparison)]


def step(rule, status, is_breached, now):
    """(the new Status, what to send: FIRED, REMINDED, RECOVERED or None)."""
    state = status.state
    if not is_breached:
        if state == State.FIRING:
            return Status(State.OK, now), RECOVERED if rule.notify_recovery else None
        if state == State.PENDING:
            return Status(State.OK, now), None
        return status if status.since else Status(State.OK, now), None
    if state == State.FIRING:
        renotify = rule.renotify_s and status.notified_at
        if renotify and (now - status.notified_at).total_seconds() >= rule.renotify_s:
            return dataclasses.replace(status, notified_at=now), REMINDED
        return status, None
    since = status.since if state == State.PENDING else now
    if (now - since).total_seconds() >= rule.for_s:
        return Status(State.FIRING, now, now), FIRED
    return Status(State.PENDING, since), None


def finite(value):
    return value is not None and math.isfinite(value)
