"""Finding secrets in what left the server: every fragment of a known secret (a piece holding
FRAGMENT_MIN or more characters of its private core, with whatever of the secret stands around
it), in every form a reader of the text could see.

    finder = SecretFinder({"key": "sk-…", "url_password": "…"})
    finder.find(text)   # [(label, fragment, context, how)], the longest fragment at each place

A reader sees a text as sent, HTML-unescaped (`&#115;`, `&amp;`), with JSON `\\uXXXX` escapes
decoded (behind any number of backslashes: data inside a JSON document is escaped twice),
URL-decoded (`%73`), without NULs (UTF-16 text, `s\\x00k\\x00-…`, read as text), and any
combination of those (`reader_forms`). In each form it finds a secret's fragments in any case
(`SK-…`), pieces of LONG_RUN or more characters of its base64 at any alignment (either
alphabet), and pieces of its hex spelling FRAGMENT_MIN whole bytes of its core: what
docs/security.md promises the egress gate takes out. The spellings and the core are derived
here, independently of the gate's code (which reads copies back as bytes), so a gate that
reads them wrongly is found.
"""

import base64
import html
import re
from urllib.parse import unquote

FRAGMENT_MIN = 8
LONG_RUN = 16  # (docs/security.md: a piece of a base64 copy counts from this long)


def private_core(secret):
    """(start, end) of `secret`'s private core, as docs/security.md says: without its leading
    segments (letters and digits, at most 12, then `-` or `_`; at most 16 characters in all)
    and its last 4 characters; the whole secret when fewer than FRAGMENT_MIN would be left."""
    lead = 0
    while True:
        ends = [e for e in (secret.find("-", lead), secret.find("_", lead)) if e > lead]
        end = min(ends, default=-1) + 1
        segment = secret[lead : end - 1]
        if not end or end > 16 or len(segment) > 12 or not segment.isascii():
            break
        if not segment.isalnum():
            break
        lead = end
    if len(secret) - 4 - lead < FRAGMENT_MIN:
        return 0, len(secret)
    return lead, len(secret) - 4


_JSON_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")
_URL_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")


def _json_decoded(text):
    return _JSON_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


# (name, whether a text may hold its escapes, decoder)
DECODERS = (
    ("html", lambda t: "&" in t, html.unescape),
    ("json", lambda t: "\\" in t, _json_decoded),
    ("url", lambda t: "%" in t and _URL_ESCAPE.search(t) is not None, unquote),
    ("nul", lambda t: "\x00" in t, lambda t: t.replace("\x00", "")),
)


def reader_forms(text, max_forms=16):
    """[(how, form)]: `text` as sent ("sent") and every distinct decoding a reader could apply,
    in any order and repeatedly (to a fixed point, at most `max_forms` forms); `how` names the
    decodings applied, e.g. "html+html"."""
    forms, todo = [("sent", text)], [("sent", text)]
    seen = {text}
    while todo and len(forms) < max_forms:
        how, current = todo.pop(0)
        for name, may_hold, decode in DECODERS:
            if not may_hold(current):
                continue
            decoded = decode(current)
            if decoded not in seen:
                seen.add(decoded)
                step = (name if how == "sent" else f"{how}+{name}", decoded)
                forms.append(step)
                todo.append(step)
    return forms


def base64_pieces(secret):
    """The parts of `secret`'s base64 (both alphabets) that stay the same whatever bytes stand
    around it, at each of the three alignments: where the encodings with all-0 and all-1
    neighbours agree."""
    data = secret.encode()
    pieces = set()
    for pad in range(3):
        zeros = base64.b64encode(b"\x00" * pad + data + b"\x00\x00").decode()
        ones = base64.b64encode(b"\xff" * pad + data + b"\xff\xff").decode()
        same = "".join(a if a == b != "=" else " " for a, b in zip(zeros, ones, strict=True))
        for piece in same.split():
            pieces |= {piece, piece.replace("+", "-").replace("/", "_")}
    return pieces


