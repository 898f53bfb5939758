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

import base64
import bisect
import html.entities
import re
import sys

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()
REDACTED_UTF16 = REDACTED.encode("utf-16-le")
FRAGMENT_MIN = 8
# Hex digits: as many of a secret's bytes as FRAGMENT_MIN characters (8 hex digits would be
# 32 bits, which hex ids on a page match by chance).
HEX_MIN = 2 * FRAGMENT_MIN
# Base64 and hex copies and credential shapes are looked for in runs of key (or base64)
# characters this long or longer, and there base64 copies as fragments of FRAGMENT_MIN.
LONG_RUN = 16
SHAPE_MIN_CHARS = 20
# Characters of a credential's shape, and of every key-like secret: always decoded from escapes.
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# A streamed body holds back at most this much of a possible secret's beginning.
MAX_HOLD = 8192
_RUN_CACHE_MAX = 4096
_RUN_CACHE_RUN_MAX = 96
# How a span is written: PLAIN (as text, escapes, …) or SPREAD (UTF-16: one NUL a character).
PLAIN, SPREAD = "plain", "spread"


# ---- the rules -------------------------------------------------------------------------------


class Rules:
    """An immutable set of secrets and shapes, and how to find them. Works on bytes (UTF-8 for
    text): C-speed scans (`bytes.translate`, `find`, `in`) decide where to look, so text without
    a secret costs a few passes at memory speed."""

    def __init__(self, secrets, prefixes):
        secrets = {s for s in secrets if isinstance(s, str) and len(s) >= FRAGMENT_MIN}
        self.secrets = tuple(sorted(secrets, key=len, reverse=True))
        self.prefixes = tuple(p for p in prefixes if len(p) >= 2)
        raw = [s.encode("utf-8", "surrogatepass") for s in self.secrets]
        # what is looked for: each secret lower-cased (ASCII: lengths stay, so positions do),
        # its base64 cores as they are (an encoding is not re-cased), its hex lower-cased
        plain = {s.lower() for s in raw}
        cores = {c for s in raw for c in base64_cores(s)}
        hexes = {s.hex().encode() for s in raw}
        self.grams = frozenset(_grams(plain, FRAGMENT_MIN))
        self.base64_grams = frozenset(_grams(cores, FRAGMENT_MIN))
        self.hex_grams = frozenset(_grams(hexes, HEX_MIN))
        self.quads, self.base64_quads, self.hex_quads = _quads(plain), _quads(cores), _quads(hexes)
        # one C-speed pass classifies every byte: 1 a secret's (in either case), 2-5 the first
        # bytes of escapes and URL credentials (when no secret has them), 6 NUL (the other
        # half of UTF-16), 0 anything else; `find` on that locates runs of FRAGMENT_MIN
        letters = _both_cases(b"".join(plain))
        self.table = bytes(1 if b in letters else _SPECIAL.get(b, 0) for b in range(256))
        self.run = b"\x01" * FRAGMENT_MIN if self.grams else b""
        self.special = {b: code for b, code in _SPECIAL.items() if b not in letters}
        # a second pass finds runs of key characters (and base64's) of LONG_RUN or more: where
        # base64 and hex copies and credential shapes are looked for. Ordinary words and JSON
        # names are shorter; a run of any 8 letters would be most words of a page.
        base64_chars = b"".join(cores) + _BASE64_SYMBOLS
        long_chars = _both_cases(_KEY_BYTES + base64_chars + "".join(self.prefixes).encode())
        self.long_table = bytes(1 if b in long_chars else 0 for b in range(256))
        shape_min = min((len(p.encode()) + SHAPE_MIN_CHARS for p in self.prefixes), default=0)
        self.long_run = b"\x01" * (LONG_RUN if self.secrets else shape_min)
        # what escapes are decoded to: whatever a run may hold, and NUL (UTF-16 in JSON text)
        decoded = {chr(b) for b in letters | long_chars if b < 0x80} | set("".join(self.secrets))
        if self.grams:
            decoded.add("\x00")
        self.decodes = frozenset(decoded)
        self.holds = frozenset(letters | long_chars)
        self.shapes = tuple(
            (
                p.lower().encode(),
                len(p.encode()) + SHAPE_MIN_CHARS,
                re.compile(re.escape(p.lower().encode()) + rb"[a-z0-9_\-]{%d,}" % SHAPE_MIN_CHARS),
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
        # run -> ((start, end), …) to redact in it, merged: runs already judged, by kind
        self._runs, self._long_runs = {}, {}

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
        """((start, end), …) of fragments in a run of secret characters (in any case)."""
        found = self._runs.get(run)
        if found is None:
            marks = _windows(run.lower(), self.grams, self.quads, FRAGMENT_MIN)
            found = _remember(self._runs, run, marks)
        return found

    def _long_run_marks(self, run):
        """((start, end), …) of base64 and hex copies and credential shapes in a run of key
        (or base64) characters of LONG_RUN or more."""
        marks = _windows(run, self.base64_grams, self.base64_quads, FRAGMENT_MIN)
        low = run.lower()
        marks += _windows(low, self.hex_grams, self.hex_quads, HEX_MIN)
        n = len(low)
        for prefix, least, pattern in self.shapes:
            if n >= least and prefix in low:
                for m in pattern.finditer(low):
                    s = m.start()
                    # (the byte before the run is none of the key characters)
                    if s == 0 or low[s - 1] not in _ALNUM:
                        marks.append(m.span())
        return _remember(self._long_runs, run, marks)

    def _spread(self, decoded, kinds, spans):
        """Secrets with a NUL after (UTF-16LE) or before (UTF-16BE) each character: runs of
        FRAGMENT_MIN or more secret characters one NUL apart, read without the NULs."""
        i = kinds.find(_SPREAD_RUN)
        while i >= 0:
            j = _SPREAD.match(kinds, i).end()
            for s, e in self._run_marks(decoded[i:j:2]):
                spans.append((i + 2 * s, i + 2 * e - 1, SPREAD))
            i = kinds.find(_SPREAD_RUN, j)

    def marks(self, decoded, kinds):
        """Spans of `decoded` (classified as `kinds`) to redact: (start, end, how), `how` PLAIN
        for the fragments of known secrets, their copies and credential shapes, SPREAD for
        UTF-16 ones."""
        spans = []
        if self.run:
            _runs(decoded, kinds, self.run, self._runs, self._run_marks, spans)
            if b"\x06" in kinds:
                self._spread(decoded, kinds, spans)
        if self.long_run:
            kinds = decoded.translate(self.long_table)
            _runs(decoded, kinds, self.long_run, self._long_runs, self._long_run_marks, spans)
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
        spans = []
        for s, e, how in self.marks(decoded, decoded_kinds):
            s, e = self.to_data(s, escapes), self.to_data(e, escapes)
            spans.append((s, e, REDACTED_BYTES) if how is PLAIN else _utf16_span(data, s, e))
        if self._has(0x40, kinds, data) and b"://" in data:
            spans.extend((*m.span(1), REDACTED_BYTES) for m in _USERINFO.finditer(data))
        hold = len(data)
        if tail:
            hold = self._hold_point(data, decoded, decoded_kinds, escapes)
            for s, e, _ in spans:
                if s < hold < e:
                    hold = s
            spans = [span for span in spans if span[1] <= hold]
        if not spans:
            return (data if hold == len(data) else data[:hold]), hold
        spans.sort()
        out, last = [], 0
        for s, e, replacement in spans:
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
                out.append(replacement)
            last = e
        out.append(data[last:hold])
        return b"".join(out), hold

    def _hold_point(self, data, decoded, kinds, escapes):
        hold = end = len(data)
        partial = _PARTIAL_ESCAPE.search(data, max(0, len(data) - 40))
        if partial:
            hold = end = partial.start()
        # the run of secret (or key) characters that ends the data, or meets the unfinished
        # escape: shorter than LONG_RUN, all of it (it may yet become a run long enough to hold
        # a base64 or hex copy); longer, its last LONG_RUN bytes (a fragment may begin there,
        # and they stay a long run whatever follows); from a shape's prefix on, all of it (a
        # credential). Without secrets, its last FRAGMENT_MIN - 1 bytes. Of a UTF-16 run, its
        # last FRAGMENT_MIN - 1 characters.
        d_end = self.to_decoded(end, escapes)
        holds = self.holds
        i = d_end
        while i > 0 and decoded[i - 1] in holds and d_end - i < MAX_HOLD:
            i -= 1
        start = d_end
        if i < d_end or partial:
            if self.secrets:
                start = i if d_end - i < LONG_RUN else d_end - LONG_RUN
            else:
                start = max(i, d_end - (FRAGMENT_MIN - 1))
            run = decoded[i:d_end].lower()
            for prefix, _, _ in self.shapes:
                at = run.find(prefix)
                if at >= 0:
                    start = min(start, i + at)
        if self.grams and b"\x06" in kinds:
            at = max(0, d_end - 2 * FRAGMENT_MIN)
            spread = _SPREAD_TAIL.search(kinds, at, d_end)
            if spread:
                start = min(start, max(spread.start(), d_end - 2 * (FRAGMENT_MIN - 1)))
        if start < d_end or partial:
            hold = min(hold, self.to_data(start, escapes))
        return hold


def base64_cores(data: bytes):
    """The parts of `data`'s base64 that do not depend on the bytes around it, at each of the
    three alignments it may have inside a longer encoding, in both alphabets (RFC 4648 base64
    and base64url)."""
    cores = []
    for pad in range(3):
        encoded = base64.b64encode(bytes(pad) + data)
        # character k spells bits 6k..6k+5 of the input: those inside `data`'s bits
        core = encoded[-(-8 * pad // 6) : 8 * (pad + len(data)) // 6]
        cores += [core, core.translate(_URLSAFE)]
    return cores


def _grams(texts, n):
    return {t[i : i + n] for t in texts for i in range(len(t) - n + 1)}


def _quads(texts):
    """The 4-grams of `texts` as the integers a memoryview cast to "I" reads: each window of
    4 or more characters of a run holds one at a multiple of 4 from the run's start, so a run
    none of whose aligned 4-grams is here holds no fragment (one C-level `isdisjoint`)."""
    return frozenset(memoryview(q).cast("I")[0] for q in _grams(texts, 4))


def _both_cases(data):
    return set(data) | set(data.lower()) | set(data.upper())


def _windows(text, grams, quads, n):
    """[(start, end)] of the `n`-windows of `text` in `grams`."""
    size = len(text)
    if not grams or size < n:
        return []
    if size <= _RUN_CACHE_RUN_MAX:
        starts = range(size - n + 1)
    else:  # (a long run, e.g. a base64 blob: only around the aligned 4-grams found)
        aligned = memoryview(text)[: size & ~3].cast("I")
        if quads.isdisjoint(aligned):
            return []
        starts = set()
        for q in quads.intersection(aligned):
            quad = q.to_bytes(4, sys.byteorder)
            p = text.find(quad)
            while p >= 0:
                starts.update(range(max(0, p + 4 - n), min(p, size - n) + 1))
                p = text.find(quad, p + 1)
        starts = sorted(starts)
    return [(i, i + n) for i in starts if text[i : i + n] in grams]


def _runs(decoded, kinds, pattern, cache, judge, spans):
    """Adds to `spans` the marks (`judge`'s, or `cache`'s) of each run of `decoded` whose
    `kinds` begin with `pattern` (a run of 1s)."""
    find, size = kinds.find, len(decoded)
    i = find(pattern)
    while i >= 0:
        j = find(b"\x00", i)
        if j < 0:
            j = size
        run = decoded[i:j]
        found = cache.get(run)
        if found is None:
            found = judge(run)
        if found:
            spans.extend((i + s, i + e, PLAIN) for s, e in found)
        i = find(pattern, j)


def _remember(cache, run, marks):
    found = tuple(_merged(marks))
    if len(run) <= _RUN_CACHE_RUN_MAX:
        if len(cache) >= _RUN_CACHE_MAX:
            cache.clear()
        cache[run] = found
    return found


def _merged(spans):
    out = []
    for s, e in sorted(spans):
        if out and out[-1][1] >= s:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _utf16_span(data, s, e):
    """A UTF-16 secret's span in `data` (its characters and the NULs between them) and what
    replaces it: as NUL bytes in the data, `[redacted]` in UTF-16 starting at a character
    (the span takes the NUL after its last character, so the text stays in step in either
    byte order); written as escapes, plain `[redacted]`."""
    if b"\x00" not in data[s:e]:
        return s, e, REDACTED_BYTES
    if e < len(data) and data[e] == 0:
        return s, e + 1, REDACTED_UTF16
    return s, e, REDACTED_UTF16[:-1]


_SPECIAL = {0x5C: 2, 0x25: 3, 0x26: 4, 0x40: 5, 0x00: 6}  # \\ % & @ NUL
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_KEY_BYTES = "".join(sorted(KEY_CHARS)).encode()
# (base64's letters besides KEY_CHARS: a copy inside a blob runs on through them)
_BASE64_SYMBOLS = b"+/"
# A UTF-16 run: FRAGMENT_MIN or more secret characters, one NUL between each two.
_SPREAD_RUN = b"\x01\x06" * (FRAGMENT_MIN - 1) + b"\x01"
_SPREAD = re.compile(rb"\x01(?:\x06\x01)*")
_SPREAD_TAIL = re.compile(rb"\x01(?:\x06\x01)*\x06?\Z")
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
