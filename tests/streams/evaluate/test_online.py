"""Online rules (streams/evaluate/online.py): each stream looked at once across processes, a
running stream holding the cursor, the filter and the sample, the hourly budget and the spend
cap, which stop it cleanly and say so."""

import pytest

from streams import evaluate
from streams.evaluate import judge, kinds, online
from streams.models import Evaluation, OnlineRule, Score, Stream
from streams.observe import telemetry
from streams.store import scores

pytestmark = pytest.mark.django_db

Kind = kinds.Kind


def finished(project, user, output="ok", **fields):
    fields.setdefault("status", Stream.Status.COMPLETED)
    return Stream.objects.create(user=user, project=project, output_text=output, **fields)


@pytest.fixture
def not_empty(project):
    return evaluate.save(project, name="not-empty", kind=Kind.LENGTH, config={"min": 1})


def judged_ids():
    return sorted(Evaluation.objects.values_list("stream_id", flat=True))


def test_only_streams_after_the_rule_are_judged_each_once(project, user, not_empty):
    before = finished(project, user)
    rule = online.create(project, user=user, name="all", evaluators=[not_empty])
    streams = [finished(project, user) for _ in range(3)]
    online.run_rules()
    online.run_rules()
    assert judged_ids() == [s.pk for s in streams] and before.pk not in judged_ids()
    assert Score.objects.filter(key="not-empty@v1", source="evaluator").count() == 3
    rule.refresh_from_db()
    assert (rule.judged, rule.cursor) == (3, streams[-1].pk)


def test_two_processes_claim_a_batch_once(project, user, not_empty):
    rule = online.create(project, user=user, name="all", evaluators=[not_empty])
    ids = [finished(project, user).pk for _ in range(3)]
    # both read the rule before either moved its cursor
    first, second = OnlineRule.objects.get(pk=rule.pk), OnlineRule.objects.get(pk=rule.pk)
    assert online.claim(first) == ids
    assert online.claim(second) == []


def test_a_running_stream_holds_the_cursor_until_it_finishes(project, user, not_empty):
    online.create(project, user=user, name="all", evaluators=[not_empty])
    done = finished(project, user)
    running = finished(project, user, status=Stream.Status.STREAMING)
    after = finished(project, user)
    online.run_rules()
    assert judged_ids() == [done.pk]
    Stream.objects.filter(pk=running.pk).update(status=Stream.Status.COMPLETED)
    online.run_rules()
    assert judged_ids() == [done.pk, running.pk, after.pk]


def test_the_filter_and_the_sample(project, user, not_empty):
    online.create(project, user=user, name="f", evaluators=[not_empty], model="m-a", tag="checkout")
    yes = finished(project, user, resolved_model="m-a", tags=["checkout"])
    finished(project, user, resolved_model="m-b", tags=["checkout"])
    finished(project, user, resolved_model="m-a", tags=["other"])
    a_judges = finished(
        project,
        user,
        resolved_model="m-a",
        tags=["checkout"],
        request_body={"metadata": {judge.JUDGED_KEY: str(yes.pk)}},
    )
    online.run_rules()
    assert judged_ids() == [yes.pk] and a_judges.pk not in judged_ids()


def test_a_sample_is_about_its_rate_and_the_same_for_every_process(project, user, not_empty):
    rule = online.create(project, user=user, name="half", evaluators=[not_empty], sample_rate=0.5)
    picked = [online.sampled(rule, i) for i in range(2000)]
    assert 900 < sum(picked) < 1100
    assert picked == [online.sampled(rule, i) for i in range(2000)]


def test_the_hourly_budget_passes_streams_and_says_so(project, user, not_empty):
    rule = online.create(project, user=user, name="b", evaluators=[not_empty], per_hour=2)
    ids = [finished(project, user).pk for _ in range(5)]
    online.run_rules()
    assert judged_ids() == ids[:2]
    rule.refresh_from_db()
    assert (rule.judged, rule.over_budget) == (2, 3) and rule.over_budget_at is not None
    assert rule.stopped_reason == ""  # (it goes on next hour)


def test_its_scores_count_like_any_other(
    project, user, not_empty, django_capture_on_commit_callbacks
):
    counter = telemetry.SCORES.labels("not-empty", "categorical", "evaluator", "true")
    before = counter._value.get()
    online.create(project, user=user, name="all", evaluators=[not_empty])
    stream = finished(project, user)
    with django_capture_on_commit_callbacks(execute=True):
        online.run_rules()
    assert counter._value.get() == before + 1  # Prometheus
    assert scores.summaries([stream.pk])[stream.pk].positive == 1  # the list's column
    assert scores.filtered(Stream.objects.all(), "positive").get() == stream  # its filter
