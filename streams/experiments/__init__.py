"""Datasets and experiments (docs/experiments.md): named, versioned sets of prompts
(`datasets`, filled from streams, uploads and the API: `uploads`), replayed against variants
as recorded streams (`runs`, through streams/run/services.py like every stream), and what
came of it (`results`: per variant, per item, one run against another, exports).

Everything here that is built from stored text for someone to read (an item made from a
stream, an answer, a diff) is built from the redacted view (`answers.redacted`)."""
