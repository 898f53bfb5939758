"""An online rule with a judge in a real Daphne: a stream started through the API finishes,
the server's periodic job judges it, and the judge's own call is recorded there too (its
stream started from the job's thread)."""

import time

import httpx
import pytest

from streams import evaluate
from streams.evaluate import online
from streams.models import ApiToken, Evaluation, Stream

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rule_judges_a_new_stream_in_the_server(live_server_daphne, people):
    token = ApiToken.objects.get(user=people.owner)
    project = token.project
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
    rule = online.create(project, user=people.owner, name="all", evaluators=[judge])
    r = httpx.post(
        f"{live_server_daphne.url}/api/streams/",
        headers={"Authorization": f"Bearer {people.owner.token}"},
        json={"input": "Capital of France?", "model": "gpt-oss-20b", "metadata": {"time_scale": 0}},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    stream_id = r.json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = Evaluation.objects.filter(rule=rule).select_related("judge_stream").first()
        if found is not None:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"not judged:\n{live_server_daphne.output()}")
    assert found.stream_id == stream_id
    assert (found.outcome, found.value, found.version) == ("scored", 4.0, 1), found.reason
    assert found.judge_stream.status == Stream.Status.COMPLETED
    assert found.judge_stream.request_body["metadata"]["streamscope_judged"] == str(stream_id)
    time.sleep(6)  # (another run of the job: the judge's stream is not judged)
    assert Evaluation.objects.filter(rule=rule).count() == 1
