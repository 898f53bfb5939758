"""What leaves the server about a stream, and the one place the upstream API key is redacted.

An upstream may echo the key it was sent (in an error message, an event, a tool output, even a
model name), so everything read from a stream row or an event is untrusted: it reaches a
browser, an API client or an export only through this module.

- Text out (API responses, `.json` exports, WebSocket frames): the shapes below (`stream`,
  `list_item`, `event`, `export_event`, `stream_frame`, `list_frame`) are plain values encoded
  by `dumps`, which redacts the encoded text once. With no key configured that costs two
  settings lookups and a cache hit; with one, two `in` tests per frame or document piece, not
  one per field (and a regex pass over text holding a `\\u` escape, which may spell the key).
- Bytes out (`.sse` exports): `redact_bytes` over each piece of whole events.
- Values for templates (pages): `page_stream` (a stream row), `output` (its reassembled output)
  and `scrub` (anything else built from rows), each a redacted copy.

What is redacted: the key as written and with any of its characters written as JSON escapes
(`\\u0073k-…` decodes to `sk-…` in whatever parses it), and the credentials of a URL
(`upstream_url`, `redact_url`; those of UPSTREAM_BASE_URL wherever they appear). Secrets
shorter than KEY_MIN characters are not searched for: they cannot be real, and replacing a
short string everywhere would mangle unrelated text.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from urllib.parse import unquote

import orjson
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from .checks import ITEM_KINDS
from .models import Event
from .recorder import PUBLIC_FIELDS

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()
KEY_MIN = 8
FAILED_TOOL_STATUSES = frozenset({"failed", "incomplete", "cancelled"})

# The first frame of a stream's WebSocket: every field viewers are told about when it changes.
STREAM_FIELDS = ("status", *sorted(PUBLIC_FIELDS - {"status"}))
# A stream in a list (the API's and the live list's first frame), besides its id.
LIST_FIELDS = (
    "status",
    "source",
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
    "error_code",
)
LIST_PROMPT_MAX = 200
# An event as the `.json` export has it: every stored column but the stream and the raw bytes
# (from the model, not the recorder's row layout, which leaves sent_us out of the rows of
# streams that are not proxied).
EXPORT_EVENT_FIELDS = tuple(
    f.attname for f in Event._meta.concrete_fields if f.attname not in ("id", "stream_id", "raw")
)
FINDING_FIELDS = ("code", "severity", "event_index", "expected", "got", "detail")


# ---- redaction -------------------------------------------------------------------------------


class _Redactor:
    """Replaces the secrets, as written or with any of their characters JSON-escaped (`\\u0073`
    for `s`, once or more: verbatim event data holds one backslash, that data inside a JSON
    document two), by REDACTED. Redaction runs on what leaves (encoded text, verbatim data),
    where a key an upstream wrote as `\\u0073k-…` decodes to the key only in the browser."""

    __slots__ = ("secrets", "text_re", "bytes_re")

    def __init__(self, secrets):
        self.secrets = secrets  # longest first: a secret inside another goes with it
        self.text_re = re.compile("|".join(_tolerant(s) for s in secrets))
        self.bytes_re = re.compile("|".join(_tolerant(s, bytes) for s in secrets).encode())

    def text(self, text: str) -> str:
        if "\\u" in text:  # an escape may hide a secret (or be something else: the regex says)
            return self.text_re.sub(REDACTED, text)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def bytes(self, data: bytes) -> bytes:
        if b"\\u" in data:
            return self.bytes_re.sub(REDACTED_BYTES, data)
        for secret in self.secrets:
            raw = secret.encode()
            if raw in data:
                data = data.replace(raw, REDACTED_BYTES)
        return data


def _tolerant(secret: str, kind=str) -> str:
    """A pattern matching `secret` with each character as itself or as a JSON `\\uXXXX` escape
    (hex in either case, behind one or more backslashes)."""
    parts = []
    for ch in secret:
        as_is = re.escape(ch) if kind is str else "".join(f"\\x{b:02x}" for b in ch.encode())
        units = [ord(ch)] if ord(ch) < 0x10000 else _surrogates(ord(ch))
        escaped = "".join(f"\\\\+u(?i:{u:04x})" for u in units)
        parts.append(f"(?:{as_is}|{escaped})")
    return "".join(parts)


def _surrogates(cp):
    cp -= 0x10000
    return [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]


@functools.lru_cache(maxsize=8)
def _redactor_for(key, base_url):
    secrets = set()
    if isinstance(key, str) and len(key) >= KEY_MIN:
        secrets.add(key)
    # Credentials in UPSTREAM_BASE_URL (`https://user:pass@host/v1`) are a secret too, as
    # written in the URL and decoded (an upstream may echo either).
    userinfo = _USERINFO.search(base_url or "")
    if userinfo:
        info = userinfo.group()[:-1]
        password = info.partition(":")[2]
        for secret in (info, unquote(info), password, unquote(password)):
            if len(secret) >= KEY_MIN:
                secrets.add(secret)
    return _Redactor(tuple(sorted(secrets, key=len, reverse=True))) if secrets else None


def _redactor():
    return _redactor_for(settings.UPSTREAM_API_KEY, settings.UPSTREAM_BASE_URL)


# ---- credentials by their shape --------------------------------------------------------------
#
# A pass-through client's own key (the proxy forwards its Authorization as it came) is never
# stored, so on read nobody knows it; an upstream that echoes it left it in the verbatim rows.
# What leaves therefore also loses every string shaped like a bearer credential: one of
# STREAMSCOPE_REDACT_KEY_PREFIXES (`sk-`) at a word start, then 20 or more key characters, any of
# them possibly JSON-escaped (docs/security.md says why not a per-stream list of hashes).

SHAPE_MIN_CHARS = 20


class _Shapes:
    __slots__ = ("prefixes", "text_re", "bytes_re")

    def __init__(self, prefixes):
        self.prefixes = prefixes
        # a key character as itself or JSON-escaped (\u0030-\u0039, \u0041-…, `-`, `_`)
        escaped = "\\\\+u00(?i:3[0-9]|4[1-9a-f]|5[0-9a]|6[1-9a-f]|7[0-9a]|2d|5f)"
        tail = f"(?:[A-Za-z0-9_\\-]|{escaped}){{{SHAPE_MIN_CHARS},}}"
        start = "(?<![A-Za-z0-9_])"
        self.text_re = re.compile("|".join(start + _tolerant(p) + tail for p in prefixes))
        self.bytes_re = re.compile(
            "|".join(start + _tolerant(p, bytes) + tail for p in prefixes).encode()
        )

    def text(self, text: str) -> str:
        if "\\u" in text or any(p in text for p in self.prefixes):
            return self.text_re.sub(REDACTED, text)
        return text

    def bytes(self, data: bytes) -> bytes:
        if b"\\u" in data or any(p.encode() in data for p in self.prefixes):
            return self.bytes_re.sub(REDACTED_BYTES, data)
        return data


class _Outward:
    """The configured secrets, then the credential shapes: what every exit applies."""

    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = parts

    def text(self, text: str) -> str:
        for part in self.parts:
            text = part.text(text)
        return text

    def bytes(self, data: bytes) -> bytes:
        for part in self.parts:
            data = part.bytes(data)
        return data


@functools.lru_cache(maxsize=8)
def _outward_for(key, base_url, prefixes):
    shapes = tuple(p.strip() for p in prefixes.split(",") if len(p.strip()) >= 2)
    parts = [r for r in (_redactor_for(key, base_url), _Shapes(shapes) if shapes else None) if r]
    return _Outward(tuple(parts)) if parts else None


def _outward():
    from . import conf  # (conf imports settings only; here to keep this module's imports light)

    return _outward_for(
        settings.UPSTREAM_API_KEY, settings.UPSTREAM_BASE_URL, conf.get().redact_key_prefixes
    )


def redacts():
    """Whether the proxy's live bytes are redacted (chunk_redactor: the configured secrets; what
    leaves may then differ in length). Credential shapes are redacted from what is read back,
    not from a live answer, which goes to the client that sent the key."""
    return _redactor() is not None


def redact(text):
    """`text` without the upstream API key or a credential's shape (anything but a string comes
    back as it is)."""
    redactor = _outward()
    if redactor is None or not isinstance(text, str):
        return text
    return redactor.text(text)


def redact_bytes(data: bytes) -> bytes:
    redactor = _outward()
    return data if redactor is None else redactor.bytes(data)


class ChunkRedactor:
    """Redacts a byte stream that is forwarded chunk by chunk (the recording proxy): a secret
    split across two chunks is redacted too. A chunk's tail that could be the start of a
    secret (as written or JSON-escaped) is held back until the next chunk says; anything else
    goes on at once, so an event stream's chunks, which end in a blank line, are never held."""

    def __init__(self, redactor):
        self.redactor = redactor
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self.redactor.bytes(self.held + chunk)
        keep = _secret_start(data, self.redactor.secrets)
        self.held = data[keep:]
        return data[:keep]

    def close(self) -> bytes:
        """What was held back: the stream ended without the rest of a secret."""
        held, self.held = self.held, b""
        return held


