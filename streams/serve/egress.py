"""The egress gate: the one place secrets are taken out of what leaves the server.

Every HTTP response (status headers and body, streamed or whole: pages, htmx partials, the
JSON API, exports, admin, `/metrics`, the recording proxy's forwarded headers and bytes, its
model list) and every WebSocket message passes `EgressGate`, which wraps the whole ASGI
application (dashboard/asgi.py). Call sites never redact; the stored record stays verbatim.
Which secrets there are is `streams.store.known_secrets`'s; how a text loses them,
`streams.core.redaction`'s. Exits that are not ASGI (OpenTelemetry spans, log lines, files
written by commands) call `known_secrets` themselves. A body the rules cannot read is not
sent as it is: gzip and deflate are inflated (and leave as identity), other content codings
get a 502.
"""

from __future__ import annotations

import json
import zlib

from django.conf import settings

from streams.core.redaction import StreamRedactor
from streams.store import known_secrets

# Whole bodies with a Content-Length up to this size are redacted in one piece (the length is
# then right); larger ones are streamed without it.
WHOLE_BODY_MAX = 8 << 20
# Content codings the gate undoes to read a body (it leaves as identity); a body in any other
# is not sent (a 502): compressed, a secret in it would pass unseen. Only a forwarded
# upstream answer has one (the proxy asks for identity; a hostile upstream may not care).
INFLATED = {b"gzip": 16 + zlib.MAX_WBITS, b"x-gzip": 16 + zlib.MAX_WBITS, b"deflate": 47}
INFLATE_STEP = 1 << 20  # (bytes inflated at a time: a small body may inflate to a huge one)


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

    __slots__ = ("__wrapped__", "start", "body", "stream", "whole", "inflate", "done")

    def __init__(self, send):
        self.__wrapped__ = send
        self.start = None  # the response start, held until the body says how to send it
        self.body = None  # a whole body's chunks so far
        self.stream = None  # StreamRedactor of a streamed body
        self.whole = False
        self.inflate = None  # zlib decompressor of a compressed body
        self.done = False  # the body has ended (or was refused): the rest is dropped

    async def __call__(self, message):
        send = self.__wrapped__
        kind = message["type"]
        if self.done:
            return None
        if kind == "http.response.start":
            r = known_secrets.rules()
            if not r:
                return await send(message)
            message = dict(message)
            message["headers"] = _headers(r, message.get("headers") or ())
            coding = _header(message["headers"], b"content-encoding").strip().lower()
            if coding not in (b"", b"identity"):
                if coding not in INFLATED:
                    return await self._refuse(coding)
                self.inflate = zlib.decompressobj(INFLATED[coding])
                message["headers"] = [
                    (k, v) for k, v in message["headers"] if k.lower() != b"content-encoding"
                ]
            length = _content_length(message["headers"])
            self.whole = self.inflate is None and length is not None and length <= WHOLE_BODY_MAX
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
        if self.inflate is not None:
            return await self._inflated(message.get("body", b""), more)
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

    async def _inflated(self, body, more):
        """A compressed body's chunk sent as what it inflates to, redacted, INFLATE_STEP at a
        time (a small chunk may inflate to a huge one); bytes that do not inflate, or come
        after the compressed stream's end, end the body there."""
        send, tail = self.__wrapped__, b""
        try:
            while body:
                piece = self.inflate.decompress(body, INFLATE_STEP)
                body = self.inflate.unconsumed_tail
                if piece and (data := self.stream.feed(piece)):
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            if not more:
                tail = self.inflate.flush()
        except zlib.error:
            more = False
        if more and not self.inflate.eof:
            return None
        self.done = True
        data = self.stream.feed(tail, final=True)
        return await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _refuse(self, coding):
        """A body the gate cannot read is not sent: a 502 saying why, in the proxy's error
        shape (only a forwarded upstream answer has a content coding)."""
        self.done = True
        coding = coding.decode("latin-1")[:40]
        message = f"The upstream answered in a content coding ({coding}) the server cannot read."
        error = {"error": {"message": message, "type": "api_error", "code": "bad_gateway"}}
        body = json.dumps(error).encode()
        await self.__wrapped__(
            {
                "type": "http.response.start",
                "status": 502,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        return await self.__wrapped__({"type": "http.response.body", "body": body})


def _header(headers, wanted):
    for name, value in headers:
        if name.lower() == wanted:
            return value
    return b""


def _content_length(headers):
    try:
        return int(_header(headers, b"content-length"))
    except ValueError:  # (none, or not a number)
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
