"""The timeline page of a stream: its waterfall, attempts, output and findings, the windows of
its event table and one event's detail. (The chart's and the replay's data: `timing`.)"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from django.utils.formats import get_format
from django.utils.translation import gettext, gettext_lazy

from dashboard.queries.common import (
    finding_counts,
    findings,
    findings_at,
    is_proxied,
)
from dashboard.queries.output import final_texts, output_blocks, word_ops
from streams.access.rules import may_see
from streams.core.summaries import event_summary
from streams.models import Finding, Stream
from streams.store import events as stored_events
from streams.store import known_secrets
from streams.store.event_row import PROXIED_ROW_COLUMNS

EVENTS_PAGE = 200  # rows per event-table window
JUMP_CONTEXT = 20  # rows shown above an event the page jumps to
DETAIL_MAX = 200_000  # characters of an event's data shown in the page (the export has all)
SEVERITY_RANK = {"error": 3, "warning": 2, "info": 1}


# ---------------------------------------------------------------------------------------------
# The timeline


MILESTONES = (
    # (field, label, what it marks)
    ("connected_us", gettext_lazy("Connected"), gettext_lazy("TCP connection established")),
    (
        "request_written_us",
        gettext_lazy("Request sent"),
        gettext_lazy("request body written to the socket"),
    ),
    ("headers_us", gettext_lazy("Headers"), gettext_lazy("response headers received")),
    ("created_event_us", "response.created", gettext_lazy("first event")),
    (
        "routing_us",
        gettext_lazy("Routing"),
        gettext_lazy("response.routing.completed: the model was chosen"),
    ),
    ("first_token_us", gettext_lazy("First token"), gettext_lazy("first output-bearing delta")),
    (
        "first_tool_call_us",
        gettext_lazy("First tool call"),
        gettext_lazy("first function call item"),
    ),
    (
        "terminal_us",
        gettext_lazy("Terminal"),
        gettext_lazy("response.completed / error / failed / incomplete"),
    ),
    ("closed_us", gettext_lazy("Closed"), gettext_lazy("connection closed")),
)
# A proxied stream's one milestone of its own: the first event's bytes reached the client (its
# bar, from the milestone before, is the proxy's delay for that event).
TO_CLIENT = (
    "first_sent_us",
    gettext_lazy("To client"),
    gettext_lazy("the proxy handed the first event to its client"),
)


def waterfall(stream, last_event_us=None, until=None, first_sent_us=None):
    """The milestones in time order, each a bar from the previous milestone to itself, scaled
    like a browser's network timing view (percentages of the whole attempt, or of the time
    up to `until` µs: the page's "until the first token" zoom). `first_sent_us`: a proxied
    stream's TO_CLIENT milestone."""
    times = {name: getattr(stream, name) for name, _, _ in MILESTONES}
    times[TO_CLIENT[0]] = first_sent_us
    reached = [
        (times[name], i, name, label, what)
        for i, (name, label, what) in enumerate((*MILESTONES, TO_CLIENT))
        if times[name] is not None
    ]
    reached.sort()
    end = until or max([r[0] for r in reached] + [last_event_us or 0])
    rows = []
    prev = 0
    for at, _, name, label, what in reached:
        start = prev
        rows.append(
            {
                "name": name.removesuffix("_us"),
                "label": label,
                "what": what,
                "at_ms": at / 1000,
                "start_ms": start / 1000,
                "duration_ms": (at - start) / 1000,
                "left": min(_pct(start, end), 100),
                "width": max(min(_pct(at, end), 100) - min(_pct(start, end), 100), 0.25),
                "beyond": at > end,
            }
        )
        prev = max(prev, at)
    spans = []
    if stream.request_written_us is not None and stream.first_token_us is not None:
        spans.append(_span(gettext("TTFT"), stream.request_written_us, stream.first_token_us, end))
    if stream.first_token_us is not None and stream.terminal_us is not None and not until:
        spans.append(_span(gettext("Generation"), stream.first_token_us, stream.terminal_us, end))
    return {"rows": rows, "ticks": _ticks(end), "total_ms": end / 1000, "spans": spans}


def _start_view(stream, first_sent_us=None):
    """The waterfall up to the first token (+20 %), where a long stream's early milestones
    are otherwise a few pixels wide; None when there is nothing to zoom into."""
    first = stream.first_token_us
    if first is None or not stream.terminal_us or stream.terminal_us < 3 * first:
        return None
    return waterfall(stream, until=int(first * 1.2), first_sent_us=first_sent_us)


def _ticks(end_us):
    """Round tick marks (1, 2, 2.5 or 5 × 10^k ms) across 0…end, labelled in ms or s."""
    if not end_us:
        return []
    end_ms = end_us / 1000
    raw = end_ms / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    in_s = end_ms >= 2000
    ticks = []
    value = 0.0
    while value <= end_ms * 1.0001:
        label = f"{value / 1000:g} s" if in_s else f"{value:g} ms"
        label = label.replace(".", get_format("DECIMAL_SEPARATOR"))  # 2.5 s, Dutch 2,5 s
        ticks.append({"left": round(100 * value / end_ms, 3), "label": label})
        value += step
    return ticks


