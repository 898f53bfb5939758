"""The server's edge for what clients send: a request body that stalls is cut off.

Daphne (Twisted) reads a request's whole body before it calls the application, and Twisted's
idle timeout restarts with every byte, so a client that sends its body a byte at a time holds
a connection and its buffer for as long as it likes, out of the application's reach. So the
body is timed where Daphne reads it: each read may wait at most
STREAMSCOPE_REQUEST_BODY_TIMEOUT_S, the whole body at most three times that; then the client
gets 408 and the connection is closed.

Daphne's access log is an exit too: it writes each request's path and query string as they
came (`GET /?q=<a key's first characters>`), to stdout (`python -m dashboard.server`) or to a
logger (`manage.py serve`). Every entry is redacted before it reaches either, with the egress
gate's rules (streams.store.known_secrets); Python's log records are, as they are made.

A body larger than any route takes (`body_limit`: the uploads' limit with room for a form's
other fields, or the proxy's, whichever is larger) is refused here too, with 413 and the limit,
before it is read: by its declared Content-Length as soon as the headers are in (an
`Expect: 100-continue` client then never sends it), and a chunked one as soon as what came is
over it. Daphne would otherwise read the whole body (into a temporary file) before the
application could say no: a 1 GB upload was read whole to be refused. A proxy client (`/v1/…`)
gets the proxy's JSON error (`proxy.error_body`), as under the proxy's own limit.

`install()` is called by every entry point that serves (dashboard/server.py, `manage.py
serve`/`runserver`), once, before the server starts.
"""

from __future__ import annotations

import time
import urllib.parse

from streams.core import conf
from streams.store import known_secrets

TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 41\r\nConnection: close\r\n\r\n"
    b"The request body did not arrive in time.\n"
)

_installed = []


def body_limit():
    """The largest request body any route takes: a dataset or capture upload's
    UPLOAD_MAX_BYTES with a MiB for the form around it (Django's DATA_UPLOAD_MAX_MEMORY_SIZE,
    set from it), or the proxy's PROXY_MAX_BODY_BYTES."""
    from django.conf import settings

    return max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, conf.get().proxy_max_body_bytes)


def too_large_response(limit, target=b""):
    """The 413 of a body over `limit` for a request of `target` (its request line's): a proxy
    client's (`/v1/…`) in the proxy's JSON error shape, as the proxy's own 413 under its
    limit, so an SDK reads the message; plain text for the rest."""
    from streams.serve import proxy  # (Django's models: set up by the time a request comes)

    message = f"The request body is over the limit of {limit:,} bytes."
    path = urllib.parse.urlsplit(target.decode("latin-1")).path
    if proxy.is_proxied(path):
        kind = b"application/json"
        body = proxy.error_body(message, "invalid_request_error", "request_too_large")
    else:
        kind, body = b"text/plain; charset=utf-8", (message + "\n").encode()
    return (
        b"HTTP/1.1 413 Content Too Large\r\nContent-Type: "
        + kind
        + b"\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


def install():
    """Time request bodies in Daphne's request class (idempotent)."""
    if _installed:
        return
    # (not the reactor: importing it here would install Twisted's default one before Daphne
    # installs its asyncio reactor; it is looked up when a request comes)
    from daphne.http_protocol import WebRequest

    got_length = WebRequest.gotLength
    content_chunk = WebRequest.handleContentChunk
    request_received = WebRequest.requestReceived

    def gotLength(self, length):
        limit = body_limit()
        if length is not None and length > limit:
            # (no temporary file for it, and no "100 Continue": the client need not send it)
            self.content = None
            self.requestHeaders.removeHeader(b"Expect")
            _refuse(self, limit)
            return
        self._streamscope_left = limit  # (what a chunked body may still bring)
        got_length(self, length)
        if length == 0:
            return  # no body to wait for (a GET without one ends before any timer matters)
        from twisted.internet import reactor

        idle = conf.get().request_body_timeout_s
        self._streamscope_body = [time.monotonic() + 3 * idle, None]
        self._streamscope_body[1] = reactor.callLater(idle, _check, self)

    def handleContentChunk(self, data):
        if getattr(self, "_streamscope_refused", False):
            return None  # (what came with the refused request's headers is dropped)
        left = getattr(self, "_streamscope_left", None)
        if left is not None:
            self._streamscope_left = left - len(data)
            if self._streamscope_left < 0:
                _stop(self)
                _refuse(self, body_limit())
                return None
        body = getattr(self, "_streamscope_body", None)
        if body is not None and body[1] is not None and body[1].active():
            idle = conf.get().request_body_timeout_s
            body[1].reset(max(0.0, min(idle, body[0] - time.monotonic())))
        return content_chunk(self, data)

    def requestReceived(self, command, path, version):
        _stop(self)
        if getattr(self, "_streamscope_refused", False):
            return None  # answered 413 already; the connection is going
        return request_received(self, command, path, version)

    WebRequest.gotLength = gotLength
    WebRequest.handleContentChunk = handleContentChunk
    WebRequest.requestReceived = requestReceived
    _redact_access_log()
    _installed.append(True)


def _redact_access_log():
    """Daphne hands every access-log entry (HTTP requests, WebSocket connects) to its server's
    `log_action`, whichever logger it was given: the entry's texts are redacted there."""
    from daphne.server import Server

    log_action = Server.log_action

    def redacted_log_action(self, protocol, action, details):
        details = {
            k: known_secrets.redact(v) if isinstance(v, str) else v for k, v in details.items()
        }
        return log_action(self, protocol, action, details)

    Server.log_action = redacted_log_action


def _stop(request):
    body = getattr(request, "_streamscope_body", None)
    if body is not None:
        if body[1] is not None and body[1].active():
            body[1].cancel()
        request._streamscope_body = None


def _refuse(request, limit):
    """413 with `limit`, and the connection goes (its body unread)."""
    request._streamscope_refused = True
    transport = getattr(request.channel, "transport", None)
    if transport is not None:
        # (the request line's target is the channel's until the body is in: Twisted's own)
        transport.write(too_large_response(limit, getattr(request.channel, "_path", b"")))
        transport.loseConnection()


def _check(request):
    """The body's idle or total time ran out: 408, and the connection goes."""
    body = getattr(request, "_streamscope_body", None)
    if body is None:
        return
    request._streamscope_body = None
    transport = getattr(request.channel, "transport", None)
    if transport is None:
        return
    transport.write(TIMEOUT_RESPONSE)
    transport.loseConnection()
