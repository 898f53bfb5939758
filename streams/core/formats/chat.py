"""Chat Completions streams: `chat.completion.chunk` objects, then `data: [DONE]`.

The checker has the Responses checker's shape (streams/core/formats/__init__.py) and its timing
checks (stall, buffered delivery), invalid JSON, invalid UTF-8 and "nothing after the end"; what
this format promises, and what is reported when it is broken (README, "Checker findings"):

- one `data: [DONE]` ends the stream, and nothing comes after it (`event_after_terminal`, one
  finding with how many); a connection closed without it is `done_missing`;
- each choice's `finish_reason` comes once (`finish_reason_repeated`) and is its last word:
  a chunk for a finished choice is `chunk_after_finish`; a choice still open at `[DONE]` is
  `finish_reason_missing`;
- a tool call's first fragment carries its `index`, `id` and function `name`, later fragments
  of that index keep the id or leave it out, and an id names one call (`tool_call_inconsistent`);
- the usage chunk (`stream_options.include_usage`) has empty `choices` (`usage_chunk_has_choices`);
- `delta.role` only in a choice's first delta (`role_not_first`);
- `id`, `created` and `model` the same in every chunk (`chunk_field_changed`, once per field;
  Azure's first chunk, `prompt_filter_results` with empty choices and no id, is exempt);
- refusals (`delta.refusal`) are kept as a refusal part; content filtered by Azure
  (`content_filter_results` with `filtered: true`) or a `content_filter` finish is information
  (`content_filtered`); SSE comments (`: OPENROUTER PROCESSING`) are not events: the proxy
  forwards them as they came and the recorder does not count them.

TTFT is the first content, refusal or tool-call delta (docs/measurement.md). The reassembled
output is per choice: its text, its refusal, its reasoning (`reasoning_content`, as some servers
send) and its tool calls with their argument fragments joined by index.
"""

from __future__ import annotations

from streams.core.checks import (
    CREATED,
    OUTPUT,
    TERMINAL,
    FeedResult,
    as_int,
    as_str,
    finding,
    said,
    short,
)
from streams.core.formats.base import FormatChecker

DONE = "[DONE]"
CHUNK = "chat.completion.chunk"
# finish_reason -> the stream's status (any other reason: completed)
FINISH_STATUS = {"length": "incomplete", "content_filter": "incomplete"}
ENVELOPE = ("id", "created", "model")


class _Call:
    __slots__ = ("id", "name", "type", "args")

    def __init__(self, call_id: str, name: str, type_: str):
        self.id, self.name, self.type = call_id, name, type_
        self.args: list[str] = []


class _Choice:
    __slots__ = (
        "deltas",
        "content",
        "refusal",
        "reasoning",
        "finish_reason",
        "calls",
        "filtered",
        "reported",
    )

    def __init__(self):
        self.deltas = 0
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.finish_reason: str | None = None
        self.calls: dict[int, _Call] = {}
        self.filtered = False
        self.reported: set[str] = set()  # codes said once for this choice


def responses_usage(usage) -> dict:
    """A Chat Completions `usage` in the Responses shape `usage.reported` reads."""
    if not isinstance(usage, dict):
        return {}
    out = {
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": usage.get("completion_tokens"),
        "total_tokens": usage.get("total_tokens"),
    }
    prompt = usage.get("prompt_tokens_details")
    if isinstance(prompt, dict):
        out["input_tokens_details"] = {"cached_tokens": prompt.get("cached_tokens")}
    completion = usage.get("completion_tokens_details")
    if isinstance(completion, dict):
        out["output_tokens_details"] = {"reasoning_tokens": completion.get("reasoning_tokens")}
    return out


def _filtered(results) -> bool:
    """Azure's `content_filter_results`: {category: {"filtered": bool, …}, …}."""
    return isinstance(results, dict) and any(
        isinstance(v, dict) and v.get("filtered") is True for v in results.values()
    )


def _says(entry) -> bool:
    """Whether a choice's entry carries anything: text, a refusal, a tool call, a filter."""
    delta = entry.get("delta") if isinstance(entry.get("delta"), dict) else {}
    said = any(delta.get(k) for k in ("content", "refusal", "tool_calls", "reasoning_content"))
    return said or _filtered(entry.get("content_filter_results"))