def _base64_core_pieces(secret, core, n):
    """[(piece, (start, end))]: the parts of `secret`'s base64 that stay the same whatever
    bytes stand around it (as `base64_pieces`, either alphabet), each with the stretch of it
    whose `n`-character windows spell FRAGMENT_MIN whole bytes of the core or more."""
    data = secret.encode()
    a, b = len(secret[: core[0]].encode()), len(secret[: core[1]].encode())
    out = []
    for pad in range(3):
        zeros = base64.b64encode(b"\x00" * pad + data + b"\x00\x00").decode()
        ones = base64.b64encode(b"\xff" * pad + data + b"\xff\xff").decode()
        same = "".join(x if x == y != "=" else " " for x, y in zip(zeros, ones, strict=True))
        at = 0
        for piece in same.split(" "):
            starts = []
            for w in range(at, at + len(piece) - n + 1):
                first, last = -(-6 * w // 8) - pad, (6 * (w + n)) // 8 - pad  # whole bytes
                if min(last, b) - max(first, a) >= FRAGMENT_MIN:
                    starts.append(w - at)
            if starts:
                span = (starts[0], starts[-1] + n)
                out += [(piece, span), (piece.replace("+", "-").replace("/", "_"), span)]
            at += len(piece) + 1
    return out


class _Spelling:
    """Windows of `n` characters (from every `step`-th) of some texts (`(label, text)`),
    searched in the runs of `run_re` of a text (lower-cased first when `fold`)."""

    def __init__(self, name, texts, n, fold, run_re=None, step=1):
        """`texts`: (label, text, (start, end) of the part whose windows are looked for; the
        match then runs on over the rest of the text)."""
        self.name, self.n, self.fold = name, n, fold
        texts = [(label, t, span) for label, t, span in texts if span[1] - span[0] >= n]
        self.texts = [(label, t.lower() if fold else t) for label, t, _ in texts]
        self.windows = {}  # window -> [(index into texts, offset)]
        for k, ((_, t), (_, _, (start, end))) in enumerate(zip(self.texts, texts, strict=True)):
            for i in range(start, end - n + 1, step):
                self.windows.setdefault(t[i : i + n], []).append((k, i))
        if run_re is None:
            alphabet = "".join(sorted(set("".join(t for _, t in self.texts))))
            run_re = re.compile(f"[{re.escape(alphabet)}]{{{n},}}") if alphabet else None
        self.run_re = run_re
        # A sieve for the runs that hold no window (nearly all of a page's): a window anywhere
        # holds a `sieve`-character piece of its text that starts at a multiple of `stride` of
        # the run, so a run with none of the texts' pieces there is passed over whole.
        self.sieve = max(1, n // 2)
        self.stride = n - self.sieve + 1
        self.pieces = {
            t[i : i + self.sieve]
            for (_, t), (_, _, (start, end)) in zip(self.texts, texts, strict=True)
            for i in range(start, end - self.sieve + 1)
        }

    def find_in(self, text):
        """[(label, fragment, start, end)]: at each place the longest match of each text (one
        inside a longer one is not listed again). A fragment of a plain secret is given as
        the secret spells it; of a copy, as the text does."""
        found, n = [], self.n
        if self.run_re is None:
            return found
        w, stride, pieces = self.sieve, self.stride, self.pieces
        searched = text.lower() if self.fold else text
        for run in self.run_re.finditer(searched):
            chars, base = run.group(), run.start()
            if pieces.isdisjoint([chars[i : i + w] for i in range(0, len(chars) - w + 1, stride)]):
                continue
            covered = {}  # index into texts -> end of the last fragment listed in this run
            for i in range(len(chars) - n + 1):
                for k, offset in self.windows.get(chars[i : i + n], ()):
                    if covered.get(k, -1) > i:
                        continue
                    label, t = self.texts[k]
                    a, o = i, offset
                    while a > 0 and o > 0 and chars[a - 1] == t[o - 1]:
                        a, o = a - 1, o - 1
                    b, e = i + n, offset + n
                    while b < len(chars) and e < len(t) and chars[b] == t[e]:
                        b, e = b + 1, e + 1
                    covered[k] = b
                    fragment = text[base + a : base + b]
                    found.append((label, fragment, base + a, base + b))
        return found


class SecretFinder:
    """Every fragment of FRAGMENT_MIN or more characters of the secrets in a text's forms, in
    any case, and their base64 and hex copies."""

    def __init__(self, secrets, min_len=FRAGMENT_MIN):
        self.secrets = {label: s for label, s in secrets.items() if s and len(s) >= min_len}
        self.min_len = min_len
        plain = [(label, s, private_core(s)) for label, s in self.secrets.items()]
        self.plain = _Spelling("", plain, min_len, fold=True)
        base64_copies = [
            (label, piece, span)
            for label, s, core in plain
            for piece, span in _base64_core_pieces(s, core, max(LONG_RUN, min_len))
        ]
        hex_copies = [
            (label, s.encode().hex(), (2 * len(s[:a].encode()), 2 * len(s[:b].encode())))
            for label, s, (a, b) in plain
        ]
        self.copies = [
            _Spelling("base64", base64_copies, max(LONG_RUN, min_len), fold=False),
            # (min_len whole bytes: from a byte's first digit)
            _Spelling("hex", hex_copies, 2 * min_len, fold=True, step=2),
        ]

    def find_in(self, text):
        """[(label, fragment, start, end)] in `text` as it is (plain fragments given as the
        secret spells them, whatever their case in `text`)."""
        found = []
        for label, fragment, start, end in self.plain.find_in(text):
            secret = self.secrets[label]
            at = secret.lower().find(fragment.lower())
            found.append((label, secret[at : at + len(fragment)], start, end))
        return found

    def find(self, text, context=40):
        """[(label, fragment, context, how)] over every reader form of `text` (`how`: the
        decodings that form needed, and "base64" or "hex" for a copy), each (label, fragment)
        once, at its least decoded."""
        out, seen = [], set()
        for how, form in reader_forms(text):
            found = [(f, how) for f in self.find_in(form)]
            for spelling in self.copies:
                found += [(f, f"{how} {spelling.name}") for f in spelling.find_in(form)]
            for (label, fragment, start, end), where in found:
                if (label, fragment) in seen:
                    continue
                seen.add((label, fragment))
                snippet = form[max(0, start - context) : end + context]
                out.append((label, fragment, snippet, where))
        return out
