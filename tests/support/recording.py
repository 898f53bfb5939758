"""Streams recorded, or stored as the recorder stores them, and waiting for one to end.

- `body` / `record`: a request body for the simulator, and a stream recorded from it through
  the real runner (from tests/streams/ingest/test_recorder.py).
- `event_values`: an event's row as the recorder writes it (through `event_row.row`).
- `text_events` / `recorded`: the events of a one-message stream, and a stream stored from
  events as the recorder stores one, without a recorder (from
  tests/dashboard/queries/test_queries.py); `seed_big_stream`: a big completed stream stored that
  way (from
  tests/e2e/test_inspection_e2e.py).
- `finished` / `wait_finished` (async) and `wait_terminal` (sync): the stream once it is no
  longer active (from tests/streams/live/test_relay_live.py, tests/streams/serve/test_api.py,
  tests/streams/serve/test_proxy.py).
"""

import asyncio
import datetime as dt
import json
import time

from asgiref.sync import sync_to_async

from streams.core.checks import check_events
from streams.models import Finding, Stream
from streams.run import runner
from streams.store import event_row, rows
from streams.store.rows import insert_events, with_search

# ---- recording through the runner ----------------------------------------------------------


def body(scenario="", model="auto", prompt="Tell me about Utrecht", **metadata):
    metadata.setdefault("time_scale", 0.05)
    return rows.build_request_body(prompt, model, scenario=scenario, metadata=metadata)


async def record(b, **kwargs):
    stream = await sync_to_async(rows.new_row)(None, b)
    last, outcome = await runner.run_stream(stream, **kwargs)
    return await Stream.objects.aget(pk=last.pk), outcome


# ---- stored as the recorder stores them ----------------------------------------------------


def compact_json(obj):
    return json.dumps(obj, separators=(",", ":"))


def text_events(*deltas, rewrite_to=None, start_seq=0):
    """The event dicts of a one-message stream streaming `deltas` (and, with `rewrite_to`,
    a rewrite pass whose .done text is `rewrite_to`)."""
    text = "".join(deltas)
    final = text if rewrite_to is None else rewrite_to
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "m-1"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
    ]
    events += [
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": d}
        for d in deltas
    ]
    if rewrite_to is not None:
        events.append({"type": "response.rewrite.in_progress"})
    events += [
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": final},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "message"}},
        {"type": "response.completed", "response": {"id": "resp_1", "output_text": final}},
    ]
    for seq, event in enumerate(events, start_seq):
        event["sequence_number"] = seq
    return events


def event_values(stream_id, index, t_us, received_at, data, checked=None, **received):
    """An event's row as the recorder writes it (`event_row.row`, never spelled out by position:
    a new column is placed there or is an error here). `data` the event's data; `received` the
    rest of `event_row.Received` (`event_name` "message" unless given); `checked` the checker's
    fields (`event_row.Checked`), read from `data` when not given."""
    if checked is None:
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        obj = obj if isinstance(obj, dict) else {}
        checked = event_row.Checked(
            obj.get("type", ""),
            obj.get("sequence_number"),
            obj.get("output_index"),
            obj.get("content_index"),
            bool(obj),
        )
    received = {"event_name": "message", "sse_id": "", "raw": None, **received}
    sse = event_row.Received(data=data, **received)
    return event_row.row(stream_id, index, t_us, received_at, sse, checked)