class ChatChecker(FormatChecker):
    """Feed Chat Completions events in arrival order (as `Checker`)."""

    def _init_response(self) -> None:
        super()._init_response()
        self._choices: dict[int, _Choice] = {}
        self._envelope: tuple | None = None  # the first chunk's (id, created, model)
        self._changed: set[str] = set()  # envelope fields reported as changed
        self._call_ids: dict[str, tuple[int, int]] = {}  # id -> (choice, index)

    # ---- feeding -------------------------------------------------------------------------------

    def _sentinel(self, index, data, out) -> FeedResult | None:
        if data.strip() != DONE:
            return None
        result = FeedResult(out, type=DONE)
        if self.terminal_index is not None:
            self._note_after_terminal(index, None, DONE)
            return result
        self.terminal_type, self.terminal_index = DONE, index
        for number, choice in sorted(self._choices.items()):
            if choice.finish_reason is None:
                out.append(
                    finding("finish_reason_missing", index, "finish_reason", said("absent"), number)
                )
        self._status = self._finished_status()
        result.kind = TERMINAL
        return result

    def _feed_object(self, index, event_name, data, obj, first, result) -> None:
        if self.terminal_index is None and self._content_chunk(obj, result):
            return
        out = result.violations
        if self.terminal_index is not None:
            self._note_after_terminal(index, None, CHUNK)
            return
        if not isinstance(obj, dict):
            out.append(finding("not_a_chunk", index, CHUNK, type(obj).__name__))
            return
        result.type = as_str(obj.get("object")) or CHUNK
        choices = obj.get("choices")
        if "error" in obj and not isinstance(choices, list):
            result.type = "error"
            result.kind = self._on_error(index, obj)
            return
        if not isinstance(choices, list):
            out.append(finding("not_a_chunk", index, CHUNK, short(data)))
            return
        result.kind = self._envelope_of(index, obj, choices, out)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = responses_usage(usage)
            if choices:
                out.append(finding("usage_chunk_has_choices", index, "[]", len(choices)))
        output = False
        for position, entry in enumerate(choices):
            if isinstance(entry, dict):
                o, started = self._on_choice(index, position, entry, out)
                output = output or o
                result.first_tool_call = result.first_tool_call or started
        if output:
            result.kind = OUTPUT

    def _content_chunk(self, obj, result) -> bool:
        """The chunk nearly every event of a stream is, applied here without the general
        path: one entry, of a choice already open, whose delta is a non-empty `content` and
        nothing else (no role, finish, filter, refusal or tool call), in a chunk with the first
        chunk's id, created and model and no usage. False for anything else, which the general
        path takes (and for such a chunk it would find nothing and do the same: the equivalence
        is tests/streams/core/formats/test_chat.py's, over every capture)."""
        if type(obj) is not dict:
            return False
        choices = obj.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return False
        entry = choices[0]
        if type(entry) is not dict or entry.get("finish_reason") is not None:
            return False
        delta = entry.get("delta")
        if type(delta) is not dict or len(delta) != 1 or "content_filter_results" in entry:
            return False
        text = delta.get("content")
        number = entry.get("index")
        if type(text) is not str or not text or type(number) is not int:
            return False
        choice = self._choices.get(number)
        if choice is None or choice.finish_reason is not None or obj.get("usage") is not None:
            return False
        if (obj.get("id"), obj.get("created"), obj.get("model")) != self._envelope:
            return False
        kind = obj.get("object")
        result.type = kind if type(kind) is str and kind else CHUNK
        result.kind = OUTPUT
        choice.deltas += 1
        choice.content.append(text)
        return True

    def _envelope_of(self, index, obj, choices, out):
        """The chunk's id, created and model against the first chunk's: CREATED for the first."""
        if not choices and "prompt_filter_results" in obj and not obj.get("id"):
            return None  # Azure's prompt-filter chunk: no id, no model, created 0
        if self._envelope is None:
            self._envelope = tuple(obj.get(k) for k in ENVELOPE)
            self.upstream_id = as_str(obj.get("id"))
            self.response_model = as_str(obj.get("model"))
            return CREATED
        for key, first in zip(ENVELOPE, self._envelope, strict=True):
            if key not in self._changed and obj.get(key) != first:
                self._changed.add(key)
                got = short(repr(obj.get(key)))
                out.append(finding("chunk_field_changed", index, repr(first), got, key))
        return None

    def _on_choice(self, index, position, entry, out) -> tuple[bool, bool]:
        """One entry of `choices`: (it carried output, it started a tool call)."""
        number = as_int(entry.get("index"), 32)
        number = position if number is None else number
        choice = self._choices.get(number)
        if choice is None:
            choice = self._choices[number] = _Choice()
        finish = entry.get("finish_reason")
        if choice.finish_reason is not None and finish is None and not _says(entry):
            return False, False  # (a usage chunk's empty entry: usage_chunk_has_choices says it)
        if choice.finish_reason is not None:
            code = "finish_reason_repeated" if finish is not None else "chunk_after_finish"
            if code not in choice.reported:
                choice.reported.add(code)
                out.append(finding(code, index, choice.finish_reason, short(repr(finish)), number))
            return False, False
        delta = entry.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if delta.get("role") and choice.deltas and "role_not_first" not in choice.reported:
            choice.reported.add("role_not_first")
            out.append(finding("role_not_first", index, number, short(repr(delta["role"]))))
        choice.deltas += 1
        output = tool_call = False
        for key, texts in (("content", choice.content), ("refusal", choice.refusal)):
            text = delta.get(key)
            if isinstance(text, str) and text:
                texts.append(text)
                output = True
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                choice.reasoning.append(delta[key])
        calls = delta.get("tool_calls")
        if isinstance(calls, list) and calls:
            output = True
            for call in calls:
                tool_call = self._on_call(index, number, choice, call, out) or tool_call
        if _filtered(entry.get("content_filter_results")) or finish == "content_filter":
            if not choice.filtered:
                choice.filtered = True
                out.append(finding("content_filtered", index, "", short(repr(finish)), number))
        if finish is not None:
            choice.finish_reason = as_str(finish) or repr(finish)
        return output, tool_call

    def _on_call(self, index, number, choice, call, out) -> bool:
        """A tool call fragment; True when it starts a call."""
        if not isinstance(call, dict):
            out.append(
                finding("tool_call_inconsistent", index, "object", short(repr(call)), number)
            )
            return False
        at = as_int(call.get("index"), 32)
        call_id = as_str(call.get("id"))
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        fragment = function.get("arguments")
        if at is None:
            out.append(finding("tool_call_inconsistent", index, "index", said("absent"), number))
            return False
        known = choice.calls.get(at)
        started = known is None
        if started:
            if not call_id or not as_str(function.get("name")):
                got = "id" if not call_id else "function.name"
                out.append(finding("tool_call_inconsistent", index, got, said("absent"), at))
            known = choice.calls[at] = _Call(
                call_id, as_str(function.get("name")), as_str(call.get("type")) or "function"
            )
        elif call_id and call_id != known.id:
            out.append(finding("tool_call_inconsistent", index, known.id, call_id, at))
        if call_id:
            owner = self._call_ids.setdefault(call_id, (number, at))
            if owner != (number, at):
                out.append(finding("tool_call_inconsistent", index, owner[1], at, call_id))
        if isinstance(fragment, str):
            known.args.append(fragment)
        return started

    def _on_error(self, index, obj):
        """`data: {"error": {…}}`: what OpenAI-compatible servers send when they fail mid-stream."""
        error = obj.get("error") if isinstance(obj.get("error"), dict) else {}
        self.terminal_type, self.terminal_index = "error", index
        self._status = "failed"
        self.error_code = as_str(error.get("code")) or as_str(error.get("type")) or "error"
        self.error_message = as_str(error.get("message")) or as_str(obj.get("error"))
        return TERMINAL

    def _finished_status(self) -> str:
        reasons = [c.finish_reason for c in self._choices.values()]
        if None in reasons:
            return "truncated"
        for reason in reasons:
            if reason in FINISH_STATUS:
                return FINISH_STATUS[reason]
        return "completed"

    def _closed_without_end(self, connection_closed, out) -> None:
        if connection_closed:
            # every choice finished: the answer is whole, only the sentinel is missing
            self._status = self._finished_status() if self._choices else "truncated"
            out.append(finding("done_missing", None, "data: [DONE]", said("connection_closed")))

    # ---- reading the reassembled response ---------------------------------------------------

    @property
    def output_text(self) -> str:
        """The first choice's text (what a client reading `choices[0]` shows)."""
        if not self._choices:
            return ""
        return "".join(self._choices[min(self._choices)].content)

    def items(self) -> list[dict]:
        """Per choice: its reasoning, its message (text and refusal parts), its tool calls."""
        result = []
        for number, choice in sorted(self._choices.items()):
            if choice.reasoning:
                entry = {"type": "reasoning", "summary": [], "content": ["".join(choice.reasoning)]}
                result.append({"output_index": len(result), "choice": number, **entry})
            parts = [{"content_index": 0, "type": "output_text", "text": "".join(choice.content)}]
            if choice.refusal:
                parts.append(
                    {"content_index": 1, "type": "refusal", "text": "".join(choice.refusal)}
                )
            for part in parts:
                part["done"] = choice.finish_reason is not None
            result.append(
                {
                    "output_index": len(result),
                    "type": "message",
                    "id": "",
                    "choice": number,
                    "finish_reason": choice.finish_reason or "",
                    "parts": parts,
                }
            )
            for at, call in sorted(choice.calls.items()):
                result.append(
                    {
                        "output_index": len(result),
                        "type": "function_call",
                        "id": "",
                        "name": call.name,
                        "call_id": call.id,
                        "arguments": "".join(call.args),
                        "status": "completed" if choice.finish_reason is not None else "",
                        "output": None,
                        "choice": number,
                        "tool_index": at,
                    }
                )
        return result


def json_answer(obj) -> dict | None:
    """A `stream: false` answer (`chat.completion`): the row's fields and its status, or None
    when `obj` is not one."""
    if not isinstance(obj, dict) or obj.get("object") != "chat.completion":
        return None
    choices = [c for c in obj.get("choices") or () if isinstance(c, dict)]
    message = choices[0].get("message") if choices else None
    text = as_str(message.get("content")) if isinstance(message, dict) else ""
    reasons = [as_str(c.get("finish_reason")) for c in choices]
    status = next((FINISH_STATUS[r] for r in reasons if r in FINISH_STATUS), "completed")
    model = as_str(obj.get("model"))
    return {
        "upstream_id": as_str(obj.get("id")),
        "resolved_model": model,
        "final_text": text,
        "output_text": text,
        "answer": (responses_usage(obj.get("usage")), text, model),
        "status": status,
    }
