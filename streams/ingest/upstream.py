"""The upstream client: a request body in, received events out, with receipt times.

The only module that sends requests to the upstream. Timing rules (docs/measurement.md): every
event is stamped on the `time.monotonic_ns()` clock with the kernel's receipt time of the bytes
carrying it (`SO_TIMESTAMPNS` on plain TCP; where that is not possible, TLS or another
platform, when the bytes are handed to our socket protocol), the request is written when the
send syscall that finished it returned, and the request phases come from httpx's `trace`
extension, so queueing inside our own process is never charged to the upstream.

Lines are split here at the byte level so that data which is not valid UTF-8 can be kept
verbatim (`ReceivedEvent.raw`) instead of being silently replaced; the field semantics of each
line (event/data/id/retry, comments) are httpx-sse's own `SSEDecoder`.
"""

import contextlib
from http.cookiejar import CookieJar, CookiePolicy
from typing import NamedTuple

import httpcore
import httpx
from httpx_sse._decoders import SSEDecoder

from streams.core import conf, formats
from streams.ingest.network import Backend
from streams.ingest.transport import LeanTransport


class ReceivedEvent(NamedTuple):
    """A tuple: the garbage collector stops tracking it at its first collection (a slots
    class stayed tracked, and was scanned again and again while a chunk waited for the
    writer)."""

    t_ns: int  # monotonic receipt time of the bytes that completed this event
    event_name: str
    sse_id: str
    data: str
    raw: bytes | None = None  # undecoded data, only when it was not valid UTF-8
    # the lines since the previous event that are no part of one (comments, `retry:`), with
    # their line ends: `Event.preamble`
    preamble: str = ""


# tuple.__new__(ReceivedEvent, values): a NamedTuple's own constructor is a Python function,
# markedly slower, and this runs once per event (docs/performance.md, "Upstream").
_new_event = tuple.__new__


class UpstreamError(Exception):
    """The upstream answered in a way that is not an event stream."""

    def __init__(self, code, message, http_status=None, body=""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status
        self.body = body


EVENT_TOO_LARGE = "event_too_large"


class EventTooLarge(UpstreamError):
    """One upstream event passed UPSTREAM_MAX_EVENT_BYTES (`limit`): the stream is not read
    further. `held`: the bytes of it that had come (and, through the HTTP proxy, had been
    relayed), none of them stored; `declared`: a WebSocket message's size, said by its frame."""

    def __init__(self, limit, held, declared=None):
        what = (
            "an upstream event" if declared is None else f"an upstream message of {declared} bytes"
        )
        super().__init__(
            EVENT_TOO_LARGE,
            f"{what} passed UPSTREAM_MAX_EVENT_BYTES ({limit} bytes): the {held} bytes of it "
            "received are not stored, and the stream was read no further",
        )
        self.limit = limit
        self.held = held


def make_client(
    connect_timeout=10.0, max_connections=2000, keepalive=200, ssl_context=None, transport=None
):
    """An httpx client for the upstream on `transport` ("lean" or "httpcore"; None: the
    STREAMSCOPE_UPSTREAM_TRANSPORT setting), both over network.py's stamping connections."""
    carrier = make_transport(max_connections, keepalive, ssl_context, transport)
    return client_over(carrier, connect_timeout)


def make_transport(max_connections=2000, keepalive=200, ssl_context=None, transport=None):
    """`make_client`'s transport: the lean one or httpx's on httpcore (`transport`)."""
    # No read timeout here: the stall rule (no event for N s) is enforced by the recorder,
    # which knows when an event arrived. Building an SSL context (certifi's bundle) is slow
    # and blocks the loop: pass one to share (docs/performance.md, "Upstream"). None: the
    # transport builds its default one if and when a connection needs TLS, so a client for an
    # http:// upstream never builds one (httpx's transport always did, blocking the loop,
    # charged to the first attempt's `connected`: docs/performance.md, "Upstream").
    if (transport or conf.get().upstream_transport) == "lean":
        return LeanTransport(
            ssl_context=ssl_context,
            max_connections=max_connections,
            max_keepalive=keepalive,
            keepalive_expiry=5.0,  # httpx's default
        )
    carrier = httpx.AsyncHTTPTransport.__new__(httpx.AsyncHTTPTransport)
    # httpx's transport is its httpcore pool (`_pool` is all its methods use); building the
    # pool here is also the only way to give it our network backend (httpx has no hook).
    carrier._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=max_connections,
        max_keepalive_connections=keepalive,
        keepalive_expiry=5.0,  # httpx's default
        network_backend=Backend(),
    )
    return carrier


