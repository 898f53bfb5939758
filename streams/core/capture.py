"""Turn captured files (raw SSE bodies, browser HAR exports) into events. Pure: bytes in, data out.

The SSE parser follows the WHATWG "event stream interpretation" algorithm, over bytes rather than
text, so that an event whose data is not valid UTF-8 keeps its original bytes
(`CapturedEvent.raw`) and every event can report its byte offset in the file.

One deliberate departure from the spec: at end of file WHATWG discards a pending event that was
not terminated by a blank line. A capture that ends mid-event is still evidence worth looking at
(a proxy that cut the connection, a copy-paste that lost the last newline), so the pending event
is dispatched anyway and marked `truncated=True`; `truncated_tail(events)` says whether that
happened.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import re
from dataclasses import dataclass, field
from typing import Literal

from django.utils.translation import gettext_noop

from streams.core import safejson

BOM = b"\xef\xbb\xbf"
# CRLF must come first so that it counts as one line end, not two.
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(slots=True)
class CapturedEvent:
    event_name: str  # the `event:` field; "" when absent (WHATWG then means "message")
    sse_id: str  # the last event ID in effect (WHATWG: it persists across events until changed)
    data: str  # data lines joined with "\n"
    raw: bytes | None  # the undecoded data bytes, only when they were not valid UTF-8
    byte_offset: int  # where the event's block starts in the file (first line after a blank one)
    byte_end: int = 0  # just past the blank line that dispatched it (or EOF when truncated)
    retry: int | None = None  # the last `retry:` value seen in this block, if any
    truncated: bool = False  # the file ended before the blank line that would dispatch it
    # (an event's row's `preamble`: an import keeps the file's bytes whole instead)
    preamble: str = ""


def truncated_tail(events: list[CapturedEvent]) -> bool:
    """True when the last event was dispatched leniently at EOF (no terminating blank line)."""
    return bool(events) and events[-1].truncated


# Why a file cannot be read, as a code and a message with %(name)s parameters: `str()` of the
# error is the English (what is stored and logged); the import page says the same in its own
# language from the code and the parameters (streams/ingest/import_jobs.py). An int parameter
# is a count (written with its thousands separator), a str one is shown as it is.
MESSAGES = {
    "too_many_events": gettext_noop(
        "more than %(limit)s events; one file may hold at most %(limit)s"
    ),
    "not_har": gettext_noop("not a HAR file: %(detail)s"),
    "no_har_entries": gettext_noop("not a HAR file: no log.entries"),
    "har_not_ms": gettext_noop(
        "HAR entry %(entry)s.%(field)s is %(got)s, not a number of milliseconds"
    ),
    "har_too_long": gettext_noop(
        "HAR entry %(entry)s.%(field)s is %(ms)s ms; at most %(limit)s (30 days)"
    ),
    "har_not_status": gettext_noop(
        "HAR entry %(entry)s.%(field)s is %(got)s, not an HTTP status (100-599)"
    ),
    "har_not_time": gettext_noop("HAR entry %(entry)s.%(field)s is %(got)s, not an ISO 8601 time"),
    "har_time_range": gettext_noop("HAR entry %(entry)s.%(field)s %(got)s is outside 1970-2999"),
    "har_wrong_type": gettext_noop("HAR entry %(entry)s.%(field)s is %(got)s, not %(expected)s"),
}
# The words of two parameters: `got_type` (a value's type, for `got`) and `expected`.
A_TYPE = gettext_noop("a %(type)s")
EXPECTED = {
    "object": gettext_noop("an object"),
    "string": gettext_noop("a string"),
    "integer": gettext_noop("an integer"),
}


def english(message: str, params: dict) -> str:
    """`message` (one of MESSAGES, or the importer's) with its parameters, in English."""
    shown = {
        k: f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in params.items()
    }
    if "got_type" in params:
        shown["got"] = A_TYPE % {"type": params["got_type"]}
    if "expected" in params:
        shown["expected"] = EXPECTED[params["expected"]]
    return message % shown


class InvalidCapture(ValueError):
    """A file that cannot be read: its English message, and `code` (of MESSAGES) with `params`."""

    def __init__(self, code: str, **params):
        super().__init__(english(MESSAGES[code], params))
        self.code, self.params = code, params


class TooManyEvents(InvalidCapture):
    """A file holds more events than one import may (`max_events`)."""

    def __init__(self, limit: int):
        super().__init__("too_many_events", limit=limit)
        self.limit = limit


def parse_sse_bytes(content: bytes, max_events: int | None = None) -> list[CapturedEvent]:
    """Parse a whole `text/event-stream` body into its dispatched events; TooManyEvents as soon
    as there are more than `max_events` (before building them all: 19 MB of `data: {}` are
    1.9 million events)."""
    pos = 3 if content.startswith(BOM) else 0
    end = len(content)
    events: list[CapturedEvent] = []

    data_lines: list[bytes] = []
    event_name = b""
    last_id = ""
    retry: int | None = None
    block_start: int | None = None  # offset of the block's first line, None between blocks
    before: list[bytes] = []  # lines since the last event that are none of one (its preamble)

    def dispatch(block_end: int, truncated: bool) -> None:
        if not data_lines:  # WHATWG: an empty data buffer dispatches nothing
            return
        if max_events is not None and len(events) >= max_events:
            raise TooManyEvents(max_events)
        preamble = ""
        if before:
            preamble = (b"\n".join(before) + b"\n").decode("utf-8", errors="replace")
            before.clear()
        joined = b"\n".join(data_lines)
        try:
            data, raw = joined.decode("utf-8"), None
        except UnicodeDecodeError:
            data, raw = joined.decode("utf-8", errors="replace"), joined
        events.append(
            CapturedEvent(
                event_name=event_name.decode("utf-8", errors="replace"),
                sse_id=last_id,
                data=data,
                raw=raw,
                byte_offset=block_start if block_start is not None else block_end,
                byte_end=block_end,
                retry=retry,
                truncated=truncated,
                preamble=preamble,
            )
        )

    while pos < end:
        m = _LINE_END.search(content, pos)
        if m is None:  # last line without a line end: keep it (lenient, see module docstring)
            line, line_start, pos = content[pos:], pos, end
        else:
            line, line_start, pos = content[pos : m.start()], pos, m.end()

        if not line:
            if m is not None:
                if not data_lines and before:
                    before.append(b"")  # the blank line that ended a block of comments
                dispatch(pos, truncated=False)
                data_lines = []
                event_name = b""
                retry = None
                block_start = None
            continue
        if block_start is None:
            block_start = line_start
        if line[0] == 0x3A:  # ":" comment
            before.append(line)
            continue
        colon = line.find(b":")
        if colon == -1:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            data_lines.append(value)
        elif name == b"event":
            event_name = value
        elif name == b"id":
            if b"\x00" not in value:
                last_id = value.decode("utf-8", errors="replace")
        else:
            # no field of an event's row: `retry:` (kept as the event's `retry` too) and any
            # other field, ignored as the spec says, but kept verbatim in the preamble
            before.append(line)
            if name == b"retry" and value.isdigit():
                retry = int(value)

    if block_start is not None:  # EOF inside a block: dispatch leniently, flagged
        dispatch(end, truncated=True)
    return events


def first_invalid_utf8(content: bytes) -> tuple[int, bytes] | None:
    """Where a body stops being UTF-8: `(byte offset, the invalid bytes)` of its first invalid
    sequence, or None when all of it is UTF-8 (a BOM included). One decode of the whole body:
    the offset is the file's, whichever field (data, event, id, a comment) holds it."""
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start, content[exc.start : exc.end]
    return None


def event_at(events: list[CapturedEvent], offset: int) -> int | None:
    """The index of the event whose block holds byte `offset` (None: between blocks)."""
    for i, event in enumerate(events):
        if event.byte_offset <= offset < event.byte_end:
            return i
        if event.byte_offset > offset:
            break
    return None


@dataclass(slots=True)
class HarEntry:
    url: str
    method: str
    status: int | None
    started_at: str  # HAR `startedDateTime`, ISO 8601 as written by the browser
    time_ms: float | None  # HAR `time`: the entry's total elapsed time
    # blocked/dns/connect/ssl/send/wait/receive in ms; HAR's -1 ("not applicable") becomes None
    timings: dict[str, float | None]
    mime_type: str
    request_body: str  # postData.text, when the browser kept it
    content: bytes | None  # the decoded response body; None when the HAR has no text for it
    events: list[CapturedEvent] = field(default_factory=list)


_TIMING_KEYS = ("blocked", "dns", "connect", "ssl", "send", "wait", "receive")


def _is_stream_entry(url: str, mime_type: str) -> bool:
    if mime_type.split(";", 1)[0].strip().lower() == "text/event-stream":
        return True
    path = url.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return path.endswith("/responses")


# Chrome nests an initiator's async stack traces (`_initiator.stack.parent.parent…`) a level per
# hop; the fields read here are 5 deep. The bound keeps json's recursive parser far from its limit.
HAR_MAX_DEPTH = 256
# The longest phase or entry time taken from a HAR (30 days in ms): it becomes µs milestones and
# a finish time, and `1e300` would overflow both.
HAR_MAX_MS = 30 * 24 * 3600 * 1000


def _number(value, where: str) -> float | None:
    """A HAR time in ms: None when absent or -1 ("not applicable"); ValueError when it is not a
    number or out of range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid("har_not_ms", where, **_shown(value))
    if value > HAR_MAX_MS:
        raise _invalid("har_too_long", where, ms=f"{value:g}", limit=HAR_MAX_MS)
    return value if value >= 0 else None


def _status(value, where: str) -> int | None:
    """An HTTP status code (100-599), None when absent or 0 (a request the browser never got an
    answer to); ValueError otherwise."""
    if value is None or value == 0:
        return None
    if not 100 <= value <= 599:
        raise _invalid("har_not_status", f"{where}.status", **_shown(value))
    return value


def _started_at(value: str, where: str) -> str:
    """`startedDateTime` as written, once it is known to be an ISO 8601 time that a UTC clock
    can hold (years 1970-2999, whatever its offset); "" when absent; ValueError otherwise."""
    if not value:
        return ""
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _invalid("har_not_time", f"{where}.startedDateTime", got=repr(value[:40])) from None
    # (checked before the offset is applied: at the calendar's ends that overflows)
    if not 1970 <= when.year <= 2999:
        raise _invalid("har_time_range", f"{where}.startedDateTime", got=repr(value[:40]))
    return value


def _shown(value) -> dict:
    """How an error names a wrong value: its type (a str, a list, a dict) or its repr."""
    if isinstance(value, str | list | dict):
        return {"got_type": type(value).__name__}
    return {"got": repr(value)}


def _invalid(code: str, where: str, **params) -> InvalidCapture:
    """InvalidCapture `code` about the field `where` ("HAR entry 3.timings.send")."""
    entry, _, field = where.removeprefix("HAR entry ").partition(".")
    return InvalidCapture(code, entry=entry, field=field, **params)


def _field(obj: dict, name: str, kind: type, where: str, default):
    """`obj[name]` when it is a `kind`, `default` when absent or null; ValueError otherwise (a
    HAR written by hand or by a broken tool, said precisely rather than guessed at)."""
    value = obj.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = {dict: "object", str: "string", int: "integer"}[kind]
        raise _invalid("har_wrong_type", f"{where}.{name}", expected=expected, **_shown(value))
    return value


def parse_har(content: bytes, max_events: int | None = None) -> list[HarEntry]:
    """The SSE responses in a HAR export: entries typed text/event-stream or POSTed to */responses.

    HAR keeps no per-event arrival times, only the entry's phase timings, which are returned as-is.
    Raises InvalidCapture (a ValueError) when the content is not a HAR document, or a field it
    reads has the wrong type or an impossible value; TooManyEvents over `max_events` in all its
    entries.
    """
    try:
        doc = safejson.loads(content, max_depth=HAR_MAX_DEPTH)
    except ValueError as exc:
        raise InvalidCapture("not_har", detail=str(exc)) from exc
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise InvalidCapture("no_har_entries")

    result = []
    budget = max_events
    for n, entry in enumerate(log["entries"], 1):
        if not isinstance(entry, dict):
            continue
        where = f"HAR entry {n}"
        request = _field(entry, "request", dict, where, {})
        response = _field(entry, "response", dict, where, {})
        body = _field(response, "content", dict, f"{where}.response", {})
        url = _field(request, "url", str, f"{where}.request", "")
        mime_type = _field(body, "mimeType", str, f"{where}.response.content", "")
        if not _is_stream_entry(url, mime_type):
            continue
        raw = _har_body(body, f"{where}.response.content")
        try:
            events = parse_sse_bytes(raw, budget) if raw else []
        except TooManyEvents:
            raise TooManyEvents(max_events) from None  # (said of the file, not what was left)
        if budget is not None:
            budget -= len(events)
        result.append(_har_entry(entry, where, request, response, url, mime_type, raw, events))
    return result


def _har_body(body, where):
    """The response body's bytes (base64-decoded when so encoded; None when absent or not
    decodable)."""
    text = _field(body, "text", str, where, None)
    if text is None:
        return None
    if body.get("encoding") == "base64":
        try:
            return base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError):
            return None
    return text.encode("utf-8", errors="surrogatepass")


def _har_entry(entry, where, request, response, url, mime_type, raw, events):
    """A HarEntry from one entry's checked fields (each wrong type or value a ValueError)."""
    timings = _field(entry, "timings", dict, where, {})
    post = _field(request, "postData", dict, f"{where}.request", {})
    return HarEntry(
        url=url,
        method=_field(request, "method", str, f"{where}.request", ""),
        status=_status(
            _field(response, "status", int, f"{where}.response", None), f"{where}.response"
        ),
        started_at=_started_at(_field(entry, "startedDateTime", str, where, ""), where),
        time_ms=_number(entry.get("time"), f"{where}.time"),
        timings={
            k: _number(timings[k], f"{where}.timings.{k}") for k in _TIMING_KEYS if k in timings
        },
        mime_type=mime_type,
        request_body=_field(post, "text", str, f"{where}.request.postData", ""),
        content=raw,
        events=events,
    )


