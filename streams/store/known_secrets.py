"""The secrets this server knows, for every exit: the configured `UPSTREAM_API_KEY`, the
credentials in `UPSTREAM_BASE_URL`, the identity provider's client secret
(STREAMSCOPE_OIDC_CLIENT_SECRET), and every pass-through key the proxy has forwarded
(`remember`; sealed in the database by `streams.store.sealed`, so it is still redacted after a
restart and by every process). `rules()` is the current `Rules` (streams/core/redaction.py).

The egress gate (streams/serve/egress.py) applies them to every ASGI message; the exits that
are not ASGI messages call `redact`, `redact_bytes` or `redact_pieces` themselves
(OpenTelemetry spans, files written by commands) or pass `LogFilter` (log lines).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import logging
import re
import sys
import threading
import time
from urllib.parse import unquote

from django.conf import settings

from streams.core import conf
from streams.core.redaction import FRAGMENT_MIN, Rules, StreamRedactor

log = logging.getLogger(__name__)


# How old the last look for other processes' new pass-through keys may be before the next
# derivation from stored text reads the database again (`refreshed`, `fresh_rules`).
REFRESH_S = 1.0


class _Known:
    """The current Rules: the configured secrets and the pass-through keys, refreshed from the
    database (other processes add keys too) at most every REFRESH_S, and at once when this
    process adds one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.passthrough = set()
        self.sealed_max = 0
        self.checked = float("-inf")
        self.rules = None
        self.key = None
        self.refreshing = None

    def configured(self):
        c = conf.get()
        return (
            # every format's upstream (streams/core/formats/): its key and its URL's userinfo
            (
                settings.UPSTREAM_API_KEY,
                settings.UPSTREAM_CHAT_API_KEY,
                settings.UPSTREAM_MESSAGES_API_KEY,
            ),
            (
                settings.UPSTREAM_BASE_URL,
                settings.UPSTREAM_CHAT_BASE_URL,
                settings.UPSTREAM_MESSAGES_BASE_URL,
            ),
            c.redact_key_prefixes,
            c.oidc_client_secret,
        )

    def get(self):
        key = self.configured()
        rules = self.rules
        if rules is None or key != self.key:
            with self.lock:
                self.key = key
                rules = self.rules = _rules_for(key, frozenset(self.passthrough))
        return rules

    def add(self, secrets):
        new = {s for s in secrets if len(s) >= FRAGMENT_MIN} - self.passthrough
        if new:
            with self.lock:
                self.passthrough |= new
                self.rules = None
        return new

    def stale(self):
        return time.monotonic() - self.checked > REFRESH_S

    async def refresh_async(self, wait):
        """`refresh` on the ORM's thread; the proxy's requests do not wait for it (the keys
        they forward are this process's own, known at once)."""
        from asgiref.sync import sync_to_async

        self.checked = time.monotonic()
        task = self.refreshing
        if task is None or task.done():
            task = self.refreshing = asyncio.ensure_future(sync_to_async(self.refresh)())
        if wait:
            await asyncio.shield(task)

    def refresh(self):
        """Read the pass-through keys other processes sealed since the last look (sync)."""
        from django.db import transaction

        from streams.store import sealed  # (a model: this module loads before the apps do)

        self.checked = time.monotonic()
        try:
            # (a savepoint inside a transaction, such as the writer's when it derives the
            # search text: a failed read must not leave it aborted on PostgreSQL)
            with transaction.atomic():
                top, secrets = sealed.load_after(self.sealed_max)
        except Exception:  # no table yet (before migrate), database away: keep what we know
            log.debug("pass-through keys not read", exc_info=True)
            return
        self.sealed_max = max(self.sealed_max, top)
        self.add(secrets)


_known = _Known()


@functools.lru_cache(maxsize=16)
def _rules_for(key, passthrough):
    api_keys, base_urls, prefixes, client_secret = key
    secrets = set(passthrough)
    secrets.update(k for k in api_keys if isinstance(k, str) and k)
    if client_secret:
        secrets.add(client_secret)
    for base_url in base_urls:
        userinfo = re.search(r"(?<=://)[^/?#@]+@", base_url or "")
        if userinfo:
            info = userinfo.group()[:-1]
            password = info.partition(":")[2]
            secrets.update((info, unquote(info), password, unquote(password)))
            # …and as they go over the wire, `Authorization: Basic <base64 of user:password>`
            secrets.add(base64.b64encode(unquote(info).encode()).decode())
    shapes = tuple(p.strip() for p in (prefixes or "").split(",") if p.strip())
    return Rules(secrets, shapes)


def rules() -> Rules:
    return _known.get()


def fresh_rules() -> Rules:
    """The current Rules, other processes' new pass-through keys read first when the last look
    is over REFRESH_S old (sync; on an event loop, the rules as they are): for what is derived
    now to be read later, such as the search index, which must not miss a key another process
    sealed a moment ago."""
    if _known.stale() and not _on_event_loop():
        _known.refresh()
    return rules()


def _on_event_loop():
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def redact(text):
    """`text` without any secret (anything but a string comes back as it is): for the exits
    that are not ASGI messages (spans, log lines)."""
    if not isinstance(text, str):
        return text
    r = rules()
    return r.text(text) if r else text


