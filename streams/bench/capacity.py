"""How many concurrent paced streams one process carries, proxied, recorded and watched live.

Steps of N streams (`--steps`, ascending). At each, N clients each run STREAMS paced streams
back to back (steady arrivals: their first starts spread over one stream's duration, so about
N are in flight throughout), first straight to the simulator (the step's baseline), then
through the recording proxy of one Daphne running the project (`POST /v1/responses`), each
proxied stream watched by a WebSocket viewer of its own (`/ws/streams/<id>/?format=json`,
opened as soon as the response's head names the stream). Per step:

- client added p50/p99: (the proxied client's receipt − the simulator's send time, from its
  own log on the same monotonic clock), its percentile minus the direct calls' at this step;
- viewer added p50/p99: the same for the viewer's receipt, over the events it got live (those
  the proxy's client had after the viewer was subscribed; earlier ones come in its catch-up
  read), minus the direct percentile;
- lost: events the simulator sent that a client, a viewer or the record lacks;
- the server's CPU: cores used while it proxied, µs per proxied event.

The capacity is the largest step whose client and viewer added p99 are both within
`--limit-ms` (50) with nothing lost; the ramp stops at the first step past it. The server's
limits are sized for the largest step (streams.bench.server_limits); the simulator and the
clients share the machine's other core, so a step can also be limited by them: the direct
baseline at the same step says how late the simulator's own events were.
"""

import asyncio
import json
import time

import httpx
from django.core.management.base import CommandError

from streams.bench import fail_if, limits_of, migrated_env, server_limits
from streams.bench.proxy import (
    bench_token,
    paced_request,
    pacing_arguments,
    proxy_server,
    received,
    simulator,
    unrecorded,
)
from streams.bench.relay import PATIENCE_S
from streams.core import figures

STREAMS = 2  # per client and step
DEFAULT_STEPS = "25,50,100,150,200,300,400"


def add_arguments(parser):
    parser.add_argument("--steps", default=DEFAULT_STEPS, help="concurrent streams per step")
    parser.add_argument(
        "--limit-ms", type=float, default=50.0, help="the added p99 a step may have (ms)"
    )
    pacing_arguments(parser)


def run(command, opts):
    steps = sorted({int(n) for n in opts["steps"].split(",") if n.strip()})
    if not steps or steps[0] < 1:
        raise CommandError("--steps: positive stream counts, e.g. 25,50,100")
    tmp, env = migrated_env("capacity", drop=("REDIS_URL",))
    token = bench_token(env)
    sim = simulator(tmp, env)
    most = steps[-1]
    # a client's next request may arrive while the proxy still finishes its last one
    limits = server_limits(
        env,
        streams=2 * most,
        requests=2 * most,
        sockets=2 * most,
        viewer_events=100_000,
        patience_s=PATIENCE_S,
    )
    daphne = proxy_server(tmp, env, sim, limits)
    request = paced_request(opts)
    results = []
    capacity = 0
    try:
        for n in steps:
            result = asyncio.run(_step(n, sim.port, daphne, token, request))
            result["lost_events"] += unrecorded(env, result.pop("_proxied"))
            added = (result["client_added_p99_ms"], result["viewer_added_p99_ms"])
            # (nothing measured is nothing shown to hold)
            result["within"] = result["lost_events"] == 0 and all(
                a is not None and a <= opts["limit_ms"] for a in added
            )
            results.append(result)
            _print(command, result, opts["json"])
            if not result["within"]:
                break
            capacity = n
    finally:
        daphne.stop()
        sim.stop()
    summary = {
        "capacity": capacity,
        "limit_ms": opts["limit_ms"],
        "server_limits": limits_of(limits),
    }
    if opts["json"]:
        command.stdout.write(json.dumps(summary))
    else:
        command.stdout.write(
            f"capacity: {capacity} concurrent paced streams, proxied, recorded and watched, "
            f"with the added p99 within {opts['limit_ms']:g} ms and nothing lost"
            + ("" if results[-1]["within"] else f" ({results[-1]['streams']} were not)")
        )
    fail_if(
        [
            f"{r['streams']} streams: {r['lost_events']} event(s) lost"
            for r in results
            if r["lost_events"]
        ],
        "capacity",
    )
    return results


def _print(command, r, as_json):
    if as_json:
        command.stdout.write(json.dumps(r))
        return
    command.stdout.write(
        f"{r['streams']:>4} streams: client added p50 {r['client_added_p50_ms']} / p99 "
        f"{r['client_added_p99_ms']} ms, viewer added p50 {r['viewer_added_p50_ms']} / p99 "
        f"{r['viewer_added_p99_ms']} ms (direct p99 {r['direct_p99_ms']} ms); lost "
        f"{r['lost_events']}; server {r['cores']} cores, {r['cpu_us_per_event']} µs CPU/event"
        + ("" if r["within"] else "  <- past the limit")
    )


