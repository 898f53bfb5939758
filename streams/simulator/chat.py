"""The simulator's ``POST /v1/chat/completions``: Chat Completions chunks as OpenAI writes them
(compact JSON, no ``event:`` line, ``data: [DONE]`` last), paced by the model's profile.

A request with ``tools`` whose last message is the user's gets one tool call (its arguments in
fragments, ``finish_reason: "tool_calls"``); any other gets a text answer. With
``stream_options.include_usage`` every chunk has ``"usage": null`` and a last chunk with empty
``choices`` carries the usage. ``"stream": false`` answers one ``chat.completion`` object.

Scenarios (``metadata.scenario`` or ``X-Simulator-Scenario``): FAULTS below; each fault breaks
one promise streams/core/formats/chat.py checks.
"""

from __future__ import annotations

import json
from typing import Any

from . import formats
from .scenarios import choose_tool, gettext_noop

FAULTS: dict[str, str] = {
    "normal": gettext_noop("Chat Completions: one choice streamed token by token, then [DONE]."),
    "refusal": gettext_noop("Chat Completions: the answer is a refusal (delta.refusal)."),
    "content_filter": gettext_noop(
        "Chat Completions, Azure style: prompt_filter_results first, content_filter_results "
        "on every chunk, the last choice filtered."
    ),
    "comments": gettext_noop("Chat Completions with ': OPENROUTER PROCESSING' comments."),
    "missing_done": gettext_noop("Chat Completions without the final data: [DONE]."),
    "finish_twice": gettext_noop("Chat Completions: finish_reason sent twice."),
    "after_done": gettext_noop("Chat Completions: a chunk after data: [DONE]."),
    "missing_finish": gettext_noop("Chat Completions: [DONE] without a finish_reason."),
    "role_repeated": gettext_noop("Chat Completions: delta.role in a later delta too."),
    "usage_with_choices": gettext_noop("Chat Completions: the usage chunk has choices."),
    "tool_id_changed": gettext_noop("Chat Completions: a tool call's id changes mid-call."),
    "model_changed": gettext_noop("Chat Completions: the model changes between chunks."),
    "error": gettext_noop("Chat Completions: an error object mid-stream, then the end."),
    "reset": gettext_noop("Chat Completions: the connection is reset mid-stream."),
}


