"""`python manage.py bench relay`: the live relay, the stock Channels pattern against ours.

In one run, on one simulator process and a fresh SQLite database, each pattern gets a real
Daphne subprocess on 127.0.0.1 (`streams.bench.relay_asgi`) and real WebSocket clients (one per
stream) in this process:

  (a) stock: one `group_send` and one WebSocket message per event, Channels' stock consumer
      (per-message connection cleanup, no catch-up, no dedupe, no access check);
  (b) batched: this project's relay (one message per committed batch, frames carry batches,
      and with the in-memory layer the in-process fan-out instead of the layer);
  (b') batched-layer: the same through the in-memory channel layer (what (b) does with Redis).

For 1 and 100 concurrent streams:
  - `fast` streams (the simulator writes events as fast as it can): events_per_s = events
    delivered to the clients / time from starting the streams to the last receipt;
  - `normal` pacing streams (a real model's token rate): added latency = the client's receipt
    time − the simulator's send time of the same event, both CLOCK_MONOTONIC (system-wide on
    Linux, so comparable across processes on one machine): it covers TCP, parsing, the batch
    window, the commit, the channel layer, the consumer and the WebSocket.
lost_events / duplicated_events compare what the clients got with what was stored.
With `--runner worker --layer redis` a `stream_worker` process records (streams.bench.
relay_worker, publishing in the same pattern) and Daphne only relays, through Redis.
Viewers subscribe before their stream starts (the stock pattern cannot catch up).

The bench's load is one user's: every viewer, stream and token is the `bench` user's. The servers
it starts get the limits that load needs (streams.bench.server_limits: sockets per user, streams
per user and per worker, a viewer's outbox and patience, from the stream counts and events per
stream), and the run exits non-zero when one of our patterns lost or duplicated an event, a
viewer was closed by the server, or a stream did not complete (the stock pattern's losses are
what it is there to show).
"""

import asyncio
import gc
import itertools
import json
import os
import subprocess
import sys
import time

import httpx
from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

from streams.bench import (
    BASE_DIR,
    fail_if,
    free_port,
    limits_of,
    migrated_env,
    process_cpu_s,
    server_limits,
    wait_for_port,
)
from streams.bench.profile import Sampler, by_stage, stages_text
from streams.core import figures

FAST_EVENTS = {1: 20_000}  # events per stream by stream count; others: FAST_EVENTS_MANY
FAST_EVENTS_MANY = 1_000
PACED = {"model": "auto", "metadata": {"time_scale": 1.0, "sentences": 6}}
# How long our viewers wait through silence before giving up on their stream (they end at its
# terminal frame; silence only means a loaded machine).
PATIENCE_S = 120.0
# Why the server closed a viewer (streams/live/consumers.py's close codes).
CLOSE_REASONS = {
    4008: "too slow: RELAY_OUTBOX_MAX_EVENTS / RELAY_SLOW_CLIENT_TIMEOUT_S",
    4029: "too many sockets for one user: MAX_SOCKETS_PER_USER",
}


# ---------------------------------------------------------------------------------------------
# Server side (runs inside the bench's Daphne)


async def stock_publish_batch(stream_id, project_id, events, stream_fields=None):
    """The stock pattern: one group message per event."""
    from streams.shapes import event_message

    layer = get_channel_layer()
    group = f"stock.{stream_id}"
    for e in events:
        await layer.group_send(
            group,
            {
                "type": "stream.event",
                "event": event_message.event(*e),
            },
        )
    from streams.models import Stream

    status = (stream_fields or {}).get("status")
    if status and status not in Stream.ACTIVE_STATUSES:
        await layer.group_send(group, {"type": "stream.end", "status": status})


GC = {}  # the collector's work in this process since the last /_bench/start


def _gc_timer(phase, info):
    now = time.perf_counter()
    if phase == "start":
        GC["started"] = now
    elif "started" in GC:
        pause_ms = (now - GC.pop("started")) * 1000
        GC["collections"] = GC.get("collections", 0) + 1
        GC["ms"] = GC.get("ms", 0.0) + pause_ms
        GC["max_pause_ms"] = max(GC.get("max_pause_ms", 0.0), pause_ms)


