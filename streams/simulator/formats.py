"""What the simulator's Chat Completions and Anthropic Messages answers share: the request read
into a `SimRequest` (so seeds, pacing, models and routing are the Responses scenarios'), the
format's own fault chosen by `metadata.scenario` or `X-Simulator-Scenario`, and the events made
into a `Plan` the server sends as it sends any (streams/simulator/chat.py, messages.py).
"""

from __future__ import annotations

import json
import random
from typing import Any

from .models import MODELS
from .scenarios import (
    Builder,
    Ev,
    Plan,
    RequestError,
    SimRequest,
    capped,
    number_events,
    plan_writes,
    reply_text,
    response_ids,
    route_request,
    sentence_count,
    tokenize,
)


def request(
    body: Any,
    faults: dict[str, str],
    *,
    header_scenario: str | None,
    server_seed: int | str,
    default_time_scale: float,
    system: Any = None,
    max_tokens: Any = None,
) -> tuple[SimRequest, str]:
    """The request as a SimRequest (its `messages` as the input) and the format's fault."""
    if not isinstance(body, dict):
        raise RequestError(400, "invalid_json", "The request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(
            400, "missing_required_parameter", "Missing required parameter: 'messages'"
        )
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    scenario = str(metadata.get("scenario") or header_scenario or "normal").strip()
    if scenario not in faults:
        raise RequestError(
            400,
            "unknown_scenario",
            f"Unknown scenario '{scenario}'. Valid scenarios: {', '.join(faults)}",
        )
    # (the Responses request it stands for: the scenario is this format's, not one of those)
    as_responses = {
        "model": body.get("model"),
        "input": messages,
        "instructions": system if isinstance(system, str) else None,
        "tools": body.get("tools"),
        "max_output_tokens": max_tokens,
        "stream": body.get("stream") is True,
        "metadata": {**metadata, "scenario": "normal", "format_scenario": scenario},
    }
    req = SimRequest.from_body(
        as_responses, server_seed=server_seed, default_time_scale=default_time_scale
    )
    return req, scenario


def start(
    req: SimRequest, response_id: str, created_s: int, scenario: str
) -> tuple[Plan, Builder, str, int]:
    """The plan, the builder whose clock and random numbers its events take, and the
    response's id and creation time (s): the server's, or the seed's with
    ``metadata.deterministic_ids`` (as the Responses scenarios')."""
    response_id, created_ms = response_ids(req, response_id, created_s * 1000)
    routing, resolved = route_request(req)
    plan = Plan(
        response_id=response_id,
        scenario=scenario,
        model=req.model,
        resolved_model=resolved,
        time_scale=req.time_scale,
        routing=routing.as_event_fields() if routing else None,
    )
    builder = Builder(req, random.Random(req.seed), MODELS[resolved], response_id)
    return plan, builder, response_id.removeprefix("resp_"), created_ms // 1000


def reply_tokens(req: SimRequest, b: Builder) -> list[str]:
    text = capped(req, b.rng, reply_text(b.rng, req.user_text, sentence_count(req, b.rng, (3, 6))))
    return tokenize(b.rng, text)


def wants_tool(req: SimRequest, body: dict) -> bool:
    """A model answers a user's message with a call when it was given tools (and answers the
    tool's result with text)."""
    last = body["messages"][-1]
    return bool(req.tools) and isinstance(last, dict) and last.get("role") == "user"


def event(b: Builder, obj: dict, *, at: float | None = None, name: str | None = None) -> Ev:
    """One block whose data is `obj` as the format's servers write it (compact, not numbered),
    with `name` on the `event:` line (None: no such line)."""
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return b.emit(obj, at=at, raw=data, numbered=False, event_line=name)


def raw(b: Builder, data: str, *, name: str | None = None) -> Ev:
    return b.emit(None, raw=data, numbered=False, event_line=name)


def comment(b: Builder, text: bytes) -> Ev:
    return b.emit(None, comment=text)


def finish(req: SimRequest, plan: Plan, b: Builder, answer: dict) -> Plan:
    """The plan's writes (or, for `stream: false`, `answer` as one JSON body after the
    stream's time)."""
    evs = b.evs
    number_events(plan, evs)
    plan.final_response = answer
    if not req.stream:
        plan.body = json.dumps(answer, ensure_ascii=False).encode()
        plan.content_type = "application/json"
        plan.header_delay += evs[-1].at * req.time_scale if evs else 0.0
        return plan
    plan.linger = req.meta_float("linger_s", 0.0)
    plan_writes(req, plan, evs)
    return plan
