"""Each format's own work per event: what the recorder does with an event of each API.

The simulator answers `bench proxy`'s request in each format (`--format`; the same text, the
same seeds), and this process feeds every answer to the recorder's per-event code as a paced
proxy would get it, one event per read: the SSE reader (`EventReader.feed`), the format's
checker and the rows and relay messages (`Recording.ingest`, proxied), `--repeat` times. Three
figures per format, each in µs of this thread's CPU per event (`time.thread_time_ns`: a busy
machine slows it down but cannot add to it): the SSE decoding alone, the checker alone (fed
what the reader made), and all of it. The last line puts each format against the first one,
measured in the same run.

No server sits in the measurement, no database and no socket: what differs between formats in
the proxy's own code, apart from the per-read work that `bench proxy` measures (its "per read"
line) and the formats share. docs/performance.md, "By format".
"""

import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

from streams.bench import fail_if
from streams.bench.proxy import REQUESTS, simulator
from streams.core import formats


def add_arguments(parser):
    parser.add_argument(
        "--format",
        default=",".join(formats.FORMATS),
        help="the formats, the first the baseline (e.g. responses,chat,messages)",
    )
    parser.add_argument("--streams", type=int, default=20, help="answers (seeds) per format")
    parser.add_argument("--sentences", type=int, default=3, help="each answer's length")
    parser.add_argument("--repeat", type=int, default=30, help="times each answer is fed")


def run(command, opts):
    chosen = [f.strip() for f in opts["format"].split(",") if f.strip()]
    unknown = [f for f in chosen if f not in formats.FORMATS]
    if unknown or not chosen:
        from django.core.management.base import CommandError

        raise CommandError(f"bench formats: unknown format {unknown}: {', '.join(formats.FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as tmp:
        sim = simulator(Path(tmp), None)
        try:
            answers = {f: _answers(sim.port, f, opts["streams"], opts["sentences"]) for f in chosen}
        finally:
            sim.stop()
    results = []
    rounds = {f: [] for f in chosen}
    # interleaved, formats in turn, best of 3 of each: the figures are of the same moments
    for _ in range(3):
        for f in chosen:
            rounds[f].append(measure(f, answers[f], opts["repeat"]))
    for f in chosen:
        best = {k: min(r[k] for r in rounds[f]) for k in ("sse_us", "check_us", "all_us")}
        events = sum(len(a) for a in answers[f])
        size = sum(len(chunk) for a in answers[f] for chunk in a)
        results.append(
            {
                "format": f,
                "streams": len(answers[f]),
                "events_per_stream": round(events / max(1, len(answers[f])), 1),
                "bytes_per_event": round(size / max(1, events)),
                "sse_us_per_event": round(best["sse_us"], 2),
                "check_us_per_event": round(best["check_us"], 2),
                "all_us_per_event": round(best["all_us"], 2),
            }
        )
    base = results[0]["all_us_per_event"]
    for r in results:
        r["all_vs_first"] = round(r["all_us_per_event"] / base, 3) if base else None
        if opts["json"]:
            command.stdout.write(json.dumps(r))
        else:
            command.stdout.write(
                f"{r['format']}: {r['events_per_stream']} events a stream, "
                f"{r['bytes_per_event']} B an event; µs of CPU per event: SSE decoding "
                f"{r['sse_us_per_event']}, checker {r['check_us_per_event']}, reader + checker "
                f"+ rows + relay messages {r['all_us_per_event']} ({r['all_vs_first']}× "
                f"{results[0]['format']}'s)"
            )
    fail_if(
        [
            f"{r['format']}: {r['streams']} of {opts['streams']} answers, "
            f"{r['events_per_stream']} events a stream"
            for r in results
            if r["streams"] < opts["streams"] or not r["events_per_stream"]
        ],
        "formats",
    )
    return results


def _answers(port, format, streams, sentences):
    """The simulator's answers in `format` (unpaced), each as its events' bytes, one per read."""
    body = REQUESTS[format]
    out = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=60) as client:
        for seed in range(streams):
            metadata = {
                **body["metadata"],
                "time_scale": "0",
                "sentences": str(sentences),
                "seed": str(seed),
            }
            r = client.post(
                formats.PATHS[format],
                json={**body, "metadata": metadata},
                headers={"Authorization": "Bearer bench", "x-api-key": "bench"},
            )
            if r.status_code != 200:
                print(f"bench formats: {format} answered {r.status_code}", file=sys.stderr)
                continue
            out.append([block + b"\n\n" for block in r.content.split(b"\n\n") if block.strip()])
    return out


def measure(format, answers, repeat):
    """µs of this thread's CPU per event: {"sse_us", "check_us", "all_us"} over `answers`
    fed `repeat` times each."""
    from streams.ingest.recorder import Recording
    from streams.ingest.upstream import EventReader

    wall0 = dt.datetime.now(dt.UTC)
    events = 0
    sse_ns = check_ns = all_ns = 0
    clock = time.thread_time_ns
    for _ in range(repeat):
        for answer in answers:
            # the SSE decoding alone
            reader = EventReader()
            start = clock()
            decoded = [reader.feed(chunk, 0) for chunk in answer]
            sse_ns += clock() - start
            # the checker alone, fed what the reader made
            checker = formats.checker(format)
            feed = checker.feed
            start = clock()
            index = 0
            for batch in decoded:
                for sse in batch:
                    feed(index, sse.event_name, sse.data, t_us=index)
                    index += 1
            check_ns += clock() - start
            events += index
            # all of it, as the proxy's recorder does per read
            rec = Recording(
                stream_id=1,
                project_id=None,
                pinned_model=False,
                format=format,
                t0_ns=0,
                wall0=wall0,
                checker=formats.checker(format),
                proxied=True,
            )
            reader = EventReader()
            ingest = rec.ingest
            start = clock()
            for t_ns, chunk in enumerate(answer):
                got = reader.feed(chunk, t_ns * 1000)
                if got:
                    ingest(got, t_ns * 1000)
            all_ns += clock() - start
    n = max(1, events)
    return {
        "sse_us": sse_ns / n / 1000,
        "check_us": check_ns / n / 1000,
        "all_us": all_ns / n / 1000,
    }