def chunk_redactor():
    """A ChunkRedactor for the configured secrets, or None when there is nothing to redact."""
    redactor = _redactor()
    return None if redactor is None else ChunkRedactor(redactor)


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _secret_start(data: bytes, secrets) -> int:
    """Where the tail of `data` that could begin one of `secrets` starts (len(data): none)."""
    window = max(len(s) for s in secrets) * 13  # a character is at most `\\\\uXXXX` x2
    start = max(0, len(data) - window)
    firsts = {s.encode()[:1] for s in secrets} | {b"\\"}
    for i in range(start, len(data)):
        if data[i : i + 1] in firsts and any(_could_begin(data, i, s) for s in secrets):
            return i
    return len(data)


def _could_begin(data: bytes, i: int, secret: str) -> bool:
    """Whether data[i:], which ends the data read so far, is the beginning of `secret` with
    each character as itself or as a JSON escape behind one or more backslashes."""
    end = len(data)
    for ch in secret:
        if i == end:
            return True
        raw = ch.encode()
        if data[i : i + len(raw)] == raw:
            i += len(raw)
            continue
        if raw.startswith(data[i:]):  # the data ends inside this character's bytes
            return True
        if data[i] != 0x5C:  # a backslash
            return False
        units = [ord(ch)] if ord(ch) < 0x10000 else _surrogates(ord(ch))
        for unit in units:
            if i == end:
                return True
            if data[i] != 0x5C:
                return False
            while i < end and data[i] == 0x5C:
                i += 1
            if i == end:
                return True
            if data[i] != 0x75:  # u (JSON escapes are lower-case u)
                return False
            digits = data[i + 1 : i + 5]
            if any(b not in _HEX for b in digits):
                return False
            if not f"{unit:04x}".startswith(digits.decode().lower()):
                return False
            if len(digits) < 4:
                return True
            i += 5
    return False  # a whole secret: redact() has replaced it already


