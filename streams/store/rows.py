"""One home for the `Stream` row: how it is built, bounded, finished and written.

- **Built** (`new`, `create`): every path that makes a row (the API, the playground, `record`,
  retries, the proxy, imports) derives the request columns (requested model, scenario, prompt)
  from the request body here.
- **Bounded** (`bound`, `bound_event_values`): a text value is made storable by the one rule
  of `streams.core.storable` (cut to its column's `max_length`, read from the model's fields;
  a NUL replaced by U+FFFD), before a stream's fields are published and on the raw event
  INSERT / COPY; every model's text fields (`streams.fields`) apply it again wherever else a
  value enters SQL. Only the bounded columns are cut; an event's `data` keeps all its
  characters but NUL, and `raw` (the verbatim event) everything. PostgreSQL refuses a value
  longer than its column and any NUL (SQLite takes both), so an upstream sending a model id or
  an SSE `event:` name too long for its column, or a NUL, must not be able to fail the write.
- **Finished** (`finished`): the fields a stream ends with (status, output, tokens, bytes,
  counts, findings, terminal times, error, TTFT and the other derived figures), from the
  checker and what the caller knows. The recorder, the importer and every path that ends a
  row use it; `from_events` / `end_from_stored` rebuild them from a row's stored events (what
  the orphan sweep and a cancel of an orphan write, so a stream whose process died shows what
  was stored of it).
- **Written** (`write_batch`): the recorder's batches, one transaction for all streams, retried
  while the database is unreachable; when the database refuses one stream's rows (a data or
  integrity error) the batch is written again stream by stream, so the others are stored and
  only that stream loses its events (and ends `failed`, `storage_refused`).

Imports only the models, the checker and small helpers: the recorder, services, the importer
and the runner import this module, never the other way round.
"""

import datetime as dt
import functools
import itertools
import logging
import time
from dataclasses import dataclass

from django.db import (
    DEFAULT_DB_ALIAS,
    close_old_connections,
    connection,
    connections,
    models,
    transaction,
)
from django.db.utils import DataError, IntegrityError, InterfaceError, OperationalError

from streams.core import capture, conf, figures, formats, lifecycle, safejson, usage
from streams.core.checks import (
    CREATED,
    OUTPUT,
    ROUTING,
    TERMINAL,
    TOOL_CALL,
    Violation,
    said,
)
from streams.core.storable import NUL, cut, storable, storable_json
from streams.models import Event, Finding, Stream, in_personal_projects
from streams.store import aggregates, prices, search, spend
from streams.store import events as stored_events
from streams.store.event_row import (
    PROXIED_ROW_COLUMNS,
    ROW_COLUMNS,
    ROW_RECEIVED_AT,
    ROW_STREAM_ID,
    ROW_T_US,
)

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Bounding


def _limits(model):
    """{field name: max_length} of a model's bounded text columns, from its fields."""
    return {
        f.name: f.max_length
        for f in model._meta.concrete_fields
        if isinstance(f, models.CharField) and f.max_length
    }


def _of_kind(model, kind):
    return frozenset(f.name for f in model._meta.concrete_fields if isinstance(f, kind))


STREAM_LIMITS = _limits(Stream)
EVENT_LIMITS = {Event._meta.get_field(name).column: limit for name, limit in _limits(Event).items()}
_STREAM_TEXT = _of_kind(Stream, models.CharField | models.TextField)
_STREAM_JSON = _of_kind(Stream, models.JSONField)
# {column: max_length, None for unbounded} of every text column of an event
EVENT_TEXT = {
    f.column: EVENT_LIMITS.get(f.column)
    for f in Event._meta.concrete_fields
    if isinstance(f, models.CharField | models.TextField)
}


def bound(fields, limits=STREAM_LIMITS):
    """Make the values of `fields` ({field name: value} of a stream row) storable
    (`streams.core.storable`: cut to their columns, no NUL), in place; returns `fields`.
    The fields do it again on the way to SQL; here it is done before a stream's fields are
    published, so what is shown live is what is stored."""
    for name, value in fields.items():
        if isinstance(value, str):
            if name in _STREAM_TEXT:
                fields[name] = storable(value, limits.get(name))
        elif value is not None and name in _STREAM_JSON:
            fields[name] = storable_json(value)
    return fields


@functools.cache
def _text_positions(columns):
    return tuple((i, EVENT_TEXT[c]) for i, c in enumerate(columns) if c in EVENT_TEXT)


def bound_event_values(values, columns):
    """Make the text columns of flat event values (`columns` values one event after the
    other) storable (`streams.core.storable`: cut to their lengths, no NUL), in place. Per
    batch, a C-level length and NUL scan per text column; the per-value walk only when some
    value needs it."""
    width = len(columns)
    for pos, limit in _text_positions(columns):
        column = values[pos::width]
        if not column:
            continue
        try:
            fits = limit is None or max(map(len, column)) <= limit
            clean = NUL not in "".join(column)
        except TypeError:  # (a NULL among them)
            column = [v for v in column if v is not None]
            fits = limit is None or max(map(len, column), default=0) <= limit
            clean = NUL not in "".join(column)
        if fits and clean:
            continue
        for i in range(pos, len(values), width):
            value = values[i]
            if value is not None:
                values[i] = storable(value, limit)


# ---------------------------------------------------------------------------------------------
# Building

# The prompt is kept for lists and search, not as the request (that is `request_body`).
PROMPT_MAX_CHARS = 10_000


