"""The datasets and experiments API (streams/serve/api_experiments.py) with a token: a dataset
made with items, bad items named by index and nothing added, an experiment started and run
against the simulator, its results read; another project's things are 404."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from streams.access import members
from streams.experiments import uploads
from streams.models import ApiToken, DatasetItem, Project
from tests.support.clients import HeaderClient

pytestmark = pytest.mark.django_db(transaction=True)


def client_of(user, project=None):
    token = ApiToken.issue(user, name="exp", project=project or Project.personal(user))
    return HeaderClient({"authorization": f"Bearer {token}"})


async def post(client, url, data):
    response = await client.post(url, json.dumps(data), content_type="application/json")
    return response.status_code, json.loads(response.content)


async def test_a_dataset_an_experiment_and_a_run_through_the_api(people, upstream):
    client = await sync_to_async(client_of)(people.owner)
    status, body = await post(
        client,
        "/api/datasets/",
        {
            "name": "api",
            "items": [
                {"input": f"Question {i}", "metadata": {"time_scale": 0.05}} for i in range(3)
            ],
        },
    )
    assert status == 201 and (body["items"], body["version"]) == (3, 1)
    dataset = body["id"]
    status, body = await post(
        client, f"/api/datasets/{dataset}/items/", {"items": [{"input": "ok"}, {"input": ""}, {}]}
    )
    assert status == 400
    assert [e["index"] for e in body["error"]["items"]] == [1, 2]
    assert await DatasetItem.objects.acount() == 3
    status, body = await post(
        client,
        "/api/experiments/",
        {"name": "e", "dataset": dataset, "variants": [{"model": "gpt-oss-20b"}], "concurrency": 3},
    )
    assert status == 201
    status, body = await post(client, f"/api/experiments/{body['id']}/runs/", {})
    assert status == 201
    for _ in range(600):
        run = json.loads((await client.get(body["url"])).content)
        if run["state"] == "finished":
            break
        await asyncio.sleep(0.1)
    assert (run["state"], run["done"], run["failed"]) == ("finished", 3, 0)
    assert run["variants"][0]["done"] == 3 and run["variants"][0]["ttft_p50_ms"] > 0


async def test_bad_input_and_other_projects(people):
    client = await sync_to_async(client_of)(people.owner)
    status, body = await post(client, "/api/datasets/", {"name": ""})
    assert (status, body["error"]["code"]) == (400, "invalid")
    # a declared gigabyte: refused with the limit before the body is read
    response = await sync_to_async(Client().post)(
        "/api/datasets/",
        "{}",
        content_type="application/json",
        CONTENT_LENGTH=str(1024**3),
        HTTP_AUTHORIZATION=client.extra_headers["authorization"],
    )
    assert response.status_code == 413
    assert json.loads(response.content)["error"]["limit"] == uploads.max_bytes()
    status, body = await post(
        client, "/api/experiments/", {"name": "e", "dataset": 999, "variants": [{"model": "m"}]}
    )
    assert status == 400
    status, body = await post(client, "/api/datasets/", {"name": "mine"})
    stranger = await sync_to_async(client_of)(people.stranger)
    status, _ = await post(stranger, f"/api/datasets/{body['id']}/items/", {"items": []})
    assert status == 404
    # a viewer of the project reads and may not add
    team = await sync_to_async(members.create)(people.owner, "Team")
    await sync_to_async(members.add)(people.owner, team, people.stranger, "viewer")
    viewer = await sync_to_async(client_of)(people.stranger, team)
    assert (await viewer.get("/api/datasets/")).status_code == 200
    status, _ = await post(viewer, "/api/datasets/", {"name": "x"})
    assert status == 403
