"""An experiment run end to end against the simulator process: 30 items made from recorded
streams, two simulator models with different timing profiles, results read from the streams'
own rows, cancel and resume, and a second run compared with the first."""

import asyncio
import datetime as dt
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from streams import evaluate
from streams.core import figures
from streams.experiments import datasets, results, runs
from streams.models import Experiment, Price, Project, Run, RunItem, Score, Stream, Variant
from streams.store import prices
from tests.support.recording import recorded, text_events

pytestmark = pytest.mark.django_db(transaction=True)

N = 30


def make_dataset(user, project, n=N):
    sources = [
        recorded(
            user,
            text_events("Utrecht ", f"has {i} ", "canals."),
            project=project,
            request_body={
                "model": "auto",
                "input": f"Tell me about canal {i}",
                "stream": True,
                "metadata": {"time_scale": 0.05},
            },
            prompt=f"Tell me about canal {i}",
        )
        for i in range(n)
    ]
    dataset = datasets.create(project, "canals", user=user)
    datasets.add_streams(dataset, Stream.objects.filter(pk__in=[s.pk for s in sources]))
    return dataset


def make_experiment(user, project, dataset, models=("gpt-oss-20b", "eu-reasoner"), concurrency=8):
    experiment = Experiment.objects.create(
        project=project,
        name="fast or slow",
        dataset_version=datasets.latest(dataset),
        concurrency=concurrency,
        created_by=user,
    )
    for position, model in enumerate(models):
        Variant.objects.create(experiment=experiment, position=position, name=model, model=model)
    return experiment


async def run_to_end(experiment, user):
    run = await sync_to_async(runs.start)(experiment, user)
    state = await asyncio.wait_for(runs.drive(run.pk, tick_s=0.05), timeout=120)
    return run, state


@pytest.fixture
def owner_project(people, upstream):
    # a team price for every model (the simulator process is not the built-in one, whose
    # example prices would apply)
    Price.objects.create(
        model_pattern="*",
        effective_from=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        currency="EUR",
        input_per_million=Decimal("10000"),
        output_per_million=Decimal("20000"),
    )
    prices.forget()
    yield people.owner, Project.personal(people.owner)
    prices.forget()


async def test_a_run_records_every_item_and_its_figures_are_the_streams_own(owner_project):
    user, project = owner_project
    dataset = await sync_to_async(make_dataset)(user, project)
    experiment = await sync_to_async(make_experiment)(user, project, dataset)
    evaluator = await sync_to_async(evaluate.save)(
        project, name="mentions-canal", kind="contains", config={"text": "canal"}
    )
    await experiment.evaluators.aadd(evaluator)

    run, state = await run_to_end(experiment, user)

    assert (state.state, state.total, state.done, state.failed) == ("finished", 2 * N, 2 * N, 0)
    summaries = await sync_to_async(results.variant_summaries)(
        await Run.objects.select_related("experiment").aget(pk=run.pk)
    )
    assert [s.variant.model for s in summaries] == ["gpt-oss-20b", "eu-reasoner"]
    for summary in summaries:
        streams = [
            s
            async for s in Stream.objects.filter(
                run_item__run=run, run_item__variant=summary.variant
            )
        ]
        assert len(streams) == N == summary.done
        assert all(s.status == "completed" and s.tags == [f"run:{run.pk}"] for s in streams)
        ttfts = [s.ttft_ms for s in streams]
        assert summary.ttft_p50_ms == figures.nearest_rank(ttfts, 500)
        assert summary.ttft_p95_ms == figures.nearest_rank(ttfts, 950)
        costs = [s.cost_nanos for s in streams if s.cost_nanos is not None]
        assert summary.cost_nanos == (sum(costs) if costs else None)
        assert summary.cost_items == len(costs) == N  # (every one priced)
        # the evaluator scored every item's stream once, and the summary is of those scores
        values = [
            v
            async for v in Score.objects.filter(
                stream__in=streams, key="mentions-canal@v1"
            ).values_list("value", flat=True)
        ]
        assert len(values) == N
        assert [(x.name, x.count) for x in summary.scores] == [("mentions-canal", N)]
        assert summary.scores[0].mean == pytest.approx(sum(values) / N)
    # the two timing profiles show: the reasoning model's median TTFT is the slower
    assert summaries[1].ttft_p50_ms > summaries[0].ttft_p50_ms
    # each item was sent as recorded: its input, the variant's model, the item's pace
    sent = await Stream.objects.filter(run_item__run=run).afirst()
    assert sent.request_body["input"].startswith("Tell me about canal ")
    assert sent.request_body["metadata"] == {"time_scale": 0.05}


