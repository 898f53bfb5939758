"""Settings, read from the environment with embedded defaults.

Defaults make `python manage.py runserver` work on a fresh machine: SQLite (WAL) in the project
folder, the in-memory channel layer, and the built-in upstream simulator. At scale, DATABASE_URL
selects PostgreSQL and REDIS_URL selects channels-redis.
"""

import datetime as dt
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from csp.constants import NONE, SELF, UNSAFE_INLINE

from streams.access import identity_provider
from streams.core import conf

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name, default=False):
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name, default):
    return int(os.environ.get(name, default))


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
            # Kept per thread, as on PostgreSQL: with the default (closed after every request
            # and every Channels database call) each relay read opened a new connection (its
            # PRAGMAs, a 64 MB page cache, Django's SQL functions registered): a fifth of the
            # server's CPU at 100 paced streams with a viewer each (docs/performance.md, "Where the
            # CPU goes, by stage").
            "CONN_MAX_AGE": None,
            "CONN_HEALTH_CHECKS": True,
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
            # work_mem: the analytics pages group tens of thousands of rollup rows; with the
            # server's default 4 MB a user's 30-day histogram sort spilled to disk (most of the
            # query's time at 1M streams: docs/performance.md, "Analytics"). A sort or hash gets
            # 32 MB, and few connections sort at once. jit off: a statement over many rollup
            # rows costs more than jit_above_cost, and compiling it took 30–60 ms each time
            # (the staff's analytics pages at 1M streams 24–42 % faster without; docs/
            # performance.md, "Pages at 1M"). `?options=…` in DATABASE_URL replaces this.
            "OPTIONS": {"options": "-c work_mem=32MB -c jit=off", **query},
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {parts.scheme!r}")


