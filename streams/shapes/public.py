"""The public shapes of a stream: what the API, the exports and the WebSocket frames say
about it (`stream`, `list_item`, `export_event`, `list_frame`, encoded by `dumps`), and its
reassembled output for pages (`output`). An event's own shapes are its row's
(streams/store/event_row.py) and its live message's, which is how a frame encodes it
(streams/shapes/event_message.py).

These are plain values of what was stored, verbatim: secrets an upstream echoed are taken out
where everything leaves, by the egress gate (streams/serve/egress.py), not here.
"""

from __future__ import annotations

import json

import orjson
from django.core.serializers.json import DjangoJSONEncoder

from streams.core import pricing
from streams.core.checks import ITEM_KINDS
from streams.core.usage import FIELDS as TOKEN_COLUMNS
from streams.models import Event
from streams.store import retention

# A stream's usage and cost columns (streams/core/usage.py, streams/store/prices.py): shown
# as `usage` and `cost` (`usage_of`, `cost_of`).
USAGE_COLUMNS = (*TOKEN_COLUMNS, "usage_source", "cost_nanos", "cost_currency", "price_ref")

# Fields of a stream that viewers are told about when they change.
PUBLIC_FIELDS = {
    "status",
    "upstream_id",
    "resolved_model",
    "routing_category",
    "routing_source",
    "routing_reasoning",
    "http_status",
    "error_code",
    "error_message",
    "connected_us",
    "request_written_us",
    "headers_us",
    "created_event_us",
    "routing_us",
    "first_token_us",
    "first_tool_call_us",
    "terminal_us",
    "closed_us",
    "ttft_ms",
    "duration_ms",
    "tokens_per_s",
    "event_count",
    "output_deltas",
    "findings_count",
    "error_findings",
    "warning_findings",
    *USAGE_COLUMNS,
}

# Columns of a stream its public shape (`stream`) leaves out, and why. Every other column is in
# it: tests/streams/shapes/test_public.py walks the model, so a new column is either shown or listed
# here.
NOT_SHOWN = {
    "id": "shown as `id`",
    "user_id": "the owner decides who sees a stream (streams/access/rules.py); not shown",
    "project_id": "its project decides who sees it (streams/access/projects.py); an API "
    "request names the project it reads (`?project=`), the timeline's header shows it",
    "token_id": "the token a proxied stream came through, for its spend (streams/store/"
    "spend.py); the token page names tokens to who may see them, a stream's readers need not",
    "heartbeat_at": "the running process's liveness, not the stream's",
    "runner": "which process runs it (host:pid:nonce), internal",
    "search_other": "the search index's input (streams/store/search.py), made of the request "
    "and the parts, which are shown",
    "search_prompt": "what the search index reads: the prompt, redacted, which is shown",
    "search_output": "what the search index reads: the output text, redacted, which is shown",
    "search_error": "what the search index reads: the error message, redacted, which is shown",
    "search_derived_ns": "when the search index's text was derived (streams/store/search.py)",
    "events_packed_at": "when its events were packed into blocks (streams/store/compact.py): "
    "how they are stored, not what they are; every reader reads both alike",
}

# The `milestones_us` of the public shape: (name, column), in the order they happen.
MILESTONE_COLUMNS = (
    ("connected", "connected_us"),
    ("request_written", "request_written_us"),
    ("headers", "headers_us"),
    ("created", "created_event_us"),
    ("routing", "routing_us"),
    ("first_token", "first_token_us"),
    ("first_tool_call", "first_tool_call_us"),
    ("terminal", "terminal_us"),
    ("closed", "closed_us"),
)

# The figures, output and counts of the public shape, as their columns are named.
FIGURE_COLUMNS = (
    "ttft_ms",
    "duration_ms",
    "tokens_per_s",
    "inter_token_ms",
    "proxy_added_p50_ms",
    "proxy_added_p99_ms",
    "event_count",
    "output_deltas",
    "bytes_received",
    "output_text",
    "final_text",
    "parts",
    "findings_count",
    "error_findings",
    "warning_findings",
)