def sniff(content: bytes, filename: str = "") -> Literal["har", "sse"]:
    """Tell a HAR export from a raw SSE body. The content decides; the file name breaks ties.

    An SSE body never starts with "{" (that would be a field named `{…`, which the spec ignores),
    while a HAR is a JSON object, so the first non-blank byte is enough.
    """
    head = content[:64].removeprefix(BOM).lstrip()
    if head:
        return "har" if head[:1] == b"{" else "sse"
    return "har" if filename.lower().endswith(".har") else "sse"


class SSEEncoder:
    """One stored event → its SSE block. Keeps the `id` in effect, as a parser does: WHATWG
    carries the last id over to later events, so an event whose id was cleared after one that
    had an id needs an explicit empty `id:` line to come back with no id."""

    def __init__(self, implied_name: str = ""):
        self.last_id = ""
        # the name a block without an `event:` line was stored with, for a format whose
        # servers never write the line (`formats.IMPLIED_EVENT_NAME`): written without it
        self.implied_name = implied_name

    def event(self, event_name: str, sse_id: str, data: str, raw, preamble: str = "") -> bytes:
        """`preamble`: the lines that came before the event and are none of its own (SSE
        comments, `retry:`), verbatim with their line ends (`Event.preamble`)."""
        out = [preamble.encode()] if preamble else []
        if event_name and event_name != self.implied_name:
            out.append(b"event: " + event_name.encode() + b"\n")
        if sse_id or self.last_id:
            out.append(b"id: " + sse_id.encode() + b"\n")
        self.last_id = sse_id
        if raw is not None:
            lines = bytes(raw).split(b"\n")
        else:
            lines = data.encode().split(b"\n")
        for line in lines:
            out.append(b"data: " + line + b"\n")
        out.append(b"\n")
        return b"".join(out)
