"""Settings, read from the environment with embedded defaults.

Defaults make `python manage.py runserver` work on a fresh machine: SQLite (WAL) in the project
folder, the in-memory channel layer, and the built-in upstream simulator. At scale, DATABASE_URL
selects PostgreSQL and REDIS_URL selects channels-redis.
"""

import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name, default=False):
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


def database_from_url(url):
    """`sqlite:///relative.sqlite3`, `sqlite:////abs/path`, `postgres://user:pw@host:port/name`."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else parts.path
        name = path if os.path.isabs(path) else str(BASE_DIR / path)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {
                # WAL lets pages read while the recorder writes; IMMEDIATE takes the write lock
                # at BEGIN so concurrent writers wait (timeout) instead of failing mid-transaction.
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;"
                ),
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
            # A file, so the recorder's writer thread and live servers share it; per process,
            # so concurrent test runs on one machine don't clobber each other's.
            "TEST": {"NAME": f"{name}.test{os.getpid()}"},
        }
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Async code reaches the ORM from a few long-lived threads; persistent connections
            # avoid a connect per batch (connection pooling would fight thread affinity here).
            "CONN_MAX_AGE": None,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": query,
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {parts.scheme!r}")


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
CSRF_TRUSTED_ORIGINS = [
    o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    # daphne first: `runserver` becomes the ASGI server for HTTP and WebSockets.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "template_partials",
    "streams",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(os.environ.get("DATABASE_URL", "sqlite:///db.sqlite3")),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": env_int("CHANNEL_CAPACITY", 100)},
        }
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# Serve from the finders when collectstatic has not run (runserver, tests): one command works.
WHITENOISE_USE_FINDERS = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "streams": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    },
}

# --- Upstream -----------------------------------------------------------------------------
# The API root including /v1, as OpenAI SDKs take it. Empty: the built-in simulator, started
# in-process on a free 127.0.0.1 port the first time a stream needs it.
UPSTREAM_BASE_URL = os.environ.get("UPSTREAM_BASE_URL", "").rstrip("/")
# Read from the environment only: never stored in the database, logged or rendered.
UPSTREAM_API_KEY = os.environ.get("UPSTREAM_API_KEY", "")
UPSTREAM_MODELS = [
    m for m in os.environ.get("UPSTREAM_MODELS", "").split(",") if m.strip()
]  # fallback list when GET /v1/models does not answer

# --- Recorder -----------------------------------------------------------------------------
STREAMSCOPE = {
    # A batch commits when it holds this many events or is this old (always at a terminal event).
    "BATCH_MAX_EVENTS": env_int("STREAMSCOPE_BATCH_MAX_EVENTS", 2000),
    "BATCH_MAX_AGE_MS": env_float("STREAMSCOPE_BATCH_MAX_AGE_MS", 5.0),
    # A streaming row's event_count is rewritten at most this often (its events are committed
    # at every batch; the count is exact at every milestone, status change and the end).
    "COUNT_WRITE_INTERVAL_MS": env_float("STREAMSCOPE_COUNT_WRITE_INTERVAL_MS", 500.0),
    # Events queued between the readers and the writer; readers pause when it is full.
    "QUEUE_MAX_EVENTS": env_int("STREAMSCOPE_QUEUE_MAX_EVENTS", 20000),
    # No event for this long: abort and retry the same request (PROTOCOL.md: 60 s).
    "STALL_TIMEOUT_S": env_float("STREAMSCOPE_STALL_TIMEOUT_S", 60.0),
    "STALL_MAX_ATTEMPTS": env_int("STREAMSCOPE_STALL_MAX_ATTEMPTS", 3),
    # Connection errors before the first event: retried with exponential backoff.
    "CONNECT_MAX_ATTEMPTS": env_int("STREAMSCOPE_CONNECT_MAX_ATTEMPTS", 3),
    "CONNECT_BACKOFF_S": env_float("STREAMSCOPE_CONNECT_BACKOFF_S", 0.5),
    "CONNECT_TIMEOUT_S": env_float("STREAMSCOPE_CONNECT_TIMEOUT_S", 10.0),
    # A running stream's row is touched this often; a row silent for HEARTBEAT_STALE_S while
    # `streaming` belongs to a dead process and becomes `interrupted`.
    "HEARTBEAT_S": env_float("STREAMSCOPE_HEARTBEAT_S", 5.0),
    # A batch that cannot be written is retried with backoff this long; then its streams end
    # `failed` (storage_unavailable) with the number of events lost.
    "STORAGE_RETRY_S": env_float("STREAMSCOPE_STORAGE_RETRY_S", 30.0),
    "HEARTBEAT_STALE_S": env_float("STREAMSCOPE_HEARTBEAT_STALE_S", 30.0),
    # Per-user limit on concurrently running streams started from pages and the API.
    "MAX_CONCURRENT_PER_USER": env_int("STREAMSCOPE_MAX_CONCURRENT_PER_USER", 5),
    # Largest single event `data` kept inline in channel-layer messages; larger ones are read
    # from the database by the consumer.
    "RELAY_INLINE_MAX_BYTES": env_int("STREAMSCOPE_RELAY_INLINE_MAX_BYTES", 64 * 1024),
    # Where streams run: "inprocess" (asyncio tasks in this server) or "worker" (runworker).
    "RUNNER": os.environ.get("STREAMSCOPE_RUNNER", "inprocess"),
    # Streams marked `interrupted` (their process died) get a new attempt, run by a worker.
    "RETRY_INTERRUPTED": env_bool("STREAMSCOPE_RETRY_INTERRUPTED", False),
    # Streams one worker process runs at once, and how often it polls for new ones (wake-ups
    # over the channel layer make the poll a fallback).
    "WORKER_CONCURRENCY": env_int("STREAMSCOPE_WORKER_CONCURRENCY", 200),
    "WORKER_POLL_S": env_float("STREAMSCOPE_WORKER_POLL_S", 1.0),
    "UPLOAD_MAX_BYTES": env_int("STREAMSCOPE_UPLOAD_MAX_BYTES", 20 * 1024 * 1024),
    "MAX_INPUT_CHARS": env_int("STREAMSCOPE_MAX_INPUT_CHARS", 100_000),
    # --- Relay (streams/consumers.py) ---
    # Events waiting for one slow WebSocket before it is closed with 4008 (resume with after=).
    "RELAY_OUTBOX_MAX_EVENTS": env_int("STREAMSCOPE_RELAY_OUTBOX_MAX_EVENTS", 20_000),
    # Bytes Daphne buffers for a connection above which we stop sending to it…
    "RELAY_SEND_HIGH_WATER_BYTES": env_int("STREAMSCOPE_RELAY_SEND_HIGH_WATER_BYTES", 256 * 1024),
    # …and how long it may stay above that before it is closed with 4008.
    "RELAY_SLOW_CLIENT_TIMEOUT_S": env_float("STREAMSCOPE_RELAY_SLOW_CLIENT_TIMEOUT_S", 30.0),
    # A connection without messages for this long checks the database once (lost messages).
    "RELAY_IDLE_CHECK_S": env_float("STREAMSCOPE_RELAY_IDLE_CHECK_S", 5.0),
    # With the in-memory layer, deliver in-process without it (see streams/relay.py).
    "RELAY_LOCAL_FANOUT": env_bool("STREAMSCOPE_RELAY_LOCAL_FANOUT", True),
    # The playground chains turns with previous_response_id instead of resending the history.
    "PLAYGROUND_PREVIOUS_RESPONSE_ID": env_bool(
        "STREAMSCOPE_PLAYGROUND_PREVIOUS_RESPONSE_ID", False
    ),
}
DATA_UPLOAD_MAX_MEMORY_SIZE = STREAMSCOPE["UPLOAD_MAX_BYTES"] + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = STREAMSCOPE["UPLOAD_MAX_BYTES"]
