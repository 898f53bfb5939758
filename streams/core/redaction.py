"""Taking secrets out of text and bytes: the rules, pure (no settings, no database).

`Rules(secrets, shapes)` redacts a text or bytes whole; `StreamRedactor(rules)` does it for a
body in pieces, holding back what may be a secret's beginning. Which secrets there are is
`streams.store.known_secrets`'s; where they are applied, the egress gate's
(streams/serve/egress.py).

What is a secret to the rules:
- known secrets, redacted whole **and as any fragment of FRAGMENT_MIN or more characters**, so
  a key an upstream cut across two deltas, two chunks or two table cells never leaves in pieces;
- credentials by their shape, for keys nobody told us about: a configured prefix (`sk-`) not
  preceded by a letter or digit, then SHAPE_MIN_CHARS or more key characters;
- the password part of a URL's userinfo (`scheme://user:pass@`).

Each rule sees the text as a reader would decode it: characters of a secret written as JSON
`\\uXXXX` escapes (behind any number of backslashes), URL `%XX` escapes or HTML character
references count as the characters they spell (`Rules.decode`), and the whole escape goes.

How it stays cheap: a text is cut into runs of the secrets' characters (one C-level regex
scan); only runs of FRAGMENT_MIN or more are looked at, each FRAGMENT_MIN-character window
against a set of the secrets' windows, with a bounded cache of runs already judged (JSON keys
and HTML names repeat). Escapes are decoded only where an escape of a secret character is
present. docs/security.md has the measured cost.
"""

from __future__ import annotations

import bisect
import html.entities
import re

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()
FRAGMENT_MIN = 8
SHAPE_MIN_CHARS = 20
# Characters of a credential's shape, and of every key-like secret: always decoded from escapes.
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# A streamed body holds back at most this much of a possible secret's beginning.
MAX_HOLD = 8192
_RUN_CACHE_MAX = 4096
_RUN_CACHE_RUN_MAX = 96


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
