"""The tokens a stream used: as its upstream reported them, else an estimate that says so.

`reported(usage)` reads an OpenAI-style `usage` object (the terminal response's, or a
`stream: false` body's): input, output, total, cached input (`input_tokens_details.cached_tokens`)
and reasoning output (`output_tokens_details.reasoning_tokens`). EU GPT sends none (its protocol
names usage as a possible future event), so a stream without one gets `estimate(...)`: its
request's and its output's text counted with OpenAI's o200k_base tokenizer, offline. Reasoning
and cached tokens are never estimated (a reasoning summary is not the hidden reasoning; what the
upstream cached is its own business): they stay unknown.

The tokenizer is tiktoken's, over the o200k_base vocabulary committed beside this module
(`data/o200k_base.tiktoken.gz`, OpenAI's public file, checked against its SHA-256 on load):
nothing is downloaded, ever. Loading it takes a few hundred milliseconds and ~90 MB, once per
process, ahead of the first estimate (streams/core/warmup.py).

How far off an estimate is, against the captures that carry usage, is in docs/usage.md.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

# The columns of a stream's usage, in this order (streams/models.py).
FIELDS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
)
REPORTED, ESTIMATED = "reported", "estimated"
# A count no upstream reports for one response: such a value is not usage, it is ignored.
MAX_TOKENS = 10**12

_DATA = Path(__file__).parent / "data" / "o200k_base.tiktoken.gz"
_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# What OpenAI's chat format adds around messages and calls, as measured against the captures
# (docs/usage.md): per input message, per request, per completed output message, per tool call.
PER_MESSAGE, PER_REQUEST, PER_OUTPUT_MESSAGE, PER_TOOL_CALL = 4, 3, 1, 7
SAMPLE_CHARS = 200_000  # a longer text is counted from a sample (`tokens`)
_load_lock = threading.Lock()


@dataclass(frozen=True)
class Usage:
    """A stream's usage: None where it is not known."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    source: str = ""  # REPORTED, ESTIMATED, or "" (none)

    def fields(self) -> dict:
        """The row's columns (streams/models.py: the FIELDS and `usage_source`)."""
        values = {name: getattr(self, name) for name in FIELDS}
        return {**values, "usage_source": self.source}


NONE = Usage()


def _count(value) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def reported(usage) -> Usage | None:
    """The usage an upstream reported (a Responses `usage` object), or None when it says
    neither input nor output tokens."""
    if not isinstance(usage, dict):
        return None
    input_tokens, output_tokens = (
        _count(usage.get("input_tokens")),
        _count(usage.get("output_tokens")),
    )
    if input_tokens is None and output_tokens is None:
        return None
    total = _count(usage.get("total_tokens"))
    if total is None and input_tokens is not None and output_tokens is not None:
        total = input_tokens + output_tokens
    in_details = usage.get("input_tokens_details")
    out_details = usage.get("output_tokens_details")
    cached = _count(in_details.get("cached_tokens")) if isinstance(in_details, dict) else None
    reasoning = (
        _count(out_details.get("reasoning_tokens")) if isinstance(out_details, dict) else None
    )
    return Usage(input_tokens, output_tokens, total, cached, reasoning, REPORTED)


@functools.cache
def _encoding():
    import tiktoken  # (a few hundred ms with the vocabulary: only when an estimate is needed)

    raw = gzip.decompress(_DATA.read_bytes())
    if hashlib.sha256(raw).hexdigest() != _SHA256:
        raise RuntimeError(f"{_DATA} is not OpenAI's o200k_base vocabulary (SHA-256 differs)")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }
    special = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
    return tiktoken.Encoding(
        "o200k_base", pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=special
    )


def encoding():
    """The tokenizer, loaded once per process (thread-safe)."""
    with _load_lock:
        return _encoding()


def loaded() -> bool:
    return _encoding.cache_info().currsize > 0


def warm() -> None:
    """Load the tokenizer now (streams/core/warmup.py does, as a process starts)."""
    encoding()


def tokens(text: str) -> int:
    """How many o200k_base tokens `text` is (special tokens counted as text). A text over
    SAMPLE_CHARS is counted from its first and last SAMPLE_CHARS / 2 and scaled to its length:
    an estimate may run on the event loop, so its time is bounded (~10 ms)."""
    if not text:
        return 0
    encode = encoding().encode_ordinary
    if len(text) <= SAMPLE_CHARS:
        return len(encode(text))
    half = SAMPLE_CHARS // 2
    sampled = len(encode(text[:half])) + len(encode(text[-half:]))
    return round(sampled * len(text) / SAMPLE_CHARS)


def _texts(value):
    """Every string of a request's input: a string, a list of messages or parts, nested."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for entry in value:
            yield from _texts(entry)
    elif isinstance(value, dict):
        for key in ("text", "content", "input", "output", "arguments", "name"):
            if key in value:
                yield from _texts(value[key])


def estimate_input(body) -> int | None:
    """Input tokens of a request body (Responses, Chat Completions or Anthropic Messages): its
    instructions, every input text (per message a few tokens of framing) and its tools'
    definitions. None without any input. An
    undercount when the upstream adds what the request does not show (hosted search results,
    files)."""
    if not isinstance(body, dict):
        return None
    # (Chat Completions and Anthropic Messages: `messages`; Anthropic's `system` instructions)
    messages = body.get("input", body.get("messages"))
    instructions = body.get("instructions", body.get("system"))
    if messages is None and not instructions:
        return None
    count = PER_REQUEST + sum(tokens(text) for text in _texts(instructions))
    entries = messages if isinstance(messages, list) else [messages]
    for entry in entries:
        count += PER_MESSAGE + sum(tokens(text) for text in _texts(entry))
    if isinstance(body.get("tools"), list) and body["tools"]:
        count += tokens(json.dumps(body["tools"], separators=(",", ":"), ensure_ascii=False))
    return count


def estimate_output(items, output_text: str) -> int:
    """Output tokens of a stream's output items (the checker's `items()`): message text and
    refusals, tool calls' names and arguments; `output_text` when there are no items."""
    count = 0
    seen = False
    for item in items or ():
        kind = item.get("type")
        if kind == "message":
            seen = True
            count += PER_OUTPUT_MESSAGE
            for part in item.get("parts") or ():
                count += tokens(part.get("text") or "")  # (a refusal's text too)
        elif "arguments" in item:
            seen = True
            count += PER_TOOL_CALL + tokens(item.get("name") or "")
            count += tokens(item.get("arguments") or "")
    if not seen:
        count = tokens(output_text or "")
    return count


def estimate(body, items, output_text: str) -> Usage:
    """The estimate for a stream that reported no usage (input None when its request is
    unknown, e.g. an imported capture without one)."""
    input_tokens = estimate_input(body)
    output_tokens = estimate_output(items, output_text)
    total = input_tokens + output_tokens if input_tokens is not None else None
    return Usage(input_tokens, output_tokens, total, None, None, ESTIMATED)


def of_stream(usage, body, items, output_text: str) -> Usage:
    """A finished stream's usage: what its upstream reported, else the estimate."""
    return reported(usage) or estimate(body, items, output_text)
