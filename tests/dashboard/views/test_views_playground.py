"""The playground pages and their POSTs: access (anonymous → login, other users → 404),
validation messages, the per-user limit, history rendered from the stored streams, sending
and retrying for real against the simulator."""

import asyncio
import json
import re

import pytest
from django.test import AsyncClient, Client

from dashboard.models import Conversation, Turn
from streams.models import Stream
from tests.conftest import log_in_people

JSON = {"HTTP_ACCEPT": "application/json"}


def add_turn(conversation, prompt, status=Stream.Status.COMPLETED, **fields):
    stream = Stream.objects.create(
        user=conversation.user,
        status=status,
        request_body={"model": "auto", "input": [{"role": "user", "content": prompt}]},
        requested_model="auto",
        **fields,
    )
    position = conversation.turns.count()
    return Turn.objects.create(
        conversation=conversation, position=position, prompt=prompt, stream=stream
    )


def text_parts(*texts, **extra):
    parts = [
        {"content_index": i, "type": "output_text", "text": t, "done": True}
        for i, t in enumerate(texts)
    ]
    parts[0].update(extra)
    return [{"output_index": 0, "type": "message", "id": "msg_1", "parts": parts}]


class Base:
    """An owner with a conversation, a stranger and a staff member, each logged in."""

    @pytest.fixture(autouse=True)
    def _people(self, db, settings):
        settings.UPSTREAM_BASE_URL = ""  # the built-in simulator's catalogue, no HTTP
        log_in_people(self)
        self.conversation = Conversation.objects.create(user=self.owner, title="About Utrecht")

    def url(self):
        return f"/playground/{self.conversation.pk}/"

    def send(self, client=None, conversation=True, accept_json=True, **data):
        path = f"{self.url()}send/" if conversation else "/playground/send/"
        headers = JSON if accept_json else {}
        return (client or self.owner_client).post(path, {"input": "Hi", **data}, **headers)


class TestPlayground(Base):
    def test_it_redirects_anonymous_users_to_login(self):
        r = Client().get("/playground/")
        assert r.status_code == 302 and r["Location"].startswith("/login/")

    def test_it_shows_the_composer_with_models_scenarios_and_speeds(self):
        r = self.owner_client.get("/playground/")
        assert r.status_code == 200
        html = r.content.decode()
        assert 'aria-current="page">Playground' in html.replace("\n", "")
        assert '<option value="auto" selected>auto (router)</option>' in html
        assert '<option value="gpt-oss-20b">gpt-oss-20b</option>' in html
        assert '<option value="tools"' in html and '<option value="xss"' in html
        assert '<option value="0.25">4× faster</option>' in html
        assert 'action="/playground/send/"' in html
        assert "New conversation" in html

    def test_it_lists_only_my_conversations(self):
        Conversation.objects.create(user=self.stranger, title="Secret plans")
        html = self.owner_client.get("/playground/").content.decode()
        assert "About Utrecht" in html and "Secret plans" not in html

    def test_it_offers_no_scenarios_for_a_real_upstream(self, settings):
        settings.UPSTREAM_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens: fallback list
        settings.UPSTREAM_MODELS = ["m-large", "m-small"]
        html = self.owner_client.get("/playground/").content.decode()
        assert '<option value="m-small">m-small</option>' in html
        assert 'name="scenario"' not in html and 'name="speed"' not in html


