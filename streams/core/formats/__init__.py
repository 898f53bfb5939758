"""The wire formats Streamscope records, each in its own module, chosen in one place.

A stream's `format` (`Stream.format`) says which API its bytes speak:

- `responses`: OpenAI's Responses API, EU GPT's dialect of it (streams/core/checks.py);
- `chat`: Chat Completions (`POST /v1/chat/completions`: `chat.completion.chunk` objects and a
  final `data: [DONE]`; streams/core/formats/chat.py);
- `messages`: Anthropic Messages (`POST /v1/messages`: `message_start` … `message_stop` with the
  type on the `event:` line; streams/core/formats/messages.py).

Every format's checker has the Responses checker's shape (`feed`, `close`, the reassembled
`output_text` and `items()`, `usage` in the Responses shape `usage.reported` reads), so the
recorder, the importer, the rebuilds and the pages take any of them without knowing which.
"""

from __future__ import annotations

RESPONSES, CHAT, MESSAGES = "responses", "chat", "messages"
FORMATS = (RESPONSES, CHAT, MESSAGES)

# The `event:` name a format's blocks are stored with when they have no `event:` line ("message",
# as WHATWG reads an absent one), for the formats whose servers never write the line: a `.sse`
# export writes such blocks without it, as they came (capture.SSEEncoder). Responses keeps it:
# EU GPT writes `event: message`.
IMPLIED_EVENT_NAME = {CHAT: "message"}

# Each format's path under the upstream's `/v1` (and the proxy's).
PATHS = {RESPONSES: "/responses", CHAT: "/chat/completions", MESSAGES: "/messages"}


# Anthropic's Messages API requires `max_tokens`; a request that does not say gets this many.
MESSAGES_MAX_TOKENS = 4096
# The `anthropic-version` a request of ours sends (a proxied one passes its client's on).
ANTHROPIC_VERSION = "2023-06-01"


def key_header(format: str, key: str) -> tuple[str, str]:
    """(name, value) of the header an upstream of `format` takes its key in: Anthropic's
    `x-api-key`, everyone else's bearer `Authorization` (our requests and the proxy's)."""
    if format == MESSAGES:
        return "x-api-key", key
    return "Authorization", f"Bearer {key}"


def request_body(
    format: str,
    input,
    model: str,
    *,
    instructions: str = "",
    temperature: float | None = None,
    max_output_tokens: int | None = None,
    metadata: dict | None = None,
) -> dict:
    """A streaming Chat Completions or Messages request of ours (the playground's, the API's, a
    judge's): `input` a string (one user message) or the format's own `messages`, sent as they
    came (never translated: a translated request is the bug this recorder exists to see).
    Chat asks for usage in its last chunk (`stream_options.include_usage`); Messages puts the
    instructions in `system` and always says `max_tokens`, which it requires."""
    messages = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
    if format == CHAT:
        system = [{"role": "system", "content": instructions}] if instructions else []
        body = {"model": model, "messages": [*system, *messages], "stream": True}
        body["stream_options"] = {"include_usage": True}
        if max_output_tokens is not None:
            body["max_completion_tokens"] = max_output_tokens
    elif format == MESSAGES:
        body = {"model": model, "messages": messages, "stream": True}
        body["max_tokens"] = MESSAGES_MAX_TOKENS if max_output_tokens is None else max_output_tokens
        if instructions:
            body["system"] = instructions
    else:
        raise ValueError(f"not a format with messages: {format!r}")
    if temperature is not None:
        body["temperature"] = temperature
    if metadata:
        body["metadata"] = dict(metadata)
    return body


def checker(format: str = RESPONSES, **options):
    """A new checker for a stream of `format` (the Responses checker for an unknown one: rows
    stored before formats existed are Responses streams)."""
    if format == CHAT:
        from streams.core.formats.chat import ChatChecker

        return ChatChecker(**options)
    if format == MESSAGES:
        from streams.core.formats.messages import MessagesChecker

        return MessagesChecker(**options)
    from streams.core.checks import Checker

    return Checker(**options)


def of_path(path: str) -> str | None:
    """The format a `/v1…` path speaks (None: none of them)."""
    for format, tail in PATHS.items():
        if path == "/v1" + tail:
            return format
    return None


def json_answer(format: str, obj) -> dict | None:
    """A `stream: false` answer of a Chat or Messages upstream: the row's fields (`answer`: its
    (usage, text, model)) and `status`, or None when `obj` is not such an answer."""
    if format == CHAT:
        from streams.core.formats.chat import json_answer
    elif format == MESSAGES:
        from streams.core.formats.messages import json_answer
    else:
        return None
    return json_answer(obj)


def detect(events, url: str = "") -> str:
    """The format of a captured stream (an import): its URL's path when it has one (a HAR
    entry's), else what its first events look like (`(event name, data)` pairs): Anthropic's
    `message_start`, a Chat `chat.completion.chunk` (or `choices`), else Responses."""
    path = url.split("?", 1)[0].rstrip("/")
    for format, tail in PATHS.items():
        if path.endswith(tail):
            return format
    for event_name, data in events:
        head = data.lstrip()[:200]
        if event_name in ("message_start", "content_block_start") or '"message_start"' in head:
            return MESSAGES
        if '"chat.completion.chunk"' in head or (head.startswith("{") and '"choices"' in data):
            return CHAT
        if head.startswith("{"):
            return RESPONSES
    return RESPONSES