def new(body, *, user=None, project=None, requested_model=None, **fields):
    """An unsaved, bounded row for a request `body`: the request's columns derived from it
    (`requested_model` replaces the body's model when given), `fields` for the rest."""
    metadata = body.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    if requested_model is None:
        requested_model = body.get("model")
    values = {
        "user": user if user is not None and getattr(user, "pk", None) else None,
        # a Project or its id (none: the user's personal project, Stream.save)
        "project_id": getattr(project, "pk", project),
        "request_body": body,
        # a model that is not a string (`["x"]`) names no model: the request body keeps it as
        # it came, the column says nothing rather than a Python repr
        "requested_model": requested_model if isinstance(requested_model, str) else "",
        "scenario": metadata.get("scenario") if isinstance(metadata.get("scenario"), str) else "",
        # (Chat Completions and Anthropic Messages send `messages`)
        "prompt": search.prompt_of(input_of(body))[:PROMPT_MAX_CHARS],
        # searchable from the start (its instructions); `finished` adds the output's parts
        "search_other": search.other_text(body, None),
        **fields,
    }
    return Stream(**with_search(bound(values)))


def with_search(fields):
    """`fields` (a row's, or the columns a write changes) and what the search index reads of
    the indexed columns among them, derived with every secret taken out (`search.derived`): a
    new dict, or `fields` itself when it has none of them. Every write of an indexed column
    passes here (a write that does not leaves its row out of the index until
    `search.maintain` derives it: docs/search.md)."""
    derived = search.derived(fields)
    return {**fields, **derived} if derived else fields


def update(queryset, fields):
    """The ORM's UPDATE of `queryset`'s stream rows with `fields`, bounded, the search text
    derived (`with_search`). A row left underived by an earlier write stays so: the columns
    derived here are not all of its indexed ones, and `search.maintain` derives it whole."""
    fields = with_search(bound(dict(fields)))
    mark = fields.get(search.MARK)
    if mark is not None:
        fields[search.MARK] = models.Case(
            models.When(**{f"{search.MARK}__isnull": True}, then=models.Value(None)),
            default=models.Value(mark),
            output_field=models.BigIntegerField(),
        )
    return queryset.update(**fields)


def create(body, **kwargs):
    """`new`, saved (an INSERT, as `Stream.objects.create`: `insert`)."""
    stream = new(body, **kwargs)
    insert(stream)
    return stream


def insert(stream):
    """`stream.save(force_insert=True)` for a new row, in a statement made once per database:
    the ORM compiled its ~70-column INSERT anew for every row, most of the cost of making a
    proxied stream's row. The same values as the ORM's (each field's `pre_save`, then its
    `get_db_prep_save`), the same default project (`Stream.save`); Stream has no receivers of
    its saves (tests/streams/store/test_rows.py checks both)."""
    in_personal_projects([stream])
    db = connections[DEFAULT_DB_ALIAS]
    fields, sql = _insert_statement(db.vendor)
    params = [f.get_db_prep_save(f.pre_save(stream, True), db) for f in fields]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        stream.pk = cursor.fetchone()[0]
    stream._state.adding = False
    stream._state.db = DEFAULT_DB_ALIAS


@functools.cache
def _insert_statement(vendor):
    """(the fields, the INSERT … RETURNING id) of a new Stream row (`insert`)."""
    fields = [f for f in Stream._meta.concrete_fields if not f.primary_key]
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    table = qn(Stream._meta.db_table)
    return fields, f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING {qn('id')}"


def build_request_body(
    input,
    model="auto",
    *,
    format=formats.RESPONSES,
    instructions="",
    scenario="",
    temperature=None,
    max_output_tokens=None,
    previous_response_id="",
    metadata=None,
):
    """A streaming request body in `format`'s shape (Responses by default). `input` is a string
    or a list of the format's input items (Responses) or messages (Chat, Messages:
    `formats.request_body`); the simulator's `scenario` goes in `metadata` in every format."""
    metadata = dict(metadata or {})
    if scenario:
        metadata["scenario"] = scenario
    if format != formats.RESPONSES:
        if previous_response_id:
            raise ValueError("previous_response_id is the Responses API's")
        return formats.request_body(
            format,
            input,
            model or "auto",
            instructions=instructions,
            temperature=temperature,
            max_output_tokens=max_output_tokens,
            metadata=metadata,
        )
    body = {"model": model or "auto", "input": input, "stream": True}
    if instructions:
        body["instructions"] = instructions
    if temperature is not None:
        body["temperature"] = temperature
    if max_output_tokens is not None:
        body["max_output_tokens"] = max_output_tokens
    if previous_response_id:
        body["previous_response_id"] = previous_response_id
    if metadata:
        body["metadata"] = metadata
    return body


def input_of(body):
    """A request's input: the Responses `input`, or the `messages` Chat and Messages send."""
    return body.get("input", body.get("messages"))


def new_row(user, body, **fields):
    """A new `pending` stream row for `body`, without any limit (retries, the CLI,
    benchmarks): `pending_row`'s row (its `fields`), inserted."""
    stream = pending_row(user, body, **fields)
    insert(stream)
    return stream


def pending_row(
    user,
    body,
    *,
    first_attempt=None,
    attempt=1,
    source=Stream.Source.LIVE,
    claimed=None,
    tags=(),
    session="",
    project=None,
    token=None,
    format=Stream.Format.RESPONSES,
):
    """A new `pending` stream row for `body`, unsaved (`insert` saves it, as `new_row` does; the
    writer inserts a proxied stream's with its next batch).

    `claimed`: this process will run it (the default unless streams run in workers; an
    unclaimed row waits in the database for a worker to claim it). `token`: the ApiToken (or
    its id) it came through, whose spend it counts to (streams/store/spend.py)."""
    return new(
        body,
        **_pending(
            user,
            claimed,
            tags,
            token,
            project=project,
            source=source,
            first_attempt=first_attempt,
            attempt=attempt,
            session=session,
            format=format,
        ),
    )


