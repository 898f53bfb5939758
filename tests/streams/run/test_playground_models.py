"""The playground's domain (dashboard/models.py: history, send, retry) and the upstream's model
catalogue (streams/run/catalog.py, upstream.list_models)."""

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from dashboard.forms.playground import PlaygroundForm
from dashboard.models import (
    Busy,
    CannotRetry,
    Conversation,
    TooLong,
    Turn,
    answer_text,
    retry,
    send,
)
from streams.ingest import upstream
from streams.models import Stream
from streams.run import catalog, services
from streams.run.catalog import Catalog

SIMULATED = Catalog(("gpt-oss-120b", "gpt-oss-20b"), "upstream", simulated=True)


def form(catalog=SIMULATED, **data):
    f = PlaygroundForm({"input": "Hi", **data}, catalog=catalog)
    assert f.is_valid(), f.errors
    return f


def stream(user, status=Stream.Status.COMPLETED, **fields):
    return Stream.objects.create(user=user, status=status, **fields)


class Base:
    @pytest.fixture(autouse=True)
    def _owner(self, db):
        self.owner = get_user_model().objects.create_user("owner")
        self.conversation = Conversation.objects.create(user=self.owner, title="t")

    def turn(self, prompt, answer):
        position = self.conversation.turns.count()
        return Turn.objects.create(
            conversation=self.conversation, position=position, prompt=prompt, stream=answer
        )


class TestHistory(Base):
    def test_each_answer_counts_with_its_final_or_streamed_text(self):
        self.turn("One", stream(self.owner, final_text="Final one", output_text="Draft one"))
        self.turn("Two", stream(self.owner, Stream.Status.CANCELLED, output_text="Half"))
        self.turn("Three", stream(self.owner, Stream.Status.FAILED))  # no text at all
        self.turn("Four", None)  # its stream was deleted
        assert self.conversation.input_items() == [
            {"role": "user", "content": "One"},
            {"role": "assistant", "content": "Final one"},
            {"role": "user", "content": "Two"},
            {"role": "assistant", "content": "Half"},
            {"role": "user", "content": "Three"},
            {"role": "user", "content": "Four"},
        ]

    def test_a_stall_retry_answers_for_its_first_attempt(self):
        first = stream(self.owner, Stream.Status.STALLED, output_text="Stuck")
        second = stream(self.owner, first_attempt=first, attempt=2, final_text="Second try")
        other = stream(self.owner, final_text="Another turn's")
        self.turn("Hi", first)
        self.turn("Next", other)
        turns = self.conversation.turns_with_answers()
        assert [t.answer.pk for t in turns] == [second.pk, other.pk]
        assert answer_text(turns[0].answer) == "Second try"

    def test_deleting_a_stream_keeps_the_turn(self):
        answer = stream(self.owner, final_text="x")
        turn = self.turn("Hi", answer)
        answer.delete()
        turn.refresh_from_db()
        assert turn.stream_id is None and turn.prompt == "Hi"


