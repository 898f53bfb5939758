"""Running an experiment: every dataset item × variant once, as recorded streams.

A run is driven by one coroutine (`drive`) in one process at a time: each tick (`advance`) it
notes the items whose streams ended, and starts new ones while fewer than the experiment's
concurrency are in flight. Streams are created and started through streams/run/services.py,
as every stream is, so they are recorded, listed and run in a `stream_worker` when workers are
configured. The run's state and its items live in the database, so a cancel from any process
stops it and a resume (from any process) starts only the items not done: a finished item is
never recorded again. A run whose driving process went away is marked `stopped` by the
periodic job `experiments.stopped`, to be resumed.
"""

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime as dt
import logging
import time

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import Count, Max, Q

from streams import evaluate
from streams.core import conf
from streams.core.lifecycle import RUNNER_ID
from streams.experiments import datasets, results
from streams.models import Run, RunItem, Stream
from streams.run import periodic, services
from streams.store import rows

log = logging.getLogger(__name__)

TICK_S = 0.2
# A driver that has not ticked for this long is gone (its run is `stopped`, to be resumed).
DRIVER_STALE_S = 30.0
# How often a driver writes that it still drives its run.
CLAIM_EVERY_S = 1.0
# How often a driver looks whether its experiment has evaluators.
EVALUATORS_EVERY_S = 1.0
# What the OpenAI API takes as request metadata (an item's metadata goes upstream with it).
METADATA_MAX_KEYS, METADATA_MAX_VALUE = 16, 512


@dataclasses.dataclass
class Progress:
    total: int = 0
    done: int = 0
    in_flight: int = 0
    failed: int = 0
    state: str = Run.State.RUNNING

    @property
    def waiting(self):
        return self.total - self.done - self.in_flight

    @property
    def percent(self):
        return 100 if not self.total else int(100 * self.done / self.total)

    @property
    def finished(self):
        return self.state != Run.State.RUNNING


def run_tag(run):
    """The tag on every stream of `run` (the stream list finds them by it)."""
    return f"run:{run.pk}"


def request_metadata(metadata):
    """The part of an item's metadata sent upstream with it (what the API accepts)."""
    out = {}
    for key, value in (metadata or {}).items():
        if len(out) >= METADATA_MAX_KEYS:
            break
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        if len(str(key)) <= 64 and len(str(value)) <= METADATA_MAX_VALUE:
            out[str(key)] = value
    return out


def request_body(item, variant):
    """The Responses request of `item` sent with `variant`: the variant's settings over the
    item's own (instructions and tools: the item's when the variant has none)."""
    body = rows.build_request_body(
        item.input,
        variant.model,
        instructions=variant.instructions or item.instructions,
        temperature=variant.temperature,
        max_output_tokens=variant.max_output_tokens,
        metadata=request_metadata(item.metadata),
    )
    tools = variant.tools if variant.tools is not None else item.tools
    if tools:
        body["tools"] = tools
    if variant.reasoning_effort:
        body["reasoning"] = {"effort": variant.reasoning_effort}
    return body


def start(experiment, user):
    """A new run of `experiment` (its dataset version frozen from now on), to be driven."""
    with transaction.atomic():
        datasets.freeze(experiment.dataset_version)
        number = (experiment.runs.aggregate(n=Max("number"))["n"] or 0) + 1
        run = Run.objects.create(
            project_id=experiment.project_id,
            experiment=experiment,
            number=number,
            started_by=user if getattr(user, "pk", None) else None,
            driver=RUNNER_ID,
            driven_at=dt.datetime.now(dt.UTC),
        )
        items = experiment.dataset_version.items.order_by("position").values_list("pk", flat=True)
        variants = list(experiment.variants.order_by("position").values_list("pk", flat=True))
        RunItem.objects.bulk_create(
            (
                RunItem(run=run, item_id=item, variant_id=variant)
                for item in items.iterator(chunk_size=2000)
                for variant in variants
            ),
            batch_size=2000,
        )
    return run


def cancel(run):
    """Stop `run`: nothing new starts, its streams in flight are cancelled, and their items
    wait for a resume. False when it was not running."""
    if not Run.objects.filter(pk=run.pk, state=Run.State.RUNNING).update(state=Run.State.CANCELLED):
        return False
    in_flight = RunItem.objects.filter(run=run, done=False, stream__isnull=False)
    for run_item in in_flight.select_related("stream"):
        # one that ended meanwhile stays linked (its item is done at the next tick); the rest
        # wait for a resume, their cancelled streams kept as recorded, unlinked
        if services.cancel(run_item.stream) != services.FINISHED:
            RunItem.objects.filter(pk=run_item.pk, done=False).update(stream=None)
    return True