FAILED_TOOL_STATUSES = frozenset({"failed", "incomplete", "cancelled"})

# The first frame of a stream's WebSocket: every field viewers are told about when it changes.
STREAM_FIELDS = ("status", *sorted(PUBLIC_FIELDS - {"status"}))
# A stream in a list (the API's and the live list's first frame), besides its id.
LIST_FIELDS = (
    "status",
    "source",
    "format",
    "requested_model",
    "resolved_model",
    "scenario",
    "prompt",
    "attempt",
    "created_at",
    "ttft_ms",
    "duration_ms",
    "event_count",
    "findings_count",
    "error_findings",
    "warning_findings",
    "error_code",
)
LIST_PROMPT_MAX = 200
# What a list reads of each stream for `list_item`.
LIST_COLUMNS = ("id", *LIST_FIELDS, *USAGE_COLUMNS)
# An event as the `.json` export has it: every stored column but the stream and the raw bytes
# (from the model, not the recorder's row layout, which leaves sent_us out of the rows of
# streams that are not proxied).
EXPORT_EVENT_FIELDS = tuple(
    f.attname for f in Event._meta.concrete_fields if f.attname not in ("id", "stream_id", "raw")
)
FINDING_FIELDS = ("code", "severity", "event_index", "expected", "got", "detail")


# ---- text out --------------------------------------------------------------------------------


_django_default = DjangoJSONEncoder().default


def dumps(obj) -> str:
    """Compact JSON without the key; datetimes as Django writes them. orjson first (frames are
    encoded for every batch of every viewer), json for what it refuses (integers over 64 bits)."""
    try:
        text = orjson.dumps(
            obj, default=_django_default, option=orjson.OPT_PASSTHROUGH_DATETIME
        ).decode()
    except TypeError:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, cls=DjangoJSONEncoder)
    return text


def _iso(value):
    return value.isoformat() if value is not None else None


def stream(stream, *, with_feedback=True) -> dict:
    """Everything about a stream but its events: metadata, milestones, metrics, text, output
    items, findings, and (`with_feedback`) its scores and comments with their authors' names
    (the API's summary and the `.json` export's head; sync: reads the findings)."""
    findings = list(stream.findings.order_by("event_index", "id").values(*FINDING_FIELDS))
    return {
        "id": stream.pk,
        "status": stream.status,
        "source": stream.source,
        "format": stream.format,  # the API its bytes speak (streams/core/formats/)
        "requested_model": stream.requested_model,
        "resolved_model": stream.resolved_model,
        "scenario": stream.scenario,
        "prompt": stream.prompt,
        # what a proxied request's client said about it (X-Streamscope-Tags / -Session)
        "tags": stream.tags,
        "session": stream.session,
        "request": stream.request_body,
        "upstream_url": stream.upstream_url,
        "routing": {
            "category": stream.routing_category,
            "source": stream.routing_source,
            "reasoning": stream.routing_reasoning,
        },
        "upstream_id": stream.upstream_id,
        "http_status": stream.http_status,
        "content_type": stream.content_type,
        "error": {"code": stream.error_code, "message": stream.error_message}
        if stream.error_code or stream.error_message
        else None,
        "attempt": stream.attempt,
        "first_attempt": stream.first_attempt_id,
        "created_at": _iso(stream.created_at),
        "started_at": _iso(stream.started_at),
        "finished_at": _iso(stream.finished_at),
        # whose clock stamped the receipt times: "kernel", "loop", or "" (none were taken)
        "receipt_clock": stream.receipt_clock,
        "milestones_us": {name: getattr(stream, column) for name, column in MILESTONE_COLUMNS},
        **{name: getattr(stream, name) for name in FIGURE_COLUMNS},
        "findings": findings,
        # retention deleted its events (their figures and findings stay): its own mark or its
        # dropped day's (streams/store/retention.py)
        "events_pruned_at": _iso(retention.pruned_at(stream)),
        **usage_and_cost({name: getattr(stream, name) for name in USAGE_COLUMNS}),
        **(feedback(stream.pk) if with_feedback else {}),
    }


