"""LLM-as-judge against the simulator's judge scenarios: the judge's own recorded stream, its
score read as a number or a category, no score (and why) for nonsense, a judge that hangs or
answers 1 MB bounded, and no secret in a judge's prompt, a score or a reason
(streams/evaluate/judge.py)."""

import time

import pytest

from streams import evaluate
from streams.evaluate import judge, kinds, online
from streams.models import Evaluation, OnlineRule, Score, Stream

pytestmark = pytest.mark.django_db(transaction=True)

Kind = kinds.Kind
KEY = "sk-JUDGED-" + "9f8e7d6c5b4a3f2e"
FAST = {"scenario": "judge", "time_scale": "0"}


def judged(project, user, output="Paris.", prompt="Capital of France?"):
    return Stream.objects.create(
        user=user,
        project=project,
        status=Stream.Status.COMPLETED,
        prompt=prompt,
        output_text=output,
    )


def a_judge(project, user, name="grader", **config):
    config.setdefault("model", "gpt-oss-20b")
    config.setdefault("metadata", FAST)
    return evaluate.save(project, name=name, kind=Kind.JUDGE, config=config, user=user)


def test_a_judge_scores_and_its_call_is_a_recorded_stream(upstream, project, user):
    ev = a_judge(project, user, metadata={**FAST, "judge_score": "4"})
    stream = judged(project, user)
    result = evaluate.apply(ev, stream=stream, expected="Paris")
    assert result.written, result.reason
    assert (result.value, result.score.key) == (4.0, "grader@v1")
    assert result.reason == "Judge: the answer addresses the question as asked."
    call = result.judge_stream
    assert call.status == Stream.Status.COMPLETED and call.tags == ["judge"]
    assert call.project == project and call.user == user
    assert call.request_body["metadata"][judge.JUDGED_KEY] == str(stream.pk)
    # the prompt is the template with the judged stream's texts in it
    assert "Capital of France?" in call.prompt and "Paris." in call.prompt
    assert Evaluation.objects.get(stream=stream).judge_stream == call


def test_a_category(upstream, project, user):
    categories = [{"label": "wrong", "value": 0}, {"label": "right", "value": 1}]
    ev = a_judge(project, user, categories=categories, metadata={**FAST, "judge_label": "Right"})
    result = evaluate.apply(ev, stream=judged(project, user))
    assert (result.value, result.label) == (1.0, "right")
    assert ev.score_type.kind == "categorical"


def test_nonsense_writes_no_score_and_says_why(upstream, project, user):
    ev = a_judge(project, user, metadata={**FAST, "scenario": "judge_nonsense"})
    result = evaluate.apply(ev, stream=judged(project, user))
    assert not result.written
    assert result.reason.startswith("The judge's answer holds no score ('Score: N'): “I find")
    assert result.judge_stream.status == Stream.Status.COMPLETED
    assert not Score.objects.exists()


def test_a_judge_that_hangs_is_cancelled_at_its_timeout(upstream, project, user):
    stall = {"scenario": "stall", "stall_s": "60", "time_scale": "0"}
    ev = a_judge(project, user, metadata=stall, timeout_s=2)
    started = time.monotonic()
    result = evaluate.apply(ev, stream=judged(project, user))
    assert time.monotonic() - started < 30  # (the judge would answer after 60 s)
    assert not result.written
    assert result.reason == "The judge did not answer within 2 s: cancelled."
    assert result.judge_stream.status == Stream.Status.CANCELLED


def test_a_judge_answering_a_megabyte_is_read_bounded(upstream, project, user):
    huge = {"scenario": "huge_delta", "huge_bytes": "1000000", "time_scale": "0"}
    ev = a_judge(project, user, metadata=huge)
    result = evaluate.apply(ev, stream=judged(project, user))
    assert not result.written
    assert "holds no score" in result.reason and len(result.reason) < 300
    assert len(result.judge_stream.output_text) > 1_000_000


def test_no_secret_reaches_a_judges_prompt_a_score_or_a_reason(upstream, settings, project, user):
    settings.UPSTREAM_API_KEY = KEY
    stream = judged(project, user, output=f'{{"answer": "{KEY}"}}', prompt=f"echo {KEY}")
    ev = a_judge(project, user, metadata={**FAST, "judge_score": "2"})
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    checks = [
        evaluate.apply(ev, stream=stream, expected=KEY),
        evaluate.apply(
            evaluate.save(project, name="schema", kind=Kind.JSON_SCHEMA, config={"schema": schema}),
            stream=stream,
        ),
        evaluate.apply(
            evaluate.save(project, name="exact", kind=Kind.EXACT, config={}),
            stream=stream,
            expected=KEY,
        ),
    ]
    call = checks[0].judge_stream
    core = KEY[10:-4]
    assert "redacted" in call.prompt.lower()
    for text in [call.prompt, str(call.request_body)] + [r.reason for r in checks]:
        assert core not in text
    assert checks[1].value == 0.0 and "is not of type 'integer'" in checks[1].reason
    for score in Score.objects.all():
        assert core not in score.comment and core not in score.label
    for row in Evaluation.objects.all():
        assert core not in row.reason


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("Score: 4\nReason: fine", 4.0),
        ("**Score:** 3.5", 3.5),
        ("score = 5", 5.0),
        ("2", 2.0),
        ("Score: 9", None),
        ("I think it is good.", None),
        ("Score: four", None),
    ],
)
def test_reading_a_number(answer, value):
    assert judge.parse({"minimum": 1, "maximum": 5}, answer).value == value


def test_an_online_rule_stops_at_its_spend_cap_and_says_so(upstream, project, user):
    project.currency = "USD"  # (the simulator's prices are in dollars)
    project.save()
    ev = a_judge(project, user, metadata={**FAST, "judge_score": "5"})
    rule = online.create(project, user=user, name="capped", evaluators=[ev], spend_cap_nanos=1)
    streams = [judged(project, user) for _ in range(3)]
    online.run_rules()
    rule.refresh_from_db()
    assert rule.stopped_reason == "Its spend cap was reached."
    assert rule.judged == 1 and rule.spent_nanos > 0
    first = Evaluation.objects.get(stream__in=streams)
    assert first.stream == streams[0] and first.cost_nanos == rule.spent_nanos
    online.run_rules()  # stopped: nothing more
    assert Evaluation.objects.filter(stream__in=streams).count() == 1
    # raised and restarted, it judges the rest of the batch it stopped in
    OnlineRule.objects.filter(pk=rule.pk).update(spend_cap_nanos=10**15)
    online.restart(rule)
    online.run_rules()
    judged_streams = Evaluation.objects.filter(stream__in=streams).values_list("stream", flat=True)
    assert sorted(judged_streams) == [s.pk for s in streams]