# The userinfo of a URL (`user:pass@`): nothing a URL's other parts or a JSON string's end hold.
_USERINFO = re.compile(r"(?<=://)[^/?#@\s\"\\<>]+@")


def redact_url(url):
    """`url` without the credentials it may embed (`https://[redacted]@host/…`): for
    `Stream.upstream_url` and anything shown of UPSTREAM_BASE_URL."""
    if not isinstance(url, str) or "@" not in url:
        return url
    return redact(_USERINFO.sub(REDACTED + "@", url))


def scrub(value):
    """`value` with the key redacted from every string in it, walking dicts, lists and tuples
    (a copy; other objects are left as they are); `value` itself when no key is configured."""
    redactor = _outward()
    return value if redactor is None else _scrub(value, redactor.text)


def _scrub(value, sub):
    if isinstance(value, str):
        return sub(value)
    if isinstance(value, dict):
        return {_scrub(k, sub): _scrub(v, sub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, sub) for v in value]
    if isinstance(value, tuple):
        return tuple(_scrub(v, sub) for v in value)
    return value


def page_stream(stream):
    """The stream row as a page may show it: `stream` itself when there is nothing to redact,
    else a copy whose text and JSON fields are redacted (never saved: the row keeps what came)."""
    redactor = _outward()
    url = stream.upstream_url
    if redactor is None and "@" not in url:
        return stream
    shown = copy.copy(stream)
    if redactor is not None:
        for f in stream._meta.concrete_fields:
            value = getattr(stream, f.attname)
            if isinstance(value, str | list | dict):
                setattr(shown, f.attname, _scrub(value, redactor.text))
    shown.upstream_url = redact_url(url)
    return shown


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
    redactor = _outward()
    return text if redactor is None else redactor.text(text)


def _iso(value):
    return value.isoformat() if value is not None else None


