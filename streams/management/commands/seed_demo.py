"""`python manage.py seed_demo --streams N`: a realistic recorded history for the analytics pages.

Streams are spread over the last `--days` days (more traffic in working hours), across the
simulator's models with their latency profiles (`streams.simulator.models`), half of them
`model: "auto"` routed by the simulator's own router (`streams.simulator.router.route`) from
generated prompts, the rest pinned. Some fail (HTTP 429/500, an `error` terminal), stall, get
truncated, come back incomplete or are cancelled; a few pinned ones receive a routing event they
should not, a few arrive through a buffering proxy, and `gpt-oss-120b` regresses over the last
two days, so every panel of the latency and routing pages has something to show.

Each stream gets `--events-per-stream` events on average (wire-faithful Responses API JSON with
receipt offsets), and the real protocol checker reads them: findings, output text and status
agree with the stored events exactly as if the recorder had written them. Rows go in through
`bulk_create` (streams, findings) and `streams.recorder.insert_events` (events: multi-row INSERT
on SQLite, COPY on PostgreSQL), in chunks of one transaction each.

Most of its time goes to `bulk_create` of the wide Stream rows, then to the checker; the event
rows themselves are the cheap part. The command prints its own throughput at the end; measured
figures are in docs/performance.md ("seed_demo").
"""

import collections
import contextlib
import datetime as dt
import json
import random
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from streams import aggregates, metrics
from streams.checks import Checker
from streams.models import Finding, Stream
from streams.recorder import insert_events
from streams.simulator.models import MODELS
from streams.simulator.router import route

CHUNK = 2_000
AGGREGATE_EVERY = 10  # chunks
REGRESSED_MODEL = "gpt-oss-120b"  # slower over the last REGRESSION_DAYS days
REGRESSION_DAYS = 2
REGRESSION_FACTOR = 1.6

REQUESTED = [  # (requested model, weight)
    ("auto", 0.55),
    ("gpt-oss-120b", 0.12),
    ("gpt-oss-20b", 0.12),
    ("mistral-small-3.2", 0.08),
    ("qwen3-coder", 0.08),
    ("eu-reasoner", 0.05),
]
SOURCES = [("live", 0.80), ("proxy", 0.15), ("import", 0.05)]
# Outcomes; the rest completes. Probabilities per stream.
OUTCOMES = [
    ("http_429", 0.010),
    ("http_500", 0.005),
    ("error", 0.010),
    ("stalled", 0.008),
    ("truncated", 0.007),
    ("incomplete", 0.010),
    ("cancelled", 0.008),
    ("interrupted", 0.002),
]
PINNED_ROUTING_P = 0.01  # pinned requests that still get a routing event (a protocol violation)
BUFFERED_P = {"proxy": 0.08, "live": 0.003, "import": 0.0}
GAP_P = 0.003  # one sequence number skipped
UNKNOWN_EVENT_P = 0.01  # an event type the checker does not know (the schema is additive)
ROUTER_SOURCES = [("rules", 0.90), ("classifier", 0.08), ("fallback", 0.02)]
FALLBACK_MODEL = "gpt-oss-20b"
ERROR_CODES = ["server_error", "model_overloaded", "context_length_exceeded"]
# Relative traffic per hour of the day (UTC): quiet nights, busy office hours.
HOURLY = [2, 1, 1, 1, 1, 2, 4, 7, 10, 12, 12, 11, 9, 11, 12, 12, 11, 9, 7, 6, 5, 4, 3, 2]

PROMPTS = {
    "chat": [
        "Hi! Can you suggest a name for our team newsletter?",
        "Summarise these meeting notes in three bullets.",
        "Translate 'good morning' into Dutch and German.",
        "Write a friendly reminder about Friday's deadline.",
        "What is a good vegetarian dish for eight people?",
    ],
    "code": [
        "Fix this python function: def add(a, b): return a - b",
        "Write a SQL query: SELECT the ten newest orders FROM orders",
        "Why does my javascript promise never resolve?",
        "Convert this loop to a list comprehension in python.",
        "Explain this regex: ^[a-z0-9_-]{3,16}$",
    ],
    "tools": [
        "What's the weather in Amsterdam tomorrow?",
        "Look up the EUR/USD exchange rate for today.",
        "Call the calendar tool and find a free slot on Tuesday.",
        "Use a function to convert 30 miles to kilometres.",
    ],
    "reasoning": [
        "Prove that the square root of two is irrational.",
        "Explain step by step how a B-tree stays balanced.",
        "Why does the sky look blue? Derive it from scattering.",
        "Reason about whether this contract clause is enforceable. " + "Context. " * 50,
    ],
}
WORDS = (
    "the a model stream token answer data result first next because which when latency "
    "index query router page user request response value time we you it is can will should "
    "here there then so and or but also"
).split()