def resume(run):
    """Run `run`'s items that are not done (a cancelled or stopped run); False when it is
    running or finished. The caller drives it (`launch` or `drive`)."""
    return bool(
        Run.objects.filter(pk=run.pk, state__in=[Run.State.CANCELLED, Run.State.STOPPED]).update(
            state=Run.State.RUNNING,
            driver=RUNNER_ID,
            driven_at=dt.datetime.now(dt.UTC),
            figures=None,
        )
    )


def progress(run_id, failed=True):
    """The run's Progress; without `failed` (None: not counted) it reads the run's items
    alone, not their streams (the driver's tick: the join was most of a tick at size)."""
    found = Run.objects.filter(pk=run_id).values_list("state", "figures").first()
    state, figures = found or (None, None)
    if state == Run.State.FINISHED and figures is not None:
        # (a finished run's counts are its stored figures': 30,000 joined rows otherwise)
        total, done, n_failed = results.stored_progress(figures)
        return Progress(total=total, done=done, failed=n_failed, state=state)
    counted = {
        "n_total": Count("pk"),
        "n_done": Count("pk", filter=Q(done=True)),
        "n_in_flight": Count("pk", filter=Q(done=False, stream__isnull=False)),
    }
    if failed:
        counted["n_failed"] = Count(
            "pk",
            filter=Q(done=True)
            & ~Q(stream__status__in=[Stream.Status.COMPLETED, Stream.Status.INCOMPLETE]),
        )
    counts = RunItem.objects.filter(run_id=run_id).aggregate(**counted)
    counts.setdefault("n_failed", None)
    return Progress(state=state or Run.State.CANCELLED, **{k[2:]: v for k, v in counts.items()})


def _settled(stream, now):
    """Whether `stream` (an item's latest attempt) has ended for good: a stalled attempt may
    still get a retry (the runner makes it just after), so it waits a moment."""
    if stream.is_active:
        return False
    if stream.status == Stream.Status.STALLED and stream.attempt < conf.get().stall_max_attempts:
        return stream.finished_at is not None and (now - stream.finished_at).total_seconds() > 5
    return True


def _latest_attempts(first_ids):
    """{first attempt id: its latest attempt} of the streams `first_ids`."""
    latest = {}
    attempts = Stream.objects.filter(Q(pk__in=first_ids) | Q(first_attempt_id__in=first_ids))
    for stream in attempts.only("pk", "status", "attempt", "finished_at", "first_attempt_id"):
        first = stream.first_attempt_id or stream.pk
        if first not in latest or stream.attempt > latest[first].attempt:
            latest[first] = stream
    return latest


def _drives(run, now):
    """Whether this process drives `run` (read this tick) for another tick: it is running and
    this process drove it last or its driver is gone. The claim is written (a conditional
    UPDATE, and a commit) at most every CLAIM_EVERY_S, not every tick: another process takes
    a run over only once it has not been driven for DRIVER_STALE_S."""
    if run is None or run.state != Run.State.RUNNING:
        return False
    stale = now - dt.timedelta(seconds=DRIVER_STALE_S)
    ours = run.driver == RUNNER_ID
    if not ours and run.driven_at is not None and run.driven_at >= stale:
        return False
    recent = run.driven_at is not None and (now - run.driven_at).total_seconds() < CLAIM_EVERY_S
    if ours and recent:
        return True
    return bool(
        Run.objects.filter(
            Q(driver=RUNNER_ID) | Q(driven_at__lt=stale) | Q(driven_at__isnull=True),
            pk=run.pk,
            state=Run.State.RUNNING,
        ).update(driver=RUNNER_ID, driven_at=now)
    )


def advance(run_id, failed=True, counted=True):
    """One tick of `run_id`: (the streams created for the caller to start, Progress; its
    `failed` counted with `failed`). Without `counted` the items are counted only when the
    run ends or is no longer driven here (a tick's other Progress has its state alone: the
    count read every item of the run, every tick)."""
    created, state, _ = _advance(run_id, failed, counted)
    return created, state


