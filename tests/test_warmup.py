"""The warm-up (streams/core/warmup.py): after it, the hot path imports nothing.

A module imported at its first use on the event loop holds every live stream for as long as the
import takes (genai-prices with pydantic: ~160 ms at the first stream's end). In a fresh
process, warmed as a server warms, one stream recorded by the runner and one through the
recording proxy, each started, recorded, finished, costed and rolled up, must import no module:
a new lazy import on that path fails here, by name."""

import sys

import pytest

from streams.bench import migrated_env

from .support.processes import last_json, output

SCRIPT = r"""
import asyncio, json, os, sys
import django
from streams.run import process
process.install_event_loop()
django.setup()
process.tune()

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils.module_loading import import_string

from streams.models import ApiToken, Stream
from streams.run import runner, services
from streams.store import rows

application = import_string(settings.ASGI_APPLICATION)  # (a server's start: it warms up)
user = get_user_model().objects.create_user("warm")
token = ApiToken.issue(user, name="warm")
stream = services.create(user, rows.build_request_body("Tell me about Utrecht", "auto"))
request = {"model": "auto", "input": "Tell me about Utrecht", "stream": True}
auth = {"Authorization": f"Bearer {token}"}


async def main():
    await services.record(stream)  # (the runner's way: a page's or the API's stream)
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        r = await client.post("/v1/responses", json=request, headers=auth)
        assert r.status_code == 200, r.text


before = set(sys.modules)
asyncio.run(main())
ended = sorted(Stream.objects.values_list("status", "source"))
assert ended == [("completed", "live"), ("completed", "proxy")], ended
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.fixture(scope="module")
def fresh_env(simulator_process):
    _, env = migrated_env("warmup", drop=("REDIS_URL",))
    return {**env, "UPSTREAM_BASE_URL": simulator_process.base_url, "ALLOWED_HOSTS": "127.0.0.1"}


def imported_while_streaming(env):
    return last_json(output([sys.executable, "-c", SCRIPT], env, timeout=120))


def test_a_warm_process_imports_nothing_while_it_streams(fresh_env):
    imported = imported_while_streaming(fresh_env)
    assert not imported, f"imported while streaming: {imported}"
