"""The upstream client: a request body in, received events out, with receipt times.

The only module that imports httpx and httpx-sse. Timing rules (DESIGN.md §3): every event is
stamped with `time.monotonic_ns()` when the bytes carrying it are handed to us, and the request
phases come from httpx's `trace` extension, so queueing inside our own process is never charged
to the upstream.

Lines are split here at the byte level so that data which is not valid UTF-8 can be kept
verbatim (`ReceivedEvent.raw`) instead of being silently replaced; the field semantics of each
line (event/data/id/retry, comments) are httpx-sse's own `SSEDecoder`.
"""

import time
from dataclasses import dataclass, field

import httpx
from httpx_sse._decoders import SSEDecoder

TRACE_PHASES = {
    "connection.connect_tcp.complete": "connected",
    "connection.start_tls.complete": "connected",
    "http11.send_request_body.complete": "request_written",
    "http2.send_request_body.complete": "request_written",
    "http11.receive_response_headers.complete": "headers",
    "http2.receive_response_headers.complete": "headers",
}


@dataclass(slots=True)
class ReceivedEvent:
    t_ns: int  # monotonic receipt time of the bytes that completed this event
    event_name: str
    sse_id: str
    data: str
    raw: bytes | None = None  # undecoded data, only when it was not valid UTF-8


@dataclass
class Phases:
    """Monotonic ns of each request phase, filled by httpx's trace callback."""

    marks: dict = field(default_factory=dict)

    async def trace(self, name, info):
        phase = TRACE_PHASES.get(name)
        if phase is not None:
            # `connected` keeps the latest (TLS completes after TCP); the rest keep the first.
            if phase == "connected" or phase not in self.marks:
                self.marks[phase] = time.monotonic_ns()


class UpstreamError(Exception):
    """The upstream answered in a way that is not an event stream."""

    def __init__(self, code, message, http_status=None, body=""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status
        self.body = body


def make_client(connect_timeout=10.0):
    # No read timeout here: the stall rule (no event for N s) is enforced by the recorder,
    # which knows when an event arrived. Connection limits sized for hundreds of streams.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=connect_timeout, read=None, write=30.0, pool=None),
        limits=httpx.Limits(max_connections=2000, max_keepalive_connections=200),
        trust_env=False,
    )


def request_headers(api_key):
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


async def read_error_body(response, limit=64 * 1024):
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    return body[:limit].decode("utf-8", errors="replace")


def error_from_body(text):
    """(code, message) from an OpenAI-style JSON error body, if it is one."""
    import json

    try:
        obj = json.loads(text)
    except ValueError:
        return None, None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return str(err.get("code") or err.get("type") or ""), str(err.get("message") or "")
    return None, None


def check_response(response, body_text=None):
    """Raise UpstreamError unless `response` is a 2xx `text/event-stream`."""
    status = response.status_code
    if status >= 400:
        code, message = error_from_body(body_text or "")
        raise UpstreamError(
            code or f"http_{status}",
            message or f"HTTP {status} {response.reason_phrase}".strip(),
            http_status=status,
            body=body_text or "",
        )
    content_type = response.headers.get("content-type", "")
    if "text/event-stream" not in content_type.partition(";")[0]:
        raise UpstreamError(
            "wrong_content_type",
            f"expected text/event-stream, got {content_type or 'no Content-Type'!r}",
            http_status=status,
            body=body_text or "",
        )


class EventReader:
    """Incremental bytes → events, keeping receipt time and undecodable bytes."""

    def __init__(self):
        self._decoder = SSEDecoder()
        self._line = b""  # an unterminated line carried to the next chunk
        self._skip_lf = False  # a chunk ended in CR: a LF at the start of the next belongs to it
        self._data_lines = []  # raw `data` lines of the current block
        self._invalid = False  # one of them was not valid UTF-8

    def feed(self, chunk, t_ns):
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._skip_lf = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        if self._line:
            lines[0] = self._line + lines[0]
        self._line = lines.pop()
        out = []
        for line in lines:
            event = self._line_in(line, t_ns)
            if event is not None:
                out.append(event)
        return out

    def close(self, t_ns):
        """End of body: a last line without its newline still counts; an event never
        terminated by a blank line is not dispatched (WHATWG)."""
        if self._line:
            self._line_in(self._line, t_ns)
            self._line = b""
        return []

    def _line_in(self, line, t_ns):
        if line:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                text = line.decode("utf-8", errors="replace")
                self._invalid = True
            if line == b"data" or line.startswith(b"data:"):
                self._data_lines.append(line)
            self._decoder.decode(text)
            return None
        sse = self._decoder.decode("")
        data_lines, self._data_lines = self._data_lines, []
        invalid, self._invalid = self._invalid, False
        # WHATWG: a block with an empty data buffer (comments, retry:, a lone event:) is
        # not an event.
        if sse is None or not data_lines:
            return None
        raw = b"\n".join(_field_value(rl) for rl in data_lines) if invalid else None
        return ReceivedEvent(t_ns, sse.event, sse.id, sse.data, raw)


def _field_value(line):
    _, _, value = line.partition(b":")
    return value[1:] if value.startswith(b" ") else value
