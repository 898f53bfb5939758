"""A rule's evaluation over stream rows made here: its figure, ok → pending → firing → ok, the
claim that makes one process evaluate a rule per tick, and the backtest against the live
evaluation over the same history."""

import datetime as dt

import pytest

from streams.alerts import evaluate, figures
from streams.alerts.rule_state import Status, step
from streams.models import Firing, Project, Rule, RuleState
from tests.support.alerts import MIN, NOW, rule, streams


@pytest.fixture
def project(db):
    return Project.objects.create(name="alerting", slug="alerting")


class TestFigures:
    def test_it_reads_the_window_of_the_scope(self, project):
        streams(project, NOW - 5 * MIN, [100, 200, 300, 400])
        streams(project, NOW - 5 * MIN, [9000], model="m-b")
        streams(project, NOW - 30 * MIN, [8000])  # before the window
        r = rule(project, resolved_model="m-a", figure=Rule.Figure.TTFT_P50)
        assert figures.read(r, NOW) == figures.Reading(200.0, 4)
        r.figure = Rule.Figure.DURATION_P95
        assert figures.read(r, NOW).value == 800.0
        r.resolved_model = ""
        r.figure = Rule.Figure.STREAMS_COUNT
        assert figures.read(r, NOW) == figures.Reading(5.0, 5)

    def test_rates_count_their_status(self, project):
        streams(project, NOW - MIN, [100, 100, 100])
        streams(project, NOW - MIN, [None], status="failed")
        r = rule(project, figure=Rule.Figure.ERROR_RATE)
        assert figures.read(r, NOW) == figures.Reading(25.0, 4)
        r.figure = Rule.Figure.STALLED_RATE
        assert figures.read(r, NOW).value == 0.0

    def test_another_projects_streams_are_not_read(self, project):
        other = Project.objects.create(name="other", slug="other")
        streams(other, NOW - MIN, [5000] * 5)
        assert figures.read(rule(project), NOW) == figures.Reading(None, 0)


class TestStep:
    def test_it_waits_for_the_condition_to_hold(self):
        r = Rule(for_s=120, renotify_s=0, notify_recovery=True)
        s, send = step(r, Status(), True, NOW)
        assert (s.state, send) == ("pending", None)
        s, send = step(r, s, True, NOW + MIN)
        assert (s.state, send) == ("pending", None)
        s, send = step(r, s, True, NOW + 2 * MIN)
        assert (s.state, send) == ("firing", "fired")
        s, send = step(r, s, False, NOW + 3 * MIN)
        assert (s.state, send) == ("ok", "recovered")

    def test_it_reminds_while_firing(self):
        r = Rule(for_s=0, renotify_s=600, notify_recovery=False)
        s, send = step(r, Status(), True, NOW)
        assert send == "fired"
        assert step(r, s, True, NOW + 5 * MIN)[1] is None
        s, send = step(r, s, True, NOW + 10 * MIN)
        assert send == "reminded" and s.notified_at == NOW + 10 * MIN
        assert step(r, s, False, NOW + 11 * MIN)[1] is None  # no recovery notices asked for


