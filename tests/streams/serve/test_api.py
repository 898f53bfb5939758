"""The JSON API: auth (session + CSRF, bearer tokens), validation, limits, access, cancel."""

import asyncio
import io
import json

import pytest
from django.core.management import call_command
from django.test import AsyncClient

from streams.models import ApiToken, Event, Finding, Stream
from streams.run import runner
from streams.serve.api import stream_summary
from tests.support.clients import HeaderClient, bearer, session
from tests.support.recording import wait_finished

pytestmark = pytest.mark.django_db(transaction=True)


async def post(client, path, data, **kwargs):
    return await client.post(path, json.dumps(data), content_type="application/json", **kwargs)


FAST = {"time_scale": 0.05}


class TestAuth:
    async def test_it_returns_401_json_for_anonymous_requests(self, people):
        r = await AsyncClient().get("/api/streams/")
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "not_authenticated"
        assert r["WWW-Authenticate"].startswith("Bearer")
        r = await post(AsyncClient(), "/api/streams/", {"input": "hi"})
        assert r.status_code == 401

    async def test_it_returns_401_for_unknown_and_revoked_tokens(self, people):
        r = await HeaderClient({"authorization": "Bearer ss_nope"}).get("/api/streams/")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token"
        r = await HeaderClient({"authorization": "Basic abc"}).get("/api/streams/")
        assert r.status_code == 401
        await ApiToken.objects.filter(user=people.owner).aupdate(revoked=True)
        r = await bearer(people.owner).get("/api/streams/")
        assert r.status_code == 401

    async def test_a_token_records_when_it_was_used(self, people):
        assert (await ApiToken.objects.aget(user=people.owner)).last_used_at is None
        r = await bearer(people.owner).get("/api/streams/")
        assert r.status_code == 200
        assert (await ApiToken.objects.aget(user=people.owner)).last_used_at is not None

    async def test_session_posts_need_the_csrf_token(self, people, upstream):
        client = session(people.owner, enforce_csrf_checks=True)
        r = await post(client, "/api/streams/", {"input": "hi", "metadata": FAST})
        assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_failed"
        secret = "a" * 32
        client.cookies["csrftoken"] = secret
        r = await post(
            client,
            "/api/streams/",
            {"input": "hi", "metadata": FAST},
            headers={"X-CSRFToken": secret},
        )
        assert r.status_code == 201, r.content
        await wait_finished(r.json()["id"])

    async def test_bearer_posts_are_csrf_exempt(self, people, upstream):
        r = await post(
            bearer(people.owner, enforce_csrf_checks=True),
            "/api/streams/",
            {"input": "hi", "metadata": FAST},
        )
        assert r.status_code == 201
        await wait_finished(r.json()["id"])

    def test_create_token_prints_a_working_token(self, people):
        out = io.StringIO()
        call_command("create_token", "stranger", "--name", "ci", stdout=out)
        token = out.getvalue().strip()
        assert token.startswith("ss_")
        row = ApiToken.objects.get(digest=ApiToken.hash(token))
        assert row.user == people.stranger and row.name == "ci" and token[:10] == row.prefix
        assert token not in str(ApiToken.objects.values_list())  # only the digest is stored


