"""The recording proxy against direct calls: added time to first token and per event.

The same paced simulator is called directly and through the proxy (`POST /v1/responses` on a
Daphne running the project; `--format chat,messages` its other formats' paths, every format in
the same rounds, interleaved, so their figures are of one load), alternating rounds, in one run,
with the same seeds: stream i of a direct round and of a proxied round are planned alike, so
their differences are the proxy's.
Per configuration (number of concurrent clients):

- added TTFT: per seed, (first delta at the client − request start) proxied − direct; p50/p99;
- added per-event latency: client receipt − the simulator's send time (its own log, on the
  same monotonic clock), proxied p50/p99 − direct p50/p99;
- events lost: what the simulator sent and the client did not get, or the record lacks;
- the proxy process's CPU per proxied event (utime + stime of Daphne, from /proc);
- Daphne's floor: a trivial raw-ASGI response from the same server (request round trip p50);
- the server alone: n clients each get as many events as a direct stream had, at its mean pace,
  written by the application itself (no upstream, nothing recorded): the server's CPU per paced
  event, the least any proxy on this server can cost;
- the relay floor: the same rounds through `/_bench/relay` on the same Daphne, the least a
  forwarding hop does on this stack (httpcore out, chunks back; streams/bench/proxy_asgi.py):
  its added TTFT and per-event latency, and the proxy's above it (Streamscope's own cost);
- the transport floors: the same hop through httpx on each of the upstream client's transports
  (`/_bench/relay-httpcore`, `/_bench/relay-lean`; STREAMSCOPE_UPSTREAM_TRANSPORT picks the
  proxy's): their CPU per event, added TTFT and per-event latency;
- the compiled floor (`--against nginx`, on by default): the same rounds through Debian's nginx,
  started by the bench as a plain reverse proxy to the simulator (unbuffered, upstream
  keep-alive, one worker): what one extra hop costs at best, its CPU per event, and the
  proxy's figures above it.

All of the bench's requests carry one token of one user: the Daphne it starts gets the limits
that needs (streams.bench.server_limits: requests in flight per token and streams per user, from
the largest --concurrency), and the run exits non-zero when an event was lost or not recorded,
or the proxy refused a request.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx
from django.core.management.base import CommandError

from streams.bench import (
    fail_if,
    free_port,
    limits_of,
    manage,
    migrated_env,
    process_cpu_s,
    recording,
    server_limits,
    wait_for_port,
)
from streams.bench.profile import Sampler, by_stage, stages_text
from streams.bench.relay import Server, percentile, stop_process
from streams.core import formats

REQUEST = {
    "model": "auto",
    "input": "Tell me about Utrecht",
    "stream": True,
    "metadata": {"time_scale": "1.0", "sentences": "3", "deterministic_ids": "false"},
}
# The same request in each format the proxy records (streams/core/formats/, `--format`): the
# simulator answers each with the same text at the same pace.
MESSAGES = [{"role": "user", "content": "Tell me about Utrecht"}]
REQUESTS = {
    formats.RESPONSES: REQUEST,
    formats.CHAT: {"model": "auto", "messages": MESSAGES, "stream": True,
                   "metadata": REQUEST["metadata"]},
    formats.MESSAGES: {"model": "auto", "messages": MESSAGES, "max_tokens": 1024, "stream": True,
                       "metadata": REQUEST["metadata"]},
}  # fmt: skip
# What marks each format's first output delta, and where its response id is (the simulator's
# log is kept by it): a bytes marker, and (marker of the event holding it, its path in the JSON).
FIRST_DELTA = {
    formats.RESPONSES: b"output_text.delta",
    formats.CHAT: b'"delta":{"content":"',
    formats.MESSAGES: b"text_delta",
}
RESPONSE_ID = {
    formats.RESPONSES: (b'"response.created"', ("response", "id")),
    formats.CHAT: (b'"chat.completion.chunk"', ("id",)),
    formats.MESSAGES: (b'"message_start"', ("message", "id")),
}


@dataclass(frozen=True)
class Request:
    """What every client sends: the format's path and body, and how its answer is read."""

    format: str
    body: dict

    @property
    def path(self):
        return formats.PATHS[self.format]


def add_arguments(parser):
    parser.add_argument("--concurrency", default="1,16,64", help="concurrent clients, e.g. 1,16")
    parser.add_argument("--rounds", type=int, default=3, help="direct/proxied round pairs")
    parser.add_argument(
        "--arrivals",
        default="steady,burst",
        help="steady (n clients streaming back to back, staggered) and/or burst (n at once)",
    )
    pacing_arguments(parser)
    parser.add_argument(
        "--profile",
        nargs="?",
        type=int,
        const=1,
        default=0,
        metavar="ROUNDS",
        help="after the measured rounds, proxied rounds under py-spy (1, or ROUNDS: at 50 "
        "samples a second one round of 16 paced streams is ~100 samples): the server's CPU by "
        "stage (streams/bench/profile.py)",
    )
    parser.add_argument(
        "--format",
        default=formats.RESPONSES,
        help="the formats to measure, each in turn: responses, chat, messages (e.g. chat,messages)",
    )
    parser.add_argument(
        "--against",
        default="nginx",
        help="baselines besides direct calls and the relay floor: nginx, or none",
    )


