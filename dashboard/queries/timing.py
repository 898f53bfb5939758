"""The timeline's chart and replay data, compact JSON fetched apart from the page (a stream's
own timeline and a shared one's)."""

import heapq
import json

from django.db.models import Count

from dashboard.queries.common import is_proxied
from streams.core import figures
from streams.core.checks import OUTPUT_DELTAS, TERMINAL_STATUS
from streams.models import Finding
from streams.store import events as stored_events
from streams.store import outline as outlines


def flagged_timing(stream):
    """How many stall and buffered_delivery findings the stream has, all of them (a stall
    before the connection closed sits at no event): the chart caption's numbers."""
    counts = dict(
        Finding.objects.filter(stream_id=stream.pk, code__in=("stall", "buffered_delivery"))
        .values_list("code")
        .annotate(n=Count("id"))
        .values_list("code", "n")
    )
    return {
        "stall": counts.get("stall", 0),
        "buffered_delivery": counts.get("buffered_delivery", 0),
    }


def _replay_entry(t_us, type_, obj, targets):
    """`[t_us, target, delta]` for an output delta (its target numbered in `targets` on first
    sight), else `[t_us, obj]` with only the fields the page's renderer reads."""
    delta = obj.get("delta")
    if type_ in OUTPUT_DELTAS and isinstance(delta, str):
        key = (type_, obj.get("output_index"), obj.get("content_index"), obj.get("summary_index"))
        target = targets.get(key)
        if target is None:
            target = targets[key] = len(targets)
        return [t_us, target, delta]
    slim = {k: obj[k] for k in REPLAY_KEYS if k in obj}
    for key in ("item", "part"):
        value = obj.get(key)
        if isinstance(value, dict):
            slim[key] = {k: value[k] for k in REPLAY_ITEM_KEYS if k in value}
    return [t_us, slim]


def timing_series(stream):
    """The inter-event timing chart's data, compact: `gap_us[i]` is the time since the previous
    event (the first: since the attempt started), so the client rebuilds receipt times with a
    running sum; `kind[i]` indexes `types`. Arrival indexes are sent only when they are not
    simply 0, 1, 2, …

    100 000 events: one ordered read of two columns over the (stream, index) range and list
    comprehensions: cheap enough to send whole (docs/performance.md, "Inspection").

    A proxied stream's also has `proxy_us[i]`, how long the proxy held each event (None: never
    handed to the client), and `proxy`, the stream's p50 and p99 of it.

    A finished stream of more than `outlines.ABOVE` events: `outlined_series`."""
    if not stream.is_active and stream.event_count > outlines.ABOVE:
        return outlined_series(stream)
    rows, sent, stored = _timed_rows(stream.pk, is_proxied(stream))
    times = [t for t, _ in rows]
    data = {
        "stream": stream.pk,
        "status": stream.status,
        "count": len(rows),
        "timed": None not in times,
        "closed_us": stream.closed_us,
        "flagged": flagged_timing(stream),
    }
    if not rows or not data["timed"]:
        # (no events: an HTTP error or a wrong content type; nothing to chart)
        return data
    types = {}
    data["kind"] = [types.setdefault(type_ or "", len(types)) for _, type_ in rows]
    gaps = [t - p for p, t in zip([0, *times[:-1]], times, strict=True)]
    data.update(
        first=0,
        gap_us=gaps,
        types=list(types),
        output_types=sorted(t for t in types if t in OUTPUT_DELTAS),
    )
    if sent is not None:
        data["proxy_us"] = [None if s is None else s - t for t, s in zip(times, sent, strict=True)]
        data["proxy"] = {"p50_ms": stream.proxy_added_p50_ms, "p99_ms": stream.proxy_added_p99_ms}
    indexes = range(len(rows))
    if rows and (stored[0], stored[-1]) != (0, len(rows) - 1):
        indexes = stored
        data["index"] = indexes
    if len(gaps) > 1:
        data["stats"] = _gap_stats(gaps, times, indexes)
    data["marks"] = _timing_marks(stream)
    return data