class TestFormats(Base):
    def test_the_composer_offers_each_format_with_its_own_scenarios(self):
        html = self.owner_client.get("/playground/").content.decode()
        formats = html.split('id="pg-format"')[1].split("</select>")[0]
        assert re.findall(r'<option value="(\w+)"', formats) == ["responses", "chat", "messages"]
        assert '<option value="responses" selected>' in formats  # (no answer yet)
        groups = dict(re.findall(r'<optgroup label="[^"]+" data-format="(\w+)"(.*?)</optgroup>',
                                 html.split('id="pg-scenario"')[1], re.S))  # fmt: skip
        assert set(groups) == {"responses", "chat", "messages"}
        assert 'value="http_429"' in groups["responses"]
        assert 'value="missing_done"' in groups["chat"] and "http_429" not in groups["chat"]
        assert 'value="never_stopped"' in groups["messages"]

    def test_a_conversation_opens_in_the_format_its_last_answer_spoke(self):
        add_turn(self.conversation, "Hi", format="chat")
        html = self.owner_client.get(self.url()).content.decode()
        assert '<option value="chat" selected>Chat Completions</option>' in html

    def test_a_scenario_of_another_format_is_refused(self):
        r = self.send(format="chat", scenario="gap")
        assert r.status_code == 400
        assert r.json()["message"].startswith("Scenario: Unknown scenario 'gap'; one of: ")
        assert "missing_done" in r.json()["message"]
        assert not Stream.objects.exists()


class TestComposerDefaults(Base):
    def test_a_new_conversation_resets_scenario_and_speed_but_keeps_the_model(self):
        self.conversation.model = "gpt-oss-20b"
        self.conversation.scenario = "stall"
        self.conversation.speed = "0"
        self.conversation.save()
        html = self.owner_client.get("/playground/").content.decode()
        assert '<option value="gpt-oss-20b" selected>' in html
        assert '<option value="stall" title=' in html and 'value="stall" title="' in html
        assert "selected>stall" not in html.replace('"', "")
        assert '<option value="1" selected>Real time</option>' in html
        # the conversation itself keeps what it was sent with
        html = self.owner_client.get(self.url()).content.decode()
        assert '<option value="0" selected>Instant</option>' in html

    def test_scenarios_carry_their_descriptions_and_speeds_are_in_order(self):
        html = self.owner_client.get("/playground/").content.decode()
        assert 'value="http_429" title="429 with a JSON error body and Retry-After."' in html
        assert 'id="pg-scenario-help"' in html
        speed = html.split('id="pg-speed"')[1].split("</select>")[0]
        assert re.findall(r'<option value="([\d.]+)"', speed) == ["2", "1", "0.5", "0.25", "0"]


class TestNotices(Base):
    def notice(self, **fields):
        turn = add_turn(self.conversation, "Hi", status=Stream.Status.FAILED, **fields)
        html = self.owner_client.get(self.url()).content.decode()
        return html, turn

    def test_an_http_refusal_names_its_status(self):
        html, _ = self.notice(http_status=429, error_code="rate_limited", error_message="Slow down")
        assert "The upstream answered HTTP 429 (rate limited: wait before retrying)" in html
        assert "rate_limited: Slow down" in html

    def test_a_wrong_content_type_says_what_came(self):
        html, _ = self.notice(
            http_status=200,
            content_type="application/json",
            error_code="wrong_content_type",
            error_message="expected text/event-stream, got 'application/json'",
        )
        assert "The upstream answered HTTP 200 with application/json, not an event stream" in html
        assert "reported an error" not in html

    def test_an_answer_with_findings_says_so(self):
        from streams.models import Finding

        turn = add_turn(self.conversation, "Hi", findings_count=2)
        for code in ("sequence_gap", "duplicate_event"):
            Finding.objects.create(stream=turn.stream, code=code, severity="warning", detail="x")
        html = self.owner_client.get(self.url()).content.decode()
        assert f'href="/streams/{turn.stream.pk}/#findings"' in html
        badge = html.split('class="pg-findings"')[1].split("</a>")[0]
        assert (
            'class="sev-pill sev-pill-warning" title="2 warnings: something to look at">2 warn<'
            in badge
        )
        assert "duplicate_event, sequence_gap" in html


