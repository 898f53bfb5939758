"""A run's results (streams/experiments/results.py) without an upstream: a finished run's
figures are stored with it by the function that computes them live, and its items are paged by
their positions (keyset), not by an offset."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from streams import evaluate
from streams.experiments import results, runs
from streams.models import Project, Run, RunItem, Stream
from tests.support import experiments as made_runs

pytestmark = pytest.mark.django_db(transaction=True)


def _driven_to_its_end(user, project, items):
    """A run of `items` × 2 variants whose streams ended (one failed, some unpriced, every one
    scored), finished by the driver's own tick."""
    run = made_runs.made(user, project, items=items).run
    streams = Stream.objects.filter(run_item__run=run).order_by("pk")
    first = streams.first()
    Stream.objects.filter(pk=first.pk).update(status=Stream.Status.FAILED)
    Stream.objects.filter(pk__in=list(streams.values_list("pk", flat=True)[:3])).update(
        cost_nanos=None
    )
    evaluator = evaluate.save(project, name="says-item", kind="contains", config={"text": "Item 1"})
    for stream in streams:
        evaluate.apply(evaluator, stream=stream)
    # (back to running, as the driver sees a run whose last items just ended)
    Run.objects.filter(pk=run.pk).update(state=Run.State.RUNNING, figures=None)
    return run


def test_a_finished_run_stores_the_figures_its_live_page_computed(people):
    user, project = people.owner, Project.personal(people.owner)
    run = _driven_to_its_end(user, project, items=12)
    live = results.variant_summaries(Run.objects.get(pk=run.pk))
    live_progress = runs.progress(run.pk)
    assert [s.done for s in live] == [12, 12] and sum(s.errors for s in live) == 1

    created, state = runs.advance(run.pk)

    assert created == [] and state.state == Run.State.FINISHED
    run = Run.objects.select_related("experiment").get(pk=run.pk)
    assert run.figures is not None
    stored = results.variant_summaries(run)
    assert stored == results.computed_summaries(run) == live
    assert stored[0].scores and stored[0].scores[0].name == "says-item"
    assert sum(s.cost_items for s in stored) == 2 * 12 - 3 and sum(s.errors for s in stored) == 1
    # ... and the page reads them, not the 30,000 rows of a large run: a stream's row changed
    # after the end does not move them, and neither are the counts of the progress recounted
    RunItem.objects.filter(run=run).update(done=False)
    assert results.variant_summaries(Run.objects.get(pk=run.pk)) == live
    assert runs.progress(run.pk) == runs.Progress(
        total=live_progress.total, done=live_progress.done, failed=1, state="finished"
    )


def test_a_run_that_finished_before_figures_were_stored_gets_them_when_read(people):
    user, project = people.owner, Project.personal(people.owner)
    run = made_runs.made(user, project, items=4).run
    assert run.state == Run.State.FINISHED and run.figures is None

    summaries = results.variant_summaries(run)

    assert Run.objects.get(pk=run.pk).figures == results.as_stored(summaries)


def test_resuming_a_run_forgets_figures_it_no_longer_has(people):
    user, project = people.owner, Project.personal(people.owner)
    run = made_runs.made(user, project, items=2).run
    Run.objects.filter(pk=run.pk).update(state=Run.State.CANCELLED, figures=[])
    assert runs.resume(run)
    assert Run.objects.get(pk=run.pk).figures is None


def test_items_are_paged_by_position_both_ways(people):
    user, project = people.owner, Project.personal(people.owner)
    run = made_runs.made(user, project, items=results.ITEMS_PAGE * 2 + 7).run
    n = results.ITEMS_PAGE

    first = results.item_rows(run)
    assert (first.first, first.last, first.earlier, first.later) == (1, n, None, n)
    assert first.count == 2 * n + 7
    with CaptureQueriesContext(connection) as queries:
        second = results.item_rows(run, after=first.later)
    assert (second.first, second.last, second.earlier, second.later) == (n + 1, 2 * n, n + 1, 2 * n)
    # a keyset, not an offset: a deep page costs what the first does
    assert not [q["sql"] for q in queries if "OFFSET" in q["sql"].upper()]
    last = results.item_rows(run, after=second.later)
    assert (last.first, last.last, last.earlier, last.later) == (
        2 * n + 1,
        2 * n + 7,
        2 * n + 1,
        None,
    )
    back = results.item_rows(run, before=last.earlier)
    assert [r.item.position for r in back.rows] == [r.item.position for r in second.rows]
    assert results.item_rows(run, before=second.earlier).earlier is None
    # every cell of the page is its item's, in the variants' order
    row = second.rows[0]
    assert [c.answer for c in row.cells] == [
        made_runs.answer(n + 1, v, run.number) for v in ("gpt-oss-20b", "eu-reasoner")
    ]


def _tick_statements(user, project, n):
    """The SQL statements of a run's first tick, which starts `n` streams (its concurrency)."""
    made = made_runs.made(user, project, items=n, models=("gpt-oss-20b",))
    made.experiment.concurrency = n
    made.experiment.save(update_fields=["concurrency"])
    run = runs.start(made.experiment, user)
    with CaptureQueriesContext(connection) as queries:
        created, state = runs.advance(run.pk, counted=False)
    assert len(created) == n and state.state == Run.State.RUNNING
    assert RunItem.objects.filter(run=run, stream__in=created).count() == n
    assert {s.tags[0] for s in Stream.objects.filter(pk__in=[s.pk for s in created])} == {
        runs.run_tag(run)
    }
    return [q["sql"] for q in queries.captured_queries]


def _statement_diff(few, many):
    """The two ticks' statements, numbers and values aside, as a diff (CI saw 9 against 12,
    once, in a pytest repr that showed only the first and the last)."""
    import difflib
    import re

    def shape(sql):
        return re.sub(r"'[^']*'|\b\d+\b", "?", sql)[:300]

    diff = difflib.unified_diff([shape(q) for q in few], [shape(q) for q in many], lineterm="")
    return f"{len(few)} against {len(many)} statements:\n" + "\n".join(diff)


def test_a_tick_costs_the_same_statements_however_many_streams_it_starts(people, monkeypatch):
    # (a statement each, and their commits, was most of what a run cost over the same streams
    # started directly: docs/experiments.md, "Benchmark")
    # (the claim of its own written either time or neither: on a loaded machine a second
    # could pass between the start and the tick)
    monkeypatch.setattr(runs, "CLAIM_EVERY_S", 3600.0)
    # (nor the look for other processes' new sealed keys, due every second: it fell inside the
    # first tick once on a loaded CI, 3 statements more)
    from streams.store import known_secrets

    known_secrets.refresh()
    monkeypatch.setattr(known_secrets, "REFRESH_S", 3600.0)
    user, project = people.owner, Project.personal(people.owner)
    few, many = _tick_statements(user, project, 3), _tick_statements(user, project, 12)
    assert len(few) == len(many), _statement_diff(few, many)
    inserts = [sql for sql in many if sql.startswith('INSERT INTO "streams_stream"')]
    assert len(inserts) == 1
