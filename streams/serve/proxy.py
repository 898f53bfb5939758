"""The recording proxy: Streamscope as an OpenAI-compatible endpoint that forwards to the
upstream and records what passes, so an application is observed by changing its base URL.

    client = OpenAI(base_url="http://scope.example.org/v1", api_key="ss_…")

`POST /v1/responses` (stream true or false) and `GET /v1/models`, forwarded to the upstream
(`UPSTREAM_BASE_URL`, or the built-in simulator); `POST /v1/chat/completions` and
`POST /v1/messages` the same way to the upstream of their format (streams/core/formats/,
`runner.upstream`), recorded verbatim and checked by that format's checker; `GET /v1/models`
with an `anthropic-version` header lists the Messages upstream's. Any other `/v1/…` path is a
404. Errors of the proxy's own are in the OpenAI shape, `{"error": {"message", "type", "code"}}`
(Anthropic's SDK reads their message too).

Authentication, one of:
- `Authorization: Bearer ss_…` (a Streamscope token): the upstream is called with the server's
  `UPSTREAM_API_KEY`.
  Anthropic's clients send it as `x-api-key`: taken the same way, and the upstream gets the
  Messages upstream's key in `x-api-key` (`anthropic-version` is passed through as it came).
- Pass-through: the client's own upstream key in `Authorization` (or `x-api-key`) and its
  Streamscope token in `X-Streamscope-Token`; the key is forwarded as it came, and handed to
  the egress gate (`known_secrets.remember`, sealed at rest) before the request goes up.
Whatever the upstream sends back, headers and bytes, leaves through the egress gate
(streams/serve/egress.py) like every response: no key, configured or passed through, reaches the
client, even when an upstream echoes it.
No valid token: 401 (saying why, for a revoked or expired one), and nothing is sent upstream;
a token without the `proxy` scope, or whose user may not start streams in its project: 403.
A proxied stream belongs to the token's project and counts to its spend
(streams/access/tokens.py, limits.py). Each token may have `STREAMSCOPE_PROXY_MAX_CONCURRENT`
requests in flight, and its own requests per minute and spend caps per UTC day and month (429
with `Retry-After` beyond; a cap's error says the cap, the spend and the period).

Forward first, record after: the request starts its stream the one way streams start
(`services.start_proxied`, then the runner and `recorder.record_attempt`, as pages and the API
do), and the recorder writes the response to this module's `Downstream`, its output port: each
chunk of the upstream's body goes to the client as soon as it arrives, before anything else
happens to it, and is then stored, every event with both times, receipt from the upstream
(`t_us`) and hand-over to the client's socket (`sent_us`). The client gets the upstream's
status, headers (minus hop-by-hop ones) and body bytes, plus `X-Accel-Buffering: no`,
`Cache-Control: no-cache` and `X-Streamscope-Stream` (and `X-Streamscope-Hint`, with a line in
the log, when a request without a `stream` field got an event stream: `STREAMED_BY_DEFAULT`).
An upstream failure is never turned into a clean end: a reset upstream connection resets the
client's. A client that hangs up cancels the upstream request (the row ends `cancelled`,
`client_disconnected`), or with `STREAMSCOPE_PROXY_ON_DISCONNECT=drain` the upstream is read to
its end and recorded. Backpressure end to end: while more than PROXY_CLIENT_BUFFER_BYTES wait
unread for a client, the proxy reads no further from the upstream; a client that reads nothing
for PROXY_SLOW_CLIENT_TIMEOUT_S is let go like one that hung up (`client_too_slow`), and what it
was never handed has no `sent_us`. A request counts as in flight until its client has its
bytes. A stall is recorded (the checker's `stall` finding), never retried behind the client's
back.

A plain ASGI application in front of Django (dashboard/asgi.py routes `/v1/` here): the view
machinery adds a measurable delay per request, and a checked token is cached for
`STREAMSCOPE_PROXY_TOKEN_CACHE_S` so the database is off the hot path.
"""

