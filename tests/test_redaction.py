"""The upstream key never leaves, however a hostile upstream echoes it: raw, in JSON `\\u`
escapes, in error bodies, deltas, tool names, model ids, event types and SSE fields. A raw
HTTP server stands in for the upstream (127.0.0.1 only); the streams it sends are recorded by a
real Daphne and read back through every way out: API, exports, pages, WebSocket frames."""

import asyncio
import html
import json

import httpx
import pytest
from websockets.asyncio.client import connect

from streams.models import Stream
from streams.store import known_secrets, public
from tests.conftest import DaphneServer
from tests.support.hostile import KEY, RawUpstream, copies, escaped, hostile
from tests.support.recording import finished

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_search_finds_every_form():
    assert copies(f"a {KEY}") == 1
    assert copies(json.dumps({"d": json.dumps({"m": KEY})})) == 1
    assert copies(escaped(KEY, 3, upper=True)) == 1
    assert copies("\\\\u0073" + KEY[1:]) == 1
    assert copies(html.escape(f"<{KEY}>")) == 1
    assert copies("sk-hostile") == 0


# ---- the redaction itself -----------------------------------------------------------------------


class TestDecodedRedaction:
    @pytest.fixture(autouse=True)
    def key(self, settings):
        settings.UPSTREAM_API_KEY = KEY
        settings.UPSTREAM_BASE_URL = ""

    @pytest.mark.parametrize(
        "text",
        [
            f"raw {KEY}",
            "\\u0073" + KEY[1:],
            escaped(KEY),
            escaped(KEY, 2, upper=True),
            "\\\\u0073" + KEY[1:],  # the same data, inside a JSON document
            json.dumps({"data": json.dumps({"m": escaped(KEY, 3)}, ensure_ascii=False)}),
        ],
    )
    def test_every_spelling_is_redacted_wherever_it_leaves(self, text):
        assert copies(text) == 1
        assert copies(known_secrets.redact(text)) == 0
        assert copies(known_secrets.redact_bytes(text.encode()).decode()) == 0
        assert copies(known_secrets.redact(public.dumps({"data": text}))) == 0
        assert copies(known_secrets.redact(json.dumps([{"x": text}]))) == 0

    def test_redacted_json_stays_json_and_other_escapes_stay(self):
        data = '{"m":"' + escaped(KEY) + ' caf\\u00e9 \\u0073"}'  # real JSON escapes
        assert json.loads(data) == {"m": f"{KEY} café s"}
        out = known_secrets.redact(public.dumps({"data": data}))
        assert json.loads(json.loads(out)["data"]) == {"m": "[redacted] café s"}

    def test_the_key_case_counts_only_in_hex(self):
        other = "\\u0053" + KEY[1:8]  # S, not s: 7 characters of the key, no fragment
        assert known_secrets.redact(other) == other
        # s: 8 characters of the key, a fragment
        assert known_secrets.redact("\\u0073" + KEY[1:8]) == "[redacted]"

    def test_without_a_key_nothing_is_searched(self, settings):
        settings.UPSTREAM_API_KEY = ""
        # (credential shapes are searched for always, unless none are configured)
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "REDACT_KEY_PREFIXES": ""}
        text = escaped(KEY)
        assert known_secrets.redact(text) is text and not known_secrets.rules()

    def test_without_a_key_a_credential_shape_is_still_redacted(self, settings):
        # a pass-through client's key, which the server never knew (docs/security.md)
        settings.UPSTREAM_API_KEY = ""
        text = escaped(KEY)
        assert known_secrets.redact(text) == "[redacted]"
        assert "hostile" not in known_secrets.redact(public.dumps([text, f"key {KEY} echoed"]))


