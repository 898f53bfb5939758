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