def _pct(us, end):
    return round(100 * us / end, 3) if end else 0


def _span(label, start, stop, end):
    return {
        "label": label,
        "ms": (stop - start) / 1000,
        "left": min(_pct(start, end), 100),
        "width": max(min(_pct(stop, end), 100) - min(_pct(start, end), 100), 0.25),
    }


def attempts(user, stream):
    """Every attempt of the request `stream` belongs to (stall retries), in order.

    Two lookups by primary key and by the first_attempt foreign key, with the access rule
    applied to the rows: with the access condition in the SQL, SQLite preferred the user's
    created_at index and scanned it, as did an OR of the two lookups (docs/performance.md,
    "Inspection")."""
    first = stream.first_attempt_id or stream.pk
    columns = ("id", "attempt", "status", "error_code", "project_id")
    rows = list(Stream.objects.filter(pk=first).values(*columns))
    rows += Stream.objects.filter(first_attempt_id=first).values(*columns)
    rows = [r for r in rows if may_see(user, r["project_id"])]
    return sorted(rows, key=lambda r: (r["attempt"], r["id"]))


def type_counts(stream):
    """Event types of the stream with their counts, most frequent first (the table filter)."""
    rows = stored_events.type_counts(stream.pk)
    return sorted(rows, key=lambda r: (-r[1], known_secrets.label_key(r[0])))


def stream_timeline(user, stream, window=None):
    """Everything the timeline page shows of a stream, but the chart's points (see
    `timing_series`): header, attempts, figures, waterfall, output, findings, the first
    window of the event table (or the one `window` asks for)."""
    window = window or {}
    events = event_window(stream, **window)
    items = output_blocks(stream)
    if stream.is_active:
        # A streaming row's event_count is rewritten at most every COUNT_WRITE_INTERVAL_MS:
        # the page counts what is stored, as its table and chart do (never saved).
        stream.event_count = stored_event_count(stream)
    final_text = stream.final_text
    terminal_diff = None
    if final_text and not stream.is_active and final_text != final_texts(items):
        terminal_diff = word_ops(final_texts(items), final_text)
    last_us = _last_event_us(stream)
    first_sent = _first_sent_us(stream) if events.proxied else None
    chain = attempts(user, stream)
    later = [a for a in chain if a["attempt"] > stream.attempt]
    return {
        "stream": stream,
        "replay": replay_offer(stream),
        "proxied": events.proxied,
        "error_message": stream.error_message,
        "attempts": chain,
        "next_attempt": later[0] if later else None,
        "waterfall": waterfall(stream, last_us, first_sent_us=first_sent),
        "waterfall_start": _start_view(stream, first_sent),
        "items": items,
        "final_text": final_text,
        "terminal_diff": terminal_diff,
        "findings": findings(stream),
        "finding_counts": finding_counts(stream),
        "types": type_counts(stream),
        "events": events,
    }


def _last_event_us(stream):
    """When a finished stream's last event arrived (None: active, or no events)."""
    if stream.is_active or not stream.event_count:
        return None
    last = stored_events.first(stream.pk, ("t_us",), indexes=(stream.event_count - 1,))
    return None if last is None else last[0]


def _first_sent_us(stream):
    """When a proxied stream's first event was handed to its client (index order through the
    (stream, index) index; an event the client never got, after it hung up, has none)."""
    handed = stored_events.first(stream.pk, ("sent_us",), handed=True)
    return None if handed is None else handed[0]


def stored_event_count(stream):
    """How many events of the stream are stored: its last index + 1 (indexes are dense from
    0), read through the (stream, index) index."""
    last = stored_events.last_index(stream.pk)
    return 0 if last is None else last + 1


def replay_offer(stream):
    """Whether the page offers a replay, and if not, why: a stream that received no events
    (HTTP 429/500, a wrong content type) or none that shaped an output has nothing to replay."""
    if stream.is_active:
        return {
            "available": False,
            "reason": gettext("The replay is available when the stream has ended."),
        }
    if not stream.event_count:
        return {
            "available": False,
            "reason": gettext("Nothing to replay: no events were received."),
        }
    if not stream.parts:
        return {
            "available": False,
            "reason": gettext("Nothing to replay: no event carried output."),
        }
    return {"available": True, "reason": ""}


# ---------------------------------------------------------------------------------------------
# The event table and an event's detail


@dataclass
class EventWindow:
    rows: list = field(default_factory=list)
    first: int | None = None
    last: int | None = None
    has_before: bool = False
    has_after: bool = False
    type: str = ""
    at: int | None = None  # the row the page jumped to
    proxied: bool = False  # rows have `proxy_ms`, the table its "proxy +ms" column

    @property
    def columns(self):
        """The table's column count (for cells that span it)."""
        return 7 if self.proxied else 6


def proxy_added_ms(t_us, sent_us):
    """How long the proxy held an event: its receipt from the upstream → handed to the client
    (the per-event value behind Stream.proxy_added_p50_ms; None when it was never handed)."""
    if t_us is None or sent_us is None:
        return None
    return (sent_us - t_us) / 1000


