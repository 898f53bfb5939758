"""The egress gate: the one place secrets are taken out of what leaves the server.

Every HTTP response (status headers and body, streamed or whole: pages, htmx partials, the
JSON API, exports, admin, `/metrics`, the recording proxy's forwarded headers and bytes, its
model list) and every WebSocket message passes `EgressGate`, which wraps the whole ASGI
application (dashboard/asgi.py). Call sites never redact; the stored record stays verbatim.
Exits that are not ASGI (OpenTelemetry spans, log lines) call `redact` themselves.

What is a secret:
- known secrets: the configured `UPSTREAM_API_KEY`, the credentials in `UPSTREAM_BASE_URL`,
  and every pass-through key the proxy has forwarded (`remember`; kept sealed in the database
  so it is still redacted after a restart and by every process, see `streams.sealed`);
- credentials by their shape, for keys nobody told us about: one of
  STREAMSCOPE_REDACT_KEY_PREFIXES (`sk-`) not preceded by a letter or digit, then 20 or more
  key characters;
- the password part of a URL's userinfo (`scheme://user:pass@`).

A known secret is redacted whole **and as any fragment of FRAGMENT_MIN or more characters**,
so a key an upstream cut across two deltas, two chunks or two table cells never leaves in
pieces. Each rule sees the text as a reader would decode it: characters of a secret written as
JSON `\\uXXXX` escapes (behind any number of backslashes), URL `%XX` escapes or HTML character
references count as the characters they spell (`Rules.decode`), and the whole escape goes.

How it stays cheap: a text is cut into runs of the secrets' characters (one C-level regex
scan); only runs of FRAGMENT_MIN or more are looked at, each FRAGMENT_MIN-character window
against a set of the secrets' windows, with a bounded cache of runs already judged (JSON keys
and HTML names repeat). Escapes are decoded only where an escape of a secret character is
present. docs/security.md has the measured cost.
"""

from __future__ import annotations

import asyncio
import bisect
import codecs
import functools
import html.entities
import logging
import re
import threading
import time
from urllib.parse import unquote

from django.conf import settings

REDACTED = "[redacted]"
FRAGMENT_MIN = 8
SHAPE_MIN_CHARS = 20
# Characters of a credential's shape, and of every key-like secret: always decoded from escapes.
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# A streamed body holds back at most this much of a possible secret's beginning.
MAX_HOLD = 8192
# Whole bodies with a Content-Length up to this size are redacted in one piece (the length is
# then right); larger ones are streamed without it.
WHOLE_BODY_MAX = 8 << 20
_RUN_CACHE_MAX = 4096
_RUN_CACHE_RUN_MAX = 96
_USERINFO = re.compile(r"(?<=://)[^/?#@\s\"'\\<>:]*:[^/?#@\s\"'\\<>]+@")

log = logging.getLogger(__name__)


# ---- the rules -------------------------------------------------------------------------------