class TestCreate:
    async def test_it_starts_a_stream_and_reports_it(self, people, upstream):
        r = await post(
            bearer(people.owner),
            "/api/streams/",
            {"input": "Tell me about Utrecht", "model": "auto", "metadata": FAST},
        )
        assert r.status_code == 201
        created = r.json()
        assert created["ws"] == f"/ws/streams/{created['id']}/"
        assert created["url"] == f"/api/streams/{created['id']}/"
        await wait_finished(created["id"])
        r = await bearer(people.owner).get(created["url"])
        s = r.json()
        assert s["status"] == "completed" and s["source"] == "live"
        assert s["requested_model"] == "auto" and s["resolved_model"] not in ("", "auto")
        assert s["routing"]["category"] and s["upstream_id"].startswith("resp_")
        assert s["http_status"] == 200 and s["error"] is None
        assert s["event_count"] == await Event.objects.filter(stream_id=s["id"]).acount()
        m = s["milestones_us"]
        assert m["request_written"] < m["first_token"] < m["terminal"] <= m["closed"]
        assert s["ttft_ms"] > 0 and s["duration_ms"] > s["ttft_ms"] and s["tokens_per_s"] > 0
        assert s["output_text"] and s["output_text"] == s["final_text"]
        assert s["findings"] == [] and s["started_at"] and s["finished_at"]
        assert s["request"]["input"] == "Tell me about Utrecht"

    async def test_options_reach_the_upstream_request(self, people, upstream):
        r = await post(
            bearer(people.owner),
            "/api/streams/",
            {
                "input": "Hallo",
                "model": "gpt-oss-20b",
                "scenario": "gap",
                "instructions": "Be brief.",
                "temperature": 0.2,
                "max_output_tokens": 50,
                "metadata": FAST,
            },
        )
        assert r.status_code == 201
        stream = await wait_finished(r.json()["id"])
        assert stream.request_body == {
            "model": "gpt-oss-20b",
            "input": "Hallo",
            "stream": True,
            "instructions": "Be brief.",
            "temperature": 0.2,
            "max_output_tokens": 50,
            "metadata": {"time_scale": 0.05, "scenario": "gap"},
        }
        s = (await bearer(people.owner).get(f"/api/streams/{stream.pk}/")).json()
        gap = [f for f in s["findings"] if f["code"] == "sequence_gap"]
        assert gap and set(gap[0]) == {
            "code",
            "severity",
            "event_index",
            "expected",
            "got",
            "detail",
        }

    async def test_a_chat_completions_stream_is_sent_and_recorded_as_chat(self, people, upstream):
        r = await post(
            bearer(people.owner),
            "/api/streams/",
            {
                "input": "Tell me about Utrecht",
                "format": "chat",
                "instructions": "Be brief.",
                "max_output_tokens": 80,
                "metadata": FAST,
            },
        )
        assert r.status_code == 201, r.content
        stream = await wait_finished(r.json()["id"])
        # the format's own request, to its own path: never a Responses body sent as chat
        assert stream.request_body == {
            "model": "auto",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Tell me about Utrecht"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_completion_tokens": 80,
            "metadata": {"time_scale": 0.05},
        }
        assert stream.upstream_url.endswith("/v1/chat/completions")
        assert (stream.format, stream.status, stream.source) == ("chat", "completed", "live")
        assert stream.prompt == "Tell me about Utrecht" and stream.output_text
        assert stream.usage_source == "reported" and stream.output_tokens > 0  # include_usage
        assert stream.upstream_id.startswith("chatcmpl-") and stream.findings_count == 0
        s = (await bearer(people.owner).get(f"/api/streams/{stream.pk}/")).json()
        assert s["format"] == "chat" and s["output_text"] == stream.output_text

    async def test_a_messages_stream_is_sent_and_recorded_as_messages(self, people, upstream):
        r = await post(
            bearer(people.owner),
            "/api/streams/",
            {"input": "Hallo", "format": "messages", "instructions": "Kort.", "metadata": FAST},
        )
        assert r.status_code == 201, r.content
        stream = await wait_finished(r.json()["id"])
        assert stream.request_body == {
            "model": "auto",
            "messages": [{"role": "user", "content": "Hallo"}],
            "stream": True,
            "max_tokens": 4096,  # (Anthropic requires it)
            "system": "Kort.",
            "metadata": {"time_scale": 0.05},
        }
        assert stream.upstream_url.endswith("/v1/messages")
        assert (stream.format, stream.status) == ("messages", "completed")
        assert stream.upstream_id.startswith("msg_") and stream.output_text
        assert stream.usage_source == "reported" and stream.findings_count == 0

    @pytest.mark.parametrize(
        "format, scenario, code, status",
        [
            # (the end event came, the format's promise broken: as through the proxy)
            ("chat", "missing_done", "done_missing", "completed"),
            ("messages", "never_stopped", "block_never_stopped", "completed"),
        ],
    )
    async def test_each_format_has_its_own_scenarios(
        self, people, upstream, format, scenario, code, status
    ):
        data = {"input": "Hi", "format": format, "scenario": scenario, "metadata": FAST}
        r = await post(bearer(people.owner), "/api/streams/", data)
        assert r.status_code == 201, r.content
        stream = await wait_finished(r.json()["id"])
        codes = [
            c async for c in Finding.objects.filter(stream=stream).values_list("code", flat=True)
        ]
        assert (stream.format, codes, stream.status) == (format, [code], status)

    @pytest.mark.parametrize(
        "data,field",
        [
            ({"input": "hi", "format": "grpc"}, "format"),
            # a Responses scenario is not Chat's (the simulator would refuse it upstream)
            ({"input": "hi", "format": "chat", "scenario": "gap"}, "scenario"),
            ({"input": "hi", "format": "messages", "scenario": "missing_done"}, "scenario"),
            ({}, "input"),
            ({"input": "   "}, "input"),
            ({"input": "x" * 101}, "input"),
            ({"input": 5}, "input"),
            ({"input": "hi", "temperature": "hot"}, "temperature"),
            ({"input": "hi", "temperature": 3}, "temperature"),
            ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
            ({"input": "hi", "max_output_tokens": 1.5}, "max_output_tokens"),
            ({"input": "hi", "scenario": "nope"}, "scenario"),
            ({"input": "hi", "model": "a b"}, "model"),
            ({"input": "hi", "metadata": ["x"]}, "__all__"),
            ({"input": "hi", "metadata": {"k": "v" * 600}}, "__all__"),
        ],
    )
    async def test_it_rejects_invalid_input_with_clear_errors(self, people, settings, data, field):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_INPUT_CHARS": 100}
        r = await post(bearer(people.owner), "/api/streams/", data)
        assert r.status_code == 400, r.content
        error = r.json()["error"]
        assert error["code"] == "invalid" and field in error["fields"] and error["message"]
        assert await Stream.objects.acount() == 0

    async def test_it_rejects_bodies_that_are_not_json_objects(self, people):
        client = bearer(people.owner)
        for raw in ("{nope", "[1]"):
            r = await client.post("/api/streams/", raw, content_type="application/json")
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"

    async def test_it_enforces_the_per_user_limit(self, people, settings, upstream):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_CONCURRENT_PER_USER": 2}
        for status in ("pending", "streaming"):
            await Stream.objects.acreate(user=people.owner, status=status)
        await Stream.objects.acreate(user=people.owner, status="completed")
        r = await post(bearer(people.owner), "/api/streams/", {"input": "hi"})
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "too_many_streams"
        assert "at most 2" in r.json()["error"]["message"]
        # other users have their own budget
        r = await post(bearer(people.stranger), "/api/streams/", {"input": "hi", "metadata": FAST})
        assert r.status_code == 201
        await wait_finished(r.json()["id"])


