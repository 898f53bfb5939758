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
import base64
import bisect
import functools
import html.entities
import logging
import re
import threading
import time
from urllib.parse import unquote

from django.conf import settings

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()
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

log = logging.getLogger(__name__)


# ---- the rules -------------------------------------------------------------------------------


class Rules:
    """An immutable set of secrets and shapes, and how to find them. Works on bytes (UTF-8 for
    text): C-speed scans (`bytes.translate`, `find`, `in`) decide where to look, so text without
    a secret costs a few passes at memory speed."""

    def __init__(self, secrets, prefixes):
        secrets = {s for s in secrets if isinstance(s, str) and len(s) >= FRAGMENT_MIN}
        self.secrets = tuple(sorted(secrets, key=len, reverse=True))
        raw = [s.encode("utf-8", "surrogatepass") for s in self.secrets]
        self.grams = frozenset(
            s[i : i + FRAGMENT_MIN] for s in raw for i in range(len(s) - FRAGMENT_MIN + 1)
        )
        self.prefixes = tuple(p for p in prefixes if len(p) >= 2)
        alphabet = set(b"".join(raw))
        # one C-speed pass classifies every byte: 1 a secret's, 2-5 the first bytes of escapes
        # and URL credentials (when no secret has them), 0 anything else
        self.table = bytes(1 if b in alphabet else _SPECIAL.get(b, 0) for b in range(256))
        self.run = b"\x01" * FRAGMENT_MIN
        self.special = {b: code for b, code in _SPECIAL.items() if b not in alphabet}
        # what escapes are decoded to: a secret's characters, and a shape's
        decoded = set().union(*self.secrets) if self.secrets else set()
        if self.prefixes:
            decoded |= KEY_CHARS
        self.decodes = frozenset(decoded)
        self.holds = frozenset(alphabet | ({ord(c) for c in KEY_CHARS} if self.prefixes else set()))
        self.shapes = tuple(
            (
                p.encode(),
                re.compile(re.escape(p.encode()) + rb"[A-Za-z0-9_\-]{%d,}" % SHAPE_MIN_CHARS),
            )
            for p in self.prefixes
        )
        # named references of a secret's characters or of escape syntax (`&lowbar;`, `&amp;`),
        # behind any number of `&amp;`s: one pass decodes what HTML escaped twice
        self.named = {
            name[:-1].encode(): value.encode()
            for name, value in html.entities.html5.items()
            if (value in decoded or value in _SYNTAX)
            and name.endswith(";")
            and name.lower() != "amp;"  # (a prefix of the others; alone it spells nothing)
        }
        self.named_re = (
            re.compile(
                rb"&(?:amp;)*("
                + b"|".join(re.escape(n) for n in sorted(self.named, key=len, reverse=True))
                + rb");"
            )
            if self.named
            else None
        )
        self._runs = {}  # run -> ((start, end), …) of fragments in it, merged

    def __bool__(self):
        return bool(self.secrets or self.prefixes)

    # -- decoding ---------------------------------------------------------------------------

    def _has(self, byte, kinds, data):
        """Whether `data` (classified as `kinds`) holds `byte`: a memchr on `kinds`."""
        code = self.special.get(byte)
        return bytes((code,)) in kinds if code is not None else bytes((byte,)) in data

    def decode(self, data, kinds):
        """(decoded bytes, chain): `data` with every escape of a secret's character replaced by
        that character (UTF-8), escapes nested in each other included (`&amp;#115;`, `%2573`,
        or a JSON `\\u0026` that makes `&#115;`: up to DECODE_PASSES deep). `chain` lists, per
        pass, (decoded position, data position, data length, decoded length) of each escape,
        for mapping back; None when nothing was decoded. `kinds` is `data` translated by
        `table`."""
        chain = []
        for _ in range(DECODE_PASSES):
            found = self._found(data, kinds)
            if not found:
                break
            found.sort()
            pieces, escapes, last, shift, nested = [], [], 0, 0, False
            for start, end, ch in found:
                if start < last:
                    continue
                pieces.append(data[last:start])
                pieces.append(ch)
                escapes.append((start - shift, start, end - start, len(ch)))
                shift += end - start - len(ch)
                last = end
                nested = nested or ch in _SYNTAX_BYTES
            pieces.append(data[last:])
            data = b"".join(pieces)
            chain.append(escapes)
            if not nested:
                break
            kinds = data.translate(self.table)
        return data, (chain or None)

    def _found(self, data, kinds):
        found = []
        if self._has(0x5C, kinds, data) and b"\\u" in data:
            found += self._escapes(_ESC_JSON, data, lambda m: chr(int(m.group()[-4:], 16)))
        if self._has(0x25, kinds, data):
            found += self._escapes(_ESC_URL, data, lambda m: chr(int(m.group()[-2:], 16)))
        if self._has(0x26, kinds, data):
            if b"#" in data:
                found += self._escapes(_ESC_NUMBER, data, _number_reference)
            for m in self.named_re.finditer(data) if self.named_re is not None else ():
                found.append((m.start(), m.end(), self.named[m.group(1)]))
        return found

    def _escapes(self, pattern, data, char):
        out = []
        for m in pattern.finditer(data):
            try:
                ch = char(m)
            except (ValueError, OverflowError):
                continue
            if ch in self.decodes or ch in _SYNTAX:
                out.append((m.start(), m.end(), ch.encode("utf-8", "surrogatepass")))
        return out

    @staticmethod
    def to_data(pos, chain):
        """A position (or a span's end) in the decoded bytes, in the bytes they came from."""
        for escapes in reversed(chain or ()):
            i = bisect.bisect_right(escapes, (pos, float("inf"))) - 1
            if i >= 0:
                d, t, tn, dn = escapes[i]
                pos = t if pos < d + dn else t + tn + (pos - d - dn)
        return pos

    @staticmethod
    def to_decoded(pos, chain):
        """A position in the bytes, in the decoded bytes (inside an escape: the escape's)."""
        for escapes in chain or ():
            i = bisect.bisect_right([e[1] for e in escapes], pos) - 1
            if i >= 0:
                d, t, tn, dn = escapes[i]
                pos = d if pos < t + tn else d + dn + (pos - t - tn)
        return pos

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

    def marks(self, decoded, kinds):
        """Spans of `decoded` (classified as `kinds`) to redact: fragments of known secrets,
        credential shapes."""
        spans = []
        if self.grams:
            i = kinds.find(self.run)
            while i >= 0:
                j = kinds.find(b"\x00", i)
                if j < 0:
                    j = len(decoded)
                spans.extend((i + s, i + e) for s, e in self._run_marks(decoded[i:j]))
                i = kinds.find(self.run, j)
        for prefix, pattern in self.shapes:
            if prefix in decoded:
                for m in pattern.finditer(decoded):
                    s = m.start()
                    if s == 0 or decoded[s - 1] not in _ALNUM:
                        spans.append(m.span())
        return spans

    # -- redacting --------------------------------------------------------------------------

    def text(self, text):
        """`text` (a str) redacted; the same object when nothing was."""
        data = text.encode("utf-8", "surrogatepass")
        out, _ = self.apply(data, tail=False)
        return text if out is data else out.decode("utf-8", "surrogatepass")

    def bytes(self, data):
        return self.apply(data, tail=False)[0]

    def apply(self, data, tail):
        """(`data` redacted up to the hold point, the hold point). With `tail`, the end of
        `data` that could still begin a secret is held back (its continuation decides); when
        nothing is redacted nor held, the first item is `data` itself."""
        kinds = data.translate(self.table)
        decoded, escapes = self.decode(data, kinds)
        decoded_kinds = kinds if escapes is None else decoded.translate(self.table)
        spans = [
            (self.to_data(s, escapes), self.to_data(e, escapes))
            for s, e in self.marks(decoded, decoded_kinds)
        ]
        if self._has(0x40, kinds, data) and b"://" in data:
            spans.extend(m.span(1) for m in _USERINFO.finditer(data))
        hold = len(data)
        if tail:
            hold = self._hold_point(data, decoded, escapes)
            for s, e in spans:
                if s < hold < e:
                    hold = s
            spans = [(s, e) for s, e in spans if e <= hold]
        if not spans:
            return (data if hold == len(data) else data[:hold]), hold
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
                while b > last and data[b - 1] == 0x5C:
                    b -= 1
                if (s - b) % 2:
                    s -= 1
                out.append(data[last:s])
                out.append(REDACTED_BYTES)
            last = e
        out.append(data[last:hold])
        return b"".join(out), hold

    def _hold_point(self, data, decoded, escapes):
        hold = end = len(data)
        partial = _PARTIAL_ESCAPE.search(data, max(0, len(data) - 40))
        if partial:
            hold = end = partial.start()
        # the run of secret (or key) characters that ends the data, or meets the unfinished
        # escape: its last FRAGMENT_MIN - 1 bytes may begin a fragment; from a shape's prefix
        # on, all of it may be a credential
        d_end = self.to_decoded(end, escapes)
        holds = self.holds
        i = d_end
        while i > 0 and decoded[i - 1] in holds and d_end - i < MAX_HOLD:
            i -= 1
        if i < d_end or partial:
            run = decoded[i:d_end]
            start = max(i, d_end - (FRAGMENT_MIN - 1))
            for prefix, _ in self.shapes:
                at = run.find(prefix)
                if at >= 0:
                    start = min(start, i + at)
            hold = min(hold, self.to_data(start, escapes))
        return hold