class Rules:
    """An immutable set of secrets and shapes, and how to find them in a text."""

    def __init__(self, secrets, prefixes):
        secrets = {s for s in secrets if isinstance(s, str) and len(s) >= FRAGMENT_MIN}
        self.secrets = tuple(sorted(secrets, key=len, reverse=True))
        self.prefixes = tuple(p for p in prefixes if len(p) >= 2)
        self.grams = frozenset(
            s[i : i + FRAGMENT_MIN] for s in secrets for i in range(len(s) - FRAGMENT_MIN + 1)
        )
        alphabet = set().union(*self.secrets) if self.secrets else set()
        self.alphabet = frozenset(alphabet)
        self.run_re = (
            re.compile(f"[{_char_class(alphabet)}]{{{FRAGMENT_MIN},}}") if alphabet else None
        )
        decoded = alphabet | (KEY_CHARS if self.prefixes else set())
        self.decodes = frozenset(decoded)
        self.escape_re = _escape_pattern(decoded) if decoded else None
        self.shape_re = (
            re.compile(
                "|".join(
                    f"(?<![A-Za-z0-9]){re.escape(p)}[A-Za-z0-9_\\-]{{{SHAPE_MIN_CHARS},}}"
                    for p in self.prefixes
                )
            )
            if self.prefixes
            else None
        )
        self._runs = {}  # run -> tuple of (start, end) windows of secrets in it, merged

    def __bool__(self):
        return bool(self.secrets or self.prefixes)

    # -- decoding ---------------------------------------------------------------------------

    def decode(self, text):
        """(decoded text, escapes): `text` with every escape of a secret's character replaced
        by that character; `escapes` lists (decoded position, text position, text length) of
        each, for mapping back (None when nothing was decoded)."""
        if self.escape_re is None or not (
            "\\" in text or "%" in text or "&" in text
        ):  # (no escape can be there)
            return text, None
        pieces, escapes, last, shift = [], [], 0, 0
        for m in self.escape_re.finditer(text):
            ch = _unescape(m)
            if ch is None or ch not in self.decodes:
                continue
            start, end = m.span()
            pieces.append(text[last:start])
            pieces.append(ch)
            escapes.append((start - shift, start, end - start))
            shift += end - start - 1
            last = end
        if not escapes:
            return text, None
        pieces.append(text[last:])
        return "".join(pieces), escapes

    @staticmethod
    def to_text(pos, escapes):
        """A position (or a span's end) in the decoded text, in the text it came from."""
        if escapes is None:
            return pos
        i = bisect.bisect_right(escapes, (pos, float("inf"))) - 1
        if i < 0:
            return pos
        d, t, n = escapes[i]
        return t if d == pos else t + n + (pos - d - 1)

    # -- finding ----------------------------------------------------------------------------

    def _run_marks(self, run):
        found = self._runs.get(run)
        if found is not None:
            return found
        grams, n, marks = self.grams, FRAGMENT_MIN, []
        for i in range(len(run) - n + 1):
            if run[i : i + n] in grams:
                if marks and marks[-1][1] >= i:
                    marks[-1][1] = i + n
                else:
                    marks.append([i, i + n])
        found = tuple((s, e) for s, e in marks)
        if len(run) <= _RUN_CACHE_RUN_MAX:
            if len(self._runs) >= _RUN_CACHE_MAX:
                self._runs.clear()
            self._runs[run] = found
        return found

    def marks(self, decoded):
        """Spans of `decoded` to redact: fragments of known secrets, credential shapes."""
        spans = []
        if self.run_re is not None:
            runs = self.run_re.findall(decoded)
            if runs and any(self._run_marks(r) for r in runs):
                for m in self.run_re.finditer(decoded):
                    base = m.start()
                    spans.extend((base + s, base + e) for s, e in self._run_marks(m.group()))
        if self.shape_re is not None and any(p in decoded for p in self.prefixes):
            spans.extend(m.span() for m in self.shape_re.finditer(decoded))
        return spans

    # -- redacting --------------------------------------------------------------------------

    def text(self, text):
        out, _ = self._apply(text, tail=False)
        return out

    def _apply(self, text, tail):
        """(`text` redacted up to the hold point, the hold point). With `tail`, the end of
        `text` that could still begin a secret is held back (its continuation decides)."""
        decoded, escapes = self.decode(text)
        spans = [
            (self.to_text(s, escapes), self.to_text(e, escapes)) for s, e in self.marks(decoded)
        ]
        if "://" in text and "@" in text:
            spans.extend((m.start(), m.end() - 1) for m in _USERINFO.finditer(text))
        hold = len(text)
        if tail:
            hold = self._hold_point(text, decoded, escapes)
            for s, e in spans:
                if s < hold < e:
                    hold = s
            spans = [(s, e) for s, e in spans if e <= hold]
        if not spans:
            return (text if hold == len(text) else text[:hold]), hold
        spans.sort()
        out, last = [], 0
        for s, e in spans:
            if e <= last:
                continue
            if s < last:
                s = last
            else:
                # a backslash escaping the span's first character goes with it (a JSON
                # string must not be left with a dangling escape)
                b = s
                while b > last and text[b - 1] == "\\":
                    b -= 1
                if (s - b) % 2:
                    s -= 1
                out.append(text[last:s])
                out.append(REDACTED)
            last = e
        out.append(text[last:hold])
        return "".join(out), hold

    def _hold_point(self, text, decoded, escapes):
        hold = end = len(text)
        partial = _PARTIAL_ESCAPE.search(text, max(0, len(text) - 40))
        if partial:
            hold = end = partial.start()
        # the run of secret characters that ends the text (or meets the partial escape): its
        # last FRAGMENT_MIN - 1 characters may begin a fragment; from a shape's prefix on, all
        # of it may be a credential
        d_end = self.to_decoded(end, escapes)
        alphabet = self.decodes
        i = d_end
        while i > 0 and decoded[i - 1] in alphabet and d_end - i < MAX_HOLD:
            i -= 1
        if i < d_end or partial:
            run = decoded[i:d_end]
            start = max(i, d_end - (FRAGMENT_MIN - 1))
            for p in self.prefixes:
                at = run.find(p)
                if at >= 0:
                    start = min(start, i + at)
            hold = min(hold, self.to_text(start, escapes))
        return hold

    @staticmethod
    def to_decoded(pos, escapes):
        """A position in the text, in the decoded text (inside an escape: the escape's)."""
        if escapes is None:
            return pos
        i = bisect.bisect_left([t for _, t, _ in escapes], pos) - 1
        if i < 0:
            return pos
        d, t, n = escapes[i]
        return d if pos < t + n else d + 1 + (pos - t - n)