def recorded(user, events, times=None, **fields):
    """A stream stored as the recorder stores one: rows through `insert_events`, the checker's
    findings and reassembly on the Stream. `events` are dicts (or raw data strings); `times`
    the receipt times in µs (default: 1 ms apart from 100 ms)."""
    datas = [e if isinstance(e, str) else compact_json(e) for e in events]
    if times is None:
        times = [100_000 + 1000 * i for i in range(len(datas))]
    checker, violations = check_events(
        [(i, "message", d, t) for i, (d, t) in enumerate(zip(datas, times, strict=True))],
        stall_threshold_us=2_000_000,
    )
    defaults = dict(
        user=user,
        status=checker.status if checker.status != "streaming" else "truncated",
        requested_model="auto",
        resolved_model=checker.resolved_model,
        upstream_id=checker.upstream_id,
        prompt="Tell me about Utrecht",
        event_count=len(datas),
        output_deltas=checker.output_deltas,
        output_text=checker.output_text,
        final_text=checker.final_text or "",
        parts=checker.items(),
        findings_count=len(violations),
        error_findings=sum(v.severity == "error" for v in violations),
        request_written_us=1000,
        first_token_us=times[3] if len(times) > 3 else None,
        terminal_us=times[-1],
        closed_us=None if times[-1] is None else times[-1] + 500,
    )
    defaults.update(fields)
    stream = Stream.objects.create(**with_search(defaults))  # (searchable, as the recorder's)
    Finding.objects.bulk_create([Finding(stream=stream, **v.as_dict()) for v in violations])
    wall = dt.datetime.now(dt.UTC)
    rows = [
        event_values(stream.pk, i, t_us, None if t_us is None else wall, data)
        for i, (data, t_us) in enumerate(zip(datas, times, strict=True))
    ]
    insert_events(rows)
    return stream


def seed_big_stream(user, n=100_000, gaps_us=None):
    """A completed stream of `n` events with a 3 s stall halfway, stored like the recorder's
    (or, given `gaps_us`, with those gaps between its receipts)."""
    datas = [
        {"type": "response.created", "response": {"id": "resp_big", "model": "m"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },  # fmt: skip
    ]
    words = [f"w{i} " for i in range(n - 6)]
    delta = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0}
    datas += [{**delta, "delta": w} for w in words]
    text = "".join(words)
    datas += [
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": text},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "message"}},
        {"type": "response.completed", "response": {"id": "resp_big", "output_text": text}},
    ]
    times = [200_000 + 100 * i + (3_000_000 if i >= n // 2 else 0) for i in range(n)]
    if gaps_us:
        times = [200_000 + sum(gaps_us[:i]) for i in range(n)]
    stream = Stream.objects.create(
        user=user,
        status="completed",
        requested_model="auto",
        resolved_model="m",
        upstream_id="resp_big",
        event_count=n,
        output_deltas=n - 6,
        output_text=text,
        final_text=text,
        parts=[
            {
                "output_index": 0,
                "type": "message",
                "id": "",
                "status": "completed",
                "parts": [{"content_index": 0, "type": "output_text", "text": text, "done": True}],
            },  # fmt: skip
        ],
        request_written_us=1000,
        first_token_us=times[3],
        terminal_us=times[-1],
        closed_us=times[-1] + 300,
        ttft_ms=(times[3] - 1000) / 1000,
        duration_ms=(times[-1] + 300 - 1000) / 1000,
        findings_count=1,
    )
    Finding.objects.create(
        stream=stream, code="stall", severity="warning", event_index=n // 2, detail="3 s"
    )
    wall = dt.datetime.now(dt.UTC)
    rows = []
    for i, (obj, t_us) in enumerate(zip(datas, times, strict=True)):
        obj["sequence_number"] = i
        checked = event_row.Checked(
            obj["type"], i, obj.get("output_index"), obj.get("content_index"), True
        )  # (given, not parsed again: 100,000 of them)
        rows.append(event_values(stream.pk, i, t_us, wall, json.dumps(obj), checked))
    for k in range(0, n, 20_000):
        insert_events(rows[k : k + 20_000])
    return stream


# ---- waiting for a stream to end -------------------------------------------------------------


async def finished(stream_id, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stream = await Stream.objects.aget(pk=stream_id)
        if not stream.is_active:
            return stream
        await asyncio.sleep(0.05)
    raise AssertionError(f"stream {stream_id} did not finish")


async def wait_finished(stream_id, timeout=15):
    for _ in range(int(timeout / 0.02)):
        stream = await Stream.objects.aget(pk=stream_id)
        if not stream.is_active:
            return stream
        await asyncio.sleep(0.02)
    raise AssertionError(f"stream {stream_id} still {stream.status}")


def wait_terminal(stream_id, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stream = Stream.objects.get(pk=stream_id)
        if not stream.is_active:
            return stream
        time.sleep(0.05)
    raise AssertionError(f"stream {stream_id} still {stream.status}")