def stream(stream) -> dict:
    """Everything about a stream but its events: metadata, milestones, metrics, text, output
    items and findings (the API's summary and the `.json` export's head; sync: reads the
    findings)."""
    findings = list(stream.findings.order_by("event_index", "id").values(*FINDING_FIELDS))
    return {
        "id": stream.pk,
        "status": stream.status,
        "source": stream.source,
        "requested_model": stream.requested_model,
        "resolved_model": stream.resolved_model,
        "scenario": stream.scenario,
        "prompt": stream.prompt,
        # what a proxied request's client said about it (X-Streamscope-Tags / -Session)
        "tags": stream.tags,
        "session": stream.session,
        "request": stream.request_body,
        "upstream_url": redact_url(stream.upstream_url),
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
        "milestones_us": {
            "connected": stream.connected_us,
            "request_written": stream.request_written_us,
            "headers": stream.headers_us,
            "created": stream.created_event_us,
            "routing": stream.routing_us,
            "first_token": stream.first_token_us,
            "first_tool_call": stream.first_tool_call_us,
            "terminal": stream.terminal_us,
            "closed": stream.closed_us,
        },
        "ttft_ms": stream.ttft_ms,
        "duration_ms": stream.duration_ms,
        "tokens_per_s": stream.tokens_per_s,
        "inter_token_ms": stream.inter_token_ms,
        "proxy_added_p50_ms": stream.proxy_added_p50_ms,
        "proxy_added_p99_ms": stream.proxy_added_p99_ms,
        "event_count": stream.event_count,
        "output_tokens": stream.output_tokens,
        "bytes_received": stream.bytes_received,
        "output_text": stream.output_text,
        "final_text": stream.final_text,
        "parts": stream.parts,
        "findings_count": stream.findings_count,
        "error_findings": stream.error_findings,
        "findings": findings,
    }


def list_item(row) -> dict:
    """A stream in a list, from a `.values("id", *LIST_FIELDS)` row."""
    item = {"id": row["id"], **{name: row[name] for name in LIST_FIELDS}}
    item["prompt"] = item["prompt"][:LIST_PROMPT_MAX]
    item["created_at"] = _iso(item["created_at"])
    return item


def event(index, type, sequence_number, t_us, data, sent_us=None) -> dict:
    """One event as the API and the WebSocket send it; `data` is the verbatim SSE data.
    `sent_us` (a proxied stream's: when the proxy handed the event to its client) is there
    only when known, so the events of every other stream keep their shape byte for byte."""
    if sent_us is None:
        return {"index": index, "type": type, "sequence_number": sequence_number,
                "t_us": t_us, "data": data}  # fmt: skip
    return {"index": index, "type": type, "sequence_number": sequence_number, "t_us": t_us,
            "data": data, "sent_us": sent_us}  # fmt: skip


def export_event(row) -> dict:
    """One event as the `.json` export has it, from a `values_list(*EXPORT_EVENT_FIELDS)` row."""
    item = dict(zip(EXPORT_EVENT_FIELDS, row, strict=True))
    item["received_at"] = _iso(item["received_at"])
    return item


def stream_frame(events, status=None, stream=None, terminal=False, omit_data=False) -> str:
    """A stream WebSocket frame (docs/relay.md) for payload tuples `(index, type,
    sequence_number, t_us, data[, sent_us])` (sent_us: proxied streams only); `omit_data`
    sends each event's size instead of its data."""
    if omit_data:
        out = [
            {**event(*e[:4], None, *e[5:]), "data_bytes": len(e[4].encode())}
            if e[4] is not None
            else event(*e)
            for e in events
        ]
    else:
        out = [event(*e) for e in events]
    frame = {"events": out}
    if status is not None:
        frame["status"] = status
    if stream:
        frame["stream"] = stream
    if terminal:
        frame["terminal"] = True
    return dumps(frame)


def list_frame(items) -> str:
    """A list WebSocket frame: `list_item`s, or `{"id", changed fields…}`."""
    return dumps({"streams": items})


# ---- values for pages ------------------------------------------------------------------------


def output(stream, *, terminal_text=False) -> list[dict]:
    """The stream's reassembled output (`Stream.parts`, Checker.items()) as redacted items in
    output order, each with its `kind` from checks.ITEM_KINDS ("other" for types not there):

    - message: `parts` of {content_index, type, refusal, done, text (the final text), streamed
      (the streamed text when a rewrite changed it, else None), annotations [{type, text}]}
    - tool: name, call_id, status, failed, arguments (text), streamed_arguments, output
    - reasoning: summary and content (lists of texts)
    - other: item (the item as it came), streamed

    `terminal_text`: a stream without output parts whose terminal event carried the text
    gets it as a message (the playground shows the answer; the timeline shows it as the
    terminal text's difference instead)."""
    items = []
    for raw in stream.parts or ():
        if not isinstance(raw, dict):
            continue
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
        items.append(item)
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
    return scrub(items)


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
