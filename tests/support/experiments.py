"""A dataset, an experiment and finished runs made without an upstream: each item × variant's
stream stored as the recorder stores one (tests/support/recording.py), linked to its run item.
For the pages' tests and the route walkers (their objects: a dataset, an experiment, two runs).
"""

import dataclasses
import itertools

from streams.experiments import datasets, experiments, runs
from streams.models import Run, RunItem
from tests.support.recording import recorded, text_events


@dataclasses.dataclass
class Made:
    dataset: object
    experiment: object
    run: object
    earlier: object


def answer(position, variant, run_number):
    return f"Item {position} by {variant} in run {run_number}."


def finished_run(experiment, user, *, answer_of=answer, **fields):
    """A run of `experiment` whose every item × variant has a completed stream answering
    `answer_of(position, variant name, run number)`."""
    run = runs.start(experiment, user)
    for run_item in RunItem.objects.filter(run=run).select_related("item", "variant"):
        text = answer_of(run_item.item.position, run_item.variant.name, run.number)
        stream = recorded(
            user,
            text_events(text),
            project=experiment.project,
            requested_model=run_item.variant.model,
            request_body=runs.request_body(run_item.item, run_item.variant),
            tags=[runs.run_tag(run)],
            ttft_ms=100.0 * run_item.item.position + run_item.variant.position,
            duration_ms=1000.0 + run.number,
            cost_nanos=1000 * run_item.item.position,
            cost_currency="EUR",
            **fields,
        )
        RunItem.objects.filter(pk=run_item.pk).update(stream=stream, done=True, evaluated=True)
    Run.objects.filter(pk=run.pk).update(state=Run.State.FINISHED)
    run.refresh_from_db()
    return run


_names = itertools.count(1)


def made(user, project, *, items=3, models=("gpt-oss-20b", "eu-reasoner")):
    """A dataset of `items` prompts, an experiment over `models`, and two finished runs."""
    dataset = datasets.create(project, f"walk {next(_names)}", user=user)
    datasets.add(
        dataset,
        [
            datasets.clean_item({"input": f"Question {i}", "expected_output": f"Answer {i}."})
            for i in range(1, items + 1)
        ],
    )
    experiment = experiments.create(
        project,
        name="walk",
        version=datasets.latest(dataset),
        variants=[{"model": m} for m in models],
        user=user,
    )
    earlier = finished_run(experiment, user)
    run = finished_run(experiment, user)
    return Made(dataset, experiment, run, earlier)