class TestRead:
    async def test_strangers_get_404_and_staff_see_everything(self, people, upstream):
        stream = await Stream.objects.acreate(user=people.owner, status="completed")
        for path in (f"/api/streams/{stream.pk}/", f"/api/streams/{stream.pk}/events/"):
            assert (await bearer(people.stranger).get(path)).status_code == 404
            assert (await bearer(people.staff).get(path)).status_code == 200
            assert (await bearer(people.owner).get(path)).status_code == 200
        r = await post(bearer(people.stranger), f"/api/streams/{stream.pk}/cancel/", {})
        assert r.status_code == 404
        listed = (await bearer(people.stranger).get("/api/streams/")).json()["streams"]
        assert listed == []
        # a list is of one project: the token's user's own, or the one named
        assert (await bearer(people.staff).get("/api/streams/")).json()["streams"] == []
        r = await bearer(people.stranger).get("/api/streams/?project=owner")
        assert r.status_code == 404  # (not a member: whether it exists is not told)
        # a token works in its own project only, staff's too (a session may name any project)
        r = await bearer(people.staff).get("/api/streams/?project=owner")
        assert r.status_code == 404
        staff = session(people.staff)
        listed = (await staff.get("/api/streams/?project=owner")).json()["streams"]
        assert [s["id"] for s in listed] == [stream.pk]

    async def test_events_come_in_pages(self, people):
        stream = await Stream.objects.acreate(user=people.owner, status="completed")
        await Event.objects.abulk_create(
            Event(stream=stream, index=i, type="t", sequence_number=i, t_us=i, data=f"d{i}")
            for i in range(25)
        )
        client = bearer(people.owner)
        r = (await client.get(f"/api/streams/{stream.pk}/events/?after=9&limit=10")).json()
        assert [e["index"] for e in r["events"]] == list(range(10, 20))
        assert r["events"][0] == {
            "index": 10,
            "type": "t",
            "sequence_number": 10,
            "t_us": 10,
            "data": "d10",
        }
        assert r["has_more"] is True and r["next_after"] == 19 and r["status"] == "completed"
        r = (await client.get(f"/api/streams/{stream.pk}/events/?after=19&limit=10")).json()
        assert len(r["events"]) == 5 and r["has_more"] is False and r["next_after"] == 24
        r = await client.get(f"/api/streams/{stream.pk}/events/?limit=0")
        assert r.status_code == 400 and "limit" in r.json()["error"]["fields"]

    async def test_the_list_pages_backwards(self, people):
        ids = [(await Stream.objects.acreate(user=people.owner)).pk for _ in range(5)]
        client = bearer(people.owner)
        r = (await client.get("/api/streams/?limit=2")).json()
        assert [s["id"] for s in r["streams"]] == ids[:-3:-1]
        r = (await client.get(f"/api/streams/?limit=2&before={r['next_before']}")).json()
        assert [s["id"] for s in r["streams"]] == [ids[2], ids[1]]

    async def test_the_upstream_key_never_leaves(self, people, settings):
        settings.UPSTREAM_API_KEY = "sk-very-secret-123"
        stream = await Stream.objects.acreate(
            user=people.owner,
            status="failed",
            resolved_model="echo-sk-very-secret-123",
            upstream_id="resp_sk-very-secret-123",
            error_code="invalid_api_key",
            error_message="Incorrect API key provided: sk-very-secret-123",
            parts=[{"output_index": 0, "type": "function_call", "name": "sk-very-secret-123"}],
        )
        data = json.dumps({"type": "error", "message": "bad key sk-very-secret-123"})
        await Event.objects.acreate(stream=stream, index=0, type="error", t_us=1, data=data)
        client = bearer(people.owner)
        summary = await client.get(f"/api/streams/{stream.pk}/")
        events = await client.get(f"/api/streams/{stream.pk}/events/")
        listed = await client.get("/api/streams/")
        for r in (summary, events, listed):
            assert r.status_code == 200 and b"sk-very-secret" not in r.content
        s = summary.json()
        assert s["error"]["message"] == "Incorrect API key provided: [redacted]"
        assert s["resolved_model"] == "echo-[redacted]" and s["upstream_id"] == "resp_[redacted]"
        assert s["parts"][0]["name"] == "[redacted]"
        assert events.json()["events"][0]["data"] == data.replace(
            "sk-very-secret-123", "[redacted]"
        )
        assert listed.json()["streams"][0]["resolved_model"] == "echo-[redacted]"

    def test_the_summary_lists_findings(self, people):
        stream = Stream.objects.create(user=people.owner, status="completed")
        Finding.objects.create(
            stream=stream,
            code="sequence_gap",
            severity="error",
            event_index=4,
            expected="3",
            got="4",
        )
        s = stream_summary(stream)
        assert s["findings"] == [
            {
                "code": "sequence_gap",
                "severity": "error",
                "event_index": 4,
                "expected": "3",
                "got": "4",
                "detail": "",
            }
        ]