def label_key(label):
    """A sort key for a label (a text an upstream may have chosen: a model id, an event type, a
    routing category, a tag) in a list people read: its redacted text, then a keyed hash of it
    (ties in an order that says nothing of what was redacted). Sorted by the stored texts, a
    key's place among labels someone else chose (an import's model ids) would tell its
    characters, one comparison at a time, though every label is shown redacted."""
    if not isinstance(label, str):
        return ("", b"")
    key = _label_key(settings.SECRET_KEY)
    return (redact(label), hmac.new(key, label.encode("utf-8", "replace"), "sha256").digest())


@functools.lru_cache(maxsize=4)
def _label_key(secret_key):
    return hashlib.sha256(b"streamscope.label-order." + secret_key.encode()).digest()


def label_order(labels):
    """`labels` sorted by `label_key`."""
    return sorted(labels, key=label_key)


def redact_bytes(data: bytes) -> bytes:
    r = rules()
    if not r:
        return data
    return r.bytes(data)


def redact_pieces(pieces):
    """An iterable of byte pieces without any secret, a secret cut across pieces included (for
    the exits that are not ASGI messages: files written by commands)."""
    r = rules()
    if not r:
        yield from pieces
        return
    redactor = StreamRedactor(r)
    for piece in pieces:
        if out := redactor.feed(piece):
            yield out
    if tail := redactor.close():
        yield tail


def warm() -> None:
    """The sealed keys' module (and its cipher, `cryptography`) imported: the first refresh
    imports it otherwise, holding the GIL (streams/core/warmup.py)."""
    from streams.store import sealed  # noqa: F401


def remember(secret: str):
    """A pass-through key the proxy forwards: redacted from now on, here at once, in every
    process after its next refresh and after restarts (sealed in the database). Sync; returns
    whether it was new to this process."""
    from streams.store import sealed

    if not isinstance(secret, str) or len(secret) < FRAGMENT_MIN:
        return False
    if secret in _known.passthrough:
        return False
    sealed.store(secret)
    _known.add({secret})
    return True


def learn_here(secrets):
    """Benchmarks: pass-through keys redacted in this process only (not sealed, so not in the
    database nor other processes)."""
    _known.add(set(secrets))


def knows(secret: str) -> bool:
    return secret in _known.passthrough


def forget_all():
    """Tests: drop the pass-through keys this process knows (the database keeps them)."""
    with _known.lock:
        _known.passthrough.clear()
        _known.sealed_max = 0
        _known.checked = float("-inf")
        _known.rules = None


def refresh():
    """Read the pass-through keys other processes sealed since the last look, now (sync)."""
    _known.refresh()


async def refreshed(wait):
    """Read other processes' new keys if the last look is over REFRESH_S old; `wait` for it
    (a page does; the proxy's requests do not: the keys they forward are this process's own,
    known at once)."""
    if _known.stale():
        await _known.refresh_async(wait)


# Streamscope's own credentials: API tokens (streams/access/tokens.py), share links' secrets
# (streams/access/shares.py), invitations' (streams/access/invitations.py) and webhooks'
# signing secrets (streams/notify/channels.py), which open what they name (or forge what they
# sign) to whoever reads them. A log line (an access log's `GET /s/sl_…/`) keeps the prefix
# and loses the rest.
OWN_CREDENTIAL_PREFIXES = ("ss_", "sl_", "inv_", "whsec_")
_OWN_CREDENTIAL = re.compile(r"\b(" + "|".join(OWN_CREDENTIAL_PREFIXES) + r")[A-Za-z0-9_-]{8,}")


def _without_credentials(text):
    return _OWN_CREDENTIAL.sub(r"\1[redacted]", text)


def redact_record(record: logging.LogRecord) -> None:
    """A log record without any secret, in place: its message (arguments merged in), its
    exception's traceback and its stack, as every handler will format them."""
    try:
        message = record.getMessage()
        clean = (
            (lambda text: _without_credentials(redact(text))) if rules() else _without_credentials
        )
    except Exception:  # settings not ready, or a log call with the wrong arguments (logging
        return  # reports those itself)
    record.msg, record.args = clean(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = clean(record.exc_text)
    if record.stack_info:
        record.stack_info = clean(record.stack_info)


class LogFilter(logging.Filter):
    """Log lines are an exit too: their message and arguments lose any secret (for handlers
    configured before `redact_every_record`, see there)."""

    def filter(self, record):
        redact_record(record)
        return True


_make_record = []


def redact_every_record() -> None:
    """Every log record this process makes, by any logger (ours, Django's, Daphne's, Twisted's
    through the standard library, asyncio's), loses any secret as it is made: a filter would
    have to be on every handler, and a library's own handler (Daphne's root handler) has none.
    Installed once, when the apps are ready (streams/apps.py)."""
    if _make_record:
        return
    make = logging.getLogRecordFactory()
    _make_record.append(make)

    def factory(*args, **kwargs):
        record = make(*args, **kwargs)
        redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    # What Python prints itself of an exception nobody caught (a thread's, the main thread's)
    # goes through a logger instead, so through the factory above.
    threading.excepthook = _log_thread_exception
    sys.excepthook = _log_uncaught


_uncaught = logging.getLogger("streams.uncaught")


def _log_thread_exception(args):
    if issubclass(args.exc_type, SystemExit):  # (as Python's own hook: a thread's exit)
        return
    name = args.thread.name if args.thread is not None else "?"
    _uncaught.error(
        "uncaught exception in thread %s",
        name,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def _log_uncaught(exc_type, exc_value, exc_traceback):
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc_value, exc_traceback)
        return
    _uncaught.critical("uncaught exception", exc_info=(exc_type, exc_value, exc_traceback))
