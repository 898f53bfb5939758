"""`manage.py experiment run`: a progress bar, the results, and an exit status for CI."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from streams.experiments import datasets
from streams.models import Project, Run, Stream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dataset(people, upstream):
    project = Project.personal(people.owner)
    dataset = datasets.create(project, "smoke", user=people.owner)
    datasets.add(
        dataset,
        [
            datasets.clean_item({"input": f"Question {i}", "metadata": {"time_scale": 0.05}})
            for i in range(4)
        ],
    )
    return dataset


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("experiment", "run", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_it_runs_every_item_and_exits_0(dataset, capsys):
    code, out, _ = run(
        "smoke",
        "--user",
        "owner",
        "--variants",
        "gpt-oss-20b",
        "eu-reasoner;effort=low",
        "--json",
    )
    assert code == 0
    report = json.loads(out)
    assert [(v["variant"], v["done"], v["errors"]) for v in report["variants"]] == [
        ("gpt-oss-20b", 4, 0),
        ("eu-reasoner", 4, 0),
    ]
    assert "8/8 done" in capsys.readouterr().err  # the bar's last state
    run_row = Run.objects.get(pk=report["run"])
    assert run_row.state == "finished"
    sent = Stream.objects.filter(run_item__run=run_row, requested_model="eu-reasoner").first()
    assert sent.request_body["reasoning"] == {"effort": "low"}


def test_failed_items_exit_1_and_bad_input_2(dataset):
    code, out, _ = run("smoke", "--user", "owner", "--variants", "gpt-oss-20b;name=x")
    assert code == 0 and "4/4 done, 0 errors" in out
    # the simulator answers a scenario of errors: every item fails, and CI learns it
    datasets.add(
        dataset, [datasets.clean_item({"input": "x", "metadata": {"scenario": "http_500"}})]
    )
    code, out, _ = run("smoke", "--user", "owner", "--variants", "gpt-oss-20b")
    assert code == 1 and "5/5 done, 1 errors" in out
    with pytest.raises(CommandError) as refused:
        run("nope", "--user", "owner", "--variants", "gpt-oss-20b")
    assert refused.value.returncode == 2 and "No dataset 'nope'" in str(refused.value)
    with pytest.raises(CommandError) as refused:
        run("smoke", "--user", "owner", "--variants", "gpt-oss-20b;temperature=hot")
    assert "'temperature' must be a number" in str(refused.value)