class TestCompare(Base):
    def compare(self, client=None, **data):
        body = {"input": "Hi", "models": ["auto", "gpt-oss-20b"], "speed": "0", **data}
        return (client or self.owner_client).post("/playground/compare/send/", body, **JSON)

    def test_the_page_offers_every_model_with_two_chosen(self):
        r = self.owner_client.get("/playground/compare/")
        assert r.status_code == 200
        html = r.content.decode()
        assert 'name="models" value="auto" checked' in html
        assert 'name="models" value="gpt-oss-120b" checked' in html
        assert 'name="models" value="eu-reasoner">' in html
        assert Client().get("/playground/compare/").status_code == 302

    @pytest.mark.parametrize("models", [["auto"], ["auto", "auto"], ["a", "b"], []])
    def test_it_wants_two_to_four_known_models(self, models):
        r = self.compare(models=models)
        assert r.status_code == 400
        assert Stream.objects.filter(user=self.owner).count() == 0

    def test_five_models_are_too_many(self):
        models = ["auto", "gpt-oss-20b", "gpt-oss-120b", "qwen3-coder", "eu-reasoner"]
        r = self.compare(models=models)
        assert r.status_code == 400 and "2 to 4" in r.json()["message"]

    def test_it_says_when_there_are_not_enough_slots_and_starts_none(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_CONCURRENT_PER_USER": 5}
        for _ in range(3):
            Stream.objects.create(user=self.owner, status=Stream.Status.STREAMING)
        models = ["auto", "gpt-oss-20b", "gpt-oss-120b"]
        r = self.compare(models=models)
        assert r.status_code == 429
        assert r.json()["message"] == (
            "A compare of 3 models needs 3 free stream slots; you have 2 (at most 5 streams at "
            "a time, 3 running). Wait for some to finish, stop them, or choose fewer models."
        )
        assert Stream.objects.filter(user=self.owner).count() == 3


@pytest.mark.django_db(transaction=True)
class TestCompareForReal:
    async def test_one_message_starts_one_stream_per_model(self, people, upstream):
        client = logged_in(people.owner)
        body = {"input": "Tell me about Utrecht", "models": ["auto", "gpt-oss-20b"], "speed": "0"}
        r = await client.post("/playground/compare/send/", body)
        assert r.status_code == 201, r.content
        shown = r.json()["streams"]
        assert [s["model"] for s in shown] == ["auto", "gpt-oss-20b"]
        for s in shown:
            assert s["ws"] == f"/ws/streams/{s['id']}/" and s["timeline"] == f"/streams/{s['id']}/"
            stream = await finished(s["id"])
            assert stream.status == "completed" and stream.user_id == people.owner.pk
            assert stream.request_body["model"] == s["model"]
            assert stream.request_body["input"] == "Tell me about Utrecht"
        stranger = logged_in(people.stranger)
        assert (await stranger.get(shown[0]["timeline"])).status_code == 404


class TestConversation(Base):
    def test_it_renders_finished_turns_from_their_streams(self):
        add_turn(
            self.conversation,
            "Tell me about <b>Utrecht</b>",
            parts=text_parts("Utrect is a citty.", done_text="Utrecht is a city."),
            final_text="Utrecht is a city.",
            resolved_model="gpt-oss-120b",
            routing_category="general",
            routing_reasoning="plain question <script>",
            ttft_ms=251.4,
            tokens_per_s=38.25,
        )
        r = self.owner_client.get(self.url())
        assert r.status_code == 200
        html = r.content.decode()
        assert "Tell me about &lt;b&gt;Utrecht&lt;/b&gt;" in html
        assert ">Utrecht is a city.</div>" in html  # the final text replaces the draft…
        assert "Utrect is a citty." in html and "Streamed draft" in html  # …kept one click away
        assert 'title="plain question &lt;script&gt;"' in html
        assert "gpt-oss-120b" in html and "general" in html
        assert "<b>251</b> ms" in html and "<b>38.3</b> deltas/s" in html
        stream_id = self.conversation.turns.get().stream_id
        assert f'href="/streams/{stream_id}/"' in html
        assert 'data-active="true"' not in html

    def test_it_renders_tool_calls_as_cards(self):
        parts = [
            {
                "output_index": 0,
                "type": "function_call",
                "name": "get_weather",
                "call_id": "call_1",
                "arguments": '{"city":"Utrecht"}',
                "status": "completed",
                "output": '{"temp_c": 11}',
            },
            *[{**p, "output_index": 1} for p in text_parts("It is 11 °C.")],
        ]
        add_turn(self.conversation, "Weather?", parts=parts)
        html = self.owner_client.get(self.url()).content.decode()
        # the timeline's card (templates/dashboard/output.html renders both pages' output)
        assert '<strong class="mono tool-name">get_weather</strong>' in html
        assert "&quot;city&quot;: &quot;Utrecht&quot;" in html  # pretty-printed, escaped
        assert "&quot;temp_c&quot;: 11" in html and "It is 11 °C." in html

    def test_a_streaming_turn_is_marked_for_the_script_to_reattach(self):
        turn = add_turn(self.conversation, "Hi", status=Stream.Status.STREAMING)
        html = self.owner_client.get(self.url()).content.decode()
        assert f'data-stream="{turn.stream_id}" data-status="streaming"' in html
        assert 'data-active="true"' in html

    def test_a_stopped_answer_keeps_its_text_and_offers_a_retry(self):
        turn = add_turn(
            self.conversation,
            "Hi",
            status=Stream.Status.CANCELLED,
            parts=text_parts("Half an ans"),
            output_text="Half an ans",
        )
        html = self.owner_client.get(self.url()).content.decode()
        assert "Half an ans" in html and "Stopped." in html
        assert f"/turns/{turn.pk}/retry/" in html

    def test_an_upstream_that_echoes_the_key_never_shows_it(self, settings):
        key = settings.UPSTREAM_API_KEY = "sk-echoed-upstream-key-42"
        turn = add_turn(
            self.conversation,
            "Hi",
            status=Stream.Status.FAILED,
            parts=text_parts(f"Half an answer with {key}"),
            resolved_model=f"m-{key}",
            routing_reasoning=f"because {key}",
            error_code="invalid_api_key",
            error_message=f"Incorrect API key provided: {key}",
        )
        html = self.owner_client.get(self.url()).content.decode()
        turn_html = self.owner_client.get(f"{self.url()}turns/{turn.pk}/").content.decode()
        for page in (html, turn_html):
            assert key not in page
            assert "invalid_api_key: Incorrect API key provided: [redacted]" in page  # the notice
            assert "Half an answer with [redacted]" in page and "m-[redacted]" in page

    def test_only_the_last_turn_offers_a_retry(self):
        first = add_turn(self.conversation, "One", status=Stream.Status.FAILED)
        last = add_turn(self.conversation, "Two", status=Stream.Status.FAILED)
        html = self.owner_client.get(self.url()).content.decode()
        assert f"/turns/{first.pk}/retry/" not in html
        assert f"/turns/{last.pk}/retry/" in html

    def test_it_returns_404_for_strangers_and_staff(self):
        assert self.stranger_client.get(self.url()).status_code == 404
        assert self.staff_client.get(self.url()).status_code == 404

    def test_the_turn_partial_is_for_the_owner_only(self):
        turn = add_turn(self.conversation, "Hi", parts=text_parts("Hello!"))
        path = f"{self.url()}turns/{turn.pk}/"
        r = self.owner_client.get(path)
        assert r.status_code == 200 and "Hello!" in r.content.decode()
        assert r.content.decode().lstrip().startswith('<article class="pg-turn"')
        assert self.stranger_client.get(path).status_code == 404
        other = Conversation.objects.create(user=self.owner)
        assert self.owner_client.get(f"/playground/{other.pk}/turns/{turn.pk}/").status_code == 404


class TestSendValidation(Base):
    def error(self, r, status=400):
        assert r.status_code == status, r.content
        return r.json()

    def test_anonymous_posts_go_to_login(self):
        r = Client().post("/playground/send/", {"input": "Hi"})
        assert r.status_code == 302 and r["Location"].startswith("/login/")
        assert not Conversation.objects.exclude(pk=self.conversation.pk).exists()

    def test_it_needs_the_csrf_token(self):
        client = Client(enforce_csrf_checks=True)
        client.force_login(self.owner)
        r = client.post("/playground/send/", {"input": "Hi"}, **JSON)
        assert r.status_code == 403

    def test_an_empty_message_is_refused(self):
        data = self.error(self.send(input="   "))
        assert data["message"] == "Message: The input is empty."
        assert data["errors"] == {"input": ["The input is empty."]}

    def test_an_over_long_message_is_refused(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_INPUT_CHARS": 20}
        data = self.error(self.send(input="x" * 21))
        assert data["message"] == "Message: The input is 21 characters; at most 20."

    def test_an_unknown_model_is_refused(self):
        data = self.error(self.send(model="gpt-9"))
        assert data["message"].startswith("Model: Unknown model 'gpt-9'; choose one of: auto, ")

    @pytest.mark.parametrize(
        "field,value,message",
        [
            ("temperature", "2.5", "Temperature: Ensure this value is less than or equal to 2."),
            (
                "temperature",
                "-0.1",
                "Temperature: Ensure this value is greater than or equal to 0.",
            ),
            ("temperature", "warm", "Temperature: Enter a number."),
            ("temperature", "nan", "Temperature: Enter a number."),
            (
                "max_output_tokens",
                "0",
                "Max output tokens: Ensure this value is greater than or equal to 1.",
            ),
            ("max_output_tokens", "1.5", "Max output tokens: Enter a whole number."),
            ("scenario", "nope", "Scenario: Unknown scenario 'nope'; one of: "),
            ("speed", "9", "Speed: Select a valid choice. 9 is not one of the available choices."),
        ],
    )
    def test_bad_options_are_refused_with_a_clear_message(self, field, value, message):
        data = self.error(self.send(**{field: value}))
        assert data["message"].startswith(message)
        assert list(data["errors"]) == [field]

    def test_without_the_script_errors_render_the_page(self):
        r = self.send(accept_json=False, input="", temperature="3")
        assert r.status_code == 400
        html = r.content.decode()
        assert "<p>Message: The input is empty.</p>" in html
        assert 'name="temperature" id="pg-temperature"' in html and 'aria-invalid="true"' in html
        assert "pg-options" in html and "open>" in html  # the options with the error are shown

    def test_it_answers_429_over_the_per_user_limit(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_CONCURRENT_PER_USER": 2}
        for _ in range(2):
            Stream.objects.create(user=self.owner, status=Stream.Status.STREAMING)
        data = self.error(self.send(conversation=False), 429)
        assert data["message"] == (
            "You have 2 streams running; at most 2 at a time. Wait for one to finish or cancel one."
        )
        assert Conversation.objects.count() == 1 and Turn.objects.count() == 0

    def test_it_refuses_while_the_last_answer_streams(self):
        add_turn(self.conversation, "Hi", status=Stream.Status.STREAMING)
        data = self.error(self.send(), 409)
        assert data["message"].startswith("The last answer is still streaming")
        assert self.conversation.turns.count() == 1

    def test_a_conversation_too_long_to_send_says_so(self, settings):
        add_turn(self.conversation, "x" * 30, final_text="y" * 30)
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_INPUT_CHARS": 80}
        data = self.error(self.send(input="z" * 10))
        assert data["message"].startswith("Message: With this message the conversation is ")
        assert "Start a new conversation." in data["message"]

    def test_strangers_cannot_post_to_my_conversation(self):
        r = self.send(client=self.stranger_client)
        assert r.status_code == 404
        r = self.stranger_client.post(f"{self.url()}delete/")
        assert r.status_code == 404
        assert Conversation.objects.filter(pk=self.conversation.pk).exists()
        assert Turn.objects.count() == 0

    def test_only_post_is_allowed(self):
        assert self.owner_client.get("/playground/send/").status_code == 405


class TestDelete(Base):
    def test_it_deletes_the_conversation_and_keeps_the_streams(self):
        turn = add_turn(self.conversation, "Hi")
        r = self.owner_client.post(f"{self.url()}delete/")
        assert r.status_code == 302 and r["Location"] == "/playground/"
        assert not Conversation.objects.exists()
        assert Stream.objects.filter(pk=turn.stream_id).exists()


# ---------------------------------------------------------------------------------------------
# For real: the stream runs on the test's event loop against the simulator process


async def finished(stream_id, timeout=20):
    for _ in range(int(timeout / 0.02)):
        stream = await Stream.objects.aget(pk=stream_id)
        if not stream.is_active:
            return stream
        await asyncio.sleep(0.02)
    raise AssertionError(f"stream {stream_id} still {stream.status}")


class ScriptClient(AsyncClient):
    """As the page's script asks: logged in, `Accept: application/json`."""

    def __init__(self, user):
        super().__init__()
        name, value = user.cookie.split("=", 1)
        self.cookies[name] = value

    def generic(self, *args, headers=None, **kwargs):
        return super().generic(
            *args, headers={"accept": "application/json", **(headers or {})}, **kwargs
        )


logged_in = ScriptClient


@pytest.mark.django_db(transaction=True)
class TestSendForReal:
    async def test_a_conversation_sends_its_history_each_turn(self, people, upstream):
        client = logged_in(people.owner)
        options = {"scenario": "normal", "speed": "0", "temperature": "0.7", "model": "auto"}
        r = await client.post("/playground/send/", {"input": "Tell me about Utrecht", **options})
        assert r.status_code == 201, r.content
        data = r.json()
        conversation = await Conversation.objects.aget(pk=data["conversation"]["id"])
        assert conversation.title == "Tell me about Utrecht"
        assert data["conversation"]["url"] == f"/playground/{conversation.pk}/"
        assert data["turn"]["ws"] == f"/ws/streams/{data['turn']['stream']}/"
        assert f'data-stream="{data["turn"]["stream"]}"' in data["html"]
        first = await finished(data["turn"]["stream"])
        assert first.status == "completed" and first.final_text
        assert first.request_body["input"] == [{"role": "user", "content": "Tell me about Utrecht"}]
        assert first.request_body["metadata"] == {"scenario": "normal", "time_scale": "0"}
        assert first.request_body["temperature"] == 0.7
        assert first.user_id == people.owner.pk

        r = await client.post(data["conversation"]["send_url"], {"input": "And Delft?", **options})
        assert r.status_code == 201, r.content
        second = await finished(r.json()["turn"]["stream"])
        assert second.request_body["input"] == [
            {"role": "user", "content": "Tell me about Utrecht"},
            {"role": "assistant", "content": first.final_text},
            {"role": "user", "content": "And Delft?"},
        ]
        await conversation.arefresh_from_db()
        assert (conversation.model, conversation.scenario, conversation.speed) == (
            "auto",
            "normal",
            "0",
        )
        assert conversation.temperature == 0.7

    async def test_retry_asks_again_with_the_same_request(self, people, upstream):
        client = logged_in(people.owner)
        r = await client.post(
            "/playground/send/", {"input": "Hi", "scenario": "error", "speed": "0"}
        )
        data = r.json()
        failed = await finished(data["turn"]["stream"])
        assert failed.status == "failed"
        path = f"{data['conversation']['url']}turns/{data['turn']['id']}/"
        page = await client.get(path)
        assert "The upstream reported an error" in page.content.decode()
        stranger = logged_in(people.stranger)
        assert (await stranger.post(path + "retry/")).status_code == 404
        r = await client.post(path + "retry/")
        assert r.status_code == 201, r.content
        retried = await finished(r.json()["turn"]["stream"])
        assert retried.pk != failed.pk and retried.request_body == failed.request_body
        turn = await Turn.objects.aget(pk=data["turn"]["id"])
        assert turn.stream_id == retried.pk

    async def test_a_chat_conversation_sends_chat_requests_and_retries_them(self, people, upstream):
        client = logged_in(people.owner)
        options = {"format": "chat", "speed": "0", "instructions": "Be brief."}
        r = await client.post("/playground/send/", {"input": "Tell me about Utrecht", **options})
        assert r.status_code == 201, r.content
        data = r.json()
        first = await finished(data["turn"]["stream"])
        assert (first.format, first.status) == ("chat", "completed") and first.output_text
        assert first.upstream_url.endswith("/v1/chat/completions")
        assert first.request_body == {
            "model": "auto",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Tell me about Utrecht"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "metadata": {"time_scale": "0"},
        }
        r = await client.post(data["conversation"]["send_url"], {"input": "And Delft?", **options})
        assert r.status_code == 201, r.content
        turn = r.json()["turn"]
        second = await finished(turn["stream"])
        assert second.format == "chat" and second.request_body["messages"][1:] == [
            {"role": "user", "content": "Tell me about Utrecht"},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "And Delft?"},
        ]
        path = f"{data['conversation']['url']}turns/{turn['id']}/retry/"
        r = await client.post(path)
        assert r.status_code == 201, r.content
        retried = await finished(r.json()["turn"]["stream"])
        assert (retried.format, retried.request_body) == ("chat", second.request_body)
        assert retried.status == "completed"

    async def test_a_compare_in_messages_starts_messages_streams(self, people, upstream):
        client = logged_in(people.owner)
        body = {"input": "Hallo", "models": ["auto", "gpt-oss-20b"], "speed": "0"}
        r = await client.post("/playground/compare/send/", {**body, "format": "messages"})
        assert r.status_code == 201, r.content
        for s in r.json()["streams"]:
            stream = await finished(s["id"])
            assert (stream.format, stream.status) == ("messages", "completed")
            assert stream.request_body["messages"] == [{"role": "user", "content": "Hallo"}]
            assert stream.upstream_url.endswith("/v1/messages")

    async def test_the_playground_does_not_forward_posted_metadata(self, people, upstream):
        client = logged_in(people.owner)
        r = await client.post(
            "/playground/send/",
            {"input": "Hi", "speed": "0", "metadata": json.dumps({"scenario": "http_500"})},
        )
        stream = await finished(r.json()["turn"]["stream"])
        assert stream.status == "completed"
        assert stream.request_body["metadata"] == {"time_scale": "0"}


class TestFindingsBadge(Base):
    """An answer's findings badge says each severity: an OpenAI-style stream's info finding
    reads "1 info" in grey, never as a warning or an error."""

    def badge(self, *severities):
        from streams.models import Finding

        turn = add_turn(self.conversation, "Hi", findings_count=len(severities))
        for severity in severities:
            Finding.objects.create(
                stream=turn.stream, code="event_name_not_message", severity=severity
            )
        html = self.owner_client.get(self.url()).content.decode()
        return html.split('class="pg-findings"')[1].split("</a>")[0]

    def test_an_info_finding_reads_info(self):
        badge = self.badge("info")
        assert '<span class="visually-hidden">Findings: </span>' in badge
        assert badge.endswith(
            '<span class="sev-pill sev-pill-info" title="1 info finding: noted, not a fault">'
            "1 info</span>"
        )
        assert "warn" not in badge and "err" not in badge.split("</span>", 1)[1]

    def test_mixed_findings_read_worst_first(self):
        badge = self.badge("info", "error", "warning", "info")
        pills = re.findall(r'sev-pill-(\w+)"[^>]*>([^<]+)<', badge)
        assert pills == [("error", "1 err"), ("warning", "1 warn"), ("info", "2 info")]


PRICE = "team price 3: gpt-4o* from 2026-01-01"
USAGE = dict(
    input_tokens=412,
    output_tokens=96,
    total_tokens=508,
    reasoning_tokens=30,
    usage_source="reported",
    cost_nanos=1_234_500,
    cost_currency="EUR",
    price_ref=PRICE,
)


class TestUsageAndCost(Base):
    """Each answer says its tokens and its cost, with the labels of every stream page: an
    estimate marked "≈", the price used in the title, "no price" (never 0) without one."""

    def meta(self, **fields):
        add_turn(self.conversation, "Hi", parts=text_parts("Hello."), **fields)
        html = self.owner_client.get(self.url()).content.decode()
        meta = html.split('class="pg-meta"')[1].split('class="pg-timeline"')[0]
        tokens = meta.split('class="pg-figure pg-tokens"')[1].split("</span>\n")[0]
        cost = meta.split('class="pg-figure pg-cost"')[1].split("</span>\n")[0]
        return tokens, cost

    def test_reported_tokens_and_their_cost(self):
        tokens, cost = self.meta(**USAGE)
        assert tokens == (
            ' title="412 input tokens, 96 output tokens, 30 reasoning (reported by the '
            'upstream)"><b>412 → 96</b> tokens'
        )
        assert cost == f' title="price: {PRICE}"><b>€0.00123</b>'

    def test_an_estimate_is_marked(self):
        tokens, cost = self.meta(**{**USAGE, "usage_source": "estimated"})
        mark = '<span class="estimate" title="estimated: the upstream reported no usage">'
        assert f"<b>{mark}" in tokens and "412 → 96</b>" in tokens
        assert f"<b>{mark}" in cost and "€0.00123</b>" in cost
        assert "estimated usage · price: " in cost

    def test_no_price_says_so_and_never_zero(self):
        tokens, cost = self.meta(**{**USAGE, "cost_nanos": None, "price_ref": ""})
        assert "<b>412 → 96</b>" in tokens
        none = '<span class="muted no-price">no price</span>'
        assert cost == f' title="no model named to price"><b>{none}</b>'
        assert "€" not in cost and "0" not in cost.split(">", 1)[1]

    def test_an_answer_still_streaming_shows_them_when_it_ends(self):
        tokens, cost = self.meta(status=Stream.Status.STREAMING)
        # hidden, for playground.js to fill from the frame that finishes the stream
        assert tokens.startswith(" hidden") and cost.startswith(" hidden")
        assert "<b>—</b>" in cost and "no price" not in cost

    def test_compare_has_the_usage_figures_help(self):
        html = self.owner_client.get("/playground/compare/").content.decode()
        assert 'data-help-tokens="Input → output tokens' in html
        assert 'data-help-cost="What the stream cost' in html


@pytest.mark.django_db(transaction=True)
class TestUsageForReal:
    async def test_an_answer_is_priced_at_the_teams_price(self, people, upstream):
        """A real answer from the simulator (which reports usage), priced at a team price,
        renders its tokens and cost in the turn the script swaps in when it ends."""
        import datetime as dt

        from asgiref.sync import sync_to_async

        from dashboard.templatetags.inspection import money
        from streams.models import Price
        from streams.store import prices

        price = await Price.objects.acreate(
            model_pattern="*",
            effective_from=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
            currency="EUR",
            input_per_million=2,
            output_per_million=8,
        )
        prices.forget()  # (the runner records in this process)
        try:
            client = logged_in(people.owner)
            r = await client.post("/playground/send/", {"input": "Hi", "speed": "0"})
            data = r.json()
            stream = await finished(data["turn"]["stream"])
            assert stream.usage_source == "reported" and stream.cost_currency == "EUR"
            expected = (stream.input_tokens * 2 + stream.output_tokens * 8) * 1000
            assert stream.cost_nanos == expected
            page = await client.get(f"{data['conversation']['url']}turns/{data['turn']['id']}/")
            html = page.content.decode()
            assert f"<b>{stream.input_tokens} → {stream.output_tokens}</b> tokens" in html
            amount = money(stream.cost_nanos, "EUR")
            assert amount.startswith("€0.0")  # (a few thousand tokens at these rates)
            assert f'title="price: {price.ref}"><b>{amount}</b>' in html
        finally:
            # the snapshot of this process must not keep the price for later tests
            await price.adelete()
            prices.forget()
            await sync_to_async(prices.refresh)()