class TestUrlCredentials:
    def test_upstream_url_loses_its_credentials(self, settings):
        settings.UPSTREAM_API_KEY = ""
        stream = Stream(upstream_url="https://bob:s3cret-pass-99@up.test/v1/responses")
        assert (
            known_secrets.redact(stream.upstream_url) == "https://[redacted]@up.test/v1/responses"
        )
        assert stream.upstream_url.startswith("https://bob:")  # the row keeps what came
        assert known_secrets.redact("https://up.test/v1?a=b@c") == "https://up.test/v1?a=b@c"

    def test_the_base_urls_password_is_a_secret_wherever_it_shows(self, settings):
        settings.UPSTREAM_API_KEY = ""
        settings.UPSTREAM_BASE_URL = "https://bob:s3cret%2Dpass-99@up.test/v1"
        assert known_secrets.redact("echo: s3cret-pass-99") == "echo: [redacted]"
        assert known_secrets.redact(public.dumps({"m": "s3cret%2Dpass-99"})) == '{"m":"[redacted]"}'
        assert "s3cret" not in known_secrets.redact(settings.UPSTREAM_BASE_URL)


# ---- end to end: a real Daphne recording the hostile upstream ----------------------------------


@pytest.fixture(scope="module")
def hostile_upstream():
    server = RawUpstream(hostile)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def daphne_with_key(django_db_setup, hostile_upstream, _relay_db_connections):
    server = DaphneServer(hostile_upstream.base_url, env={"UPSTREAM_API_KEY": KEY})
    yield server
    server.stop()


async def _frames(server, path, user, timeout=20):
    frames = []
    async with connect(
        server.ws_url + path,
        origin=server.origin,
        additional_headers={"Cookie": user.cookie},
        max_size=None,
        open_timeout=10,
    ) as ws:
        try:
            async with asyncio.timeout(timeout):
                async for message in ws:
                    frames.append(message)
                    if path == "/ws/streams/":  # the live list never ends: its first frame
                        break
        except TimeoutError:
            pass
    return frames


class TestHostileUpstream:
    async def test_no_copy_of_the_key_leaves_in_any_form(self, people, daphne_with_key):
        server, owner = daphne_with_key, people.owner
        bearer = {"Authorization": f"Bearer {owner.token}"}
        async with httpx.AsyncClient(base_url=server.url, timeout=15) as client:
            ids = []
            for mode in ("stream", "401", "error_event"):
                r = await client.post(
                    "/api/streams/",
                    json={"input": "hi", "metadata": {"hostile": mode}},
                    headers=bearer,
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
            streams = [await finished(i) for i in ids]
            # the upstream really echoed it, and the database keeps what came, verbatim
            assert streams[0].status == "completed" and streams[1].status == "failed"
            assert KEY in streams[0].resolved_model + streams[0].output_text
            assert KEY in streams[1].error_message

            fetched = {}
            page = {"Cookie": owner.cookie}
            for sid in ids:
                for path in (f"/api/streams/{sid}/", f"/api/streams/{sid}/events/"):
                    fetched[path] = await client.get(path, headers=bearer)
                events = fetched[f"/api/streams/{sid}/events/"].json()["events"]
                for path in (
                    f"/streams/{sid}.sse",
                    f"/streams/{sid}.json",
                    f"/streams/{sid}/",
                    f"/streams/{sid}/events/",
                    *(f"/streams/{sid}/events/{e['index']}/" for e in events),
                ):
                    fetched[path] = await client.get(path, headers=page)
            fetched["/api/streams/"] = await client.get("/api/streams/", headers=bearer)
            fetched["/"] = await client.get("/", headers=page)
        for path, r in fetched.items():
            assert r.status_code == 200, (path, r.status_code)
        frames = {}
        for sid in ids:
            frames[sid] = await _frames(server, f"/ws/streams/{sid}/", owner)
            assert frames[sid], sid
        frames["list"] = await _frames(server, "/ws/streams/", owner)

        leaks = {path: copies(r.text) for path, r in fetched.items() if copies(r.text)}
        leaks |= {f"ws {k}": n for k, fs in frames.items() if (n := sum(map(copies, fs)))}
        assert leaks == {}
        # …and the redaction shows where the key was, not an empty page
        summary = fetched[f"/api/streams/{ids[0]}/"].json()
        assert "[redacted]" in summary["resolved_model"]
        assert "[redacted]" in fetched[f"/api/streams/{ids[1]}/"].json()["error"]["message"]
        assert "[redacted]" in fetched[f"/streams/{ids[0]}.sse"].text