def _pick(rng, choices):
    r = rng.random()
    for value, p in choices:
        r -= p
        if r < 0:
            return value
    return choices[-1][0]


@contextlib.contextmanager
def _settable_created_at():
    """`created_at` is auto_now_add: let bulk_create keep the value we give it."""
    field = Stream._meta.get_field("created_at")
    field.auto_now_add = False
    try:
        yield
    finally:
        field.auto_now_add = True


class _Events:
    """Wire events of one stream: (t_us, data) pairs with rising sequence numbers."""

    def __init__(self):
        self.items = []
        self.seq = 0

    def add(self, t_us, obj):
        obj["sequence_number"] = self.seq
        self.seq += 1
        self.items.append((t_us, json.dumps(obj, separators=(",", ":")), obj))

    def delta(self, t_us, item_id, token):
        obj = {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": item_id,
            "delta": token,
            "sequence_number": self.seq,
        }
        self.seq += 1
        data = (
            '{"type":"response.output_text.delta","output_index":0,"content_index":0,'
            f'"item_id":"{item_id}","delta":{json.dumps(token)},'
            f'"sequence_number":{obj["sequence_number"]}}}'
        )
        self.items.append((t_us, data, obj))


def _response(rid, created_s, model, status, **extra):
    return {
        "id": rid,
        "object": "response",
        "created_at": created_s,
        "status": status,
        "model": model,
        "output": [],
        **extra,
    }