class TestCancel:
    async def test_a_running_stream_is_cancelled_then_409(self, people, upstream):
        client = bearer(people.owner)
        r = await post(client, "/api/streams/", {"input": "hi", "metadata": {"time_scale": 1.0}})
        stream_id = r.json()["id"]
        while not await Event.objects.filter(stream_id=stream_id).aexists():
            await asyncio.sleep(0.02)
        r = await post(client, f"/api/streams/{stream_id}/cancel/", {})
        assert r.status_code == 202 and r.json() == {"id": stream_id, "status": "cancelling"}
        stream = await wait_finished(stream_id, timeout=2)
        assert stream.status == "cancelled"
        r = await post(client, f"/api/streams/{stream_id}/cancel/", {})
        assert r.status_code == 409 and r.json()["error"]["code"] == "finished"

    async def test_a_stream_running_elsewhere_cannot_be_cancelled_here(self, people):
        stream = await Stream.objects.acreate(user=people.owner, status="streaming")
        r = await post(bearer(people.owner), f"/api/streams/{stream.pk}/cancel/", {})
        assert r.status_code == 409 and r.json()["error"]["code"] == "not_running_here"

    async def test_get_is_not_allowed(self, people):
        stream = await Stream.objects.acreate(user=people.owner, status="streaming")
        r = await bearer(people.owner).get(f"/api/streams/{stream.pk}/cancel/")
        assert r.status_code == 405 and r["Allow"] == "POST"
        assert runner.running_here() == set() or stream.pk not in runner.running_here()