def new_rows(user, bodies, *, project=None, tags=()):
    """`new_row` of each of `bodies` (the same user, project and tags), in one INSERT: an
    experiment's run starts several at once (streams/experiments/runs.py), and a statement
    each cost more than the rest of starting them."""
    fields = _pending(
        user,
        None,
        tags,
        None,
        project=project,
        source=Stream.Source.LIVE,
        first_attempt=None,
        attempt=1,
        session="",
        format=Stream.Format.RESPONSES,
    )
    return Stream.objects.bulk_create([new(body, **fields) for body in bodies])


def _pending(user, claimed, tags, token, **fields):
    """The fields of a new `pending` row besides its request's (`new_row`)."""
    if claimed is None:
        claimed = not conf.in_workers()
    return {
        "user": user,
        "status": Stream.Status.PENDING,
        "heartbeat_at": dt.datetime.now(dt.UTC),
        "runner": lifecycle.RUNNER_ID if claimed else "",
        "tags": list(tags),
        "token_id": getattr(token, "pk", token),
        **fields,
    }


def next_attempt(stream, claimed=True):
    """The row of `stream`'s next attempt, linked to its first (a stall or orphan retry)."""
    return new_row(
        stream.user,
        stream.request_body,
        project=stream.project_id,
        first_attempt=stream.first_attempt or stream,
        attempt=stream.attempt + 1,
        token=stream.token_id,
        claimed=claimed,
        format=stream.format,
    )


# ---------------------------------------------------------------------------------------------
# Finishing


def status_from_checker(checker):
    """The status the checker gives a stream that ended by itself: `truncated` when it saw no
    terminal event (or no checker ran)."""
    status = checker.status if checker is not None else "truncated"
    if status == "streaming":
        return Stream.Status.TRUNCATED
    try:
        return Stream.Status(status)
    except ValueError:
        return Stream.Status.TRUNCATED


def finished(
    checker,
    *,
    status=None,
    error_code="",
    error_message="",
    event_count=0,
    bytes_received=0,
    body_read=True,
    finished_at=None,
    request_written_us=None,
    first_token_us=None,
    closed_us=None,
    first_output_us=None,
    last_output_us=None,
    milestones=None,
    proxy_delays=(),
    request_body=None,
    answer=None,
    model="",
    started_at=None,
    imported=False,
    project=None,
):
    """The fields a stream ends with, bounded, for its last write.

    `checker`: the stream's (closed) checker, or None; `body_read`: it judged an event stream
    (False: the request failed before one, or the body was something else, and the output
    fields are left as they are). `status` None: the checker decides (`status_from_checker`).
    The error: `_error_fields`. Times are µs since the attempt started, as stored; `milestones`
    ({"<name>_us": µs}) are written too; `proxy_delays`: the proxy's `(µs held, events)`.
    Usage and cost (`usage_fields`): from the checker's terminal response, or `answer`, the
    `(usage, text, model)` of a `stream: false` answer; `request_body` for an estimate, `model` (the
    requested one, when no response named one), `started_at` and `imported` (a capture, not
    an answer of this instance's upstream) for the price."""
    fields = {
        "status": status if status is not None else status_from_checker(checker),
        "finished_at": finished_at,
        "event_count": event_count,
        "bytes_received": bytes_received,
        **(milestones or {}),
    }
    if closed_us is not None:
        fields["closed_us"] = closed_us
    judged = checker if checker is not None and body_read else None  # (it judged a stream)
    fields.update(_output_fields(judged) if judged is not None else ())
    fields.update(_error_fields(judged, error_code, error_message))
    fields.update(
        figures.derived(
            request_written_us=request_written_us,
            first_token_us=first_token_us,
            closed_us=closed_us,
            first_output_us=first_output_us,
            last_output_us=last_output_us,
            output_deltas=judged.output_deltas if judged is not None else 0,
        )
    )
    if proxy_delays:
        fields.update(figures.proxy_added(proxy_delays))
    fields.update(
        usage_fields(judged, fields, request_body, answer, model, started_at, imported, project)
    )
    if request_body is not None:  # (else what the row was made with stays)
        fields["search_other"] = search.other_text(request_body, fields.get("parts"))
    return bound(fields)


def usage_fields(judged, fields, request_body, answer, model, started_at, imported, project=None):
    """A finished row's usage (reported, else estimated) and its cost (at `project`'s prices,
    else the instance's). None of it for a request that got no answer to count (`judged` None
    and no `answer`)."""
    if judged is not None:
        used = usage.of_stream(
            judged.usage, request_body, fields.get("parts"), fields.get("output_text", "")
        )
    elif answer is not None:
        reported, text, answered_model = answer
        used = usage.reported(reported) or usage.estimate(request_body, (), text)
        model = answered_model or model
    else:
        return {**usage.NONE.fields(), **prices.NO_PRICE}
    model = fields.get("resolved_model") or (model if model != "auto" else "")
    return {
        **used.fields(),
        **prices.cost_fields(used, model, started_at, imported=imported, project=project),
    }


