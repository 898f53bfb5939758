"""Evaluators: scores written automatically (docs/experiments.md, "Evaluators").

`apply(evaluator, *, stream, expected=None)` scores one stream with one evaluator version and
returns a `Result` (the score written, or the reason there is none); `evaluators.save` makes an
evaluator or its next version. Every evaluator reads the stream's redacted text only
(`evaluators.subject_of`): a score, its reason and a judge's prompt are derived from stored text
for someone to read, so they are built from what the egress gate would let out.
"""

from streams.evaluate.evaluators import Result, apply, save

__all__ = ["Result", "apply", "save"]
