"""Datasets and experiments in real Chromium against a real Daphne and the simulator process
(the issue's "done when"): a member adds the list's 30 filtered streams to a new dataset, makes
an experiment over two simulator models with different timing profiles and two evaluators (an
LLM as judge and a JSON Schema), starts a run and watches it finish live, reads per-variant
TTFT and cost equal to the streams' own rows and both evaluators' scores, runs it again and
compares the runs."""

import pytest

from dashboard.templatetags.inspection import money, ms
from streams import evaluate
from streams.core import figures
from streams.models import Dataset, Project, Run, Score, Stream
from tests.e2e.conftest import take_screenshot
from tests.support.recording import recorded, text_events

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

N = 30


def test_a_dataset_from_the_list_an_experiment_two_runs_and_their_comparison(
    logged_in_page, people, live_server_daphne
):
    server = live_server_daphne
    project = Project.personal(people.owner)
    for i in range(N):
        recorded(
            people.owner,
            text_events(f"Canal {i} ", "is old."),
            project=project,
            tags=["canals"],
            request_body={"model": "auto", "input": f"Tell me about canal {i}",
                          "metadata": {"time_scale": 0.05}},
        )  # fmt: skip
    judge = evaluate.save(
        project,
        name="grader",
        kind="judge",
        config={
            "model": "gpt-oss-20b",
            "metadata": {"scenario": "judge", "judge_score": "4", "time_scale": "0"},
        },
        user=people.owner,
    )
    schema = evaluate.save(
        project, name="is-object", kind="json_schema", config={"schema": {"type": "object"}}
    )
    page = logged_in_page(people.owner, base_url=server.url, path="/?tag=canals")
    page.click("text=Add these to a dataset")
    assert f"{N} streams match" in page.inner_text("main")
    page.fill("#id_new_name", "canals")
    page.click("main button[type=submit]")
    page.wait_for_selector("table.dataset-items")
    assert page.locator("tr.dataset-item").count() == N
    dataset = Dataset.objects.get(name="canals")

    page.goto(f"{server.url}/experiments/")
    page.fill("#id_name", "fast or slow")
    page.select_option("#id_dataset", str(dataset.pk))
    page.fill("#id_concurrency", "10")
    page.select_option("#id_evaluators", [str(judge.pk), str(schema.pk)])
    page.fill("#id_v1_model", "gpt-oss-20b")
    page.fill("#id_v2_model", "eu-reasoner")
    page.click(".experiment-form button[type=submit]")
    page.click("#start-run")
    # the progress card polls until the run is done, then the page is read again
    page.wait_for_selector("#run-progress[data-state=finished]", timeout=120_000)
    page.reload()
    assert not page.errors and not page.csp_violations
    take_screenshot(page, "run_detail")
    run = Run.objects.get(number=1)
    for model in ("gpt-oss-20b", "eu-reasoner"):
        streams = Stream.objects.filter(run_item__run=run, requested_model=model)
        ttfts = list(streams.values_list("ttft_ms", flat=True))
        assert len(ttfts) == N
        row = page.locator(f"tr.variant-summary[data-variant='{model}']")
        assert row.locator(".ttft-p50").inner_text() == ms(figures.nearest_rank(ttfts, 500))
        assert row.locator(".errors").inner_text() == "0"
        costs = [(c, cur) for c, cur in streams.values_list("cost_nanos", "cost_currency") if c]
        shown = row.locator(".cost").inner_text()
        if costs:
            assert shown == money(sum(c for c, _ in costs), costs[0][1])
        else:
            assert shown == "no price"
        # both evaluators scored every item's stream: the judge 4, the schema 0 (prose)
        for key, value in (("grader@v1", 4.0), ("is-object@v1", 0.0)):
            values = list(Score.objects.filter(stream__in=streams, key=key).values_list(
                "value", flat=True))  # fmt: skip
            assert values == [value] * N, key
        said = row.inner_text()
        assert "grader: 4.00" in said and "is-object: 0.00" in said
    assert page.locator("tr.run-item").count() == N

    page.goto(f"{server.url}/experiments/{run.experiment_id}/")
    page.click("#start-run")
    page.wait_for_selector("#run-progress[data-state=finished]", timeout=120_000)
    page.reload()
    page.click(".compare-runs a")
    page.wait_for_selector("#changed")
    assert f"{2 * N} item runs done in both" in page.inner_text("main")
    take_screenshot(page, "run_compare")
