"""The warm-up (streams/core/warmup.py): no stream starts before it is over, and after it the
hot path loads nothing.

A module imported, or a vocabulary built, while streams run holds the GIL just as their events
arrive: on the event loop every live stream waits behind it (genai-prices with pydantic: ~160 ms
at the first stream's end), and on a thread beside the loop it made the first deltas' reads
late, merged with later deltas, so that they took those deltas' receipt stamps (issue 42:
`manage.py record` warmed up in the background; docs/measurement.md has the figures).

Fresh processes record as users run them, watched from inside (tests/support/streaming_loads.py:
the interpreter's audit events, which a busy machine cannot skew): from their first connection
to the upstream, the warm-up must be done and nothing may be imported (or a large regular
expression compiled). A new lazy import on the hot path fails here, by name, and so does a
process that starts a stream before its warm-up is over."""

import json
import sys

import pytest

from streams.bench import migrated_env
from tests.support.processes import last_json, output

SCRIPT = r"""
import asyncio, json, os, sys
from urllib.parse import urlsplit

from tests.support import streaming_loads

streaming_loads.watch(urlsplit(os.environ["UPSTREAM_BASE_URL"]).port)

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


asyncio.run(main())
seen = streaming_loads.stop()
ended = sorted(Stream.objects.values_list("status", "source"))
assert ended == [("completed", "live"), ("completed", "proxy")], ended
print(json.dumps(seen))
"""

HELD = r"""
import asyncio, json, threading
import django
from streams.run import process
process.install_event_loop()
django.setup()
process.tune()

import httpx
from django.conf import settings
from django.utils.module_loading import import_string

from streams.core import warmup
from streams.models import Stream
from streams.run import services
from streams.store import rows

held = threading.Event()
warmup.add("a load the test holds", held.wait)  # (the last step: the rest are loaded by then)
application = import_string(settings.ASGI_APPLICATION)  # (a server's start: it warms up)
stream = rows.new_row(None, rows.build_request_body("Tell me about Utrecht", "auto"))


async def main():
    recording = asyncio.ensure_future(services.record(stream))
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        page = (await client.get("/login/")).status_code
    await asyncio.sleep(0.3)  # (time enough for an ungated stream to start)
    waiting, done = await Stream.objects.aget(pk=stream.pk), warmup.done()
    held.set()
    await recording
    ended = await Stream.objects.aget(pk=stream.pk)
    return {
        "page while warming": page,
        "warm-up done then": done,
        "stream then": [waiting.status, waiting.started_at is not None],
        "stream at the end": ended.status,
    }


print(json.dumps(asyncio.run(main())))
"""

# A pattern this long is a table, not a rule: compiled while streams run it holds the GIL for
# milliseconds (shorter ones, compiled once where a library meets its first input, cost µs).
LARGE_PATTERN_CHARS = 1000


@pytest.fixture(scope="module")
def fresh_env(simulator_process):
    tmp, env = migrated_env("warmup", drop=("REDIS_URL",))
    env = {**env, "UPSTREAM_BASE_URL": simulator_process.base_url, "ALLOWED_HOSTS": "127.0.0.1"}
    return tmp, env


def assert_nothing_loaded_while_streaming(seen):
    assert seen is not None, "the process never connected to the upstream"
    assert not seen["warm_up_pending"], (
        f"a stream started before the warm-up had loaded: {seen['warm_up_pending']}"
    )
    assert not seen["imported"], f"imported while streaming: {seen['imported']}"
    large = [c for c in seen["compiled"] if c[0] >= LARGE_PATTERN_CHARS]
    assert not large, f"compiled while streaming: {large}"


def test_a_server_starts_streams_warm_and_imports_nothing_while_they_run(fresh_env):
    _, env = fresh_env
    seen = last_json(output([sys.executable, "-c", SCRIPT], env, timeout=120))
    assert_nothing_loaded_while_streaming(seen)


def test_a_warming_server_answers_and_its_first_stream_waits_for_the_warm_up(fresh_env):
    _, env = fresh_env
    assert last_json(output([sys.executable, "-c", HELD], env, timeout=120)) == {
        "page while warming": 200,
        "warm-up done then": False,
        "stream then": ["pending", False],
        "stream at the end": "completed",
    }


def test_manage_py_record_starts_its_streams_warm_and_imports_nothing_while_they_run(
    fresh_env, simulator_process
):
    tmp, env = fresh_env
    out = tmp / "seen.json"
    watched = [sys.executable, "-m", "tests.support.streaming_loads", str(out)]
    watched += [str(simulator_process.port), "record", "--prompt", "Tell me about Utrecht"]
    watched += ["--count", "20", "--concurrency", "20", "--json"]
    lines = output(watched + ["--upstream", simulator_process.base_url], env, timeout=120)
    assert [json.loads(line)["status"] for line in lines.splitlines()] == ["completed"] * 20
    assert_nothing_loaded_while_streaming(json.loads(out.read_text()))