def _output_fields(checker):
    """What a checker that judged an event stream gives a finished row: the output, tokens,
    ids and model, the finding counts, and the routing when there was one."""
    violations = checker.violations
    fields = dict(
        output_deltas=checker.output_deltas,
        final_text=checker.final_text or "",
        output_text=checker.output_text or "",
        parts=checker.items(),
        upstream_id=checker.upstream_id or "",
        resolved_model=checker.resolved_model or "",
        findings_count=len(violations),
        error_findings=sum(v.severity == "error" for v in violations),
        warning_findings=sum(v.severity == "warning" for v in violations),
    )
    routing = checker.routing
    if routing:
        fields.update(
            routing_category=str(routing.get("category") or ""),
            routing_source=str(routing.get("source") or ""),
            routing_reasoning=str(routing.get("reasoning") or ""),
        )
    return fields


def _error_fields(checker, error_code, error_message):
    """A finished row's error. An explicit `error_code` wins over the `checker`'s (None: no
    checker judged a stream); an explicit `error_message` is kept (the checker's error, if
    any, then gives only the code); a message without a code is written alone (a cancel says
    why)."""
    if not error_code and checker is not None and checker.error_code:
        error_code = checker.error_code
        error_message = error_message or checker.error_message or ""
    if error_code:
        return {"error_code": str(error_code), "error_message": error_message or ""}
    if error_message:
        return {"error_message": error_message}
    return {}


# The columns `from_events` reads of each stored event, in this order.
STORED_EVENT_COLUMNS = ("index", "event_name", "sse_id", "data", "raw", "t_us", "sent_us")


@dataclass
class Rebuilt:
    fields: dict  # `finished`'s fields
    violations: list[Violation]  # every finding of the checker over the stored events


def from_events(
    stream,
    events,
    *,
    status=None,
    error_code="",
    error_message="",
    finished_at=None,
    connection_closed=False,
    stall_threshold_us=None,
):
    """A row's finished fields rebuilt from its stored events (`STORED_EVENT_COLUMNS` tuples
    in index order): the checker run over them as the recorder ran it live, the milestones and
    output times their receipt times, the bytes those of the events as SSE (what the `.sse`
    export writes: comments and keep-alives were never stored).

    `stream` gives the request (`requested_model`), the request's written time and, for a
    stream that did end, its close time. `connection_closed`: the upstream closed the
    connection (False for a stream nobody saw end: a missing terminal event is not reported).
    `stall_threshold_us`: the checker's (default STALL_TIMEOUT_S)."""
    if stall_threshold_us is None:
        stall_threshold_us = int(conf.get().stall_timeout_s * 1_000_000)
    requested = stream.requested_model
    pinned = bool(requested) and requested != "auto"
    checker = formats.checker(
        stream.format, pinned_model=pinned, stall_threshold_us=stall_threshold_us
    )
    seen = _replay(checker, events, formats.IMPLIED_EVENT_NAME.get(stream.format, ""))
    closed_us = stream.closed_us
    checker.close(connection_closed=connection_closed, t_us=closed_us)
    if seen.invalid is not None:
        index, offset, bad, n = seen.invalid
        checker.report_invalid_utf8(index, offset, bad, n, where=said("in_event_data", index=index))
    fields = finished(
        checker,
        status=status,
        error_code=error_code,
        error_message=error_message,
        event_count=seen.count,
        bytes_received=seen.size,
        body_read=seen.count > 0,
        finished_at=finished_at,
        request_written_us=stream.request_written_us,
        first_token_us=seen.milestones.get("first_token_us"),
        closed_us=closed_us,
        first_output_us=seen.first_output,
        last_output_us=seen.last_output,
        milestones=seen.milestones,
        proxy_delays=seen.delays,
        request_body=stream.request_body,
        model=requested,
        started_at=stream.started_at or stream.created_at,
        imported=stream.source == Stream.Source.IMPORT,
    )
    return Rebuilt(fields, list(checker.violations))


@dataclass
class _Replayed:
    """What stored events told beside the checker's findings (`_replay`)."""

    count: int
    size: int  # their bytes as the `.sse` export writes them
    milestones: dict  # {"<name>_us": the receipt time of the event that was the milestone}
    first_output: int | None  # receipt times of the first and last output delta
    last_output: int | None
    invalid: list | None  # [first index, offset, bad bytes, events] of data that was not UTF-8
    delays: list  # (µs the proxy held it, 1) per proxied event


# The milestone each kind of event is, by `FeedResult.kind` (OUTPUT: `first_token`, apart).
_MILESTONE_US = {
    CREATED: "created_event_us",
    ROUTING: "routing_us",
    TOOL_CALL: "first_tool_call_us",
    TERMINAL: "terminal_us",
}


def _replay(checker, events, implied_name=""):
    """Feed stored events (`STORED_EVENT_COLUMNS` tuples) to `checker` as the recorder fed them
    live, and note what they tell beside its findings (`_Replayed`)."""
    feed = checker.feed
    milestones = {}
    first_output = last_output = None
    count = size = 0
    encoder = capture.SSEEncoder(implied_name)  # (the bytes as the `.sse` export writes them)
    invalid = None
    delays = []
    for index, event_name, sse_id, data, raw, t_us, sent_us in events:
        count += 1
        result = feed(index, event_name, data, t_us=t_us)
        kind = result.kind
        if kind is not None and t_us is not None:
            if kind == OUTPUT:
                if result.first_output:
                    milestones.setdefault("first_token_us", t_us)
                    first_output = last_output = t_us
                elif first_output is not None:
                    last_output = t_us
                if result.first_tool_call:  # (a Chat tool-call delta: output and a call)
                    milestones.setdefault("first_tool_call_us", t_us)
            elif kind != TOOL_CALL or result.first_tool_call:
                milestones.setdefault(_MILESTONE_US[kind], t_us)
        if raw is not None:
            raw = bytes(raw)  # (PostgreSQL gives a memoryview)
            if invalid is None:
                offset, bad = capture.first_invalid_utf8(raw) or (0, b"")
                invalid = [index, offset, bad, 0]
            invalid[3] += 1
        size += len(encoder.event(event_name, sse_id, data, raw))
        if sent_us is not None and t_us is not None:
            delays.append((sent_us - t_us, 1))
    return _Replayed(count, size, milestones, first_output, last_output, invalid, delays)


