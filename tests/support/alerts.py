"""Stream rows and rules for the alert tests: finished streams of a model at a time, and a rule
with the tests' defaults (TTFT p95 above 1 s over 15 minutes, at least 3 streams)."""

import datetime as dt

from streams.management.commands.seed_demo import _settable_created_at
from streams.models import Rule, Stream

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)


def streams(project, at, ttfts, model="m-a", status="completed"):
    """Finished streams of `project` created at `at`, one per TTFT (ms; duration twice it)."""
    rows = [
        Stream(
            project=project,
            resolved_model=model,
            requested_model=model,
            status=status,
            ttft_ms=ttft,
            duration_ms=None if ttft is None else ttft * 2,
            created_at=at,
            source="live",
        )
        for ttft in ttfts
    ]
    with _settable_created_at():
        return Stream.objects.bulk_create(rows)


def rule(project, **kw):
    fields = dict(
        project=project,
        name="slow TTFT",
        figure=Rule.Figure.TTFT_P95,
        window_s=900,
        comparison=Rule.Comparison.GT,
        threshold=1000,
        min_streams=3,
    )
    fields.update(kw)
    return Rule.objects.create(**fields)


def walk_objects(owner, project, name="trage modellen", reason="onderhoud"):
    """An alert rule of `owner` in `project` that is firing (its state, a firing in the
    history) and muted by a silence, for the route walkers: {"rule_ids", "silence_ids"}."""
    from streams.models import Firing, RuleState, Silence

    now = dt.datetime.now(dt.UTC)
    made = rule(project, name=name, resolved_model=name[:200], created_by=owner)
    RuleState.objects.create(
        rule=made, project=project, state="firing", since=now, value=1500.0, evaluated_at=now
    )
    Firing.objects.create(
        rule=made, project=project, started_at=now, peak=1500.0, notified=1, values=[[0, 1500.0]]
    )
    silence = Silence.objects.create(
        project=project, rule=made, until_at=now + dt.timedelta(hours=1), reason=reason
    )
    return {"rule_ids": [made.pk], "silence_ids": [silence.pk]}
