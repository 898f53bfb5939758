"""The export downloads (/streams/<id>.sse, .json) and the upload (/streams/upload/): who may
see what, the response headers, streaming under WSGI and ASGI, form errors."""

import json
import warnings

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient, Client

from streams.ingest.importer import import_capture
from streams.models import Stream
from tests.conftest import FIXTURES, log_in_people
from tests.support.captures import document, exported, har, har_entry, small_stream, sse

BASIC = (FIXTURES / "openai_text_basic.sse").read_bytes()


class Base:
    """An owner with a stream, a stranger and a staff member, each with a logged-in client."""

    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)
        [self.stream] = import_capture(BASIC, "basic.sse", user=self.owner)


def body(response):
    assert response.streaming
    return b"".join(response.streaming_content)


class TestStreamSse(Base):
    def url(self, pk=None):
        return f"/streams/{pk or self.stream.pk}.sse"

    def test_it_downloads_the_bytes(self):
        r = self.owner_client.get(self.url())
        assert r.status_code == 200
        assert r["Content-Type"] == "text/event-stream; charset=utf-8"
        assert r["Content-Disposition"] == f'attachment; filename="stream-{self.stream.pk}.sse"'
        assert body(r) == BASIC

    def test_it_returns_404_for_strangers(self):
        assert self.stranger_client.get(self.url()).status_code == 404

    def test_it_allows_staff(self):
        r = self.staff_client.get(self.url())
        assert r.status_code == 200 and body(r) == BASIC

    def test_it_returns_404_for_missing_streams(self):
        assert self.owner_client.get(self.url(self.stream.pk + 1000)).status_code == 404

    def test_it_requires_login(self):
        r = Client().get(self.url())
        assert r.status_code == 302 and r["Location"].startswith("/login/")

    def test_it_only_answers_get(self):
        assert self.owner_client.post(self.url()).status_code == 405


class TestStreamJson(Base):
    def url(self):
        return f"/streams/{self.stream.pk}.json"

    def test_it_downloads_the_document(self):
        r = self.owner_client.get(self.url())
        assert r.status_code == 200
        assert r["Content-Type"] == "application/json"
        assert r["Content-Disposition"] == f'attachment; filename="stream-{self.stream.pk}.json"'
        doc = json.loads(body(r))
        assert doc == document(self.stream)
        assert doc["output_text"] == "1, 2, 3" and len(doc["events"]) == 15

    def test_it_returns_404_for_strangers(self):
        assert self.stranger_client.get(self.url()).status_code == 404

    def test_it_allows_staff(self):
        assert self.staff_client.get(self.url()).status_code == 200

    def test_it_requires_login(self):
        assert Client().get(self.url()).status_code == 302


@pytest.mark.django_db(transaction=True)
async def test_downloads_stream_under_asgi_without_buffering_warnings():
    """Under ASGI the views hand Django async iterators (a sync one is read whole first, with a
    warning)."""
    from asgiref.sync import sync_to_async

    def setup():
        user = get_user_model().objects.create_user("asgi")
        [stream] = import_capture(BASIC, "basic.sse", user=user)
        return user, stream

    user, stream = await sync_to_async(setup)()
    client = AsyncClient()
    await client.aforce_login(user)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="StreamingHttpResponse must consume")
        r = await client.get(f"/streams/{stream.pk}.sse")
        assert r.status_code == 200
        content = b"".join([piece async for piece in r])
        assert content == BASIC
        r = await client.get(f"/streams/{stream.pk}.json")
        doc = json.loads(b"".join([piece async for piece in r]))
    assert doc["id"] == stream.pk and len(doc["events"]) == 15
    assert await sync_to_async(exported)(stream) == BASIC


class TestStreamUpload(Base):
    url = "/streams/upload/"

    def post(self, content, name="capture.sse", client=None, **data):
        upload = SimpleUploadedFile(name, content, content_type="application/octet-stream")
        return (client or self.owner_client).post(self.url, {"file": upload, **data})

    def job_page(self, r):
        """An upload is an import job (streams/ingest/import_jobs.py): where its page leads."""
        assert r.status_code == 302 and r["Location"].startswith("/imports/")
        return self.owner_client.get(r["Location"])

    def test_it_shows_the_form(self):
        r = self.owner_client.get(self.url)
        assert r.status_code == 200
        assert b'enctype="multipart/form-data"' in r.content

    def test_it_imports_and_redirects_to_the_stream(self):
        r = self.job_page(self.post(BASIC, "basic.sse", model="auto"))
        stream = Stream.objects.latest("pk")
        assert r.status_code == 302 and r["Location"] == f"/streams/{stream.pk}/"
        assert stream.user == self.owner and stream.source == "import"
        assert stream.requested_model == "auto"
        assert exported(stream) == BASIC

    def test_a_har_with_two_responses_redirects_to_the_first(self):
        content = har(har_entry(sse(*small_stream("A"))), har_entry(sse(*small_stream("B"))))
        before = Stream.objects.count()
        r = self.job_page(self.post(content, "session.har"))
        first, second = Stream.objects.order_by("pk")[before:]
        # two streams: the job's page links both
        assert (
            f'href="/streams/{first.pk}/"' in r.text and f'href="/streams/{second.pk}/"' in r.text
        )
        assert (first.output_text, second.output_text) == ("A", "B")

    def test_it_refuses_files_over_the_limit(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "UPLOAD_MAX_BYTES": 1024 * 1024}
        before = Stream.objects.count()
        r = self.post(b"data: x\n\n" * 200_000)
        assert r.status_code == 400
        assert b"File too large: 1.7 MB (limit 1.0 MB)" in r.content
        assert Stream.objects.count() == before

    @pytest.mark.parametrize(
        "content,message",
        [
            (b"just some text\n", b"not an event stream or a HAR file"),
            (b'{"log": {}}', b"not a HAR file"),
            (b"", b"The submitted file is empty."),
        ],
    )
    def test_it_shows_why_a_file_is_not_a_capture(self, content, message):
        before = Stream.objects.count()
        r = self.post(content, "notes.txt")
        if content:  # read by the import job: its page says why
            r = self.job_page(r)
            assert r.status_code == 200 and b"<td>Failed" in r.content
        else:  # the form refuses an empty file at once
            assert r.status_code == 400
        assert message in r.content
        assert Stream.objects.count() == before

    def test_it_needs_a_file(self):
        r = self.owner_client.post(self.url, {"model": "auto"})
        assert r.status_code == 400 and b"This field is required." in r.content

    def test_it_requires_login(self):
        r = self.post(BASIC, client=Client())
        assert r.status_code == 302 and r["Location"].startswith("/login/")

    def test_it_requires_the_csrf_token(self):
        client = Client(enforce_csrf_checks=True)
        client.force_login(self.owner)
        assert self.post(BASIC, client=client).status_code == 403
