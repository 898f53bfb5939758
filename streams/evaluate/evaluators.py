"""Evaluators made and versioned, and applied to a stream: the one way their scores are written.

A score is written through `streams.store.scores.give` (source `evaluator`, key
`<name>@v<version>`, no author), so the rollups, the list, the latency page and Prometheus count
it as any other score; every application is kept as an `Evaluation` (the score, or why none).
"""

from __future__ import annotations

import dataclasses

from django.db import transaction
from django.utils.translation import gettext

from streams.access import projects, rules
from streams.evaluate import judge, kinds
from streams.models import Evaluation, Evaluator, Score, ScoreType, Stream
from streams.store import known_secrets, scores

Kind = Evaluator.Kind


@dataclasses.dataclass(frozen=True)
class Result:
    """What `apply` did: `score` written (with its value and label), or `reason` why none was;
    `reason` also says why a written score is what it is. `judge_stream`: the judge's own
    recorded stream (LLM-as-judge)."""

    evaluator: Evaluator
    stream_id: int
    score: Score | None
    reason: str
    judge_stream: Stream | None = None
    evaluation: Evaluation | None = None

    @property
    def written(self):
        return self.score is not None

    @property
    def value(self):
        return None if self.score is None else self.score.value

    @property
    def label(self):
        return "" if self.score is None else self.score.label

    @property
    def key(self):
        return self.evaluator.key


class Invalid(ValueError):
    def __init__(self, field, message):
        super().__init__(message)
        self.field, self.message = field, message


RESERVED_NAMES = (scores.THUMBS,)


def save(project, *, name, kind, config, user=None, evaluator=None) -> Evaluator:
    """A new evaluator in `project`, or `evaluator`'s next version with this config (a change
    of kind or config only: the same again keeps its version). Invalid with a field otherwise."""
    if kind not in Kind.values:
        raise Invalid("kind", gettext("No such kind of evaluator."))
    try:
        config = judge.clean(config) if kind == Kind.JUDGE else kinds.clean(kind, config)
    except kinds.ConfigError as exc:
        raise Invalid(exc.field, exc.message) from None
    with transaction.atomic():
        if evaluator is None:
            if name in RESERVED_NAMES or Evaluator.objects.filter(project=project, name=name):
                raise Invalid("name", gettext("An evaluator with this name exists."))
            taken = ScoreType.objects.filter(name=name, project=project).exclude(
                evaluators__isnull=False
            )
            if taken.exists() or ScoreType.objects.filter(name=name, project=None).exists():
                raise Invalid("name", gettext("A score type with this name exists."))
            evaluator = Evaluator(project=project, name=name, created_by=user)
        else:
            evaluator = Evaluator.objects.select_for_update().get(pk=evaluator.pk)
            if evaluator.kind == kind and evaluator.config == config:
                return evaluator
            evaluator.version += 1
        evaluator.kind, evaluator.config = kind, config
        evaluator.score_type = _score_type(evaluator)
        evaluator.save()
    return evaluator


def _score_type(evaluator):
    """The evaluator's own score type (named as it is), kept in step with its config: a judge
    rescaled from 1–5 to 1–10 counts its new scores on the new scale."""
    fields = kinds.score_type_fields(evaluator.kind, evaluator.config)
    fields["description"] = gettext("Written by the evaluator %(name)s.") % {"name": evaluator.name}
    kind, _ = ScoreType.objects.update_or_create(
        project=evaluator.project, name=evaluator.name, defaults=fields
    )
    return kind


def redacted(text):
    """`text` as the egress gate lets it out (the keys other processes sealed a moment ago
    included)."""
    if not text:
        return text or ""
    r = known_secrets.fresh_rules()
    return r.text(text) if r else text


def subject_of(stream, expected=None) -> kinds.Subject:
    """What an evaluator reads of `stream`: redacted, and cut to what a check reads."""
    output = stream.output_text or stream.final_text or ""
    return kinds.Subject(
        input=redacted(stream.prompt[: kinds.MAX_OUTPUT_CHARS]),
        output=redacted(output[: kinds.MAX_OUTPUT_CHARS]),
        expected=None if expected is None else redacted(str(expected)[: kinds.MAX_OUTPUT_CHARS]),
        ttft_ms=stream.ttft_ms,
        duration_ms=stream.duration_ms,
        finished=stream.status not in Stream.ACTIVE_STATUSES,
    )