def feedback(stream_id) -> dict:
    """`scores` and `comments` of a stream, oldest first (sync)."""
    from streams.store import scores

    given, comments = scores.of_stream(stream_id)
    return {"scores": [score(s) for s in given], "comments": [comment(c) for c in comments]}


def _author(user):
    return user.get_username() if user is not None else None


def score(s) -> dict:
    """One score (its `score_type` loaded)."""
    return {
        "id": s.pk,
        "stream": s.stream_id,
        "name": s.score_type.name,
        "kind": s.score_type.kind,
        "value": s.value,
        "label": s.label,
        "positive": s.score_type.is_positive(s.value),
        "comment": s.comment,
        "author": _author(s.author),
        "source": s.source,
        "key": s.key,
        "created_at": _iso(s.created_at),
        "updated_at": _iso(s.updated_at),
    }


def comment(c) -> dict:
    return {
        "id": c.pk,
        "stream": c.stream_id,
        "text": c.text,
        "author": _author(c.author),
        "source": c.source,
        "created_at": _iso(c.created_at),
    }


def score_type(t) -> dict:
    return {
        "name": t.name,
        "kind": t.kind,
        "minimum": t.minimum,
        "maximum": t.maximum,
        "categories": t.categories,
        "description": t.description,
    }


def channel(c, *, manages=True) -> dict:
    """A notification channel as the API shows it: its target masked, never whole; to whoever
    may not manage it, its name only (as the page)."""
    if not manages:
        return {"id": c.pk, "name": c.name}
    return {
        "id": c.pk,
        "name": c.name,
        "kind": c.kind,
        "target": c.target_masked,
        "enabled": c.enabled,
        "project": c.project.slug,
        "created_by": _author(c.created_by),
        "created_at": _iso(c.created_at),
    }


def delivery(d) -> dict:
    return {
        "id": d.pk,
        "channel": d.channel_id,
        "key": d.key,
        "subject": d.subject,
        "state": d.state,
        "attempts": d.attempts,
        "next_at": _iso(d.next_at),
        "last_status": d.last_status,
        "last_answer": d.last_answer,
        "created_at": _iso(d.created_at),
        "sent_at": _iso(d.sent_at),
    }


def usage_and_cost(row) -> dict:
    """`usage` (the token counts and whether the upstream reported them or they are an
    estimate; None when there is none) and `cost` (its amount as a decimal string, currency,
    the price used, and whether the usage it is from is an estimate; None when there is no
    price) of a row with the USAGE_COLUMNS."""
    source = row["usage_source"]
    usage = {name: row[name] for name in TOKEN_COLUMNS} | {"source": source} if source else None
    nanos = row["cost_nanos"]
    cost = None
    if nanos is not None:
        cost = {
            "amount": pricing.amount_text(nanos),
            "currency": row["cost_currency"],
            "price": row["price_ref"],
            "estimated": source == "estimated",
        }
    return {"usage": usage, "cost": cost}


def list_item(row) -> dict:
    """A stream in a list, from a `.values(*LIST_COLUMNS)` row."""
    item = {"id": row["id"], **{name: row[name] for name in LIST_FIELDS}}
    item["prompt"] = item["prompt"][:LIST_PROMPT_MAX]
    item["created_at"] = _iso(item["created_at"])
    return item | usage_and_cost(row)


def export_event(row) -> dict:
    """One event as the `.json` export has it, from a `values_list(*EXPORT_EVENT_FIELDS)` row."""
    item = dict(zip(EXPORT_EVENT_FIELDS, row, strict=True))
    item["received_at"] = _iso(item["received_at"])
    return item