def client_over(carrier, connect_timeout=10.0):
    """The httpx client of the upstream over the transport `carrier`."""
    return httpx.AsyncClient(
        transport=carrier,
        timeout=httpx.Timeout(connect=connect_timeout, read=None, write=30.0, pool=None),
        trust_env=False,
        cookies=CookieJar(_NoCookies()),
    )


class _NoCookies(CookiePolicy):
    """A client's cookie jar that keeps nothing. One client carries the requests of every
    user and project: httpx's jar kept an upstream's `Set-Cookie` (a load balancer's, a
    gateway's session) and sent it with every later request through that client, whoever
    made it. The proxy forwards no client's cookies either (proxy.NOT_FORWARDED)."""

    netscape = True
    rfc2965 = False
    hide_cookie2 = True

    def set_ok(self, cookie, request):
        return False

    def return_ok(self, cookie, request):
        return False

    def domain_return_ok(self, domain, request):
        return False

    def path_return_ok(self, path, request):
        return False


class ClientPool:
    """The upstream clients of one event loop: `stream()` as on an httpx.AsyncClient, spread
    over clients that each hold at most `shard_streams` streams (and `keepalive` idle
    connections), opened as needed and filled in order so idle connections get reused.

    Not one client: httpcore (1.0.9) scans its whole pool on every request and response
    close, and for every idle connection counts the pool again, so a pool's cost grows with
    the square of its size. With 100 streams starting beside the 100 idle keep-alive
    connections of the previous 100, starting them stalled the event loop, and the pool took
    a large share of the process's CPU (docs/performance.md, "Upstream")."""

    def __init__(self, connect_timeout=10.0, shard_streams=16, keepalive=8, transport=None):
        self.connect_timeout = connect_timeout
        self.transport = transport  # make_client's: None is the configured one
        self.shard_streams = shard_streams
        self.keepalive = keepalive
        self.shards = []  # [client, streams in flight, its transport], for http:// upstreams
        self.tls_shards = []  # the same for https://
        # One for all TLS shards, built at the first https:// request: building each one blocks
        # the loop, and an http:// upstream needs none.
        self.ssl_context = None

    @contextlib.asynccontextmanager
    async def stream(self, method, url, **kwargs):
        tls = str(url)[:6].lower() == "https:"
        shards = self.tls_shards if tls else self.shards
        shard = next((s for s in shards if s[1] < self.shard_streams), None)
        if shard is None:
            if tls and self.ssl_context is None:
                self.ssl_context = httpx.create_ssl_context(trust_env=False)
            carrier = make_transport(
                keepalive=self.keepalive,
                ssl_context=self.ssl_context if tls else None,
                transport=self.transport,
            )
            shard = [client_over(carrier, self.connect_timeout), 0, carrier]
            shards.append(shard)
        shard[1] += 1
        try:
            client, carrier = shard[0], shard[2]
            # httpx's request as its client builds it (headers, body, timeouts), sent by the
            # client's transport itself: what the client's send adds around it (auth and
            # redirect flows, a cookie jar, a stream wrapper) answered nothing here and cost
            # more per request than the transport's own work (docs/performance.md, "Upstream").
            request = client.build_request(method, url, **kwargs)
            _url_credentials(request)
            with _transport_errors(request):
                response = await carrier.handle_async_request(request)
            response.request = request
            try:
                yield response
            finally:
                await response.aclose()
        finally:
            shard[1] -= 1

    async def aclose(self):
        for client, *_ in (*self.shards, *self.tls_shards):
            await client.aclose()
        self.shards = []
        self.tls_shards = []


# httpx turns credentials in a URL into `Authorization: Basic …`, replacing the one a request
# carries: the configured key (or a pass-through client's) would never be sent. A request with
# its own Authorization keeps it; URL credentials are sent only when there is none.
KEEP_AUTHORIZATION = httpx.Auth()


def _url_credentials(request):
    """A request of `ClientPool.stream` without an Authorization of its own sends its URL's
    credentials, as `Authorization: Basic …` (what httpx's client does, and only then)."""
    url = request.url
    if (url.username or url.password) and "authorization" not in request.headers:
        next(httpx.BasicAuth(url.username, url.password).sync_auth_flow(request))


