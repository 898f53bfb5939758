"""Imports off the request path (streams/ingest/import_jobs.py): background reading, several files
per upload, progress, cancel, abandonment, and the per-user caps."""

import datetime as dt
import html

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from streams.ingest import import_jobs
from streams.models import ImportFile, ImportJob, Stream
from tests.conftest import log_in_people

pytestmark = pytest.mark.django_db(transaction=True)


def _sse(text="Hoi"):
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r1"}},
        {"type": "response.output_text.delta", "sequence_number": 1, "delta": text},
        {"type": "response.completed", "sequence_number": 2, "response": {"id": "r1"}},
    ]
    import json

    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


@pytest.fixture
def people(db):
    class P:
        pass

    p = P()
    log_in_people(p)
    return p


@pytest.fixture
def background(monkeypatch):
    # the pool's threads, as in production (conftest reads inline by default)
    monkeypatch.setattr(import_jobs, "RUN_INLINE", False)


def _upload(client, *files, **data):
    uploads = [SimpleUploadedFile(n, c, content_type="application/octet-stream") for n, c in files]
    return client.post("/streams/upload/", {"file": uploads, **data})


class TestBackground:
    def test_an_upload_answers_at_once_and_the_pool_reads_every_file(self, people, background):
        r = _upload(
            people.owner_client, ("a.sse", _sse("A")), ("b.sse", _sse("B")), ("bad.txt", b"x\n")
        )
        assert r.status_code == 302 and r["Location"].startswith("/imports/")
        job = ImportJob.objects.get()
        job = import_jobs.wait(job.pk)
        assert job.status == ImportJob.Status.DONE
        files = list(job.files.order_by("position"))
        assert [f.status for f in files] == ["done", "done", "failed"]
        assert "not an event stream" in files[2].error
        assert all(bytes(f.content) == b"" for f in files)  # the bytes live on in Capture
        texts = [Stream.objects.get(pk=f.stream_ids[0]).output_text for f in files[:2]]
        assert texts == ["A", "B"]
        page = people.owner_client.get(r["Location"])
        assert page.status_code == 200 and b"3 of 3 files read" in page.content

    def test_the_progress_fragment_redirects_to_a_single_stream_when_done(self, people):
        r = _upload(people.owner_client, ("a.sse", _sse()))
        frag = people.owner_client.get(r["Location"] + "?fragment=import-progress")
        stream = Stream.objects.get()
        assert frag["HX-Redirect"] == f"/streams/{stream.pk}/"

    def test_someone_elses_job_is_not_found(self, people):
        r = _upload(people.owner_client, ("a.sse", _sse()))
        assert people.stranger_client.get(r["Location"]).status_code == 404
        job = ImportJob.objects.get()
        cancel = people.stranger_client.post(f"/imports/{job.pk}/cancel/")
        assert cancel.status_code == 404


class TestCancel:
    def _queued_job(self, people, n=3):
        # a job created without being started: what the pool has not reached yet
        job = ImportJob.objects.create(user=people.owner)
        for i in range(n):
            ImportFile.objects.create(
                job=job, position=i, filename=f"{i}.sse", size=10, content=_sse()
            )
        return job

    def test_a_cancelled_job_reads_no_further_file(self, people):
        job = self._queued_job(people)
        r = people.owner_client.post(f"/imports/{job.pk}/cancel/")
        assert r.status_code == 302
        import_jobs.run(job.pk)  # what the pool would do next: nothing
        job.refresh_from_db()
        assert job.status == "cancelled" and Stream.objects.count() == 0

    def test_a_job_nobody_polls_is_cancelled_as_abandoned(self, people, settings):
        settings.STREAMSCOPE = {"IMPORT_ABANDON_S": 30}
        job = self._queued_job(people)
        ImportJob.objects.filter(pk=job.pk).update(
            polled_at=timezone.now() - dt.timedelta(seconds=31)
        )
        import_jobs.run(job.pk)
        job.refresh_from_db()
        assert (job.status, job.cancel_reason) == ("cancelled", "abandoned")
        assert set(job.files.values_list("status", flat=True)) == {"cancelled"}
        assert Stream.objects.count() == 0

    def test_a_watched_job_is_not_abandoned(self, people, settings):
        settings.STREAMSCOPE = {"IMPORT_ABANDON_S": 30}
        job = self._queued_job(people, n=1)
        ImportJob.objects.filter(pk=job.pk).update(
            polled_at=timezone.now() - dt.timedelta(seconds=31)
        )
        people.owner_client.get(f"/imports/{job.pk}/?fragment=import-progress")  # a poll
        import_jobs.run(job.pk)
        job.refresh_from_db()
        assert job.status == "done" and Stream.objects.count() == 1


