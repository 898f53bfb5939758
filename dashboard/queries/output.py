"""The one server rendering of a stream's output (templates/dashboard/output.html), on the
timeline and in the playground."""

import json

from streams.core.checks import word_ops
from streams.shapes import public

ITEM_JSON_MAX = 20_000
# Characters of a text part laid out at first; the rest waits in an inert <template> behind a
# "show all" button (laying out a long text was a large part of a big stream page's load;
# docs/performance.md, "Inspection").
TEXT_SHOWN = 20_000
DIFF_MAX = 200_000  # characters beyond which a word diff is not computed for the page


def _pretty(value):
    """(text, is JSON) for a tool's arguments or output: JSON indented (as static/js/dom.js's
    `pretty` does while it streams), anything else as it came; None stays None."""
    if value is None:
        return None, False
    if not isinstance(value, str):
        return json.dumps(value, indent=2, ensure_ascii=False), True
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):  # (nested too deep to show as a tree)
        return value, False
    return json.dumps(parsed, indent=2, ensure_ascii=False), True


def output_blocks(stream, *, terminal_text=False):
    """The one server rendering of a stream's output (templates/dashboard/output.html, on the
    timeline and in the playground): `public.output` (one `kind` per item type)
    prepared for display. Texts longer than TEXT_SHOWN are split for the "show all" button, a
    rewrite gets a word diff of streamed vs final, tool arguments and outputs are
    pretty-printed, other items are shown as JSON."""
    items = public.output(stream, terminal_text=terminal_text)
    for item in items:
        kind = item["kind"]
        if kind == "message":
            for part in item["parts"]:
                _prepare_text(part)
        elif kind == "tool":
            item["arguments"], item["arguments_json"] = _pretty(item["arguments"])
            item["output"], item["output_json"] = _pretty(item["output"])
        elif kind == "other":
            item["json"] = json.dumps(item["item"], indent=2, ensure_ascii=False)[:ITEM_JSON_MAX]
    return items


def _prepare_text(part):
    final, streamed = part["text"], part["streamed"]
    if len(final) > TEXT_SHOWN:
        part["head"], part["rest"] = final[:TEXT_SHOWN], final[TEXT_SHOWN:]
    if streamed is not None:
        # SequenceMatcher is quadratic at worst: huge rewrites keep the checker's own diff
        # (the rewritten_text finding) instead.
        if len(streamed) + len(final) <= DIFF_MAX:
            part["diff"] = word_ops(streamed, final)
        else:
            part["diff_skipped"] = True


def final_texts(items):
    """The output texts of `output_blocks` as one string (compared with the terminal event's)."""
    return "".join(
        part["text"]
        for item in items
        if item["kind"] == "message"
        for part in item["parts"]
        if part["type"] == "output_text"
    )