class TestLive:
    def test_it_fires_and_recovers(self, project):
        r = rule(project)
        streams(project, NOW - 5 * MIN, [300, 400, 500])
        assert evaluate.tick(NOW) == 1
        assert RuleState.objects.get(rule=r).state == "ok"
        streams(project, NOW + 30 * dt.timedelta(seconds=1), [3000, 3100, 3200])
        assert evaluate.tick(NOW + MIN) == 1
        state = RuleState.objects.get(rule=r)
        assert (state.state, state.value, state.streams) == ("firing", 3200.0, 6)
        firing = Firing.objects.get(rule=r)
        assert firing.started_at == NOW + MIN and firing.ended_at is None
        # the slow streams leave the window
        assert evaluate.tick(NOW + 20 * MIN) == 1
        firing.refresh_from_db()
        assert firing.ended_at == NOW + 20 * MIN
        assert RuleState.objects.get(rule=r).state == "ok"

    def test_each_rule_is_evaluated_once_per_tick(self, project):
        rule(project)
        rule(project, name="second")
        assert evaluate.tick(NOW) == 2
        # a second process at the same tick, and one a little later, find nothing due
        assert evaluate.tick(NOW) == 0
        assert evaluate.tick(NOW + 30 * dt.timedelta(seconds=1)) == 0
        assert evaluate.tick(NOW + MIN) == 2

    def test_a_tick_ends_by_the_next_and_leaves_the_rest_due(self, project):
        """A tick that runs for its whole period stops claiming: the rules it did not reach
        stay due, unclaimed, and the next tick evaluates them at its own moment."""
        rules = [rule(project, name=f"r{i}") for i in range(5)]
        period = evaluate.conf.get().alert_tick_s
        readings = iter(range(10))  # (a clock that moves a third of a period each time it is read)

        def clock():
            return next(readings) * period / 3

        assert evaluate.tick(NOW, clock=clock) == 2  # (the tick began at 0; it ends at 3/3)
        states = RuleState.objects.filter(rule__in=rules).order_by("due_at")
        due = [s.rule_id for s in states if s.due_at <= NOW]
        assert len(due) == 3 and all(s.evaluated_at is None for s in states if s.rule_id in due)
        later = NOW + dt.timedelta(seconds=5)
        assert evaluate.tick(later) == 3  # (the real clock: a quick tick)
        evaluated = {s.rule_id: s.evaluated_at for s in RuleState.objects.filter(rule__in=rules)}
        assert {evaluated[pk] for pk in due} == {later}
        assert evaluate.tick(later) == 0  # (each once)

    def test_two_processes_that_saw_a_rule_due_evaluate_it_once(self, project):
        """The race the due list cannot settle: both read it before either claims."""
        r = rule(project)
        evaluate.tick(NOW - 2 * MIN)  # (its state row, due again at NOW - MIN)
        assert evaluate.due_rules(NOW) == evaluate.due_rules(NOW) == [r.pk]
        assert evaluate.claim(r.pk, NOW) is True
        assert evaluate.claim(r.pk, NOW + dt.timedelta(seconds=1)) is False

    def test_an_evaluation_that_a_later_one_overtook_changes_nothing(self, project):
        """One process reads the window at a tick and is slow; the next tick comes due, another
        process claims it and stores its evaluation first. The slow one's older reading must
        not step the state on from the newer one (it fired again on a stale figure after the
        recovery: each notice twice, seen once in a loaded CI)."""
        r = rule(project)
        streams(project, NOW - 5 * MIN, [3000, 3100, 3200])
        evaluate.tick(NOW - 2 * MIN)
        assert RuleState.objects.get(rule=r).state == "firing"
        later = NOW + 20 * MIN  # (the slow streams have left the window: it recovers)
        evaluate.evaluate(r, later)
        assert RuleState.objects.get(rule=r).state == "ok"
        evaluate.evaluate(r, NOW)  # (the stale one: its window still holds them)
        state = RuleState.objects.get(rule=r)
        assert (state.state, state.evaluated_at) == ("ok", later)
        assert Firing.objects.filter(rule=r).count() == 1
        assert Firing.objects.get(rule=r).ended_at == later

    def test_a_disabled_rule_is_not_evaluated(self, project):
        rule(project, enabled=False)
        assert evaluate.tick(NOW) == 0

    def test_too_few_streams_never_fire(self, project):
        r = rule(project, min_streams=10)
        streams(project, NOW - MIN, [5000] * 9)
        evaluate.tick(NOW)
        assert RuleState.objects.get(rule=r).state == "ok"

    def test_a_change_against_the_day_before(self, project):
        r = rule(
            project,
            figure=Rule.Figure.TTFT_P50,
            comparison=Rule.Comparison.CHANGED,
            baseline=Rule.Baseline.DAY,
            threshold=50,
        )
        streams(project, NOW - dt.timedelta(days=1) - MIN, [1000] * 3)
        streams(project, NOW - MIN, [1400] * 3)
        evaluate.tick(NOW)
        assert RuleState.objects.get(rule=r).state == "ok"  # +40 %
        streams(project, NOW, [1600] * 5)
        evaluate.tick(NOW + MIN)
        assert RuleState.objects.get(rule=r).state == "firing"  # +60 %


def test_the_backtest_is_the_live_evaluation_over_the_same_history(project):
    """Slow bursts over a week; the live evaluation run at each tick of the backtest fires at
    exactly the times the backtest says (and more than once, or the test would prove little)."""
    r = rule(project, window_s=3600, for_s=3600, min_streams=2)
    start = NOW - dt.timedelta(days=7)
    for hour in range(7 * 24):
        at = start + dt.timedelta(hours=hour, minutes=10)
        slow = hour % 37 in (3, 4, 5, 6)  # bursts of four hours, a few times a week
        streams(project, at, [4000, 4200] if slow else [200, 300])
    tick_s = 1800
    result = evaluate.backtest(r, NOW, tick_s=tick_s)
    assert result.count >= 3
    for t in evaluate.backtest_ticks(result.start, result.end, tick_s):
        RuleState.objects.filter(rule=r).update(due_at=t)
        assert evaluate.tick(t) == 1
    live = list(Firing.objects.filter(rule=r).order_by("started_at").values_list("started_at"))
    assert [t for (t,) in live] == result.fired