HOPS = []  # ms from call_soon to the callback running, sampled every 10 ms
_sampler = None  # the task of _hop_sampler, started by the first /_bench/start


async def _hop_sampler():
    """How long one hop through the event loop's ready queue takes (what every future,
    task wake-up and `call_soon` costs in waiting): sampled while the streams run."""
    loop = asyncio.get_running_loop()
    clock = time.perf_counter

    def ran(t0):
        HOPS.append((clock() - t0) * 1000)

    while True:
        loop.call_soon(ran, clock())
        await asyncio.sleep(0.01)


HELD = "bench:held"  # the runner of prepared streams until they start (worker runs)
PUBLISHED = {}  # stream id -> [(first index, last index, monotonic ns of the publish)]


def timed(publish):
    """Note when each batch was published (after its commit): the writer's share of the
    latency is publish time − the recorder's receipt time."""

    from streams.shapes.event_message import INDEX

    def timed_publish(stream_id, project_id, events, stream_fields=None):
        if events:
            PUBLISHED.setdefault(stream_id, []).append(
                (events[0][INDEX], events[-1][INDEX], time.monotonic_ns())
            )
        return publish(stream_id, project_id, events, stream_fields)

    return timed_publish


def apply_pattern(pattern):
    """Make this process publish as `pattern` says (see the module docstring)."""
    from django.conf import settings

    from streams.live import relay

    gc.callbacks.append(_gc_timer)
    if pattern == "stock":
        relay.publish = stock_publish_batch
    elif pattern == "batched-layer":
        # ours, but through the channel layer even though it is the in-memory one
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "RELAY_LOCAL_FANOUT": False}
    relay.publish = timed(relay.publish)


class StockConsumer(AsyncWebsocketConsumer):
    """The Channels tutorial consumer: a group per stream, one WebSocket message per event."""

    async def connect(self):
        self.group = f"stock.{self.scope['url_route']['kwargs']['stream_id']}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def stream_event(self, message):
        await self.send(text_data=json.dumps(message["event"]))

    async def stream_end(self, message):
        await self.send(text_data=json.dumps({"status": message["status"], "end": True}))
        await self.close()


def _prepare(data):
    from django.contrib.auth import get_user_model

    from streams.core import conf
    from streams.models import ApiToken, Stream
    from streams.store import rows

    user, _ = get_user_model().objects.get_or_create(username="bench")
    token = ApiToken.issue(user, name="bench relay")
    ids = []
    for i in range(data["count"]):
        body = rows.build_request_body(
            f"Benchmark question {i}: tell me about Utrecht",
            data.get("model", "auto"),
            scenario=data.get("scenario", ""),
            metadata={**data.get("metadata", {}), "seed": i},
        )
        ids.append(rows.new_row(user, body).pk)
    if conf.in_workers():
        # Claimed by nobody real until /_bench/start, or a worker would start them before
        # their viewers are on (the stock pattern has no catch-up).
        Stream.objects.filter(pk__in=ids).update(runner=HELD)
    return {"token": token, "ids": ids}


async def _start(ids):
    from streams.core import conf
    from streams.models import Stream
    from streams.run import runner

    streams = [s async for s in Stream.objects.filter(pk__in=ids)]
    GC.clear()
    HOPS.clear()
    global _sampler
    if _sampler is None:
        _sampler = asyncio.get_running_loop().create_task(_hop_sampler())
    if conf.in_workers():
        # held until now (see _prepare): the workers may claim them once viewers are on
        await Stream.objects.filter(pk__in=ids).aupdate(runner="")
        for stream in streams:
            stream.runner = ""
    for stream in streams:
        runner.start(stream)
    return {"started": len(streams)}