# What a row that could not take its rebuilt fields gets (values of our own, always storable).
_MINIMAL = ("status", "finished_at", "event_count", "error_code", "error_message")


def end_from_stored(pk, status, *, error_code="", error_message="", where=None, now=None):
    """End the row `pk` from what is stored of it: its finished fields rebuilt from its events
    (`from_events`), its findings replaced by the checker's, and with it the pre-aggregates,
    in one transaction. `where`: further conditions on the row (the runner seen, the active
    statuses), so a row that changed meanwhile is left alone. Returns whether it was ended.

    The row is locked first (on PostgreSQL its events' inserts wait), so the fields describe
    exactly the events stored. Should the database refuse the rebuilt fields, the row still
    ends, with status, count, time and error only."""
    now = now or dt.datetime.now(dt.UTC)
    with transaction.atomic(), aggregates.tracking([pk]):
        stream = (
            Stream.objects.select_for_update()
            .filter(pk=pk, **(where or {}))
            .only("pk", "requested_model", "request_written_us", "closed_us")
            .first()
        )
        if stream is None:
            return False
        events = stored_events.read(pk, STORED_EVENT_COLUMNS)
        rebuilt = from_events(
            stream,
            events,
            status=status,
            error_code=error_code,
            error_message=error_message,
            finished_at=now,
        )
        fields = rebuilt.fields
        try:
            with transaction.atomic():
                Finding.objects.filter(stream_id=pk).delete()
                Finding.objects.bulk_create(
                    [Finding(stream_id=pk, **v.as_dict()) for v in rebuilt.violations],
                    batch_size=500,
                )
                update(Stream.objects.filter(pk=pk), fields)
        except Exception as exc:
            if not isinstance(exc, _data_errors()):
                raise
            log.warning("stream %s: rebuilt fields refused (%s); ending it without them", pk, exc)
            update(Stream.objects.filter(pk=pk), {k: fields[k] for k in _MINIMAL if k in fields})
        return True


def end_after_loss(stream_id, fields, received, cause):
    """The final write of a stream some of whose events could not be stored (`fields`: its
    finished fields, with the storage error's status and code): the count says what is stored,
    the message how many of the `received` events are missing, and why (`cause`)."""
    close_old_connections()
    with transaction.atomic(), aggregates.tracking([stream_id]):
        stored = stored_events.count(stream_id)
        fields = bound(
            {
                **fields,
                "event_count": stored,
                "error_message": (
                    f"{received - stored} of {received} received event(s) could not be stored "
                    f"({cause}); recording stopped"
                ),
            }
        )
        try:
            with transaction.atomic():
                update(Stream.objects.filter(pk=stream_id), fields)
        except Exception as exc:
            if not isinstance(exc, _data_errors()):
                raise
            update(
                Stream.objects.filter(pk=stream_id), {k: fields[k] for k in _MINIMAL if k in fields}
            )


# ---------------------------------------------------------------------------------------------
# Writing batches

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class StorageUnavailable(Exception):
    pass


def _connection_errors():
    """What a lost or unreachable database raises: Django's classes, and the driver's own
    where the recorder talks to the driver directly (COPY, raw sqlite3)."""
    db = connection.Database
    return (OperationalError, InterfaceError, db.OperationalError, db.InterfaceError)


def _data_errors():
    """What a database refusing rows for their values raises: data and integrity errors
    (Django's and the driver's), and the driver's own refusals before the server sees them (a
    lone surrogate it cannot encode, an integer beyond 64 bits)."""
    db = connection.Database
    return (
        DataError,
        IntegrityError,
        db.DataError,
        db.IntegrityError,
        UnicodeEncodeError,
        OverflowError,
    )


def describe_refusal(exc):
    """One line on why the database refused a stream's rows, for its error message."""
    text = (str(exc).strip().splitlines() or [""])[0]
    name = type(exc).__name__
    text = f"{name}: {text}" if text and name not in text else (text or name)
    return cut(text, 300)


class NewRow:
    """A new stream row to insert with a batch (`write_batch`; the writer's `create`): `make`
    builds it, unsaved (`new`), on the writer's thread; then `stream` is the row inserted, or
    `error` why it could not be made or inserted."""

    __slots__ = ("make", "stream", "error")

    def __init__(self, make):
        self.make = make
        self.stream = None
        self.error = None

    def build(self):
        try:
            self.stream = self.make()
        except Exception as exc:
            self.error = exc


