"""Captured files in, stored streams out: the import side of issue 4.

A raw SSE body (`.sse`, `.txt`, whatever the name) becomes one `Stream`; a HAR export becomes one
`Stream` per SSE response in it. Each is checked by the same `Checker` the recorder runs, its row
built and finished by `streams.store.rows` as a recorded one's is, and its events stored through the
same `insert_events`, so an imported stream's rows are indistinguishable from a recorded one's
except that they have no receipt times (a file keeps none; a HAR keeps only the entry's phase
timings, which become the stream's milestones). The exact body bytes are kept in a
`Capture` so that an export of an imported stream is byte-identical to what was imported.

Two steps, so that a form can validate a file without writing anything:
`read_capture(content, filename)` parses (pure, raises `CaptureError`), `store_captures(...)`
checks and writes; `import_capture` is both.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import transaction
from django.utils.formats import number_format
from django.utils.translation import gettext, gettext_noop

from streams.core import capture as capture_errors
from streams.core import formats, safejson
from streams.core.capture import (
    CapturedEvent,
    HarEntry,
    TooManyEvents,
    event_at,
    first_invalid_utf8,
    parse_har,
    parse_sse_bytes,
    sniff,
)
from streams.core.checks import Checker, said
from streams.models import Capture, Finding, Project, Stream
from streams.store import aggregates, event_row, rows
from streams.store.rows import insert_events

# Rows handed to insert_events at once: bounds the memory of a 100k-event import.
INSERT_CHUNK = 5000
# What one file may become (all its SSE responses together): a 20 MB upload of `data: {}` would
# otherwise be 1.9 million events and as many findings, parsed, checked and written inside the
# request. The longest real captures hold a few thousand events.
MAX_EVENTS_PER_UPLOAD = 100_000
MAX_FINDINGS_PER_UPLOAD = 100_000


# Why a file cannot be imported (CaptureError's codes): the importer's own, and the reader's
# (streams/core/capture.py, whose conventions these follow: an int parameter is a count).
REASONS = {
    "empty": gettext_noop("the file is empty"),
    "not_sse": gettext_noop(
        "not an event stream or a HAR file (no `data:` field in %(bytes)s bytes)"
    ),
    "har_without_sse": gettext_noop(
        "the HAR file holds no SSE response with events (%(entries)s candidate entries)"
    ),
    "too_many_findings": gettext_noop(
        "the checker found %(n)s findings in it; one file may have at most %(limit)s"
    ),
    **capture_errors.MESSAGES,
}


class CaptureError(Exception):
    """The file is not something we can import (empty, neither SSE nor HAR, no events).

    `str()` is the reason in English (what is stored, logged and printed); `code` (of REASONS)
    and `params` say it again for a page, in its language (`reason_shown`)."""

    def __init__(self, code: str, **params):
        super().__init__(capture_errors.english(REASONS[code], params))
        self.code, self.params = code, params

    @classmethod
    def of(cls, exc: capture_errors.InvalidCapture) -> CaptureError:
        return cls(exc.code, **exc.params)

    @property
    def reason(self) -> dict:
        """The code and parameters, as ImportFile.error_reason keeps them (JSON)."""
        return {"code": self.code, "params": self.params}


def reason_shown(reason) -> str | None:
    """A stored `CaptureError.reason` in the active language, numbers written its way (None:
    not one this version knows, so the caller shows the stored English)."""
    if not isinstance(reason, dict) or reason.get("code") not in REASONS:
        return None
    params = reason.get("params") or {}
    if not isinstance(params, dict):
        return None
    shown = {
        k: number_format(v, force_grouping=True)
        if isinstance(v, int) and not isinstance(v, bool)
        else v
        for k, v in params.items()
    }
    try:
        if "got_type" in params:
            shown["got"] = gettext(capture_errors.A_TYPE) % {"type": params["got_type"]}
        if "expected" in params:
            shown["expected"] = gettext(capture_errors.EXPECTED[params["expected"]])
        return gettext(REASONS[reason["code"]]) % shown
    except (KeyError, TypeError, ValueError):
        return None


@dataclass
class Checked:
    """What the checker made of one capture, for the model it was checked for."""

    model: str
    body: dict  # the request body the HAR kept ({} when none)
    requested: str
    checker: Checker
    envelopes: list  # what the checker read of each event, for its row (`event_row.Checked`)
    format: str = formats.RESPONSES  # the API the capture speaks (`formats.detect`)


@dataclass
class ParsedCapture:
    """One SSE response found in an uploaded file, checked, not yet stored."""

    filename: str
    content: bytes  # the SSE body bytes: the whole file, or one HAR entry's response body
    events: list[CapturedEvent]
    har: HarEntry | None = None
    checked: Checked | None = None


def read_capture(content: bytes, filename: str = "", model: str = "") -> list[ParsedCapture]:
    """Parse and check a raw SSE body or a HAR export (`model`: the one the request asked for,
    when the file does not say). Raises CaptureError, also over MAX_EVENTS_PER_UPLOAD events or
    MAX_FINDINGS_PER_UPLOAD findings."""
    captures = _parse(content, filename)
    findings = 0
    for capture in captures:
        capture.checked = _check(capture, model)
        findings += len(capture.checked.checker.violations)
    if findings > MAX_FINDINGS_PER_UPLOAD:
        raise CaptureError("too_many_findings", n=findings, limit=MAX_FINDINGS_PER_UPLOAD)
    return captures


def _parse(content: bytes, filename: str) -> list[ParsedCapture]:
    name = filename or "capture"
    if not content or not content.strip():
        raise CaptureError("empty")
    if sniff(content, filename) == "har":
        try:
            entries = parse_har(content, MAX_EVENTS_PER_UPLOAD)
        except capture_errors.InvalidCapture as exc:  # TooManyEvents too
            raise CaptureError.of(exc) from None
        found = [e for e in entries if e.events]
        if not found:
            raise CaptureError("har_without_sse", entries=len(entries))
        suffix = len(found) > 1
        return [
            ParsedCapture(
                filename=(f"{name}#{i}" if suffix else name)[:300],
                content=entry.content,
                events=entry.events,
                har=entry,
            )
            for i, entry in enumerate(found, 1)
        ]
    try:
        events = parse_sse_bytes(content, MAX_EVENTS_PER_UPLOAD)
    except TooManyEvents as exc:
        raise CaptureError.of(exc) from None
    if not events:
        raise CaptureError("not_sse", bytes=len(content))
    return [ParsedCapture(filename=name[:300], content=content, events=events)]


def import_capture(content: bytes, filename: str, *, user=None, model: str = "") -> list[Stream]:
    """Store every SSE response of a file as an imported stream; return them in file order."""
    return store_captures(read_capture(content, filename, model), user=user, model=model)


def store_captures(
    captures: list[ParsedCapture], *, user=None, model: str = "", project=None
) -> list[Stream]:
    """Check and store parsed captures in `project` (a Project or id; by default `user`'s
    personal one), all in one transaction (a file is imported whole or not at all)."""
    with transaction.atomic():
        streams = [_store(capture, user, model, project) for capture in captures]
        # imported streams are finished: into the pre-aggregates in the same transaction
        aggregates.add_streams([s.pk for s in streams])
        return streams


def _request_body(har: HarEntry | None) -> dict:
    if har is None or not har.request_body:
        return {}
    try:
        # Stored as the stream's request: bounded, and without NaN (no database takes it).
        body = safejson.loads(har.request_body)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _check(capture: ParsedCapture, model: str) -> Checked:
    body = _request_body(capture.har)
    requested = model or str(body.get("model") or "")
    # Known only when someone said which model was asked for; the created event's model is
    # already the resolved one.
    pinned = (requested != "auto") if requested else None
    url = capture.har.url if capture.har is not None else ""
    format = formats.detect(((ev.event_name, ev.data) for ev in capture.events[:3]), url)
    checker = formats.checker(format, pinned_model=pinned)
    feed = checker.feed
    envelopes = []
    for i, ev in enumerate(capture.events):
        r = feed(i, ev.event_name, ev.data)
        envelopes.append(event_row.Checked.of(r))
    checker.close(connection_closed=True)
    invalid = first_invalid_utf8(capture.content)
    if invalid is not None:
        # Never a silent U+FFFD: the event's text has it, its `raw` and the Capture keep the
        # bytes, and this finding says where the first bad sequence is.
        offset, bad = invalid
        checker.report_invalid_utf8(
            event_at(capture.events, offset),
            offset,
            bad,
            sum(ev.raw is not None for ev in capture.events),
            said("in_har_body") if capture.har is not None else said("in_file"),
        )
    return Checked(model, body, requested, checker, envelopes, format)


def _store(capture: ParsedCapture, user, model: str, project=None) -> Stream:
    if project is None and user is not None and user.pk:
        project = Project.personal(user)  # (where Stream.save would put it: priced there)
    checked = capture.checked
    if checked is None or checked.model != model:
        checked = _check(capture, model)
    body, requested, checker, envelopes = (
        checked.body,
        checked.requested,
        checked.checker,
        checked.envelopes,
    )
    violations = checker.violations
    har = _har_fields(capture.har) if capture.har is not None else {}
    fields = rows.finished(
        checker,
        event_count=len(capture.events),
        bytes_received=len(capture.content),
        finished_at=har.pop("finished_at", None),
        request_written_us=har.get("request_written_us"),
        closed_us=har.get("closed_us"),
        request_body=body,
        model=requested,
        # priced as of when it ran (a HAR says), else as of its import
        started_at=har.get("started_at") or dt.datetime.now(dt.UTC),
        imported=True,
        project=getattr(project, "pk", project),
    )
    stream = rows.create(
        body,
        user=user,
        project=project,
        requested_model=requested or checker.response_model,
        source=Stream.Source.IMPORT,
        format=checked.format,
        **{**har, **fields},
    )

    sid = stream.pk
    chunk = []
    for i, (ev, envelope) in enumerate(zip(capture.events, envelopes, strict=True)):
        # t_us and received_at: a file keeps no receipt times
        chunk.append(event_row.row(sid, i, None, None, ev, envelope))
        if len(chunk) >= INSERT_CHUNK:
            insert_events(chunk)
            chunk = []
    if chunk:
        insert_events(chunk)
    Finding.objects.bulk_create(
        [Finding(stream_id=sid, **v.as_dict()) for v in violations], batch_size=500
    )
    Capture.objects.create(stream=stream, filename=capture.filename, content=capture.content)
    return stream


def _har_fields(har: HarEntry) -> dict:
    """Request metadata and phase milestones from a HAR entry (µs since `startedDateTime`),
    and when it finished."""
    started = _parse_iso(har.started_at)
    fields = {
        # Without the query string: some APIs take their key there, and a key is never stored.
        "upstream_url": har.url.split("?", 1)[0].split("#", 1)[0],
        "http_status": har.status,
        "content_type": har.mime_type,
        "started_at": started,
    }
    t = har.timings
    if t.get("send") is None and t.get("wait") is None:
        return fields
    # HAR: ssl is already included in connect; -1 ("not applicable") was read as None.
    connected = sum(t.get(k) or 0 for k in ("blocked", "dns", "connect"))
    written = connected + (t.get("send") or 0)
    headers = written + (t.get("wait") or 0)
    fields.update(
        connected_us=round(connected * 1000),
        request_written_us=round(written * 1000),
        headers_us=round(headers * 1000),
    )
    closed = har.time_ms
    if closed is None and t.get("receive") is not None:
        closed = headers + t["receive"]
    if closed is not None:
        fields["closed_us"] = round(closed * 1000)
        if started is not None:
            fields["finished_at"] = started + dt.timedelta(milliseconds=closed)
    return fields


def _parse_iso(value: str) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
