"""The upstream simulator over real HTTP (httpx + httpx-sse, and the official openai SDK)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from httpx_sse import aconnect_sse

from streams.simulator import SCENARIOS, docs, start_in_thread
from streams.simulator.models import MODELS
from streams.simulator.router import route
from streams.simulator.scenarios import (
    MALFORMED_DATA,
    UTF8_SAMPLE,
    XSS_IMG,
    XSS_SCRIPT,
    SimRequest,
    build_plan,
    stall_threshold_s,
)
from streams.simulator.server import EVENT_COST_BYTES, ResponseLog
from tests.support import paths

ROOT = paths.REPO
TERMINALS = {"response.completed", "error"}
PROMPT = "Tell me about Dutch windmills and polders"


@pytest.fixture(scope="module")
def sim():
    handle = start_in_thread()
    yield handle
    handle.stop()


class Result:
    def __init__(self, status, headers, events, arrivals, log, t_headers):
        self.status = status
        self.headers = headers
        self.sse = events  # httpx_sse.ServerSentEvent, in arrival order
        self.arrivals = arrivals  # monotonic seconds since the request was sent
        self.log = log
        self.t_headers = t_headers

    @property
    def events(self) -> list[dict]:
        return [json.loads(e.data) for e in self.sse]

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def seqs(self) -> list[int | None]:
        return [e.get("sequence_number") for e in self.events]


async def get_log(sim, rid: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as c:
        r = await c.get(f"{sim.root_url}/_simulator/responses/{rid}", params={"wait": 5})
        assert r.status_code == 200
        return r.json()


async def run(sim, scenario="normal", model="gpt-oss-20b", input=PROMPT, time_scale=0, **meta):
    body = {
        "model": model,
        "input": input,
        "metadata": {"scenario": scenario, "time_scale": str(time_scale), **meta},
    }
    for key in ("tools", "stream", "instructions", "max_output_tokens"):
        if key in meta:
            body[key] = body["metadata"].pop(key)
    events, arrivals = [], []
    async with httpx.AsyncClient(timeout=30) as client:
        t0 = time.monotonic()
        async with aconnect_sse(client, "POST", f"{sim.base_url}/responses", json=body) as es:
            t_headers = time.monotonic() - t0
            async for sse in es.aiter_sse():
                if sse.data == "" and sse.retry is not None:
                    continue  # httpx-sse dispatches retry-only blocks; WHATWG SSE does not
                events.append(sse)
                arrivals.append(time.monotonic() - t0)
            resp = es.response
    rid = resp.headers["x-simulator-response-id"]
    log = await get_log(sim, rid)
    return Result(resp.status_code, resp.headers, events, arrivals, log, t_headers)


def check_protocol(res: Result, terminal=True) -> None:
    """Every ordering guarantee of docs/protocol.md."""
    evs = res.events
    assert all(e.event == "message" for e in res.sse)
    assert evs[0]["type"] == "response.created"
    assert evs[0]["response"]["status"] == "in_progress"
    assert evs[0]["response"]["id"] == res.headers["x-simulator-response-id"]
    assert res.seqs == list(range(len(evs)))
    terminals = [i for i, e in enumerate(evs) if e["type"] in TERMINALS]
    if terminal:
        assert terminals == [len(evs) - 1]
    # per item: added < deltas < done; per part: added < deltas < done
    state: dict[int, str] = {}
    parts: dict[tuple[int, int], str] = {}
    texts: dict[tuple[int, int], str] = {}
    for e in evs:
        t, oi = e["type"], e.get("output_index")
        if t == "response.output_item.added":
            assert oi not in state
            state[oi] = "open"
        elif t == "response.output_item.done":
            assert state.get(oi) == "open"
            state[oi] = "done"
        elif t == "response.content_part.added":
            assert state.get(oi) == "open"
            parts[(oi, e["content_index"])] = "open"
            texts[(oi, e["content_index"])] = ""
        elif t == "response.output_text.delta":
            assert state.get(oi) == "open"
            assert parts[(oi, e["content_index"])] == "open"
            texts[(oi, e["content_index"])] += e["delta"]
        elif t == "response.output_text.done":
            assert parts[(oi, e["content_index"])] == "open"
            parts[(oi, e["content_index"])] = "done"
        elif t == "response.function_call_arguments.delta":
            assert state.get(oi) == "open"
    assert all(v == "done" for v in state.values())
    if terminal and evs[-1]["type"] == "response.completed" and "response" in evs[-1]:
        done_text = "".join(e["text"] for e in evs if e["type"] == "response.output_text.done")
        assert evs[-1]["response"]["output_text"] == done_text
        assert evs[-1]["response"]["status"] == "completed"


def check_log_matches(res: Result) -> None:
    log = res.log
    assert log["event_count"] == len(res.sse)
    assert [e["data"] for e in log["events"]] == [e.data for e in res.sse]
    sent = [e["sent_us"] for e in log["events"]]
    assert sent == sorted(sent)
    assert log["closed_us"] >= sent[-1]


# --------------------------------------------------------------------------- basics
async def test_models_endpoint(sim):
    async with httpx.AsyncClient() as c:
        r = await c.get(f"{sim.base_url}/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    ids = [m["id"] for m in body["data"]]
    assert ids == list(MODELS) and "auto" not in ids
    assert all(
        m["object"] == "model" and m["owned_by"] == "streamscope-simulator" for m in body["data"]
    )


def test_scenarios_documented():
    assert len(SCENARIOS) == 30
    for name in SCENARIOS:
        assert f"\n{name} " in docs, name


async def test_normal_stream_keeps_every_guarantee(sim):
    res = await run(sim)
    assert res.status == 200
    assert res.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert res.headers["cache-control"] == "no-cache"
    assert res.headers["transfer-encoding"] == "chunked"
    check_protocol(res)
    check_log_matches(res)
    assert res.types[1:3] == ["response.output_item.added", "response.content_part.added"]
    assert "response.routing.completed" not in res.types
    final = res.events[-1]["response"]
    deltas = "".join(e["delta"] for e in res.events if e["type"] == "response.output_text.delta")
    assert deltas == final["output_text"]
    assert "windmills" in deltas.lower() or "polders" in deltas.lower()
    assert final["model"] == "gpt-oss-20b"
    assert final["usage"]["output_tokens"] == res.types.count("response.output_text.delta")
    assert res.log["outcome"] == "complete"


@pytest.mark.parametrize(
    "text,tools,category,model",
    [
        ("What's the weather in Utrecht tomorrow?", None, "tools", "gpt-oss-120b"),
        ("hello", [{"type": "function", "name": "lookup"}], "tools", "gpt-oss-120b"),
        (
            "Prove step by step that the square root of two is irrational",
            None,
            "reasoning",
            "eu-reasoner",
        ),
        ("x" * 500, None, "reasoning", "eu-reasoner"),
        ("def foo(x): return x  # fix this python", None, "code", "qwen3-coder"),
        ("Hi! How are you today?", None, "chat", "mistral-small-3.2"),
    ],
)
def test_router_rules(text, tools, category, model):
    d = route(text, has_tools=bool(tools))
    assert (d.category, d.model_id, d.source) == (category, model, "rules")
    assert d.reasoning


async def test_auto_is_routed(sim):
    res = await run(sim, model="auto", input="What's the weather in Utrecht?")
    check_protocol(res)
    assert res.types[0] == "response.created"
    assert res.types[1] == "response.routing.completed"
    routing = res.events[1]
    assert routing["sequence_number"] == 1
    assert routing["model_id"] == "gpt-oss-120b"
    assert routing["category"] == "tools"
    assert routing["source"] == "rules" and routing["reasoning"]
    assert res.events[0]["response"]["model"] == "auto"
    assert res.events[-1]["response"]["model"] == "gpt-oss-120b"
    assert res.log["resolved_model"] == "gpt-oss-120b" and res.log["model"] == "auto"
    assert res.types.count("response.routing.completed") == 1


@pytest.mark.parametrize("model", list(MODELS))
async def test_pinned_models_skip_routing(sim, model):
    res = await run(sim, model=model, sentences=2)
    check_protocol(res)
    assert "response.routing.completed" not in res.types
    assert res.events[-1]["response"]["model"] == model


async def test_same_seed_same_stream(sim):
    a = await run(sim, seed="42")
    b = await run(sim, seed="42")
    c = await run(sim, seed="43")

    def strip(res):
        out = []
        for e in res.events:
            if "response" in e:
                e["response"].pop("id"), e["response"].pop("created_at")
            out.append(e)
        return out

    assert strip(a) == strip(b)
    assert strip(a) != strip(c)
    # ids stay unique per response unless deterministic_ids is asked for
    assert a.log["id"] != b.log["id"]
    d = await run(sim, seed="42", deterministic_ids="true")
    e = await run(sim, seed="42", deterministic_ids="true")
    assert [x.data for x in d.sse] == [x.data for x in e.sse]


def test_plan_timing_schedule_is_deterministic():
    body = {"model": "gpt-oss-120b", "input": PROMPT, "metadata": {"seed": 7}}
    p1 = build_plan(SimRequest.from_body(body), "resp_x", 1)
    p2 = build_plan(SimRequest.from_body(body), "resp_x", 1)
    assert [(w.at, w.data) for w in p1.writes] == [(w.at, w.data) for w in p2.writes]


def _answer(metadata):
    body = {"model": "gpt-oss-20b", "input": PROMPT, "metadata": metadata}
    plan = build_plan(SimRequest.from_body(body), "resp_x", 1)
    return plan.final_response["output"][0]["content"][0]["text"]


def test_the_judge_scenarios_answer_in_the_stated_format_or_not_at_all():
    assert _answer({"scenario": "judge", "judge_score": "4"}).startswith("Score: 4\nReason: ")
    assert _answer({"scenario": "judge", "judge_label": "right"}).startswith("Score: right\n")
    drawn = {_answer({"scenario": "judge", "seed": str(i)}).split("\n")[0] for i in range(40)}
    assert drawn == {f"Score: {n}" for n in range(1, 6)}
    assert "score" not in _answer({"scenario": "judge_nonsense"}).lower()


async def test_timing_first_delta_within_ttft_profile(sim):
    model = MODELS["gpt-oss-20b"]
    res = await run(sim, model="gpt-oss-20b", time_scale=1, sentences=2)
    check_protocol(res)
    log_events = res.log["events"]
    first_delta = next(e for e in log_events if e["type"] == "response.output_text.delta")
    ttft = first_delta["sent_us"] / 1e6
    assert model.ttft_min_s - 0.005 <= ttft <= model.ttft_max_s + 0.1
    assert log_events[0]["sent_us"] < 50_000  # response.created comes at once
    # the client saw it at about the same time
    i = next(i for i, e in enumerate(res.events) if e["type"] == "response.output_text.delta")
    assert abs(res.arrivals[i] - ttft) < 0.2
    # deltas are paced (≈ 90 tok/s) rather than dumped
    deltas = [e["sent_us"] for e in log_events if e["type"] == "response.output_text.delta"]
    span = (deltas[-1] - deltas[0]) / 1e6
    assert span >= 0.3 * (len(deltas) - 1) / model.tokens_per_s


async def test_non_stream_returns_final_json(sim):
    async with httpx.AsyncClient() as c:
        r = await c.post(
            f"{sim.base_url}/responses",
            json={
                "model": "gpt-oss-20b",
                "input": PROMPT,
                "stream": False,
                "metadata": {"time_scale": "0"},
            },
        )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output_text"] and body["output"][0]["type"] == "message"
    assert body["id"] == r.headers["x-simulator-response-id"]


@pytest.mark.parametrize(
    "body,status,code",
    [
        (b"{not json", 400, "invalid_json"),
        (json.dumps({"model": "gpt-oss-20b"}).encode(), 400, "missing_required_parameter"),
        (json.dumps({"model": "gpt-9", "input": "hi"}).encode(), 404, "model_not_found"),
        (
            json.dumps({"model": "auto", "input": "hi", "metadata": {"scenario": "nope"}}).encode(),
            400,
            "unknown_scenario",
        ),
    ],
)
async def test_request_errors(sim, body, status, code):
    async with httpx.AsyncClient() as c:
        r = await c.post(f"{sim.base_url}/responses", content=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == code and err["message"] and err["type"]
    if code == "unknown_scenario":
        assert all(name in err["message"] for name in SCENARIOS)


async def test_scenario_header(sim):
    async with httpx.AsyncClient() as c:
        r = await c.post(
            f"{sim.base_url}/responses",
            json={"model": "gpt-oss-20b", "input": "hi"},
            headers={"X-Simulator-Scenario": "http_500"},
        )
    assert r.status_code == 500


async def test_auth(sim, monkeypatch):
    monkeypatch.setenv("SIMULATOR_API_KEY", "sekrit")
    async with httpx.AsyncClient() as c:
        url = f"{sim.base_url}/models"
        assert (await c.get(url)).status_code == 401
        assert (await c.get(url, headers={"Authorization": "Bearer wrong"})).status_code == 401
        r = await c.get(url, headers={"Authorization": "Bearer sekrit"})
        assert r.status_code == 200
        r = await c.post(f"{sim.base_url}/responses", json={"model": "auto", "input": "x"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


async def test_keep_alive_reuses_connection(sim):
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(limits=limits) as c:
        ports = set()
        for _ in range(3):
            body = {"model": "gpt-oss-20b", "input": "hi", "metadata": {"time_scale": "0"}}
            async with c.stream("POST", f"{sim.base_url}/responses", json=body) as r:
                await r.aread()
                stream = r.extensions["network_stream"]
                ports.add(stream.get_extra_info("client_addr")[1])
            await c.get(f"{sim.base_url}/models")
    assert len(ports) == 1


# --------------------------------------------------------------------------- scenarios
async def test_tools(sim):
    res = await run(sim, "tools", input="What is the weather in Utrecht?")
    check_protocol(res)
    check_log_matches(res)
    added = [e for e in res.events if e["type"] == "response.output_item.added"]
    assert [a["item"]["type"] for a in added] == ["function_call", "message"]
    fc_done = next(
        e
        for e in res.events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    )
    item = fc_done["item"]
    assert item["name"] == "get_weather" and item["status"] == "completed"
    assert json.loads(item["arguments"])["location"] == "Utrecht"
    assert item["output"] and item["call_id"].startswith("call_")
    arg_deltas = "".join(
        e["delta"] for e in res.events if e["type"] == "response.function_call_arguments.delta"
    )
    assert arg_deltas == item["arguments"]
    final = res.events[-1]["response"]
    assert len(final["tool_calls"]) == 1 and final["tool_calls"][0]["output"] == item["output"]
    assert final["output_text"]


async def test_tools_uses_declared_tool(sim):
    tools = [{"type": "function", "name": "search_docs", "parameters": {"type": "object"}}]
    res = await run(sim, "tools", input="find the manual", tools=tools)
    assert res.events[-1]["response"]["tool_calls"][0]["name"] == "search_docs"


async def test_parallel_tools_interleave_and_one_fails(sim):
    res = await run(sim, "parallel_tools", input="Compare the weather in Utrecht and Delft")
    check_protocol(res)
    calls = {}
    for i, e in enumerate(res.events):
        oi = e.get("output_index")
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call":
            calls[oi] = [i, None, None]
        elif e["type"] == "response.output_item.done" and oi in calls:
            calls[oi][1] = i
            calls[oi][2] = e["item"]
    assert 2 <= len(calls) <= 3
    spans = sorted((a, b) for a, b, _ in calls.values())
    assert any(spans[k + 1][0] < spans[k][1] for k in range(len(spans) - 1)), "not interleaved"
    statuses = [item["status"] for _, _, item in calls.values()]
    assert statuses.count("failed") == 1 and statuses.count("completed") == len(calls) - 1
    failed = next(item for _, _, item in calls.values() if item["status"] == "failed")
    assert "failed" in failed["output"]
    assert len(res.events[-1]["response"]["tool_calls"]) == len(calls)


async def test_multi_part(sim):
    res = await run(sim, "multi_part")
    check_protocol(res)
    items = [e["item"] for e in res.events if e["type"] == "response.output_item.done"]
    assert [it["type"] for it in items] == ["message", "message"]
    assert [len(it["content"]) for it in items] == [2, 1]
    part_keys = [
        (e["output_index"], e["content_index"])
        for e in res.events
        if e["type"] == "response.content_part.added"
    ]
    assert part_keys == [(0, 0), (0, 1), (1, 0)]
    text = "".join(p["text"] for it in items for p in it["content"])
    assert res.events[-1]["response"]["output_text"] == text


async def test_rewrite(sim):
    res = await run(sim, "rewrite")
    check_protocol(res)
    types = res.types
    i_rw = types.index("response.rewrite.in_progress")
    last_delta = max(i for i, t in enumerate(types) if t == "response.output_text.delta")
    assert last_delta < i_rw < types.index("response.output_text.done")
    deltas = "".join(e["delta"] for e in res.events if e["type"] == "response.output_text.delta")
    done = next(e for e in res.events if e["type"] == "response.output_text.done")["text"]
    assert deltas != done
    assert "definately" in deltas and "definitely" in done and "definately" not in done
    assert res.events[-1]["response"]["output_text"] == done


async def test_final_text_shape(sim):
    res = await run(sim, "final_text")
    check_protocol(res)
    last = res.events[-1]
    assert last["type"] == "response.completed" and "response" not in last
    deltas = "".join(e["delta"] for e in res.events if e["type"] == "response.output_text.delta")
    assert last["final_text"] == deltas


async def test_gap(sim):
    res = await run(sim, "gap")
    seqs = res.seqs
    steps = [b - a for a, b in zip(seqs, seqs[1:], strict=False)]
    assert steps.count(2) == 1 and steps.count(1) == len(steps) - 1
    assert res.types[-1] == "response.completed"
    check_log_matches(res)


async def test_duplicate(sim):
    res = await run(sim, "duplicate")
    seqs = res.seqs
    steps = [b - a for a, b in zip(seqs, seqs[1:], strict=False)]
    assert steps.count(0) == 1 and steps.count(1) == len(steps) - 1
    k = steps.index(0)
    assert res.sse[k].data == res.sse[k + 1].data
    assert res.types[k] == "response.output_text.delta"
    check_log_matches(res)


async def test_reorder(sim):
    res = await run(sim, "reorder")
    seqs = res.seqs
    inversions = [i for i in range(len(seqs) - 1) if seqs[i + 1] < seqs[i]]
    assert len(inversions) == 1
    i = inversions[0]
    assert seqs[i] == seqs[i + 1] + 1
    assert sorted(seqs) == list(range(len(seqs)))
    assert res.types[i] == res.types[i + 1] == "response.output_text.delta"


async def test_missing_terminal(sim):
    res = await run(sim, "missing_terminal")  # ends without a client error
    check_protocol(res, terminal=False)
    assert not TERMINALS & set(res.types)
    assert res.log["outcome"] == "missing_terminal"


@pytest.mark.parametrize("scenario,with_seq", [("error", True), ("error_no_seq", False)])
async def test_error_terminal(sim, scenario, with_seq):
    res = await run(sim, scenario)
    last = res.events[-1]
    assert last["type"] == "error" and last["code"] and last["message"]
    assert ("sequence_number" in last) is with_seq
    assert res.types.count("error") == 1 and "response.completed" not in res.types
    assert "response.output_text.delta" in res.types
    if with_seq:
        assert res.seqs == list(range(len(res.seqs)))
    assert res.log["outcome"] == "error"


@pytest.mark.parametrize("scenario,status", [("http_429", 429), ("http_500", 500)])
async def test_http_errors(sim, scenario, status):
    async with httpx.AsyncClient() as c:
        r = await c.post(
            f"{sim.base_url}/responses",
            json={
                "model": "auto",
                "input": "hi",
                "metadata": {"scenario": scenario, "retry_after": "3"},
            },
        )
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] and err["message"] and err["type"]
    if status == 429:
        assert r.headers["retry-after"] == "3"
    log = await get_log(sim, r.headers["x-simulator-response-id"])
    assert log["outcome"] == scenario and log["events"] == []


async def test_wrong_content_type(sim):
    async with httpx.AsyncClient() as c:
        r = await c.post(
            f"{sim.base_url}/responses",
            json={
                "model": "auto",
                "input": "hi",
                "metadata": {"scenario": "wrong_content_type", "time_scale": "0"},
            },
        )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json()["status"] == "completed"


async def test_malformed_json(sim):
    res_sse = []
    body = {
        "model": "gpt-oss-20b",
        "input": PROMPT,
        "metadata": {"scenario": "malformed_json", "time_scale": "0"},
    }
    async with httpx.AsyncClient() as c:
        async with aconnect_sse(c, "POST", f"{sim.base_url}/responses", json=body) as es:
            async for sse in es.aiter_sse():
                res_sse.append(sse.data)
    bad = []
    good = []
    for data in res_sse:
        try:
            good.append(json.loads(data))
        except json.JSONDecodeError:
            bad.append(data)
    assert bad == [MALFORMED_DATA]
    assert [e["sequence_number"] for e in good] == list(range(len(good)))
    assert good[-1]["type"] == "response.completed"


async def test_stall(sim):
    res = await run(sim, "stall", stall_s="0.5")
    check_protocol(res)
    gaps = [b - a for a, b in zip(res.arrivals, res.arrivals[1:], strict=False)]
    # The client stamps an event once it has parsed it: the burst before the stall arrives in
    # one chunk, so its last event is stamped a little after the bytes came (0.8 ms seen). The
    # server's own send times below are exact.
    assert max(gaps) >= 0.5 - 0.02
    assert sorted(gaps)[-2] < 0.25  # exactly one stall
    sent = [e["sent_us"] for e in res.log["events"]]
    assert max(b - a for a, b in zip(sent, sent[1:], strict=False)) >= 500_000


def _stall_fault(**metadata):
    body = {"model": "gpt-oss-20b", "input": PROMPT, "metadata": {"scenario": "stall", **metadata}}
    plan = build_plan(SimRequest.from_body(body), "resp_x", 1)
    (fault,) = [f for f in plan.faults if f["kind"] == "stall"]
    return fault["stall_s"], plan


@pytest.mark.parametrize(
    "metadata, silence_s",
    [
        ({}, 90.0),  # real pacing: the scenario's own 90 s
        ({"time_scale": "0.25"}, 22.5),  # the playground's "4× faster"
        ({"speed": "2"}, 45.0),
        ({"time_scale": "2"}, 180.0),  # half speed
        ({"time_scale": "0"}, 3.0),  # "Instant" still stalls, briefly
        ({"time_scale": "0.25", "stall_s": "5"}, 5.0),  # explicit: seconds at any pacing
        ({"time_scale": "0", "stall_s": "0.5"}, 0.5),
    ],
)
def test_the_stall_scenario_silence_scales_with_the_pacing(metadata, silence_s):
    got, plan = _stall_fault(**metadata)
    assert got == silence_s
    # the silence is an absolute offset of the writes after it, not scaled again at send time
    offsets = sorted({w.offset for w in plan.writes})
    assert offsets == [0.0, silence_s]


@pytest.mark.parametrize(
    "configured, metadata, threshold",
    [
        (60.0, {}, 60.0),
        (60.0, {"time_scale": "0.25"}, 15.0),
        (60.0, {"speed": "4"}, 15.0),
        (60.0, {"time_scale": "2"}, 120.0),
        (60.0, {"time_scale": "0"}, 2.0),  # Instant: the floor, below its 3 s silence
        (60.0, {"time_scale": "0.25", "stall_s": "5"}, 60.0),  # explicit stall_s: unscaled
        (0.4, {"time_scale": "0.05"}, 0.4),  # a test's own small threshold is never raised
        (60.0, {"time_scale": "nonsense"}, 60.0),
        (60.0, None, 60.0),
    ],
)
def test_the_stall_threshold_for_simulator_runs_scales_the_same_way(
    configured, metadata, threshold
):
    assert stall_threshold_s(configured, metadata) == pytest.approx(threshold)


@pytest.mark.parametrize("time_scale", ["0", "0.01", "0.25", "0.5", "1", "2"])
def test_at_every_speed_the_stall_scenario_outlasts_the_scaled_threshold(time_scale):
    silence_s, _ = _stall_fault(time_scale=time_scale)
    assert silence_s > stall_threshold_s(60.0, {"time_scale": time_scale})


async def test_stall_at_instant_speed_is_a_short_silence_on_the_wire(sim):
    res = await run(sim, "stall", time_scale=0)
    check_protocol(res)
    sent = [e["sent_us"] for e in res.log["events"]]
    gaps = sorted(b - a for a, b in zip(sent, sent[1:], strict=False))
    assert gaps[-1] >= 3_000_000  # MIN_STALL_SILENCE_S, not the 90 s of real pacing
    assert gaps[-2] < 500_000  # and only one silence


async def test_stall_client_disconnect_stops_server(sim):
    body = {
        "model": "gpt-oss-20b",
        "input": PROMPT,
        "metadata": {"scenario": "stall", "stall_s": "30", "time_scale": "0"},
    }
    async with httpx.AsyncClient() as c:
        async with aconnect_sse(c, "POST", f"{sim.base_url}/responses", json=body) as es:
            rid = es.response.headers["x-simulator-response-id"]
            n = 0
            async for _ in es.aiter_sse():
                n += 1
                if n == 5:
                    break
    t = time.monotonic()
    log = sim.log.wait(rid, 3)
    assert time.monotonic() - t < 2
    assert log["outcome"] == "client_disconnected"
    assert "response.completed" not in [e["type"] for e in log["events"]]


async def test_slow_headers(sim):
    res = await run(sim, "slow_headers", header_delay_s="0.3")
    assert res.t_headers >= 0.3
    check_protocol(res)
    assert res.log["events"][0]["sent_us"] >= 300_000


async def test_unknown_event(sim):
    res = await run(sim, "unknown_event")
    assert {"response.citation.added", "response.usage.partial"} <= set(res.types)
    assert res.seqs == list(range(len(res.seqs)))
    assert res.types[-1] == "response.completed"


async def test_utf8_split(sim):
    body = {
        "model": "gpt-oss-20b",
        "input": PROMPT,
        "metadata": {"scenario": "utf8_split", "time_scale": "0", "sentences": "2"},
    }
    pieces: list[bytes] = []
    async with httpx.AsyncClient() as c:
        async with c.stream("POST", f"{sim.base_url}/responses", json=body) as r:
            async for piece in r.aiter_raw():
                pieces.append(piece)
            rid = r.headers["x-simulator-response-id"]

    def incomplete(b: bytes) -> bool:
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as exc:
            return exc.reason == "unexpected end of data"
        return False

    assert sum(incomplete(p) for p in pieces) >= 3  # characters really arrived split
    text = b"".join(pieces).decode("utf-8")
    events = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas.startswith(UTF8_SAMPLE) and deltas.endswith(UTF8_SAMPLE)
    assert deltas == events[-1]["response"]["output_text"]
    log = sim.log.wait(rid)
    assert log["writes"] > log["event_count"]
    # and httpx-sse reassembles it too
    res = await run(sim, "utf8_split", sentences="2")
    check_protocol(res)
    assert (
        "".join(e["delta"] for e in res.events if e["type"] == "response.output_text.delta")
        == deltas
    )


async def test_huge_delta(sim):
    res = await run(sim, "huge_delta")
    check_protocol(res)
    sizes = [
        len(e["delta"].encode()) for e in res.events if e["type"] == "response.output_text.delta"
    ]
    assert max(sizes) >= 1_000_000
    assert sorted(sizes)[-2] < 100


async def test_bursty(sim):
    res = await run(sim, "bursty", model="gpt-oss-120b", time_scale=0.25)
    check_protocol(res)
    check_log_matches(res)
    # the server released ≥ 40 events per write...
    from collections import Counter

    per_write = Counter(e["sent_us"] for e in res.log["events"])
    assert max(per_write.values()) >= 40
    # ...and the client saw a silence followed by a burst
    arr = res.arrivals
    found = False
    for i in range(1, len(arr) - 40):
        if arr[i] - arr[i - 1] >= 0.15 and arr[i + 39] - arr[i] < 0.1:
            found = True
    assert found


async def test_reset(sim):
    body = {
        "model": "gpt-oss-20b",
        "input": PROMPT,
        "metadata": {"scenario": "reset", "time_scale": "0"},
    }
    got = []
    async with httpx.AsyncClient() as c:
        with pytest.raises(httpx.ReadError):  # ECONNRESET: a real RST, not a clean FIN
            async with aconnect_sse(c, "POST", f"{sim.base_url}/responses", json=body) as es:
                rid = es.response.headers["x-simulator-response-id"]
                async for sse in es.aiter_sse():
                    got.append(sse)
    log = await get_log(sim, rid)
    assert log["outcome"] == "reset"
    assert "response.completed" not in [e["type"] for e in log["events"]]


async def test_fast(sim):
    t = time.monotonic()
    res = await run(sim, "fast", events="10000")
    elapsed = time.monotonic() - t
    assert len(res.sse) == 10_000
    assert res.types[0] == "response.created" and res.types[-1] == "response.completed"
    assert set(res.types[1:-1]) == {"response.output_text.delta"}
    assert res.seqs == list(range(10_000))
    deltas = "".join(e["delta"] for e in res.events[1:-1])
    assert deltas == res.events[-1]["response"]["output_text"]
    check_log_matches(res)
    assert res.log["writes"] < 200
    assert elapsed < 10


async def test_xss(sim):
    res = await run(sim, "xss")
    check_protocol(res)
    deltas = [e["delta"] for e in res.events if e["type"] == "response.output_text.delta"]
    assert XSS_IMG in deltas and XSS_SCRIPT in deltas


async def test_comments(sim):
    body = {
        "model": "gpt-oss-20b",
        "input": PROMPT,
        "metadata": {"scenario": "comments", "time_scale": "0"},
    }
    async with httpx.AsyncClient() as c:
        r = await c.post(f"{sim.base_url}/responses", json=body)
    assert "\n: keep-alive\n\n" in r.text and "\nretry: 1000\n\n" in r.text
    res = await run(sim, "comments")
    check_protocol(res)
    check_log_matches(res)
    data_blocks = r.text.count("data: ")
    assert data_blocks == len(res.sse)


async def test_done_sentinel(sim):
    res_data = []
    body = {
        "model": "gpt-oss-20b",
        "input": PROMPT,
        "metadata": {"scenario": "done_sentinel", "time_scale": "0"},
    }
    async with httpx.AsyncClient() as c:
        async with aconnect_sse(c, "POST", f"{sim.base_url}/responses", json=body) as es:
            async for sse in es.aiter_sse():
                res_data.append(sse.data)
    assert res_data[-1] == "[DONE]"
    assert json.loads(res_data[-2])["type"] == "response.completed"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_every_scenario_is_logged(sim, scenario):
    body = {
        "model": "auto",
        "input": PROMPT,
        "metadata": {
            "scenario": scenario,
            "time_scale": "0",
            "stall_s": "0.05",
            "header_delay_s": "0.05",
            "events": "300",
            "huge_bytes": "2000",
            "split_pause_s": "0.001",
        },
    }
    async with httpx.AsyncClient() as c:
        try:
            async with c.stream("POST", f"{sim.base_url}/responses", json=body) as r:
                await r.aread()
                rid = r.headers["x-simulator-response-id"]
        except (httpx.ReadError, httpx.RemoteProtocolError):
            assert scenario == "reset"
            rid = sim.log.ids(1)[-1]
    log = await get_log(sim, rid)
    assert log["scenario"] == scenario and log["outcome"] != "in_progress"
    assert log["closed_us"] is not None
    assert sim.log.get(rid)["id"] == rid
    async with httpx.AsyncClient() as c:
        ids = (await c.get(f"{sim.root_url}/_simulator/responses/")).json()["data"]
    assert rid in ids


def test_log_is_bounded():
    log = ResponseLog(max_responses=3, max_events=5)
    for i in range(5):
        req = SimRequest.from_body({"model": "gpt-oss-20b", "input": f"hi {i}"})
        plan = build_plan(req, f"resp_{i}", 0)
        entry = log.open(plan, req.seed, 0)
        for k, ev in enumerate(plan.events):
            log.add_event(entry, k, ev, k)
        log.close(entry, "complete", 1)
    assert log.ids() == ["resp_2", "resp_3", "resp_4"]
    got = log.get("resp_4")
    assert len(got["events"]) == 5 and got["events_truncated"]
    assert got["event_count"] == len(plan.events)


# --------------------------------------------------------------------------- openai SDK
def _sdk_events(sim, scenario, model="gpt-oss-20b", input=PROMPT, **meta):
    from openai import OpenAI

    client = OpenAI(base_url=sim.base_url, api_key="x", max_retries=0)
    try:
        stream = client.responses.create(
            model=model,
            input=input,
            stream=True,
            metadata={"scenario": scenario, "time_scale": "0", **meta},
        )
        rid = stream.response.headers["x-simulator-response-id"]
        events = list(stream)
    finally:
        client.close()
    return events, sim.log.wait(rid)


@pytest.mark.parametrize(
    "scenario,model",
    [
        ("normal", "gpt-oss-20b"),
        ("tools", "gpt-oss-120b"),
        ("rewrite", "mistral-small-3.2"),
        ("parallel_tools", "auto"),
        ("multi_part", "auto"),
        ("unknown_event", "qwen3-coder"),
        ("done_sentinel", "gpt-oss-20b"),
    ],
)
def test_openai_sdk_iterates(sim, scenario, model):
    events, log = _sdk_events(sim, scenario, model=model)
    expected = log["event_count"] - (1 if scenario == "done_sentinel" else 0)
    assert len(events) == expected
    assert [e.type for e in events] == [e["type"] for e in log["events"] if e["type"] is not None]
    assert [e.sequence_number for e in events] == list(range(expected))
    last = events[-1]
    assert last.type == "response.completed"
    completed = next(
        json.loads(e["data"]) for e in log["events"] if e["type"] == "response.completed"
    )
    assert last.response.output_text == completed["response"]["output_text"]
    assert last.response.id == log["id"]
    if model == "auto":
        assert events[1].type == "response.routing.completed"


def test_openai_sdk_non_stream(sim):
    from openai import OpenAI

    client = OpenAI(base_url=sim.base_url, api_key="x", max_retries=0)
    resp = client.responses.create(
        model="gpt-oss-20b", input="hello", metadata={"time_scale": "0"}, stream=False
    )
    assert resp.status == "completed" and resp.output_text
    models = [m.id for m in client.models.list()]
    assert models == list(MODELS)
    client.close()


# --------------------------------------------------------------------------- command
def test_management_command_runs_and_stops():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "simulate_upstream",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--seed",
            "5",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("http://127.0.0.1:") and line.endswith("/v1")
        r = httpx.get(f"{line}/models", timeout=5)
        assert r.status_code == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_server_in_test_loop():
    from streams.simulator import SimulatorServer

    server = SimulatorServer(time_scale=0)
    port = await server.start()
    assert server.base_url == f"http://127.0.0.1:{port}/v1"
    async with httpx.AsyncClient() as c:
        r = await c.post(f"{server.base_url}/responses", json={"model": "auto", "input": "hi"})
        assert r.status_code == 200 and "response.completed" in r.text
    await server.stop()
    await asyncio.sleep(0)


def test_openai_sdk_quirks(sim):
    """Known incompatibilities of the openai SDK with valid-but-unusual streams (documented,
    not papered over): a ``retry:``-only SSE block is dispatched as an event with empty data
    (WHATWG says: no event) and fails ``json.loads``; a malformed data line raises too; a
    missing terminal and sequence faults go unnoticed."""
    import json as _json

    with pytest.raises(_json.JSONDecodeError):
        _sdk_events(sim, "comments")
    events, log = _sdk_events(sim, "comments", retry_block="false")
    assert len(events) == log["event_count"]
    with pytest.raises(_json.JSONDecodeError):
        _sdk_events(sim, "malformed_json")
    events, log = _sdk_events(sim, "missing_terminal")
    assert events[-1].type != "response.completed" and len(events) == log["event_count"]
    events, _ = _sdk_events(sim, "error")
    assert events[-1].type == "error"
    events, _ = _sdk_events(sim, "final_text")
    assert events[-1].type == "response.completed"


def _log_responses(log, n, sent_us=0):
    """`n` responses of six sentences logged as sent, as the server logs them."""
    for i in range(n):
        req = SimRequest.from_body(
            {"model": "gpt-oss-20b", "input": f"hi {i}", "metadata": {"sentences": "6"}}
        )
        plan = build_plan(req, f"resp_{i}", 0)
        entry = log.open(plan, req.seed, 0)
        for k, ev in enumerate(plan.events):
            log.add_event(entry, k, ev, sent_us + k)
        log.close(entry, "complete", 1)


def test_log_total_budget_evicts_oldest():
    log = ResponseLog(max_bytes=150 * (EVENT_COST_BYTES + 200))
    _log_responses(log, 4)
    kept = log.ids()
    assert kept[-1] == "resp_3" and "resp_0" not in kept
    assert log.bytes <= log.max_bytes
    assert log.bytes == sum(
        len(e["data"]) + EVENT_COST_BYTES for i in kept for e in log.get(i)["events"]
    )
    log.clear()
    assert log.bytes == 0 and log.ids() == []


def test_the_logs_budget_is_what_it_holds_in_memory():
    """What the log counts per event (its data's length + EVENT_COST_BYTES) is at least what
    the event costs in memory (tracemalloc): MAX_LOG_BYTES bounds the simulator's memory, not
    only the text it logged (a budget of events and text let a long-running simulator reach
    0.8 GB)."""
    import tracemalloc

    log = ResponseLog(max_bytes=10**12)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _log_responses(log, 20, sent_us=1_000_000)  # (numbers that are objects of their own)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    events = sum(len(log.get(i)["events"]) for i in log.ids())
    assert events > 1000
    assert used <= log.bytes, (used, log.bytes, events)
    assert log.bytes < 2 * used  # and not far above it


def test_models_have_distinct_latency_profiles():
    """TTFT and pacing from the plans (no network): medians follow the model profiles."""
    import statistics

    def first_delta_at(model, seed):
        req = SimRequest.from_body(
            {"model": model, "input": PROMPT, "metadata": {"seed": seed, "sentences": "3"}}
        )
        plan = build_plan(req, "resp_x", 0)
        w = next(w for w in plan.writes if b"output_text.delta" in w.data)
        last = plan.writes[-2]
        return w.at, last.at - w.at, sum(b"output_text.delta" in x.data for x in plan.writes)

    for model, profile in MODELS.items():
        samples = [first_delta_at(model, s) for s in range(60)]
        ttfts = [s[0] for s in samples]
        assert all(profile.ttft_min_s <= t <= profile.ttft_max_s + 0.001 for t in ttfts)
        assert abs(statistics.median(ttfts) - profile.ttft_median_s) < 0.3 * profile.ttft_median_s
        rate = statistics.median((n - 1) / d for _, d, n in samples)
        assert 0.6 * profile.tokens_per_s < rate < 1.4 * profile.tokens_per_s
    assert MODELS["eu-reasoner"].ttft_median_s > 2 * MODELS["gpt-oss-120b"].ttft_median_s
    assert MODELS["gpt-oss-20b"].tokens_per_s > 2 * MODELS["gpt-oss-120b"].tokens_per_s


# Scenarios whose plan is the stream as the protocol says, with no fault to record.
FAULT_FREE = {"normal", "tools", "parallel_tools", "multi_part", "final_text", "xss"}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_but_the_fault_free_records_its_own_fault(scenario):
    """The plan builder picks a scenario's output and fault from tables keyed by its name: a
    name missing from them, or mistyped there, would send a normal stream without a word."""
    from streams.simulator import scenarios

    assert set(scenarios._FAULTS) | set(scenarios._OUTPUT_BUILDERS) <= set(SCENARIOS)
    body = {"model": "gpt-oss-20b", "input": PROMPT, "metadata": {"scenario": scenario}}
    plan = build_plan(SimRequest.from_body(body))
    kinds = [fault["kind"] for fault in plan.faults]
    assert (kinds == []) if scenario in FAULT_FREE else (kinds[0] == scenario)


@pytest.mark.parametrize("cap", [1, 3, 6, 12, 40])
def test_xss_cut_short_by_max_output_tokens_still_answers(cap):
    """A cap that cuts the markup off (before the script tag, or inside it) still gives a
    plan: the capped text, as any message (it raised IndexError, and the client got no
    response at all)."""
    body = {"model": "gpt-oss-20b", "input": "hi", "max_output_tokens": cap,
            "metadata": {"scenario": "xss"}}  # fmt: skip
    plan = build_plan(SimRequest.from_body(body), "resp_x", 1)
    assert plan.events
