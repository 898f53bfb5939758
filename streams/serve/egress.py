"""The egress gate: the one place secrets are taken out of what leaves the server.

Every HTTP response (status headers and body, streamed or whole: pages, htmx partials, the
JSON API, exports, admin, `/metrics`, the recording proxy's forwarded headers and bytes, its
model list) and every WebSocket message passes `EgressGate`, which wraps the whole ASGI
application (dashboard/asgi.py). Call sites never redact; the stored record stays verbatim.
Which secrets there are is `streams.store.known_secrets`'s; how a text loses them,
`streams.core.redaction`'s. Exits that are not ASGI (OpenTelemetry spans, log lines, files
written by commands) call `known_secrets` themselves.
"""

from __future__ import annotations

from django.conf import settings

from streams.core.redaction import StreamRedactor
from streams.store import known_secrets

# Whole bodies with a Content-Length up to this size are redacted in one piece (the length is
# then right); larger ones are streamed without it.
WHOLE_BODY_MAX = 8 << 20


class EgressGate:
    """ASGI middleware around the whole application: every response and WebSocket message
    leaves through it."""

    def __init__(self, app):
        self.app = app
        self.static = "/" + settings.STATIC_URL.strip("/") + "/"

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "http" and scope.get("path", "").startswith(self.static):
            return await self.app(scope, receive, send)  # our own files
        if kind not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        await known_secrets.refreshed(wait=not scope.get("path", "").startswith("/v1/"))
        if kind == "http":
            return await self.app(scope, receive, _HttpExit(send))
        return await self.app(scope, receive, _SocketExit(send))


def _headers(rules, headers):
    out = []
    for name, value in headers:
        out.append((_redact_latin1(rules, name), _redact_latin1(rules, value)))
    return out


def _redact_latin1(rules, value):
    return rules.bytes(value) if isinstance(value, bytes) else rules.text(value)


class _HttpExit:
    """`send` for one HTTP response: headers and body redacted on the way out."""

    __slots__ = ("__wrapped__", "start", "body", "stream", "whole")

    def __init__(self, send):
        self.__wrapped__ = send
        self.start = None  # the response start, held until the body says how to send it
        self.body = None  # a whole body's chunks so far
        self.stream = None  # StreamRedactor of a streamed body
        self.whole = False

    async def __call__(self, message):
        send = self.__wrapped__
        kind = message["type"]
        if kind == "http.response.start":
            r = known_secrets.rules()
            if not r:
                return await send(message)
            message = dict(message)
            message["headers"] = _headers(r, message.get("headers") or ())
            length = _content_length(message["headers"])
            self.whole = length is not None and length <= WHOLE_BODY_MAX
            if not self.whole:
                message["headers"] = [
                    (k, v) for k, v in message["headers"] if k.lower() != b"content-length"
                ]
                self.stream = StreamRedactor(r)
                return await send(message)
            self.start, self.body = message, []
            return None
        if kind != "http.response.body" or (self.start is None and self.stream is None):
            return await send(message)
        more = message.get("more_body", False)
        if self.stream is not None:
            data = self.stream.feed(message.get("body", b""), final=not more)
            if not data and more:
                return None
            return await send({**message, "body": data})
        self.body.append(message.get("body", b""))
        if more:
            return None
        body = known_secrets.redact_bytes(b"".join(self.body))
        start, self.start, self.body = self.start, None, None
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        return await send({**message, "body": body})


def _content_length(headers):
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class _SocketExit:
    """`send` for one WebSocket: every message redacted on the way out."""

    __slots__ = ("__wrapped__",)

    def __init__(self, send):
        self.__wrapped__ = send

    async def __call__(self, message):
        r = known_secrets.rules()
        if r:
            kind = message["type"]
            if kind == "websocket.send":
                text = message.get("text")
                if text is not None:
                    out = r.text(text)
                    if out is not text:
                        message = {**message, "text": out}
                elif message.get("bytes") is not None:
                    message = {**message, "bytes": known_secrets.redact_bytes(message["bytes"])}
            elif kind == "websocket.close" and message.get("reason"):
                message = {**message, "reason": r.text(message["reason"])}
            elif kind == "websocket.accept" and message.get("headers"):
                message = {**message, "headers": _headers(r, message["headers"])}
        return await self.__wrapped__(message)
