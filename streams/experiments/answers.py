"""The text of a recorded answer as experiments read it: the redacted view, in one place.

An item made from a stream, the word diff of two answers, an export: all are derived from
stored text for someone to read, so all pass `redacted` (streams/store/known_secrets.py)."""

from streams.core import checks
from streams.store import known_secrets

# answers longer than this are compared by their starts (a diff is quadratic in the words)
DIFF_MAX_CHARS = 20_000


def redacted(text):
    return known_secrets.redact(text or "")


def answer_of(stream):
    """The answer `stream` gave, redacted: the terminal event's text, else the streamed one."""
    if stream is None:
        return ""
    return redacted(stream.final_text or stream.output_text)


def word_diff(before, after):
    """[(op, text)] turning `before` into `after` word by word (op "same", "del" or "ins"),
    of their first DIFF_MAX_CHARS each. Callers pass redacted text."""
    return checks.word_ops((before or "")[:DIFF_MAX_CHARS], (after or "")[:DIFF_MAX_CHARS])


def changed_share(before, after):
    """How much of the answer changed, 0 (the same words) to 1 (nothing in common), by the
    characters of the words the diff removes and inserts."""
    ops = word_diff(before, after)
    changed = sum(len(text) for op, text in ops if op != "same")
    total = sum(len(text) for _op, text in ops)
    return changed / total if total else 0.0