def make_stream(rng, created_at, users, events_per_stream):
    """One stream as the recorder would have stored it: the row's fields and its events."""
    requested = _pick(rng, REQUESTED)
    source = _pick(rng, SOURCES)
    outcome = _pick(rng, OUTCOMES + [("completed", 1.0)])
    user = _pick(rng, users) if users else None
    category = rng.choice(list(PROMPTS))
    prompt = rng.choice(PROMPTS[category])
    decision = None
    if requested == "auto":
        decision = route(prompt)
        router_source = _pick(rng, ROUTER_SOURCES)
        resolved = decision.model_id
        reasoning = decision.reasoning
        if router_source == "fallback":
            resolved = FALLBACK_MODEL
            reasoning = f"{decision.model_id} is at capacity; fell back to {FALLBACK_MODEL}."
        routing = {
            "model_id": resolved,
            "category": decision.category,
            "source": router_source,
            "reasoning": reasoning,
        }
    else:
        resolved = requested
        routing = None
        if rng.random() < PINNED_ROUTING_P:
            # a router that answers although the model was pinned (it keeps the pin)
            decision = route(prompt)
            routing = {
                "model_id": requested,
                "category": decision.category,
                "source": "rules",
                "reasoning": decision.reasoning,
            }
    profile = MODELS[resolved]
    rid = f"resp_{rng.getrandbits(96):024x}"
    mid = f"msg_{rng.getrandbits(96):024x}"
    created_s = int(created_at.timestamp())
    fields = {
        "user_id": user,
        "source": source,
        "requested_model": requested,
        "scenario": "seed_demo",
        "prompt": prompt,
        "request_body": {"model": requested, "input": prompt, "stream": True},
        "upstream_url": "seed_demo",
        "created_at": created_at,
        "started_at": created_at,
        "runner": "seed_demo",
        "content_type": "text/event-stream; charset=utf-8",
        "http_status": 200,
    }
    ms = 1000  # µs
    connected = rng.randint(600, 3 * ms)
    written = connected + rng.randint(80, 400)
    headers = written + rng.randint(3 * ms, 25 * ms)
    fields.update(connected_us=connected, request_written_us=written, headers_us=headers)
    if outcome in ("http_429", "http_500"):
        code = 429 if outcome == "http_429" else 500
        fields.update(
            status=Stream.Status.FAILED,
            http_status=code,
            content_type="application/json",
            error_code="rate_limit_exceeded" if code == 429 else "server_error",
            error_message="Rate limit reached, retry later" if code == 429 else "Upstream error",
            resolved_model="",
            closed_us=headers + rng.randint(100, 900),
        )
        fields.update(metrics.derived(request_written_us=written, closed_us=fields["closed_us"]))
        fields["finished_at"] = created_at + dt.timedelta(microseconds=fields["closed_us"])
        return fields, [], []

    ev = _Events()
    t = headers + rng.randint(200, 2 * ms)
    ev.add(
        t,
        {
            "type": "response.created",
            "response": _response(rid, created_s, requested, "in_progress"),
        },
    )
    ttft = profile.sample_ttft(rng) * 1e6
    if resolved == REGRESSED_MODEL and created_at > _REGRESSION_START:
        ttft *= REGRESSION_FACTOR
    if routing is not None:
        spent = rng.randint(15 * ms, 60 * ms)
        if routing["source"] == "classifier":
            spent += rng.randint(80 * ms, 400 * ms)
        t += spent
        ev.add(t, {"type": "response.routing.completed", **routing})
        ttft += spent  # the router decides before the model starts
    first = max(written + int(ttft), t + rng.randint(2 * ms, 10 * ms))
    t = first - rng.randint(2 * ms, 8 * ms)
    ev.add(t, {"type": "response.output_item.added", "output_index": 0,
               "item": {"id": mid, "type": "message", "role": "assistant",
                        "status": "in_progress", "content": []}})  # fmt: skip
    t += rng.randint(300, 2 * ms)
    ev.add(t, {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
               "item_id": mid, "part": {"type": "output_text", "text": ""}})  # fmt: skip
    n_tokens = max(3, int(rng.uniform(0.5, 1.5) * events_per_stream) - 7)
    stop_after = n_tokens
    if outcome in ("error", "stalled", "truncated", "cancelled", "interrupted"):
        stop_after = rng.randint(1, max(1, n_tokens - 1))
    buffered = outcome in ("completed", "incomplete") and rng.random() < BUFFERED_P[source]
    if buffered:
        n_tokens = stop_after = max(n_tokens, 30)
    gap_at = rng.randint(1, n_tokens - 1) if rng.random() < GAP_P else -1
    t = first
    tokens = []
    first_delta = len(ev.items)
    for i in range(stop_after):
        if i:
            t += int(profile.sample_token_gap(rng) * 1e6) if not buffered else rng.randint(5, 60)
        if i == gap_at:
            ev.seq += 1  # one sequence number never arrives
        token = (" " if i else "") + rng.choice(WORDS)
        tokens.append(token)
        ev.delta(t, mid, token)
    if buffered:
        # a proxy held everything back and released it at once, well after the first token
        hold = rng.randint(400 * ms, 2_000 * ms)
        ev.items[first_delta:] = [(tt + hold, d, o) for tt, d, o in ev.items[first_delta:]]
        t += hold
    text = "".join(tokens)
    status = Stream.Status.COMPLETED
    closed_by_upstream = True
    close_at = None
    if outcome == "error":
        t += rng.randint(1 * ms, 50 * ms)
        code = rng.choice(ERROR_CODES)
        ev.add(t, {"type": "error", "code": code, "message": f"The upstream failed: {code}."})
        status = Stream.Status.FAILED
    elif outcome == "stalled":
        close_at = t + 60_000 * ms + rng.randint(0, 50 * ms)
        closed_by_upstream = False
        status = Stream.Status.STALLED
    elif outcome in ("cancelled", "interrupted"):
        close_at = t + rng.randint(50 * ms, 3_000 * ms)
        closed_by_upstream = False
        status = Stream.Status(outcome)
    elif outcome == "truncated":
        close_at = t + rng.randint(1 * ms, 30 * ms)
        status = Stream.Status.TRUNCATED
    else:
        part = {"type": "output_text", "text": text}
        item = {"id": mid, "type": "message", "role": "assistant", "status": "completed",
                "content": [part]}  # fmt: skip
        for obj in (
            {"type": "response.output_text.done", "output_index": 0, "content_index": 0,
             "item_id": mid, "text": text},
            {"type": "response.content_part.done", "output_index": 0, "content_index": 0,
             "item_id": mid, "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ):  # fmt: skip
            t += rng.randint(100, 1_500)
            ev.add(t, obj)
        t += rng.randint(200, 3 * ms)
        final = "incomplete" if outcome == "incomplete" else "completed"
        resp = _response(rid, created_s, resolved, final, output=[item], output_text=text)
        if rng.random() < UNKNOWN_EVENT_P:
            t += rng.randint(100, 1_000)
            ev.add(t, {"type": "response.usage.partial", "output_tokens": len(tokens)})
        ev.add(t, {"type": f"response.{final}", "response": resp})
        status = Stream.Status(final)
    if close_at is None:
        close_at = t + rng.randint(100, 1_500)

    checker = Checker(pinned_model=requested != "auto")
    findings = []
    milestones = {}
    output_times = []
    rows = []  # (t_us, type, sequence_number, output_index, content_index, is_json, data)
    for index, (t_us, data, obj) in enumerate(ev.items):
        result = checker.feed(index, "message", data, obj=obj, t_us=t_us)
        rows.append(
            (
                t_us,
                result.type,
                result.sequence_number,
                result.output_index,
                result.content_index,
                result.is_json,
                data,
            )  # fmt: skip
        )
        findings.extend(result.violations)
        kind = result.kind
        if kind == "output":
            if result.first_output:
                milestones["first_token_us"] = t_us
                output_times = [t_us, t_us]
            else:
                output_times[1] = t_us
        elif kind in ("created", "routing", "terminal"):
            milestones.setdefault(f"{kind}_us" if kind != "created" else "created_event_us", t_us)
    findings.extend(checker.close(connection_closed=closed_by_upstream, t_us=close_at))
    fields.update(milestones)
    n = checker.output_tokens
    fields.update(
        status=status,
        upstream_id=rid,
        resolved_model=checker.resolved_model or resolved,
        output_tokens=n,
        output_text=checker.output_text,
        final_text=checker.final_text or "",
        parts=checker.items(),
        event_count=len(rows),
        bytes_received=sum(len(r[6]) for r in rows),
        closed_us=close_at,
        finished_at=created_at + dt.timedelta(microseconds=close_at),
        heartbeat_at=created_at + dt.timedelta(microseconds=close_at),
        findings_count=len(findings),
        error_findings=sum(1 for f in findings if f.severity == "error"),
    )
    if checker.error_code:
        fields.update(error_code=checker.error_code, error_message=checker.error_message)
    if checker.routing:
        fields.update(
            routing_category=str(checker.routing.get("category") or ""),
            routing_source=str(checker.routing.get("source") or ""),
            routing_reasoning=str(checker.routing.get("reasoning") or ""),
        )
    fields.update(
        metrics.derived(
            request_written_us=written,
            first_token_us=milestones.get("first_token_us"),
            closed_us=close_at,
            first_output_us=output_times[0] if output_times else None,
            last_output_us=output_times[1] if output_times else None,
            output_tokens=n,
        )
    )
    return fields, rows, findings


_REGRESSION_START = None


def _timestamps(rng, n, days, now):
    """`n` creation times over the last `days` days, shaped by HOURLY, oldest first."""
    weights = [w / sum(HOURLY) for w in HOURLY]
    start = now - dt.timedelta(days=days)
    out = []
    for _ in range(n):
        while True:
            t = start + dt.timedelta(seconds=rng.random() * days * 86400)
            if rng.random() < weights[t.hour] / max(weights):
                break
        out.append(t)
    out.sort()
    return out


_DEFAULTS = {"user_id": None, "error_code": "", "routing_category": "", "routing_source": ""}
_Row = collections.namedtuple("_Row", "pk created_at")


def _stream_columns():
    fields = [f for f in Stream._meta.concrete_fields if not f.primary_key]
    return fields


def _insert_streams(rows):
    """Stream rows (dicts of field values) with ids of our own, one multi-row INSERT per few
    hundred rows on SQLite, COPY on PostgreSQL: bulk_create's per-value preparation was a
    third of the command's time (docs/analytics.md, "seed_demo")."""
    fields = _stream_columns()
    qn = connection.ops.quote_name
    table = qn(Stream._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX({qn('id')}), 0) FROM {table}")
        first = cursor.fetchone()[0] + 1
    pg = connection.vendor == "postgresql"
    values = []
    out = []
    for i, row in enumerate(rows):
        pk = first + i
        out.append(_Row(pk, row["created_at"]))
        line = [pk]
        for f in fields:
            name = f.attname
            v = row.get(name, row.get(f.name)) if (name in row or f.name in row) else (
                f.get_default())  # fmt: skip
            if isinstance(v, (dict, list)):
                v = json.dumps(v)
            elif isinstance(v, dt.datetime):
                v = v.astimezone(dt.UTC)
                v = v if pg else v.replace(tzinfo=None).isoformat(" ")
            line.append(v)
        values.append(line)
    cols = ", ".join(qn(c) for c in ["id"] + [f.column for f in fields])
    if pg:
        with connection.cursor() as cursor:
            with cursor.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for line in values:
                    copy.write_row(line)
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{Stream._meta.db_table}', 'id'), %s)",
                [first + len(rows) - 1],
            )
        return out
    width = len(fields) + 1
    per = max(1, 30000 // width)
    connection.ensure_connection()
    raw = connection.connection
    row_marks = "(" + ", ".join(["?"] * width) + ")"
    for lo in range(0, len(values), per):
        chunk = values[lo : lo + per]
        raw.execute(
            f"INSERT INTO {table} ({cols}) VALUES " + ", ".join([row_marks] * len(chunk)),
            [v for line in chunk for v in line],
        )
    return out


def demo_users(names):
    User = get_user_model()
    ids = []
    for name in names:
        user, created = User.objects.get_or_create(username=name)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        ids.append(user.pk)
    return ids


def seed(streams, days=30, seed=0, events_per_stream=20, users=("alice", "bob", "carol"),
         now=None, progress=None):  # fmt: skip
    """Insert `streams` streams (with events and findings); returns counts."""
    global _REGRESSION_START
    rng = random.Random(seed)
    now = now or dt.datetime.now(dt.UTC)
    _REGRESSION_START = now - dt.timedelta(days=REGRESSION_DAYS)
    user_ids = demo_users(users)
    # the first user is the busiest; a few streams have no user (recorded from the CLI)
    weights = [1 / (i + 1) for i in range(len(user_ids))]
    total = sum(weights) / 0.95
    user_choices = [(uid, w / total) for uid, w in zip(user_ids, weights, strict=True)]
    user_choices.append((None, 1.0))
    times = _timestamps(rng, streams, days, now)
    counts = {"streams": 0, "events": 0, "findings": 0}
    contrib = aggregates.Contributions()
    with _settable_created_at():
        for lo in range(0, streams, CHUNK):
            made = [
                make_stream(rng, t, user_choices, events_per_stream) for t in times[lo : lo + CHUNK]
            ]
            with transaction.atomic():
                rows = _insert_streams([m[0] for m in made])
                events = []
                findings = []
                for row, m in zip(rows, made, strict=True):
                    _, items, violations = m
                    start = row.created_at
                    events.extend(
                        (
                            row.pk,
                            i,
                            t_us,
                            start,
                            "message",
                            "",
                            type_,
                            seq,
                            oi,
                            ci,
                            is_json,
                            data,
                            None,
                        )  # fmt: skip
                        for i, (t_us, type_, seq, oi, ci, is_json, data) in enumerate(items)
                    )
                    findings.extend(Finding(stream_id=row.pk, **v.as_dict()) for v in violations)
                if events:
                    insert_events(events, offsets=True)
                if findings:
                    Finding.objects.bulk_create(findings, batch_size=1000)
                # the analytics pre-aggregates, as the recorder keeps them: summed here over
                # many chunks (most keys repeat: an hour's streams share a few hundred) and
                # written every AGGREGATE_EVERY chunks, an upsert that adds
                for fields, _, violations in made:
                    found = collections.Counter((v.code, v.severity) for v in violations)
                    contrib.add_stream(
                        {c: fields.get(c, _DEFAULTS.get(c)) for c in aggregates.COLUMNS},
                        [(code, sev, n) for (code, sev), n in found.items()],
                    )
                if (lo // CHUNK) % AGGREGATE_EVERY == AGGREGATE_EVERY - 1 or lo + CHUNK >= streams:
                    aggregates.apply(contrib)
                    contrib = aggregates.Contributions()
            counts["streams"] += len(rows)
            counts["events"] += len(events)
            counts["findings"] += len(findings)
            if progress:
                progress(counts)
    return counts


class Command(BaseCommand):
    help = "Generate a realistic history of recorded streams (for the analytics pages)."

    def add_arguments(self, parser):
        parser.add_argument("--streams", type=int, default=1000)
        parser.add_argument("--days", type=float, default=30)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--events-per-stream", type=int, default=20)
        parser.add_argument(
            "--users", default="alice,bob,carol", help="owners of the streams (created if missing)"
        )

    def handle(self, *args, **opts):
        if opts["streams"] < 0 or opts["days"] <= 0 or opts["events_per_stream"] < 8:
            raise CommandError("--streams ≥ 0, --days > 0, --events-per-stream ≥ 8")
        t0 = time.perf_counter()
        last = [t0]

        def progress(c):
            if time.perf_counter() - last[0] > 5:
                last[0] = time.perf_counter()
                self.stderr.write(f"  {c['streams']:,} streams, {c['events']:,} events…")

        users = [u.strip() for u in opts["users"].split(",") if u.strip()]
        counts = seed(
            opts["streams"],
            days=opts["days"],
            seed=opts["seed"],
            events_per_stream=opts["events_per_stream"],
            users=users,
            progress=progress,
        )
        elapsed = time.perf_counter() - t0
        self.stdout.write(
            f"{counts['streams']:,} streams, {counts['events']:,} events, "
            f"{counts['findings']:,} findings in {elapsed:.1f} s "
            f"({counts['streams'] / elapsed:,.0f} streams/s, "
            f"{counts['events'] / elapsed:,.0f} events/s)"
        )
