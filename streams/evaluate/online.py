"""Online evaluation: rules that apply evaluators to a sample of a project's newly finished
streams in the background, within a budget (docs/experiments.md, "Online evaluation").

A periodic job (`streams.run.periodic`, every process runs it) moves each rule's cursor over
the project's streams in id order: a process reads a batch after the cursor, up to the first
stream still running (one running for over STUCK_AFTER is passed), and takes it by moving the
cursor with a conditional UPDATE (`cursor = old`): the process whose UPDATE lands judges the
batch, the others read the next one. So each stream is looked at once across processes, and a
stream that finishes late is not passed while it runs.

Of a batch, the streams the rule's filter and sample pick are judged by each of its
evaluators, as long as the budget holds: at most `per_hour` judgements (one evaluator on one
stream) in the last hour, else the stream is passed and counted in `over_budget` (the page
says so); and the judges' spend (their streams' cost, in the project's currency) under
`spend_cap_nanos`, else the rule stops and `stopped_reason` says why until someone edits it.
Two processes judging batches at the same moment may together pass the hourly budget by the
judgements already under way (at most one per process).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_noop

from streams.access import projects
from streams.evaluate import evaluators, judge
from streams.models import Evaluation, OnlineRule, Stream
from streams.run import periodic
from streams.store.lookups import HasTag

log = logging.getLogger(__name__)

EVERY_S = 5
BATCH = 20
# one run of the job stops taking batches after this long (a judge waits for its model)
RUN_FOR_S = 20
# a stream running for longer than this no longer holds a rule's cursor back
STUCK_AFTER = dt.timedelta(hours=1)
HOUR = dt.timedelta(hours=1)

# why a rule stopped by itself (stored in English, shown translated)
SPEND_CAP_REACHED = gettext_noop("Its spend cap was reached.")


def create(project, *, user=None, evaluators=(), **fields) -> OnlineRule:
    """A rule for the streams that finish from now on: its cursor starts at the newest stream."""
    newest = Stream.objects.aggregate(newest=models.Max("pk"))["newest"] or 0
    rule = OnlineRule.objects.create(project=project, created_by=user, cursor=newest, **fields)
    rule.evaluators.set(evaluators)
    return rule


def update(rule, *, evaluators=None, **fields) -> OnlineRule:
    """`rule` changed by someone: it carries on from where its cursor is, a stop cleared (they
    have seen it, and raised the cap or not)."""
    for name, value in fields.items():
        setattr(rule, name, value)
    rule.stopped_reason = ""
    # (only these: the job moves the cursor and the counts meanwhile)
    rule.save(update_fields=[*fields, "stopped_reason"])
    if evaluators is not None:
        rule.evaluators.set(evaluators)
    return rule


def restart(rule):
    """Clear a stop (the spend cap raised): the rule carries on from where its cursor is."""
    OnlineRule.objects.filter(pk=rule.pk).update(stopped_reason="")


@periodic.job("online evaluation", EVERY_S)
def run_rules(now=None):
    """Every enabled rule's next batches, until RUN_FOR_S has passed."""
    started = time.monotonic()
    for rule in OnlineRule.objects.filter(enabled=True, stopped_reason="").order_by("pk"):
        while time.monotonic() - started < RUN_FOR_S:
            rule.refresh_from_db()
            if rule.stopped_reason or not rule.enabled:
                break
            batch = claim(rule, now=now)
            if not batch:
                break
            judge_batch(rule, batch, now=now)


def claim(rule, now=None) -> list[int]:
    """Ids of the streams after `rule`'s cursor that this process takes (the cursor moved past
    them), in order; [] when there are none yet or another process took them first."""
    now = now or timezone.now()
    rows = (
        Stream.objects.filter(project_id=rule.project_id, pk__gt=rule.cursor)
        .order_by("pk")
        .values_list("pk", "status", "created_at")[:BATCH]
    )
    taken = []
    for pk, status, created_at in rows:
        if status in Stream.ACTIVE_STATUSES and created_at > now - STUCK_AFTER:
            break  # (it holds the cursor until it finishes)
        taken.append(pk)
    if not taken:
        return []
    moved = OnlineRule.objects.filter(pk=rule.pk, cursor=rule.cursor).update(cursor=taken[-1])
    return taken if moved else []