def outlined_series(stream):
    """The chart's data from the stream's outline: `points` (`index`, `at_us` its receipt time,
    `value_us` the gap or the proxy's delay, `series` 0 output delta, 1 other event, 2 proxy)
    the events the chart would draw, one a cell of its grid (streams/store/outline.py); the
    caption's figures from it (percentiles within 0.5 %: `stats["approximate"]`). Reads no
    event of a packed stream."""
    outline = stored_events.outline(stream.pk)
    data = {
        "stream": stream.pk,
        "status": stream.status,
        "count": outline["count"],
        "timed": not outline["untimed"],
        "closed_us": stream.closed_us,
        "flagged": flagged_timing(stream),
    }
    if not outline["count"] or outline["untimed"]:
        return data
    index, at_us, value_us, series = outline["points"]
    proxied = is_proxied(stream)
    if not proxied:  # (a proxy's delay is charted for a proxied stream only, as above)
        kept = [i for i, s in enumerate(series) if s != outlines.PROXY]
        index, at_us, value_us, series = (
            [column[i] for i in kept] for column in (index, at_us, value_us, series)
        )
    data["points"] = {"index": index, "at_us": at_us, "value_us": value_us, "series": series}
    if proxied:
        data["proxy"] = {"p50_ms": stream.proxy_added_p50_ms, "p99_ms": stream.proxy_added_p99_ms}
    stats = outlines.gap_figures(outline)
    if stats:
        data["stats"] = {**stats, "approximate": True}
    data["marks"] = _timing_marks(stream)
    return data


def _timed_rows(stream_id, proxied):
    """[(t_us, type)] in index order, a proxied stream's sent_us list (else None), and the
    arrival indexes."""
    columns = ("t_us", "type", "index", "sent_us") if proxied else ("t_us", "type", "index")
    rows = list(stored_events.read(stream_id, columns))
    indexes = [r[2] for r in rows]
    timed = [(r[0], r[1]) for r in rows]
    return timed, ([r[3] for r in rows] if proxied else None), indexes


def _timing_marks(stream):
    """Where the chart draws its timing findings (those at an event, the first 1,000); the
    caption counts `flagged`, which also has a stall before the connection closed (a finding
    at no event)."""
    marks = Finding.objects.filter(
        stream_id=stream.pk, code__in=("stall", "buffered_delivery"), event_index__isnull=False
    )
    return list(marks.order_by("event_index").values("event_index", "code")[:1000])


def _gap_stats(gaps, times, indexes):
    """The chart's caption: duration, the gaps' median, p90, p99 and maximum (nearest rank,
    the first gap, from the attempt's start, left out), and the ten longest gaps."""
    between = sorted(gaps[1:])
    top = heapq.nlargest(10, range(1, len(gaps)), key=gaps.__getitem__)
    return {
        "duration_ms": times[-1] / 1000,
        "median_ms": figures.nearest_rank(between, 500) / 1000,
        "p90_ms": figures.nearest_rank(between, 900) / 1000,
        "p99_ms": figures.nearest_rank(between, 990) / 1000,
        "max_ms": between[-1] / 1000,
        "longest": [{"index": indexes[i], "gap_ms": gaps[i] / 1000} for i in top],
    }


def terminal_index(stream):
    """The arrival index of the stream's terminal event (None without one). What arrived after
    it is not part of the response (checks: event_after_terminal)."""
    first = stored_events.first(stream.pk, ("index",), types=TERMINAL_STATUS)
    return None if first is None else first[0]


# Types the page's output renderer uses, and the fields of each it needs.
REPLAY_KEYS = ("type", "output_index", "content_index", "summary_index", "text", "arguments")
REPLAY_TYPES = frozenset(
    {
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.output_text.done",
        "response.refusal.done",
        "response.function_call_arguments.done",
        *OUTPUT_DELTAS,
    }
)
REPLAY_ITEM_KEYS = ("type", "id", "name", "call_id", "status", "output", "arguments")


def replay_events(stream):
    """What the page needs to rebuild the output at its recorded pace, compact.

    `events` holds `[t_us, target, delta]` for a delta (`targets[target]` is its
    `[type, output_index, content_index, summary_index]`) and `[t_us, obj]` for the other
    output-shaping events, `obj` reduced to the fields the page's renderer reads; repeated
    sequence numbers are left out, as the checker leaves them out of the text, and so is what
    arrived after the terminal event. A long stream's replay data is megabytes of JSON:
    fetched only when someone presses Replay."""
    end = terminal_index(stream)
    columns = ("t_us", "type", "sequence_number", "data")
    rows = stored_events.read(stream.pk, columns, types=REPLAY_TYPES, before=end)
    targets = {}
    events = []
    seen = set()
    for t_us, type_, seq, data in rows:
        if seq is not None:
            if seq in seen:
                continue  # a duplicate delivery: the checker did not apply it either
            seen.add(seq)
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            events.append(_replay_entry(t_us, type_, obj, targets))
    return {
        "stream": stream.pk,
        "targets": [list(k) for k in targets],
        "events": events,
        "timed": all(e[0] is not None for e in events),
    }