import asyncio
import contextlib
import json
import logging
import time
from typing import NamedTuple

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from streams.access import limits, projects, tokens
from streams.access.throttle import client_ip, token_user
from streams.access.tokens import bearer_token
from streams.core import conf, formats, lifecycle, safejson, transport
from streams.ingest.recorder import Forwarded
from streams.models import MAX_TAG_CHARS, MAX_TAGS, ApiToken, Stream
from streams.run import runner, services
from streams.store import known_secrets

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Request headers the proxy sets itself or never forwards.
NOT_FORWARDED = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"authorization",
    b"cookie",
    b"accept-encoding",
    b"x-api-key",
    b"x-streamscope-token",
    b"x-streamscope-tags",
    b"x-streamscope-session",
}
# Request bodies up to this size are parsed on the event loop (a thread hop costs more).
LOOP_PARSE_MAX_BYTES = 64 * 1024
# Response headers replaced by the proxy's own.
REPLACED = HOP_BY_HOP | {b"cache-control", b"x-accel-buffering"}
# what a body read whole through httpx (inflated) must not say about itself any more
_DECODED_DROPS = REPLACED | {b"content-encoding", b"content-length"}


# ---- the proxy's own answers ----------------------------------------------------------------


def error_body(message, type_, code, extra=None):
    """The body of an error the proxy answers itself (the OpenAI error shape): here and in
    the server's edge (streams/serve/edge.py: a body over the limit, refused before the
    proxy sees it)."""
    error = {"message": message, "type": type_, "code": code, **(extra or {})}
    return json.dumps({"error": error}).encode()


async def _error(send, status, message, type_, code, headers=(), extra=None):
    body = error_body(message, type_, code, extra)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _abort(send):
    """Reset the client's connection: an upstream that broke off must not look like a clean
    end (ASGI has no message for it)."""
    return transport.abort(send)


# ---- who is asking ---------------------------------------------------------------------------


_token_cache = {}  # digest -> (future of (tokens.Bearer or Invalid, retry), monotonic expiry)
_in_flight = {}  # digest -> requests in flight


async def _bearer_for(token, ip):
    """(what the token stands for: a `tokens.Bearer`, else `tokens.Invalid`; its digest, None)
    — or (Invalid, digest, seconds to wait) when `ip` sent too many wrong tokens
    (throttle.token_user). The database is asked at most once per
    token per PROXY_TOKEN_CACHE_S: requests that come together share one look-up, and a cached
    valid token skips the throttle's cache read too."""
    digest = ApiToken.hash(token)
    hit = _token_cache.get(digest)
    now = time.monotonic()
    if hit is None or hit[1] <= now:
        if len(_token_cache) > 10_000:
            _token_cache.clear()
        lookup = asyncio.ensure_future(sync_to_async(token_user)(token, ip))
        hit = _token_cache[digest] = (lookup, now + conf.get().proxy_token_cache_s)
    try:
        bearer, retry = await asyncio.shield(hit[0])
    except Exception:
        _token_cache.pop(digest, None)
        raise
    if not bearer:
        _token_cache.pop(digest, None)  # invalid tokens are not remembered
    return bearer, digest, retry


def _host_allowed(host: bytes) -> bool:
    domain, _ = split_domain_port(host.decode("latin-1"))
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


# The header each format's upstream takes its key in.
KEY_HEADERS = (b"authorization", b"x-api-key")


def _upstream_authorization(headers, key, format):
    """(Streamscope token, the key headers to send upstream, pass-through?). `key`: the
    format's upstream's own key (`runner.upstream`)."""
    own = headers.get(b"x-streamscope-token")
    if own is not None:
        passed = [(name, headers[name]) for name in KEY_HEADERS if name in headers]
        return own.decode("latin-1").strip(), passed, True
    token = bearer_token(headers.get(b"authorization", b"").decode("latin-1"))
    token = token or headers.get(b"x-api-key", b"").decode("latin-1").strip()
    if not key:
        return token, [], False
    name, value = formats.key_header(format, key)
    return token, [(name.lower().encode(), value.encode())], False


# ---- the application -------------------------------------------------------------------------


def is_proxied(path):
    """Whether a request for `path` is the proxy's (`/v1/…`), not Django's."""
    return path == "/v1" or path.startswith("/v1/")


