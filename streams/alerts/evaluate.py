"""Evaluating the rules, live and over the past (the backtest), with one rule of how a rule
moves (`rule_state.step`) and one reading of its figure (`figures.read`).

Live: the `alerts.evaluate` job of every long-lived process (`streams/run/periodic.py`) runs
`tick` each `alert_tick_s`; a process takes a due rule by moving its state row's `due_at` on
with a conditional UPDATE (the loser of a race updates nothing), so each rule is evaluated by
exactly one process per tick, whichever servers and workers run. The job runs in the serving
process's child (`where=APART`, streams/run/apart.py): its Python would hold the GIL the relay's
loop waits for. What it sends goes through `notices.send`, keyed per (rule,
firing, kind), so even a repeated evaluation sends nothing twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time

from django.db import transaction

from streams.alerts import figures, notices
from streams.alerts.rule_state import (
    BASELINE_S,
    FIRED,
    RECOVERED,
    REMINDED,
    State,
    Status,
    breached,
    step,
)
from streams.core import conf
from streams.core.lifecycle import RUNNER_ID
from streams.models import Firing, Rule, RuleState
from streams.run import periodic
from streams.stats.sql import shared_figures

RECENT = 30  # values a state row keeps for a notification's series
FIRING_VALUES = 200  # values a firing keeps
MAX_BACKTEST_TICKS = 336  # 7 days at 30 minutes
BACKTEST_DAYS = 7


def utcnow():
    return dt.datetime.now(dt.UTC)


def observe(rule, end):
    """(the reading at `end`, whether it meets the rule's condition): what one evaluation sees,
    the live one and the backtest alike."""
    reading = figures.read(rule, end)
    baseline = None
    if rule.comparison == Rule.Comparison.CHANGED and rule.baseline:
        baseline = figures.read(rule, end, shift_s=BASELINE_S[rule.baseline])
    return reading, breached(rule, reading, baseline)


# ---------------------------------------------------------------------------------------------
# Live


@periodic.job("alerts.evaluate", 1.0, where=periodic.APART)
def evaluate_due():
    """The job: evaluate the rules that are due (each process looks every second, two indexed
    reads when nothing is; a rule is due every `alert_tick_s`)."""
    tick(utcnow())


def tick(now, limit=5000, clock=time.monotonic):
    """Claim and evaluate the rules due at `now`, for at most one tick's length
    (`alert_tick_s`, by `clock`); returns how many this process evaluated.

    A tick never runs into the next: the rules it has not reached by then stay due, unclaimed,
    for the next tick of any process, read at that tick's moment. Without the bound, a tick
    longer than the period (1,000 rules over 1M streams on PostgreSQL took 82 s against 60)
    evaluated its last rules at a moment a minute old, and each came due again as soon as it
    was done: ticks back to back, each one later than the last. With it, a rule is evaluated
    less often when the rules cost more than a tick, never at a stale moment or twice."""
    _add_missing_states(now)
    done = 0
    ends = clock() + conf.get().alert_tick_s
    # (what every reading of this moment shares, such as how many streams the instance has,
    # is read once for the tick)
    with shared_figures():
        for rule_id in due_rules(now, limit):
            if clock() >= ends:
                break  # the rest stays due, for the next tick
            if not claim(rule_id, now):
                continue  # another process took it this tick
            rule = Rule.objects.select_related("project", "score_type").get(pk=rule_id)
            evaluate(rule, now)
            done += 1
    return done


def due_rules(now, limit=5000):
    """The ids of the enabled rules due at `now`, oldest first (every process may read the same
    ones: `claim` decides which evaluates each)."""
    # the due-state index: the few due rows, oldest first
    return list(
        RuleState.objects.filter(due_at__lte=now, rule__enabled=True)
        .order_by("due_at")
        .values_list("rule_id", flat=True)[:limit]
    )


def claim(rule_id, now):
    """Whether this process takes `rule_id` for the tick at `now`: its state row's `due_at`
    moved on by one tick, if it still was due (the loser of a race updates nothing)."""
    period = dt.timedelta(seconds=conf.get().alert_tick_s)
    won = RuleState.objects.filter(rule_id=rule_id, due_at__lte=now).update(
        due_at=now + period, claimed_by=RUNNER_ID[:100]
    )
    return bool(won)


def _add_missing_states(now):
    missing = Rule.objects.filter(state__isnull=True).values_list("pk", "project_id")
    RuleState.objects.bulk_create(
        [RuleState(rule_id=pk, project_id=project, due_at=now) for pk, project in missing],
        ignore_conflicts=True,  # (another process made it meanwhile)
    )


def evaluate(rule, now):
    """Evaluate `rule` at `now`: read, step, store, and send what the step asks for."""
    reading, hit = observe(rule, now)
    with transaction.atomic():
        state = RuleState.objects.select_for_update().get(rule=rule)
        if state.evaluated_at is not None and state.evaluated_at >= now:
            # A later tick's evaluation got here first: this one read the window while that
            # tick came due and was claimed by another process (a slow read on a loaded
            # machine), and stepping from that newer state with this older reading would undo
            # it (recovered, then fired again on the stale figure, then recovered: each notice
            # twice). The newer one stands.
            return Status(state.state, state.since, None)
        firing = rule.firings.filter(ended_at__isnull=True).order_by("-started_at").first()
        before = Status(
            state.state, state.since, firing.notified_at if firing is not None else None
        )
        after, send = step(rule, before, hit, now)
        point = [int(now.timestamp()), reading.value]
        state.state, state.since = after.state, after.since
        state.value, state.streams, state.evaluated_at = reading.value, reading.streams, now
        state.recent = [*state.recent, point][-RECENT:]
        state.save()
        if send == FIRED:
            firing = Firing.objects.create(
                rule=rule, project_id=rule.project_id, started_at=now, values=[point]
            )
        elif firing is not None:
            firing.values = [*firing.values, point][-FIRING_VALUES:]
        if firing is None:
            return after
        if after.state != State.FIRING:
            firing.ended_at = now
        else:
            firing.peak = _worse(rule, firing.peak, reading.value)
        if send is not None:
            firing.silenced = notices.silenced(rule, now)
            if not firing.silenced:
                firing.notified += 1
                firing.notified_at = now
                notices.send(rule, firing, send, state, reading)
            elif send != RECOVERED:
                firing.notified_at = now  # (a reminder's clock runs while muted)
        firing.save()
    return after


def _worse(rule, a, b):
    if a is None or b is None:
        return b if a is None else a
    below = rule.comparison in (Rule.Comparison.LT, Rule.Comparison.LE)
    return min(a, b) if below else max(a, b)


# ---------------------------------------------------------------------------------------------
# The backtest


@dataclasses.dataclass(frozen=True)
class Backtest:
    """What the rule would have done over [start, end]: the times it would have fired at,
    evaluated every `tick_s` from `start`."""

    start: dt.datetime
    end: dt.datetime
    tick_s: int
    fired: list

    @property
    def count(self):
        return len(self.fired)


def backtest_ticks(start, end, tick_s):
    t = start
    while t <= end:
        yield t
        t += dt.timedelta(seconds=tick_s)


def backtest(rule, end, *, days=BACKTEST_DAYS, tick_s=None):
    """Run the live rule (`observe`, `step`) over the ticks of the last `days` before `end`:
    every `tick_s` seconds (default: the live tick, coarsened to at most MAX_BACKTEST_TICKS)."""
    span_s = days * 86400
    if tick_s is None:
        tick_s = max(int(conf.get().alert_tick_s), math.ceil(span_s / MAX_BACKTEST_TICKS))
    start = end - dt.timedelta(seconds=span_s)
    status, fired = Status(), []
    for t in backtest_ticks(start, end, tick_s):
        _reading, hit = observe(rule, t)
        status, send = step(rule, status, hit, t)
        if send == FIRED:
            fired.append(t)
    return Backtest(start, end, tick_s, fired)


__all__ = ["FIRED", "RECOVERED", "REMINDED", "backtest", "evaluate", "tick"]