def pacing_arguments(parser):
    """--sentences and --time-scale: the replies' length and pace (also `bench capacity`'s)."""
    parser.add_argument(
        "--sentences",
        type=int,
        default=int(REQUEST["metadata"]["sentences"]),
        help="length of each reply (the simulator's `sentences`)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=float(REQUEST["metadata"]["time_scale"]),
        help="the simulator's pacing: 1 is a real model's, smaller is faster (a quick check)",
    )


def run(command, opts):
    tmp, env = migrated_env("proxy", drop=("REDIS_URL",))
    token = bench_token(env)
    sim = simulator(tmp, env)
    sim_root = f"http://127.0.0.1:{sim.port}"
    configurations = _configurations(opts)
    most = max((n for n, _ in configurations), default=0)
    # Each client's next request may arrive while the proxy still finishes its last one (the
    # client has the whole answer before the proxy's handler returns): twice the clients.
    limits = server_limits(env, streams=2 * most, requests=2 * most)
    daphne = proxy_server(tmp, {**env, "STREAMSCOPE_METRICS_TOKEN": METRICS_TOKEN}, sim, limits)
    chosen = [f.strip() for f in opts.get("format", formats.RESPONSES).split(",") if f.strip()]
    unknown = [f for f in chosen if f not in formats.FORMATS]
    if unknown:
        raise CommandError(f"bench proxy: unknown format {unknown}: {', '.join(formats.FORMATS)}")
    results = []
    nginx = None
    try:
        if "nginx" in opts["against"].split(","):
            nginx = Nginx(sim.port, tmp, workers=1, connections=4 * most + 64)
        requests = [paced_request(opts, format) for format in chosen]
        for n, arrivals in configurations:
            # every format in the same rounds, interleaved: their figures are of one load
            measured = asyncio.run(
                _configuration(
                    n,
                    opts["rounds"],
                    sim_root,
                    daphne,
                    token,
                    arrivals.strip(),
                    requests,
                    nginx,
                    opts["profile"],
                )
            )
            # (every format's streams looked up by one process, each format's counted apart)
            received = [result.pop("_proxied_ids") for result in measured]
            least = {}  # (the formats' recording minimum: they shared the writer's batches)
            for result, (lost, reads) in zip(measured, recorded_each(env, received), strict=True):
                result["lost_events"] += lost
                _add_reads(result, reads)
                _add_recording_minimum(result, env, least, paced=opts["time_scale"] > 0)
                result["server_limits"] = limits_of(limits)
                result["upstream_transport"] = _transport()
                results.append(result)
                _print(command, n, arrivals, result, opts["json"])
            if len(measured) > 1 and not opts["json"]:
                command.stdout.write(_formats_line(measured))
    finally:
        if nginx is not None:
            nginx.stop()
        daphne.stop()
        sim.stop()
    fail_if(
        [
            f"{r['arrivals']} {r['concurrency']} client(s): {r['lost_events']} event(s) lost or "
            "not recorded"
            for r in results
            if r["lost_events"]
        ],
        "proxy",
    )
    return results


def simulator(tmp, env):
    """The simulator process the proxy benches call (directly and through the proxy)."""
    return Server(
        [sys.executable, "manage.py", "simulate_upstream", "--port", "{port}"],
        env,
        tmp / "simulator.log",
    )


def proxy_server(tmp, env, sim, limits):
    """A Daphne serving the project (and proxy_asgi's floors) in front of `sim`, with the
    `limits` (server_limits) the bench's load needs."""
    return Server(
        [sys.executable, "-m", "dashboard.server", "-v", "0", "-b", "127.0.0.1", "-p", "{port}"]
        + ["streams.bench.proxy_asgi:application"],
        {**env, "UPSTREAM_BASE_URL": f"http://127.0.0.1:{sim.port}/v1", **limits},
        tmp / "daphne.log",
    )


def _configurations(opts):
    """[(clients, arrivals)] of --concurrency and --arrivals, each concurrency per arrival mode."""
    return [
        (int(n), arrivals)
        for arrivals in opts["arrivals"].split(",")
        for n in opts["concurrency"].split(",")
        if n.strip()
    ]


def paced_request(opts, format=formats.RESPONSES):
    """The request every client sends (with a seed of its own) in `format`, paced by
    --time-scale and as long as --sentences."""
    body = REQUESTS[format]
    metadata = {
        **body["metadata"],
        "time_scale": str(opts["time_scale"]),
        "sentences": str(opts["sentences"]),
    }
    return Request(format, {**body, "metadata": metadata})


def bench_token(env):
    """An API token of the user `bench` (made if missing) in the bench's database."""
    return manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; from streams.models import ApiToken; "
        "u, _ = get_user_model().objects.get_or_create(username='bench'); "
        "print(ApiToken.issue(u, 'bench proxy'))",
    ).split()[-1]