def _advance(run_id, failed, counted, evaluating=0):
    """`advance`, and whether this process still drives the run. `evaluating`: evaluations
    this process has claimed and not finished (a claimed item reads as evaluated: the run
    does not end, nor store its figures, before their scores are written)."""
    now = dt.datetime.now(dt.UTC)
    run = Run.objects.select_related("experiment", "started_by").filter(pk=run_id).first()
    if not _drives(run, now):
        return [], progress(run_id, failed), False
    in_flight = dict(
        RunItem.objects.filter(run_id=run_id, done=False, stream__isnull=False).values_list(
            "pk", "stream_id"
        )
    )
    latest = _latest_attempts(list(in_flight.values()))
    ended = []
    for item_pk, stream_id in in_flight.items():
        last = latest.get(stream_id)
        if last is None or _settled(last, now):
            ended.append((item_pk, last))
    slots = run.experiment.concurrency - (len(in_flight) - len(ended))
    waiting = _waiting(run, slots) if slots > 0 else []
    created = []
    if ended or waiting:
        # the items that ended marked and the new streams created in one transaction: one
        # commit a tick (a commit was a large share of what a tick cost)
        with transaction.atomic():
            # (the run's row first, as `cancel` writes it before the items: then a cancel
            # between the reads and here leaves the waiting items waiting; and the write is
            # this tick's claim, with no statement of its own)
            running = Run.objects.filter(pk=run_id, state=Run.State.RUNNING).update(driven_at=now)
            _mark_done(ended, in_flight)
            if running and waiting:
                created = _top_up(run, waiting)
    if created or len(in_flight) > len(ended):
        # (items in flight or just started: not at its end; its state as read this tick)
        if not counted:
            return created, Progress(state=run.state), True
        return created, progress(run_id, failed), True
    state = progress(run_id, failed)
    if state.done == state.total and not evaluating and not _unevaluated(run):
        # its figures stored as it finishes, by the function that computed them live
        figures = results.as_stored(results.computed_summaries(run))
        Run.objects.filter(pk=run_id, state=Run.State.RUNNING).update(
            state=Run.State.FINISHED, finished_at=now, figures=figures
        )
        state = progress(run_id)
    return created, state, state.state == Run.State.RUNNING


def _unevaluated(run):
    """Whether items of `run` wait for its experiment's evaluators."""
    return (
        run.experiment.evaluators.exists()
        and RunItem.objects.filter(run_id=run.pk, evaluated=False).exists()
    )


def _mark_done(ended, in_flight):
    """The items `ended` [(run item id, its stream's last attempt)] are done, in one
    statement for those without a retry (a statement, and a commit, per item was a large
    share of what a run cost over the same streams started directly)."""
    # (each conditional: a cancel meanwhile unlinked it, and it waits for a resume)
    same = {pk for pk, last in ended if last is not None and last.pk == in_flight[pk]}
    if same:
        # (a stream is one item's: an item with one of these streams has its own)
        RunItem.objects.filter(
            pk__in=same, stream_id__in=[in_flight[pk] for pk in same], done=False
        ).update(done=True)
    for pk, last in ended:
        if pk not in same:  # (its stall retry's row, or none left)
            RunItem.objects.filter(pk=pk, done=False, stream_id=in_flight[pk]).update(
                done=True, stream=last
            )


def _waiting(run, slots):
    """Up to `slots` of `run`'s items waiting for a stream, with their items and variants."""
    # (in the order of the items' and variants' positions: `start` made them in that order;
    # the order by the joined positions sorted every waiting item each tick, and the join
    # chose a plan that read them all: 170 ms a tick at 30,000 items)
    pks = list(
        RunItem.objects.filter(run=run, done=False, stream__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)[:slots]
    )
    if not pks:
        return []
    return list(RunItem.objects.filter(pk__in=pks).select_related("item", "variant").order_by("pk"))


def _top_up(run, waiting):
    """Streams for the `waiting` items, in the caller's transaction; [the new streams]."""
    bodies = [request_body(run_item.item, run_item.variant) for run_item in waiting]
    created = services.create_many_for_run(
        run.started_by, bodies, run.project_id, tags=[run_tag(run)]
    )
    for run_item, stream in zip(waiting, created, strict=True):
        run_item.stream = stream
    # (one statement run for every item: `bulk_update`'s CASE over the items cost more
    # Python than creating their streams)
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {qn(RunItem._meta.db_table)} SET {qn('stream_id')} = %s WHERE {qn('id')} = %s",
            [(r.stream.pk, r.pk) for r in waiting],
        )
    return created


def claim_unevaluated(run_id, limit):
    """Up to `limit` done items of `run_id` whose evaluators were not applied, claimed for
    this process (each is evaluated once: a conditional UPDATE, as the work queue claims)."""
    candidates = RunItem.objects.filter(
        run_id=run_id, done=True, evaluated=False, run__experiment__evaluators__isnull=False
    ).values_list("pk", flat=True)
    claimed = []
    for pk in list(candidates.distinct()[:limit]):
        if RunItem.objects.filter(pk=pk, evaluated=False).update(evaluated=True):
            claimed.append(pk)
    return claimed


def evaluate_item(run_item_id):
    """Apply the item's experiment's evaluators to its stream (with the item's expected
    output); [Result] (streams/evaluate/). Sync and possibly slow (a judge records a stream
    and waits for it): the driver runs it in a thread of its own."""
    run_item = RunItem.objects.select_related("item", "stream", "run__experiment").get(
        pk=run_item_id
    )
    if run_item.stream is None:
        return []
    expected = run_item.item.expected_output or None
    return [
        evaluate.apply(evaluator, stream=run_item.stream, expected=expected, for_run=True)
        for evaluator in run_item.run.experiment.evaluators.order_by("pk")
    ]


