"""The evaluators' API (streams/serve/evaluators_api.py): made, read, a new version on an
edit, applied to a stream, bad input a 400 on its field, another's evaluator a 404, a token
without the write scope refused."""

import json

import pytest
from asgiref.sync import sync_to_async

from streams.models import ApiToken, Project, Score, Stream
from tests.support.clients import HeaderClient, bearer

pytestmark = pytest.mark.django_db(transaction=True)


async def post(client, path, data):
    return await client.post(path, json.dumps(data), content_type="application/json")


@sync_to_async
def a_stream(user, output):
    return Stream.objects.create(
        user=user, project=Project.personal(user), status="completed", output_text=output
    )


async def test_made_edited_and_applied(people):
    owner = bearer(people.owner)
    r = await post(owner, "/api/evaluators/", {"name": "is-json", "kind": "json_valid"})
    assert r.status_code == 201, r.content
    made = r.json()
    assert (made["key"], made["score_type"]) == ("is-json@v1", "is-json")
    r = await post(owner, f"/api/evaluators/{made['id']}/", {"kind": "contains", "config": {}})
    assert r.status_code == 200 and r.json()["key"] == "is-json@v2"
    stream = await a_stream(people.owner, "Paris, of course")
    r = await post(
        owner, f"/api/evaluators/{made['id']}/apply/", {"stream": stream.pk, "expected": "Paris"}
    )
    assert r.status_code == 201, r.content
    result = r.json()
    assert (result["written"], result["value"], result["label"]) == (True, 1.0, "pass")
    assert result["key"] == "is-json@v2" and result["reason"] == "The output contains the text."
    score = await sync_to_async(Score.objects.get)(stream=stream)
    assert (score.source, score.key) == ("evaluator", "is-json@v2")
    listed = (await owner.get("/api/evaluators/")).json()["evaluators"]
    assert [e["key"] for e in listed] == ["is-json@v2"]
    one = (await owner.get(f"/api/evaluators/{made['id']}/")).json()
    assert one["evaluations"][0]["stream"] == stream.pk


async def test_bad_input_is_a_400_on_its_field(people):
    owner = bearer(people.owner)
    r = await post(owner, "/api/evaluators/", {"name": "re", "kind": "regex", "config": {}})
    assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["pattern"]
    r = await post(owner, "/api/evaluators/", {"name": "x", "kind": "judge", "config": []})
    assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["config"]
    r = await post(owner, "/api/evaluators/", {"name": "x", "kind": "nope"})
    assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["kind"]


async def test_another_projects_evaluator_and_stream_are_not_found(people):
    owner, stranger = bearer(people.owner), bearer(people.stranger)
    made = (await post(owner, "/api/evaluators/", {"name": "j", "kind": "json_valid"})).json()
    assert (await stranger.get(f"/api/evaluators/{made['id']}/")).status_code == 404
    r = await post(stranger, f"/api/evaluators/{made['id']}/apply/", {"stream": 1})
    assert r.status_code == 404
    theirs = await a_stream(people.stranger, "{}")
    r = await post(owner, f"/api/evaluators/{made['id']}/apply/", {"stream": theirs.pk})
    assert r.status_code == 404
    assert not await sync_to_async(Score.objects.exists)()


async def test_a_read_token_reads_and_makes_nothing(people):
    token = await sync_to_async(ApiToken.issue)(people.owner, name="ro", scopes=["read"])
    reader = HeaderClient({"authorization": f"Bearer {token}"})
    assert (await reader.get("/api/evaluators/")).status_code == 200
    r = await post(reader, "/api/evaluators/", {"name": "j", "kind": "json_valid"})
    assert r.status_code == 403


async def test_online_rules_are_read_with_their_budget_and_stop(people):
    from streams.evaluate import online
    from streams.models import Evaluator, OnlineRule

    owner, stranger = bearer(people.owner), bearer(people.stranger)
    made = (await post(owner, "/api/evaluators/", {"name": "j", "kind": "json_valid"})).json()

    @sync_to_async
    def a_rule():
        evaluator = Evaluator.objects.get(pk=made["id"])
        rule = online.create(evaluator.project, user=people.owner, name="r", evaluators=[evaluator])
        OnlineRule.objects.filter(pk=rule.pk).update(stopped_reason=online.SPEND_CAP_REACHED)
        return rule

    rule = await a_rule()
    listed = (await owner.get("/api/online-rules/")).json()["online_rules"]
    assert [(r["name"], r["evaluators"], r["stopped_reason"]) for r in listed] == [
        ("r", ["j@v1"], "Its spend cap was reached.")
    ]
    assert (await owner.get(f"/api/online-rules/{rule.pk}/")).json()["evaluations"] == []
    assert (await stranger.get(f"/api/online-rules/{rule.pk}/")).status_code == 404
    assert (await stranger.get("/api/online-rules/")).json()["online_rules"] == []


async def test_an_evaluator_and_a_rule_are_deleted_and_the_scores_stay(people):
    from streams.evaluate import online
    from streams.models import Evaluator, OnlineRule

    owner, stranger = bearer(people.owner), bearer(people.stranger)
    token = await sync_to_async(ApiToken.issue)(people.owner, name="ro", scopes=["read"])
    reader = HeaderClient({"authorization": f"Bearer {token}"})
    made = (await post(owner, "/api/evaluators/", {"name": "has-p", "kind": "contains"})).json()
    stream = await a_stream(people.owner, "Paris")
    r = await post(
        owner, f"/api/evaluators/{made['id']}/apply/", {"stream": stream.pk, "expected": "Paris"}
    )
    assert r.status_code == 201 and r.json()["written"]

    @sync_to_async
    def a_rule():
        evaluator = Evaluator.objects.get(pk=made["id"])
        return online.create(evaluator.project, user=people.owner, name="r", evaluators=[evaluator])

    rule = await a_rule()
    for path in (f"/api/online-rules/{rule.pk}/", f"/api/evaluators/{made['id']}/"):
        assert (await stranger.delete(path)).status_code == 404, path
        assert (await reader.delete(path)).status_code == 403, path
        assert (await owner.delete(path)).status_code == 204, path
        assert (await owner.get(path)).status_code == 404, path
    assert not await OnlineRule.objects.aexists() and not await Evaluator.objects.aexists()
    score = await Score.objects.aget(stream=stream)
    assert (score.key, score.value) == ("has-p@v1", 1.0)