class TestCaps:
    def test_uploads_per_minute_are_capped_with_429(self, people, settings):
        settings.STREAMSCOPE = {"IMPORT_MAX_PER_MINUTE": 3}
        codes = [_upload(people.owner_client, ("a.sse", _sse())).status_code for _ in range(5)]
        assert codes == [302, 302, 302, 429, 429]
        r = _upload(people.owner_client, ("a.sse", _sse()))
        assert int(r["Retry-After"]) > 0 and b"uploads per minute" in r.content
        # another user is not affected
        assert _upload(people.stranger_client, ("a.sse", _sse())).status_code == 302

    def test_concurrent_jobs_are_capped_with_429(self, people, settings):
        settings.STREAMSCOPE = {"IMPORT_MAX_CONCURRENT": 1}
        ImportJob.objects.create(user=people.owner, status=ImportJob.Status.RUNNING)
        r = _upload(people.owner_client, ("a.sse", _sse()))
        assert r.status_code == 429 and b"at most 1 at once" in r.content

    def test_a_job_of_a_dead_process_does_not_hold_a_slot_for_good(self, people, settings):
        settings.STREAMSCOPE = {"IMPORT_MAX_CONCURRENT": 1}
        stale = ImportJob.objects.create(user=people.owner, status=ImportJob.Status.RUNNING)
        ImportJob.objects.filter(pk=stale.pk).update(
            updated_at=timezone.now() - dt.timedelta(seconds=import_jobs.STALE_S + 1)
        )
        assert _upload(people.owner_client, ("a.sse", _sse())).status_code == 302
        stale.refresh_from_db()
        assert (stale.status, stale.error) == ("failed", "interrupted")

    def test_more_files_than_allowed_are_refused_by_the_form(self, people):
        files = [(f"{i}.sse", _sse()) for i in range(import_jobs.MAX_FILES + 1)]
        r = _upload(people.owner_client, *files)
        assert r.status_code == 400 and b"at most 20 per upload" in r.content
        assert ImportJob.objects.count() == 0


def _har(**change):
    from tests.support.captures import har, har_entry

    entry = har_entry(_sse())
    for path, value in change.items():
        target = entry
        *parents, last = path.split("__")
        for p in parents:
            target = target[p]
        target[last] = value
    return har(entry)


class TestFailingCleanly:
    @pytest.mark.parametrize(
        "change,says",
        [
            ({"response__status": 10**30}, "not an HTTP status"),
            ({"response__status": -3}, "not an HTTP status"),
            ({"startedDateTime": "0001-01-01T00:00:00+14:00"}, "outside 1970-2999"),
            ({"startedDateTime": "9999-12-31T23:59:59-14:00"}, "outside 1970-2999"),
            ({"startedDateTime": "yesterday"}, "not an ISO 8601 time"),
            ({"request__postData__text": "x\ud800"}, "lone surrogate"),
        ],
    )
    def test_an_impossible_value_fails_its_file_in_words_and_keeps_no_upload(
        self, people, change, says
    ):
        r = _upload(people.owner_client, ("bad.har", _har(**change)), ("good.sse", _sse()))
        assert r.status_code == 302
        job = ImportJob.objects.get()
        bad, good = job.files.order_by("position")
        assert (job.status, bad.status, good.status) == ("done", "failed", "done")
        assert says in bad.error and "Error" not in bad.error, bad.error
        assert bytes(bad.content) == b"" and bytes(good.content) == b""
        assert Stream.objects.count() == 1

    def test_a_value_only_the_database_refuses_fails_its_file_not_the_job(
        self, people, monkeypatch
    ):
        real = import_jobs.importer.store_captures

        def store(captures, **kwargs):
            if captures and "boom" in (captures[0].filename or ""):
                raise OverflowError("Python int too large to convert to SQLite INTEGER")
            return real(captures, **kwargs)

        monkeypatch.setattr(import_jobs.importer, "store_captures", store)
        _upload(people.owner_client, ("boom.sse", _sse()), ("fine.sse", _sse()))
        job = ImportJob.objects.get()
        boom, fine = job.files.order_by("position")
        assert (job.status, boom.status, fine.status) == ("done", "failed", "done")
        assert boom.error == f"Cannot import boom.sse: {import_jobs.UNEXPECTED}"
        assert bytes(boom.content) == b""

    def test_a_job_whose_bookkeeping_fails_keeps_no_upload(self, people, monkeypatch):
        def broken(job_id):
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(import_jobs, "run", broken)
        _upload(people.owner_client, ("a.sse", _sse()), ("b.sse", _sse()))
        job = ImportJob.objects.get()
        assert (job.status, job.error) == ("failed", import_jobs.UNEXPECTED)
        assert {(f.status, bytes(f.content)) for f in job.files.all()} == {("failed", b"")}