def _char_class(chars):
    return "".join(re.escape(c) for c in sorted(chars))


def _escape_pattern(chars):
    """Escapes that may spell one of `chars`: JSON \\uXXXX (behind one or more backslashes),
    URL %XX, HTML &#NN; / &#xHH; and the named references of those characters."""
    ascii_codes = sorted({ord(c) for c in chars if ord(c) < 0x80})
    hex2 = "|".join(f"{c:02x}" for c in ascii_codes)
    named = sorted(
        (name for name, value in html.entities.html5.items() if value in chars and ";" in name),
        key=len,
        reverse=True,
    )
    parts = [r"\\+u[0-9a-fA-F]{4}", r"&#[0-9]{1,7};?", r"&#[xX][0-9a-fA-F]{1,6};?"]
    if hex2:
        parts.append(f"%(?i:{hex2})")
    if named:
        parts.append("&(?:" + "|".join(re.escape(n) for n in named) + ")")
    return re.compile("|".join(parts))


def _unescape(m):
    s = m.group()
    try:
        if s[0] == "\\":
            return chr(int(s[-4:], 16))
        if s[0] == "%":
            return chr(int(s[1:], 16))
        if s.startswith("&#x") or s.startswith("&#X"):
            return chr(int(s[3:].rstrip(";"), 16))
        if s.startswith("&#"):
            return chr(int(s[2:].rstrip(";")))
        return html.entities.html5.get(s[1:])
    except (ValueError, OverflowError):
        return None


# The end of a chunk that may be the beginning of an escape.
_PARTIAL_ESCAPE = re.compile(
    r"(?:\\+(?:u[0-9a-fA-F]{0,3})?|%[0-9a-fA-F]?|&#?[xX]?[0-9a-fA-F]*|&[A-Za-z]{0,31})\Z"
)


class StreamRedactor:
    """Redacts a body that leaves in chunks: what could be the beginning of a secret is held
    back until the next chunk says (an event stream's chunks end in a blank line: nothing is
    held); bytes that are not UTF-8 pass through as they are."""

    def __init__(self, rules):
        self.rules = rules
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self.held = ""

    def feed(self, chunk: bytes, final=False) -> bytes:
        pending = self.decoder.getstate()[0]
        text = self.decoder.decode(chunk, final)
        if not self.held and not final and text and text[-1] == "\n":
            out, _ = self.rules._apply(text, tail=False)  # nothing to hold: the common case
            return chunk if out is text and not pending else _enc(out)
        text = self.held + text
        out, hold = self.rules._apply(text, tail=not final)
        self.held = text[hold:]
        return _enc(out)

    def close(self) -> bytes:
        return self.feed(b"", final=True)


def _enc(text):
    return text.encode("utf-8", "surrogateescape")


# ---- the secrets this process knows --------------------------------------------------------


