"""JSON that strangers wrote: API bodies, uploaded HAR files, an upstream's event data.

Python's `json` parses recursively (100,000 nested brackets raise RecursionError, which is no
ValueError and kills whatever called it), and it reads `NaN`, `Infinity` and `1e400` as floats
that no database column or JSON encoder downstream accepts. So nesting is measured here without
recursion, *before* any recursive parser sees the text, and `loads` refuses non-finite numbers.
"""

from __future__ import annotations

import json
import math
import re

# API bodies and HAR documents: a Responses request nests about 6 deep, a browser's HAR about 5.
MAX_DEPTH = 64

# A JSON string (escapes included, written unrolled so that it never backtracks) or a bracket.
# A string that never ends runs to the end of the text: it is matched once, not again from
# each quote inside it (which made a crafted body's cost grow with the square of its length:
# docs/performance.md, "Hostile input").
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)


def too_deep(text: str, limit: int) -> bool:
    """Whether `text` nests arrays and objects deeper than `limit` (brackets inside strings do
    not count). Linear and without recursion; text with at most `limit` opening brackets in all
    (nearly everything) is answered by two C-speed counts."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for m in _TOKEN.finditer(text):
        c = text[m.start()]
        if c == "[" or c == "{":
            depth += 1
            if depth > limit:
                return True
        elif c == "]" or c == "}":
            depth -= 1
    return False


def _no_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def loads(text: str | bytes, max_depth: int = MAX_DEPTH):
    """`json.loads` for untrusted text: ValueError (with a message fit for the user) when it is
    not JSON, nests deeper than `max_depth`, holds NaN, ±Infinity or a float that overflows, or
    a string with a lone surrogate (`"\\ud800"`: valid JSON, but no UTF-8 text, so no column,
    page or encoder downstream takes it)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8-sig")  # UnicodeDecodeError is a ValueError
    if too_deep(text, max_depth):
        raise ValueError(f"nested deeper than {max_depth} levels")
    value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    if _SURROGATE_ESCAPE.search(text):
        _refuse_surrogates(value)
    return value


# (an escape of a surrogate: only then can a parsed string hold a lone one)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_surrogates(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = item[exc.start : exc.end].encode("utf-16", "surrogatepass")[2:]
                code = int.from_bytes(bad[:2], "little")
                raise ValueError(f"a lone surrogate (\\u{code:04x}) is not text") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
