"""Imports off the request path: an upload becomes an `ImportJob` whose files are read in the
background, with progress a page can poll, cancellable, and cancelled when nobody watches.

    job = import_jobs.submit(user, [(filename, content), …], model="auto")   # ImportRefused: 429
    import_jobs.progress(job_id)    # what the page shows; counts as someone watching
    import_jobs.cancel(job_id)

The files wait in the database (`ImportFile.content`), so a job is not tied to the request that
made it; a small thread pool per process reads them (`importer.read_capture`, then
`importer.store_captures`, one file at a time, each file whole or not at all). Between steps a
job looks whether it was cancelled, or whether its page was last polled more than
IMPORT_ABANDON_S ago (the browser left: its work is no longer wanted). The caps on what one
file may become (size, events, findings) stay the importer's; this module adds the per-user
ones: IMPORT_MAX_PER_MINUTE uploads and IMPORT_MAX_CONCURRENT jobs at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop, ngettext

from streams.core import conf
from streams.ingest import importer
from streams.models import ImportFile, ImportJob

log = logging.getLogger(__name__)

MAX_FILES = 20  # per upload
# Jobs read at once per process: parsing is CPU-bound Python; more threads would only take
# the GIL from the server's event loop.
WORKERS = 2
# A job left queued/running this long without a touch belongs to a dead process.
STALE_S = 300

# Tests that run inside one database transaction (which the pool's threads cannot see) read
# the job in the submitting thread instead.
RUN_INLINE = False

_executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="streamscope-import")
_lock = threading.Lock()
_running = set()  # job ids this process is reading


class ImportRefused(Exception):
    """Over a per-user cap (the view answers 429)."""

    def __init__(self, message, retry_after):
        super().__init__(message)
        self.retry_after = retry_after


class Cancelled(Exception):
    pass


def submit(user, files, model="") -> ImportJob:
    """Store the upload as a queued job and start reading it in the background (sync)."""
    s = conf.get()
    now = timezone.now()
    _sweep_stale(user)
    # The job is inserted first and the caps counted after, in one transaction that holds the
    # user's lock: 12 uploads at once cannot all count the same 1 running job and all start.
    with transaction.atomic():
        _lock_user(user.pk)
        job = ImportJob.objects.create(user=user, model=model)  # (the fields bound it)
        jobs = ImportJob.objects.filter(user=user).exclude(pk=job.pk)
        recent = jobs.filter(created_at__gte=now - dt.timedelta(seconds=60)).count()
        if recent >= s.import_max_per_minute:
            raise ImportRefused(
                gettext("At most %(n)s uploads per minute: try again in a minute.")
                % {"n": s.import_max_per_minute},
                60,
            )
        active = jobs.filter(status__in=ImportJob.ACTIVE_STATUSES).count()
        if active >= s.import_max_concurrent:
            raise ImportRefused(
                ngettext(
                    "You have %(n)s import running; at most %(limit)s at once. "
                    "Wait for one to finish, or cancel it.",
                    "You have %(n)s imports running; at most %(limit)s at once. "
                    "Wait for one to finish, or cancel it.",
                    active,
                )
                % {"n": active, "limit": s.import_max_concurrent},
                5,
            )
        ImportFile.objects.bulk_create(
            [
                ImportFile(
                    job=job, position=i, filename=name, size=len(content), content=content
                )  # fmt: skip
                for i, (name, content) in enumerate(files)
            ]
        )
    start(job.pk)
    return job


def _lock_user(user_id):
    """Serialise one user's submissions until the transaction ends: PostgreSQL's advisory
    lock; SQLite serialises writers itself (the insert above holds its write lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_SPACE, user_id])


_LOCK_SPACE = 0x5353  # this module's advisory locks, apart from anyone else's


def start(job_id):
    with _lock:
        if job_id in _running:
            return None
        _running.add(job_id)
    if RUN_INLINE:
        return _run_in_thread(job_id, inline=True)
    return _executor.submit(_run_in_thread, job_id)


def _run_in_thread(job_id, inline=False):
    if not inline:
        close_old_connections()
    try:
        run(job_id)
    except Exception:
        # the job's own bookkeeping failed (a file's failure is the file's, in _read_file):
        # no upload is kept, every file not read says so
        log.exception("import %s failed", job_id)
        ImportFile.objects.filter(job_id=job_id).exclude(
            status__in=(ImportFile.Status.DONE, ImportFile.Status.FAILED)
        ).update(status=ImportFile.Status.FAILED, error=UNEXPECTED, content=b"")
        ImportJob.objects.filter(pk=job_id, status__in=ImportJob.ACTIVE_STATUSES).update(
            status=ImportJob.Status.FAILED, error=UNEXPECTED
        )
    finally:
        with _lock:
            _running.discard(job_id)
        if not inline:
            close_old_connections()


def _still_wanted(job_id):
    """Raises Cancelled when the job was cancelled or abandoned."""
    ImportJob.objects.filter(pk=job_id).update(updated_at=timezone.now())  # alive (STALE_S)
    job = ImportJob.objects.filter(pk=job_id).values("status", "polled_at").first()
    if job is None or job["status"] == ImportJob.Status.CANCELLED:
        raise Cancelled("cancelled")
    quiet = (timezone.now() - job["polled_at"]).total_seconds()
    if quiet > conf.get().import_abandon_s:
        ImportJob.objects.filter(pk=job_id, status__in=ImportJob.ACTIVE_STATUSES).update(
            status=ImportJob.Status.CANCELLED, cancel_reason="abandoned"
        )
        raise Cancelled("abandoned")