def _streams(ids):
    from streams.models import Stream

    rows = Stream.objects.filter(pk__in=ids).values(
        "id", "status", "upstream_id", "event_count", "duration_ms", "request_written_us"
    )
    return {"streams": list(rows)}


def _receipts(ids):
    """Each stored event's receipt time at the recorder (µs since its stream started)."""
    from streams.models import Event

    out = {}
    rows = Event.objects.filter(stream_id__in=ids).values_list("stream_id", "index", "t_us")
    for stream_id, index, t_us in rows:
        out.setdefault(str(stream_id), {})[str(index)] = t_us
    return out


def _stats():
    gc_stats = {k: round(v, 1) for k, v in GC.items() if k != "started"}
    hop_stats = (
        {
            "samples": len(HOPS),
            "p50_ms": percentile(HOPS, 50),
            "p90_ms": percentile(HOPS, 90),
            "max_ms": round(max(HOPS), 2),
        }
        if HOPS
        else {}
    )
    return {"gc": gc_stats, "loop_hop": hop_stats}


async def control(scope, receive, send):
    """Bench-only HTTP endpoints (see streams.bench.relay_asgi)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    data = json.loads(body or b"{}")
    route = scope["path"].rstrip("/")
    if route == "/_bench/prepare":
        result = await sync_to_async(_prepare)(data)
    elif route == "/_bench/start":
        result = await _start(data["ids"])
    elif route == "/_bench/streams":
        result = await sync_to_async(_streams)(data["ids"])
    elif route == "/_bench/receipts":
        result = await sync_to_async(_receipts)(data["ids"])
    elif route == "/_bench/published":
        result = {str(i): PUBLISHED.get(i, []) for i in data["ids"]}
    elif route == "/_bench/stats":
        result = _stats()
    else:
        result = None
    payload = json.dumps(result).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200 if result is not None else 404,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": payload})


# ---------------------------------------------------------------------------------------------
# Bench side


def add_arguments(parser):
    parser.add_argument("--streams", default="1,100", help="concurrent stream counts")
    parser.add_argument("--patterns", default="stock,batched-layer,batched")
    parser.add_argument(
        "--fast-events",
        type=int,
        default=0,
        help=f"events per fast stream (default {FAST_EVENTS[1]} for 1 stream, "
        f"{FAST_EVENTS_MANY} each for more)",
    )
    parser.add_argument(
        "--layer",
        default="memory",
        help="comma-separated channel layers to run on: memory, redis (at --redis-url)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL") or os.environ.get("REDIS_URL", ""),
        help="redis://… for --layer redis (default: $BENCH_REDIS_URL or $REDIS_URL)",
    )
    parser.add_argument(
        "--runner",
        default="inprocess",
        choices=["inprocess", "worker"],
        help="where streams are recorded: in the Daphne process, or in a `stream_worker` "
        "process beside it (needs --layer redis)",
    )
    parser.add_argument(
        "--loops",
        default="uvloop",
        help="comma-separated event loops for the server processes (Daphne, worker): uvloop, "
        "asyncio (the simulator and the clients stay on this process's loop)",
    )
    parser.add_argument("--no-paced", action="store_true", help="skip the latency runs")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after each paced run, another under py-spy: the server's CPU by stage "
        "(streams/bench/profile.py)",
    )
    parser.add_argument(
        "--no-fast", action="store_true", help="diagnostics: skip the events/s runs"
    )
    parser.add_argument(
        "--no-viewers",
        action="store_true",
        help="diagnostics: paced streams without viewers (the recorder's share alone)",
    )
    parser.add_argument(
        "--sentences",
        type=int,
        default=PACED["metadata"]["sentences"],
        help="length of the paced streams' replies (the simulator's `sentences`)",
    )


class Server:
    def __init__(self, argv, env, log_path):
        self.port = free_port()
        self.log = open(log_path, "wb")  # noqa: SIM115
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.proc = subprocess.Popen(
            argv, cwd=BASE_DIR, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        wait_for_port(self.port, self.proc)

    def cpu_s(self):
        return process_cpu_s(self.proc.pid)

    def stop(self):
        stop_process(self.proc)
        self.log.close()


def stop_process(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _lists(opts):
    """(stream counts, patterns, layers, loops) from the comma-separated options, checked."""

    def split(name):
        return [x.strip() for x in opts[name].split(",") if x.strip()]

    counts = [int(n) for n in split("streams")]
    layers = split("layer")
    if "redis" in layers and not opts["redis_url"]:
        raise SystemExit("--layer redis needs --redis-url (or $BENCH_REDIS_URL / $REDIS_URL)")
    if opts["runner"] == "worker" and layers != ["redis"]:
        raise SystemExit("--runner worker needs --layer redis (the worker publishes through it)")
    return counts, split("patterns"), layers, split("loops")


def run(command, opts):
    counts, patterns, layers, loops = _lists(opts)
    tmp, env = migrated_env("relay")
    sim = Server(
        [sys.executable, "manage.py", "simulate_upstream", "--port", "{port}"],
        env,
        tmp / "simulator.log",
    )
    sim_root = f"http://127.0.0.1:{sim.port}"
    most = max(counts, default=0)
    limits = server_limits(
        env,
        streams=most,
        # one viewer per stream, and as many again whose close the server may not have handled
        # when the next run's viewers connect (a slot is freed after the close, asynchronously)
        sockets=0 if opts["no_viewers"] else 2 * most,
        # a viewer is never further behind than its whole stream
        viewer_events=max((_fast_events(opts, n) for n in counts), default=0),
        patience_s=PATIENCE_S,
    )
    results = []
    try:
        for layer in layers:
            layer_env = {k: v for k, v in env.items() if k != "REDIS_URL"}
            if layer == "redis":
                layer_env["REDIS_URL"] = opts["redis_url"]
            for pattern, loop in itertools.product(patterns, loops):
                if layer == "redis" and pattern == "batched-layer":
                    continue  # with Redis, `batched` goes through the layer already
                server_env = {
                    **layer_env,
                    "UPSTREAM_BASE_URL": sim_root + "/v1",
                    "STREAMSCOPE_BENCH_PATTERN": pattern,
                    "STREAMSCOPE_RUNNER": opts["runner"],
                    "STREAMSCOPE_EVENT_LOOP": loop,
                    **limits,
                }
                label = {"layer": layer, "runner": opts["runner"], "loop": loop}
                setup = (tmp, server_env, sim_root, limits, label)
                results += _one_server(command, opts, setup, pattern, counts)
    finally:
        sim.stop()
    if not opts["json"]:
        _summary(command, results)
    fail_if(_problems(results), "relay")
    return results


def _one_server(command, opts, setup, pattern, counts):
    """The results of every stream count on one server (a Daphne, and a stream worker when
    the runner is `worker`), started for this pattern, layer and loop and stopped after."""
    tmp, server_env, sim_root, limits, label = setup
    name = f"{label['layer']}-{pattern}-{label['loop']}"
    daphne = Server(
        [sys.executable, "-m", "dashboard.server", "-v", "0"]
        + ["-b", "127.0.0.1", "-p", "{port}", "streams.bench.relay_asgi:application"],
        server_env,
        tmp / f"daphne-{name}.log",
    )
    recorder = None
    if opts["runner"] == "worker":
        recorder = subprocess.Popen(
            [sys.executable, "-m", "streams.bench.relay_worker"],
            cwd=BASE_DIR,
            env=server_env,
            stdout=open(tmp / f"worker-{pattern}-{label['loop']}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
    results = []
    try:
        for n in counts:
            result = asyncio.run(_configuration(pattern, n, daphne, sim_root, opts, command))
            result = {**label, **result, "server_limits": limits_of(limits)}
            results.append(result)
            _print(command, opts, result)
    finally:
        daphne.stop()
        if recorder is not None:
            stop_process(recorder)
    return results


def _problems(results):
    out = []
    for r in results:
        label = f"{r['layer']} {r['loop']} {r['pattern']} {r['streams']} stream(s)"
        if r["failed_streams"]:
            out.append(f"{label}: {r['failed_streams']} stream(s) did not complete")
        if r["pattern"] == "stock":
            continue  # the stock pattern's losses are what it is measured for
        if r["lost_events"]:
            out.append(f"{label}: {r['lost_events']} event(s) lost")
        if r["duplicated_events"]:
            out.append(f"{label}: {r['duplicated_events']} event(s) duplicated")
        for code, n in r["viewers_closed"].items():
            why = CLOSE_REASONS.get(int(code), "closed before the stream's end")
            out.append(f"{label}: {n} viewer(s) closed by the server with {code} ({why})")
    return out


def _fast_events(opts, n):
    """Events per fast stream when `n` run at once."""
    return opts["fast_events"] or FAST_EVENTS.get(n, FAST_EVENTS_MANY)


def _summary(command, results):
    """Ratios between configurations of this run: ours / stock in events/s (per layer and
    loop), and with more than one loop, each loop's latency against the first's."""

    def find(**want):
        return next((r for r in results if all(r[k] == v for k, v in want.items())), None)

    for r in results:
        stock = find(pattern="stock", streams=r["streams"], layer=r["layer"], loop=r["loop"])
        if r["pattern"] != "stock" and stock and stock["events_per_s"]:
            command.stdout.write(
                f"{r['layer']}, {r['loop']}, {r['streams']} stream(s): {r['pattern']} / stock "
                f"events/s = {r['events_per_s'] / stock['events_per_s']:.1f}×"
            )
    base_loop = results[0]["loop"] if results else None
    for r in results:
        base = find(pattern=r["pattern"], streams=r["streams"], layer=r["layer"], loop=base_loop)
        if r["loop"] == base_loop or not base or not r["added_latency_p50_ms"]:
            continue
        if base["added_latency_p50_ms"]:
            command.stdout.write(
                f"{r['layer']}, {r['pattern']}, {r['streams']} stream(s): added latency "
                f"{r['loop']} / {base_loop} = p50 "
                f"{r['added_latency_p50_ms'] / base['added_latency_p50_ms']:.2f}, p99 "
                f"{r['added_latency_p99_ms'] / base['added_latency_p99_ms']:.2f}"
            )


def _print(command, opts, r):
    if opts["json"]:
        command.stdout.write(json.dumps(r))
        return

    def pair(name):
        p50, p99 = r.get(f"{name}_p50_ms"), r.get(f"{name}_p99_ms")
        return "n/a" if p50 is None else f"p50 {p50:.1f}/p99 {p99:.1f} ms"

    lat = (
        f"{pair('added_latency')} (recorder receipt {pair('recorder_latency')}, "
        f"published after commit {pair('published_latency')})"
    )
    command.stdout.write(
        f"{r['layer']:6} {r['loop']:7} {r['pattern']:13} {r['streams']:4} stream(s): "
        f"{r['events_per_s']:>10,.0f} events/s, "
        f"added latency {lat}, lost {r['lost_events']}, duplicated {r['duplicated_events']}"
        + (f", {r['cpu_us_per_event']} µs CPU/event paced" if "cpu_us_per_event" in r else "")
        + (
            f" (the stack alone at that pace: reading {r['alone_read_cpu_us_per_event']} µs per "
            f"event with httpx-sse, framing {r['alone_frame_cpu_us_per_frame']} µs per frame)"
            if "alone_read_cpu_us_per_event" in r
            else ""
        )
        + (f", viewers closed {r['viewers_closed']}" if r["viewers_closed"] else "")
        + (f", {r['failed_streams']} stream(s) not completed" if r["failed_streams"] else "")
    )
    if "profile" in r:
        command.stdout.write("  the server's " + stages_text(r["profile"]))


async def _configuration(pattern, n, daphne, sim_root, opts, command):
    port = daphne.port
    fast_events = _fast_events(opts, n)
    fast = {
        "delivered": 0,
        "elapsed_s": 0,
        "lost": 0,
        "duplicated": 0,
        "stored": 0,
        "closed": {},
        "failed": 0,
    }
    if not opts["no_fast"]:
        fast = await _run(
            pattern,
            n,
            port,
            {
                "scenario": "fast",
                "metadata": {"events": fast_events, "batch": 100, "time_scale": 0},
            },
            idle_s=3.0,
        )
    result = {
        "pattern": pattern,
        "streams": n,
        "events_per_s": round(fast["delivered"] / fast["elapsed_s"]) if fast["elapsed_s"] else 0,
        "added_latency_p50_ms": None,
        "added_latency_p99_ms": None,
        "lost_events": fast["lost"],
        "duplicated_events": fast["duplicated"],
        "fast_events": fast["stored"],
        # viewers the server closed before their stream's end, by close code
        "viewers_closed": dict(fast["closed"]),
        # streams that ended otherwise than `completed`
        "failed_streams": fast["failed"],
    }
    if not opts["no_paced"]:
        await _paced(result, pattern, n, daphne, sim_root, opts)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        stats = (await client.post("/_bench/stats", json={})).json()
    # the server's garbage collector during the last run (paced if any): its pauses are latency
    result["server_gc"] = stats.get("gc", {})
    # one hop through the server's ready queue (a future, a task wake-up) during that run
    result["server_loop_hop"] = stats.get("loop_hop", {})
    return result


async def _paced(result, pattern, n, daphne, sim_root, opts):
    """Add the paced run's figures to `result`: added latency (and where it goes: the
    recorder's receipt, the publish after the commit), the server's CPU per event stored and
    relayed, lost and duplicated events; with --profile, the server's CPU by stage in a paced
    run of its own."""
    port = daphne.port
    request = {**PACED, "metadata": {**PACED["metadata"], "sentences": opts["sentences"]}}
    cpu = daphne.cpu_s()
    paced = await _run(pattern, n, port, request, idle_s=10.0, viewers=not opts["no_viewers"])
    cpu = daphne.cpu_s() - cpu
    result["cpu_us_per_event"] = round(cpu * 1e6 / max(1, paced["stored"]), 1)
    if opts["profile"]:
        sampler = Sampler(daphne.proc.pid)
        await asyncio.sleep(0.5)  # (attached)
        viewers = not opts["no_viewers"]
        profiled = await _run(pattern, n, port, request, idle_s=10.0, viewers=viewers)
        counts = sampler.stop()
        result["profile"] = by_stage(counts, result["cpu_us_per_event"], profiled["stored"], n)
        result["profile_samples"] = sum(counts.values())  # (the waiting ones too)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        ids = {"ids": paced["ids"]}
        receipts = (await client.post("/_bench/receipts", json=ids)).json()
        published = (await client.post("/_bench/published", json=ids)).json()
    latencies, recorder, publish = await _latencies(sim_root, paced, receipts, published)
    if latencies:
        result["added_latency_p50_ms"] = percentile(latencies, 50)
        result["added_latency_p99_ms"] = percentile(latencies, 99)
    if recorder:
        # where the time goes: the recorder's receipt, then the publish after the commit
        result["recorder_latency_p50_ms"] = percentile(recorder, 50)
        result["recorder_latency_p99_ms"] = percentile(recorder, 99)
    if publish:
        result["published_latency_p50_ms"] = percentile(publish, 50)
        result["published_latency_p99_ms"] = percentile(publish, 99)
    if not opts["no_viewers"]:
        result["lost_events"] += paced["lost"]
        result["duplicated_events"] += paced["duplicated"]
    for code, count in paced["closed"].items():
        result["viewers_closed"][code] = result["viewers_closed"].get(code, 0) + count
    result["failed_streams"] += paced["failed"]
    result["paced_events"] = paced["stored"]
    if not opts["no_viewers"]:
        # the fixed stack's floors at the same pace: what reading and framing cost by themselves
        events = max(1, round(paced["stored"] / max(1, n)))
        gap_ms = _mean_gap_ms(paced)
        result["alone_read_cpu_us_per_event"] = await _read_alone(sim_root, n, request)
        result["alone_frame_cpu_us_per_frame"] = await _frames_alone(daphne, n, events, gap_ms)


def _mean_gap_ms(run):
    """The mean time between two events of one stream of a paced run, from its viewers."""
    gaps = [
        (records[-1][1] - records[0][1]) / 1e6 / (len(records) - 1)
        for records in run["received"]
        if len(records) > 1
    ]
    return sum(gaps) / len(gaps) if gaps else 20.0


async def _read_alone(sim_root, n, request):
    """This process's CPU per event (µs) while it reads `n` paced streams from the simulator with
    httpx and httpx-sse, doing nothing else with them: the upstream client's floor."""
    from httpx_sse import aconnect_sse

    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(timeout=PATIENCE_S, limits=limits) as client:

        async def one(i):
            body = {**request, "input": "Tell me about Utrecht", "stream": True}
            body["metadata"] = {**request["metadata"], "seed": str(i)}
            got = 0
            url = f"{sim_root}/v1/responses"
            async with aconnect_sse(client, "POST", url, json=body) as source:
                async for _ in source.aiter_sse():
                    got += 1
            return got

        cpu = time.process_time()
        events = sum(await asyncio.gather(*(one(i) for i in range(n))))
        cpu = time.process_time() - cpu
    return round(cpu * 1e6 / max(1, events), 1)