async def _step(n, sim_port, daphne, token, request):
    """One step: `n` clients straight to the simulator, then through the proxy with viewers."""
    sim_root = f"http://127.0.0.1:{sim_port}"
    proxy = f"http://127.0.0.1:{daphne.port}"
    auth = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=4 * n + 8, max_keepalive_connections=4 * n + 8)
    async with httpx.AsyncClient(timeout=PATIENCE_S, limits=limits) as client:
        # one stream's duration, for spreading the clients' starts (and a warm-up of both paths)
        started = time.monotonic_ns()
        await _stream(client, sim_root + "/v1", {}, request, -1, None)
        duration_ns = time.monotonic_ns() - started
        await _stream(client, proxy + "/v1", auth, request, -2, proxy)
        direct = await _clients(client, sim_root + "/v1", {}, request, n, duration_ns, None)
        cpu = daphne.cpu_s()
        t0 = time.monotonic()
        proxied = await _clients(client, proxy + "/v1", auth, request, n, duration_ns, proxy)
        cpu, wall = daphne.cpu_s() - cpu, time.monotonic() - t0
        direct_lag, lost = [], 0
        for run in direct:
            lags, _, missing = await _lags(client, sim_root, run)
            direct_lag += lags
            lost += missing
        client_lag, viewer_lag, events, recorded = [], [], 0, {}
        for run in proxied:
            lags, live, missing = await _lags(client, sim_root, run)
            client_lag += lags
            viewer_lag += live
            lost += missing
            events += len(run["receipts"])
            recorded[run["stream_id"]] = len(run["receipts"])
    direct_p50, direct_p99 = _at(direct_lag, 50), _at(direct_lag, 99)
    return {
        "streams": n,
        "client_added_p50_ms": _added(client_lag, 50, direct_p50),
        "client_added_p99_ms": _added(client_lag, 99, direct_p99),
        "viewer_added_p50_ms": _added(viewer_lag, 50, direct_p50),
        "viewer_added_p99_ms": _added(viewer_lag, 99, direct_p99),
        "direct_p99_ms": direct_p99,
        "viewer_live_events": len(viewer_lag),
        "lost_events": lost,
        "events": events,
        "cores": round(cpu / wall, 2),
        "cpu_us_per_event": round(cpu * 1e6 / max(1, events), 1),
        "_proxied": recorded,
    }


async def _clients(client, base, headers, request, n, duration_ns, viewer_root):
    """`n` steady clients of STREAMS streams each (see the module's docstring): their runs."""

    async def one(i):
        await asyncio.sleep(i * duration_ns / n / 1e9)
        return [
            await _stream(client, base, headers, request, i * 10 + j, viewer_root)
            for j in range(STREAMS)
        ]

    return [run for runs in await asyncio.gather(*(one(i) for i in range(n))) for run in runs]


async def _stream(client, base, headers, request, seed, viewer_root):
    """One paced stream: the client's receipt time per event, the upstream's response id, the
    proxy's stream id; with `viewer_root`, a viewer's (subscribed at, [(index, receipt)])."""
    body = {**request.body, "metadata": {**request.body["metadata"], "seed": str(seed)}}
    viewer = None
    async with client.stream("POST", f"{base}/responses", json=body, headers=headers) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode(errors="replace")[:500]
            raise CommandError(f"bench capacity: {base}/responses answered {r.status_code}: {text}")
        stream_id = r.headers.get("x-streamscope-stream")
        if viewer_root is not None and stream_id:
            viewer = asyncio.ensure_future(_view(viewer_root, int(stream_id), headers))
        receipts, response_id, _ = await received(r, time.monotonic_ns())
    return {
        "receipts": receipts,
        "response_id": response_id,
        "stream_id": int(stream_id) if stream_id else None,
        "viewer": await viewer if viewer is not None else None,
    }


async def _view(root, stream_id, headers):
    """A viewer of `stream_id` until its terminal frame: (subscribed at ns, [(index, ns)])."""
    from websockets.asyncio.client import connect

    url = root.replace("http://", "ws://") + f"/ws/streams/{stream_id}/?format=json"
    records = []
    async with connect(
        url, origin=root, additional_headers=headers, max_size=None, open_timeout=PATIENCE_S
    ) as ws:
        subscribed = time.monotonic_ns()
        while True:
            async with asyncio.timeout(PATIENCE_S):
                message = await ws.recv()
            now = time.monotonic_ns()
            frame = json.loads(message)
            records += [(e["index"], now) for e in frame.get("events", ())]
            if frame.get("terminal"):
                break
    return subscribed, records


async def _lags(client, sim_root, run):
    """(client lags ms, the viewer's live lags ms, events missing) of one run, against what
    the simulator's log says it sent and when."""
    log = (await client.get(f"{sim_root}/_simulator/responses/{run['response_id']}")).json()
    t0 = log["request_received_ns"]
    sent = [t0 + e["sent_us"] * 1000 for e in log["events"]]
    receipts = run["receipts"]
    lags = [(got - s) / 1e6 for got, s in zip(receipts, sent, strict=False)]
    missing = max(0, len(sent) - len(receipts))
    live = []
    if run["viewer"] is not None:
        subscribed, records = run["viewer"]
        seen = {index for index, _ in records}
        missing += max(0, len(receipts) - len(seen))
        for index, got in records:
            # live: the proxy's client had it after the viewer was subscribed
            if index < len(sent) and index < len(receipts) and receipts[index] > subscribed:
                live.append((got - sent[index]) / 1e6)
    return lags, live, missing


def _at(lags, p):
    q = figures.nearest_rank(lags, p * 10)
    return None if q is None else round(q, 3)


def _added(lags, p, direct):
    """How much later than the direct clients at the p-th percentile, in ms; None when no lag
    was measured (on a loaded machine every viewer may have joined after the last live event
    and read them all from the database: a figure of nothing, not a crash)."""
    q = figures.nearest_rank(lags, p * 10)
    return None if q is None or direct is None else round(q - direct, 3)