def _kept_secret_key(path):
    """The one-machine default's secret: generated once, kept in a git-ignored file only its
    owner may read, so sessions (and the sealed pass-through keys, streams/store/sealed.py) survive
    a restart. Several processes starting at once agree: the first to create the file wins."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):
            key = path.read_text().strip()
            if key:
                return key
            import time

            time.sleep(0.02)  # another process is writing it
        raise RuntimeError(f"{path} is empty: delete it or set DJANGO_SECRET_KEY") from None
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _kept_secret_key(
    Path(os.environ.get("STREAMSCOPE_SECRET_KEY_FILE") or BASE_DIR / ".streamscope-secret-key")
)
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
    # login throttling (its own migrations: AccessAttempt, AccessLog, AccessFailureLog)
    "axes",
    "streams",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "streams.serve.http.refuse_nul",  # before anything reads a parameter or a cookie
    # on every response, static files and admin included (CONTENT_SECURITY_POLICY below)
    "csp.middleware.CSPMiddleware",
    "dashboard.static_files.StaticFilesMiddleware",  # WhiteNoise
    "django.contrib.sessions.middleware.SessionMiddleware",
    "dashboard.language.PageLanguageMiddleware",
    "dashboard.timezone.TimeZoneMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "dashboard.project.ProjectMiddleware",
    "streams.access.audit.AuditMiddleware",  # who makes a request's changes (the audit log)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last, as django-axes asks: it turns a lockout into the 429 page
    "axes.middleware.AxesMiddleware",
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
                "dashboard.vocabulary.context_processor",
                "dashboard.timezone.context_processor",
                "dashboard.project.context_processor",
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
# django-axes before the password: it refuses a locked-out (username, IP) pair before the
# password is hashed. The identity provider's backend answers only its callback view's call, and
# raises its refusals, so a provider's refusal is never counted as a wrong password
# (streams/access/sign_in.py). The password backend lets only the break-glass users in when
# STREAMSCOPE_PASSWORD_LOGIN is off.
AUTHENTICATION_BACKENDS = [
    "streams.access.sign_in.ProviderBackend",
    "axes.backends.AxesStandaloneBackend",
    "streams.access.sign_in.PasswordBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# The pages in English and Dutch (docs/i18n.md): the user's choice (the switcher's cookie), else
# the browser's Accept-Language. Data never is: the API, exports, the proxy, /metrics and
# recorded events stay as they are (dashboard/language.py).
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("nl", "Nederlands")]
# The page scripts (static/js, outside any app) have their catalog in the dashboard app's
# locale: `makemessages -d djangojs` writes it there, and /jsi18n/ (its packages) serves it.
LOCALE_PATHS = [BASE_DIR / "dashboard" / "locale"]
# The pages' forms of dates and figures per language (dashboard/formats, before Django's own):
# day-month dates in Dutch, thousands grouped by a narrow no-break space in both (docs/i18n.md).
FORMAT_MODULE_PATH = ["dashboard.formats"]
USE_I18N = True
TIME_ZONE = "UTC"
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
    # log lines are an exit too: the egress gate's rules apply. Every record of every logger is
    # redacted as it is made once the apps are ready (known_secrets.redact_every_record); the
    # filter covers what is logged before, and Daphne's access log is redacted at its source
    # (streams/serve/edge.py)
    "filters": {"egress": {"()": "streams.store.known_secrets.LogFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["egress"]}
    },
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
# The Chat Completions and Anthropic Messages upstreams (the proxy's /v1/chat/completions and
# /v1/messages, streams/core/formats/), each with its own key, read as UPSTREAM_API_KEY is;
# unset, the ones above (the built-in simulator speaks all three formats).
UPSTREAM_CHAT_BASE_URL = os.environ.get("UPSTREAM_CHAT_BASE_URL", "").rstrip("/")
UPSTREAM_CHAT_API_KEY = os.environ.get("UPSTREAM_CHAT_API_KEY", "")
UPSTREAM_MESSAGES_BASE_URL = os.environ.get("UPSTREAM_MESSAGES_BASE_URL", "").rstrip("/")
UPSTREAM_MESSAGES_API_KEY = os.environ.get("UPSTREAM_MESSAGES_API_KEY", "")

# --- E-mail (invitations: streams/access/invitations.py) ------------------------------------
# Printed to the console unless EMAIL_BACKEND says otherwise (an SMTP server: the backend
# django.core.mail.backends.smtp.EmailBackend, EMAIL_HOST, EMAIL_PORT and, where it asks,
# EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS or EMAIL_USE_SSL).
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
# Read from the environment only, as UPSTREAM_API_KEY: never stored, logged or rendered.
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)  # a page waits for the mail server this long at most
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "streamscope@localhost")

# --- Streamscope -------------------------------------------------------------------------
# Each knob is typed, documented and defaulted once in streams/core/conf.py and read from
# STREAMSCOPE_<NAME>; this dict holds what the environment set (tests override it).
STREAMSCOPE = conf.from_environ()
# Sign-in with the company's identity provider (docs/sign-in.md): with an issuer, its discovery
# document is read here, once per process, so the endpoints are known before the first request;
# a configuration that cannot work stops the process with what to fix.
try:
    STREAMSCOPE = identity_provider.discovered(STREAMSCOPE)
    identity_provider.from_settings(conf.build(STREAMSCOPE))
except identity_provider.ProviderError as exc:
    raise SystemExit(f"sign-in: {exc}") from None
_upload_max = conf.build(STREAMSCOPE).upload_max_bytes
DATA_UPLOAD_MAX_MEMORY_SIZE = _upload_max + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = _upload_max

# --- Hostile users (docs/security.md) ---------------------------------------------------------
_conf = conf.build(STREAMSCOPE)

# One cache for every process when there is Redis: the token throttle's windows, the per-user
# WebSocket counts and upload rates must be the same numbers in each Daphne and worker.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
        }
    }

# Login throttling: a lockout is per (username, client IP), so an attacker guessing alice's
# password locks out only themselves, never alice at her own address; the client IP is
# REMOTE_ADDR (behind nginx: Daphne's --proxy-headers, docs/security.md). A wrong password is a
# few database rows (the default handler), and nothing is looked up on other pages.
AXES_FAILURE_LIMIT = _conf.login_failure_limit
AXES_COOLOFF_TIME = dt.timedelta(seconds=_conf.login_cooloff_s)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Success logs would grow by a row per login; failures are what a lockout is counted from.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False

# HTTPS: only where the deployment says it terminates TLS (STREAMSCOPE_SECURE), so that
# `make run` on http://127.0.0.1 keeps working.
if _conf.secure:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # nginx (README) sets X-Forwarded-Proto; without this every request would look like http
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = _conf.ssl_redirect
    SECURE_HSTS_SECONDS = _conf.hsts_seconds
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _conf.hsts_include_subdomains
    SECURE_HSTS_PRELOAD = _conf.hsts_preload
SESSION_COOKIE_HTTPONLY = True

# Content-Security-Policy on every response: scripts only from our own static files (the
# templates have no inline script or handler; json_script blocks are data, not scripts).
# style-src-attr 'unsafe-inline' alone is allowed: the waterfall and latency bars are
# positioned by server-computed style attributes, which cannot run code; <style> elements and
# style sheets still come from 'self' only.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        # 'self' covers ws:/wss: to the same host (CSP Level 3) for the live relay
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