async def _frames_alone(daphne, n, frames, gap_ms):
    """The server's CPU per frame (µs) while a raw ASGI application sends `n` viewers `frames`
    frames each, one every `gap_ms` (relay_asgi's `/ws/bench/paced/`): the framing's floor."""
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{daphne.port}/ws/bench/paced/?frames={frames}&gap_ms={gap_ms:.3f}"

    async def one():
        got = 0
        async with connect(url, max_size=None, open_timeout=PATIENCE_S) as ws:
            async for _ in ws:
                got += 1
        return got

    cpu = daphne.cpu_s()
    got = sum(await asyncio.gather(*(one() for _ in range(n))))
    return round((daphne.cpu_s() - cpu) * 1e6 / max(1, got), 1)


async def _run(pattern, n, port, request, idle_s, viewers=True):
    from websockets.asyncio.client import connect

    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        prepared = (await client.post("/_bench/prepare", json={"count": n, **request})).json()
        headers = {"Authorization": f"Bearer {prepared['token']}"}
        ids = prepared["ids"]

        async def viewer(stream_id):
            path = (
                f"/ws/bench/stock/{stream_id}/"
                if pattern == "stock"
                else f"/ws/streams/{stream_id}/?format=json"
            )
            return await connect(
                f"ws://127.0.0.1:{port}{path}",
                origin=base,
                additional_headers=headers,
                max_size=None,
                open_timeout=30,
            )

        sockets = []
        for i in range(0, n, 20):  # don't flood the accept queue
            if viewers:
                sockets += await asyncio.gather(*(viewer(s) for s in ids[i : i + 20]))
        t0 = time.monotonic_ns()
        await client.post("/_bench/start", json={"ids": ids})
        consumed = await asyncio.gather(
            *(_consume(ws, pattern == "stock", idle_s) for ws in sockets)
        )
        received = [records for records, _ in consumed] if viewers else [[] for _ in ids]
        closed = {}
        for _, code in consumed:
            if code is not None:
                closed[str(code)] = closed.get(str(code), 0) + 1
        from streams.models import Stream

        for _ in range(600):
            streams = (await client.post("/_bench/streams", json={"ids": ids})).json()["streams"]
            if all(s["status"] not in Stream.ACTIVE_STATUSES for s in streams):
                break
            await asyncio.sleep(0.1)
    return _tally(ids, received, streams, closed, t0)