def apply(evaluator, *, stream, expected=None, rule=None, run_as=None, for_run=False) -> Result:
    """Score `stream` (a Stream or its id) with `evaluator` as it is now: the score written
    under `<name>@v<version>` (replacing this version's earlier one), or the reason none was.
    Sync; an LLM judge records its own stream here and waits for it (bounded). `rule`: the
    online rule that asked (kept on the Evaluation); `run_as`: whom a judge's stream is started
    as (by default the evaluator's author); `for_run`: an experiment's run asks, whose
    concurrency bounds its judges (streams/experiments/runs.py), not the per-user limit."""
    if not isinstance(stream, Stream):
        stream = Stream.objects.get(pk=stream)
    subject = subject_of(stream, expected)
    judge_stream, cost = None, None
    if evaluator.kind == Kind.JUDGE:
        verdict, judge_stream = judge.run(evaluator, stream, subject, user=run_as, for_run=for_run)
        cost = getattr(judge_stream, "cost_nanos", None)
    else:
        verdict = kinds.check(evaluator.kind, evaluator.config, subject)
    reason = verdict.reason[: Evaluation._meta.get_field("reason").max_length]
    score = None
    if verdict.scored:
        try:
            score = scores.give(
                stream.pk,
                author=None,
                of_type=evaluator.score_type,
                value=verdict.value,
                label=verdict.label or None,
                comment=reason,
                source=Score.Source.EVALUATOR,
                key=evaluator.key,
            )
        except scores.Invalid as exc:
            reason = gettext("Not a score of %(type)s: %(error)s") % {
                "type": evaluator.name,
                "error": exc.message,
            }
    evaluation = Evaluation.objects.create(
        project_id=evaluator.project_id,
        evaluator=evaluator,
        version=evaluator.version,
        stream=stream,
        rule=rule,
        outcome=Evaluation.Outcome.SCORED if score else Evaluation.Outcome.NO_SCORE,
        score=score,
        value=score.value if score else None,
        label=score.label if score else "",
        reason=reason,
        judge_stream=judge_stream,
        cost_nanos=cost,
    )
    return Result(
        evaluator=evaluator,
        stream_id=stream.pk,
        score=score,
        reason=reason,
        judge_stream=judge_stream,
        evaluation=evaluation,
    )


# ---------------------------------------------------------------------------------------------
# Reading (the pages and the API): what a user may see, on the one rule


def visible(user, project=None):
    """The evaluators `user` may read: of `project` when given, else of all their projects."""
    return projects.in_project(Evaluator.objects.select_related("score_type"), user, project)


def delete(evaluator):
    """Delete `evaluator`: experiments and online rules no longer apply it, and the records of
    its applications (`Evaluation`) go with it. Its scores stay, with their score type: they
    are a stream's scores like any other, counted in the rollups and Prometheus, and a finished
    run's results and comparisons were made from them (a finished result does not change);
    the type, and so the name, stays taken while they exist (a new evaluator of that name
    would mix its scores with these), as a score type with scores stays on the project's
    page."""
    evaluator.delete()


def visible_one(user, evaluator_id):
    """The evaluator `evaluator_id` if `user` may read it (None: a 404, as for a stream)."""
    return visible(user).filter(pk=evaluator_id).first()


def recent(evaluator, limit=50):
    """Its latest applications, newest first, with their streams (for its page)."""
    return list(
        Evaluation.objects.filter(evaluator=evaluator)
        .select_related("stream", "judge_stream", "rule")
        .order_by("-created_at", "-pk")[:limit]
    )


def stream_to_try(user, evaluator, stream_id):
    """The stream `stream_id` that `user` may see in `evaluator`'s project, or None."""
    return rules.streams_for(user, evaluator.project_id).filter(pk=stream_id).first()
