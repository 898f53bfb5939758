"""`python manage.py bench simulator`: the simulator as fast when its log is full as when fresh.

Benchmarks measure Streamscope against the simulator, so the simulator must not slow down as it
ages. One `simulate_upstream` process is driven by `--clients` concurrent clients streaming
unpaced responses back to back (time_scale 0) from this process. Its CPU per event sent
(utime + stime from /proc: what a busy client cannot skew) and its events per second are
measured over a window while it is fresh, then again once it has sent `--responses` responses
(its response log full and evicting, by default), and printed side by side with its resident
memory and the log's size by its own budget (MAX_LOG_BYTES). The run exits non-zero when a
response came back incomplete.
"""

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

from streams.bench import fail_if, process_cpu_s
from streams.bench.relay import Server


def add_arguments(parser):
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument(
        "--responses",
        type=int,
        default=60_000,
        help="responses sent before the aged window (60,000 of 4 sentences fill the log)",
    )
    parser.add_argument("--window", type=float, default=10.0, help="seconds per measured window")
    parser.add_argument(
        "--sentences", type=int, default=4, help="length of each response (the simulator's)"
    )


def run(command, opts):
    tmp = Path(tempfile.mkdtemp(prefix="streamscope-bench-simulator-"))
    argv = [sys.executable, "manage.py", "simulate_upstream", "--port", "{port}"]
    sim = Server(argv, dict(os.environ), tmp / "simulator.log")
    try:
        result = asyncio.run(_drive(sim.proc.pid, f"http://127.0.0.1:{sim.port}", opts))
    finally:
        sim.stop()
    if opts["json"]:
        command.stdout.write(json.dumps(result))
    else:
        for name in ("fresh", "aged"):
            w = result[name]
            command.stdout.write(
                f"{name:5} after {w['responses_before']:>9,} responses: "
                f"{w['events_per_s']:>9,.0f} events/s, {w['cpu_us_per_event']:6.1f} µs CPU/event, "
                f"RSS {w['rss_mb']:5.0f} MB, log {w['log_mb']:6.1f} MB in {w['log_responses']:,} "
                "responses"
            )
        command.stdout.write(
            f"aged / fresh: CPU per event {result['cpu_ratio']:.2f}×, "
            f"events per second {result['rate_ratio']:.2f}×"
        )
    fail_if(
        [f"{result['incomplete']} response(s) came back incomplete"]
        if result["incomplete"]
        else [],
        "simulator",
    )
    return result


async def _drive(pid, root, opts):
    body = {
        "model": "auto",
        "input": "Tell me about Utrecht",
        "stream": True,
        "metadata": {"time_scale": "0", "sentences": str(opts["sentences"])},
    }
    counts = {"responses": 0, "events": 0, "incomplete": 0}
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=opts["clients"] + 1)
    async with httpx.AsyncClient(base_url=root, timeout=60, limits=limits) as client:

        async def one_client():
            while not stop.is_set():
                pending, last = b"", b""  # an event's bytes so far, the last whole event
                async with client.stream("POST", "/v1/responses", json=body) as response:
                    async for chunk in response.aiter_bytes():
                        *events, pending = (pending + chunk).split(b"\n\n")
                        if events:
                            counts["events"] += len(events)
                            last = events[-1]
                counts["responses"] += 1
                if b'{"type":"response.completed"' not in last:
                    counts["incomplete"] += 1

        async def window():
            info = (await client.get("/_simulator")).json()["log"]
            before = dict(counts)
            cpu0, t0 = process_cpu_s(pid), time.monotonic()
            await asyncio.sleep(opts["window"])
            cpu, elapsed = process_cpu_s(pid) - cpu0, time.monotonic() - t0
            events = counts["events"] - before["events"]
            return {
                "responses_before": before["responses"],
                "events": events,
                "events_per_s": round(events / elapsed),
                "cpu_us_per_event": round(cpu * 1e6 / max(events, 1), 2),
                "rss_mb": _rss_mb(pid),
                "log_mb": round(info["bytes"] / 2**20, 1),
                "log_responses": info["responses"],
            }

        clients = [asyncio.create_task(one_client()) for _ in range(opts["clients"])]
        try:
            await asyncio.sleep(min(2.0, opts["window"]))  # connections open, code warm
            fresh = await window()
            while counts["responses"] < opts["responses"]:
                if any(c.done() for c in clients):
                    break
                await asyncio.sleep(0.2)
            aged = await window()
        finally:
            stop.set()
            await asyncio.gather(*clients, return_exceptions=True)
    for c in clients:
        if c.exception() is not None:
            raise c.exception()
    return {
        "clients": opts["clients"],
        "sentences": opts["sentences"],
        "fresh": fresh,
        "aged": aged,
        "cpu_ratio": round(aged["cpu_us_per_event"] / fresh["cpu_us_per_event"], 3),
        "rate_ratio": round(aged["events_per_s"] / max(fresh["events_per_s"], 1), 3),
        "incomplete": counts["incomplete"],
    }


def _rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024)
    return 0