def build(body: Any, *, header_scenario, server_seed, default_time_scale, response_id, created_s):
    """(the plan, the request's seed) for a Chat Completions request, or `RequestError`."""
    max_tokens = None
    if isinstance(body, dict):
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    req, scenario = formats.request(
        body,
        FAULTS,
        header_scenario=header_scenario,
        server_seed=server_seed,
        default_time_scale=default_time_scale,
        max_tokens=max_tokens,
    )
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    plan, b, unique, created_s = formats.start(req, response_id, created_s, scenario)
    rid = plan.response_id = "chatcmpl-" + unique
    model = plan.resolved_model
    chunk = _Chunks(b, rid, created_s, model, include_usage, scenario)
    rng = b.rng
    chunk.emit({"role": "assistant", "content": "", "refusal": None}, at=rng.uniform(0.004, 0.015))
    if scenario == "comments":
        formats.comment(b, b": OPENROUTER PROCESSING\n\n")
    b.first_token_at()
    message: dict = {"role": "assistant", "content": None, "refusal": None}
    if formats.wants_tool(req, body):
        name, args, _ = choose_tool(req, 0)
        call_id = f"call_{rng.getrandbits(96):024x}"
        start = {"index": 0, "id": call_id, "type": "function"}
        chunk.emit({"tool_calls": [{**start, "function": {"name": name, "arguments": ""}}]})
        text = json.dumps(args)
        pieces = [text[i : i + 6] for i in range(0, len(text), 6)]
        for i, piece in enumerate(pieces):
            b.step()
            fragment: dict = {"index": 0, "function": {"arguments": piece}}
            if scenario == "tool_id_changed" and i == len(pieces) // 2:
                fragment["id"] = call_id + "x"
            chunk.emit({"tool_calls": [fragment]})
        finish = "tool_calls"
        message["tool_calls"] = [{**start, "function": {"name": name, "arguments": text}}]
        out_tokens = len(pieces) + 3
    else:
        key = "refusal" if scenario == "refusal" else "content"
        tokens = formats.reply_tokens(req, b)
        if scenario == "refusal":
            tokens = [" I", " can", "'t", " help", " with", " that", "."]
        for i, token in enumerate(tokens):
            if i:
                b.step()
            delta: dict = {key: token}
            if scenario == "role_repeated" and i == 1:
                delta["role"] = "assistant"
            if scenario == "comments" and i == len(tokens) // 2:
                formats.comment(b, b": OPENROUTER PROCESSING\n\n")
            changed = scenario == "model_changed" and i == 2
            chunk.emit(delta, model="other-model" if changed else None)
            if scenario == "error" and i == len(tokens) // 2:
                error = {"message": "The server had an error", "type": "server_error"}
                formats.event(b, {"error": {**error, "code": "server_error"}})
                plan.end = "error"
                return formats.finish(req, plan, b, {}), req.seed
            if scenario == "reset" and i == len(tokens) // 2:
                plan.end = "reset"
                return formats.finish(req, plan, b, {}), req.seed
        message[key] = "".join(tokens)
        finish = "content_filter" if scenario == "content_filter" else "stop"
        out_tokens = len(tokens)
    b.step()
    if scenario not in ("missing_finish", "usage_with_choices"):
        chunk.emit({}, finish=finish)
    if scenario == "finish_twice":
        chunk.emit({}, finish=finish)
    usage = _usage(req, out_tokens)
    if include_usage or scenario == "usage_with_choices":
        # (usage_with_choices: the last choice's finish in the usage chunk, as some servers do)
        chunk.usage_chunk(usage, finish=finish if scenario == "usage_with_choices" else None)
    if scenario != "missing_done":
        formats.raw(b, "[DONE]")
    if scenario == "after_done":
        chunk.emit({"content": " late"})
    answer = {
        "id": rid,
        "object": "chat.completion",
        "created": created_s,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }
    return formats.finish(req, plan, b, answer), req.seed


class _Chunks:
    """The chunks of one completion: the same envelope, the pacing of the builder."""

    def __init__(self, b, rid, created_s, model, include_usage, scenario):
        self.b, self.rid, self.created, self.model = b, rid, created_s, model
        self.include_usage, self.scenario = include_usage, scenario

    def _envelope(self, choices, model=None):
        obj = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model or self.model,
            "system_fingerprint": "fp_streamscope",
            "choices": choices,
        }
        if self.include_usage:
            obj["usage"] = None
        return obj

    def emit(self, delta, *, finish=None, at=None, model=None):
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if self.scenario == "content_filter":
            filtered = finish == "content_filter"
            choice["content_filter_results"] = {
                "hate": {"filtered": False, "severity": "safe"},
                "violence": {"filtered": filtered, "severity": "medium" if filtered else "safe"},
            }
            if not self.b.evs:  # Azure's first chunk: the prompt's filter results, no choices
                prompt = {"prompt_index": 0, "content_filter_results": {}}
                formats.event(
                    self.b,
                    {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                     "prompt_filter_results": [prompt]},
                    at=at,
                )  # fmt: skip
        return formats.event(self.b, self._envelope([choice], model), at=at)

    def usage_chunk(self, usage, *, finish=None):
        choices = []
        if finish is not None:
            choices = [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]
        obj = self._envelope(choices)
        obj["usage"] = usage
        return formats.event(self.b, obj)


def _usage(req, out_tokens: int) -> dict:
    prompt = max(1, len(req.input_text) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out_tokens,
        "total_tokens": prompt + out_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
