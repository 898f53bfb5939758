"""`python manage.py bench egress`: what the egress gate costs, against what it guards.

A fresh temporary SQLite database holds one recorded stream of `--events` text deltas (its
output a few hundred kB of Markdown-ish text) and a stream whose deltas carry the configured key
cut at every offset. A child process, with `UPSTREAM_API_KEY` and a pass-through key known to
the gate, then measures in the same run:

- per page (the list, the timeline, its event table, the `.json` and `.sse` exports, the latency
  and routing pages): the page's own server time (Django's test Client, which does not pass the
  gate) and the time the gate's rules take over the same bytes; the ratio, and ms per MB;
- per WebSocket frame (10 events, and 1): `event_message.stream_frame`'s encoding time and the
  gate's.

Best of `--repeat` for each. It fails (non-zero exit) when the gate did not redact the key
from the hostile stream's pages, so a gate that became cheap by doing nothing cannot pass. No
server and no limits (streams.bench.NOT_LOAD_LIMITS).
"""

import argparse
import json
import time

from streams.bench import fail_if, manage, migrated_env

KEY = "sk-BENCH-CANARY-7734019xq"
PASSTHROUGH = "sk-client-bench-Qm28Zr93"
LOOPS = range(1000)  # frames encoded or redacted per timing
# The text of the big stream's deltas (and of the frames' events), each with its number after it
WORDS = "Kortom, **de stroom** komt *token voor token* binnen; `tijd` en [link](https://x.test) "


def add_arguments(parser):
    parser.add_argument("--events", type=int, default=2000, help="text deltas of the big stream")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)


def run(command, opts):
    if opts["child"]:
        return _child_main(command, opts)
    tmp, env = migrated_env("egress")
    env = {**env, "UPSTREAM_API_KEY": KEY}
    spec = json.dumps({"events": opts["events"], "repeat": opts["repeat"]})
    out = manage(env, "bench", "egress", "--child", spec)
    results = [json.loads(line) for line in out.splitlines() if line.strip()]
    for result in results:
        if opts["json"]:
            command.stdout.write(json.dumps(result))
        elif result["what"] == "page":
            command.stdout.write(
                f"{result['page']:22} {result['kb']:8.0f} kB   page {result['page_ms']:7.2f} ms   "
                f"gate {result['gate_ms']:6.2f} ms  = {result['ratio'] * 100:5.1f} % of the page"
                f"   ({result['gate_ms_per_mb']:.1f} ms/MB)"
            )
        elif result["what"] == "frame":
            command.stdout.write(
                f"frame of {result['events']:>2} events {result['bytes']:6} B   encode "
                f"{result['encode_us']:6.1f} µs   gate {result['gate_us']:6.1f} µs"
            )
    fail_if([p for r in results for p in r.get("problems", ())], "bench egress")
    return results


def _sse(events):
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def _stream_events(deltas):
    events = [{"type": "response.created", "sequence_number": 0, "response": {"id": "r"}}]
    for i, delta in enumerate(deltas, 1):
        events.append(
            {"type": "response.output_text.delta", "sequence_number": i, "item_id": "msg_1",
             "output_index": 0, "content_index": 0, "delta": delta}
        )  # fmt: skip
    events.append(
        {"type": "response.completed", "sequence_number": len(deltas) + 1, "response": {"id": "r"}}
    )
    return events


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _child_main(command, opts):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from streams.store import known_secrets

    spec = json.loads(opts["child"])
    repeat = spec["repeat"]
    known_secrets.learn_here({PASSTHROUGH})
    rules = known_secrets.rules()
    staff = get_user_model().objects.create_user("bench-staff", is_staff=True)
    big, hostile = _import_streams(spec["events"])
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(staff)

    def body(url):
        r = client.get(url)
        if r.status_code != 200:
            raise SystemExit(f"{url}: HTTP {r.status_code}")
        return b"".join(r.streaming_content) if r.streaming else r.content

    problems = []
    shown = rules.bytes(body(f"/streams/{hostile.pk}/"))
    if b"[redacted]" not in shown or any(
        KEY[i : i + 8].encode() in shown for i in range(len(KEY) - 7)
    ):
        problems.append("the gate left a piece of the key on the hostile stream's page")
    for result in _page_figures(body, rules, big, repeat):
        command.stdout.write(json.dumps(result))
    for result in _frame_figures(rules, repeat):
        command.stdout.write(json.dumps(result))
    if problems:
        command.stdout.write(json.dumps({"what": "check", "problems": problems}))


def _import_streams(events):
    """The recorded streams the child reads: the big one (`events` deltas of WORDS) and the
    hostile one (the key cut at every offset)."""
    from streams.ingest.importer import import_capture

    big = import_capture(_sse(_stream_events([f"{WORDS}{i} " for i in range(events)])), "big.sse")[
        0
    ]
    cuts = [KEY[:i] + " | " + KEY[i:] for i in range(1, len(KEY))]
    hostile = import_capture(_sse(_stream_events(cuts)), "hostile.sse")[0]
    return big, hostile


def _page_figures(body, rules, big, repeat):
    """Per page of the big stream (and the list and analytics pages), its server time
    (`body(url)`: the page's bytes) against the gate's (`rules`) over the same bytes."""
    pages = [
        ("list", "/"),
        ("timeline", f"/streams/{big.pk}/"),
        ("events", f"/streams/{big.pk}/events/"),
        ("export .json", f"/streams/{big.pk}.json"),
        ("export .sse", f"/streams/{big.pk}.sse"),
        ("latency", "/latency/"),
        ("routing", "/routing/"),
    ]
    for name, url in pages:
        data = body(url)  # warm-up
        page_s = _best(lambda url=url: body(url), repeat)
        gate_s = _best(lambda data=data: rules.bytes(data), repeat)
        mb = len(data) / 2**20
        yield {
            "what": "page",
            "page": name,
            "kb": round(len(data) / 1024, 1),
            "page_ms": round(page_s * 1000, 3),
            "gate_ms": round(gate_s * 1000, 3),
            "ratio": round(gate_s / page_s, 4),
            "gate_ms_per_mb": round(gate_s * 1000 / mb, 2) if mb else 0.0,
        }


def _frame_figures(rules, repeat):
    """Per WebSocket frame of 10 events and of 1: its encoding time against the gate's."""
    from streams.shapes import event_message

    for n in (10, 1):
        rows = [
            (i, "response.output_text.delta", i, 1000 * i,
             json.dumps({"type": "response.output_text.delta", "sequence_number": i,
                         "item_id": "msg_1", "delta": f"{WORDS}{i}"}))
            for i in range(n)
        ]  # fmt: skip
        frame = event_message.stream_frame(rows)
        encode_s = _best(
            lambda rows=rows: [event_message.stream_frame(rows) for _ in LOOPS], repeat
        )
        gate_s = _best(lambda frame=frame: [rules.text(frame) for _ in LOOPS], repeat)
        loops = len(LOOPS)
        yield {
            "what": "frame",
            "events": n,
            "bytes": len(frame.encode()),
            "encode_us": round(encode_s / loops * 1e6, 2),
            "gate_us": round(gate_s / loops * 1e6, 2),
        }