async def _evaluate(run_item_id):
    try:
        await asyncio.to_thread(evaluate_item, run_item_id)
    except Exception:
        log.exception("run item %s: its evaluation failed", run_item_id)


@dataclasses.dataclass
class _Driving:
    """What a driver remembers between its ticks."""

    counted: bool  # (every tick's Progress counted: someone is shown it)
    evaluators: bool = True  # whether its experiment had evaluators when last looked
    evaluators_at: float = -EVALUATORS_EVERY_S
    evaluating: int = 0  # its evaluations claimed and still running


def _tick(run_id, evaluations, driving):
    """`advance`, then up to `evaluations` items claimed for evaluating, and whether this
    process still drives the run: one trip to the thread the database is used from (it is
    the recordings' too, and each trip waits for their writes)."""
    created, state, ours = _advance(run_id, driving.counted, driving.counted, driving.evaluating)
    now = time.monotonic()
    if evaluations > 0 and now - driving.evaluators_at >= EVALUATORS_EVERY_S:
        # (looked at every EVALUATORS_EVERY_S, not every tick: an evaluator added to a
        # running experiment is applied from then on; its run ends only once it has been)
        driving.evaluators_at = now
        driving.evaluators = Run.objects.filter(
            pk=run_id, experiment__evaluators__isnull=False
        ).exists()
    claimed = (
        claim_unevaluated(run_id, evaluations) if driving.evaluators and evaluations > 0 else []
    )
    return created, state, claimed, ours


async def drive(run_id, on_progress=None, tick_s=TICK_S, evaluations=None):
    """Drive `run_id` until it finishes, is cancelled or another process drives it; returns
    the last Progress. `on_progress(progress)` after every tick (the command's bar). Items
    are evaluated as they end, at most `evaluations` at once (default: the concurrency)."""
    evaluating, recording = set(), set()
    ended = asyncio.Event()  # (one of this process's recordings ended since the last tick)
    evaluations = evaluations or await _concurrency(run_id)
    driving = _Driving(counted=on_progress is not None)
    try:
        while True:
            # (the items counted each tick only for someone shown them: the command's bar)
            driving.evaluating = len(evaluating)
            created, state, claimed, ours = await sync_to_async(_tick)(
                run_id, evaluations - len(evaluating), driving
            )
            for stream in created:
                task = await services.start(stream)
                if task is not None:
                    recording.add(task)
                    task.add_done_callback(recording.discard)
                    task.add_done_callback(lambda _: ended.set())
            for pk in claimed:
                task = asyncio.create_task(_evaluate(pk))
                evaluating.add(task)
                task.add_done_callback(evaluating.discard)
            if on_progress is not None:
                on_progress(state)
            if state.finished or not ours:
                return state
            # the next tick when one of this process's recordings ends (its slot is free: a
            # fixed tick left slots idle for up to a tick each, a large share of short
            # streams' time), at once when one ended during this tick, else (a worker
            # records them) after tick_s
            if not ended.is_set():
                if recording:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(tick_s):
                            await ended.wait()
                else:
                    await asyncio.sleep(tick_s)
            ended.clear()
    finally:
        if evaluating:
            await asyncio.gather(*evaluating)


async def _concurrency(run_id):
    return (
        await Run.objects.filter(pk=run_id)
        .values_list("experiment__concurrency", flat=True)
        .afirst()
        or 1
    )


_drivers = {}


def launch(run):
    """Drive `run` as a task on the running loop (a page's, the API's): it outlives the request
    that started it. One driver per run in this process."""
    task = _drivers.get(run.pk)
    if task is not None and not task.done():
        return task
    # a fresh context, not the request's (see runner.start)
    task = asyncio.get_running_loop().create_task(
        drive(run.pk), name=f"run-{run.pk}", context=contextvars.Context()
    )
    _drivers[run.pk] = task
    task.add_done_callback(lambda t: _driven(run.pk, t))
    return task


def _driven(run_id, task):
    if _drivers.get(run_id) is task:
        del _drivers[run_id]
    if not task.cancelled() and task.exception() is not None:
        log.error("run %s: its driver failed", run_id, exc_info=task.exception())


@periodic.job("experiments.stopped", 10.0)
def mark_stopped():
    """Runs whose driving process went away are `stopped` (a page offers to resume them)."""
    stale = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=DRIVER_STALE_S)
    return Run.objects.filter(
        Q(driven_at__lt=stale) | Q(driven_at__isnull=True), state=Run.State.RUNNING
    ).update(state=Run.State.STOPPED)
