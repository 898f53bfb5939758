"""Taking secrets out of text and bytes: the rules, pure (no settings, no database).

`Rules(secrets, shapes)` redacts a text or bytes whole; `StreamRedactor(rules)` does it for a
body in pieces, holding back what may be a secret's beginning. Which secrets there are is
`streams.store.known_secrets`'s; where they are applied, the egress gate's
(streams/serve/egress.py).

What is a secret to the rules:
- known secrets, redacted whole **and as any piece holding FRAGMENT_MIN or more characters of
  the secret's private core** (`private_core`: all but a public prefix and the last 4), so a
  key an upstream cut across two deltas, two chunks or two table cells does not leave in
  pieces; a hit runs on over the rest of the secret (`_fragments`), so the whole key goes as
  one. Not every FRAGMENT_MIN characters: a page that shows a person's own text back would
  then answer whether a guess after a key's public prefix is its next character (the echo
  oracle, docs/security.md). In any case (`SK-…`, `Sk-…`: ASCII letters are compared
  lower-cased), and copied:
  - as UTF-16 (a NUL after or before each character), in bytes or in text;
  - as hex (HEX_MIN digits that spell FRAGMENT_MIN whole bytes of it), in either case;
  - as base64 (standard or URL-safe, at any alignment: inside `Basic …`, a `data:` URL, a
    JWT), from LONG_RUN characters on;
- credentials by their shape, for keys nobody told us about: a configured prefix (`sk-`, in
  any case) not preceded by a letter or digit, then SHAPE_MIN_CHARS or more key characters;
- the password part of a URL's userinfo (`scheme://user:pass@`).

Each rule sees the text as a reader would decode it: characters of a secret written as JSON
`\\uXXXX` escapes (behind any number of backslashes), URL `%XX` escapes or HTML character
references count as the characters they spell (`Rules.decode`), and the whole escape goes.
Hex and base64 are read back as the bytes they spell, which are searched like text; what
spells a fragment goes, whole characters.

How it stays cheap: one C-level pass (`bytes.translate`) classifies every byte and `find`
cuts the text into runs of the secrets' characters (in either case); only runs of
FRAGMENT_MIN or more are looked at, each FRAGMENT_MIN-character window against a set of the
cores' windows (a hit alone looks up its secret and extends), with a bounded cache of runs
already judged (JSON keys and HTML names repeat). A second pass finds runs of LONG_RUN or
more key or base64 characters, the only places a hex or base64 copy or a credential shape can
be: ordinary words are shorter. Long runs (a base64 image) are judged block by block behind
a C-level test of their 4-grams, and the bytes they spell behind the first pass's
classification (decoded random bytes seldom hold 8 key characters in a row). Escapes are
decoded only where an escape of a secret character is present. docs/performance.md has the
measured cost.
"""

from __future__ import annotations

import binascii
import bisect
import html.entities
import re