def event_window(
    stream, *, after=None, before=None, at=None, type="", tail=False, limit=EVENTS_PAGE
):
    """A window of up to `limit` events by arrival index: after an index, before one, around
    one (`at`: a jump, which ignores the type filter), the last ones (`tail`), or the first.
    Every read is a range on the unique (stream, index) index."""
    if at is not None:
        type = ""
    of_type = {"types": (type,)} if type else {}
    descending = at is None and (before is not None or tail)
    if at is not None:
        rows = _event_rows(stream, limit + 1, after=max(0, at - JUMP_CONTEXT) - 1)
        if not rows:  # past the end: show the end
            return event_window(stream, tail=True, limit=limit)
    elif before is not None:
        rows = _event_rows(stream, limit + 1, before=before, descending=True, **of_type)
    elif tail:
        rows = _event_rows(stream, limit + 1, descending=True, **of_type)
    else:
        rows = _event_rows(stream, limit + 1, after=-1 if after is None else after, **of_type)
    window = EventWindow(type=type, at=at, proxied=is_proxied(stream))
    if descending:
        window.has_before = len(rows) > limit
        rows = rows[:limit][::-1]
        window.has_after = bool(rows) and stored_events.exists(
            stream.pk, after=rows[-1]["index"], **of_type
        )
    else:
        window.has_after = len(rows) > limit
        rows = rows[:limit]
        window.has_before = (
            bool(rows)
            and rows[0]["index"] > 0
            and stored_events.exists(stream.pk, before=rows[0]["index"], **of_type)
        )
    if rows:
        window.first, window.last = rows[0]["index"], rows[-1]["index"]
        _mark_findings(stream, rows)
    window.rows = rows
    return window


def _event_rows(stream, limit, descending=False, **where):
    columns = ("index", "t_us", "sequence_number", "type", "is_json", "data", "sent_us")
    read = stored_events.read(stream.pk, columns, descending=descending, limit=limit, **where)
    # Each row's gap is to the event just before it by index, whatever the type filter kept.
    wanted = {r[0] - 1 for r in read if r[0] > 0} - {r[0] for r in read}
    before = {}
    if wanted:
        before = dict(stored_events.read(stream.pk, ("index", "t_us"), indexes=wanted))
    before.update((r[0], r[1]) for r in read)
    rows = []
    for index, t_us, seq, type_, is_json, data, sent_us in read:
        prev_t_us = before.get(index - 1)
        gap = None
        if t_us is not None and prev_t_us is not None:
            gap = (t_us - prev_t_us) / 1000
        rows.append(
            {
                "index": index,
                "t_ms": None if t_us is None else t_us / 1000,
                "gap_ms": gap,
                "proxy_ms": proxy_added_ms(t_us, sent_us),
                "sequence_number": seq,
                "type": type_ or ("(not JSON)" if not is_json else "(no type)"),
                "summary": event_summary(type_, data, is_json),
                "severity": "",
                "codes": [],
            }
        )
    return rows


def _mark_findings(stream, rows):
    lo, hi = rows[0]["index"], rows[-1]["index"]
    marks = {}
    for index, code, severity in Finding.objects.filter(
        stream_id=stream.pk, event_index__gte=lo, event_index__lte=hi
    ).values_list("event_index", "code", "severity"):
        marks.setdefault(index, []).append((code, severity))
    if not marks:
        return
    for row in rows:
        found = marks.get(row["index"])
        if found:
            row["codes"] = sorted({code for code, _ in found})
            row["severity"] = max((s for _, s in found), key=lambda s: SEVERITY_RANK.get(s, 0))


def event_detail(stream, index):
    """One event with its data: pretty-printed JSON and verbatim; None when it does not exist."""
    columns = tuple(c for c in PROXIED_ROW_COLUMNS if c != "stream_id")
    found = stored_events.first(stream.pk, columns, indexes=(index,))
    if found is None:
        return None
    row = dict(zip(columns, found, strict=True))
    raw = row.pop("raw")
    data = row["data"]
    row["size"] = len(data)
    row["truncated"] = len(data) > DETAIL_MAX
    row["verbatim"] = data[:DETAIL_MAX]
    pretty = None
    if row["is_json"]:
        try:
            pretty = json.dumps(json.loads(data), indent=2, ensure_ascii=False)[:DETAIL_MAX]
        except (ValueError, RecursionError):
            pretty = None
    row["pretty"] = pretty
    row["raw"] = None if raw is None else repr(bytes(raw)[:2000])
    row["t_ms"] = None if row["t_us"] is None else row["t_us"] / 1000
    row["proxied"] = is_proxied(stream)
    row["columns"] = EventWindow(proxied=row["proxied"]).columns
    row["sent_ms"] = None if row["sent_us"] is None else row["sent_us"] / 1000
    row["proxy_ms"] = proxy_added_ms(row["t_us"], row["sent_us"])
    row["findings"] = findings_at(stream, index)
    return row