def _tally(ids, received, streams, closed, t0):
    """What the viewers got against what was stored: delivered, lost and duplicated events,
    and the time to the last one."""
    by_id = {s["id"]: s for s in streams}
    stored = sum(s["event_count"] for s in streams)
    delivered = lost = duplicated = 0
    last = t0
    for stream_id, records in zip(ids, received, strict=True):
        unique = {i for i, _ in records}
        delivered += len(unique)
        duplicated += len(records) - len(unique)
        lost += max(0, by_id[stream_id]["event_count"] - len(unique))
        if records:
            last = max(last, max(t for _, t in records))
    return {
        "ids": ids,
        "received": received,
        "streams": by_id,
        "stored": stored,
        "delivered": delivered,
        "lost": lost,
        "duplicated": duplicated,
        "elapsed_s": (last - t0) / 1e9,
        "closed": closed,
        "failed": sum(1 for s in streams if s["status"] != "completed"),
    }


async def _consume(ws, stock, idle_s):
    """(index, receipt monotonic ns) of every event received, until the end or silence; and the
    close code when the server closed the socket before that (else None)."""
    from websockets.exceptions import ConnectionClosed

    if not stock:
        # ours ends with a terminal frame; silence only means a loaded machine
        idle_s = max(idle_s, PATIENCE_S)
    records = []
    closed = None
    append = records.append
    loads = json.loads
    clock = time.monotonic_ns
    try:
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    message = await ws.recv()
            except TimeoutError:
                break  # the stock pattern's end message can be lost with the rest
            now = clock()
            frame = loads(message)
            if stock:
                if "index" in frame:
                    append((frame["index"], now))
                elif frame.get("end"):
                    break
            else:
                for e in frame["events"]:
                    append((e["index"], now))
                if frame.get("terminal"):
                    break
    except ConnectionClosed as exc:  # what arrived counts; the code says why
        closed = exc.rcvd.code if exc.rcvd is not None else 1006
    except Exception:  # what arrived counts
        pass
    await ws.close()
    return records, closed