REDACTED = "[redacted]"
REDACTED_BYTES = REDACTED.encode()
REDACTED_UTF16 = REDACTED.encode("utf-16-le")
FRAGMENT_MIN = 8
# A secret's public parts, which are no fragment material (docs/security.md, "The egress
# gate"): its leading segments of letters and digits ending in `-` or `_` (`sk-`, `proj-`,
# `ant-`, `api03-`, `test_`), each of at most PUBLIC_SEGMENT_MAX characters, together at most
# PUBLIC_LEAD_MAX; and its last PUBLIC_LAST characters (key dashboards show them, `sk-…abcd`).
PUBLIC_SEGMENT_MAX = 12
PUBLIC_LEAD_MAX = 16
PUBLIC_LAST = 4
# Hex and base64 copies count as the bytes they spell, and a fragment is FRAGMENT_MIN whole
# bytes: HEX_MIN digits from a byte's first digit (one more from anywhere); in base64, at
# most LONG_RUN characters from anywhere (3 whole groups of 4, 9 bytes).
HEX_MIN = 2 * FRAGMENT_MIN
# Hex and base64 copies and credential shapes are looked for in runs of key (or base64)
# characters this long or longer (a piece of a copy standing alone counts from here).
LONG_RUN = 16
SHAPE_MIN_CHARS = 20
# Characters of a credential's shape, and of every key-like secret: always decoded from escapes.
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
# A streamed body holds back at most this much of a possible secret's beginning.
MAX_HOLD = 8192
_RUN_CACHE_MAX = 4096
_RUN_CACHE_RUN_MAX = 96
_WHERE_MAX = 65536
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
        # what is looked for: the FRAGMENT_MIN-grams of each secret's private core (see
        # `private_core`), lower-cased (ASCII: lengths stay, so positions do), in a text as it
        # is, in the bytes a run of hex digits or of base64 spells, and in a UTF-16 run without
        # its NULs; a hit is then extended over the rest of the secret (`_fragments`)
        cores = {}  # a secret's bytes, lower-cased -> its core's (start, end) in them
        for s in self.secrets:
            low = _utf8(s).lower()
            start, end = private_core(s)
            cores[low] = (len(_utf8(s[:start])), len(low) - len(_utf8(s[end:])))
        plain = list(cores)
        core_texts = [low[a:b] for low, (a, b) in cores.items()]
        self.grams = frozenset(_grams(core_texts, FRAGMENT_MIN))
        self.quads = _quads(core_texts)
        # where a gram is in which secret: found on a hit (hits are where secrets are), in
        # this one text of the secrets, and remembered (a dict of every gram would cost half
        # as much memory again as the set, with 10,000 pass-through keys); `repeated`: the
        # grams that are in more than one place (secrets that share 8 characters, such as a
        # URL's password and its userinfo), which a hit inside an extended span looks up too
        self.corpus = b"\n".join(plain)
        self.starts = [0]
        for low in plain[:-1]:
            self.starts.append(self.starts[-1] + len(low) + 1)
        self.plain = plain
        self._where = {}
        self.repeated = _repeated(plain, self.grams)
        # how far before a hit its extension may begin: a streamed body holds back enough of
        # a run's end for a hit in the next chunk to extend over a public prefix (`_hold_point`)
        self.lead = max((a for a, _ in cores.values()), default=0)
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
        long_chars = letters | _both_cases(
            _KEY_BYTES + _BASE64_SYMBOLS + "".join(self.prefixes).encode()
        )
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
        # run -> ((start, end, context), …) to redact in it, merged: runs already judged
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
        """((start, end, context), …) of fragments in a run of secret characters (in any
        case); `context`: where what decides the mark begins (see `_long_run_spans`)."""
        found = self._runs.get(run)
        if found is None:
            marks = [(s, e, s) for s, e in self._fragments(run.lower())]
            found = _remember(self._runs, run, marks)
        return found

    def _fragments(self, low):
        """[(start, end)] of the fragments in `low` (lower-cased bytes): each hit of a core
        gram aligns its secret there, and the span runs on, left and right, over what equals
        the aligned secret, up to the secret's ends. So a whole key goes as one, its public
        prefix and last characters with it, and a piece with its public neighbours; a piece
        holding fewer than FRAGMENT_MIN characters of a core matches nothing (the prefix and
        the last characters are what anyone may know: a match on them would answer a guess of
        the next character, docs/security.md)."""
        spans, done, reach = [], set(), 0
        size, plain, repeated = len(low), self.plain, self.repeated
        for i in _windows(low, self.grams, self.quads):
            gram = low[i : i + FRAGMENT_MIN]
            # (inside the span just extended, a gram in one place only is that secret's, at
            # that alignment: nothing new)
            if i + FRAGMENT_MIN <= reach and gram not in repeated:
                continue
            for k, offset in self._places(gram):
                if (k, i - offset) in done:  # (the same alignment, already extended)
                    continue
                done.add((k, i - offset))
                secret = plain[k]
                a, o = i, offset
                while a > 0 and o > 0 and low[a - 1] == secret[o - 1]:
                    a, o = a - 1, o - 1
                b, o = i + FRAGMENT_MIN, offset + FRAGMENT_MIN
                end = min(len(secret), size - i + offset)
                while o < end and low[b] == secret[o]:
                    b, o = b + 1, o + 1
                spans.append((a, b))
                reach = max(reach, b)
        return spans

    def _places(self, gram):
        """((secret's index, offset), …) of every place `gram` is in a secret."""
        found = self._where.get(gram)
        if found is None:
            places, corpus, at = [], self.corpus, self.corpus.find(gram)
            while at >= 0:
                k = bisect.bisect_right(self.starts, at) - 1
                offset = at - self.starts[k]
                if offset + FRAGMENT_MIN <= len(self.plain[k]):  # (not across two secrets)
                    places.append((k, offset))
                at = corpus.find(gram, at + 1)
            if len(self._where) >= _WHERE_MAX:
                self._where.clear()
            found = self._where[gram] = tuple(places)
        return found

    def _long_run_marks(self, run):
        """((start, end, context), …) of fragments, hex and base64 copies and credential
        shapes in a run of key (or base64) characters of LONG_RUN or more."""
        found = self._long_runs.get(run)
        if found is None:
            found = _remember(self._long_runs, run, self._long_run_spans(run))
        return found

    def _long_run_spans(self, run):
        """[(start, end, context)] in the run: fragments as written, hex and base64 copies,
        credential shapes. `context`: where what decides the mark begins (a stream holds it
        back with the mark)."""
        low = run.lower()
        marks = []
        if self.grams:
            marks += [(s, e, s) for s, e in self._fragments(low)]
            marks += self._hex_copies(low)
            marks += self._base64_copies(run)
        n = len(low)
        for prefix, least, pattern in self.shapes:
            if n >= least and prefix in low:
                for m in pattern.finditer(low):
                    s = m.start()
                    # (the byte before the run is none of the key characters)
                    if s == 0 or low[s - 1] not in _ALNUM:
                        marks.append((s, m.end(), s))
        return marks

    def _hex_copies(self, low):
        """Stretches of HEX_MIN or more hex digits read as bytes (at both digit parities):
        the digits that spell a fragment."""
        marks = []
        kinds = low.translate(_HEX_TABLE)
        at = kinds.find(_HEX_RUN)
        while at >= 0:
            end = kinds.find(b"\x00", at)
            end = len(low) if end < 0 else end
            for p in range(2):
                data = binascii.unhexlify(low[at + p : end - (end - at - p) % 2])
                for s, e in self._spelled(data):
                    marks.append((at + p + 2 * s, at + p + 2 * e, at + p + 2 * s))
            at = kinds.find(_HEX_RUN, end)
        return marks

    def _base64_copies(self, run):
        """The run read as base64 (either alphabet) from each of its first four characters, a
        last group of 2 or 3 characters too: the characters that spell a fragment, and from
        the first of its first group on (a stream holds that back with it: the group is what
        decides)."""
        marks = []
        # Read stretch by stretch of base64's alphabet: a run also takes in any character of a
        # secret (a space, a colon), which the decoder would skip, shifting every group after
        # it (one secret holding a space switched off base64 copies around words).
        for m in _BASE64_STRETCH.finditer(run.translate(_STANDARD)):
            at = m.start()
            marks += [(at + s, at + e, at + c) for s, e, c in self._base64_stretch(m.group())]
        return marks

    def _base64_stretch(self, standard):
        marks = []
        for q in range(4):
            chunk = standard[q:]
            tail = len(chunk) % 4  # (2 or 3 characters spell 1 or 2 bytes; 1 spells none)
            chunk = chunk[:-1] if tail == 1 else chunk + b"=" * (-tail % 4)
            try:
                data = binascii.a2b_base64(chunk)
            except binascii.Error:  # (a prefix's character in the run: no base64)
                continue
            for s, e in self._spelled(data):
                marks.append((q + 8 * s // 6, q - (-8 * e // 6), q + s // 3 * 4))
        return marks

    def _spelled(self, data):
        """[(start, end)] of fragments in bytes a run spells, found as in text: in runs of
        secret characters, and UTF-16 ones (base64 of UTF-16 is how PowerShell takes a
        command). Bytes decoded from random base64 seldom hold 8 secret characters in a row,
        so the C-level pass rules most of them out."""
        kinds, marks = data.translate(self.table), []
        i = kinds.find(self.run)
        while i >= 0:
            j = kinds.find(b"\x00", i)
            if j < 0:
                j = len(data)
            marks += [(i + s, i + e) for s, e in self._fragments(data[i:j].lower())]
            i = kinds.find(self.run, j)
        if b"\x06" in kinds:
            spread = []
            self._spread(data, kinds, spread)
            marks += [(s, e) for s, e, _, _ in spread]
        return marks

    def _spread(self, decoded, kinds, spans):
        """Secrets with a NUL after (UTF-16LE) or before (UTF-16BE) each character: runs of
        FRAGMENT_MIN or more secret characters one NUL apart, read without the NULs."""
        i = kinds.find(_SPREAD_RUN)
        while i >= 0:
            j = _SPREAD.match(kinds, i).end()
            for s, e, _ in self._run_marks(decoded[i:j:2]):
                spans.append((i + 2 * s, i + 2 * e - 1, SPREAD, i + 2 * s))
            i = kinds.find(_SPREAD_RUN, j)

    def marks(self, decoded, kinds):
        """Spans of `decoded` (classified as `kinds`) to redact: (start, end, how, context),
        `how` PLAIN for the fragments of known secrets, their copies and credential shapes,
        SPREAD for UTF-16 ones; `context`: where what decides the span begins."""
        spans, long_runs = [], []
        if self.long_run:
            long_kinds = decoded.translate(self.long_table)
            long_runs = _runs(
                decoded, long_kinds, self.long_run, self._long_runs, self._long_run_marks, spans
            )
        if self.run:
            # (a run of secret characters inside a long run was judged with it)
            _runs(decoded, kinds, self.run, self._runs, self._run_marks, spans, long_runs)
            if b"\x06" in kinds:
                self._spread(decoded, kinds, spans)
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
        for s, e, how, context in self.marks(decoded, decoded_kinds):
            s, e, context = (self.to_data(x, escapes) for x in (s, e, context))
            s, e, replacement = (s, e, REDACTED_BYTES) if how is PLAIN else _utf16_span(data, s, e)
            spans.append((s, e, replacement, context))
        if self._has(0x40, kinds, data) and b"://" in data:
            spans.extend((*m.span(1), REDACTED_BYTES, m.start(1)) for m in _USERINFO.finditer(data))
        hold = len(data)
        if tail:
            hold = self._hold_point(data, decoded, decoded_kinds, escapes)
            # a span that does not end before the hold point is held back with what decides it
            for _, e, _, context in spans:
                if e > hold:
                    hold = min(hold, context)
            spans = [span for span in spans if span[1] <= hold]
        if not spans:
            return (data if hold == len(data) else data[:hold]), hold
        spans.sort()
        out, last = [], 0
        for s, e, replacement, _ in spans:
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
        # and they stay a long run whatever follows) and twice `lead` more (a hit the next
        # chunk completes extends left over a public prefix: `lead` characters, in hex twice
        # as many digits); from a shape's prefix on, all of it (a credential). Without
        # secrets, its last FRAGMENT_MIN - 1 bytes. Of a UTF-16 run, its last
        # FRAGMENT_MIN - 1 + `lead` characters.
        d_end = self.to_decoded(end, escapes)
        holds = self.holds
        i = d_end
        while i > 0 and decoded[i - 1] in holds and d_end - i < MAX_HOLD:
            i -= 1
        start = d_end
        if i < d_end or partial:
            if self.secrets:
                start = max(i, d_end - (LONG_RUN + 2 * self.lead))
            else:
                start = max(i, d_end - (FRAGMENT_MIN - 1))
            run = decoded[i:d_end].lower()
            for prefix, _, _ in self.shapes:
                at = run.find(prefix)
                if at >= 0:
                    start = min(start, i + at)
        if self.grams and b"\x06" in kinds:
            reach = FRAGMENT_MIN - 1 + self.lead
            spread = _SPREAD_TAIL.search(kinds, max(0, d_end - 2 * (reach + 1)), d_end)
            if spread:
                start = min(start, max(spread.start(), d_end - 2 * reach))
        if start < d_end or partial:
            hold = min(hold, self.to_data(start, escapes))
        return hold


def private_core(secret):
    """(start, end) of the characters of `secret` that nobody but its holders may know: all but
    its public parts (PUBLIC_SEGMENT_MAX, …); all of it when fewer than FRAGMENT_MIN would be
    left (a short secret, such as a URL's password, keeps the rule of every window)."""
    lead = 0
    while (m := _PUBLIC_SEGMENT.match(secret, lead)) and m.end() <= PUBLIC_LEAD_MAX:
        lead = m.end()
    end = len(secret) - PUBLIC_LAST
    if end - lead < FRAGMENT_MIN:
        return 0, len(secret)
    return lead, end


_PUBLIC_SEGMENT = re.compile(rf"[A-Za-z0-9]{{1,{PUBLIC_SEGMENT_MAX}}}[-_]")


def _utf8(text):
    return text.encode("utf-8", "surrogatepass")


def _repeated(texts, grams):
    """The `grams` that are in more than one place in `texts` (as windows of any of them)."""
    windows = sum(max(0, len(t) - FRAGMENT_MIN + 1) for t in texts)
    if len(_grams(texts, FRAGMENT_MIN)) == windows:  # (as a rule: none)
        return frozenset()
    seen, twice = set(), set()
    for t in texts:
        for i in range(len(t) - FRAGMENT_MIN + 1):
            w = t[i : i + FRAGMENT_MIN]
            (twice if w in seen else seen).add(w)
    return frozenset(twice & grams)


def _grams(texts, n):
    return {t[i : i + n] for t in texts for i in range(len(t) - n + 1)}


def _quads(texts):
    """The 4-grams of `texts` as the integers a memoryview cast to "I" reads: each window of
    FRAGMENT_MIN bytes holds one at a multiple of 4 from any point before it, so bytes none of
    whose 4-grams from there is here hold no fragment (one C-level `isdisjoint`)."""
    return frozenset(memoryview(b"".join(_grams(texts, 4))).cast("I"))


def _both_cases(data):
    return set(data) | set(data.lower()) | set(data.upper())


def _windows(data, grams, quads):
    """[start] of the FRAGMENT_MIN-windows of `data` in `grams`. From _QUADS_FROM
    bytes on, block by block, only where one of `quads` is (a block of random base64 costs a
    C-level `isdisjoint`, not a look-up per window)."""
    n, size = FRAGMENT_MIN, len(data)
    if size < _QUADS_FROM:
        return [i for i in range(size - n + 1) if data[i : i + n] in grams]
    marks, view, last = [], memoryview(data), size - n + 1
    for b in range(0, last, _BLOCK):
        # (every window starting in the block ends by b + _BLOCK + n - 1, and holds a 4-gram
        # at a multiple of 4 from b)
        end = min(size, b + _BLOCK + n - 1)
        if not quads.isdisjoint(view[b : b + ((end - b) & ~3)].cast("I")):
            stop = min(b + _BLOCK, last)
            marks += [i for i in range(b, stop) if data[i : i + n] in grams]
    return marks


def _runs(decoded, kinds, pattern, cache, judge, spans, skip=()):
    """Adds to `spans` the marks of each run of `decoded` whose `kinds` begin with `pattern`
    (a run of 1s) and that starts in none of the (start, end) spans of `skip` (sorted):
    `cache`'s, or `judge`'s. Returns the runs, as (start, end)."""
    find, size, judged = kinds.find, len(decoded), []
    k, skips = 0, len(skip)
    i = find(pattern)
    while i >= 0:
        if skips:
            while k < skips and skip[k][1] <= i:
                k += 1
            if k < skips and skip[k][0] <= i:
                i = find(pattern, skip[k][1])
                continue
        j = find(b"\x00", i)
        if j < 0:
            j = size
        judged.append((i, j))
        run = decoded[i:j]
        found = cache.get(run)
        if found is None:
            found = judge(run)
        if found:
            spans.extend((i + s, i + e, PLAIN, i + c) for s, e, c in found)
        i = find(pattern, j)
    return judged


def _remember(cache, run, marks):
    found = tuple(_merged(marks))
    if len(run) <= _RUN_CACHE_RUN_MAX:
        if len(cache) >= _RUN_CACHE_MAX:
            cache.clear()
        cache[run] = found
    return found


def _merged(marks):
    """(start, end, context) marks, overlapping ones merged (the least context kept)."""
    out = []
    for s, e, c in sorted(marks):
        if out and out[-1][1] >= s:
            out[-1][1] = max(out[-1][1], e)
            out[-1][2] = min(out[-1][2], c)
        else:
            out.append([s, e, c])
    return [tuple(m) for m in out]


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
_STANDARD = bytes.maketrans(b"-_", b"+/")
_HEX_TABLE = bytes(1 if chr(b) in "0123456789abcdef" else 0 for b in range(256))
_HEX_RUN = b"\x01" * HEX_MIN
# _windows: from this many bytes on, block by block behind a C-level test
_QUADS_FROM = 24
_BLOCK = 256
_KEY_BYTES = "".join(sorted(KEY_CHARS)).encode()
# (base64's letters besides KEY_CHARS: a copy inside a blob runs on through them)
_BASE64_SYMBOLS = b"+/"
# A stretch of base64's (standard) alphabet long enough to spell FRAGMENT_MIN whole bytes.
_BASE64_STRETCH = re.compile(rb"[A-Za-z0-9+/]{%d,}" % -(-FRAGMENT_MIN * 4 // 3))
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
