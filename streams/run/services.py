"""Creating, starting and cancelling streams: the one way, for every caller.

The JSON API, the playground, `manage.py record`, the stall and orphan retries of the runner
and the benchmarks all create their rows here (built by `streams.store.rows`, as every row is), so a
stream's row is built one way (its prompt, requested model, scenario, attempt links, who runs
it) and the per-user limit is checked one way.
Sync functions run in one transaction; call them through `sync_to_async` from async code.
"""

import functools

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.translation import gettext, ngettext

from streams.core import conf, lifecycle
from streams.ingest.writer import get_writer
from streams.live import relay
from streams.models import Stream
from streams.run import runner
from streams.store import rows


class TooMany(Exception):
    """Over the per-user limit; `running` streams are running, `limit` may."""

    http_status, code = 429, "too_many_streams"

    def __init__(self, running, limit):
        super().__init__(running, limit)
        self.running, self.limit = running, limit

    def message(self):
        """In the request's language: a page's, or English for the API and the proxy (their
        routes are forced to English, dashboard/language.py)."""
        return ngettext(
            "You have %(running)s stream running; at most %(limit)s at a time. "
            "Wait for one to finish or cancel one.",
            "You have %(running)s streams running; at most %(limit)s at a time. "
            "Wait for one to finish or cancel one.",
            self.running,
        ) % {"running": self.running, "limit": self.limit}


class ShuttingDown(TooMany):
    """This process is stopping (streams/run/shutdown.py): it starts no stream."""

    http_status, code = 503, "shutting_down"

    def __init__(self):
        super().__init__(0, 0)

    def message(self):
        return gettext("The server is stopping: start the stream again in a moment.")


def create_proxied(
    user, body, *, tags=(), session="", project=None, token=None, format=Stream.Format.RESPONSES
):
    """The row of a request the recording proxy forwards (streams/serve/proxy.py), unsaved: the
    writer inserts it with its next batch (`start_proxied`). Recorded by this process, in the
    request that holds the client's connection, whatever STREAMSCOPE_RUNNER says; the proxy's
    own per-token limit applies, not the per-user one of pages and the API. `project`,
    `token`: the token's (its spend counts the stream's cost); `format`: the API the request
    speaks."""
    return rows.pending_row(
        user,
        body,
        source=Stream.Source.PROXY,
        claimed=True,
        tags=tags,
        session=session,
        project=project,
        token=token,
        format=format,
    )


def running_count(user):
    return Stream.objects.filter(user=user, status__in=Stream.ACTIVE_STATUSES).count()


def create(user, body, project=None, token=None, tags=(), format=Stream.Format.RESPONSES):
    """A new pending stream for `user` in `project` (by default their personal one) within
    the per-user limit, or `TooMany`. `token`: the API token it was started with (its spend
    counts the stream's cost, as a proxied one's); `tags`: what a judge's stream is marked
    with (streams/evaluate/judge.py); `format`: the API `body` speaks (its upstream, its
    checker: `rows.build_request_body` builds a body in each)."""
    if lifecycle.stopping:
        raise ShuttingDown()
    limit = conf.get().max_concurrent_per_user
    with transaction.atomic():
        # Serialise one user's creations so two requests cannot both pass the check
        # (SQLite's IMMEDIATE transactions already do; this is for PostgreSQL).
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        running = running_count(user)
        if running >= limit:
            raise TooMany(running, limit)
        return rows.new_row(user, body, project=project, token=token, tags=tags, format=format)


def create_for_run(user, body, project, *, tags=()):
    """A new pending stream of an experiment's run (streams/experiments/runs.py): bounded by
    its experiment's concurrency limit, which its user chose for this run, not by the per-user
    one of pages (a run of 50 at a time is deliberate load, not a runaway tab)."""
    return create_many_for_run(user, [body], project, tags=tags)[0]


def create_many_for_run(user, bodies, project, *, tags=()):
    """`create_for_run` of each of `bodies`, in one INSERT (a run's tick starts several)."""
    if lifecycle.stopping:
        raise ShuttingDown()
    return rows.new_rows(user, bodies, project=project, tags=tags)


async def start(stream):
    """Run a created stream (a task on this loop, or a wake-up for the workers) and announce
    it to the live list. Call after the transaction that created it has committed. Returns
    the task recording it here, or None when a worker will (a judge waits for either)."""
    task = runner.start(stream)
    await relay.publish_created(stream)
    return task


def start_proxied(
    user,
    body,
    url,
    forwarded,
    *,
    tags=(),
    session="",
    project=None,
    token=None,
    format=Stream.Format.RESPONSES,
):
    """Record a request the recording proxy forwards (a `recorder.Forwarded`): sent upstream
    at once, its row (`create_proxied`) created meanwhile and announced once it exists.
    Returns the runner's `Proxied` (its task, and its cancel with a reason)."""
    make = functools.partial(
        create_proxied,
        user,
        body,
        tags=tags,
        session=session,
        project=project,
        token=token,
        format=format,
    )
    # made and inserted by the writer, in its next batch (one transaction, on its thread)
    open_row = functools.partial(get_writer().create, make)
    project_id = getattr(project, "pk", project)
    return runner.start_proxied(
        open_row, body, url, forwarded, project_id=project_id, token_id=token, format=format
    )


async def record(stream, *, base_url=None):
    """Record `stream` here and now, with its retries (the CLI); returns the last attempt."""
    last, _ = await runner.run_stream(stream, base_url=base_url)
    return last


CANCELLING, FINISHED, NOT_RUNNING_HERE = "cancelling", "finished", "not_running_here"


def cancel(stream):
    """Ask `stream` to stop: CANCELLING, FINISHED (it already ended) or NOT_RUNNING_HERE (it
    runs in another server process that this one cannot reach)."""
    if not stream.is_active:
        return FINISHED
    # Stall retries run in the task of the first attempt.
    if runner.cancel(stream.first_attempt_id or stream.pk) or runner.cancel(stream.pk):
        return CANCELLING
    if runner.cancel_orphan(stream):  # its process died: cancelled in the database
        return CANCELLING
    return NOT_RUNNING_HERE