def picked(rule, ids):
    """The streams of `ids` that `rule` judges: finished, matching its filter, not a judge's
    own, and in its sample."""
    qs = Stream.objects.filter(pk__in=ids).exclude(status__in=Stream.ACTIVE_STATUSES)
    if rule.model:
        qs = qs.filter(models.Q(requested_model=rule.model) | models.Q(resolved_model=rule.model))
    if rule.tag:
        qs = qs.filter(HasTag(models.F("tags"), rule.tag))
    if rule.source:
        qs = qs.filter(source=rule.source)
    if rule.token_id:
        qs = qs.filter(token_id=rule.token_id)
    return [s for s in qs.order_by("pk") if not _a_judges(s) and sampled(rule, s.pk)]


def _a_judges(stream):
    """Whether `stream` is a judge's call (its metadata says whom it judged): judging it would
    judge judges without end. Read here, not in SQL: PostgreSQL's NOT over a JSON key of a body
    without metadata is NULL, and an `exclude` on it left out every such stream."""
    body = stream.request_body if isinstance(stream.request_body, dict) else {}
    metadata = body.get("metadata")
    return isinstance(metadata, dict) and judge.JUDGED_KEY in metadata


def sampled(rule, stream_id):
    """Whether `stream_id` is in `rule`'s sample: a hash of the two below the rate, so the
    same stream is in or out whichever process asks."""
    if rule.sample_rate >= 1:
        return True
    digest = hashlib.sha256(f"{rule.pk}:{stream_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rule.sample_rate


def judge_batch(rule, ids, now=None):
    now = now or timezone.now()
    chosen = list(rule.evaluators.all())
    if not chosen:
        return
    for stream in picked(rule, ids):
        if _spent(rule):
            # the rest of the batch is judged when the rule is restarted
            OnlineRule.objects.filter(pk=rule.pk, cursor=ids[-1]).update(cursor=stream.pk - 1)
            return
        recent = Evaluation.objects.filter(rule=rule, created_at__gt=now - HOUR).count()
        if recent + len(chosen) > rule.per_hour:
            OnlineRule.objects.filter(pk=rule.pk).update(
                over_budget=models.F("over_budget") + 1, over_budget_at=now
            )
            continue
        for evaluator in chosen:
            result = evaluators.apply(evaluator, stream=stream, rule=rule, run_as=rule.created_by)
            cost = _cost(rule, result)
            if cost:
                OnlineRule.objects.filter(pk=rule.pk).update(
                    spent_nanos=models.F("spent_nanos") + cost
                )
        OnlineRule.objects.filter(pk=rule.pk).update(judged=models.F("judged") + 1)


def _cost(rule, result):
    """A judge's cost in the project's currency (a cost in another is not counted: no exchange
    rates here, as for tokens' caps)."""
    call = result.judge_stream
    if call is None or not call.cost_nanos:
        return 0
    if call.cost_currency and call.cost_currency != rule.project.currency:
        return 0
    return call.cost_nanos


def _spent(rule):
    """Whether the rule has reached its spend cap (it is stopped then, saying so)."""
    rule.refresh_from_db(fields=["spent_nanos", "spend_cap_nanos", "stopped_reason"])
    if rule.stopped_reason:
        return True
    if rule.spend_cap_nanos is None or rule.spent_nanos < rule.spend_cap_nanos:
        return False
    OnlineRule.objects.filter(pk=rule.pk, stopped_reason="").update(
        stopped_reason=SPEND_CAP_REACHED
    )
    log.info("online rule %s stopped: spend cap reached", rule.pk)
    return True


def visible(user, project=None):
    """The online rules `user` may read: of `project` when given, else of all their projects."""
    return projects.in_project(OnlineRule.objects.all(), user, project)


def delete(rule):
    """Delete `rule`: it judges no more streams. What it judged stays (the scores and their
    evaluations, no longer linked to a rule), for the same reasons as an evaluator's
    (`evaluators.delete`)."""
    rule.delete()


def visible_one(user, rule_id):
    return visible(user).filter(pk=rule_id).first()


def recent(rule, limit=50):
    return list(
        Evaluation.objects.filter(rule=rule)
        .select_related("stream", "evaluator", "judge_stream")
        .order_by("-created_at", "-pk")[:limit]
    )


def over_budget_now(rule, now=None):
    """Whether streams are being passed over the hourly budget now (the last hour)."""
    now = now or timezone.now()
    return rule.over_budget_at is not None and rule.over_budget_at > now - HOUR


def judgements_this_hour(rule, now=None):
    now = now or timezone.now()
    return Evaluation.objects.filter(rule=rule, created_at__gt=now - HOUR).count()