def route(django_app):
    """The HTTP application: `/v1/…` to the proxy, everything else to Django."""

    async def http(scope, receive, send):
        if scope["type"] == "http" and is_proxied(scope.get("path", "")):
            await application(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return http


class Refused(Exception):
    """A request the proxy answers itself, in the OpenAI error shape: `status`, the message,
    the error's type and code, and extra response headers."""

    def __init__(self, status, message, type_, code, headers=(), extra=None):
        super().__init__(status, message, type_, code, headers, extra)


ENDPOINTS = {
    "/v1/responses": "POST",
    "/v1/chat/completions": "POST",
    "/v1/messages": "POST",
    "/v1/models": "GET",
}


def _format_of(scope, headers):
    """The format a request speaks: its path's, and for `/v1/models` Anthropic's when its
    client says so (an `anthropic-version` header), else Responses'."""
    if scope["path"] == "/v1/models" and b"anthropic-version" in headers:
        return formats.MESSAGES
    return formats.of_path(scope["path"]) or formats.RESPONSES


async def application(scope, receive, send):
    headers = {}
    for name, value in scope["headers"]:
        headers.setdefault(name.lower(), value)
    format = _format_of(scope, headers)
    try:
        base_url, key = runner.upstream(format)
        bearer, digest, upstream_auth, passthrough = await _admit(scope, headers, key, format)
        if passthrough:
            await _remember(upstream_auth)
        _in_flight[digest] = _in_flight.get(digest, 0) + 1
    except Refused as refusal:
        return await _error(send, *refusal.args)
    try:
        forward = _forward_headers(scope, headers, upstream_auth)
        base_url = base_url or await sync_to_async(runner.upstream_base_url)()
        if scope["path"] == "/v1/models":
            return await _models(send, forward, base_url)
        upstream = (format, base_url)
        return await _responses(scope, receive, send, bearer, headers, forward, upstream)
    except Refused as refusal:
        return await _error(send, *refusal.args)
    finally:
        _in_flight[digest] -= 1
        if not _in_flight[digest]:
            del _in_flight[digest]


async def _admit(scope, headers, key, format, holding=0):
    """(bearer, token digest, the key headers to send upstream, whether they are the client's
    own to remember), or `Refused`: the host,
    the token (valid, its `proxy` scope, its user's role), the route, the token's requests in
    flight, its spend caps and requests per minute, and the server's state, in that order
    (without a valid token, nothing says which paths exist). `holding`: requests in flight
    the caller already counts (a WebSocket holds one while open)."""
    if not _host_allowed(headers.get(b"host", b"")):
        # Django checks the Host of every page; the proxy runs in front of Django, so here
        raise Refused(400, "This host is not served here.", "invalid_request_error", "bad_host")
    token, upstream_auth, passthrough = _upstream_authorization(headers, key, format)
    bearer, digest = await _authenticate(scope, token)
    if scope["type"] == "http":  # (a WebSocket's route is its router's: proxy_socket.py)
        _check_route(scope["path"], scope["method"])
    limit = conf.get().proxy_max_concurrent
    if _in_flight.get(digest, 0) - holding >= limit:
        raise Refused(
            429,
            f"This token has {limit} requests in flight through Streamscope; at most {limit}.",
            "rate_limit_error",
            "too_many_requests",
            [(b"retry-after", b"1")],
        )
    if limits.limited(bearer):
        # (only a response costs: a capped token may still list the models)
        spending = scope["path"] != "/v1/models"
        over = await sync_to_async(limits.over)(bearer, spending=spending)
        if over is not None:
            raise Refused(
                429,
                over.message,
                "rate_limit_error",
                over.code,
                [(b"retry-after", str(over.retry_after).encode())],
                over.extra,
            )
    if lifecycle.stopping:
        raise Refused(
            503,
            "The server is stopping: send the request again in a moment.",
            "api_error",
            "shutting_down",
            [(b"retry-after", b"5")],
        )
    return bearer, digest, upstream_auth, passthrough


async def _authenticate(scope, token):
    """(bearer, digest) of a valid Streamscope token that may use the proxy, or `Refused`
    (401 with the reason; 429 after too many wrong tokens from the client's address; 403 for
    a token without the `proxy` scope, or whose user may not start streams in its project)."""
    bearer, digest, retry = tokens.UNKNOWN, None, None
    if token:
        bearer, digest, retry = await _bearer_for(token, client_ip(scope))
    if retry is not None:
        raise Refused(
            429,
            f"Too many wrong tokens from this address: retry in {retry} s.",
            "rate_limit_error",
            "too_many_attempts",
            [(b"retry-after", str(retry).encode())],
        )
    if bearer and bearer.expired():  # (expired while cached)
        _token_cache.pop(digest, None)
        bearer = tokens.Invalid("token_expired", tokens.expired_message(bearer.token.expires_at))
    if not bearer:
        why = "" if bearer is tokens.UNKNOWN else f"{bearer.message} "
        raise Refused(
            401,
            why + "A valid Streamscope token is needed: 'Authorization: Bearer ss_…', or your "
            "own key in Authorization and the token in X-Streamscope-Token.",
            "invalid_request_error",
            "invalid_api_key" if bearer is tokens.UNKNOWN else bearer.code,
            [(b"www-authenticate", b'Bearer realm="streamscope"')],
        )
    if bearer.lacks(tokens.Scope.PROXY):
        raise Refused(
            403,
            f"This token lacks the '{tokens.Scope.PROXY}' scope.",
            "permission_error",
            "insufficient_scope",
            extra={"scope": str(tokens.Scope.PROXY)},
        )
    if not bearer.may(projects.Action.RUN):
        raise Refused(
            403,
            "This token's user may not start streams in its project (their role is too low).",
            "permission_error",
            "role_too_low",
        )
    return bearer, digest


def _check_route(path, method):
    if path not in ENDPOINTS:
        raise Refused(404, f"Unknown path {path!r}.", "invalid_request_error", "unknown_url")
    if method != ENDPOINTS[path]:
        raise Refused(
            405,
            f"Use {ENDPOINTS[path]} for {path}.",
            "invalid_request_error",
            "method_not_allowed",
            [(b"allow", ENDPOINTS[path].encode())],
        )


async def _remember(upstream_auth):
    """Hand pass-through keys to the egress gate before the upstream can echo them (sealed in
    the database once per process and key; then known at once)."""
    for _, value in upstream_auth:
        value = value.decode("latin-1").strip()
        key = bearer_token(value) or value
        if key and not known_secrets.knows(key):
            await sync_to_async(known_secrets.remember)(key)


def _forward_headers(scope, headers, upstream_auth):
    out = [(k, v) for k, v in scope["headers"] if k.lower() not in NOT_FORWARDED]
    # The bytes as they come: a compressed body would have to be decoded to be recorded.
    out.append((b"accept-encoding", b"identity"))
    out.extend(upstream_auth)
    return out


async def _read_body(receive, limit):
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _client_labels(headers):
    tags = []
    for tag in headers.get(b"x-streamscope-tags", b"").decode("utf-8", "replace").split(","):
        tag = tag.strip()[:MAX_TAG_CHARS]
        if tag and tag not in tags:
            tags.append(tag)
    session = headers.get(b"x-streamscope-session", b"").decode("utf-8", "replace").strip()
    return tags[:MAX_TAGS], session[:200]


async def _responses(scope, receive, send, bearer, headers, forward, upstream):
    """A POST of any format: `upstream` is (its format, its upstream's base URL)."""
    format, base_url = upstream
    body, content = await _json_body(receive)
    if body is None:
        return  # the client left while sending it
    tags, session = _client_labels(headers)
    # (only the Responses API streams by default: Chat and Messages answer JSON without `stream`)
    unasked = format == formats.RESPONSES and "stream" not in body
    downstream = Downstream(send, stream_unasked=unasked)
    forwarded = Forwarded(content, forward, downstream, wants_json=body.get("stream") is not True)
    # A task of the runner's, not this request's: it outlives the request with `drain`, and a
    # cancel from a page or the API reaches it like any running stream's.
    running = services.start_proxied(
        bearer.user,
        body,
        base_url.rstrip("/") + formats.PATHS[format],
        forwarded,
        tags=tags,
        session=session,
        project=bearer.project,
        token=bearer.token.pk,
        format=format,
    )
    await _until_answered(running, downstream, receive)


async def _json_body(receive):
    """(the request's JSON object, its bytes); (None, None) when the client left while sending
    it; `Refused` for one over PROXY_MAX_BODY_BYTES or not a JSON object."""
    limit = conf.get().proxy_max_body_bytes
    content = await _read_body(receive, limit)
    if content is None:
        return None, None
    if content is False:
        raise Refused(
            413,
            f"The request body is over {limit} bytes.",
            "invalid_request_error",
            "request_too_large",
        )
    try:
        # a big body is parsed off the event loop (the other requests keep being served)
        if len(content) > LOOP_PARSE_MAX_BYTES:
            body = await asyncio.to_thread(safejson.loads, content)
        else:
            body = safejson.loads(content)
    except ValueError as exc:
        raise Refused(
            400, f"The body is not a JSON object: {exc}", "invalid_request_error", "invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise Refused(
            400, "The body must be a JSON object.", "invalid_request_error", "invalid_json"
        )
    return body, content


async def _until_answered(running, downstream, receive):
    """Wait for the recording (`running`, the runner's `Proxied`), which ends the client's
    response as it ends, or the client's leaving, whichever comes first; then wait until the
    client has its bytes."""
    task = running.task
    gone = asyncio.ensure_future(_disconnected(receive))
    await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():  # the client hung up first, or stopped reading and was let go
        downstream.client_gone = True
        if conf.get().proxy_on_disconnect == "cancel" and not await _after_the_end(running):
            running.cancel("client_too_slow" if downstream.too_slow else "client_disconnected")
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return
    gone.cancel()
    if not task.cancelled() and task.exception() is not None:
        log.error("a proxied recording failed", exc_info=task.exception())
    if downstream.unended:
        raise ConnectionResetError(f"stream {downstream.stream_id}: the upstream broke off")
    # in flight until the client has its bytes: unread responses count against the token's
    # PROXY_MAX_CONCURRENT, not only the requests still reading the upstream
    await downstream.drained(0)


async def _after_the_end(running, turns=20):
    """Whether the stream's terminal event had come when its client left: then there is
    nothing to save by cancelling, and its end is recorded as it comes. A Chat client leaves
    at `data: [DONE]` (the openai SDK closes the response there), a moment before the
    upstream's last bytes. The chunk the client had is recorded by the recording task right
    after it was handed over: a few turns of the loop let it get there."""
    for _ in range(turns):
        if running.ended_upstream() or running.task.done():
            return True
        await asyncio.sleep(0)
    return running.ended_upstream()


async def _disconnected(receive):
    while (await receive())["type"] != "http.disconnect":
        pass


async def _models(send, forward, base_url):
    client = runner.get_client()
    try:
        async with client.stream("GET", base_url.rstrip("/") + "/models", headers=forward) as r:
            body = await r.aread()  # (inflated by httpx: it no longer has their encoding)
            headers = [(k, v) for k, v in r.headers.raw if k.lower() not in _DECODED_DROPS]
            status = r.status_code
    except Exception as exc:  # the upstream is unreachable: say so, in the OpenAI shape
        return await _error(
            send, 502, f"The upstream did not answer: {exc}", "api_error", "bad_gateway"
        )
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Downstream:
    """The proxied client, as the recorder's output port (`recorder.Port`): the upstream's
    head and each chunk of its body go to the client first; what `chunk` returns is when the
    client's socket had it; `finish` ends the response the way the upstream's ended."""

    def __init__(self, send, *, stream_unasked=False):
        self.send = send
        self.stream_id = None
        self.stream_unasked = stream_unasked  # the request had no `stream` field
        self.started = False
        self.client_gone = False
        self.too_slow = False  # let go for not reading (not a hang-up)
        self.unended = False  # neither ended nor reset (a server that cannot reset)
        self.transport = None  # the client's, to see how much of what was sent it has read

    async def start(self, response, stream_id):
        self.stream_id = stream_id
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in REPLACED]
        headers += [
            (b"x-accel-buffering", b"no"),
            (b"cache-control", b"no-cache"),
            (b"x-streamscope-stream", str(self.stream_id).encode()),
        ]
        if self.stream_unasked and _is_event_stream(response):
            headers.append((b"x-streamscope-hint", STREAMED_BY_DEFAULT.encode()))
            log.warning("stream %s: %s", self.stream_id, STREAMED_BY_DEFAULT)
        await self.send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        self.started = True
        self.transport = transport.connection(self.send)

    async def chunk(self, data):
        """Hand `data` to the client; when it was handed over (None: the client is gone or
        was let go, and did not get it). While more than PROXY_CLIENT_BUFFER_BYTES wait unread
        in the server for this client, this waits: the recording reads no further from the
        upstream, whose own TCP flow control then slows it."""
        if self.client_gone:
            return None
        await self.send({"type": "http.response.body", "body": data, "more_body": True})
        if not await self.drained(conf.get().proxy_client_buffer_bytes):
            return None
        return time.monotonic_ns()

    async def drained(self, high):
        """Whether the client's unread bytes came down to `high` within
        PROXY_SLOW_CLIENT_TIMEOUT_S; if not, the client is let go (its connection closed, as
        if it had hung up) and this is False."""
        timeout_s = conf.get().proxy_slow_client_timeout_s
        if not self.client_gone and not await transport.wait_drained(
            self.transport, high, timeout_s, lambda: self.client_gone
        ):
            self.too_slow = self.client_gone = True
            _abort(self.send)
        return not self.client_gone

    async def finish(self, outcome):
        """End the client's response the way the upstream's ended (`outcome`, None when the
        recording failed without one): reset when it broke off or its recording was stopped
        (`BROKEN`, a cancel), ended when it ended or this process stops. Never raises: a
        server that cannot reset leaves that to the proxy's request (`unended`)."""
        if self.client_gone:
            return
        stopped = outcome is None or outcome.status == Stream.Status.CANCELLED
        # a stop of this process (streams/run/shutdown.py) ends the response, it does not reset it
        clean = (outcome is not None and outcome.status == Stream.Status.INTERRUPTED) or (
            not stopped and outcome.error_code not in BROKEN
        )
        if not self.started:
            code = "cancelled" if stopped else outcome.error_code
            message = "cancelled" if stopped else outcome.error_message
            await _error(
                self.send,
                502,
                f"The upstream failed: {message}",
                "api_error",
                code or "bad_gateway",
                [(b"x-streamscope-stream", str(self.stream_id).encode())],
            )
        elif clean:
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        elif not _abort(self.send):
            self.unended = True