def write_batch(rows, updates, findings, retry_for_s=None, proxied_rows=(), new_rows=()):
    """One transaction: new stream rows (`new_rows`, `NewRow`s: each built, then inserted
    first), events (`rows` flat, as `insert_flat` takes them; `proxied_rows` with
    PROXIED_ROW_COLUMNS), stream updates (`{rec: {field: value}}`, `rec.stream_id` the row),
    findings. Returns `{stream id: exception}` of the streams whose rows the database refused
    (empty when all were written); a new row that could not be made or inserted says so in
    its `error`, and the rest of the batch is written.

    Retries with backoff while the database is unreachable, for up to STORAGE_RETRY_S, then
    raises StorageUnavailable. When it refuses the batch for a data or integrity error, the
    batch is written again, each stream's rows in a savepoint of its own: the others are
    stored, and only the offenders' rows are left out."""
    delay = 0.05
    if retry_for_s is None:
        retry_for_s = conf.get().storage_retry_s
    prices.refresh()  # (the team's prices, for streams that finish on the event loop)
    for new_row in new_rows:
        new_row.build()
    new_rows = [n for n in new_rows if n.error is None]
    give_up = time.monotonic() + retry_for_s
    apart = False
    while True:
        try:
            with transaction.atomic():
                if apart:
                    _insert_apart(new_rows)
                    return _write_apart(rows, updates, findings, proxied_rows)
                for new_row in new_rows:
                    insert(new_row.stream)
                _write_together(rows, updates, findings, proxied_rows)
            return {}
        except _connection_errors() as exc:
            if time.monotonic() + delay > give_up:
                raise StorageUnavailable(f"database unavailable: {exc}") from exc
            log.warning("writer: database error (%s); retrying in %.2f s", exc, delay)
            close_old_connections()
            try:
                connection.close()
            except Exception:
                pass
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        except _data_errors() as exc:
            if apart:
                raise
            log.warning(
                "writer: the database refused a batch (%s); writing it stream by stream", exc
            )
            apart = True


def _write_together(rows, updates, findings, proxied_rows):
    if rows:
        insert_flat(rows, offsets=True)
    if proxied_rows:
        insert_flat(proxied_rows, offsets=True, columns=PROXIED_ROW_COLUMNS)
    # a status change is where a stream enters (or moves in) the pre-aggregates: they follow it
    # in this same transaction (streams/store/aggregates.py)
    with aggregates.tracking(r.stream_id for r, f in updates.items() if "status" in f):
        update_streams(updates)
        # what a token's streams cost counts against its caps in the same transaction
        spend.count(updates)
        if findings:
            Finding.objects.bulk_create(findings, batch_size=500)


def _insert_apart(new_rows):
    """`new_rows` inserted each in a savepoint of its own: one the database refuses carries
    the refusal (`error`), and the others are inserted."""
    for new_row in new_rows:
        try:
            with transaction.atomic():
                insert(new_row.stream)
        except _data_errors() as exc:
            new_row.stream.pk = None
            new_row.stream._state.adding = True
            new_row.error = exc


def _write_apart(rows, updates, findings, proxied_rows):
    """The batch again, one savepoint per stream; returns the refused streams' errors."""
    parts = {}  # stream id -> [rows, proxied rows, updates, findings]

    def part(stream_id):
        mine = parts.get(stream_id)
        if mine is None:
            mine = parts[stream_id] = [[], [], {}, []]
        return mine

    for flat, slot, width in (
        (rows, 0, len(ROW_COLUMNS)),
        (proxied_rows, 1, len(PROXIED_ROW_COLUMNS)),
    ):
        for start in range(0, len(flat), width):
            part(flat[start + ROW_STREAM_ID])[slot] += flat[start : start + width]
    for rec, fields in updates.items():
        part(rec.stream_id)[2][rec] = fields
    for finding in findings:
        part(finding.stream_id)[3].append(finding)
    if connection.vendor == "postgresql":
        # Foreign keys are checked at commit otherwise, after every savepoint was released.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    # A row deleted while it was being recorded (the admin): its events cannot be stored, and
    # SQLite checks that only at commit.
    existing = set(
        Stream.objects.filter(pk__in=[k for k in parts if k is not None]).values_list(
            "pk", flat=True
        )
    )
    refused = {}
    for stream_id, (mine, proxied, changes, found) in parts.items():
        if stream_id not in existing:
            refused[stream_id] = IntegrityError(f"stream {stream_id} does not exist (deleted)")
            continue
        try:
            with transaction.atomic():
                _write_together(mine, changes, found, proxied)
        except _data_errors() as exc:
            refused[stream_id] = exc
    if refused:
        log.warning(
            "writer: the database refused the rows of stream(s) %s; the others are stored",
            ", ".join(map(str, refused)),
        )
    return refused


def update_streams(updates):
    """The batch's stream changes in one UPDATE per distinct set of changed columns, not one
    per stream (`{rec: {field name: value}}`; every row also gets the same `heartbeat_at`).
    Text values are bounded first, in place (so what is published is what is stored).

    The writer thread re-takes the GIL after every statement, and with a busy event loop each
    re-take waits for the loop: with many paced streams, whose milestones arrive together, one
    ORM UPDATE per stream cost many times what it does on an idle process, so batches grew
    long and publishing fell behind receipt (docs/performance.md, "Recorder")."""
    if not updates:
        return
    heartbeat = None
    groups = {}  # column names -> [(pk, fields)]
    for rec, fields in updates.items():
        bound(fields)
        fields = with_search(fields)  # (a new dict: what is published stays without it)
        heartbeat = fields.get("heartbeat_at", heartbeat)
        names = tuple(sorted(k for k in fields if k != "heartbeat_at"))
        groups.setdefault(names, []).append((rec.stream_id, fields))
    sqlite = connection.vendor == "sqlite"
    mark = "?" if sqlite else "%s"
    statements = [
        _update_statement(names, members, heartbeat, mark) for names, members in groups.items()
    ]
    statements = [statement for statement in statements if statement is not None]
    if sqlite:
        # straight to sqlite3, like insert_flat (no Django cursor wrapper on the way)
        connection.ensure_connection()
        raw = connection.connection
        for sql, params in statements:
            raw.execute(sql, params)
        return
    with connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)