class TestSend(Base):
    def test_the_first_message_creates_the_conversation(self):
        prompt = "  Tell me\n about   Utrecht, " + "and more " * 20
        turn = send(self.owner, None, form(input=prompt, model="gpt-oss-20b", speed="0.5"))
        conversation = turn.conversation
        assert conversation.pk != self.conversation.pk and conversation.user == self.owner
        assert conversation.title.startswith("Tell me about Utrecht, and more")
        assert len(conversation.title) == 80 and conversation.title.endswith("…")
        assert (conversation.model, conversation.speed) == ("gpt-oss-20b", "0.5")
        body = turn.stream.request_body
        assert body["input"] == [{"role": "user", "content": prompt}]
        assert body["model"] == "gpt-oss-20b" and body["metadata"] == {"time_scale": "0.5"}
        assert turn.stream.status == Stream.Status.PENDING and turn.position == 0

    def test_it_refuses_while_the_last_answer_is_active(self):
        self.turn("Hi", stream(self.owner, Stream.Status.PENDING))
        with pytest.raises(Busy):
            send(self.owner, self.conversation, form())
        assert self.conversation.turns.count() == 1

    def test_it_keeps_to_the_per_user_limit(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_CONCURRENT_PER_USER": 1}
        stream(self.owner, Stream.Status.STREAMING)  # in another conversation
        with pytest.raises(services.TooMany):
            send(self.owner, self.conversation, form())
        assert Turn.objects.count() == 0

    def test_it_refuses_a_conversation_over_the_input_limit(self, settings):
        self.turn("a" * 40, stream(self.owner, final_text="b" * 40))
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_INPUT_CHARS": 100}
        with pytest.raises(TooLong) as exc:
            send(self.owner, self.conversation, form(input="c" * 5))
        assert exc.value.message().startswith("With this message the conversation is 1")
        assert self.conversation.turns.count() == 1

    def test_previous_response_id_when_configured_and_the_last_answer_completed(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "PLAYGROUND_PREVIOUS_RESPONSE_ID": True}
        self.turn("One", stream(self.owner, upstream_id="resp_1", final_text="Yes"))
        turn = send(self.owner, self.conversation, form(input="Two"))
        body = turn.stream.request_body
        assert body["previous_response_id"] == "resp_1"
        assert body["input"] == [{"role": "user", "content": "Two"}]
        Stream.objects.filter(pk=turn.stream_id).update(status=Stream.Status.FAILED)
        # after a failed answer there is nothing to continue from: the whole conversation
        turn = send(self.owner, self.conversation, form(input="Three"))
        body = turn.stream.request_body
        assert "previous_response_id" not in body
        assert [i["content"] for i in body["input"]] == ["One", "Yes", "Two", "Three"]

    def test_a_real_upstream_gets_no_scenario_or_speed(self):
        real = Catalog(("m1",), "upstream", simulated=False)
        turn = send(self.owner, None, form(real, scenario="tools", speed="0", model="m1"))
        assert "metadata" not in turn.stream.request_body
        assert (turn.conversation.scenario, turn.conversation.speed) == ("", "")


class TestRetry(Base):
    def test_it_sends_the_same_request_again(self):
        failed = stream(self.owner, Stream.Status.FAILED, request_body={"input": "Hi", "x": 1})
        turn = self.turn("Hi", failed)
        retried = retry(turn)
        assert retried.answer.pk != failed.pk
        assert retried.answer.request_body == {"input": "Hi", "x": 1}
        turn.refresh_from_db()
        assert turn.stream_id == retried.answer.pk

    def test_only_the_last_turn_and_only_when_it_ended(self):
        first = self.turn("One", stream(self.owner, Stream.Status.FAILED))
        last = self.turn("Two", stream(self.owner, Stream.Status.STREAMING))
        with pytest.raises(CannotRetry):
            retry(first)
        with pytest.raises(Busy):
            retry(last)
        Stream.objects.filter(pk=last.stream_id).delete()
        last.refresh_from_db()
        with pytest.raises(CannotRetry):
            retry(last)


class TestCatalog:
    @pytest.fixture(autouse=True)
    def _fresh(self):
        cache.clear()
        yield
        cache.clear()

    def test_the_built_in_simulator_is_not_asked(self, settings, monkeypatch):
        settings.UPSTREAM_BASE_URL = ""
        monkeypatch.setattr(catalog, "list_models", None)  # a call would fail
        found = catalog.get_catalog()
        assert found.simulated and found.source == "simulator"
        assert found.choices == ("auto", "gpt-oss-120b", "gpt-oss-20b", "mistral-small-3.2",
                                 "qwen3-coder", "eu-reasoner")  # fmt: skip

    def test_it_lists_the_upstreams_models_and_knows_the_simulator(self, upstream):
        found = catalog.get_catalog()
        assert found.source == "upstream" and found.simulated and not found.error
        assert "gpt-oss-20b" in found.models and "auto" not in found.models

    def test_it_asks_once_then_uses_the_cache(self, settings, monkeypatch):
        settings.UPSTREAM_BASE_URL = "http://upstream.invalid/v1"
        calls = []

        def fake(base_url, api_key):
            calls.append(base_url)
            return [{"id": "m1", "owned_by": "acme"}, {"id": "auto"}, {"id": "m1"}]

        monkeypatch.setattr(catalog, "list_models", fake)
        for _ in range(3):
            found = catalog.get_catalog()
        assert calls == ["http://upstream.invalid/v1"]
        assert found.models == ("m1",) and not found.simulated
        catalog.forget()
        catalog.get_catalog()
        assert len(calls) == 2

    def test_an_unreachable_upstream_falls_back_to_the_setting(self, settings):
        settings.UPSTREAM_BASE_URL = "http://127.0.0.1:9/v1"  # discard port: nothing listens
        settings.UPSTREAM_MODELS = ["m-large", " m-small", "m-large"]
        found = catalog.get_catalog()
        assert found.source == "settings" and found.models == ("m-large", "m-small")
        assert not found.simulated and found.error

    def test_list_models_reports_http_errors(self, simulator_process):
        # the simulator's root has no /models: 404 with an OpenAI-style error body
        with pytest.raises(upstream.UpstreamError) as exc:
            upstream.list_models(simulator_process.root)
        assert exc.value.http_status == 404 and exc.value.code == "not_found"
        models = upstream.list_models(simulator_process.base_url, "sk-test")
        assert {m["owned_by"] for m in models} == {"streamscope-simulator"}