def list_frame(items) -> str:
    """A list WebSocket frame: `list_item`s, or `{"id", changed fields…}`."""
    return dumps({"streams": items})


# ---- values for pages ------------------------------------------------------------------------


def output(stream, *, terminal_text=False) -> list[dict]:
    """The stream's reassembled output (`Stream.parts`, Checker.items()) as items in output
    order, each with its `kind` from checks.ITEM_KINDS ("other" for types not there):

    - message: `parts` of {content_index, type, refusal, done, text (the final text), streamed
      (the streamed text when a rewrite changed it, else None), annotations [{type, text}]}
    - tool: name, call_id, status, failed, arguments (text), streamed_arguments, output
    - reasoning: summary and content (lists of texts)
    - other: item (the item as it came), streamed

    `terminal_text`: a stream without output parts whose terminal event carried the text
    gets it as a message (the playground shows the answer; the timeline shows it as the
    terminal text's difference instead)."""
    items = [_output_item(raw) for raw in stream.parts or () if isinstance(raw, dict)]
    has_text = any(i["kind"] == "message" and i["parts"] for i in items)
    if terminal_text and not has_text and stream.final_text:
        part = {"content_index": 0, "type": "output_text", "text": stream.final_text}
        items.append(
            {
                "kind": "message",
                "output_index": 0,
                "type": "message",
                "id": "",
                "status": "",
                "parts": [_text_part({**part, "done": True})],
            }
        )
    return items


def _output_item(raw):
    """One output item of `Stream.parts` in the shape `output` documents."""
    type_ = raw.get("type") or ""
    kind = ITEM_KINDS.get(type_, "other")
    item = {"kind": kind, "output_index": raw.get("output_index"), "type": type_,
            "id": raw.get("id", "")}  # fmt: skip
    if kind == "message":
        item["status"] = raw.get("status", "")
        item["parts"] = [_text_part(p) for p in raw.get("parts") or () if isinstance(p, dict)]
    elif kind == "tool":
        status = raw.get("status") or ""
        item.update(
            name=raw.get("name") or "",
            call_id=raw.get("call_id") or "",
            status=status,
            failed=status in FAILED_TOOL_STATUSES,
            arguments=raw.get("arguments") or "",
            streamed_arguments=raw.get("streamed_arguments"),
            output=raw.get("output"),
        )
    elif kind == "reasoning":
        item["summary"] = [s for s in raw.get("summary") or () if s]
        item["content"] = [s for s in raw.get("content") or () if s]
    else:
        item["item"] = raw.get("item") or {}
        item["streamed"] = raw.get("streamed") or ""
    return item


def _text_part(part):
    # The text is the checker's (checks._Part.text: the .done text, rewritten or not, else the
    # deltas), stored as `text`, with the deltas' own as `streamed_text` when they differ.
    # Rows stored before that rule kept the deltas as `text` and a differing .done text as
    # `done_text`: read the same way, they show the same final text.
    text = part.get("text") or ""
    final, streamed = text, part.get("streamed_text")
    legacy = part.get("done_text")
    if isinstance(legacy, str) and legacy != text:
        final, streamed = legacy, text
    if not isinstance(streamed, str) or streamed == final:
        streamed = None
    type_ = part.get("type") or "output_text"
    return {
        "content_index": part.get("content_index"),
        "type": type_,
        "refusal": type_ == "refusal",
        "done": part.get("done", False),
        "text": final,
        "streamed": streamed,
        "rewritten": bool(part.get("rewritten")),
        "annotations": [_annotation(a) for a in part.get("annotations") or ()],
    }


def _annotation(value):
    if not isinstance(value, dict):
        return {"type": "", "text": str(value)[:300]}
    label = value.get("title") or value.get("url") or value.get("file_id") or ""
    return {"type": str(value.get("type") or ""), "text": str(label)[:300]}