def _update_statement(names, members, heartbeat, mark):
    """`(sql, params)` of one UPDATE: the columns `names` of the rows `members` ([(pk, fields)]),
    each column one value for all or a CASE on the id, and `heartbeat_at` when given; None when
    there is nothing to set. `mark`: the driver's parameter mark."""
    qn = connection.ops.quote_name
    sets, params = [], []
    for name in names:
        field = Stream._meta.get_field(name)
        column = qn(field.column)
        values = [fields[name] for _, fields in members]
        if name == search.MARK:
            # the search text derived here is that of the columns this write changes: a row
            # that was left underived stays so (`search.maintain` derives it whole); one new
            # mark for the batch is as new as one per row
            sets.append(f"{column} = CASE WHEN {column} IS NULL THEN NULL ELSE {mark} END")
            params.append(field.get_db_prep_save(max(values), connection))
            continue
        if all(v == values[0] for v in values[1:]) or all(v is None for v in values):
            # one value for all (a status, a NULL): no CASE, and no untyped NULLs in one
            sets.append(f"{column} = {mark}")
            params.append(field.get_db_prep_save(values[0], connection))
            continue
        sets.append(
            f"{column} = CASE id " + " ".join([f"WHEN {mark} THEN {mark}"] * len(members)) + " END"
        )
        for (pk, _), value in zip(members, values, strict=True):
            params += [pk, field.get_db_prep_save(value, connection)]
    if heartbeat is not None:
        sets.append(f"heartbeat_at = {mark}")
        params.append(
            Stream._meta.get_field("heartbeat_at").get_db_prep_save(heartbeat, connection)
        )
    if not sets:
        return None
    params += [pk for pk, _ in members]
    ids = ", ".join([mark] * len(members))
    table = qn(Stream._meta.db_table)
    return f"UPDATE {table} SET {', '.join(sets)} WHERE id IN ({ids})", params


_INSERT_SQL = {}


def insert_events(rows, *, offsets=False):
    """Multi-row insert of event rows (sequences of ROW_COLUMNS values); see `insert_flat`."""
    insert_flat(list(itertools.chain.from_iterable(rows)), offsets=offsets)


def insert_flat(values, *, offsets=False, columns=ROW_COLUMNS):
    """Multi-row insert of events given as one flat list: ROW_COLUMNS values of one event
    after the other (what the recorder builds, with no list or tuple per row). The ORM's
    bulk_create costs several times more per row on SQLite, and several times more than COPY
    on PostgreSQL (docs/performance.md, "Recorder"): this is the only raw SQL in the write path.

    The bounded columns (the `event:` name, the `id:`, the type) are cut to their lengths, and
    `received_at` values that are datetimes become the text the database stores, in place (so
    a retried batch is converted already). With `offsets`, they are the stream's wall-clock
    start, turned into start + t_us here, on the writer's thread, off the event loop."""
    # (`connection` is a proxy: each attribute read looks the thread's connection up again, a
    # cost per batch that small batches of paced streams pay per event; so is naming the
    # columns, hence `_event_columns`)
    db = connections[DEFAULT_DB_ALIAS]
    vendor = db.vendor
    width = len(columns)
    bound_event_values(values, columns)
    _receipt_times_as_text(values, "+00" if vendor == "postgresql" else "", offsets, width)
    if vendor == "postgresql":
        with db.cursor() as cursor:
            with cursor.cursor.copy(copy_sql(columns)) as copy:
                for start in range(0, len(values), width):
                    copy.write_row(values[start : start + width])
        return
    if vendor == "sqlite":
        # One multi-row INSERT per 2000 rows, straight to sqlite3. executemany steps once per
        # row, and sqlite3 releases and re-takes the GIL around every step: with a busy event
        # loop each re-take waits up to the switch interval, which starved this thread and
        # left publishing far behind receipt. Django's cursor wrapper also rewrites every
        # parameter list on the way, a cost per row (docs/performance.md, "Recorder").
        # A statement per power of two of rows, largest first: sqlite3 keeps the statements it
        # compiled by their text (128 of them), and a batch of any other size made a statement
        # never seen before, compiled anew (that compiling was half of the inserting).
        db.ensure_connection()
        raw = db.connection
        start, rows = 0, len(values) // width
        while rows:
            n = min(SQLITE_ROWS_PER_STATEMENT, 1 << (rows.bit_length() - 1))
            end = start + n * width
            chunk = values if end - start == len(values) else values[start:end]
            raw.execute(sqlite_insert(n, columns), chunk)
            start, rows = end, rows - n
        return
    sql = _INSERT_SQL.get((vendor, columns))
    if sql is None:
        table, cols = _event_columns(columns)
        marks = ", ".join(["%s"] * width)
        sql = _INSERT_SQL[vendor, columns] = f"INSERT INTO {table} ({cols}) VALUES ({marks})"
    with db.cursor() as cursor:
        cursor.executemany(sql, [values[i : i + width] for i in range(0, len(values), width)])


@functools.cache
def _event_columns(columns):
    """`(the event table, its columns)` quoted for SQL."""
    table = connection.ops.quote_name(Event._meta.db_table)
    return table, ", ".join(connection.ops.quote_name(c) for c in columns)