def _print(command, n, arrivals, result, as_json):
    """The figures of configuration `n`, `arrivals`: its JSON line, or a line for people."""
    if as_json:
        command.stdout.write(json.dumps(result))
        return
    command.stdout.write(
        f"{result.get('format', formats.RESPONSES)}, concurrency {n:>3}, {arrivals:>6}: "
        f"added TTFT p50 {result['added_ttft_p50_ms']} / p99 "
        f"{result['added_ttft_p99_ms']} ms; added per event p50 "
        f"{result['added_event_p50_ms']} / p99 {result['added_event_p99_ms']} ms; "
        f"(request on its way {result['added_request_p50_ms']} ms); "
        f"lost {result['lost_events']}; {result['cpu_us_per_event']} µs CPU/event "
        f"(relaying: {result['relay_cpu_us_per_event']}; the server alone, paced: "
        f"{result['alone_cpu_us_per_event']}); "
        f"Daphne floor p50 {result['daphne_floor_p50_ms']} ms; relay floor: added "
        f"TTFT p50 {result['relay_ttft_p50_ms']} / p99 {result['relay_ttft_p99_ms']} "
        f"ms, per event p50 {result['relay_event_p50_ms']} ms; proxy above the relay: "
        f"TTFT p50 {result['over_relay_ttft_p50_ms']} ms"
        + (
            f"; nginx: added TTFT p50 {result['nginx_ttft_p50_ms']} / p99 "
            f"{result['nginx_ttft_p99_ms']} ms, per event p50 {result['nginx_event_p50_ms']} / "
            f"p99 {result['nginx_event_p99_ms']} ms, {result['nginx_cpu_us_per_event']} µs "
            f"CPU/event; proxy above nginx: TTFT p50 {result['over_nginx_ttft_p50_ms']} / p99 "
            f"{result['over_nginx_ttft_p99_ms']} ms (the relay floor: p50 "
            f"{result['relay_over_nginx_ttft_p50_ms']} ms)"
            if "nginx_ttft_p50_ms" in result
            else ""
        )
    )
    command.stdout.write(
        "  floors, µs CPU/event (added TTFT p50 ms): Daphne + httpcore "
        f"{result['relay_cpu_us_per_event']} ({result['relay_ttft_p50_ms']}); "
        + "; ".join(
            f"Daphne + httpx on {t} {result[f'relay_{t}_cpu_us_per_event']} "
            f"({result[f'relay_{t}_ttft_p50_ms']})"
            for t in TRANSPORT_FLOORS
        )
        + (
            f"; nginx {result['nginx_cpu_us_per_event']} ({result['nginx_ttft_p50_ms']})"
            if "nginx_cpu_us_per_event" in result
            else ""
        )
        + f"; the proxy ({_transport()}) {result['cpu_us_per_event']} "
        f"({result['added_ttft_p50_ms']})"
    )
    if "target_cpu_us_per_event" in result:
        command.stdout.write(_against_target_line(result))
    if "profile" in result:
        command.stdout.write(
            f"  the proxy's ({result['profile_samples']} samples) " + stages_text(result["profile"])
        )


def _transport():
    from streams.core import conf

    return conf.get().upstream_transport


