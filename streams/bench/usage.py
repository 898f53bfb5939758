"""`python manage.py bench usage`: what usage and cost add to the end of a stream.

Usage and cost are derived once per stream, when it finishes (`rows.finished`), never per
event. This times, in one process and one run, `rows.finished` for streams of `--events`
output deltas, and within it the usage and cost part (`rows.usage_fields`), for four kinds of
stream: usage reported and a team price; no usage (an estimate: the request and the output
counted with the o200k_base tokenizer) priced by the maintained list; an estimate at the
built-in simulator's example price (when it is the upstream); an estimate for a model nobody
prices. It prints µs of CPU per stream and the share of `finished` that usage and cost
take. The tokenizer's one-time load (per process) is timed apart. No database, no server: the
team's table is installed in memory (`prices.install`).
"""

import datetime as dt
import functools
import json
import time
from decimal import Decimal

from streams.core import usage
from streams.core.checks import Checker
from streams.core.pricing import Rate
from streams.store import prices, rows

WORDS = "Utrecht ligt in het midden van Nederland en is een oude stad met grachten ".split()


def add_arguments(parser):
    parser.add_argument("--streams", type=int, default=2_000, help="streams per kind")
    parser.add_argument("--events", type=int, default=200, help="output deltas per stream")


def _events(deltas, usage_reported, model):
    """A Responses stream's events (JSON texts) with `deltas` output deltas."""
    rid, mid = "resp_bench", "msg_bench"
    text = [WORDS[i % len(WORDS)] + " " for i in range(deltas)]
    response = {"id": rid, "object": "response", "model": model, "status": "in_progress"}
    out = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": mid, "type": "message", "role": "assistant", "content": []}},
        {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
         "item_id": mid, "part": {"type": "output_text", "text": ""}},
        *({"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
           "item_id": mid, "delta": d} for d in text),
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0,
         "item_id": mid, "text": "".join(text)},
    ]  # fmt: skip
    done = {**response, "status": "completed"}
    if usage_reported:
        done["usage"] = {"input_tokens": 40, "output_tokens": deltas, "total_tokens": 40 + deltas}
    out.append({"type": "response.completed", "response": done})
    return [json.dumps(e) for e in out]


def _checker(events):
    checker = Checker()
    for i, data in enumerate(events):
        checker.feed(i, "", data, t_us=1000 * i)
    checker.close(t_us=1000 * len(events))
    return checker


def _time(fn, n):
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6


KINDS = [
    # (name, usage reported, model, answered by the built-in simulator: its example prices)
    ("reported, team price", True, "team-model", False),
    ("estimated, genai-prices", False, "gpt-oss-20b", False),
    ("estimated, simulator example price", False, "eu-reasoner", True),
    ("estimated, no price", False, "eu-reasoner", False),
]


def run(command, opts):
    n, deltas = opts["streams"], opts["events"]
    started = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    prices.install(
        [Rate("team-*", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "EUR", Decimal("1"), Decimal("4"))]
    )
    load_start = time.process_time()
    usage.warm()
    load_ms = (time.process_time() - load_start) * 1e3
    prices.cost_fields(usage.Usage(1, 1), "gpt-oss-20b", started)  # (the list's import, once)
    body = {"model": "auto", "input": "Vertel me over Utrecht en zijn grachten.", "stream": True}
    results = []
    for name, reported, model, simulated in KINDS:
        checker = _checker(_events(deltas, reported, model))
        # (a stream the built-in simulator did not answer is priced as an import is)
        imported = not simulated
        finished = functools.partial(
            rows.finished, checker, request_body=body, model=model, started_at=started,
            imported=imported,
        )  # fmt: skip
        fields = finished()
        assert (fields["usage_source"] == "reported") == reported, fields
        total_us = _time(finished, n)
        usage_part = functools.partial(
            rows.usage_fields, checker, fields, body, None, model, started, imported
        )
        usage_us = _time(usage_part, n)
        results.append(
            {
                "kind": name,
                "events": deltas,
                "finished_us": round(total_us, 1),
                "usage_and_cost_us": round(usage_us, 1),
                "share": round(usage_us / total_us, 3),
                "priced": fields["cost_nanos"] is not None,
            }
        )
    prices.forget()
    for r in results:
        if opts["json"]:
            command.stdout.write(json.dumps({**r, "tokenizer_load_ms": round(load_ms)}))
        else:
            command.stdout.write(
                f"{r['kind']:26} {r['events']:>5} deltas   finished {r['finished_us']:>8.1f} µs"
                f"   of it usage and cost {r['usage_and_cost_us']:>8.1f} µs ({r['share']:.0%})"
                f"   priced {r['priced']}"
            )
    if not opts["json"]:
        command.stdout.write(f"tokenizer load (once per process): {load_ms:.0f} ms of CPU")
    return results
