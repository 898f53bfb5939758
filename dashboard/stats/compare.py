"""Two recorded streams side by side (the page `/streams/<a>/compare/<b>/`): their key figures
with the differences, their outputs' arrival curves on one time axis, and a word-level diff of
their outputs. Plain Python over stored rows; the page polls it while either stream runs.

- `figures(a, b)`: rows of (label, a's value, b's value, b − a, unit), numbers only where both
  have one; a cost difference only in one currency.
- `arrivals(stream)`: the cumulative output characters (every output delta: text, refusal,
  reasoning, tool arguments) against ms since the request was written — the same origin as
  TTFT, so both curves start where their TTFT marks are. At most CURVE_POINTS points (a long
  stream is thinned, its last point kept).
- `word_diff(a_text, b_text)`: [(op, text)] with op "=", "-" (only in a) or "+" (only in b),
  over words and the spaces between them; texts over DIFF_MAX_WORDS words are compared on
  their first DIFF_MAX_WORDS words and say so.
"""

from __future__ import annotations

import difflib
import json
import re

from django.utils.translation import gettext_lazy as _

from streams.core.checks import OUTPUT_DELTAS
from streams.store import events as stored_events

CURVE_POINTS = 1_500
DIFF_MAX_WORDS = 5_000
_WORDS = re.compile(r"\s+|[^\s]+")

# (label, attribute, unit): the figures compared, in the page's order
FIGURES = (
    (_("TTFT"), "ttft_ms", "ms"),
    (_("Duration"), "duration_ms", "ms"),
    (_("Output deltas/s"), "tokens_per_s", "rate"),
    (_("Output deltas"), "output_deltas", "count"),
    (_("Events"), "event_count", "count"),
    (_("Input tokens"), "input_tokens", "count"),
    (_("Output tokens"), "output_tokens", "count"),
    (_("Findings"), "findings_count", "count"),
    (_("Output characters"), "output_chars", "count"),
)


def figures(a, b):
    """[(label, value a, value b, b − a or None, unit)] (see the module's docstring), plus the
    cost's row when both have one in the same currency."""
    rows = []
    for label, name, unit in FIGURES:
        va, vb = _value(a, name), _value(b, name)
        diff = vb - va if va is not None and vb is not None else None
        rows.append((label, va, vb, diff, unit))
    return rows


def cost_difference(a, b):
    """b's cost − a's in nano-units, or None (either has none, or they are in two currencies)."""
    if a.cost_nanos is None or b.cost_nanos is None or a.cost_currency != b.cost_currency:
        return None
    return b.cost_nanos - a.cost_nanos


def _value(stream, name):
    if name == "output_chars":
        return len(stream.output_text or "")
    return getattr(stream, name)


def arrivals(stream):
    """{"x": [ms since the request was written], "y": [output characters so far], "ttft_ms"}."""
    origin = stream.request_written_us or 0
    xs, ys = [], []
    total = 0
    rows = stored_events.read(stream.pk, ("t_us", "data"), types=OUTPUT_DELTAS)
    for t_us, data in rows:
        if t_us is None:
            continue
        try:
            delta = json.loads(data).get("delta")
        except (ValueError, AttributeError):
            continue
        if not isinstance(delta, str):
            continue
        total += len(delta)
        xs.append(round((t_us - origin) / 1000, 3))
        ys.append(total)
    if len(xs) > CURVE_POINTS:
        step = len(xs) / CURVE_POINTS
        keep = sorted({int(i * step) for i in range(CURVE_POINTS)} | {len(xs) - 1})
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    return {"x": xs, "y": ys, "ttft_ms": stream.ttft_ms}


def word_diff(a_text, b_text):
    """([(op, text)], whether the texts were cut to DIFF_MAX_WORDS words)."""
    a_words = _WORDS.findall(a_text or "")
    b_words = _WORDS.findall(b_text or "")
    cut = len(a_words) > 2 * DIFF_MAX_WORDS or len(b_words) > 2 * DIFF_MAX_WORDS
    a_words, b_words = a_words[: 2 * DIFF_MAX_WORDS], b_words[: 2 * DIFF_MAX_WORDS]
    out = []
    matcher = difflib.SequenceMatcher(None, a_words, b_words, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            _add(out, "=", "".join(a_words[i1:i2]))
            continue
        if op in ("delete", "replace"):
            _add(out, "-", "".join(a_words[i1:i2]))
        if op in ("insert", "replace"):
            _add(out, "+", "".join(b_words[j1:j2]))
    return out, cut


def _add(out, op, text):
    if not text:
        return
    if out and out[-1][0] == op:
        out[-1] = (op, out[-1][1] + text)
    else:
        out.append((op, text))
