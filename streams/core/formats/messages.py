"""Anthropic Messages streams: `message_start`, `content_block_start/delta/stop` per block,
`message_delta`, `message_stop`, with `ping`s anywhere and `error` as a failed end. The type is
on the SSE `event:` line and in the JSON's `type`.

The checker has the Responses checker's shape (streams/core/formats/__init__.py) and its timing,
JSON, UTF-8 and "nothing after the end" checks; what this format promises, and what is reported
when it is broken (README, "Checker findings"):

- `message_start` first (`first_not_message_start`), `message_stop` last (whatever follows it is
  `event_after_terminal`, one finding with how many; a connection closed without it is
  `missing_terminal`); an `error` event ends the stream (`failed`), so anything after it is
  `event_after_terminal` too;
- content blocks are started in index order 0, 1, 2 … (`block_index_out_of_order`), each before
  its deltas (`block_delta_before_start`), stopped once (`block_stopped_twice`,
  `block_delta_after_stop`) and by `message_stop` (`block_never_stopped`);
- a `tool_use` block's `input_json_delta` fragments join into valid JSON
  (`tool_input_invalid_json`);
- the `event:` line names the JSON's type (`event_name_mismatch`).

TTFT is the first text or tool-input delta (docs/measurement.md). Thinking blocks are kept with
their signatures (and redacted thinking as it came); usage is `message_start`'s input counts with
`message_delta`'s output count (cumulative: the last one wins), cache reads as cached input.
"""

from __future__ import annotations

import json

from streams.core.checks import (
    CREATED,
    OUTPUT,
    TERMINAL,
    TOOL_CALL,
    as_int,
    as_str,
    finding,
    said,
    short,
)
from streams.core.formats.base import FormatChecker

# stop_reason -> the stream's status (any other reason: completed)
STOP_STATUS = {"max_tokens": "incomplete", "model_context_window_exceeded": "incomplete"}
TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


class _Block:
    __slots__ = ("type", "start", "chunks", "signature", "stopped")

    def __init__(self, start: dict):
        self.type = as_str(start.get("type"))
        self.start = start
        self.chunks: list[str] = []  # text, thinking or the input's JSON fragments
        self.signature: list[str] = []
        self.stopped = False

    def text(self) -> str:
        if self.chunks:
            return "".join(self.chunks)
        for key in ("text", "thinking"):
            if isinstance(self.start.get(key), str):
                return self.start[key]
        return ""


def responses_usage(usage: dict) -> dict:
    """Anthropic's counts in the Responses shape `usage.reported` reads: input is every input
    token, cached or written to the cache too (Anthropic's `input_tokens` leaves those out)."""
    counts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens")]
    counts.append(usage.get("cache_creation_input_tokens"))
    ints = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    out = {"input_tokens": sum(ints) if ints else None, "output_tokens": usage.get("output_tokens")}
    if isinstance(usage.get("cache_read_input_tokens"), int):
        out["input_tokens_details"] = {"cached_tokens": usage["cache_read_input_tokens"]}
    return out


