"""Streamscope's own settings: each one typed, documented and given its default here, once.

Every setting `name` is read from the environment variable `STREAMSCOPE_<NAME>` (upper case)
by `dashboard/settings.py`, which keeps what was set in `settings.STREAMSCOPE` (a dict of
upper-case names, so Django's `override_settings` and pytest-django's `settings` fixture work
as usual). Code reads them typed through `get()`:

    from streams.core import conf
    conf.get().batch_max_events

`get()` is one identity check when nothing changed: cheap enough for the recorder's hot path.
An unknown name in `settings.STREAMSCOPE` or a value of the wrong type is an error at first use,
not a silently ignored knob.
"""

import dataclasses
import math
import os
from dataclasses import dataclass

from django.conf import settings

RUNNERS = ("inprocess", "worker")
ON_DISCONNECT = ("cancel", "drain")
RECEIPT_CLOCKS = ("kernel", "loop")
UPSTREAM_TRANSPORTS = ("lean", "httpcore")


@dataclass(frozen=True, slots=True)
class Settings:
    # --- Recorder (streams/ingest/recorder.py) ---
    # A batch commits when it holds this many events or is this old (always at a terminal event).
    batch_max_events: int = 2000
    batch_max_age_ms: float = 5.0
    # A streaming row's event_count is rewritten at most this often (its events are committed
    # at every batch; the count is exact at every milestone, status change and the end).
    count_write_interval_ms: float = 500.0
    # Events queued between the readers and the writer; readers pause when it is full.
    queue_max_events: int = 20000
    # A batch that cannot be written is retried with backoff this long; then its streams end
    # `failed` (storage_unavailable) with the number of events lost.
    storage_retry_s: float = 30.0
    # Whose clock stamps receipt (streams/ingest/upstream.py): "kernel" (SO_TIMESTAMPNS on plain
    # TCP, where the platform has it; TLS and others fall back) or "loop" (when the event loop's
    # callback ran: every loop delay is charged to the upstream; kept to compare).
    receipt_clock: str = "kernel"
    # What carries the upstream client's HTTP/1.1 below httpx (streams/ingest/upstream.py):
    # "lean" (streams/ingest/transport.py, our own framing on the stamping connections) or
    # "httpcore" (httpx's own pool over the same connections; kept to compare).
    upstream_transport: str = "lean"
    # Bytes one upstream event may take (an SSE event's lines since the previous event, its
    # comments included; one WebSocket message): past it the stream ends `truncated`,
    # event_too_large, with the events before it stored. Real events are large: a Responses
    # `response.completed` repeats the whole response, and image outputs come as base64 (a
    # 1536x1024 PNG is 3-4 MiB of it, and a response may carry several, plus partial images),
    # so several MiB are ordinary; 32 MiB leaves room for that and bounds what one stream's
    # reader holds.
    upstream_max_event_bytes: int = 32 * 1024 * 1024
    # --- Running streams (streams/run/runner.py, streams/run/worker.py) ---
    # No event for this long: abort and retry the same request (docs/protocol.md: 60 s).
    stall_timeout_s: float = 60.0
    stall_max_attempts: int = 3
    # Connection errors before the first event: retried with exponential backoff.
    connect_max_attempts: int = 3
    connect_backoff_s: float = 0.5
    connect_timeout_s: float = 10.0
    # A running stream's row is touched this often; a row silent for heartbeat_stale_s while
    # `streaming` belongs to a dead process and becomes `interrupted`.
    heartbeat_s: float = 5.0
    heartbeat_stale_s: float = 30.0
    # Every long-lived process (Daphne's, a worker's) sweeps for such rows this often.
    sweep_interval_s: float = 5.0
    # Where streams started by pages and the API run: "inprocess" (asyncio tasks in the server)
    # or "worker" (`manage.py stream_worker` processes).
    runner: str = "inprocess"
    # Streams marked `interrupted` (their process died) get a new attempt, run by a worker.
    retry_interrupted: bool = False
    # Streams one worker process runs at once, and how often it polls for new ones (wake-ups
    # over the channel layer make the poll a fallback).
    worker_concurrency: int = 200
    worker_poll_s: float = 1.0
    # --- Retention (streams/store/retention.py, docs/analytics.md) ---
    # Events, and whole streams (events, findings, the row), older than this many days are
    # deleted by the periodic sweep and `manage.py prune`; 0 keeps everything. The analytics
    # pages' pre-aggregates keep the history either way.
    retain_events_days: float = 0.0
    retain_streams_days: float = 0.0
    # --- At rest (streams/store/compact.py, docs/recorder.md "At rest") ---
    # An ended stream's events are packed into compressed blocks this long after its end (a
    # viewer's catch-up reads the rows meanwhile), by each process's sweep at most this many
    # streams a minute; 0 streams: the sweep packs nothing (`manage.py compact` still does).
    compact_after_s: float = 600.0
    compact_streams_per_run: int = 20
    # --- Limits on what users send (streams/run/services.py, pages, API) ---
    # Running streams per user started from pages and the API.
    max_concurrent_per_user: int = 5
    # Characters of `input` (as JSON) one request may carry.
    max_input_chars: int = 100_000
    # Bytes of one uploaded capture.
    upload_max_bytes: int = 20 * 1024 * 1024
    # --- Relay (streams/live/relay.py, streams/live/consumers.py) ---
    # Largest single event `data` kept inline in channel-layer messages; larger ones are read
    # from the database by the consumer.
    relay_inline_max_bytes: int = 64 * 1024
    # Events waiting for one slow WebSocket before it is closed with 4008 (resume with after=).
    relay_outbox_max_events: int = 20_000
    # Bytes Daphne buffers for a connection above which we stop sending to it…
    relay_send_high_water_bytes: int = 256 * 1024
    # …and how long it may stay above that before it is closed with 4008.
    relay_slow_client_timeout_s: float = 30.0
    # A connection without messages for this long checks the database once (lost messages).
    relay_idle_check_s: float = 5.0
    # With the in-memory layer, deliver in-process without it (see streams/live/relay.py).
    relay_local_fanout: bool = True
    # --- The recording proxy (streams/serve/proxy.py) ---
    # Proxied requests one Streamscope token may have in flight at once (429 beyond).
    proxy_max_concurrent: int = 200
    # A client that hangs up mid-stream: "cancel" the upstream request (the row ends
    # `cancelled`, client_disconnected), or "drain" it to its end and record all of it.
    proxy_on_disconnect: str = "cancel"
    # Largest request body the proxy forwards (413 beyond).
    proxy_max_body_bytes: int = 16 * 1024 * 1024
    # How long a checked token is trusted without asking the database again (a revoked token
    # stops working within this time).
    proxy_token_cache_s: float = 5.0
    # A proxied client's unread bytes the server holds for it: beyond this, the proxy stops
    # reading the upstream until the client reads; a client that reads nothing for
    # PROXY_SLOW_CLIENT_TIMEOUT_S is let go (PROXY_ON_DISCONNECT says what becomes of the
    # upstream request). Memory for unread responses is at most this per connection.
    proxy_client_buffer_bytes: int = 256 * 1024
    proxy_slow_client_timeout_s: float = 30.0
    # --- Telemetry (streams/observe/telemetry.py, docs/telemetry.md) ---
    # Prometheus figures are kept (the /metrics endpoint answers either way).
    metrics: bool = True
    # Bearer token a Prometheus server scrapes /metrics with (empty: staff sessions only).
    metrics_token: str = ""
    # Distinct model ids per label per process; the upstream may send any, later ones are "other".
    metrics_max_models: int = 50
    # --- Exports (dashboard/exports.py) ---
    # Rows one CSV export of the streams list holds at most; a longer one ends with a line
    # saying where it was cut (and the X-Streamscope-Truncated header).
    csv_max_rows: int = 100_000
    # --- Playground ---
    # Chain turns with previous_response_id instead of resending the history.
    playground_previous_response_id: bool = False
    # --- Hostile users (docs/security.md) ---
    # HTTPS deployment: Secure cookies, HSTS, the proxy's X-Forwarded-Proto trusted, and (unless
    # ssl_redirect is off, e.g. TLS ends before a proxy that cannot say so) http → https.
    secure: bool = False
    ssl_redirect: bool = True
    hsts_seconds: int = 31_536_000
    hsts_include_subdomains: bool = True
    hsts_preload: bool = False
    # Wrong passwords for one username from one IP before that pair is locked out (django-axes),
    # and for how long: per pair, so an attacker cannot lock a user out from elsewhere.
    login_failure_limit: int = 10
    login_cooloff_s: float = 900.0
    # Wrong bearer tokens one client IP may send in a sliding window before further unknown
    # tokens get 429 (valid tokens are never counted).
    token_failure_limit: int = 50
    token_failure_window_s: float = 60.0
    # Searches of the text (a `q` of words on the list, its CSV and the API; not a `#id` or an
    # upstream id) one user may make a minute, staff included: a sliding window in the cache,
    # 429 with Retry-After beyond.
    search_max_per_minute: int = 60
    # Open WebSockets per user, across processes (4029 beyond).
    max_sockets_per_user: int = 50
    # Share links (streams/access/shares.py, docs/sharing.md) may be made for anyone with the
    # link, signed in or not; off: every link opens for signed-in users only.
    public_share_links: bool = False
    # An invitation to a project (streams/access/invitations.py) works once, for this long.
    invitation_expiry_days: float = 7.0
    # Imports (streams/ingest/import_jobs.py): uploads per user per minute, jobs per user at once,
    # and how long a job may go unwatched (its progress page not polled) before it is cancelled.
    import_max_per_minute: int = 10
    import_max_concurrent: int = 2
    import_abandon_s: float = 60.0
    # SIGTERM/SIGINT: running streams may end within this many seconds; then the rest end
    # `interrupted` with what arrived, and the process exits (streams/run/shutdown.py).
    shutdown_grace_s: float = 10.0
    # A request body that sends nothing for this long, or takes 3x this long in all, is
    # answered 408 and dropped (a slow body must not hold a request open; streams/serve/edge.py).
    request_body_timeout_s: float = 10.0
    # Bearer-credential shapes redacted from everything that leaves, whoever's key it is (a
    # pass-through client's key is never known on read): comma-separated prefixes.
    redact_key_prefixes: str = "sk-"
    # --- Sign-in (streams/access/identity_provider.py, docs/sign-in.md) ---
    # OpenID Connect, off unless a client id is set: the issuer (its
    # /.well-known/openid-configuration is read once at start, within oidc_timeout_s) or the
    # provider's endpoints themselves (each one given wins over the issuer's document).
    oidc_issuer: str = ""
    oidc_authorization_endpoint: str = ""
    oidc_token_endpoint: str = ""
    oidc_userinfo_endpoint: str = ""
    oidc_jwks_endpoint: str = ""
    # the provider's sign-out page (RP-initiated logout), where /oidc/logout/ sends a user after
    # ending their session here; empty: back to the login page
    oidc_end_session_endpoint: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_scopes: str = "openid email profile"
    # the ID token's signature: RS256 (the provider's published keys) or HS256 (the client secret)
    oidc_sign_algo: str = "RS256"
    # what the login page's button says: "Sign in with <name>" (empty: "with single sign-on",
    # in the page's language)
    oidc_provider_name: str = ""
    # the claim listing a user's groups, and which project role each group gives (applied at
    # every sign-in): "group=project:role,…", e.g. "eng-admins=payments:admin,pm=payments:viewer"
    oidc_groups_claim: str = "groups"
    oidc_groups: str = ""
    # every request to the provider (discovery, token, keys, user info) gives up after this long
    oidc_timeout_s: float = 10.0
    # Password sign-in; off: only the break-glass users (comma-separated usernames) may use it,
    # everyone else signs in with the identity provider.
    password_login: bool = True
    break_glass_users: str = ""

    # --- Notifications (streams/notify/, docs/alerts.md) ---
    # Hosts (names or addresses, comma-separated) a channel may reach although they resolve to
    # a private, loopback or link-local address; every other such target is refused, when the
    # channel is saved and again at each delivery (a name may resolve elsewhere by then).
    alert_allowed_hosts: str = ""
    # One delivery attempt, whatever the receiver does (hangs, trickles, answers 10 MB), ends
    # within this long; a failed one is tried again after notify_backoff_s, doubling each time,
    # up to notify_max_attempts attempts in all, then given up.
    notify_timeout_s: float = 10.0
    notify_backoff_s: float = 30.0
    notify_max_attempts: int = 6

    # --- Background jobs (streams/run/periodic.py) ---
    # The heavy ones (alert rules, packing) run in a child process each server and worker owns
    # (streams/run/apart.py), so their Python never holds the GIL the relay's loop waits for;
    # off: in threads of the serving process.
    jobs_apart: bool = True

    # --- Alert rules (streams/alerts/, docs/alerts.md) ---
    # How often each rule is evaluated (one process per rule and tick, claimed in the database).
    alert_tick_s: float = 60.0
    # Where people reach this instance (https://scope.example.com): the start of the links a
    # notification carries; without it a notification has no links.
    public_url: str = ""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind = f.type
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
            elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise TypeError(f"STREAMSCOPE {f.name.upper()}: {value!r} is not {kind.__name__}")
            elif kind is float and not math.isfinite(value):
                raise ValueError(f"STREAMSCOPE {f.name.upper()}: {value!r} is not finite")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in (int, float) and f.name not in MAY_BE_ZERO and value <= 0:
                raise ValueError(f"STREAMSCOPE {f.name.upper()}: {value!r} must be above 0")
            if f.type in (int, float) and value < 0:
                raise ValueError(f"STREAMSCOPE {f.name.upper()}: {value!r} must not be negative")
        if self.runner not in RUNNERS:
            raise ValueError(f"STREAMSCOPE RUNNER: {self.runner!r} is not one of {RUNNERS}")
        if self.receipt_clock not in RECEIPT_CLOCKS:
            raise ValueError(
                f"STREAMSCOPE RECEIPT_CLOCK: {self.receipt_clock!r} is not one of {RECEIPT_CLOCKS}"
            )
        if self.upstream_transport not in UPSTREAM_TRANSPORTS:
            raise ValueError(
                f"STREAMSCOPE UPSTREAM_TRANSPORT: {self.upstream_transport!r} is not one of "
                f"{UPSTREAM_TRANSPORTS}"
            )
        if self.proxy_on_disconnect not in ON_DISCONNECT:
            raise ValueError(
                f"STREAMSCOPE PROXY_ON_DISCONNECT: {self.proxy_on_disconnect!r} is not one of "
                f"{ON_DISCONNECT}"
            )