# The API streams by default (docs/protocol.md): a request without a `stream` field gets an
# event stream, which an SDK that did not ask for one hands back unparsed (the openai SDK's
# `client.responses.create()` without `stream=` returns the event stream's text as a `str`).
# Said in a response header and in the server's log, for whoever wonders where the object went.
STREAMED_BY_DEFAULT = (
    'The request had no "stream" field and the API streams by default: this answer is an event '
    'stream. Send "stream": true and read its events (the openai SDK: stream=True), or '
    '"stream": false for one JSON response.'
)


def _is_event_stream(response):
    return response.headers.get("content-type", "").startswith("text/event-stream")


# Outcomes after which the client's connection is reset rather than ended: the upstream's
# connection broke, or recording was stopped (cancel from a page, storage failure, an upstream
# event over UPSTREAM_MAX_EVENT_BYTES: the client had its bytes up to there, and no clean end
# may pass for the response's).
BROKEN = frozenset(
    {
        "connection_reset",
        "connection_error",
        "http_error",
        "storage_unavailable",
        "storage_refused",
        "event_too_large",
    }
)


# ---- for the Responses WebSocket (streams/serve/proxy_socket.py) ------------------------------


class Admitted(NamedTuple):
    """A WebSocket let in: its bearer and token digest, the key headers to send upstream, the
    upstream's base URL, and the client's tags and session."""

    bearer: object
    digest: str
    upstream_auth: list
    base_url: str
    tags: list
    session: str


async def admit(scope, headers, *, holding=False, format=formats.RESPONSES):
    """A WebSocket of the proxy, checked as a POST is (`_admit`: the host, the token, its
    scope and its user's role, its requests in flight, spend caps and requests per minute,
    the server's state), its pass-through keys handed to the egress gate: an `Admitted`, or
    `Refused`. An open socket counts as one request in flight until `release`; checked again
    for each response it asks for (`holding`: it is its own in-flight request)."""
    base_url, key = runner.upstream(format)
    bearer, digest, upstream_auth, passthrough = await _admit(
        scope, headers, key, format, holding=int(holding)
    )
    if passthrough:
        await _remember(upstream_auth)
    if not holding:
        _in_flight[digest] = _in_flight.get(digest, 0) + 1
    base_url = base_url or await sync_to_async(runner.upstream_base_url)()
    return Admitted(bearer, digest, upstream_auth, base_url, *_client_labels(headers))


def release(digest):
    """An admitted WebSocket closed: its request in flight is over."""
    _in_flight[digest] -= 1
    if not _in_flight[digest]:
        del _in_flight[digest]
