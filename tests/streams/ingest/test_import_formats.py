"""Captures of each format imported (streams/ingest/importer.py): the format told from the
file (or a HAR entry's URL), each checked by its format's checker with the same findings as
recorded, exported byte for byte, and found on the pages by that format."""

import pytest
from django.test import Client

from streams.ingest.importer import import_capture
from streams.models import Finding
from streams.serve.export import iter_sse
from tests.conftest import log_in_people
from tests.support.captures import checked, codes, har, har_entry
from tests.support.paths import CAPTURES

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "format, name",
    [
        ("chat", "normal"),
        ("chat", "content_filter"),
        ("chat", "finish_twice"),
        ("chat", "tools"),
        ("messages", "tools_thinking"),
        ("messages", "never_stopped"),
        ("messages", "bad_json"),
        # real servers' (tests/fixtures/streams/SOURCES.md)
        ("chat", "openai_gpt4o_tool_call"),
        ("chat", "openrouter_gpt4o"),
        ("messages", "anthropic_sonnet4_thinking"),
    ],
)
def test_a_capture_is_imported_in_its_format_with_its_checkers_findings(format, name):
    content = (CAPTURES / format / f"{name}.sse").read_bytes()
    [stream] = import_capture(content, f"{name}.sse")
    assert stream.format == format
    found = list(
        Finding.objects.filter(stream=stream).order_by("id").values_list("code", flat=True)
    )
    assert found == codes(checked(format, name))
    assert stream.output_text == checked(format, name).output_text
    assert b"".join(iter_sse(stream)) == content


def test_a_har_entrys_url_says_its_format_when_its_events_do_not():
    # an error object alone says nothing of its format; the URL it came from does
    content = b'data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n'
    entry = har_entry(content, url="https://api.example.org/v1/chat/completions")
    [stream] = import_capture(har(entry), "chat.har")
    assert (stream.format, stream.status, stream.error_code) == ("chat", "failed", "server_error")


class TestPages:
    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)
        chat, messages = CAPTURES / "chat" / "tools.sse", CAPTURES / "messages" / "normal.sse"
        [self.chat] = import_capture(chat.read_bytes(), "c.sse", user=self.owner)
        [self.messages] = import_capture(messages.read_bytes(), "m.sse", user=self.owner)

    def test_the_list_filters_by_format(self):
        for format, stream in (("chat", self.chat), ("messages", self.messages)):
            page = self.owner_client.get(f"/?format={format}").content.decode()
            assert f'id="stream-row-{stream.pk}"' in page
            others = {self.chat.pk, self.messages.pk} - {stream.pk}
            assert all(f'id="stream-row-{pk}"' not in page for pk in others)

    def test_the_stream_page_names_its_format_in_the_pages_language(self):
        page = self.owner_client.get(f"/streams/{self.messages.pk}/").content.decode()
        assert 'id="stream-format">Anthropic Messages<' in page
        dutch = Client()
        dutch.force_login(self.owner)
        page = dutch.get(f"/streams/{self.chat.pk}/", headers={"accept-language": "nl"})
        assert "Formaat" in page.content.decode()
        assert 'id="stream-format">Chat Completions<' in page.content.decode()

    def test_the_api_lists_by_format(self):
        from streams.models import ApiToken

        token = ApiToken.issue(self.owner, name="formats")
        api = Client(headers={"authorization": f"Bearer {token}"})
        for format, stream in (("chat", self.chat), ("messages", self.messages)):
            listed = api.get(f"/api/streams/?format={format}").json()["streams"]
            assert [(s["id"], s["format"]) for s in listed] == [(stream.pk, format)]
        assert api.get("/api/streams/?format=gemini").status_code == 400