def run(job_id):
    """Read a job's files in order (sync; the pool's threads call it)."""
    claimed = ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.QUEUED).update(
        status=ImportJob.Status.RUNNING, updated_at=timezone.now()
    )
    if not claimed:
        return
    job = ImportJob.objects.select_related("user").get(pk=job_id)
    file_ids = list(job.files.order_by("position").values_list("pk", flat=True))
    try:
        for file_id in file_ids:
            _still_wanted(job_id)
            _read_file(job, file_id)
    except Cancelled:
        ImportFile.objects.filter(job_id=job_id, status=ImportFile.Status.QUEUED).update(
            status=ImportFile.Status.CANCELLED, content=b""
        )
        return
    ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.RUNNING).update(
        status=ImportJob.Status.DONE
    )


def _read_file(job, file_id):
    ImportFile.objects.filter(pk=file_id).update(status=ImportFile.Status.READING)
    f = ImportFile.objects.get(pk=file_id)
    content = bytes(f.content)
    try:
        captures = importer.read_capture(content, f.filename, job.model)
        _still_wanted(job.pk)  # parsing a big file takes a while: maybe nobody wants it now
        streams = importer.store_captures(captures, user=job.user, model=job.model)
    except importer.CaptureError as exc:
        error = CANNOT_IMPORT % {"file": f.filename, "reason": exc}
        return _file_failed(file_id, error, reason=exc.reason)
    except Cancelled:
        _file_failed(file_id, CANCELLED_BEFORE_STORED, ImportFile.Status.CANCELLED)
        raise
    except Exception:
        # a value the checks above let through and the database or a parser refused: the
        # file fails in words, its upload goes, the job reads on
        log.exception("import %s: file %s failed", job.pk, file_id)
        return _file_failed(file_id, CANNOT_IMPORT % {"file": f.filename, "reason": UNEXPECTED})
    ImportFile.objects.filter(pk=file_id).update(
        status=ImportFile.Status.DONE, stream_ids=[s.pk for s in streams], content=b""
    )


# A file's and a job's errors are stored in English (the pool's threads have no request, and
# so no language); progress() shows them in the page's language (_shown): the importer's
# reason from its code and parameters (ImportFile.error_reason), the rest by their text.
UNEXPECTED = gettext_noop(
    "a value in it could not be stored (nothing of it was kept; the server's log has the details)"
)
CANNOT_IMPORT = gettext_noop("Cannot import %(file)s: %(reason)s")
CANCELLED_BEFORE_STORED = gettext_noop("Cancelled before it was stored.")
INTERRUPTED = gettext_noop("interrupted")


def _shown(error, filename=None, reason=None):
    """A stored error in the request's language: the ones this module writes are translated,
    the importer's reason said again from its code (`reason`, when this version knows it; the
    stored English text else), a file's name as it is."""
    if not error:
        return error
    prefix = CANNOT_IMPORT % {"file": filename, "reason": ""} if filename is not None else None
    if prefix and error.startswith(prefix):
        said = importer.reason_shown(reason)
        if said is None:
            said = error[len(prefix) :]
            said = gettext(said) if said else said
        return gettext(CANNOT_IMPORT) % {"file": filename, "reason": said}
    return gettext(error)


def _file_failed(file_id, error, status=ImportFile.Status.FAILED, reason=None):
    ImportFile.objects.filter(pk=file_id).update(
        status=status, error=error[:2000], error_reason=reason, content=b""
    )


def _sweep_stale(user):
    """The user's jobs whose process died (untouched for STALE_S) end `failed`: they would hold
    a concurrent slot for good."""
    old = timezone.now() - dt.timedelta(seconds=STALE_S)
    with _lock:
        mine = set(_running)
    ImportJob.objects.filter(
        user=user, status__in=ImportJob.ACTIVE_STATUSES, updated_at__lt=old
    ).exclude(pk__in=mine).update(status=ImportJob.Status.FAILED, error=INTERRUPTED)


def progress(job_id, user):
    """The job (its files prefetched) if `user` owns it, else None; marks it watched."""
    job = ImportJob.objects.filter(pk=job_id, user=user).first()
    if job is None:
        return None
    if job.status in ImportJob.ACTIVE_STATUSES:
        # .update: touching polled_at must not bump updated_at's meaning (the job's own work)
        ImportJob.objects.filter(pk=job_id).update(polled_at=timezone.now())
    files = list(job.files.defer("content").order_by("position"))
    # shown in the page's language (not saved: the rows keep the English)
    job.error = _shown(job.error)
    for f in files:
        f.error = _shown(f.error, f.filename, f.error_reason)
    done = sum(f.status in (ImportFile.Status.DONE, ImportFile.Status.FAILED) for f in files)
    return {
        "job": job,
        "files": files,
        "done_files": done,
        "stream_ids": [sid for f in files for sid in f.stream_ids],
        "active": job.status in ImportJob.ACTIVE_STATUSES,
    }


def cancel(job_id, user):
    """Cancel the user's job if it is still queued or running; False if there is none."""
    if not ImportJob.objects.filter(pk=job_id, user=user).exists():
        return False
    ImportJob.objects.filter(pk=job_id, status__in=ImportJob.ACTIVE_STATUSES).update(
        status=ImportJob.Status.CANCELLED, cancel_reason="cancelled"
    )
    return True


def wait(job_id, timeout=60):
    """Until this process has finished reading the job (tests, `import_sse`-like callers)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _lock:
            if job_id not in _running:
                return ImportJob.objects.get(pk=job_id)
        time.sleep(0.02)
    raise TimeoutError(f"import {job_id} still running after {timeout} s")
