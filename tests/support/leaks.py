"""Finding secrets in what left the server: every fragment of FRAGMENT_MIN or more characters of
a known secret, in every form a reader of the text could see.

    finder = SecretFinder({"key": "sk-…", "url_password": "…"})
    finder.find(text)   # [(label, fragment, context)], the longest fragment at each place

A reader sees a text as sent, HTML-unescaped (`&#115;`, `&amp;`), with JSON `\\uXXXX` escapes
decoded (behind any number of backslashes: data inside a JSON document is escaped twice) and
URL-decoded (`%73`), and any combination of those (`reader_forms`).
"""

import html
import re
from urllib.parse import unquote

FRAGMENT_MIN = 8

_JSON_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")
_URL_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")


def _json_decoded(text):
    return _JSON_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


# (name, whether a text may hold its escapes, decoder)
DECODERS = (
    ("html", lambda t: "&" in t, html.unescape),
    ("json", lambda t: "\\" in t, _json_decoded),
    ("url", lambda t: "%" in t and _URL_ESCAPE.search(t) is not None, unquote),
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


class SecretFinder:
    """Every fragment of FRAGMENT_MIN or more characters of the secrets in a text's forms."""

    def __init__(self, secrets, min_len=FRAGMENT_MIN):
        self.secrets = {label: s for label, s in secrets.items() if s and len(s) >= min_len}
        self.min_len = min_len
        # each window of min_len characters -> the (label, offset) places it comes from
        self.windows = {}
        for label, secret in self.secrets.items():
            for i in range(len(secret) - min_len + 1):
                self.windows.setdefault(secret[i : i + min_len], []).append((label, i))
        alphabet = "".join(sorted(set("".join(self.secrets.values()))))
        self.run_re = re.compile(f"[{re.escape(alphabet)}]{{{min_len},}}")

    def find_in(self, text):
        """[(label, fragment, start, end)] in `text` as it is: at each place the longest
        fragment of each secret (a fragment inside a longer one is not listed again)."""
        found = []
        for run in self.run_re.finditer(text):
            chars, base = run.group(), run.start()
            covered = {}  # label -> end of the last fragment listed in this run
            for i in range(len(chars) - self.min_len + 1):
                places = self.windows.get(chars[i : i + self.min_len])
                if not places:
                    continue
                for label, offset in places:
                    if covered.get(label, -1) > i:
                        continue
                    secret = self.secrets[label]
                    # the longest match of the secret at this place, both ways
                    a, o = i, offset
                    while a > 0 and o > 0 and chars[a - 1] == secret[o - 1]:
                        a, o = a - 1, o - 1
                    b, e = i + self.min_len, offset + self.min_len
                    while b < len(chars) and e < len(secret) and chars[b] == secret[e]:
                        b, e = b + 1, e + 1
                    covered[label] = b
                    found.append((label, chars[a:b], base + a, base + b))
        return found

    def find(self, text, context=40):
        """[(label, fragment, context, how)] over every reader form of `text` (`how`: the
        decodings that form needed), each (label, fragment) once, at its least decoded."""
        out, seen = [], set()
        for how, form in reader_forms(text):
            for label, fragment, start, end in self.find_in(form):
                if (label, fragment) in seen:
                    continue
                seen.add((label, fragment))
                snippet = form[max(0, start - context) : end + context]
                out.append((label, fragment, snippet, how))
        return out