async def test_cancel_stops_the_run_and_resume_runs_only_what_is_not_done(owner_project):
    user, project = owner_project
    dataset = await sync_to_async(make_dataset)(user, project, 12)
    experiment = await sync_to_async(make_experiment)(
        user, project, dataset, models=("eu-reasoner",), concurrency=2
    )
    run = await sync_to_async(runs.start)(experiment, user)
    driver = asyncio.create_task(runs.drive(run.pk, tick_s=0.05))
    while await RunItem.objects.filter(run=run, done=True).acount() < 3:
        await asyncio.sleep(0.05)
    assert await sync_to_async(runs.cancel)(run)
    state = await asyncio.wait_for(driver, timeout=30)
    assert state.state == "cancelled" and 3 <= state.done < 12
    done_before = {
        pk: stream
        async for pk, stream in RunItem.objects.filter(run=run, done=True).values_list(
            "pk", "stream_id"
        )
    }
    assert await sync_to_async(runs.resume)(run)
    state = await asyncio.wait_for(runs.drive(run.pk, tick_s=0.05), timeout=120)
    assert (state.state, state.done) == ("finished", 12)
    # a finished item kept its stream: it was not recorded again
    after = {
        pk: stream
        async for pk, stream in RunItem.objects.filter(pk__in=done_before).values_list(
            "pk", "stream_id"
        )
    }
    assert after == done_before
    # every item has its one stream; only those in flight at the cancel (at most the
    # concurrency) were sent again, their first streams kept as recorded, unlinked
    tagged = [s async for s in Stream.objects.exclude(requested_model="auto")]
    assert all(s.tags == [f"run:{run.pk}"] for s in tagged)
    linked = [s async for s in Stream.objects.filter(run_item__run=run)]
    assert len(linked) == 12 and all(s.status == "completed" for s in linked)
    assert len(tagged) - 12 <= 2  # (none when both had just ended)


async def test_a_second_run_is_compared_with_the_first(owner_project):
    user, project = owner_project
    dataset = await sync_to_async(make_dataset)(user, project, 6)
    experiment = await sync_to_async(make_experiment)(user, project, dataset)
    first, _ = await run_to_end(experiment, user)
    second, _ = await run_to_end(experiment, user)
    # the second run's answers of the slow model are made slower and changed by hand, so the
    # comparison has something certain to find
    slow = await Variant.objects.aget(experiment=experiment, model="eu-reasoner")
    target = await RunItem.objects.aget(run=second, variant=slow, item__position=2)
    # (ten times the first run's, not its own: the two runs' own durations differ on a
    # loaded machine, by 1.8 times once)
    before = await RunItem.objects.select_related("stream").aget(
        run=first, variant=slow, item__position=2
    )
    await Stream.objects.filter(pk=target.stream_id).aupdate(
        duration_ms=before.stream.duration_ms * 10, final_text="A different answer entirely."
    )
    a, b = (
        await Run.objects.select_related("experiment").aget(pk=first.pk),
        await Run.objects.select_related("experiment").aget(pk=second.pk),
    )
    changes = await sync_to_async(results.compare)(a, b)
    assert changes["pairs"] == 12
    assert (changes["slower"][0].position, changes["slower"][0].variant) == (2, "eu-reasoner")
    assert changes["slower"][0].size == pytest.approx(9.0)
    top = changes["changed"][0]
    assert (top.position, top.variant, top.after_value) == (
        2,
        "eu-reasoner",
        "A different answer entirely.",
    )
    # the dataset version is frozen: adding makes version 2, the runs keep version 1
    version = await sync_to_async(datasets.add)(dataset, [datasets.clean_item({"input": "new"})])
    assert version.number == 2
    assert await version.items.acount() == 7
    assert (await sync_to_async(datasets.latest)(dataset)).pk == version.pk
    assert await experiment.dataset_version.items.acount() == 6


async def test_a_judge_scores_every_item_of_a_run_wider_than_the_per_user_limit(owner_project):
    # (the per-user limit of pages is 5; before, a judge asked while the run's own streams
    # were running was refused, and its item had no score)
    user, project = owner_project
    n = 12
    dataset = await sync_to_async(make_dataset)(user, project, n=n)
    experiment = await sync_to_async(make_experiment)(
        user, project, dataset, models=("gpt-oss-20b",), concurrency=8
    )
    judge = await sync_to_async(evaluate.save)(
        project,
        name="grader",
        kind="judge",
        config={
            "model": "gpt-oss-20b",
            "metadata": {"scenario": "judge", "judge_score": "4", "time_scale": "0"},
        },
        user=user,
    )
    await experiment.evaluators.aadd(judge)

    run, state = await run_to_end(experiment, user)

    assert (state.state, state.done, state.failed) == ("finished", n, 0)
    values = [
        v
        async for v in Score.objects.filter(stream__run_item__run=run, key="grader@v1").values_list(
            "value", flat=True
        )
    ]
    assert values == [4.0] * n