_SPECIAL = {0x5C: 2, 0x25: 3, 0x26: 4, 0x40: 5}  # \\ % & @
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
# Escapes, each behind a literal first byte so that the regex engine skips to it at C speed.
_ESC_JSON = re.compile(rb"\\+u[0-9a-fA-F]{4}")
_ESC_URL = re.compile(rb"%(?:25)*[0-9a-fA-F]{2}")  # (`%2573`: `%73` URL-encoded again)
_ESC_NUMBER = re.compile(rb"&(?:amp;)*#(?:[0-9]{1,7}|[xX][0-9a-fA-F]{1,6});?")
# Characters escapes are written with: an escape that makes one may begin another.
_SYNTAX = frozenset("&#;%\\")
_SYNTAX_BYTES = frozenset(c.encode() for c in _SYNTAX)
DECODE_PASSES = 4
# The password of a URL's userinfo (`scheme://user:password@`).
_USERINFO = re.compile(rb"://([^/?#@\s\"'\\<>:]*:[^/?#@\s\"'\\<>]+)@")


def _number_reference(m):
    s = m.group()
    s = s[s.index(b"#") + 1 :].rstrip(b";")
    return chr(int(s[1:], 16) if s[:1] in (b"x", b"X") else int(s))


# The end of a chunk that may be the beginning of an escape.
_PARTIAL_ESCAPE = re.compile(
    rb"(?:\\+(?:u[0-9a-fA-F]{0,3})?|%[0-9a-fA-F]?|&#?[xX]?[0-9a-fA-F]*|&[A-Za-z]{0,31})\Z"
)


class StreamRedactor:
    """Redacts a body that leaves in chunks: what could be the beginning of a secret is held
    back until the next chunk says (an event stream's chunks end in a blank line: nothing is
    held). Bytes in, bytes out: data that is not UTF-8 passes as it came."""

    def __init__(self, rules):
        self.rules = rules
        self.held = b""

    def feed(self, chunk: bytes, final=False) -> bytes:
        data = self.held + chunk if self.held else chunk
        out, hold = self.rules.apply(data, tail=not final)
        self.held = data[hold:]
        return out

    def close(self) -> bytes:
        return self.feed(b"", final=True)


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


class LogFilter(logging.Filter):
    """Log lines are an exit too: their message and arguments lose any secret."""

    def filter(self, record):
        try:
            if rules():
                record.msg = redact(str(record.getMessage()))
                record.args = None
        except Exception:  # a log call with the wrong arguments: logging reports it itself
            pass
        return True
