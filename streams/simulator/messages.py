"""The simulator's ``POST /v1/messages``: Anthropic Messages events as Anthropic writes them
(``event: <type>`` then compact JSON), paced by the model's profile.

A request with ``thinking: {"type": "enabled"}`` gets a thinking block first (its text in
``thinking_delta``s, then a ``signature_delta``); a request with ``tools`` whose last message
is the user's gets a short text block and a ``tool_use`` block (its input in
``input_json_delta`` fragments, ``stop_reason: "tool_use"``); any other gets a text answer. A
``ping`` follows the first block's start, as Anthropic's does. ``"stream": false`` answers one
``message`` object.

Scenarios (``metadata.scenario`` or ``X-Simulator-Scenario``): FAULTS below; each fault breaks
one promise streams/core/formats/messages.py checks.
"""

from __future__ import annotations

import json
from typing import Any

from . import formats
from .scenarios import choose_tool, gettext_noop

FAULTS: dict[str, str] = {
    "normal": gettext_noop("Anthropic Messages: one text block streamed, then message_stop."),
    "never_stopped": gettext_noop("Anthropic Messages: a content block is never stopped."),
    "stopped_twice": gettext_noop("Anthropic Messages: a content block is stopped twice."),
    "out_of_order": gettext_noop("Anthropic Messages: a block starts at index 1 before 0."),
    "delta_before_start": gettext_noop("Anthropic Messages: a delta before its block's start."),
    "bad_json": gettext_noop("Anthropic Messages: tool input fragments that are not JSON."),
    "after_stop": gettext_noop("Anthropic Messages: an event after message_stop."),
    "error": gettext_noop("Anthropic Messages: an overloaded_error event mid-stream."),
    "reset": gettext_noop("Anthropic Messages: the connection is reset mid-stream."),
}


def build(body: Any, *, header_scenario, server_seed, default_time_scale, response_id, created_s):
    """(the plan, the request's seed) for a Messages request, or `RequestError`."""
    body = body if isinstance(body, dict) else None
    req, scenario = formats.request(
        body,
        FAULTS,
        header_scenario=header_scenario,
        server_seed=server_seed,
        default_time_scale=default_time_scale,
        system=body.get("system") if body else None,
        max_tokens=body.get("max_tokens") if body else None,
    )
    plan, b, unique, _ = formats.start(req, response_id, created_s, scenario)
    rid = plan.response_id = "msg_" + unique[:24]
    rng = b.rng
    ev = _Events(b)
    usage = {"input_tokens": max(1, len(req.input_text) // 4), "output_tokens": 1}
    usage.update(cache_creation_input_tokens=0, cache_read_input_tokens=0)
    message = {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": plan.resolved_model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    ev("message_start", message=message, at=rng.uniform(0.004, 0.015))
    blocks: list[dict] = []
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        blocks.append(_thinking(ev, b, len(blocks)))
    out = 0
    if formats.wants_tool(req, body):
        blocks.append(_text(ev, b, len(blocks), [" Let", " me", " look", " that", " up", "."]))
        blocks.append(_tool_use(req, ev, b, len(blocks), scenario))
        stop_reason, out = "tool_use", 20
    else:
        tokens = formats.reply_tokens(req, b)
        index = len(blocks) + (scenario == "out_of_order")  # (index 0 skipped)
        if scenario == "delta_before_start":
            b.first_token_at()
            ev("content_block_delta", index=0, delta={"type": "text_delta", "text": tokens[0]})
            tokens = tokens[1:]
        blocks.append(_text(ev, b, index, tokens, scenario))
        if scenario in ("error", "reset"):
            plan.end = scenario
            return formats.finish(req, plan, b, {}), req.seed
        stop_reason, out = "end_turn", len(tokens)
    b.step()
    ev("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None},
       usage={"output_tokens": out})  # fmt: skip
    ev("message_stop")
    if scenario == "after_stop":
        ev("ping")
    answer = {**message, "content": blocks, "stop_reason": stop_reason}
    answer["usage"] = {**usage, "output_tokens": out}
    return formats.finish(req, plan, b, answer), req.seed


class _Events:
    """Anthropic's blocks: the type on the `event:` line and first in the JSON."""

    def __init__(self, b):
        self.b = b

    def __call__(self, type_, at=None, **fields):
        return formats.event(self.b, {"type": type_, **fields}, at=at, name=type_)


def _thinking(ev, b, index) -> dict:
    ev("content_block_start", index=index,
       content_block={"type": "thinking", "thinking": "", "signature": ""})  # fmt: skip
    ev("ping")
    text = ""
    for piece in [" The", " user", " asks", " a", " question;", " answer", " it", " plainly."]:
        b.step()
        text += piece
        ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": piece})
    signature = f"sig_{b.rng.getrandbits(128):032x}"
    ev(
        "content_block_delta",
        index=index,
        delta={"type": "signature_delta", "signature": signature},
    )
    ev("content_block_stop", index=index)
    return {"type": "thinking", "thinking": text, "signature": signature}


def _text(ev, b, index, tokens, scenario="normal") -> dict:
    ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
    if index == 0:
        ev("ping")
    b.first_token_at()
    for i, token in enumerate(tokens):
        if i:
            b.step()
        ev("content_block_delta", index=index, delta={"type": "text_delta", "text": token})
        if scenario in ("error", "reset") and i == len(tokens) // 2:
            if scenario == "error":
                error = {"type": "overloaded_error", "message": "Overloaded"}
                ev("error", error=error)
            return {}
    if scenario != "never_stopped":
        ev("content_block_stop", index=index)
    if scenario == "stopped_twice":
        ev("content_block_stop", index=index)
    return {"type": "text", "text": "".join(tokens)}


def _tool_use(req, ev, b, index, scenario) -> dict:
    name, args, _ = choose_tool(req, 0)
    call_id = f"toolu_{b.rng.getrandbits(96):024x}"
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    ev("content_block_start", index=index, content_block=start)
    text = json.dumps(args)
    if scenario == "bad_json":
        text = text[:-1]  # the closing brace never comes
    for i in range(0, len(text), 6):
        b.step()
        delta = {"type": "input_json_delta", "partial_json": text[i : i + 6]}
        ev("content_block_delta", index=index, delta=delta)
    ev("content_block_stop", index=index)
    return {**start, "input": args}