@contextlib.contextmanager
def _transport_errors(request):
    """An httpx error raised by the transport names its request, as the client's send does."""
    try:
        yield
    except httpx.RequestError as exc:
        exc.request = request
        raise


def request_headers(api_key, format=formats.RESPONSES):
    """The headers of a request of ours to an upstream of `format`: its key where that format
    takes it, and Anthropic's required `anthropic-version` for Messages."""
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
    if api_key:
        name, value = formats.key_header(format, api_key)
        headers[name] = value
    if format == formats.MESSAGES:
        headers["anthropic-version"] = formats.ANTHROPIC_VERSION
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
    except (ValueError, RecursionError):
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
        message = message or f"HTTP {status} {response.reason_phrase}".strip()
        # How long the upstream asked to wait is what a user of a 429/503 wants to know; the
        # headers are not stored, so it goes with the message (a number or an HTTP date).
        retry_after = response.headers.get("retry-after", "").strip()[:40]
        if retry_after:
            message = f"{message} (Retry-After: {retry_after})"
        raise UpstreamError(
            code or f"http_{status}",
            message,
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
    """Incremental bytes → events, keeping receipt time and undecodable bytes.

    Fast path: the complete lines of a chunk are decoded in one go. A chunk with bytes that are
    not UTF-8 takes the per-line path, which keeps the raw value of each bad `data` line, so
    the event's `raw` holds exactly the bytes that arrived."""

    def __init__(self, max_event_bytes=None):
        self._decoder = SSEDecoder()
        self._line = b""  # an unterminated line carried to the next chunk
        self._more = []  # its later pieces, while it goes on (joined when it ends)
        # The bytes since the last event dispatched (an unterminated line, an open block's
        # lines, comments waiting for the next event): what the reader holds, bounded by
        # UPSTREAM_MAX_EVENT_BYTES. Kept per chunk, never per line or event (`_bound`).
        self.held = 0
        if max_event_bytes is None:
            max_event_bytes = conf.get().upstream_max_event_bytes
        self.max_event_bytes = max_event_bytes
        self.too_large = None
        self._skip_lf = False  # a chunk ended in CR: a LF at the start of the next belongs to it
        self._raw = {}  # position in the block's data lines → raw bytes, for non-UTF-8 lines
        self._preamble = []  # lines since the last event that are no part of one (comments)

    def feed(self, chunk, t_ns):
        """The events `chunk` completes. Once the bytes since the last event pass the bound,
        `too_large` is set (an EventTooLarge) and the events before it are the last: feed no
        more."""
        size = len(chunk)
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._skip_lf = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = chunk.rfind(b"\n")
        if cut < 0:
            # A line carried on: its pieces are joined once, when it ends (joining at every
            # chunk copied it again each time: a 32 MiB line took 6.4 s of the loop's CPU).
            if self._line:
                self._more.append(chunk)
            else:
                self._line = chunk
            return self._bound([], size)
        if self._line:
            if self._more:
                self._line = b"".join((self._line, *self._more))
                self._more = []
            cut += len(self._line)
            chunk = self._line + chunk
        self._line = chunk[cut + 1 :]
        complete = chunk[:cut]
        if not self._raw:
            try:
                text = complete.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                out = self._lines(text.split("\n"), t_ns)
                # (the common case, inline: events and nothing open after them, well within)
                if out and self.held + size <= self.max_event_bytes and not self._preamble:
                    if not self._decoder._data:
                        self.held = len(self._line)
                        return out
                return self._bound(out, size)
        out = []
        for line in complete.split(b"\n"):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                text = line.decode("utf-8", errors="replace")
                if _is_data(text):
                    self._raw[len(self._decoder._data)] = _field_value(line)
            out.extend(self._lines((text,), t_ns))
        return self._bound(out, size)

    def _bound(self, out, size):
        """`out` (a chunk's events), the bytes held since the last event kept within the
        bound. Per chunk, not per event: a chunk that completed no event adds its `size`; one
        that did leaves only what follows its last event (the open block's lines and comments,
        all of this chunk, and the unterminated line), summed only when a block is still open.
        An event of this chunk is measured only when the bytes since the previous chunk's last
        event, with this chunk, pass the bound. Past it: `too_large` is set (the stream is to
        be read no further), and `out` holds the events before the one that passed it."""
        limit = self.max_event_bytes
        if out:
            if self.held + size > limit:
                for i, event in enumerate(out):
                    if (size := _stored_bytes(event)) > limit:
                        return self._refuse(out[:i], size)
            held = len(self._line)
            data, preamble = self._decoder._data, self._preamble
            if data or preamble:
                held += sum(map(len, data)) + sum(map(len, preamble)) + len(data) + len(preamble)
            self.held = held
        else:
            self.held += size
        if self.held > limit:
            return self._refuse(out, self.held)
        return out

    def _refuse(self, out, held):
        # nothing of the refused event stays in memory: the stream is read no further
        self.too_large = EventTooLarge(self.max_event_bytes, held)
        self.held = 0
        self._line = b""
        self._more = []
        self._decoder._data = []
        self._preamble = []
        self._raw = {}
        return list(out)

    def _lines(self, lines, t_ns):
        """Decoded lines into events. `data: ` and `event: ` lines and the blank line that ends
        a block change the decoder's state here exactly as `SSEDecoder.decode` would, without a
        call, a `ServerSentEvent` and its checks per line (every event has two or three lines,
        and with those the reader was a large share of the pipeline's time; docs/performance.md,
        "Upstream"). Any other line goes to the decoder."""
        out = []
        decoder = self._decoder
        decode = decoder.decode
        data = decoder._data
        for line in lines:
            if line.startswith("data: "):
                data.append(line[6:])
            elif line.startswith("event: "):
                decoder._event = line[7:]
            elif line:
                decode(line)
                # Comments (`: OPENROUTER PROCESSING`) and `retry:` lines are no part of an
                # event's row, but every byte that came is stored: kept, verbatim, with the
                # next event (its `preamble`). An `id:` line the row carries itself.
                if line.partition(":")[0] not in _ROW_FIELDS:
                    self._preamble.append(line)
            elif not data:
                # WHATWG: a block with an empty data buffer (comments, retry:, a lone event:)
                # is not an event; a `data:` line, even empty, fills it. The blank line that
                # ended a block of comments is theirs.
                if self._preamble:
                    self._preamble.append("")
                decoder._event = ""
                decoder._retry = None
            else:
                raw = None
                if self._raw:  # (only ever for data lines: the per-line path)
                    raw = b"\n".join(self._raw.get(i, v.encode()) for i, v in enumerate(data))
                    self._raw = {}
                preamble = ""
                if self._preamble:
                    preamble = "\n".join(self._preamble) + "\n"
                    self._preamble = []
                out.append(
                    _new_event(
                        ReceivedEvent,
                        (
                            t_ns,
                            decoder._event or "message",
                            decoder._last_event_id,
                            "\n".join(data),
                            raw,
                            preamble,
                        ),
                    )
                )
                decoder._event = ""
                decoder._data = data = []
                decoder._retry = None
        return out

    def close(self, t_ns):
        """End of body: an event never terminated by a blank line is not dispatched (WHATWG)."""
        self._line = b""
        self._more = []
        return []


# The fields an event's row carries (`streams/store/event_row.py`); any other line is kept in
# the next event's preamble.
_ROW_FIELDS = frozenset({"data", "event", "id"})


def _stored_bytes(event):
    """The bytes of `event` its row keeps: its data (as it came) and its preamble."""
    data = event.raw if event.raw is not None else event.data.encode()
    return len(data) + len(event.preamble.encode())


def _is_data(line):
    return line.startswith("data:") or line == "data"


def _field_value(line):
    _, _, value = line.partition(b":")
    return value[1:] if value.startswith(b" ") else value


def list_models(base_url, api_key="", timeout=3.0):
    """`GET {base_url}/models`: the upstream's model objects (`[{"id", "owned_by", …}]`).

    Sync and short-timeout on purpose: it runs for a page render (streams.run.catalog caches it).
    Raises UpstreamError for anything but a 200 with an OpenAI-style `{"data": [...]}` list."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            response = client.get(
                base_url.rstrip("/") + "/models",
                headers=headers,
                auth=KEEP_AUTHORIZATION if "Authorization" in headers else httpx.USE_CLIENT_DEFAULT,
            )
    except httpx.HTTPError as exc:
        raise UpstreamError("connect_error", f"{type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        code, message = error_from_body(response.text)
        raise UpstreamError(
            code or f"http_{response.status_code}",
            message or f"HTTP {response.status_code}",
            http_status=response.status_code,
        )
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError, RecursionError):
        data = None
    if not isinstance(data, list):
        raise UpstreamError("bad_models_list", "GET /models did not answer {'data': [...]}")
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