class MessagesChecker(FormatChecker):
    """Feed Anthropic Messages events in arrival order (as `Checker`)."""

    def _init_response(self) -> None:
        super()._init_response()
        self._blocks: dict[int, _Block] = {}
        self._usage: dict = {}  # merged: message_start's, then each message_delta's
        self.stop_reason = ""

    def _feed_object(self, index, event_name, data, obj, first, result) -> None:
        out = result.violations
        etype = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(etype, str) or not etype:
            out.append(finding("missing_type", index, said("typed_object"), short(data)))
            return
        result.type = etype
        result.content_index = as_int(obj.get("index"), 32)
        if event_name and event_name != "message" and event_name != etype:
            out.append(finding("event_name_mismatch", index, etype, short(event_name)))
        if first and etype != "message_start":
            out.append(finding("first_not_message_start", index, "message_start", etype))
        if self.terminal_index is not None:
            self._note_after_terminal(index, None, etype)
            return
        handler = HANDLERS.get(etype)
        if handler is not None:
            result.kind = handler(self, index, obj, out)
        elif etype not in self._unknown_reported:
            self._unknown_reported.add(etype)
            out.append(
                finding("unknown_event_type", index, got=etype, detail=said("once_per_type"))
            )

    # ---- events ------------------------------------------------------------------------------

    def _on_message_start(self, index, obj, out):
        message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        self.upstream_id = self.upstream_id or as_str(message.get("id"))
        self.response_model = as_str(message.get("model")) or self.response_model
        if isinstance(message.get("usage"), dict):
            self._usage.update(message["usage"])
        return CREATED

    def _on_block_start(self, index, obj, out):
        at = as_int(obj.get("index"), 32)
        block = obj.get("content_block") if isinstance(obj.get("content_block"), dict) else {}
        expected = max(self._blocks) + 1 if self._blocks else 0
        if at != expected:
            out.append(finding("block_index_out_of_order", index, expected, repr(obj.get("index"))))
            if at is None or at in self._blocks:
                return None
        self._blocks[at] = _Block(block)
        return TOOL_CALL if block.get("type") in TOOL_BLOCKS else None

    def _on_block_delta(self, index, obj, out):
        at = as_int(obj.get("index"), 32)
        block = self._blocks.get(at)
        if block is None:
            out.append(finding("block_delta_before_start", index, "content_block_start", repr(at)))
            return None
        if block.stopped:
            out.append(finding("block_delta_after_stop", index, "content_block_stop", at))
            return None
        delta = obj.get("delta") if isinstance(obj.get("delta"), dict) else {}
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block.chunks.append(delta["text"])
            return OUTPUT
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            block.chunks.append(delta["partial_json"])
            return OUTPUT
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block.chunks.append(delta["thinking"])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block.signature.append(delta["signature"])
        return None

    def _on_block_stop(self, index, obj, out):
        at = as_int(obj.get("index"), 32)
        block = self._blocks.get(at)
        if block is None:
            out.append(finding("block_delta_before_start", index, "content_block_start", repr(at)))
            return None
        if block.stopped:
            out.append(finding("block_stopped_twice", index, "content_block_stop", at))
            return None
        block.stopped = True
        if block.type in TOOL_BLOCKS and block.chunks:
            joined = "".join(block.chunks)
            try:
                json.loads(joined)
            except ValueError as exc:
                out.append(
                    finding("tool_input_invalid_json", index, "JSON", short(joined), str(exc))
                )
        return None

    def _on_message_delta(self, index, obj, out):
        delta = obj.get("delta") if isinstance(obj.get("delta"), dict) else {}
        if delta.get("stop_reason") is not None:
            self.stop_reason = as_str(delta.get("stop_reason"))
        if isinstance(obj.get("usage"), dict):
            counts = {k: v for k, v in obj["usage"].items() if v is not None}
            self._usage.update(counts)
        return None

    def _on_message_stop(self, index, obj, out):
        self.terminal_type, self.terminal_index = "message_stop", index
        self._status = STOP_STATUS.get(self.stop_reason, "completed")
        open_blocks = [at for at, block in sorted(self._blocks.items()) if not block.stopped]
        for at in open_blocks:
            out.append(finding("block_never_stopped", index, "content_block_stop", at))
        self.usage = responses_usage(self._usage) if self._usage else {}
        return TERMINAL

    def _on_error(self, index, obj, out):
        error = obj.get("error") if isinstance(obj.get("error"), dict) else {}
        self.terminal_type, self.terminal_index = "error", index
        self._status = "failed"
        self.error_code = as_str(error.get("type")) or "error"
        self.error_message = as_str(error.get("message"))
        self.usage = responses_usage(self._usage) if self._usage else {}
        return TERMINAL

    def _closed_without_end(self, connection_closed, out) -> None:
        self.usage = responses_usage(self._usage) if self._usage else {}
        if connection_closed:
            self._status = "truncated"
            out.append(
                finding(
                    "missing_terminal",
                    None,
                    "message_stop",
                    said("connection_closed"),
                    said("after_events", n=self.event_count),
                )
            )

    # ---- reading the reassembled response ---------------------------------------------------

    @property
    def output_text(self) -> str:
        return "".join(b.text() for _, b in sorted(self._blocks.items()) if b.type == "text")

    def items(self) -> list[dict]:
        """Per block, in index order: text as a message part, thinking as reasoning (with its
        signature), a tool use as a call with its input's JSON, anything else as it started."""
        result = []
        for at, block in sorted(self._blocks.items()):
            entry = {"output_index": at, "block_index": at}
            if block.type == "text":
                part = {"content_index": 0, "type": "output_text", "text": block.text()}
                part["done"] = block.stopped
                if block.start.get("citations"):
                    part["annotations"] = block.start["citations"]
                entry.update(type="message", id="", parts=[part])
            elif block.type == "thinking":
                signature = "".join(block.signature) or as_str(block.start.get("signature"))
                entry.update(type="reasoning", summary=[], content=[block.text()])
                entry["signature"] = signature
            elif block.type in TOOL_BLOCKS:
                arguments = "".join(block.chunks)
                if not block.chunks and isinstance(block.start.get("input"), dict):
                    arguments = json.dumps(block.start["input"], separators=(",", ":"))
                entry.update(
                    type="function_call",
                    id="",
                    name=as_str(block.start.get("name")),
                    call_id=as_str(block.start.get("id")),
                    arguments=arguments,
                    status="completed" if block.stopped else "",
                    output=None,
                    block_type=block.type,
                )
            else:  # redacted_thinking, tool results of server tools, …: kept as they came
                entry.update(type=block.type or "block", item=block.start)
            result.append(entry)
        return result


HANDLERS = {
    "message_start": MessagesChecker._on_message_start,
    "content_block_start": MessagesChecker._on_block_start,
    "content_block_delta": MessagesChecker._on_block_delta,
    "content_block_stop": MessagesChecker._on_block_stop,
    "message_delta": MessagesChecker._on_message_delta,
    "message_stop": MessagesChecker._on_message_stop,
    "ping": lambda self, index, obj, out: None,
    "error": MessagesChecker._on_error,
}


def json_answer(obj) -> dict | None:
    """A `stream: false` answer (`"type": "message"`): the row's fields and its status, or None
    when `obj` is not one."""
    if not isinstance(obj, dict) or obj.get("type") != "message":
        return None
    text = "".join(
        as_str(b.get("text"))
        for b in obj.get("content") or ()
        if isinstance(b, dict) and b.get("type") == "text"
    )
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    model = as_str(obj.get("model"))
    return {
        "upstream_id": as_str(obj.get("id")),
        "resolved_model": model,
        "final_text": text,
        "output_text": text,
        "answer": (responses_usage(usage), text, model),
        "status": STOP_STATUS.get(as_str(obj.get("stop_reason")), "completed"),
    }