NAMES = tuple(f.name.upper() for f in dataclasses.fields(Settings))
# Numbers that may be 0 (off, none, immediately); every other number must be above 0: a limit of
# 0 is no limit but a refusal of everything, or a division by zero.
MAY_BE_ZERO = frozenset(
    {
        "batch_max_age_ms",
        "count_write_interval_ms",
        "storage_retry_s",
        "connect_backoff_s",
        "retain_events_days",
        "retain_streams_days",
        "compact_after_s",
        "compact_streams_per_run",
        "relay_inline_max_bytes",
        "proxy_token_cache_s",
        "hsts_seconds",
        "login_cooloff_s",
    }
)


def _parse(kind, text):
    if kind is bool:
        return text.strip().lower() in {"1", "true", "yes", "on"}
    return kind(text.strip()) if kind is not str else text.strip()


def from_environ(environ=os.environ):
    """The settings set as `STREAMSCOPE_<NAME>` environment variables, parsed: the value of
    `settings.STREAMSCOPE`. A value that does not parse stops the process with its name."""
    values = {}
    for f in dataclasses.fields(Settings):
        text = environ.get(f"STREAMSCOPE_{f.name.upper()}")
        if text is None:
            continue
        try:
            values[f.name.upper()] = _parse(f.type, text)
        except ValueError as exc:
            raise SystemExit(f"STREAMSCOPE_{f.name.upper()}={text!r}: {exc}") from exc
    Settings(**{k.lower(): v for k, v in values.items()})  # validate now, at start-up
    return values


def build(values):
    """`Settings` from a dict of upper-case names (what `settings.STREAMSCOPE` holds)."""
    unknown = sorted(set(values) - set(NAMES))
    if unknown:
        raise KeyError(f"unknown STREAMSCOPE settings: {', '.join(unknown)}")
    return Settings(**{k.lower(): v for k, v in values.items()})


_cache = (None, None)


def get():
    """The current settings (rebuilt only when `settings.STREAMSCOPE` was replaced)."""
    global _cache
    values = settings.STREAMSCOPE
    source, built = _cache
    if source is not values:
        built = build(values)
        _cache = (values, built)
    return built


def in_workers():
    """Streams started by pages and the API run in worker processes (`stream_worker`)."""
    return get().runner == "worker"