class _Known:
    """The current Rules: the configured secrets and the pass-through keys, refreshed from the
    database (other processes add keys too) at most every REFRESH_S, and at once when this
    process adds one."""

    REFRESH_S = 1.0

    def __init__(self):
        self.lock = threading.Lock()
        self.passthrough = set()
        self.sealed_max = 0
        self.checked = float("-inf")
        self.rules = None
        self.key = None
        self.refreshing = None

    def configured(self):
        key = settings.UPSTREAM_API_KEY, settings.UPSTREAM_BASE_URL, _prefixes()
        return key

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
        return time.monotonic() - self.checked > self.REFRESH_S

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
        from . import sealed

        self.checked = time.monotonic()
        try:
            top, secrets = sealed.load_after(self.sealed_max)
        except Exception:  # no table yet (before migrate), database away: keep what we know
            log.debug("pass-through keys not read", exc_info=True)
            return
        self.sealed_max = max(self.sealed_max, top)
        self.add(secrets)


_known = _Known()


def _prefixes():
    from . import conf

    return conf.get().redact_key_prefixes


@functools.lru_cache(maxsize=16)
def _rules_for(key, passthrough):
    api_key, base_url, prefixes = key
    secrets = set(passthrough)
    if isinstance(api_key, str):
        secrets.add(api_key)
    userinfo = _USERINFO.search(base_url or "") or re.search(r"(?<=://)[^/?#@]+@", base_url or "")
    if userinfo:
        info = userinfo.group()[:-1]
        password = info.partition(":")[2]
        secrets.update((info, unquote(info), password, unquote(password)))
    shapes = tuple(p.strip() for p in (prefixes or "").split(",") if p.strip())
    return Rules(secrets, shapes)


def rules() -> Rules:
    return _known.get()


def redact(text):
    """`text` without any secret (anything but a string comes back as it is): for the exits
    that are not ASGI messages (spans, log lines)."""
    if not isinstance(text, str):
        return text
    r = rules()
    return r.text(text) if r else text


def redact_bytes(data: bytes) -> bytes:
    r = rules()
    if not r:
        return data
    out = r.text(data.decode("utf-8", "surrogateescape"))
    return _enc(out)


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


def remember(secret: str):
    """A pass-through key the proxy forwards: redacted from now on, here at once, in every
    process after its next refresh and after restarts (sealed in the database). Sync; returns
    whether it was new to this process."""
    from . import sealed

    if not isinstance(secret, str) or len(secret) < FRAGMENT_MIN:
        return False
    if secret in _known.passthrough:
        return False
    sealed.store(secret)
    _known.add({secret})
    return True


def knows(secret: str) -> bool:
    return secret in _known.passthrough


def forget_all():
    """Tests: drop the pass-through keys this process knows (the database keeps them)."""
    with _known.lock:
        _known.passthrough.clear()
        _known.sealed_max = 0
        _known.checked = float("-inf")
        _known.rules = None


# ---- the gate --------------------------------------------------------------------------------


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
        if _known.stale():
            await _known.refresh_async(wait=not scope.get("path", "").startswith("/v1/"))
        if kind == "http":
            return await self.app(scope, receive, _HttpExit(send))
        return await self.app(scope, receive, _SocketExit(send))


def _headers(rules, headers):
    out = []
    for name, value in headers:
        out.append((_redact_latin1(rules, name), _redact_latin1(rules, value)))
    return out


def _redact_latin1(rules, value):
    if isinstance(value, bytes):
        text = value.decode("latin-1")
        out = rules.text(text)
        return value if out is text else out.encode("latin-1", "replace")
    return rules.text(value)


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
            r = rules()
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
        body = redact_bytes(b"".join(self.body))
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
        r = rules()
        if r:
            kind = message["type"]
            if kind == "websocket.send":
                text = message.get("text")
                if text is not None:
                    out = r.text(text)
                    if out is not text:
                        message = {**message, "text": out}
                elif message.get("bytes") is not None:
                    message = {**message, "bytes": redact_bytes(message["bytes"])}
            elif kind == "websocket.close" and message.get("reason"):
                message = {**message, "reason": r.text(message["reason"])}
            elif kind == "websocket.accept" and message.get("headers"):
                message = {**message, "headers": _headers(r, message["headers"])}
        return await self.__wrapped__(message)


def innermost(send):
    """The server's `send` beneath the gate (for what only the server can do: abort a
    connection, measure its buffer)."""
    for _ in range(8):
        inner = getattr(send, "__wrapped__", None)
        if inner is None:
            return send
        send = inner
    return send


class LogFilter(logging.Filter):
    """Log lines are an exit too: their message and arguments lose any secret."""

    def filter(self, record):
        if rules():
            record.msg = redact(str(record.getMessage()))
            record.args = None
        return True
