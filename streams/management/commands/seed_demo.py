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
agree with the stored events exactly as if the recorder had written them.

Making and checking a stream is the expensive part, so `seed` makes a pool of *shapes* with
`make_stream` (one per SHAPE_EVERY streams, at least MIN_SHAPES) and stamps each out for many
streams: only the creation time, the owner and the response/message ids differ (patched in the
database by INSERT … SELECT from temporary template tables), and the pre-aggregates come from
each shape's `aggregates.Contributions` with the hour, day and owner filled in. Into empty
tables from a command, indexes are built once at the end and a writer thread does the database
work while the next chunk is made. The command prints its own throughput at the end; measured
figures are in docs/performance.md ("seed_demo").
"""

import bisect
import collections
import contextlib
import datetime as dt
import json
import operator
import queue
import random
import sys
import threading
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from streams.core import figures
from streams.core.checks import Checker
from streams.models import Event, Finding, Membership, Project, Stream
from streams.simulator.models import MODELS
from streams.simulator.router import route
from streams.store import aggregates, event_row
from streams.store import rows as stream_rows

CHUNK = 2_000
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
# What the apps behind the proxy tag their requests with (X-Streamscope-Tags): one app tag per
# proxied stream, and some carry a second, rarer one.
PROXY_TAGS = [("checkout", 0.40), ("support-bot", 0.35), ("eval", 0.25)]
EXTRA_TAGS = [("canary", 0.05), ("experiment-b", 0.10)]
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


def make_stream(rng, created_at, users, events_per_stream, *, ids=None, created_s=None):
    """One stream as the recorder would have stored it: the row's fields and its events.
    `ids` (response id, message id) and `created_s` (the response's created_at) replace the
    random and the real ones: `seed` makes its shapes with placeholders there."""
    return _StreamMaker(rng, created_at, users, events_per_stream, ids, created_s).make()


_MS = 1000  # a millisecond, in the µs that receipt offsets count


class _StreamMaker:
    """One stream being made by `make_stream`: the request and its routing, the connection's
    timings, the wire events (the opening ones, the text deltas, the ending) and what the
    checker finds in them. Each step draws from `rng` in the order `make` runs them, so the same
    draws give the same stream."""

    def __init__(self, rng, created_at, users, events_per_stream, ids, created_s):
        self.rng = rng
        self.created_at = created_at
        self.users = users
        self.events_per_stream = events_per_stream
        self.ids = ids
        self.created_s = created_s

    def make(self):
        """(the row's fields, its event rows, the checker's findings)"""
        rng = self.rng
        self._request()
        self._routing()
        self.profile = MODELS[self.resolved]
        self.rid, self.mid = self.ids or (
            f"resp_{rng.getrandbits(96):024x}",
            f"msg_{rng.getrandbits(96):024x}",
        )
        if self.created_s is None:
            self.created_s = int(self.created_at.timestamp())
        self.fields = self._request_fields()
        self._connection()
        if self.outcome in ("http_429", "http_500"):
            fields, rows, findings = self._http_error()
        else:
            self.ev = _Events()
            self._opening_events()
            self._text_deltas()
            self._ending()
            fields, rows, findings = self._checked()
        # what the search index reads of it, as every write of a row derives it
        return stream_rows.with_search(fields), rows, findings

    def _request(self):
        """What was asked and how it will go: the requested model, the source and its tags,
        the outcome, the owner and the prompt."""
        rng = self.rng
        self.requested = _pick(rng, REQUESTED)
        self.source = _pick(rng, SOURCES)
        self.tags = []
        if self.source == "proxy":
            self.tags.append(_pick(rng, PROXY_TAGS))
            extra = _pick(rng, EXTRA_TAGS + [("", 1.0 - sum(p for _, p in EXTRA_TAGS))])
            if extra:
                self.tags.append(extra)
        self.outcome = _pick(rng, OUTCOMES + [("completed", 1.0)])
        self.user = _pick(rng, self.users) if self.users else None
        category = rng.choice(list(PROMPTS))
        self.prompt = rng.choice(PROMPTS[category])

    def _routing(self):
        """The model that answers (`resolved`) and the routing event's fields, or None: "auto"
        is routed by the simulator's router (some by its classifier, some fall back), and a few
        pinned requests get a routing event that keeps the pin."""
        rng = self.rng
        requested = self.requested
        self.routing = None
        if requested == "auto":
            decision = route(self.prompt)
            router_source = _pick(rng, ROUTER_SOURCES)
            self.resolved = decision.model_id
            reasoning = decision.reasoning
            if router_source == "fallback":
                self.resolved = FALLBACK_MODEL
                reasoning = f"{decision.model_id} is at capacity; fell back to {FALLBACK_MODEL}."
            self.routing = {
                "model_id": self.resolved,
                "category": decision.category,
                "source": router_source,
                "reasoning": reasoning,
            }
            return
        self.resolved = requested
        if rng.random() < PINNED_ROUTING_P:
            # a router that answers although the model was pinned (it keeps the pin)
            decision = route(self.prompt)
            self.routing = {
                "model_id": requested,
                "category": decision.category,
                "source": "rules",
                "reasoning": decision.reasoning,
            }

    def _request_fields(self):
        """The row's fields known when the request is sent."""
        created_at = self.created_at
        return {
            "user_id": self.user,
            "source": self.source,
            "tags": self.tags,
            "requested_model": self.requested,
            "scenario": "seed_demo",
            "prompt": self.prompt,
            "request_body": {"model": self.requested, "input": self.prompt, "stream": True},
            "upstream_url": "seed_demo",
            "created_at": created_at,
            "started_at": created_at,
            "runner": "seed_demo",
            "content_type": "text/event-stream; charset=utf-8",
            "http_status": 200,
        }

    def _connection(self):
        """Connected, request written, headers received (µs after the start)."""
        rng = self.rng
        connected = rng.randint(600, 3 * _MS)
        self.written = connected + rng.randint(80, 400)
        self.headers = self.written + rng.randint(3 * _MS, 25 * _MS)
        self.fields.update(
            connected_us=connected, request_written_us=self.written, headers_us=self.headers
        )

    def _http_error(self):
        """A 429 or 500 answer: a failed row without events or findings."""
        fields, created_at = self.fields, self.created_at
        code = 429 if self.outcome == "http_429" else 500
        fields.update(
            status=Stream.Status.FAILED,
            http_status=code,
            content_type="application/json",
            error_code="rate_limit_exceeded" if code == 429 else "server_error",
            error_message="Rate limit reached, retry later" if code == 429 else "Upstream error",
            resolved_model="",
            closed_us=self.headers + self.rng.randint(100, 900),
        )
        fields.update(
            figures.derived(request_written_us=self.written, closed_us=fields["closed_us"])
        )
        fields["finished_at"] = created_at + dt.timedelta(microseconds=fields["closed_us"])
        return fields, [], []

    def _opening_events(self):
        """response.created, the routing event if any, and the message's output_item.added and
        content_part.added; `first` is when the first token arrives (the model's TTFT, slower
        on the regressed model lately, after the router's time)."""
        rng, ev, mid, routing = self.rng, self.ev, self.mid, self.routing
        t = self.headers + rng.randint(200, 2 * _MS)
        ev.add(
            t,
            {
                "type": "response.created",
                "response": _response(self.rid, self.created_s, self.requested, "in_progress"),
            },
        )
        ttft = self.profile.sample_ttft(rng) * 1e6
        # (a stream made outside `seed`, as packed_history makes its templates: no regression)
        regressed = _REGRESSION_START is not None and self.created_at > _REGRESSION_START
        if self.resolved == REGRESSED_MODEL and regressed:
            ttft *= REGRESSION_FACTOR
        if routing is not None:
            spent = rng.randint(15 * _MS, 60 * _MS)
            if routing["source"] == "classifier":
                spent += rng.randint(80 * _MS, 400 * _MS)
            t += spent
            ev.add(t, {"type": "response.routing.completed", **routing})
            ttft += spent  # the router decides before the model starts
        self.first = max(self.written + int(ttft), t + rng.randint(2 * _MS, 10 * _MS))
        t = self.first - rng.randint(2 * _MS, 8 * _MS)
        ev.add(t, {"type": "response.output_item.added", "output_index": 0,
                   "item": {"id": mid, "type": "message", "role": "assistant",
                            "status": "in_progress", "content": []}})  # fmt: skip
        t += rng.randint(300, 2 * _MS)
        ev.add(t, {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
                   "item_id": mid, "part": {"type": "output_text", "text": ""}})  # fmt: skip

    def _text_deltas(self):
        """The output_text deltas (`tokens`), up to where the outcome cuts them off; one
        sequence number may be skipped, and a buffering proxy releases them all at once. `t`
        is the time of the last one."""
        rng, ev, outcome = self.rng, self.ev, self.outcome
        n_tokens = max(3, int(rng.uniform(0.5, 1.5) * self.events_per_stream) - 7)
        stop_after = n_tokens
        if outcome in ("error", "stalled", "truncated", "cancelled", "interrupted"):
            stop_after = rng.randint(1, max(1, n_tokens - 1))
        buffered = outcome in ("completed", "incomplete") and rng.random() < BUFFERED_P[self.source]
        if buffered:
            n_tokens = stop_after = max(n_tokens, 30)
        gap_at = rng.randint(1, n_tokens - 1) if rng.random() < GAP_P else -1
        t = self.first
        tokens = []
        first_delta = len(ev.items)
        for i in range(stop_after):
            if i:
                t += (
                    int(self.profile.sample_token_gap(rng) * 1e6)
                    if not buffered
                    else rng.randint(5, 60)
                )
            if i == gap_at:
                ev.seq += 1  # one sequence number never arrives
            token = (" " if i else "") + rng.choice(WORDS)
            tokens.append(token)
            ev.delta(t, self.mid, token)
        if buffered:
            # a proxy held everything back and released it at once, well after the first token
            hold = rng.randint(400 * _MS, 2_000 * _MS)
            ev.items[first_delta:] = [(tt + hold, d, o) for tt, d, o in ev.items[first_delta:]]
            t += hold
        self.tokens = tokens
        self.t = t

    def _ending(self):
        """How the stream ends, after its deltas, by its outcome: `status`, whether the upstream
        closed the connection (`closed_by_upstream`) and when it closed (`close_at`)."""
        rng, outcome = self.rng, self.outcome
        self.status = Stream.Status.COMPLETED
        self.closed_by_upstream = True
        self.close_at = None
        if outcome == "error":
            self.t += rng.randint(1 * _MS, 50 * _MS)
            code = rng.choice(ERROR_CODES)
            self.ev.add(
                self.t, {"type": "error", "code": code, "message": f"The upstream failed: {code}."}
            )
            self.status = Stream.Status.FAILED
        elif outcome == "stalled":
            self.close_at = self.t + 60_000 * _MS + rng.randint(0, 50 * _MS)
            self.closed_by_upstream = False
            self.status = Stream.Status.STALLED
        elif outcome in ("cancelled", "interrupted"):
            self.close_at = self.t + rng.randint(50 * _MS, 3_000 * _MS)
            self.closed_by_upstream = False
            self.status = Stream.Status(outcome)
        elif outcome == "truncated":
            self.close_at = self.t + rng.randint(1 * _MS, 30 * _MS)
            self.status = Stream.Status.TRUNCATED
        else:
            self._finished_message()
        if self.close_at is None:
            self.close_at = self.t + rng.randint(100, 1_500)

    def _finished_message(self):
        """The done events of the message and the terminal (`response.completed` or
        `.incomplete`), sometimes after an event type the checker does not know."""
        rng, ev, mid, t = self.rng, self.ev, self.mid, self.t
        text = "".join(self.tokens)
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
        t += rng.randint(200, 3 * _MS)
        final = "incomplete" if self.outcome == "incomplete" else "completed"
        resp = _response(self.rid, self.created_s, self.resolved, final, output=[item],
                         output_text=text)  # fmt: skip
        if rng.random() < UNKNOWN_EVENT_P:
            t += rng.randint(100, 1_000)
            ev.add(t, {"type": "response.usage.partial", "output_tokens": len(self.tokens)})
        ev.add(t, {"type": f"response.{final}", "response": resp})
        self.status = Stream.Status(final)
        self.t = t

    def _checked(self):
        """The events through the real checker: their rows, its findings, and the fields the
        recorder would have ended the row with (streams.store.rows.finished)."""
        checker = Checker(pinned_model=self.requested != "auto")
        rows, findings, milestones, output_times = _check_events(checker, self.ev.items)
        close_at = self.close_at
        findings.extend(checker.close(connection_closed=self.closed_by_upstream, t_us=close_at))
        finished_at = self.created_at + dt.timedelta(microseconds=close_at)
        self.fields.update(
            stream_rows.finished(
                checker,
                status=self.status,
                event_count=len(rows),
                bytes_received=sum(len(r[6]) for r in rows),
                finished_at=finished_at,
                request_written_us=self.written,
                first_token_us=milestones.get("first_token_us"),
                closed_us=close_at,
                first_output_us=output_times[0] if output_times else None,
                last_output_us=output_times[1] if output_times else None,
                milestones=milestones,
                request_body=self.fields["request_body"],
                model=self.requested,
                started_at=self.created_at,
            ),
            heartbeat_at=finished_at,
        )
        return self.fields, rows, findings


def _check_events(checker, items):
    """`items` ((t_us, data, obj) of `_Events`) fed to `checker`, as the recorder feeds them:
    (event rows (t_us, type, sequence_number, output_index, content_index, is_json, data), the
    findings so far, the milestones {name_us: t_us}, [first, last output t_us] or [])."""
    findings = []
    milestones = {}
    output_times = []
    rows = []
    for index, (t_us, data, obj) in enumerate(items):
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
    return rows, findings, milestones, output_times


_REGRESSION_START = None


def _times_us(rng, n, days, now_us):
    """`n` creation times (µs since the epoch, UTC) over the last `days` days, shaped by
    HOURLY, oldest first."""
    top = max(HOURLY)
    accept = [w / top for w in HOURLY]
    span_us = int(days * 86400 * 1_000_000)
    start = now_us - span_us
    out = []
    random_ = rng.random
    while len(out) < n:
        t = start + int(random_() * span_us)
        if random_() < accept[t // 3_600_000_000 % 24]:
            out.append(t)
    out.sort()
    return out


_DEFAULTS = {
    "user_id": None, "error_code": "", "routing_category": "", "routing_source": "",
    "format": Stream._meta.get_field("format").default,
}  # fmt: skip
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# Shapes: a stream made once by `make_stream` and the real checker, then stamped out for many
# streams that differ only in what must differ (docs/performance.md, "seed_demo"). The checker
# was most of the command's time, and reusing its verdicts is exact: nothing it reads depends
# on the wall clock, the ids or the owner. One shape per SHAPE_EVERY streams (at least
# MIN_SHAPES, or one per stream below that) keeps the distributions those of make_stream.
SHAPE_EVERY = 20
MIN_SHAPES = 5_000
# Placeholders where each stream has its own value, as long as the real ones (so the stored
# `bytes_received` stays the length of the stored events): the response and message ids, and
# the response's `created_at` seconds (ten digits until 2286).
_RID = "resp_" + "@" * 24
_MID = "msg_" + "~" * 24
_CREATED_S = 9_876_543_210
_CREATED_JSON = f'"created_at":{_CREATED_S}'
_DAY_US = 86_400_000_000
_NO_USER = object()  # the owner's slot in a shape's rollup keys
_NO_PROJECT = object()  # the project's slot
_TEMPLATE_TIME = "1970-01-01 00:00:00"  # (a shape's time columns: each stream has its own)
_TIMES = ("created_at", "started_at", "finished_at", "heartbeat_at")


def _pool_size(n):
    return n if n <= MIN_SHAPES else max(MIN_SHAPES, n // SHAPE_EVERY)


class _Shape:
    """One made stream as rows for the template tables: the Stream row's values in column
    order (JSON dumped once), its events and findings, and what it adds to each rollup table
    with the hour, the day and the owner left open."""

    __slots__ = ("row", "events", "findings", "aggregates")

    def __init__(self, fields, rows, violations, columns, tables):
        row = []
        for f in columns:
            if f.attname in fields:
                v = fields[f.attname]
            elif f.name in fields:
                v = fields[f.name]
            else:
                v = f.get_default()
            if isinstance(v, dict | list):
                v = json.dumps(v)
            elif f.attname in _TIMES:
                v = _TEMPLATE_TIME
            row.append(v)
        self.row = row
        self.events = []
        for index, (t_us, type_, seq, oi, ci, is_json, data) in enumerate(rows):
            kind = (_MID in data) | (_RID in data or _CREATED_JSON in data) << 1
            self.events.append((index, t_us, type_, seq, oi, ci, is_json, data, kind))
        self.findings = [
            (f["code"], f["severity"], f["event_index"], f["expected"], f["got"], f["detail"],
             json.dumps(f["said"]))
            for f in (v.as_dict() for v in violations)
        ]  # fmt: skip
        if any(_RID in str(f) or _MID in str(f) for f in self.findings):
            raise AssertionError("a finding names an id: it would need patching")  # (none does)
        # The rollup rows this stream adds, from aggregates' own add_stream, with its hour, day,
        # project and owner as placeholders: (table's rows, key before the project, key
        # between the project and t, key between t and the owner or None when the key has no
        # owner, the rest, which of aggregates.SPANS, values).
        row_ = {c: fields.get(c, _DEFAULTS.get(c)) for c in aggregates.COLUMNS}
        row_.update(created_at=_EPOCH, user_id=_NO_USER, project_id=_NO_PROJECT)
        found = collections.Counter((v.code, v.severity) for v in violations)
        contrib = aggregates.Contributions()
        contrib.add_stream(row_, [(code, sev, n) for (code, sev), n in found.items()])
        out = []
        for model, keys in contrib.tables.items():
            rows_, t_at, span_at, user_at, project_at = tables[model]
            for key, values in keys.items():
                assert key[t_at] == 0 and project_at < t_at
                period = aggregates.SPANS.index(key[span_at])
                if user_at is not None and key[user_at] is _NO_USER:
                    between, rest = key[t_at + 1 : user_at], key[user_at + 1 :]
                else:
                    between, rest = None, key[t_at + 1 :]
                if key[project_at] is _NO_PROJECT:
                    pre, mid = key[:project_at], key[project_at + 1 : t_at]
                else:  # (a row of every project: its key is fixed up to t; mid None)
                    pre, mid = key[:t_at], None
                out.append((rows_, pre, mid, between, rest, period, values))
        self.aggregates = out


def _make_pool(rng, n, n_late, events_per_stream, columns, tables):
    """`n` shapes made as of before the regression; the last `n_late` of them also serve the
    streams after its start, and those on the regressed model get a twin made as of then from
    the same random draws (only its latency differs). Returns the shapes, twins at the end,
    and {shape: its twin}."""
    before = _REGRESSION_START - dt.timedelta(seconds=1)
    after = _REGRESSION_START + dt.timedelta(seconds=1)
    shapes, twins, twin_of = [], [], {}
    for i in range(n):
        state = rng.getstate() if i >= n - n_late else None
        fields, rows, violations = make_stream(rng, before, None, events_per_stream,
                                               ids=(_RID, _MID), created_s=_CREATED_S)  # fmt: skip
        shapes.append(_Shape(fields, rows, violations, columns, tables))
        if state is not None and fields["resolved_model"] == REGRESSED_MODEL:
            end = rng.getstate()
            rng.setstate(state)
            made = make_stream(rng, after, None, events_per_stream, ids=(_RID, _MID),
                               created_s=_CREATED_S)  # fmt: skip
            rng.setstate(end)
            twin_of[i] = n + len(twins)
            twins.append(_Shape(*made, columns, tables))
    return shapes + twins, twin_of


def _stream_columns():
    """The stream row's columns that the database has: a history seeded into an older schema
    (the migration tests seed before they migrate) leaves out the columns added since."""
    with connection.cursor() as cursor:
        present = {
            c.name
            for c in connection.introspection.get_table_description(cursor, Stream._meta.db_table)
        }
    return [f for f in Stream._meta.concrete_fields if not f.primary_key and f.column in present]


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_value(v):
    if v is None:
        return "\\N"
    if v is True or v is False:
        return "t" if v else "f"
    if isinstance(v, str):
        return v.translate(_COPY_ESCAPES)
    return str(v)  # (int; a float's str is its shortest exact repr)


def _copy_text(flat, width):
    """Rows given as one flat list of values as COPY's text format (PostgreSQL), made by the
    producer: the writer thread then sends one string. Its per-row `write_row` under the GIL
    the producer holds cost many times what it does on an idle process (docs/performance.md,
    "seed_demo").
    One %-format of all the values (str(); booleans as True/False, which PostgreSQL reads),
    unless a value needs escaping: then value by value."""
    rows = len(flat) // width
    nulls = flat.count(None)
    values = ["\\N" if v is None else v for v in flat] if nulls else flat
    text = (("\t".join(["%s"] * width) + "\n") * rows) % tuple(values)
    if (
        text.count("\t") == rows * (width - 1)
        and text.count("\n") == rows
        and text.count("\\") == nulls
        and "\r" not in text
    ):
        return text
    values = list(map(_copy_value, flat))  # a tab, newline or backslash in a value
    return "".join("\t".join(values[lo : lo + width]) + "\n" for lo in range(0, len(values), width))


def _insert(table, columns, flat):
    """Rows given as one flat list of values: multi-row INSERTs straight to sqlite3, COPY on
    PostgreSQL (the ORM's per-value preparation was a third of the command's time), where
    `flat` may also be their `_copy_text` already."""
    qn = connection.ops.quote_name
    width = len(columns)
    cols = ", ".join(qn(c) for c in columns)
    table = qn(table)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            with cursor.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                if isinstance(flat, str):
                    copy.write(flat)
                    return
                for lo in range(0, len(flat), width):
                    copy.write_row(flat[lo : lo + width])
        return
    per = max(1, 30000 // width) * width
    connection.ensure_connection()
    raw = connection.connection
    marks = "(" + ", ".join(["?"] * width) + ")"
    for lo in range(0, len(flat), per):
        chunk = flat[lo : lo + per]
        raw.execute(
            f"INSERT INTO {table} ({cols}) VALUES " + ", ".join([marks] * (len(chunk) // width)),
            chunk,
        )


CHUNK_COLUMNS = ("pk", "shape", "c_us", "user_id", "project_id", "rid", "mid")


class _Templates:
    """The shapes in temporary tables of the seeding connection, and the INSERT … SELECTs that
    stamp out a chunk of streams from them inside the database: a stream costs Python six
    values (its number, shape, start, owner and ids) instead of its ~200 row values, and the
    database writes each event's receipt time and ids itself."""

    STREAMS = "seed_demo_stream"  # the chunk: CHUNK_COLUMNS
    SHAPE_STREAM = "seed_demo_shape_stream"
    SHAPE_EVENT = "seed_demo_shape_event"
    SHAPE_FINDING = "seed_demo_shape_finding"
    SHAPE_EVENT_COLUMNS = ("shape", "idx", "t_us", "type", "seq", "oi", "ci", "is_json", "data",
                     "kind")  # fmt: skip
    FINDING_COLUMNS = ("shape", "n", "code", "severity", "event_index", "expected", "got",
                       "detail", "said")  # fmt: skip

    def __init__(self, shapes, columns):
        self.pg = connection.vendor == "postgresql"
        names = [f.column for f in columns]
        self._drop()
        self._create_tables()
        patched = self._load(shapes, names)
        types = {f.column: f.db_type(connection) for f in columns}
        self.sql = self._stamp_sql(names, types, patched)

    def _create_tables(self):
        """The chunk's table and the empty template tables (the stream template as the stream
        table)."""
        stream = connection.ops.quote_name(Stream._meta.db_table)
        big, text, boolean = ("bigint", "text", "boolean") if self.pg else ("", "", "")
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TEMPORARY TABLE {self.STREAMS} (pk {big} PRIMARY KEY, shape {big}, "
                f"c_us {big}, user_id {big}, project_id {big}, rid {text}, mid {text})"
            )
            if self.pg:
                cursor.execute(f"CREATE TEMPORARY TABLE {self.SHAPE_STREAM} (LIKE {stream})")
            else:
                cursor.execute(
                    f"CREATE TEMPORARY TABLE {self.SHAPE_STREAM} AS SELECT * FROM {stream} WHERE 0"
                )
            cursor.execute(
                f"CREATE UNIQUE INDEX {self.SHAPE_STREAM}_id ON {self.SHAPE_STREAM} (id)"
            )
            cursor.execute(
                f"CREATE TEMPORARY TABLE {self.SHAPE_EVENT} (shape {big}, idx {big}, t_us {big}, "
                f"type {text}, seq {big}, oi {big}, ci {big}, is_json {boolean}, data {text}, "
                f"kind {big}, PRIMARY KEY (shape, idx))"
            )
            cursor.execute(
                f"CREATE TEMPORARY TABLE {self.SHAPE_FINDING} (shape {big}, n {big}, "
                f"code {text}, severity {text}, event_index {big}, expected {text}, got {text}, "
                f"detail {text}, said {text}, PRIMARY KEY (shape, n))"
            )

    def _load(self, shapes, names):
        """The shapes into the template tables (shape number s as the stream template's id);
        returns the stream columns (`names`) where some shape holds an id placeholder."""
        rows, events, findings = [], [], []
        patched = set()
        for s, shape in enumerate(shapes):
            rows.append(s)
            rows.extend(shape.row)
            patched.update(
                name
                for name, v in zip(names, shape.row, strict=True)
                if isinstance(v, str) and (_RID in v or _MID in v)
            )  # (upstream_id, parts)
            for e in shape.events:
                events.append(s)
                events.extend(e)
            for n, f in enumerate(shape.findings):
                findings.extend((s, n, *f))
        _insert(self.SHAPE_STREAM, ["id", *names], rows)
        _insert(self.SHAPE_EVENT, self.SHAPE_EVENT_COLUMNS, events)
        _insert(self.SHAPE_FINDING, self.FINDING_COLUMNS, findings)
        if self.pg:  # (their statistics: no autovacuum for temporary tables)
            with connection.cursor() as cursor:
                for table in (self.SHAPE_STREAM, self.SHAPE_EVENT, self.SHAPE_FINDING):
                    cursor.execute(f"ANALYZE {table}")
        return patched

    def _stamp_sql(self, names, types, patched):
        """The INSERT … SELECTs of `stamp`: the chunk's streams (`names`: their columns, `types`
        their database types, `patched` those whose id placeholders are replaced), their events
        (receipt time and ids made by the database) and their findings."""
        qn = connection.ops.quote_name
        stream, event, finding = (qn(m._meta.db_table) for m in (Stream, Event, Finding))
        ts = self._timestamp
        exprs = [self._stream_expr(name, types, patched) for name in names]
        event_columns, event_values = event_row.sql_row(
            stream_id="s.pk",
            index="e.idx",
            t_us="e.t_us",
            received_at=ts("s.c_us + e.t_us"),
            event_name="'message'",
            sse_id="''",
            type="e.type",
            sequence_number="e.seq",
            output_index="e.oi",
            content_index="e.ci",
            is_json="e.is_json",
            data="CASE e.kind WHEN 0 THEN e.data "
            f"WHEN 1 THEN replace(e.data, '{_MID}', s.mid) "
            f"ELSE replace(replace(replace(e.data, '{_MID}', s.mid), '{_RID}', s.rid), "
            f"'{_CREATED_JSON}', '\"created_at\":' || (s.c_us / 1000000)) END",
            preamble="''",
        )
        return [
            f"INSERT INTO {stream} (id, {', '.join(qn(n) for n in names)}) "
            f"SELECT s.pk, {', '.join(exprs)} FROM {self.STREAMS} s "
            f"JOIN {self.SHAPE_STREAM} t ON t.id = s.shape ORDER BY s.pk",
            f"INSERT INTO {event} ({', '.join(qn(c) for c in event_columns)}) "
            f"SELECT {', '.join(event_values)} "
            f"FROM {self.STREAMS} s JOIN {self.SHAPE_EVENT} e ON e.shape = s.shape "
            "ORDER BY s.pk, e.idx",
            f"INSERT INTO {finding} (stream_id, code, severity, event_index, expected, got, "
            "detail, said) SELECT s.pk, f.code, f.severity, f.event_index, f.expected, f.got, "
            f"f.detail, f.said{'::jsonb' if self.pg else ''} FROM {self.STREAMS} s "
            f"JOIN {self.SHAPE_FINDING} f ON f.shape = s.shape ORDER BY s.pk, f.n",
        ]

    def _stream_expr(self, name, types, patched):
        """The SQL of stream column `name` from the chunk's row `s` and its template `t`."""
        ts = self._timestamp
        if name == "user_id":
            return "s.user_id"
        if name == "project_id":  # (0: none)
            return "NULLIF(s.project_id, 0)"
        if name in ("created_at", "started_at"):
            return ts("s.c_us")
        if name in ("finished_at", "heartbeat_at"):
            return ts("s.c_us + t.closed_us")
        column = f"t.{connection.ops.quote_name(name)}"
        if name not in patched:
            return column
        if self.pg:  # (parts is jsonb there: replaced in its text)
            column = f"CAST({column} AS text)"
        value = f"replace(replace({column}, '{_RID}', s.rid), '{_MID}', s.mid)"
        return f"CAST({value} AS {types[name]})" if self.pg else value

    def _timestamp(self, us):
        """The text (SQLite: naive UTC, as Django stores it) or timestamptz of µs since the
        epoch."""
        if self.pg:
            return f"(timestamptz 'epoch' + ({us}) * interval '1 microsecond')"
        return (
            f"(strftime('%Y-%m-%d %H:%M:%S', ({us}) / 1000000, 'unixepoch') "
            f"|| CASE WHEN ({us}) % 1000000 THEN printf('.%06d', ({us}) % 1000000) ELSE '' END)"
        )

    def stamp(self, values):
        """Insert the streams given as flat (pk, shape, c_us, user_id, project_id, rid, mid)
        values, with their events and findings."""
        _insert(self.STREAMS, CHUNK_COLUMNS, values)
        with connection.cursor() as cursor:
            for sql in self.sql:
                cursor.execute(sql)
            # (PostgreSQL: a DELETE would leave the dead rows of every chunk before in the
            # table and its index, to be read again by each join: no autovacuum for them)
            cursor.execute(f"{'TRUNCATE' if self.pg else 'DELETE FROM'} {self.STREAMS}")

    def _drop(self):
        with connection.cursor() as cursor:
            for table in (self.STREAMS, self.SHAPE_STREAM, self.SHAPE_EVENT, self.SHAPE_FINDING):
                cursor.execute(f"DROP TABLE IF EXISTS {table}")

    def close(self):
        self._drop()


def _rollup_rows(contrib, as_text):
    """A day's complete rollup rows as [(table, columns, flat values or their COPY text)], for
    `_insert_rollups` (made by the producer: see `_copy_text`)."""
    out = []
    for model, (key, values) in aggregates.rollup_tables().items():
        rows = contrib.tables.get(model)
        if rows:
            flat = []
            for k, v in rows.items():
                flat += k
                flat += v
            columns = key + values
            out.append((model._meta.db_table, columns,
                        _copy_text(flat, len(columns)) if as_text else flat))  # fmt: skip
    return out


def _insert_rollups(rows):
    """Complete rollup rows (`_rollup_rows`) into tables that hold none of their keys: plain
    INSERTs, what aggregates.apply's upsert does to absent rows, without its ON CONFLICT and
    parameter rewriting (faster: docs/performance.md, "seed_demo")."""
    for table, columns, flat in rows:
        _insert(table, columns, flat)


class _Writer:
    """Writes the chunks: a chunk's streams, events and findings, and a day's rollup rows when
    it ends one, in one transaction. Into empty tables outside a transaction (a command's
    bulk load) on a thread of its own, with its own connection: the INSERT … SELECTs and the
    commits run in the database's C code without the GIL, so on two cores the writing
    overlaps the making of the next chunk (docs/performance.md, "seed_demo"). Otherwise (the
    caller's transaction: tests) inline, on the caller's connection."""

    def __init__(self, shapes, columns, threaded, fresh_rollups):
        self.error = None
        self.queue = None
        self.fresh_rollups = fresh_rollups
        self.rollups = None
        if not threaded:
            self.templates = _Templates(shapes, columns)
            return
        if fresh_rollups and connection.vendor == "postgresql":
            self.rollups = _RollupWriter()
        self.queue = queue.Queue(maxsize=2)
        self.thread = threading.Thread(
            target=self._run, args=(shapes, columns), name="seed_demo writer", daemon=True
        )
        self.thread.start()

    def _write(self, templates, values, rollups):
        """`rollups`: a day's `_rollup_rows` into fresh tables, else its Contributions."""
        if rollups is not None and self.rollups is not None:
            self.rollups.put(rollups)
            rollups = None
        with transaction.atomic():
            templates.stamp(values)
            if rollups is not None:
                (_insert_rollups if self.fresh_rollups else aggregates.apply)(rollups)

    def _run(self, shapes, columns):
        try:
            with connection.cursor() as cursor:
                if connection.vendor == "sqlite":
                    # As _bulk_load, for this connection; and no foreign key lookup per event
                    # row (a tenth of its insert): every row's stream is inserted just before it.
                    cursor.execute("PRAGMA synchronous = OFF")
                    cursor.execute("PRAGMA foreign_keys = OFF")
                elif connection.vendor == "postgresql":
                    # This connection only. No JIT: the event INSERT … SELECT is estimated at
                    # millions of rows and compiled each chunk (most of the chunk's time:
                    # docs/performance.md, "seed_demo").
                    # Temporary buffers (before the first temporary table) that hold the
                    # templates: with the default 8 MB they were read back from files.
                    # And no wait for the WAL flush at each chunk's commit (a demo history:
                    # a crash loses the last chunks, never consistency).
                    cursor.execute("SET jit = off")
                    cursor.execute("SET temp_buffers = '256MB'")
                    cursor.execute("SET synchronous_commit = off")
            templates = _Templates(shapes, columns)
            try:
                while (item := self.queue.get()) is not None:
                    self._write(templates, *item)
            finally:
                templates.close()
        except BaseException as exc:  # handed to the producer, which stops at its next put
            self.error = exc
            while self.queue.get() is not None:
                pass
        finally:
            connection.close()

    def put(self, values, contrib):
        if self.queue is None:
            self._write(self.templates, values, contrib)
            return
        if self.error is not None:
            raise self.error
        self.queue.put((values, contrib))

    def close(self):
        if self.queue is None:
            self.templates.close()
            return
        self.queue.put(None)
        self.thread.join()
        if self.rollups is not None:
            self.rollups.close()
        if self.error is not None:
            raise self.error


class _RollupWriter:
    """PostgreSQL's fresh rollup rows on a connection of their own, while the chunk writer
    stamps streams: their primary keys (11 columns for the histogram) make them costly in the
    server (docs/performance.md, "seed_demo"), and that time no longer waits for the
    chunks (nor they for it). Each day in a transaction of its own (a bulk load: a crash
    leaves a partial demo database either way). Not on SQLite, which has one writer at a
    time."""

    def __init__(self):
        self.error = None
        self.queue = queue.Queue(maxsize=4)
        self.thread = threading.Thread(target=self._run, name="seed_demo rollups", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit = off")  # (as the chunk writer's)
            while (rows := self.queue.get()) is not None:
                with transaction.atomic():
                    _insert_rollups(rows)
        except BaseException as exc:  # handed to the chunk writer, which stops at its next put
            self.error = exc
            while self.queue.get() is not None:
                pass
        finally:
            connection.close()

    def put(self, rows):
        if self.error is not None:
            raise self.error
        self.queue.put(rows)

    def close(self):
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


_TABLES = (Stream, Event, Finding)


@contextlib.contextmanager
def _bulk_load():
    """Into empty tables, outside a transaction: the secondary indexes of the stream, event and
    finding tables are dropped and built again at the end from their stored definitions (once,
    sorted, instead of a random insert into a dozen B-trees per row), so are PostgreSQL's
    foreign keys of those tables, and SQLite does not sync to disk. Unsafe for the product's
    data, acceptable for a demo history: a crash leaves a partial demo database to delete,
    never a damaged recording (an exception or Ctrl-C still builds the indexes again; only a
    kill -9 leaves them missing)."""
    if connection.in_atomic_block or any(m.objects.exists() for m in _TABLES):
        yield False
        return
    tables = [m._meta.db_table for m in _TABLES]
    synchronous = None
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        indexes = _secondary_indexes(cursor, tables)
        # (SQLite: the writer's connection skips the checks)
        foreign_keys = _foreign_keys(cursor, tables)
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA synchronous")
            synchronous = cursor.fetchone()[0]
            cursor.execute("PRAGMA synchronous = OFF")
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX {qn(name)}")
        for table, name, _ in foreign_keys:
            cursor.execute(f"ALTER TABLE {qn(table)} DROP CONSTRAINT {qn(name)}")
    try:
        yield True
    finally:
        _rebuild(indexes, foreign_keys, synchronous)


def _secondary_indexes(cursor, tables):
    """[(name, definition)] of the secondary indexes of `tables`, in name order. On PostgreSQL
    not the indexes behind a primary key or a unique constraint, nor the partial ones: small,
    and PostgreSQL would spell their condition differently afterwards."""
    if connection.vendor == "sqlite":
        marks = ", ".join(["%s"] * len(tables))
        cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            f"AND tbl_name IN ({marks}) ORDER BY name",
            tables,
        )
        return cursor.fetchall()
    if connection.vendor == "postgresql":
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = ANY(%s) AND indexname NOT IN (SELECT conname FROM pg_constraint) "
            "AND indexdef NOT LIKE '%% WHERE %%' ORDER BY indexname",
            [tables],
        )
        return cursor.fetchall()
    return []


def _foreign_keys(cursor, tables):
    """[(table, name, definition)] of PostgreSQL's foreign keys of `tables`, in name order:
    a trigger per inserted row (most of the time of an event row), checked again by one join
    each when they are added back. None elsewhere."""
    if connection.vendor != "postgresql":
        return []
    cursor.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s) "
        "ORDER BY conname",
        [tables],
    )
    return cursor.fetchall()


def _rebuild(indexes, foreign_keys, synchronous):
    """The end of `_bulk_load`: its dropped indexes and foreign keys built again, and SQLite's
    `synchronous` setting back."""
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # (and work_mem: the join that checks each foreign key added back)
            cursor.execute("SET maintenance_work_mem = '256MB'")
            cursor.execute("SET work_mem = '256MB'")
        for _, sql in indexes:
            cursor.execute(sql)
        for table, name, definition in foreign_keys:
            cursor.execute(f"ALTER TABLE {qn(table)} ADD CONSTRAINT {qn(name)} {definition}")
        if connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA synchronous = {int(synchronous)}")
        elif connection.vendor == "postgresql":
            cursor.execute("RESET maintenance_work_mem")
            cursor.execute("RESET work_mem")


def demo_users(names):
    User = get_user_model()
    ids = []
    for name in names:
        user, created = User.objects.get_or_create(username=name)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        Project.personal(user)  # (their streams' project: `_stream_expr`)
        ids.append(user.pk)
    return ids


def seed(streams, days=30, seed=0, events_per_stream=20, users=("alice", "bob", "carol"),
         now=None, progress=None, projects=0):  # fmt: skip
    """Insert `streams` streams (with events and findings); returns counts. `projects` > 0:
    spread over that many team projects (`demo_projects`), else in their owners' personal
    projects."""
    global _REGRESSION_START
    rng = random.Random(seed)
    now = now or dt.datetime.now(dt.UTC)
    _REGRESSION_START = now - dt.timedelta(days=REGRESSION_DAYS)
    owners, owner_weights = _owners(demo_users(users), projects)
    one_us = dt.timedelta(microseconds=1)
    times = _times_us(rng, streams, days, (now - _EPOCH) // one_us)
    # the first stream that regresses
    split = bisect.bisect_right(times, (_REGRESSION_START - _EPOCH) // one_us)

    columns = _stream_columns()
    # {table: (its rows being summed, where t, span, the owner and the project are in its key;
    # None: not in it, as the owner is not in the project rollup's)}
    tables = {
        model: (
            {},
            *(key.index(c) if c in key else None for c in ("t", "span", "user_key", "project_key")),
        )
        for model, (key, _values) in aggregates.rollup_tables().items()
    }
    shapes, assignment = _assign_shapes(rng, streams, split, events_per_stream, columns, tables)
    owner_of = rng.choices(range(len(owners)), owner_weights, k=streams)
    history = _History(shapes, tables, times, assignment, owners, owner_of, rng.getrandbits)
    with _bulk_load() as bulk:
        counts = _write_history(history, columns, bulk, progress)
    _reset_sequences()
    return counts


def demo_projects(n, user_ids):
    """`n` team projects ("demo-1" …), each with two of the users as members (project i: users
    i and i+1, by their order), the first an admin, the second a member: [(project id,
    [member ids])]. Made if missing."""
    out = []
    for i in range(n):
        project, _ = Project.objects.get_or_create(
            slug=f"demo-{i + 1}", defaults={"name": f"Demo {i + 1}"}
        )
        members = list(dict.fromkeys(user_ids[(i + j) % len(user_ids)] for j in range(2)))
        for j, uid in enumerate(members):
            role = Membership.Role.ADMIN if j == 0 else Membership.Role.MEMBER
            Membership.objects.get_or_create(project=project, user_id=uid, defaults={"role": role})
        out.append((project.pk, members))
    return out


def _owners(user_ids, projects=0):
    """The (user, project) pairs a stream may have and their weights. In personal projects:
    the first user is the busiest; a few streams have no user (recorded from the CLI) nor
    project. Over `projects` team projects: each project as busy as the others, its streams
    its members' (the first busier) and a few a project token's, of no user."""
    if not projects:
        weights = [1 / (i + 1) for i in range(len(user_ids))]
        total = sum(weights) / 0.95
        personal = dict(
            Project.objects.filter(personal_of_id__in=user_ids).values_list("personal_of_id", "pk")
        )
        owners = [*((u, personal[u]) for u in user_ids), (None, 0)]
        return owners, [w / total for w in weights] + [1 - sum(weights) / total]
    owners, weights = [], []
    for project, members in demo_projects(projects, user_ids):
        owners += [*((u, project) for u in members), (None, project)]
        weights += [0.6, 0.35, 0.05] if len(members) == 2 else [0.95, 0.05]
    return owners, weights


def _assign_shapes(rng, streams, split, events_per_stream, columns, tables):
    """The pool of shapes (`_make_pool`) and the shape of each of the `streams` streams, the
    first `split` of them before the regression's start. Each shape serves about as many
    streams as the others (a shuffled cycle); the streams after the regression's start, whose
    gpt-oss-120b is slower, cycle over the last shapes of the pool (their twins on that model),
    one per SHAPE_EVERY of them too."""
    size = _pool_size(streams)
    late = streams - split
    size_late = min(size, _pool_size(late))
    shapes, twin_of = _make_pool(rng, size, size_late, events_per_stream, columns, tables)
    assignment = [i % size for i in range(split)]
    rng.shuffle(assignment)
    cycle = [size - size_late + i % size_late for i in range(late)]
    rng.shuffle(cycle)
    assignment += [twin_of.get(s, s) for s in cycle]
    return shapes, assignment


def _rollup_entries(shapes):
    """What each shape adds to the rollups, by *entry*: one (table, key but its period's start
    and owner, span) that shapes add to. Returns the entries, as (table's rows, key before t,
    key between t and the owner or None, the rest), and per shape its plan: [(entry, which of
    aggregates.SPANS, whether the key has an owner, values)]. A day's sums are kept by (entry,
    period start, owner), a 3-tuple instead of a rollup key's ~11 values built per stream (27 a
    stream: most of the producer's time), and expanded into rollup keys when the day ends. The
    sums are integers, so adding them up in another order is exact."""
    entry_of, entries, plans = {}, [], []
    for shape in shapes:
        plan = []
        for rows, pre, mid, between, rest, period, add_ in shape.aggregates:
            if not all(isinstance(v, int) for v in add_):
                raise AssertionError("a rollup value that is not an integer")  # (none is)
            entry = entry_of.setdefault((id(rows), pre, mid, between, rest, period), len(entries))
            if entry == len(entries):
                entries.append((rows, pre, mid, between, rest))
            plan.append((entry, period, between is not None, mid is not None, add_))
        plans.append(plan)
    return entries, plans


def _next_stream_pk():
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX({qn('id')}), 0) FROM {qn(Stream._meta.db_table)}")
        return cursor.fetchone()[0] + 1


class _History:
    """The streams to insert, in time order: each one's creation time (µs since the epoch,
    `times`), shape and owner, ids from the first free stream id on; and the rollup sums of the
    day being made (`_rollup_entries`), with `tables` ({table: (its rows being summed, where
    t, span and the owner are in its key)}) to expand them into."""

    def __init__(self, shapes, tables, times, assignment, owners, owner_of, getrandbits):
        self.shapes = shapes
        self.owners = owners
        self.tables = tables
        self.times = times
        self.assignment = assignment
        self.owner_of = owner_of
        self.getrandbits = getrandbits
        self.entries, self.plans = _rollup_entries(shapes)
        self.sums = {}
        self.next_pk = _next_stream_pk()

    def __len__(self):
        return len(self.times)

    def chunk_end(self, lo):
        """Where the chunk from `lo` ends: after CHUNK streams or at the end of its UTC day.
        The streams are in time order, so every rollup row of the days before is complete
        (periods of up to a day), and goes in once."""
        times = self.times
        day = times[lo] // _DAY_US
        return min(len(times), lo + CHUNK, bisect.bisect_left(times, (day + 1) * _DAY_US, lo))

    def ends_day(self, lo, hi):
        """Whether the chunk lo..hi is the last of its day."""
        times = self.times
        return hi == len(times) or times[hi] // _DAY_US != times[lo] // _DAY_US

    def chunk(self, lo, hi):
        """Streams lo..hi as flat (pk, shape, c_us, user_id, project_id, rid, mid) values, with
        how many events and findings they have; what they add to the rollups goes into the
        day's sums."""
        shapes, plans, sums = self.shapes, self.plans, self.sums
        times, assignment, owner_of = self.times, self.assignment, self.owner_of
        owners = self.owners
        getrandbits, next_pk = self.getrandbits, self.next_pk
        add = operator.add
        spans = aggregates.SPANS
        values = []
        n_events = n_findings = 0
        for i in range(lo, hi):
            s = assignment[i]
            shape = shapes[s]
            c_us = times[i]
            user, project = owners[owner_of[i]]
            values += (next_pk + i, s, c_us, user, project, f"resp_{getrandbits(96):024x}",
                       f"msg_{getrandbits(96):024x}")  # fmt: skip
            n_events += len(shape.events)
            n_findings += len(shape.findings)
            c_s = c_us // 1_000_000
            periods = [c_s // span * span for span in spans]
            owner = user or 0
            for entry, period, owned, projected, add_ in plans[s]:
                key = (entry, periods[period], owner if owned else 0, project if projected else 0)
                have = sums.get(key)
                if have is None:
                    sums[key] = add_.copy()
                elif len(add_) == 1:
                    have[0] += add_[0]
                else:
                    have[:] = map(add, have, add_)
        return values, n_events, n_findings

    def day_rollups(self):
        """The day's sums expanded into rollup keys, as Contributions; the sums start over."""
        add = operator.add
        entries = self.entries
        for (entry, t, owner, project), add_ in self.sums.items():
            rows, pre, mid, between, rest = entries[entry]
            if mid is not None:
                pre = pre + (project,) + mid
            if between is None:
                key = pre + (t,) + rest
            else:
                key = pre + (t,) + between + (owner,) + rest
            have = rows.get(key)
            if have is None:
                rows[key] = add_
            else:
                have[:] = map(add, have, add_)
        self.sums.clear()
        contrib = aggregates.Contributions()
        for model, (rows, *_) in self.tables.items():
            contrib.tables[model] = rows.copy()
            rows.clear()
        return contrib


def _write_history(history, columns, bulk, progress):
    """Every stream of `history`, chunk by chunk, through a `_Writer` (its own thread when
    `bulk`, see `_bulk_load`); each day's rollups with the chunk that ends it. Returns counts."""
    pg = connection.vendor == "postgresql"
    counts = {"streams": 0, "events": 0, "findings": 0}
    # each rollup row is written once (chunks end at a day) into empty tables: inserted
    fresh = (
        bulk
        and max(aggregates.SPANS) <= aggregates.DAY
        and not any(model.objects.exists() for model in aggregates.rollup_tables())
    )
    writer = _Writer(history.shapes, columns, threaded=bulk, fresh_rollups=fresh)
    try:
        # The writer threads wait for the GIL after each round trip to the database, up to a
        # switch interval while this thread makes the next chunk: 0.5 ms, not 5.
        with _switch_interval(0.0005 if bulk else None):
            lo = 0
            while lo < len(history):
                hi = history.chunk_end(lo)
                values, n_events, n_findings = history.chunk(lo, hi)
                contrib = None
                if history.ends_day(lo, hi):
                    contrib = history.day_rollups()
                    if fresh:
                        contrib = _rollup_rows(contrib, as_text=pg)
                if pg:
                    values = _copy_text(values, len(CHUNK_COLUMNS))
                writer.put(values, contrib)
                counts["streams"] += hi - lo
                counts["events"] += n_events
                counts["findings"] += n_findings
                lo = hi
                if progress:
                    progress(counts)
    finally:
        writer.close()
    return counts


@contextlib.contextmanager
def _switch_interval(seconds):
    """The interpreter's thread switch interval set to `seconds` (None: left as it is) for the
    block, and back to what it was after it."""
    switch = sys.getswitchinterval()
    if seconds is not None:
        sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(switch)


def _reset_sequences():
    """The streams were inserted with their ids: PostgreSQL's sequence must continue after
    them, or the next row created the usual way collides with a seeded one."""
    if connection.vendor != "postgresql":
        return
    from django.core.management.color import no_style

    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), [Stream, Event, Finding]):
            cursor.execute(sql)


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
        parser.add_argument(
            "--packed-events",
            type=int,
            default=0,
            help="then replace the events by this many packed ones, simulator streams of "
            "realistic lengths (streams/bench/packed_history.py: for benchmarks only)",
        )
        parser.add_argument(
            "--projects",
            type=int,
            default=0,
            help="spread the streams over this many team projects (demo-1 …, two users each); "
            "0: each owner's personal project",
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
            projects=opts["projects"],
        )
        if opts["packed_events"] > 0:
            from streams.bench import packed_history

            packed = packed_history.fill(opts["packed_events"], make_stream, seed=opts["seed"])
            self.stdout.write(
                f"packed: {packed['events']:,} events of {packed['streams']:,} streams in "
                f"{packed['blocks']:,} blocks, {packed['payload_bytes']:,} payload bytes "
                f"({packed['payload_bytes'] / max(1, packed['events']):.1f} B/event) after "
                f"{time.perf_counter() - t0:.1f} s"
            )
        elapsed = time.perf_counter() - t0
        self.stdout.write(
            f"{counts['streams']:,} streams, {counts['events']:,} events, "
            f"{counts['findings']:,} findings in {elapsed:.1f} s "
            f"({counts['streams'] / elapsed:,.0f} streams/s, "
            f"{counts['events'] / elapsed:,.0f} events/s)"
        )
