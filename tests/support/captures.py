"""Captures built in code, and what the exports make of a stream.

- `sse(*objs)`: SSE bytes of event objects; `small_stream`: the events of a short completed
  text stream; `har_entry` / `har`: a HAR document with SSE responses (from
  tests/streams/ingest/test_importer.py).
- `exported` / `document`: a stream's `.sse` and `.json` exports; `event_tuples` /
  `finding_tuples`: its stored rows, comparable across imports (from
  tests/streams/ingest/test_importer.py and tests/streams/serve/test_export.py).
- `MARKDOWN` / `text_capture(text)`: a Markdown sample, and a complete SSE capture whose one
  message text is `text` (from tests/e2e/test_rendering_e2e.py).
- `checked(format, name)`: the closed checker of a format's fault capture
  (tests/fixtures/streams/<format>/<name>.sse), and `codes(checker)` its findings' codes.
"""

import base64
import json

from streams.core import formats
from streams.core.capture import parse_sse_bytes
from streams.models import Event, Finding
from streams.serve.export import iter_document, iter_sse

# ---- SSE and HAR --------------------------------------------------------------------------


def sse(*objs, event="message"):
    blocks = []
    for obj in objs:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        head = f"event: {event}\n" if event else ""
        blocks.append(f"{head}data: {data}\n\n")
    return "".join(blocks).encode()


def small_stream(text="Hoi", model="gpt-oss-120b", routing=False):
    events = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {"id": "resp_x", "model": model, "status": "in_progress"},
        }
    ]
    if routing:
        events.append(
            {
                "type": "response.routing.completed",
                "model_id": "gpt-oss-20b",
                "category": "chat",
                "source": "router",
                "reasoning": "short question",
            }
        )
    events += [
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": ch,
        }
        for ch in text
    ]
    events += [
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": text},
        {
            "type": "response.completed",
            "response": {
                "id": "resp_x",
                "model": model,
                "status": "completed",
                "output_text": text,
            },
        },
    ]
    for i, e in enumerate(events):
        e["sequence_number"] = i
    return events


def har_entry(body_bytes, *, base64_body=False, url="https://api.test/v1/responses?key=sk-x"):
    text = base64.b64encode(body_bytes).decode() if base64_body else body_bytes.decode()
    content = {"size": len(body_bytes), "mimeType": "text/event-stream", "text": text}
    if base64_body:
        content["encoding"] = "base64"
    return {
        "startedDateTime": "2025-01-02T03:04:05.678Z",
        "time": 812.5,
        "request": {
            "method": "POST",
            "url": url,
            "headers": [{"name": "Authorization", "value": "Bearer sk-secret"}],
            "postData": {
                "mimeType": "application/json",
                "text": json.dumps(
                    {"model": "auto", "input": [{"role": "user", "content": "Hallo daar"}]}
                ),
            },
        },
        "response": {"status": 200, "content": content},
        "timings": {
            "blocked": 1.5,
            "dns": -1,
            "connect": 10,
            "send": 0.5,
            "wait": 300,
            "receive": 500.5,
        },
    }


def har(*entries):
    other = {
        "startedDateTime": "2025-01-02T03:04:05.000Z",
        "time": 3,
        "request": {"method": "GET", "url": "https://x.test/app.js"},
        "response": {"status": 200, "content": {"mimeType": "application/javascript", "text": ""}},
        "timings": {},
    }
    return json.dumps({"log": {"version": "1.2", "entries": [other, *entries]}}).encode()


MARKDOWN = (
    "# Heading\n\nSome **bold** and `code`.\n\n- one\n- two\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint('hi')\n```\n\n"
    "[docs](https://example.org/docs) and <https://example.org/auto> and https://example.org/bare\n"
)


def text_capture(text, escaped=True):
    """A complete stream whose one message text is `text`, as an SSE capture; `escaped=False`:
    its events' data hold every character as it is (no `\\u` escapes)."""
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r1", "model": "m"}},
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 0,
            "item": {"type": "message", "id": "msg1", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 2,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
    ]
    seq = 3
    for start in range(0, len(text), 40):
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": seq,
                "output_index": 0,
                "content_index": 0,
                "delta": text[start : start + 40],
            }
        )
        seq += 1
    events += [
        {
            "type": "response.output_text.done",
            "sequence_number": seq,
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.completed",
            "sequence_number": seq + 1,
            "response": {"id": "r1", "model": "m", "status": "completed"},
        },
    ]
    body = "".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=escaped)}\n\n" for e in events
    )
    return body.encode()


# ---- what a stream exports and stores -----------------------------------------------------


def exported(stream):
    """The stream's `.sse` export, whole: what the download and `export_sse` send."""
    return b"".join(iter_sse(stream))


def document(stream, events=True):
    """The stream's `.json` export, parsed: what the download and `export_sse --json` send."""
    return json.loads("".join(iter_document(stream, events=events)))


def event_tuples(stream):
    return list(
        Event.objects.filter(stream=stream)
        .order_by("index")
        .values_list("index", "event_name", "sse_id", "type", "sequence_number", "data", "raw")
    )


def finding_tuples(stream, drop=frozenset()):
    return [
        (f.code, f.severity, f.event_index)
        for f in Finding.objects.filter(stream=stream).order_by("event_index", "code")
        if f.code not in drop
    ]


# ---- the other formats' captures -------------------------------------------------------------


def checked(format, name):
    """The checker of `format` fed the capture `<format>/<name>.sse` and closed."""
    from tests.support.paths import CAPTURES

    checker = formats.checker(format)
    for i, ev in enumerate(parse_sse_bytes((CAPTURES / format / f"{name}.sse").read_bytes())):
        checker.feed(i, ev.event_name or "message", ev.data)
    checker.close()
    return checker


def codes(checker):
    return [v.code for v in checker.violations]
