"""Evaluators: versions, the deterministic kinds, scores written under `<name>@v<version>`
(streams/evaluate/evaluators.py, kinds.py)."""

import time

import pytest

from streams import evaluate
from streams.evaluate import kinds
from streams.models import Evaluation, Score, Stream

pytestmark = pytest.mark.django_db

Kind = kinds.Kind


def finished(project, user, output="", **fields):
    fields.setdefault("status", Stream.Status.COMPLETED)
    return Stream.objects.create(
        user=user, project=project, output_text=output, prompt=fields.pop("prompt", "hi"), **fields
    )


def test_a_pass_writes_a_score_under_the_evaluators_key(project, user):
    ev = evaluate.save(project, name="has-paris", kind=Kind.CONTAINS, config={"text": "Paris"})
    stream = finished(project, user, "The capital is paris.")
    result = evaluate.apply(ev, stream=stream)
    assert result.written and result.value == 1.0 and result.label == "pass"
    score = Score.objects.get(stream=stream)
    assert (score.key, score.source, score.author) == ("has-paris@v1", "evaluator", None)
    assert score.score_type.name == "has-paris" and score.score_type.project == project
    assert Evaluation.objects.get(stream=stream).outcome == "scored"


def test_an_edit_makes_a_new_version_and_keeps_the_old_score(project, user):
    ev = evaluate.save(project, name="exact", kind=Kind.EXACT, config={})
    stream = finished(project, user, "42")
    assert evaluate.apply(ev, stream=stream, expected="42").value == 1.0
    same = evaluate.save(project, name="exact", kind=Kind.EXACT, config={}, evaluator=ev)
    assert same.version == 1
    ev = evaluate.save(project, name="exact", kind=Kind.EXACT, config={"text": "43"}, evaluator=ev)
    assert ev.version == 2
    assert evaluate.apply(ev, stream=stream).value == 0.0
    keys = dict(Score.objects.filter(stream=stream).values_list("key", "value"))
    assert keys == {"exact@v1": 1.0, "exact@v2": 0.0}


def test_no_expected_output_writes_no_score_and_says_why(project, user):
    ev = evaluate.save(project, name="exact", kind=Kind.EXACT, config={})
    result = evaluate.apply(ev, stream=finished(project, user, "x"))
    assert not result.written and "expected" in result.reason
    assert not Score.objects.exists()
    assert Evaluation.objects.get().outcome == "no_score"


def test_a_catastrophic_pattern_is_stopped(project, user):
    ev = evaluate.save(project, name="re", kind=Kind.REGEX, config={"pattern": r"(x+x+)+y"})
    stream = finished(project, user, "x" * 5000)
    started = time.monotonic()
    result = evaluate.apply(ev, stream=stream)
    # unbounded, this runs for hours (2^5000 ways to split the x's)
    assert time.monotonic() - started < 30
    assert not result.written and "stopped" in result.reason


def test_a_catastrophic_pattern_in_a_json_schema_is_stopped(project, user):
    schema = {"type": "string", "pattern": r"(x+x+)+y"}
    ev = evaluate.save(project, name="s", kind=Kind.JSON_SCHEMA, config={"schema": schema})
    started = time.monotonic()
    result = evaluate.apply(ev, stream=finished(project, user, '"' + "x" * 5000 + '"'))
    assert time.monotonic() - started < 30
    assert not result.written and "stopped" in result.reason
    ok = evaluate.apply(ev, stream=finished(project, user, '"xxy"'))
    assert ok.value == 1.0


@pytest.mark.parametrize(
    ("kind", "config", "output", "value"),
    [
        (Kind.JSON_VALID, {}, '{"a": 1}', 1.0),
        (Kind.JSON_VALID, {}, '{"a": 1', 0.0),
        (Kind.JSON_VALID, {}, '```json\n{"a": 1}\n```', 1.0),
        (Kind.REGEX, {"pattern": r"^\d+$"}, "123", 1.0),
        (Kind.REGEX, {"pattern": r"^\d+$"}, "12a", 0.0),
        (Kind.LENGTH, {"min": 2, "max": 3, "unit": "words"}, "one two", 1.0),
        (Kind.LENGTH, {"max": 3}, "four", 0.0),
        (Kind.REFUSAL, {}, "I'm sorry, but I can't help with that.", 0.0),
        (Kind.REFUSAL, {}, "Here is the answer.", 1.0),
        (Kind.EXACT, {"text": "Yes"}, " yes ", 0.0),
        (Kind.EXACT, {"text": "Yes", "case_sensitive": False}, " yes ", 1.0),
    ],
)
def test_each_kind(project, user, kind, config, output, value):
    ev = evaluate.save(project, name="k", kind=kind, config=config)
    assert evaluate.apply(ev, stream=finished(project, user, output)).value == value


def test_json_schema(project, user):
    schema = {
        "type": "object",
        "required": ["answer"],
        "properties": {"answer": {"type": "integer"}},
    }
    ev = evaluate.save(project, name="schema", kind=Kind.JSON_SCHEMA, config={"schema": schema})
    assert evaluate.apply(ev, stream=finished(project, user, '{"answer": 4}')).value == 1.0
    bad = evaluate.apply(ev, stream=finished(project, user, '{"answer": "four"}'))
    assert bad.value == 0.0 and "answer" in bad.reason


def test_timing_bounds(project, user):
    ev = evaluate.save(project, name="fast", kind=Kind.TTFT, config={"max_ms": 500})
    assert evaluate.apply(ev, stream=finished(project, user, ttft_ms=120.0)).value == 1.0
    assert evaluate.apply(ev, stream=finished(project, user, ttft_ms=900.0)).value == 0.0
    none = evaluate.apply(ev, stream=finished(project, user))
    assert not none.written and "not measured" in none.reason


@pytest.mark.parametrize(
    ("kind", "config", "field"),
    [
        (Kind.REGEX, {"pattern": "("}, "pattern"),
        (Kind.REGEX, {"pattern": "a" * 2000}, "pattern"),
        (Kind.JSON_SCHEMA, {"schema": {"type": "nope"}}, "schema"),
        (Kind.LENGTH, {}, "min"),
        (Kind.TTFT, {"max_ms": -1}, "max_ms"),
        ("nope", {}, "kind"),
    ],
)
def test_bad_configs_are_refused_with_their_field(project, kind, config, field):
    with pytest.raises(evaluate.evaluators.Invalid) as caught:
        evaluate.save(project, name="bad", kind=kind, config=config)
    assert caught.value.field == field


def test_a_name_of_a_score_type_is_refused(project):
    with pytest.raises(evaluate.evaluators.Invalid) as caught:
        evaluate.save(project, name="thumbs", kind=Kind.JSON_VALID, config={})
    assert caught.value.field == "name"
