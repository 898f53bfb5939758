"""streams.shapes.public: the outward shapes and the one redaction. Pure tests, no database (the
pages, API, exports and WebSocket frames that go through it have their own tests of the key never
showing: test_views_*, test_api, test_export, test_consumers)."""

import datetime as dt
import json

import pytest

from streams.models import Stream
from streams.shapes import event_message, public
from streams.store import known_secrets

KEY = "sk-echoed-upstream-key-42"


@pytest.fixture
def key(settings):
    settings.UPSTREAM_API_KEY = KEY
    return KEY


class TestVerbatim:
    def test_the_shapes_say_what_was_stored_and_the_gate_redacts_them(self, key):
        # secrets are taken out where everything leaves (streams/serve/egress.py), not here
        stream = Stream(pk=3, resolved_model=f"m-{key}", parts=[{"name": key}], ttft_ms=1.5)
        assert public.dumps({"m": f"a {key}"}) == json.dumps(
            {"m": f"a {key}"}, separators=(",", ":")
        )
        assert public.output(stream)[0]["item"] == {} and stream.resolved_model == f"m-{key}"
        assert known_secrets.redact(public.dumps({"m": f"a {key}"})) == '{"m":"a [redacted]"}'


class TestShapes:
    def test_a_stream_frame_is_the_documented_json(self, key):
        events = [(0, "response.created", 0, 12, '{"type":"response.created"}'),
                  (1, "error", 1, 15, f'{{"message":"{key}"}}')]  # fmt: skip
        text = event_message.stream_frame(
            events, status="failed", stream={"ttft_ms": 1.5}, terminal=True
        )
        assert json.loads(text) == {
            "events": [
                {
                    "index": 0,
                    "type": "response.created",
                    "sequence_number": 0,
                    "t_us": 12,
                    "data": '{"type":"response.created"}',
                },
                {
                    "index": 1,
                    "type": "error",
                    "sequence_number": 1,
                    "t_us": 15,
                    "data": f'{{"message":"{key}"}}',  # verbatim: the gate redacts
                },
            ],  # fmt: skip
            "status": "failed",
            "stream": {"ttft_ms": 1.5},
            "terminal": True,
        }
        omitted = json.loads(event_message.stream_frame(events[:1], omit_data=True))
        assert omitted["events"][0]["data"] is None and omitted["events"][0]["data_bytes"] == 27

    def test_a_proxied_event_says_when_the_client_got_it_and_no_other_does(self):
        plain = (3, "response.output_text.delta", 3, 120, '{"delta":"a"}')
        # a payload with sent_us None (the proxy never handed it over) is a plain one, byte
        # for byte: other streams' frames are what they were before sent_us existed
        assert event_message.stream_frame([(*plain, None)]) == event_message.stream_frame([plain])
        assert event_message.stream_frame([plain]) == (
            '{"events":[{"index":3,"type":"response.output_text.delta","sequence_number":3,'
            '"t_us":120,"data":"{\\"delta\\":\\"a\\"}"}]}'
        )
        [sent] = json.loads(event_message.stream_frame([(*plain, 150)]))["events"]
        assert sent == {**event_message.event(*plain), "sent_us": 150}
        [omitted] = json.loads(event_message.stream_frame([(*plain, 150)], omit_data=True))[
            "events"
        ]
        assert omitted["sent_us"] == 150 and omitted["data"] is None
        assert omitted["data_bytes"] == len(plain[4])

    def test_a_list_item_clips_the_prompt(self):
        at = dt.datetime(2025, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
        row = {**dict.fromkeys(public.LIST_COLUMNS), "id": 7, "prompt": "p" * 300, "created_at": at}
        item = public.list_item(row)
        assert item["id"] == 7 and item["prompt"] == "p" * 200
        assert item["created_at"] == at.isoformat()
        assert (item["usage"], item["cost"]) == (None, None)

    def test_usage_and_cost_say_what_they_are(self):
        row = {
            **dict.fromkeys(public.USAGE_COLUMNS),
            "usage_source": "estimated",
            "output_tokens": 12,
            "cost_nanos": 1_234_500,
            "cost_currency": "EUR",
            "price_ref": "team price 3: gpt-4o* from 2026-01-01",
        }
        got = public.usage_and_cost(row)
        assert got["usage"]["source"] == "estimated" and got["usage"]["output_tokens"] == 12
        assert got["cost"] == {
            "amount": "0.001234500",
            "currency": "EUR",
            "price": "team price 3: gpt-4o* from 2026-01-01",
            "estimated": True,
        }
        # no usage, no price: None, never 0
        row.update(usage_source="", cost_nanos=None)
        assert public.usage_and_cost(row) == {"usage": None, "cost": None}


class TestOutput:
    def test_each_item_gets_its_kind_and_a_rewrite_its_streamed_text(self):
        parts = [
            {"output_index": 0, "type": "reasoning", "summary": ["hm", ""]},
            {"output_index": 1, "type": "mcp_call", "name": "f", "status": "failed"},
            {"output_index": 2, "type": "message", "parts": [
                {"content_index": 0, "type": "output_text", "text": "teh", "done_text": "the"},
                {"content_index": 1, "type": "refusal", "text": "No."}]},
            {"output_index": 3, "type": "web_search_call", "item": {"status": "completed"}},
        ]  # fmt: skip
        reasoning, tool, message, other = public.output(Stream(parts=parts))
        assert [i["kind"] for i in (reasoning, tool, message, other)] == [
            "reasoning", "tool", "message", "other"]  # fmt: skip
        assert reasoning["summary"] == ["hm"] and tool["failed"] and tool["output"] is None
        rewritten, refusal = message["parts"]
        assert (rewritten["text"], rewritten["streamed"]) == ("the", "teh")
        assert refusal["refusal"] and refusal["streamed"] is None
        assert other["item"] == {"status": "completed"}

    def test_a_terminal_text_alone_is_an_answer_where_asked(self):
        stream = Stream(parts=[], final_text="Hello")
        assert public.output(stream) == []
        [message] = public.output(stream, terminal_text=True)
        assert message["kind"] == "message" and message["parts"][0]["text"] == "Hello"


def _sentinel(field, n):
    """A value for `field` no other column of the row holds (n: the column's number)."""
    from django.db import models

    if isinstance(field, models.DateTimeField):
        return dt.datetime(2001, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=n)
    if isinstance(field, models.JSONField):
        return {"sentinel": f"json-{n}"}
    if isinstance(field, models.FloatField):
        return 1000.25 + n
    if isinstance(field, (models.IntegerField, models.BigIntegerField)):
        return 7000 + n
    if field.choices:
        return field.choices[n % len(field.choices)][0]
    return f"text-{n}"[: field.max_length or 100]


@pytest.mark.django_db
def test_every_stream_column_is_shown_or_listed_as_not_shown():
    """A new column of Stream reaches the API and the `.json` export (`public.stream`) or is
    listed in `public.NOT_SHOWN` with the reason: a column nobody placed fails here."""
    from django.db import models

    values = {}
    for n, field in enumerate(Stream._meta.concrete_fields):
        if field.primary_key or isinstance(field, models.ForeignKey):
            continue  # the id and links are checked by name below
        # an enum: its last value (a usage source shows the usage it is the source of)
        values[field.attname] = field.choices[-1][0] if field.choices else _sentinel(field, n)
    row = Stream.objects.create(**values)
    shown = json.dumps(public.stream(row), default=str)
    keys = set(public.stream(row))
    missing = []
    for field in Stream._meta.concrete_fields:
        name = field.attname
        if name in public.NOT_SHOWN:
            continue
        if name in values:
            value = getattr(row, name)  # (what the database kept: auto_now_add sets its own)
            if isinstance(value, dt.datetime):
                found = value.isoformat()
            elif isinstance(value, dict | str):
                found = json.dumps(value)[1:-1]
            else:
                found = str(value)
            if found not in shown:
                missing.append(name)
        elif name.removesuffix("_id") not in keys and name not in keys:
            missing.append(name)
    assert not missing, f"columns neither in public.stream() nor in public.NOT_SHOWN: {missing}"
    assert not set(public.NOT_SHOWN) - {f.attname for f in Stream._meta.concrete_fields}