class TestReasonsInThePagesLanguage:
    """A file's reason is stored in English with its code (ImportFile.error_reason); the import
    page says it in its own language, numbers written that language's way."""

    def test_a_dutch_import_page_says_why_in_dutch_and_the_row_stays_english(
        self, people, monkeypatch
    ):
        monkeypatch.setattr(import_jobs.importer, "MAX_EVENTS_PER_UPLOAD", 1000)
        # (the upload form refuses an empty file itself: submitted as the form hands files on)
        files = [("leeg.sse", b""), ("veel.sse", b"data: {}\n\n" * 1001)]
        job = import_jobs.submit(people.owner, files)
        empty, many = job.files.order_by("position")
        assert empty.error == "Cannot import leeg.sse: the file is empty"
        assert empty.error_reason == {"code": "empty", "params": {}}
        assert many.error == (
            "Cannot import veel.sse: more than 1,000 events; one file may hold at most 1,000"
        )
        assert many.error_reason == {"code": "too_many_events", "params": {"limit": 1000}}

        def page(language):
            response = people.owner_client.get(f"/imports/{job.pk}/", HTTP_ACCEPT_LANGUAGE=language)
            assert response["Content-Language"] == language
            return html.unescape(response.content.decode())

        nl = page("nl")
        assert "Kan leeg.sse niet importeren: het bestand is leeg" in nl
        assert (
            "Kan veel.sse niet importeren: meer dan 1\u202f000 events; één bestand mag er "
            "hooguit 1\u202f000 bevatten"
        ) in nl
        assert "the file is empty" not in nl and "1,000" not in nl
        en = page("en")  # (its figures grouped as every page's: "1 000")
        assert empty.error in en and many.error.replace("1,000", "1\u202f000") in en
        # what is stored is data: still English after the Dutch page was shown
        empty.refresh_from_db()
        assert empty.error == "Cannot import leeg.sse: the file is empty"

    def test_a_row_without_a_known_reason_shows_its_stored_text(self, people):
        job = ImportJob.objects.create(user=people.owner, status=ImportJob.Status.DONE)
        for i, reason in enumerate((None, {"code": "from_a_later_version", "params": {}})):
            ImportFile.objects.create(
                job=job, position=i, filename=f"{i}.sse", size=1, status="failed",
                error=f"Cannot import {i}.sse: something new", error_reason=reason,
            )  # fmt: skip
        nl = people.owner_client.get(f"/imports/{job.pk}/", HTTP_ACCEPT_LANGUAGE="nl")
        text = html.unescape(nl.content.decode())
        assert "Kan 0.sse niet importeren: something new" in text
        assert "Kan 1.sse niet importeren: something new" in text


def test_uploads_at_once_cannot_pass_the_concurrent_cap_together(people, settings, monkeypatch):
    import threading
    import time

    settings.STREAMSCOPE = {"IMPORT_MAX_CONCURRENT": 2, "IMPORT_MAX_PER_MINUTE": 100}
    monkeypatch.setattr(import_jobs, "start", lambda job_id: None)  # jobs stay queued
    # every upload reaches its transaction together (the race a count-then-insert loses)
    atomic = import_jobs.transaction.atomic

    def slow_atomic(*args, **kwargs):
        time.sleep(0.05)
        return atomic(*args, **kwargs)

    monkeypatch.setattr(import_jobs.transaction, "atomic", slow_atomic)
    barrier = threading.Barrier(12)
    outcomes = []

    def submit():
        from django.db import connection

        try:
            barrier.wait()
            import_jobs.submit(people.owner, [("a.sse", _sse())])
            outcomes.append("ok")
        except import_jobs.ImportRefused:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["ok"] * 2 + ["refused"] * 10
    assert ImportJob.objects.filter(status__in=ImportJob.ACTIVE_STATUSES).count() == 2