NGINX_CONF = """{user}worker_processes {workers};
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    upstream simulator {{ server 127.0.0.1:{upstream_port}; keepalive {connections}; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://simulator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


class Nginx:
    """Debian's nginx as a plain reverse proxy to 127.0.0.1:`upstream_port` (the compiled
    floor of one extra hop), in the foreground, its files in `tmp`."""

    def __init__(self, upstream_port, tmp, workers=1, connections=1024):
        import shutil

        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(binary):
            raise CommandError("bench proxy --against nginx needs nginx (apt-get install nginx)")
        self.port = free_port()
        conf = tmp / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                user="user root;\n" if os.geteuid() == 0 else "",
                workers=workers,
                tmp=tmp,
                connections=connections,
                upstream_port=upstream_port,
                port=self.port,
            )
        )
        self.proc = subprocess.Popen(
            [binary, "-p", str(tmp), "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.proc)

    def cpu_s(self):
        """CPU seconds of the master and its workers (its children)."""
        return process_cpu_s(self.proc.pid)

    def stop(self):
        stop_process(self.proc)


# Resamples of the rounds for the interval of how far apart the formats are.
APART_DRAWS = 2000


def _apart_over_rounds(measured, draws=APART_DRAWS):
    """How far apart the formats' proxied CPU per event and added TTFT p50 are (the largest
    over the smallest, %), with a 95 % interval from resampling the rounds: each draw takes
    `rounds` rounds with replacement, the same rounds for every format (they ran under one
    load, round by round), and computes both figures from those rounds alone. Seeded: the
    same rounds give the same interval. None for fewer than 3 rounds."""
    import random

    cpu = [m.rounds["proxy"] for m in measured]
    rounds = min(len(r) for r in cpu)
    if rounds < 3:
        return None
    added = []  # per format: round -> the added TTFT (ms) of its streams
    for m in measured:
        by_round = {}
        for seed, direct in m.ttft["direct"].items():
            if seed in m.ttft["proxy"]:
                by_round.setdefault(seed // 1000, []).append((m.ttft["proxy"][seed] - direct) / 1e6)
        added.append([by_round.get(r, []) for r in range(rounds)])

    def figures(chosen):
        per_event = [
            sum(each[r][0] for r in chosen) / max(1, sum(each[r][1] for r in chosen))
            for each in cpu
        ]
        samples = [[v for r in chosen for v in each[r]] for each in added]
        p50 = [percentile(values, 50, 6) if values else None for values in samples]
        return _spread(per_event), _spread(p50)

    cpu_apart, ttft_apart = figures(range(rounds))
    rng = random.Random(0)
    drawn = [figures([rng.randrange(rounds) for _ in range(rounds)]) for _ in range(draws)]

    def interval(values):
        values = sorted(v for v in values if v is not None)
        if len(values) < draws * 0.9:
            return None
        return [
            round(values[int(0.025 * len(values))], 1),
            round(values[int(0.975 * len(values)) - 1], 1),
        ]

    return {
        "rounds": rounds,
        "cpu_us_per_event_pct": cpu_apart,
        "cpu_us_per_event_95": interval(d[0] for d in drawn),
        "added_ttft_p50_ms_pct": ttft_apart,
        "added_ttft_p50_ms_95": interval(d[1] for d in drawn),
    }


def _spread(values):
    """The largest of `values` over the smallest, in % above 1 (None unless all are above 0)."""
    if not values or not all(v is not None and v > 0 for v in values):
        return None
    return round(100 * (max(values) / min(values) - 1), 1)


def _formats_line(results):
    """The formats of one configuration side by side (one run, interleaved rounds): the
    proxy's CPU per event and added TTFT p50 of each, and how far apart each figure is (the
    largest over the smallest; none for a figure not above 0 in every format). Then its CPU
    per read of the upstream (`recorded_each`), with the events a read brought: each
    format's timing groups its events in reads its own way (Responses' paired deltas,
    Messages' opening events), and much of the server's work is per read, not per event."""

    def apart(key):
        values = [r.get(key) for r in results]
        if not all(v is not None and v > 0 for v in values):
            return "–"
        return f"{100 * (max(values) / max(1e-9, min(values)) - 1):.1f} %"

    return (
        "  formats in the same rounds, µs CPU/event (added TTFT p50 ms): "
        + "; ".join(
            f"{r['format']} {r['cpu_us_per_event']} ({r['added_ttft_p50_ms']})" for r in results
        )
        + f"; apart by {apart('cpu_us_per_event')} ({apart('added_ttft_p50_ms')})"
        + _interval_text(results[0].get("formats_apart"))
        + "\n  per read of the upstream, µs CPU (events a read): "
        + "; ".join(
            f"{r['format']} {r['cpu_us_per_read']} ({r['events_per_read']})" for r in results
        )
        + f"; apart by {apart('cpu_us_per_read')}"
    )


def _interval_text(apart):
    """The 95 % intervals of `_apart_over_rounds`, for people ("" without them)."""
    if not apart or not apart["cpu_us_per_event_95"] or not apart["added_ttft_p50_ms_95"]:
        return ""
    cpu, ttft = apart["cpu_us_per_event_95"], apart["added_ttft_p50_ms_95"]
    return (
        f"\n  95 % intervals over the {apart['rounds']} rounds (resampled): CPU/event apart by "
        f"{cpu[0]}–{cpu[1]} %, added TTFT p50 by {ttft[0]}–{ttft[1]} %"
    )


async def _configuration(
    n, rounds, sim_root, daphne, token, arrivals, requests, nginx=None, profile=0
):
    """One configuration: `n` concurrent clients, `rounds` direct/proxied round pairs, for
    each of `requests` (a format's each); returns each one's figures, in their order.

    The formats share the rounds: round r runs every format in turn (each mode of one format
    after the other, the first format another each round), so a load that changes over the
    run changes every format's figures alike and they compare as one run's.

    `arrivals`: "burst", every client's request sent in the same instant (a round is a
    gather of n requests: the proxy's per-request work queues up, the worst case); or
    "steady", n clients that each run streams back to back, their first starts spread evenly
    over one stream's duration, so n streams are in flight throughout and requests arrive
    one by one as in steady traffic (the first stream of each client is not measured: its
    round is still filling up)."""
    proxy_base = f"http://127.0.0.1:{daphne.port}/v1"
    relay_base = f"http://127.0.0.1:{daphne.port}/_bench/relay/v1"
    bases = {"direct": sim_root + "/v1", "relay": relay_base, "proxy": proxy_base}
    cpu_of = {"direct": lambda: 0.0, "relay": daphne.cpu_s, "proxy": daphne.cpu_s}
    for transport in TRANSPORT_FLOORS:
        bases[f"relay_{transport}"] = f"http://127.0.0.1:{daphne.port}/_bench/relay-{transport}/v1"
        cpu_of[f"relay_{transport}"] = daphne.cpu_s
    if nginx is not None:
        bases["nginx"] = f"http://127.0.0.1:{nginx.port}/v1"
        cpu_of["nginx"] = nginx.cpu_s
    # Warm connections for every origin (the simulator and Daphne) at once: with room for only
    # n, each change of mode closed the other origin's and the next round paid for opening them.
    limits = httpx.Limits(max_connections=3 * (n + 4), max_keepalive_connections=3 * (n + 4))
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        floor = await _daphne_floor(client, daphne)
        # Warm-up, not measured: one-time costs (the token's look-up, the proxy's first
        # upstream client, connections of both pools) are not the per-request figure.
        duration_ns = dict.fromkeys((r.format for r in requests), 0)
        for request in requests:
            for mode, base in bases.items():
                headers = auth if mode == "proxy" else {}
                started = time.monotonic_ns()
                await asyncio.gather(
                    *(_one(client, base, headers, request, seed=-1 - i) for i in range(n))
                )
                took = time.monotonic_ns() - started
                duration_ns[request.format] = max(duration_ns[request.format], took)
        measured = {r.format: _Measured(bases) for r in requests}
        commits_before = await _writer_figures(client, daphne)
        for r in range(rounds):
            for request in requests[r % len(requests) :] + requests[: r % len(requests)]:
                ours = measured[request.format]
                for mode in bases:
                    headers = auth if mode == "proxy" else {}
                    before = cpu_of[mode]()
                    runs = await _round(
                        client, bases[mode], headers, request, arrivals, n, r,
                        duration_ns[request.format],
                    )  # fmt: skip
                    cpu_s = cpu_of[mode]() - before
                    ours.cpu[mode] += cpu_s
                    await ours.add(client, sim_root, mode, runs, cpu_s)
        commits_after = await _writer_figures(client, daphne)
        commits, recorded = (b - a for a, b in zip(commits_before, commits_after, strict=True))
        results = []
        apart = _apart_over_rounds(list(measured.values())) if len(requests) > 1 else None
        for request in requests:
            ours = measured[request.format]
            figures = {"format": request.format, **_figures(n, arrivals, floor, ours)}
            if len(requests) > 1:
                figures["formats_apart"] = apart  # (None: too few rounds)
            # (of every format's proxied rounds together: they shared the writer's batches)
            figures["events_per_commit"] = round(recorded / commits, 1) if commits else None
            figures["alone_cpu_us_per_event"] = await _server_alone(client, daphne, n, ours)
            if profile:
                # its own round: sampling C frames pauses the server at every sample
                sampler = Sampler(daphne.proc.pid)
                await asyncio.sleep(0.5)  # (attached)
                runs = []
                for _ in range(profile):
                    runs += await _round(
                        client, proxy_base, auth, request, arrivals, n, rounds,
                        duration_ns[request.format],
                    )  # fmt: skip
                counts = sampler.stop()
                events = sum(len(run[1][2]) for run in runs)
                figures["profile"] = by_stage(
                    counts, figures["cpu_us_per_event"], events, len(runs)
                )
                figures["profile_samples"] = sum(counts.values())  # (the waiting ones too)
            results.append(figures)
    return results


# The bench's Daphne serves /metrics to this token (the writer's commits, the events recorded).
METRICS_TOKEN = "bench-proxy-metrics"
# Streamscope's targets (issue 45): per paced event at most this many times nginx's CPU;
# unpaced, at least this many events per CPU-second.
TARGET_OVER_NGINX = 4.5
TARGET_UNPACED_EVENTS_PER_CPU_S = 35_000


async def _writer_figures(client, daphne):
    """(commits, proxied events recorded) so far by the Daphne's writer, from its /metrics."""
    response = await client.get(
        f"http://127.0.0.1:{daphne.port}/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
    )
    response.raise_for_status()
    commits = recorded = 0.0
    for line in response.text.splitlines():
        if line.startswith("streamscope_batch_commit_duration_seconds_count "):
            commits = float(line.split()[-1])
        elif line.startswith('streamscope_events_recorded_total{source="proxy"} '):
            recorded = float(line.split()[-1])
    return commits, recorded


def _add_recording_minimum(result, env, measured, paced=True):
    """Recording's own minimum in this run (streams/bench/recording.py: the SQL alone, on this
    run's database, at the batch size the proxy's writer committed; `measured`: batch size →
    its figures, measured once), and each floor's CPU per event as a multiple of nginx's, with
    the target's (`paced`: 4.5× nginx's; unpaced: 35,000 events per CPU-second): the floors the
    target is compared to."""
    batch = result.get("events_per_commit")
    if batch:
        batch = max(1, round(batch))
        if batch not in measured:
            measured[batch] = recording.in_the_same_run(env, batch)
        least = measured[batch]
        result["recording_sql_us_per_event"] = least["sql_us_per_event"]
        result["recording_written_us_per_event"] = least["written_us_per_event"]
    nginx = result.get("nginx_cpu_us_per_event")
    if not nginx:
        return
    result["target_cpu_us_per_event"] = round(
        TARGET_OVER_NGINX * nginx if paced else 1e6 / TARGET_UNPACED_EVENTS_PER_CPU_S, 1
    )
    result["target_paced"] = paced
    for key in ("cpu_us_per_event", "relay_cpu_us_per_event", "alone_cpu_us_per_event") + tuple(
        f"relay_{t}_cpu_us_per_event" for t in TRANSPORT_FLOORS
    ):
        result[key.replace("cpu_us_per_event", "over_nginx")] = round(result[key] / nginx, 2)
    if "recording_sql_us_per_event" in result:
        least = result["relay_lean_cpu_us_per_event"] + result["recording_sql_us_per_event"]
        result["lean_and_recording_us_per_event"] = round(least, 1)
        result["lean_and_recording_over_nginx"] = round(least / nginx, 2)


def _against_target_line(result):
    """The floors against the target, as multiples of nginx (`_add_recording_minimum`)."""
    if "target_cpu_us_per_event" not in result:
        return ""
    target = (
        f"{TARGET_OVER_NGINX}× nginx"
        if result["target_paced"]
        else f"{TARGET_UNPACED_EVENTS_PER_CPU_S:,} events per CPU-second"
    )
    line = (
        f"  against nginx ({result['nginx_cpu_us_per_event']} µs CPU/event; the target, "
        f"{target}: {result['target_cpu_us_per_event']} µs): the proxy "
        f"{result['over_nginx']}×; the floors: Daphne + httpx on lean "
        f"{result['relay_lean_over_nginx']}×, Daphne + httpx on httpcore "
        f"{result['relay_httpcore_over_nginx']}×, Daphne + httpcore "
        f"{result['relay_over_nginx']}×, the server alone {result['alone_over_nginx']}×"
    )
    if "lean_and_recording_us_per_event" in result:
        line += (
            f"; recording's own minimum (the SQL alone, {result['events_per_commit']} events "
            f"per commit) {result['recording_sql_us_per_event']} µs/event (as written: "
            f"{result['recording_written_us_per_event']}): Daphne + lean + it "
            f"{result['lean_and_recording_us_per_event']} µs = "
            f"{result['lean_and_recording_over_nginx']}×"
        )
    return line


async def _daphne_floor(client, daphne):
    """50 round trips (ms) of a trivial raw-ASGI response from the Daphne."""
    floor = []
    for _ in range(50):
        t0 = time.perf_counter_ns()
        await client.get(f"http://127.0.0.1:{daphne.port}/_bench/floor")
        floor.append((time.perf_counter_ns() - t0) / 1e6)
    return floor


async def _server_alone(client, daphne, n, measured):
    """The Daphne's CPU per event (µs) while `n` clients each get a direct stream's events at
    its mean pace from `/_bench/paced` (starts spread over one gap, as steady clients are)."""
    streams = max(1, measured.streams["direct"])
    events = max(1, round(measured.events["direct"] / streams))
    gap_ms = measured.span_ms["direct"] / streams / events
    url = f"http://127.0.0.1:{daphne.port}/_bench/paced?events={events}&gap_ms={gap_ms:.3f}"

    async def one(i):
        await asyncio.sleep(i * gap_ms / 1e3 / n)
        got = 0
        async with client.stream("GET", url) as r:
            async for chunk in r.aiter_raw():
                got += chunk.count(b"\n\n")
        return got

    before = daphne.cpu_s()
    got = sum(await asyncio.gather(*(one(i) for i in range(n))))
    return round((daphne.cpu_s() - before) * 1e6 / max(1, got), 1)


async def _round(client, base, headers, request, arrivals, n, r, duration_ns):
    """Round `r` of one mode (`base`): the runs of its `n` clients (see `_one`; "steady"
    clients start spread over `duration_ns`, one stream's duration)."""
    if arrivals == "burst":
        return await asyncio.gather(
            *(_one(client, base, headers, request, seed=r * 1000 + i) for i in range(n))
        )
    clients = await asyncio.gather(
        *(
            _client(client, base, headers, request, r * 1000 + i * 10, i * duration_ns / n)
            for i in range(n)
        )
    )
    return [run for streams in clients for run in streams]


class _Measured:
    """What the rounds measured, per mode (direct, relay, proxy): TTFT per seed (ns), the
    request's way to the simulator per seed (request start → the simulator had it, ns), the
    per-event lag (ms), the events received and the Daphne's CPU (s); the events lost over
    all modes, and the events each proxied stream's client got (stream id → count)."""

    def __init__(self, bases):
        self.ttft = {mode: {} for mode in bases}
        self.arrival = {mode: {} for mode in bases}
        self.lag = {mode: [] for mode in bases}
        self.lost = 0
        self.proxied_ids = {}
        self.cpu = dict.fromkeys(bases, 0.0)
        self.events = dict.fromkeys(bases, 0)
        self.streams = dict.fromkeys(bases, 0)
        self.span_ms = dict.fromkeys(bases, 0.0)  # summed over streams: request → last event
        self.rounds = {mode: [] for mode in bases}  # (CPU s, events) of each round, in order

    async def add(self, client, sim_root, mode, runs, cpu_s=0.0):
        """The runs of one round of `mode` (the server's CPU in it: `cpu_s`), against what the
        simulator's log says it sent."""
        self.rounds[mode].append((cpu_s, sum(len(run[1][2]) for run in runs)))
        for seed, (t0, t_first, receipts, response_id, stream_id, measured) in runs:
            url = f"{sim_root}/_simulator/responses/{response_id}"
            log = (await client.get(url)).json()
            received = log["request_received_ns"]
            sent = [received + e["sent_us"] * 1000 for e in log["events"]]
            self.lost += max(0, len(sent) - len(receipts))
            self.events[mode] += len(receipts)
            self.streams[mode] += 1
            if receipts:
                self.span_ms[mode] += (receipts[-1] - t0) / 1e6
            if mode == "proxy":
                self.proxied_ids[stream_id] = len(receipts)
            if not measured:
                continue
            self.arrival[mode][seed] = received - t0
            self.lag[mode] += [(got - s) / 1e6 for got, s in zip(receipts, sent, strict=False)]
            self.ttft[mode][seed] = t_first


def _figures(n, arrivals, floor, measured):
    """One configuration's result: what the proxy and the relay add to direct calls."""
    ttft, arrival, lag = measured.ttft, measured.arrival, measured.lag
    cpu, events = measured.cpu, measured.events
    lost, proxied_ids = measured.lost, measured.proxied_ids
    added_ttft = [(ttft["proxy"][s] - ttft["direct"][s]) / 1e6 for s in ttft["direct"]]
    relay_ttft = [(ttft["relay"][s] - ttft["direct"][s]) / 1e6 for s in ttft["direct"]]
    over_relay = [(ttft["proxy"][s] - ttft["relay"][s]) / 1e6 for s in ttft["direct"]]
    added_request = [(arrival["proxy"][s] - arrival["direct"][s]) / 1e6 for s in ttft["direct"]]
    return (
        {
            "concurrency": n,
            "arrivals": arrivals,
            "added_ttft_p50_ms": percentile(added_ttft, 50, 3),
            "added_ttft_p99_ms": percentile(added_ttft, 99),
            "added_event_p50_ms": round(
                percentile(lag["proxy"], 50, 3) - percentile(lag["direct"], 50, 3), 3
            ),
            "added_event_p99_ms": round(
                percentile(lag["proxy"], 99) - percentile(lag["direct"], 99), 3
            ),
            # of the added TTFT, how much is the request's way to the upstream
            "added_request_p50_ms": percentile(added_request, 50, 3),
            "lost_events": lost,
            "cpu_us_per_event": round(cpu["proxy"] * 1e6 / max(1, events["proxy"]), 1),
            # the same process's CPU per event while it relayed (its idle work included in both)
            "relay_cpu_us_per_event": round(cpu["relay"] * 1e6 / max(1, events["relay"]), 1),
            "daphne_floor_p50_ms": percentile(floor, 50, 3),
            "relay_ttft_p50_ms": percentile(relay_ttft, 50, 3),
            "relay_ttft_p99_ms": percentile(relay_ttft, 99),
            "relay_event_p50_ms": round(
                percentile(lag["relay"], 50, 3) - percentile(lag["direct"], 50, 3), 3
            ),
            "relay_request_p50_ms": percentile(
                [(arrival["relay"][s] - arrival["direct"][s]) / 1e6 for s in ttft["direct"]], 50, 3
            ),
            "over_relay_ttft_p50_ms": percentile(over_relay, 50, 3),
            "over_relay_ttft_p99_ms": percentile(over_relay, 99),
            "events": events["proxy"],
            "samples": len(added_ttft),
            "_proxied_ids": proxied_ids,
        }
        | (_against_nginx(measured, percentile(added_ttft, 99)) if "nginx" in ttft else {})
        | {
            key: value
            for transport in TRANSPORT_FLOORS
            for key, value in _floor(measured, transport)
        }
    )


# the upstream client's transports (streams.core.conf.UPSTREAM_TRANSPORTS), each a relay floor
TRANSPORT_FLOORS = ("httpcore", "lean")


def _floor(measured, transport):
    """(key, value) of one transport floor: what Daphne and httpx on `transport`, forwarding
    and nothing else, add to direct calls, and its CPU per event."""
    mode = f"relay_{transport}"
    ttft, lag, direct = measured.ttft, measured.lag, measured.ttft["direct"]
    added = [(ttft[mode][s] - direct[s]) / 1e6 for s in direct]
    yield (
        f"{mode}_cpu_us_per_event",
        round(measured.cpu[mode] * 1e6 / max(1, measured.events[mode]), 1),
    )
    yield f"{mode}_ttft_p50_ms", percentile(added, 50, 3)
    yield f"{mode}_ttft_p99_ms", percentile(added, 99)
    yield (
        f"{mode}_event_p50_ms",
        round(percentile(lag[mode], 50, 3) - percentile(lag["direct"], 50, 3), 3),
    )


def _against_nginx(measured, proxy_p99):
    """The compiled floor's figures (what nginx adds to direct calls, its CPU per event) and
    the proxy's above it (`proxy_p99`: the proxy's added TTFT p99)."""
    ttft, lag, cpu, events = measured.ttft, measured.lag, measured.cpu, measured.events
    seeds = list(ttft["direct"])
    added = [(ttft["nginx"][s] - ttft["direct"][s]) / 1e6 for s in seeds]
    over = [(ttft["proxy"][s] - ttft["nginx"][s]) / 1e6 for s in seeds]
    relay_over = [(ttft["relay"][s] - ttft["nginx"][s]) / 1e6 for s in seeds]
    direct_p50, direct_p99 = percentile(lag["direct"], 50, 3), percentile(lag["direct"], 99)
    nginx_p99 = percentile(added, 99)
    return {
        "nginx_ttft_p50_ms": percentile(added, 50, 3),
        "nginx_ttft_p99_ms": nginx_p99,
        "nginx_event_p50_ms": round(percentile(lag["nginx"], 50, 3) - direct_p50, 3),
        "nginx_event_p99_ms": round(percentile(lag["nginx"], 99) - direct_p99, 3),
        "nginx_cpu_us_per_event": round(cpu["nginx"] * 1e6 / max(1, events["nginx"]), 1),
        "over_nginx_ttft_p50_ms": percentile(over, 50, 3),
        # the relay floor's (Daphne and httpcore forwarding, nothing else) above nginx
        "relay_over_nginx_ttft_p50_ms": percentile(relay_over, 50, 3),
        # (p99s of the two added TTFTs apart: the p99 of a difference of two noisy runs says
        # little)
        "over_nginx_ttft_p99_ms": round(proxy_p99 - nginx_p99, 3),
    }


STEADY_STREAMS = 3  # per client and round in "steady" arrivals; the first is not measured


async def _client(client, base, headers, request, seed0, offset_ns):
    """One client of a "steady" round: waits `offset_ns`, then runs STEADY_STREAMS streams
    back to back."""
    await asyncio.sleep(offset_ns / 1e9)
    runs = []
    for j in range(STEADY_STREAMS):
        seed, result = await _one(client, base, headers, request, seed0 + j)
        runs.append((seed, (*result[:5], j > 0)))
    return runs


async def _one(client, base, headers, request, seed):
    """One streaming request: (seed, (first-delta ns − start ns, receipt ns per event, the
    upstream's response id, the proxy's stream id or None))."""
    body = {**request.body, "metadata": {**request.body["metadata"], "seed": str(seed)}}
    url = base + request.path
    t0 = time.monotonic_ns()
    async with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            # a limit of the server the bench did not size, or a broken path: not a figure
            text = (await r.aread()).decode(errors="replace")[:500]
            raise CommandError(f"bench proxy: {url} answered {r.status_code}: {text}")
        stream_id = r.headers.get("x-streamscope-stream")
        receipts, response_id, first = await received(r, t0, request.format)
    return seed, (t0, first, receipts, response_id, int(stream_id) if stream_id else None, True)


async def received(response, t0, format=formats.RESPONSES):
    """A streaming response (in `format`) read to its end: (the receipt time of each event, ns;
    the upstream's response id; first output delta − `t0`, ns, or None)."""
    receipts, response_id, first = [], None, None
    first_delta = FIRST_DELTA[format]
    id_marker, id_path = RESPONSE_ID[format]
    buffer = b""
    async for chunk in response.aiter_raw():
        now = time.monotonic_ns()
        buffer += chunk
        *blocks, buffer = buffer.split(b"\n\n")
        for block in blocks:
            if not block.strip():
                continue
            receipts.append(now)
            if first is None and first_delta in block:
                first = now - t0
            if response_id is None and id_marker in block:
                value = json.loads(block.split(b"data: ", 1)[1])
                for key in id_path:
                    value = value[key]
                response_id = value
    return receipts, response_id, first


def _add_reads(result, reads):
    """The proxy's CPU per read of its upstream that brought events (`recorded_each`), and
    the events a read brought."""
    events = result["events"]
    result["upstream_reads"] = reads
    result["events_per_read"] = round(events / max(1, reads), 3)
    result["cpu_us_per_read"] = round(result["cpu_us_per_event"] * events / max(1, reads), 1)


def unrecorded(env, received):
    """Events proxied clients got that the records lack (`received`: stream id → events the
    client got), once every proxied stream has ended."""
    return recorded_each(env, [received])[0][0]


def recorded_each(env, received):
    """For each of `received` (a list of stream id → events the client got), once every
    stream has ended, looked up by one process: (the events its clients got that the records
    lack, the reads of the upstream that brought its events: the recorder stamps a read's
    events with its kernel receipt time, so the events of one read share their `t_us`)."""
    ids = sorted({i for each in received for i in each if i})
    out = manage(
        env,
        "shell",
        "-c",
        "import json, time\n"
        "from django.db.models import Count\n"
        "from streams.models import Event, Stream\n"
        f"ids = {ids!r}\n"
        "deadline = time.time() + 30\n"
        "while Stream.objects.filter(pk__in=ids, status__in=Stream.ACTIVE_STATUSES).exists() "
        "and time.time() < deadline:\n    time.sleep(0.1)\n"
        "events = Event.objects.filter(stream_id__in=ids)\n"
        "rows = events.values('stream_id').annotate(n=Count('id'), reads=Count('t_us', "
        "distinct=True))\n"
        "print(json.dumps({r['stream_id']: [r['n'], r['reads']] for r in rows}))",
    )
    stored = {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}
    return [
        (
            sum(abs(n - stored.get(i, (0, 0))[0]) for i, n in each.items() if i),
            sum(stored.get(i, (0, 0))[1] for i in each if i),
        )
        for each in received
    ]