def percentile(values, p, digits=2):
    """The p-th percentile (p in percent) of a non-empty list, by nearest rank
    (`figures.nearest_rank`), rounded to `digits` decimals."""
    return round(figures.nearest_rank(values, p * 10), digits)


async def _latencies(sim_root, run, receipts, published):
    """For every received event of a paced run, in ms: client receipt − simulator send time,
    and recorder receipt − simulator send time. The recorder's clock starts before the request
    is written and the simulator's when it has read it: `t_us − request_written_us` and
    `sent_us` share an origin (give or take the loopback hop)."""
    client_ms, recorder_ms, publish_ms = [], [], []
    async with httpx.AsyncClient(base_url=sim_root, timeout=30) as client:
        for stream_id, records in zip(run["ids"], run["received"], strict=True):
            stream = run["streams"][stream_id]
            upstream_id = stream["upstream_id"]
            if not upstream_id:
                continue
            r = await client.get(f"/_simulator/responses/{upstream_id}", params={"wait": 5})
            if r.status_code != 200:
                continue
            log = r.json()
            t0 = log["request_received_ns"]
            sent_us = {e["index"]: e["sent_us"] for e in log["events"]}
            seen = set()
            for index, t in records:
                if index in sent_us and index not in seen:
                    seen.add(index)
                    client_ms.append((t - (t0 + sent_us[index] * 1000)) / 1e6)
            for first, last, t in published.get(str(stream_id), []):
                for index in range(first, last + 1):
                    if index in sent_us:
                        publish_ms.append((t - (t0 + sent_us[index] * 1000)) / 1e6)
            stored = receipts.get(str(stream_id), {})
            written = stream["request_written_us"]
            if written is None:
                continue
            for index, sent in sent_us.items():
                t_us = stored.get(str(index))
                if t_us is not None:
                    recorder_ms.append((t_us - written - sent) / 1000)
    return client_ms, recorder_ms, publish_ms