@functools.cache
def copy_sql(columns):
    """PostgreSQL's COPY of event rows of `columns` (`insert_flat`'s; bench recording's too)."""
    return "COPY {} ({}) FROM STDIN".format(*_event_columns(columns))


_ONE_US = dt.timedelta(microseconds=1)


def _receipt_times_as_text(values, suffix, offsets, width):
    """`received_at` in flat event values as the text the database stores (UTC; `suffix`
    "+00" for PostgreSQL's COPY, none for SQLite, where Django keeps naive UTC text), in place.
    With `offsets`, a `received_at` is its stream's wall-clock start, and becomes start + t_us.

    Datetime arithmetic and isoformat per row were a large share of the pipeline's CPU (on the
    writer thread, holding the GIL the readers need; docs/performance.md, "Recorder"); this
    formats each second once."""
    bases = {}  # id(start) -> µs since the epoch
    seconds = {}  # second since the epoch -> "YYYY-MM-DD HH:MM:SS"
    for i in range(ROW_RECEIVED_AT, len(values), width):
        start = values[i]
        if start is None or type(start) is str:  # (a retried batch: done already)
            continue
        base = bases.get(id(start))
        if base is None:
            if start.tzinfo is None:  # (naive: UTC, as Django stores it)
                start = start.replace(tzinfo=dt.UTC)
            base = bases[id(values[i])] = (start - _EPOCH) // _ONE_US
        if offsets:
            base += values[i - ROW_RECEIVED_AT + ROW_T_US]
        second, us = divmod(base, 1_000_000)
        text = seconds.get(second)
        if text is None:
            text = seconds[second] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(second))
        values[i] = f"{text}.{us:06d}{suffix}" if us else text + suffix


# SQLite allows 32766 bound parameters per statement (3.32+), one per column of a row (15 for a
# proxied row today): at most 2000 rows, fewer once the rows have grown past 16 columns, rounded
# down to a power of two (1024 today: `insert_flat` inserts in statements of such sizes).
SQLITE_ROWS_PER_STATEMENT = 1 << (min(2000, 32766 // len(PROXIED_ROW_COLUMNS)).bit_length() - 1)


@functools.cache
def sqlite_insert(n, columns=ROW_COLUMNS):
    """SQLite's INSERT of `n` event rows of `columns` (`insert_flat`'s; bench recording's too)."""
    table, cols = _event_columns(columns)
    row = "(" + ", ".join(["?"] * len(columns)) + ")"
    return f"INSERT INTO {table} ({cols}) VALUES " + ", ".join([row] * n)


# ---------------------------------------------------------------------------------------------
# Pricing again

# What `reprice` rewrites of a stored row.
USAGE_AND_COST_COLUMNS = (*usage.FIELDS, "usage_source", *prices.NO_PRICE)


def _stored_usage(data):
    """The `usage` of a stream's last stored event: a terminal event's response's, or a
    `stream: false` answer's own."""
    try:
        obj = safejson.loads(data) if data else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    response = obj.get("response") if isinstance(obj.get("response"), dict) else obj
    return response.get("usage")


def repriced(stream, last_event_data=None, *, recount=False):
    """A stored row's usage and cost columns again: its cost at the price valid at its start
    as the price table says now, and (`recount`, or when it has none yet: a row stored before
    usage was kept) its usage from its last stored event, else estimated. A row that never
    got an answer (no events) keeps none."""
    if recount or not stream.usage_source:
        if not stream.event_count:
            return {**usage.NONE.fields(), **prices.NO_PRICE}
        used = usage.of_stream(
            _stored_usage(last_event_data), stream.request_body, stream.parts, stream.output_text
        )
    else:
        used = usage.Usage(
            *(getattr(stream, name) for name in usage.FIELDS), source=stream.usage_source
        )
    model = stream.resolved_model or (
        stream.requested_model if stream.requested_model != "auto" else ""
    )
    at = stream.started_at or stream.created_at
    imported = stream.source == Stream.Source.IMPORT
    return {
        **used.fields(),
        **prices.cost_fields(used, model, at, imported=imported, project=stream.project_id),
    }


def reprice(queryset, *, recount=False, chunk=500):
    """`repriced` for every finished stream of `queryset`, a chunk per transaction, the
    rollups following (`aggregates.tracking`). Returns {"streams", "changed", "unpriced"}."""
    prices.forget()
    done = {"streams": 0, "changed": 0, "unpriced": 0}
    finished_rows = queryset.exclude(status__in=Stream.ACTIVE_STATUSES).order_by("pk")
    last_pk = 0
    while True:
        batch = list(finished_rows.filter(pk__gt=last_pk)[:chunk])
        if not batch:
            return done
        last_pk = batch[-1].pk
        last_events = {}
        if recount or any(not s.usage_source for s in batch):
            last_events = _last_event_data([s.pk for s in batch])
        with transaction.atomic(), aggregates.tracking([s.pk for s in batch]):
            for stream in batch:
                fields = repriced(stream, last_events.get(stream.pk), recount=recount)
                done["streams"] += 1
                done["unpriced"] += fields["cost_nanos"] is None
                if any(getattr(stream, k) != v for k, v in fields.items()):
                    done["changed"] += 1
                    Stream.objects.filter(pk=stream.pk).update(**bound(fields))


def _last_event_data(ids):
    """{stream id: the data of its last stored event}."""
    return stored_events.last_data(ids)
