"""Scenarios of the upstream simulator: pure functions that turn a request into a *plan*.

A plan is everything the HTTP layer needs to answer one ``POST /v1/responses``: the status line,
the headers, an optional delay before the headers, and a list of :class:`Write` s — each the exact
bytes handed to the socket in one ``write()`` (one HTTP chunk), the model-time at which it is due
and the events it completes. Nothing here does I/O or reads a clock (except ``created_at``, which
the caller passes in); the same request and seed always give the same plan.

Scenarios (choose with ``metadata.scenario`` or the ``X-Simulator-Scenario`` header):

====================  ==============================================================================
scenario              what the stream does
====================  ==============================================================================
normal                one assistant message streamed token by token; each docs/protocol.md guarantee
tools                 one function call (arguments streamed, ``output`` + ``status: completed`` in
                      ``output_item.done``), then a text answer; ``response.completed`` lists
                      ``tool_calls``
parallel_tools        3 function calls whose events interleave (``output_index`` disambiguates);
                      the second one ends ``status: failed``; then a text answer
multi_part            2 message items; the first has 2 content parts, the second 1
rewrite               deltas spell a draft with typos; ``response.rewrite.in_progress`` follows, and
                      ``output_text.done`` / ``response.completed`` carry the corrected text
final_text            terminal is ``{"type":"response.completed","sequence_number":N,
                      "final_text":"..."}`` with no ``response`` object (streaming-page shape)
gap                   exactly one ``sequence_number`` is skipped (before a delta mid-stream)
duplicate             exactly one delta event is sent twice, same data and ``sequence_number``
reorder               two adjacent delta events are swapped on the wire
missing_terminal      the HTTP body ends cleanly (final chunk) without a terminal event
error                 after some deltas, an ``error`` terminal *with* ``sequence_number``
error_no_seq          after some deltas, an ``error`` terminal *without* ``sequence_number``
http_429              429 with a JSON error body and ``Retry-After`` (``metadata.retry_after``, 2)
http_500              500 with a JSON error body
wrong_content_type    200 with ``Content-Type: application/json`` and the final response JSON
malformed_json        one ``data:`` line mid-stream is not valid JSON (it takes no sequence number),
                      then the stream continues normally
stall                 after some deltas, silence for ``metadata.stall_s`` seconds (default 90 s
                      scaled by ``time_scale``, at least 3 s), then the rest; if the client
                      disconnects meanwhile, the server stops
slow_headers          status line and headers only after ``metadata.header_delay_s`` (2) seconds
unknown_event         adds ``response.citation.added`` and ``response.usage.partial`` (numbered)
utf8_split            text with multi-byte characters (é, €, 😀, 日本語); each delta event
                      holding one is written in two socket writes split inside a character's
                      UTF-8 bytes, with a drain and ``metadata.split_pause_s`` (0.02 s) between
huge_delta            one delta of ``metadata.huge_bytes`` (1,000,000) bytes of text
bursty                paced normally but held back and released in bursts of
                      ``metadata.burst_size`` (40) events per write, like a buffering proxy
reset                 after some deltas the connection is aborted with a TCP RST
fast                  ``metadata.events`` (10,000) events in total — created, deltas only, completed
                      — written in batches of ``metadata.batch`` (100) events, no sleeps
xss                   deltas containing ``<img src=x onerror=alert(1)>`` and
                      ``<script>alert(1)</script>`` (each whole in one delta)
comments              SSE comment blocks ``: keep-alive`` and a ``retry: 1000`` block between events
                      (they are not events); otherwise normal. ``metadata.retry_block=false``
                      leaves out the retry block (the openai SDK and httpx-sse dispatch it as
                      an event with empty data; the SDK then fails on ``json.loads("")``)
done_sentinel         a final ``data: [DONE]`` block after ``response.completed``
judge                 answers as an LLM judge: ``Score: N`` on its first line, then ``Reason: …``;
                      N is ``metadata.judge_score``, or ``metadata.judge_label``, or a number from
                      the seed within ``metadata.judge_min``..``judge_max`` (1..5)
judge_nonsense        answers a judge's prompt with prose that holds no score at all
long_strings          values longer than the columns that store them: a 10,000-character model id
                      (``response.model``, the routing ``model_id``), a 1,000-character response
                      id, routing category and source, ``event:`` name and ``id:`` of every
                      event, one event type of 1,000 characters, and a 300-byte Content-Type
                      parameter; otherwise normal
====================  ==============================================================================

Common ``metadata`` parameters (strings are accepted, as the OpenAI API only allows string values):
``scenario``, ``seed`` (any string/int: the same seed and request give the same events),
``time_scale`` (float, default 1.0; 0 = no sleeps) or ``speed`` (= 1 / time_scale),
``sentences`` (length of the reply), ``deterministic_ids`` (true: response id and ``created_at``
derive from the seed too, so same-seed streams are byte-identical; otherwise those two are unique
per response and everything else is identical).

Model pacing (TTFT, token gaps, bursts) is scaled by ``time_scale``, and so is the stall
scenario's default silence (see ``stall_silence_s``); the explicit fault durations (``stall_s``,
``header_delay_s``, ``split_pause_s``) are absolute seconds and are not scaled, so a test can run
at ``time_scale=0`` and still see a 0.5 s stall. ``max_output_tokens`` caps the reply
length. With ``"stream": false`` every scenario except ``http_429``/``http_500`` returns the final
response JSON after the stream's duration; stream-level faults do not apply.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass, field, replace
from typing import Any

from .models import AUTO_MODEL, MODELS, ModelProfile
from .router import RoutingDecision, route


def gettext_noop(text):
    """Django's gettext_noop by name only (the simulator runs without Django): marks the
    scenarios' descriptions for the engine's catalog (streams/locale); the pages translate
    them where they show them, the simulator and the API keep the English."""
    return text


# (a page shows these in its language: marked for the engine's catalog, translated where shown)
SCENARIOS: dict[str, str] = {
    "normal": gettext_noop(
        "One assistant message streamed token by token; all ordering guarantees hold."
    ),
    "tools": gettext_noop("One function call (output + status completed), then a text answer."),
    "parallel_tools": gettext_noop(
        "3 interleaved function calls, the second failed, then a text answer."
    ),
    "multi_part": gettext_noop("2 message items; the first has 2 content parts."),
    "rewrite": gettext_noop(
        "Typo'd deltas, response.rewrite.in_progress, corrected output_text.done."
    ),
    "final_text": gettext_noop(
        "Terminal response.completed with top-level final_text and no response object."
    ),
    "gap": gettext_noop("Exactly one sequence_number skipped mid-stream."),
    "duplicate": gettext_noop("One delta event sent twice with the same sequence_number."),
    "reorder": gettext_noop("Two adjacent delta events swapped on the wire."),
    "missing_terminal": gettext_noop("Body ends cleanly without response.completed or error."),
    "error": gettext_noop("An error terminal with sequence_number after some deltas."),
    "error_no_seq": gettext_noop("An error terminal without sequence_number after some deltas."),
    "http_429": gettext_noop("429 with a JSON error body and Retry-After."),
    "http_500": gettext_noop("500 with a JSON error body."),
    "wrong_content_type": gettext_noop(
        "200 with Content-Type application/json (the final response JSON)."
    ),
    "malformed_json": gettext_noop(
        "One data line that is not valid JSON mid-stream, then the stream continues."
    ),
    "stall": gettext_noop(
        "No events for metadata.stall_s (90 × time_scale) s after some deltas, then the rest."
    ),
    "slow_headers": gettext_noop("Status and headers only after metadata.header_delay_s (2) s."),
    "unknown_event": gettext_noop(
        "Extra response.citation.added and response.usage.partial events."
    ),
    "utf8_split": gettext_noop("Multi-byte characters split across two socket writes."),
    "huge_delta": gettext_noop("One delta of metadata.huge_bytes (1\u202f000\u202f000) bytes."),
    "bursty": gettext_noop(
        "Events held back and released in bursts of metadata.burst_size (40) per write."
    ),
    "reset": gettext_noop("Connection aborted with a TCP RST after some deltas."),
    "fast": gettext_noop(
        "metadata.events (10\u202f000) events as fast as possible: created, deltas, completed."
    ),
    "xss": gettext_noop(
        "Deltas containing <img src=x onerror=alert(1)> and <script>alert(1)</script>."
    ),
    "comments": gettext_noop(
        "SSE comment lines (': keep-alive') and a 'retry: 1000' block between events."
    ),
    "done_sentinel": gettext_noop("A final 'data: [DONE]' after response.completed."),
    "judge": gettext_noop(
        "Answers as an LLM judge: 'Score: N' (metadata.judge_score, or 1 to 5 from the seed), "
        "then a reason."
    ),
    "judge_nonsense": gettext_noop("Answers a judge's prompt with prose holding no score."),
    "long_strings": gettext_noop(
        "A 10\u202f000-character model id; 1\u202f000-character response id, routing category and "
        "source, event names, ids and one type."
    ),
}

docs = (__doc__ or "").split("Scenarios (choose", 1)[-1]
docs = "Scenarios (choose" + docs

DEFAULT_SCENARIO = "normal"
UTF8_SAMPLE = "Café crème kost €3,50 😀 — één ijsje, naïef geïnd; 日本語のテキスト 🇳🇱."
XSS_IMG = "<img src=x onerror=alert(1)>"
XSS_SCRIPT = "<script>alert(1)</script>"
MALFORMED_DATA = '{"type":"response.output_text.delta","delta":"unterminated'
ERROR_CODE = "internal_error"
ERROR_MESSAGE = "Unexpected upstream failure"
REWRITE_FIXES = {"teh": "the", "definately": "definitely", "seperate": "separate", "wich": "which"}
# long_strings: the lengths of its long values (far beyond the columns that store them).
LONG_MODEL_CHARS = 10_000
LONG_FIELD_CHARS = 1_000


class RequestError(Exception):
    """A request the simulator answers with a JSON error instead of a stream."""

    def __init__(self, status: int, code: str, message: str, type_: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type_

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "type": self.type}}


# --------------------------------------------------------------------------- request parsing
# The largest value of each numeric metadata parameter. The simulator may run inside the server
# process and builds a response's plan in memory before sending it (a large `huge_bytes` is
# held whole: docs/performance.md, "Simulator"), and durations hold a connection, and a user's
# stream slot, open.
METADATA_CAPS: dict[str, float] = {
    "events": 200_000,
    "batch": 10_000,
    "burst_size": 10_000,
    "sentences": 1_000,
    "huge_bytes": 4 * 1024 * 1024,
    "stall_s": 600,
    "header_delay_s": 600,
    "split_pause_s": 10,
    "retry_after": 3600,
    "time_scale": 100,
    "judge_score": 1e9,
    "judge_min": 1e9,
    "judge_max": 1e9,
}
# `speed` is 1 / time_scale; 0 (or less) means no sleeps.
MIN_SPEED = 1 / METADATA_CAPS["time_scale"]


def _as_float(value: Any, name: str, default: float) -> float:
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise RequestError(400, "invalid_metadata", f"metadata.{name} must be a number") from None
    if not math.isfinite(number):
        raise RequestError(400, "invalid_metadata", f"metadata.{name} must be a finite number")
    cap = METADATA_CAPS.get(name)
    if cap is not None and number > cap:
        raise RequestError(
            400, "invalid_metadata", f"metadata.{name} is {number:g}; at most {cap:g}"
        )
    return number


def _time_scale(metadata: dict, default: float) -> float:
    if metadata.get("time_scale") not in (None, ""):
        return max(0.0, _as_float(metadata.get("time_scale"), "time_scale", 1.0))
    if metadata.get("speed") not in (None, ""):
        speed = _as_float(metadata.get("speed"), "speed", 1.0)
        if speed <= 0:
            return 0.0
        if speed < MIN_SPEED:
            raise RequestError(
                400,
                "invalid_metadata",
                f"metadata.speed is {speed:g}; at least {MIN_SPEED:g} (or 0: no sleeps)",
            )
        return 1.0 / speed
    return default


def check_metadata(metadata: dict) -> None:
    """RequestError (naming the parameter and its cap) for a numeric parameter that is not a
    finite number within METADATA_CAPS: what `SimRequest.from_body` would refuse, said before a
    stream is created for it."""
    for name in METADATA_CAPS:
        _as_float(metadata.get(name), name, 0.0)
    _time_scale(metadata, 1.0)


def _as_int(value: Any, name: str, default: int) -> int:
    return int(_as_float(value, name, default))


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def flatten_input(value: Any) -> str:
    """The text of a Responses ``input``: a string or a list of ``{role, content}`` items."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, dict):
                content = item.get("content", item.get("text", ""))
                if isinstance(content, str):
                    out.append(content)
                elif isinstance(content, list):
                    for part in content:
                        if isinstance(part, dict) and isinstance(part.get("text"), str):
                            out.append(part["text"])
                        elif isinstance(part, str):
                            out.append(part)
                elif item.get("type") == "function_call_output":
                    out.append(str(item.get("output", "")))
        return "\n".join(out)
    raise RequestError(400, "invalid_input", "'input' must be a string or a list of items")


def last_user_text(value: Any) -> str:
    if isinstance(value, list):
        for item in reversed(value):
            if isinstance(item, dict) and item.get("role", "user") == "user":
                return flatten_input([item])
    return flatten_input(value)


def _model(body: dict) -> str:
    """The request's ``model``: a simulated model or ``auto``."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, "missing_required_parameter", "Missing required parameter: 'model'")
    if model != AUTO_MODEL and model not in MODELS:
        raise RequestError(
            404,
            "model_not_found",
            f"The model '{model}' does not exist. Known: {', '.join(MODELS)} (or 'auto').",
        )
    return model


def _scenario(metadata: dict, header_scenario: str | None) -> str:
    """The scenario ``metadata.scenario`` or the ``X-Simulator-Scenario`` header names
    (default: DEFAULT_SCENARIO)."""
    scenario = str(metadata.get("scenario") or header_scenario or DEFAULT_SCENARIO).strip()
    if scenario not in SCENARIOS:
        raise RequestError(
            400,
            "unknown_scenario",
            f"Unknown scenario '{scenario}'. Valid scenarios: {', '.join(SCENARIOS)}",
        )
    return scenario


@dataclass
class SimRequest:
    """A validated ``POST /v1/responses`` body."""

    model: str
    input_text: str
    user_text: str
    scenario: str
    stream: bool
    instructions: str | None
    tools: list
    metadata: dict
    max_output_tokens: int | None
    seed: int
    time_scale: float

    @classmethod
    def from_body(
        cls,
        body: Any,
        header_scenario: str | None = None,
        server_seed: int | str = 0,
        default_time_scale: float = 1.0,
    ) -> SimRequest:
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_json", "The request body must be a JSON object")
        if "input" not in body or body["input"] in (None, "", []):
            raise RequestError(
                400, "missing_required_parameter", "Missing required parameter: 'input'"
            )
        model = _model(body)
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise RequestError(400, "invalid_metadata", "'metadata' must be an object")
        scenario = _scenario(metadata, header_scenario)
        input_text = flatten_input(body["input"])
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise RequestError(400, "invalid_tools", "'tools' must be a list")
        check_metadata(metadata)
        time_scale = _time_scale(metadata, default_time_scale)
        max_out = body.get("max_output_tokens")
        if isinstance(max_out, float) and not math.isfinite(max_out):
            max_out = None  # (json, which the server parses with, reads Infinity)
        return cls(
            model=model,
            input_text=input_text,
            user_text=last_user_text(body["input"]),
            scenario=scenario,
            stream=body.get("stream", True) is not False,
            instructions=body.get("instructions"),
            tools=tools,
            metadata=metadata,
            max_output_tokens=int(max_out) if isinstance(max_out, int | float) else None,
            seed=derive_seed(body, scenario, server_seed),
            time_scale=max(0.0, time_scale),
        )

    def meta_float(self, name: str, default: float) -> float:
        return _as_float(self.metadata.get(name), name, default)

    def meta_int(self, name: str, default: int) -> int:
        return _as_int(self.metadata.get(name), name, default)


# The stall scenario's silence at real pacing; at another pacing it scales with time_scale (the
# playground's speed), but is never shorter than MIN_STALL_SILENCE_S, so that "Instant" still
# shows a stall. An explicit metadata.stall_s is seconds, at any pacing.
STALL_SILENCE_S = 90.0
MIN_STALL_SILENCE_S = 3.0
# The stall threshold for runs on the simulator scales the same way (see stall_threshold_s),
# down to this floor: below the silence's, so the scaled stall is still detected.
MIN_STALL_THRESHOLD_S = 2.0


def stall_silence_s(metadata: dict, time_scale: float) -> float:
    if metadata.get("stall_s") not in (None, ""):
        return _as_float(metadata.get("stall_s"), "stall_s", STALL_SILENCE_S)
    return max(STALL_SILENCE_S * time_scale, MIN_STALL_SILENCE_S)


def stall_threshold_s(configured_s: float, metadata: dict | None) -> float:
    """The stall threshold (no event for N s) for a run on this simulator: `configured_s`
    (STALL_TIMEOUT_S, 60 s: docs/protocol.md) scaled by the run's time_scale like the stall
    scenario's silence, so a faster playground run stalls and retries faster in proportion.
    Never below min(`configured_s`, MIN_STALL_THRESHOLD_S), so at "Instant" the pacing's own
    jitter is no stall; with an explicit ``stall_s`` (seconds: a test's own fault, against its
    own threshold) unscaled. A real upstream's threshold is `configured_s` as it is."""
    metadata = metadata if isinstance(metadata, dict) else {}
    if metadata.get("stall_s") not in (None, ""):
        return configured_s
    try:
        time_scale = _time_scale(metadata, 1.0)
    except RequestError:  # the simulator refuses such a request anyway
        return configured_s
    return max(configured_s * time_scale, min(configured_s, MIN_STALL_THRESHOLD_S))


def derive_seed(body: dict, scenario: str, server_seed: int | str = 0) -> int:
    """``metadata.seed`` (or the server seed) plus the request content → a 64-bit seed."""
    metadata = dict(body.get("metadata") or {})
    base = f"seed:{metadata.pop('seed')}" if "seed" in metadata else f"server:{server_seed}"
    for transient in ("time_scale", "speed"):
        metadata.pop(transient, None)
    canon = json.dumps(
        {
            "model": body.get("model"),
            "input": body.get("input"),
            "instructions": body.get("instructions"),
            "tools": body.get("tools"),
            "max_output_tokens": body.get("max_output_tokens"),
            "scenario": scenario,
            "metadata": metadata,
        },
        sort_keys=True,
        default=str,
    )
    return int(hashlib.sha256(f"{base}|{canon}".encode()).hexdigest()[:16], 16)


# --------------------------------------------------------------------------- text generation
_STOP = set(
    """about above after again against all also and any are because been before being below
    between both but can could did does doing down during each few for from further had has have
    having her here hers him his how into its just more most other our ours out over own same
    she should some such than that the their theirs them then there these they this those through
    too under until very was were what when where which while who whom why will with would you
    your yours please tell give explain write show make need want like know think could kun
    jij wij zij het een van voor met niet maar ook wat hoe waarom welke deze die dat zijn
    naar over meer kan kunt moet wordt worden graag even""".split()
)
_DUTCH_HINTS = {"de", "het", "een", "ik", "niet", "wat", "hoe", "waarom", "van", "en", "kun", "je"}

_EN = [
    "Here is a short overview of {a}.",
    "{A} is usually understood through a few key ideas.",
    "First, it helps to look at how {a} relates to {b}.",
    "In practice, most people start with the basics and refine their approach over time.",
    "A common mistake is to overlook the details of {b}.",
    "It is worth checking the assumptions behind {c} before drawing conclusions.",
    "Small, concrete examples make {a} much easier to reason about.",
    "There are trade-offs: what works well for {b} may not suit {c}.",
    "Good sources and a bit of experimentation go a long way here.",
    "If you want, I can go deeper into {a} or give a worked example.",
    "To summarise, {a} comes down to clarity, consistency and some patience.",
    "Keep in mind that context matters more than any single rule.",
]
_NL = [
    "Hier is een kort overzicht van {a}.",
    "{A} draait meestal om een paar kernideeën.",
    "Het helpt om eerst te kijken hoe {a} samenhangt met {b}.",
    "In de praktijk begin je met de basis en verfijn je daarna je aanpak.",
    "Een veelgemaakte fout is dat men de details van {b} over het hoofd ziet.",
    "Controleer de aannames achter {c} voordat je conclusies trekt.",
    "Kleine, concrete voorbeelden maken {a} veel begrijpelijker.",
    "Er zijn afwegingen: wat goed werkt voor {b} past niet altijd bij {c}.",
    "Als je wilt, kan ik dieper ingaan op {a} of een uitgewerkt voorbeeld geven.",
    "Kortom: {a} vraagt om duidelijkheid, consistentie en wat geduld.",
]


def topic_words(text: str) -> list[str]:
    words = re.findall(r"[^\W\d_][\w'-]{2,}", text)
    seen: list[str] = []
    for w in words:
        lw = w.lower()
        if lw in _STOP or lw in (s.lower() for s in seen):
            continue
        seen.append(w)
    ranked = sorted(range(len(seen)), key=lambda i: (-len(seen[i]), i))[:3]
    picked = [seen[i] for i in sorted(ranked)]
    return picked or ["this topic"]


def is_dutch(text: str) -> bool:
    words = set(re.findall(r"\w+", text.lower()))
    return len(words & _DUTCH_HINTS) >= 2


def reply_text(rng: random.Random, prompt: str, sentences: int) -> str:
    topics = topic_words(prompt)
    while len(topics) < 3:
        topics.append(topics[len(topics) % len(topics)])
    a, b, c = topics[:3]
    pool = _NL if is_dutch(prompt) else _EN
    first, last = pool[0], pool[-1]
    middle = pool[1:-1]
    out = [first]
    for _ in range(max(0, sentences - 2)):
        out.append(rng.choice(middle))
    if sentences >= 2:
        out.append(last)
    text = " ".join(s.format(a=a, b=b, c=c, A=a[:1].upper() + a[1:]) for s in out)
    return text


_TOKEN_RE = re.compile(r"\s*\w+|\s*[^\w\s]+|\s+")


def tokenize(rng: random.Random, text: str) -> list[str]:
    """Split text into token-ish chunks (a word with its leading space, punctuation, pieces)."""
    out: list[str] = []
    for tok in _TOKEN_RE.findall(text):
        core = tok.strip()
        if len(core) > 7 and rng.random() < 0.7:
            i = 0
            while i < len(tok):
                n = rng.randint(3, 6)
                out.append(tok[i : i + n])
                i += n
        else:
            out.append(tok)
    if out and "".join(out) != text:  # pragma: no cover - regex covers every character
        return [text]
    return out


# --------------------------------------------------------------------------- plan structures
@dataclass
class Ev:
    """One SSE block before numbering and serialisation."""

    at: float
    obj: dict | None = None  # event JSON (without sequence_number)
    raw: str | None = None  # data text that is not an event object (malformed, [DONE])
    numbered: bool = True
    event_line: str | None = "message"
    sse_id: str | None = None  # an `id:` line, when set
    comment: bytes | None = None  # a non-event block (comment / retry), written verbatim
    skip_before: int = 0  # sequence numbers to skip before this one (gap)
    seq: int | None = None
    data: str = ""
    stall_before: float = 0.0  # absolute seconds of silence before this block
    split_utf8: bool = False
    pause_before: float = 0.0  # absolute minimal pause after the previous write

    @property
    def type(self) -> str | None:
        return self.obj.get("type") if self.obj else None

    @property
    def is_event(self) -> bool:
        return self.comment is None


@dataclass
class Write:
    at: float  # model time (seconds after the request body was read; scaled by time_scale)
    data: bytes  # payload of one HTTP chunk
    events: list[int] = field(default_factory=list)  # indexes into Plan.events completed here
    offset: float = 0.0  # absolute extra seconds (stalls, header delay), not scaled
    pause_before: float = 0.0  # absolute minimal pause after the previous write


@dataclass
class PlannedEvent:
    type: str | None
    sequence_number: int | None
    data: str
    event_name: str | None = None  # the `event:` line, when not "message" (long_strings)
    sse_id: str | None = None  # the `id:` line, when there is one (long_strings)


@dataclass
class Plan:
    response_id: str
    scenario: str
    model: str
    resolved_model: str
    status: int = 200
    content_type: str = "text/event-stream; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    header_delay: float = 0.0  # absolute seconds
    body: bytes | None = None  # non-stream body (errors, JSON)
    events: list[PlannedEvent] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    end: str = "complete"  # complete | missing_terminal | error | reset
    final_response: dict | None = None
    faults: list[dict] = field(default_factory=list)
    time_scale: float = 1.0
    routing: dict | None = None
    # absolute seconds the body stays open after its last event (``metadata.linger_s``, Chat
    # and Messages): a client that leaves at its last event then leaves before the body's end
    linger: float = 0.0


# --------------------------------------------------------------------------- builder
class Builder:
    def __init__(self, req: SimRequest, rng: random.Random, profile: ModelProfile, rid: str):
        self.req = req
        self.rng = rng
        self.profile = profile
        self.rid = rid
        self.t = 0.0
        self.evs: list[Ev] = []
        self.ttft = profile.sample_ttft(rng)
        self.first_output_done = False
        self.output: list[dict] = []
        self.output_tokens = 0

    def emit(self, obj: dict, at: float | None = None, **kw: Any) -> Ev:
        if at is not None:
            self.t = max(self.t, at)
        ev = Ev(at=self.t, obj=obj, **kw)
        self.evs.append(ev)
        return ev

    def step(self) -> None:
        self.t += self.profile.sample_token_gap(self.rng)

    def small(self) -> None:
        self.t += self.rng.uniform(0.0005, 0.003)

    def start_output(self) -> None:
        """Move the clock to just before the first output token (TTFT)."""
        if not self.first_output_done:
            self.t = max(self.t, self.ttft - self.rng.uniform(0.002, 0.01))
            self.first_output_done = True

    def first_token_at(self) -> None:
        self.t = max(self.t, self.ttft)

    def item_id(self, prefix: str) -> str:
        return f"{prefix}_{self.rng.getrandbits(96):024x}"

    # -- message items
    def message(
        self,
        output_index: int,
        parts: list[str],
        draft: list[str] | None = None,
        tokens: list[list[str]] | None = None,
    ) -> dict:
        """Stream a message item. ``draft`` (optional) is what the deltas spell per part;
        ``tokens`` (optional) gives the exact delta strings per part."""
        self.start_output()
        mid = self.item_id("msg")
        base = {"id": mid, "type": "message", "role": "assistant"}
        self.emit(
            {
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": {**base, "status": "in_progress", "content": []},
            }
        )
        content = []
        for ci, text in enumerate(parts):
            spelled = draft[ci] if draft else text
            toks = tokens[ci] if tokens else None
            content.append(self._content_part(output_index, ci, mid, text, spelled, toks))
        item = {**base, "status": "completed", "content": content}
        self.small()
        self.emit({"type": "response.output_item.done", "output_index": output_index, "item": item})
        self.output.append(item)
        return item

    def _content_part(
        self,
        output_index: int,
        ci: int,
        mid: str,
        text: str,
        spelled: str,
        tokens: list[str] | None,
    ) -> dict:
        """Stream content part ``ci`` of message ``mid``: its deltas spell ``spelled`` (in
        ``tokens`` when given), a rewrite event follows when that is not ``text``, and the
        done events carry ``text``. Returns the part."""
        self.small()
        self.emit(
            {
                "type": "response.content_part.added",
                "output_index": output_index,
                "content_index": ci,
                "item_id": mid,
                "part": {"type": "output_text", "text": ""},
            }
        )
        toks = tokens if tokens is not None else tokenize(self.rng, spelled)
        self.deltas(output_index, ci, mid, toks)
        if spelled != text:
            self.step()
            self.emit({"type": "response.rewrite.in_progress"})
            self.t += self.rng.uniform(0.08, 0.25)
        self.small()
        self.emit(
            {
                "type": "response.output_text.done",
                "output_index": output_index,
                "content_index": ci,
                "item_id": mid,
                "text": text,
            }
        )
        part = {"type": "output_text", "text": text}
        self.small()
        self.emit(
            {
                "type": "response.content_part.done",
                "output_index": output_index,
                "content_index": ci,
                "item_id": mid,
                "part": part,
            }
        )
        return part

    def deltas(self, output_index: int, ci: int, mid: str, tokens: list[str]) -> None:
        for i, tok in enumerate(tokens):
            if i == 0:
                self.first_token_at()
            else:
                self.step()
            self.emit(
                {
                    "type": "response.output_text.delta",
                    "output_index": output_index,
                    "content_index": ci,
                    "item_id": mid,
                    "delta": tok,
                }
            )
            self.output_tokens += 1

    # -- function calls
    def function_call_events(self, output_index: int, name: str, args: dict, ok: bool, result):
        """A generator of event dicts for one function call (caller schedules them)."""
        fid = self.item_id("fc")
        call_id = f"call_{self.rng.getrandbits(96):024x}"
        arguments = json.dumps(args, separators=(",", ":"), ensure_ascii=False)
        base = {"id": fid, "type": "function_call", "name": name, "call_id": call_id}
        yield {
            "type": "response.output_item.added",
            "output_index": output_index,
            "item": {**base, "status": "in_progress", "arguments": ""},
        }
        pos = 0
        while pos < len(arguments):
            n = self.rng.randint(2, 7)
            yield {
                "type": "response.function_call_arguments.delta",
                "output_index": output_index,
                "item_id": fid,
                "delta": arguments[pos : pos + n],
            }
            self.output_tokens += 1
            pos += n
        yield {
            "type": "response.function_call_arguments.done",
            "output_index": output_index,
            "item_id": fid,
            "arguments": arguments,
        }
        output = (
            json.dumps(result, separators=(",", ":"), ensure_ascii=False)
            if ok
            else f"Tool '{name}' failed: {result}"
        )
        item = {
            **base,
            "arguments": arguments,
            "output": output,
            "status": "completed" if ok else "failed",
        }
        self.output.append(item)
        yield {"type": "response.output_item.done", "output_index": output_index, "item": item}

    def run_calls(self, generators: list, interleave: bool) -> None:
        self.start_output()
        first = True
        if not interleave:
            for gen in generators:
                for obj in gen:
                    self._call_event(obj, first)
                    first = False
            return
        live = list(generators)
        # every call starts (output_item.added) before any finishes, so their events overlap;
        # after that the next event comes from a random live call
        for gen in live:
            self._call_event(next(gen), first)
            first = False
        while live:
            gen = self.rng.choice(live)
            try:
                obj = next(gen)
            except StopIteration:
                live.remove(gen)
                continue
            self._call_event(obj, first)
            first = False

    def _call_event(self, obj: dict, first: bool) -> None:
        if first:
            self.first_token_at()
        elif obj["type"] == "response.output_item.done":
            self.t += self.rng.uniform(0.05, 0.3)  # the tool runs
        else:
            self.step()
        self.emit(obj)


# --------------------------------------------------------------------------- tools
def choose_tool(req: SimRequest, index: int) -> tuple[str, dict, Any]:
    topics = topic_words(req.user_text)
    names = []
    for t in req.tools:
        if isinstance(t, dict):
            name = t.get("name") or (t.get("function") or {}).get("name")
            if name:
                names.append(name)
    text = req.user_text.lower()
    if names:
        name = names[index % len(names)]
    elif "weather" in text or "weer" in text:
        name = "get_weather"
    else:
        name = ["web_search", "get_weather", "lookup_document"][index % 3]
    if name == "get_weather":
        cities = ["Amsterdam", "Utrecht", "Brussels", "Berlin", "Paris"]
        caps = re.findall(
            r"\b(?:in|for|at|near|and|en|te|voor|from)\s+([A-Z][\w-]{2,})", req.user_text
        ) or [
            w
            for w in re.findall(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{3,}\b", req.user_text.strip())
            if w.lower() not in _STOP
        ]
        city = caps[index % len(caps)] if caps else cities[index % len(cities)]
        return name, {"location": city, "unit": "celsius"}, {"location": city, "temp_c": 14 + index}
    query = " ".join(topics[:2]) if index == 0 else " ".join(reversed(topics[:2]))
    return (
        name,
        {"query": query},
        [{"title": f"{topics[0].title()} — overview", "url": f"https://example.org/{index}"}],
    )


# --------------------------------------------------------------------------- building
def _usage(req: SimRequest, out_tokens: int) -> dict:
    inp = max(1, len(req.input_text) // 4 + len(req.instructions or "") // 4)
    return {"input_tokens": inp, "output_tokens": out_tokens, "total_tokens": inp + out_tokens}


def _response(req: SimRequest, rid: str, created_ms: int, model: str, status: str) -> dict:
    return {
        "id": rid,
        "object": "response",
        "created_at": created_ms,
        "model": model,
        "status": status,
    }


def sentence_count(req: SimRequest, rng: random.Random, default_range: tuple[int, int]) -> int:
    if req.metadata.get("sentences") not in (None, ""):
        return max(1, req.meta_int("sentences", 5))
    return rng.randint(*default_range)


def capped(req: SimRequest, rng: random.Random, text: str) -> str:
    if req.max_output_tokens and req.max_output_tokens > 0:
        toks = _TOKEN_RE.findall(text)
        if len(toks) > req.max_output_tokens:
            return "".join(toks[: req.max_output_tokens])
    return text


def build_plan(
    req: SimRequest, response_id: str | None = None, created_at_ms: int | None = None
) -> Plan:
    """Build the complete plan for ``req``. ``response_id``/``created_at_ms`` come from the
    server (unique per response) unless ``metadata.deterministic_ids`` is set."""
    rng = random.Random(req.seed)
    response_id, created_at_ms = response_ids(req, response_id, created_at_ms)
    routing, resolved = route_request(req)
    profile = MODELS[resolved]
    reported = req.model  # the model response.created names
    if req.scenario == "long_strings":
        response_id, resolved, routing = _long_ids(response_id, resolved, routing)
        reported = resolved
    plan = Plan(
        response_id=response_id,
        scenario=req.scenario,
        model=req.model,
        resolved_model=resolved,
        time_scale=req.time_scale,
        routing=routing.as_event_fields() if routing else None,
    )
    if req.scenario in ("http_429", "http_500"):
        return _http_error_plan(req, plan)
    b = Builder(req, rng, profile, response_id)
    _opening(req, b, routing, created_at_ms, reported)
    if req.scenario == "fast":
        return _fast_plan(req, plan, b, created_at_ms)
    tool_calls = _OUTPUT_BUILDERS.get(req.scenario, _message_output)(req, plan, b)
    _terminal(req, plan, b, tool_calls, created_at_ms)
    evs = b.evs
    _apply_faults(req, plan, rng, evs)
    _finish(plan, evs, req)
    return plan


def response_ids(
    req: SimRequest, response_id: str | None, created_at_ms: int | None
) -> tuple[str, int]:
    """The response id and ``created_at`` (ms): the server's, or derived from the seed (with
    ``metadata.deterministic_ids``, or when the server gives none)."""
    deterministic = _as_bool(req.metadata.get("deterministic_ids", False))
    id_rng = random.Random(req.seed ^ 0x5EED)
    if deterministic or response_id is None:
        response_id = f"resp_{id_rng.getrandbits(128):032x}"
    if deterministic or created_at_ms is None:
        created_at_ms = 1_700_000_000_000 + id_rng.randrange(10**11)
    return response_id, created_at_ms


def route_request(req: SimRequest) -> tuple[RoutingDecision | None, str]:
    """The router's decision (for ``model: "auto"``, else None) and the model that answers."""
    if req.model == AUTO_MODEL:
        routing = route(req.input_text, has_tools=bool(req.tools))
        return routing, routing.model_id
    return None, req.model


def _long_ids(
    response_id: str, resolved: str, routing: RoutingDecision | None
) -> tuple[str, str, RoutingDecision | None]:
    """long_strings: the response id, the model (also the one response.created names) and the
    routing decision's fields, each far longer than the column that stores it."""
    response_id = _long(response_id + "_", LONG_FIELD_CHARS, "0123456789abcdef")  # (a header)
    resolved = _long(resolved + "/", LONG_MODEL_CHARS)
    if routing:
        routing = replace(
            routing,
            model_id=resolved,
            category=_long(routing.category + "/", LONG_FIELD_CHARS),
            source=_long(routing.source + "/", LONG_FIELD_CHARS),
        )
    return response_id, resolved, routing


def _http_error_plan(req: SimRequest, plan: Plan) -> Plan:
    """http_429 (with ``Retry-After``) or http_500: a JSON error body instead of a stream."""
    scen = req.scenario
    if scen == "http_429":
        retry_after = req.meta_int("retry_after", 2)
        plan.status = 429
        plan.headers.append(("Retry-After", str(retry_after)))
        err = RequestError(
            429, "rate_limit_exceeded", "Rate limit reached, retry later", "rate_limit_error"
        )
    else:
        plan.status = 500
        err = RequestError(500, ERROR_CODE, ERROR_MESSAGE, "server_error")
    plan.content_type = "application/json"
    plan.body = json.dumps(err.body()).encode()
    plan.end = scen
    plan.faults.append({"kind": scen, "status": plan.status})
    return plan


def _opening(
    req: SimRequest,
    b: Builder,
    routing: RoutingDecision | None,
    created_at_ms: int,
    reported: str,
) -> None:
    """response.created, then the routing event if the request was routed (the model starts,
    and its TTFT counts, after the router)."""
    rng = b.rng
    b.emit(
        {
            "type": "response.created",
            "response": _response(req, b.rid, created_at_ms, reported, "in_progress"),
        },
        at=rng.uniform(0.004, 0.015),
    )
    if routing:
        b.emit(
            {"type": "response.routing.completed", **routing.as_event_fields()},
            at=b.t + rng.uniform(0.02, 0.06),
        )
        b.ttft += b.t  # routing happens before the model starts


def _tools_output(req: SimRequest, plan: Plan, b: Builder) -> list[dict]:
    """tools (one function call) and parallel_tools (3 interleaved, the second failed), then
    a text answer that names them; returns the function call items."""
    scen, rng = req.scenario, b.rng
    n = 1 if scen == "tools" else 3
    gens = []
    for i in range(n):
        name, args, result = choose_tool(req, i)
        ok = not (scen == "parallel_tools" and i == 1)
        if not ok:
            result = "upstream service timed out after 10 s (HTTP 504)"
        gens.append(b.function_call_events(i, name, args, ok, result))
    b.run_calls(gens, interleave=scen == "parallel_tools")
    tool_calls = [it for it in b.output if it["type"] == "function_call"]
    b.t += rng.uniform(0.1, 0.3)
    first_ok = next((c for c in tool_calls if c["status"] == "completed"), None)
    intro = (
        f"I called {', '.join(c['name'] for c in tool_calls)}. "
        + (f"The result of {first_ok['name']}: {first_ok['output'][:80]}. " if first_ok else "")
        + ("One call failed, so part of the answer may be incomplete. " if n > 1 else "")
    )
    text = capped(
        req, rng, intro + reply_text(rng, req.user_text, sentence_count(req, rng, (2, 4)))
    )
    b.first_output_done = True
    b.ttft = b.t + rng.uniform(0.05, 0.2)
    b.message(n, [text])
    return tool_calls


def _multi_part_output(req: SimRequest, plan: Plan, b: Builder) -> list[dict]:
    """multi_part: a message of 2 content parts, then a message of one."""
    rng, prompt = b.rng, req.user_text
    t1 = reply_text(rng, prompt, sentence_count(req, rng, (2, 3)))
    t2 = "\n\n" + reply_text(rng, prompt + " details", sentence_count(req, rng, (2, 3)))
    b.message(0, [capped(req, rng, t1), t2])
    b.t += rng.uniform(0.05, 0.2)
    b.message(1, [reply_text(rng, prompt + " summary", sentence_count(req, rng, (1, 2)))])
    return []


def _rewrite_output(req: SimRequest, plan: Plan, b: Builder) -> list[dict]:
    """rewrite: deltas that spell a draft with typos; the done events carry the corrected
    text."""
    rng = b.rng
    text = capped(req, rng, reply_text(rng, req.user_text, sentence_count(req, rng, (3, 5))))
    text += " This is definitely a separate point, which the rewrite pass keeps."
    draft = text.replace(" the ", " teh ", 2)
    for wrong, right in REWRITE_FIXES.items():
        if wrong != "teh":
            draft = draft.replace(right, wrong)
    b.message(0, [text], draft=[draft])
    plan.faults.append({"kind": "rewrite", "draft": draft, "text": text})
    return []


def judge_answer(req: SimRequest, rng: random.Random) -> str:
    """The judge scenarios' answer: a score in the stated format (`Score: N`, then a reason),
    or, for judge_nonsense, prose with no score in it."""
    if req.scenario == "judge_nonsense":
        return "I find this hard to say. " + reply_text(rng, req.user_text, 2)
    label = str(req.metadata.get("judge_label") or "").strip()[:50]
    if not label:
        if req.metadata.get("judge_score") not in (None, ""):
            score = req.meta_float("judge_score", 0)
        else:
            lo, hi = req.meta_int("judge_min", 1), req.meta_int("judge_max", 5)
            score = rng.randint(min(lo, hi), max(lo, hi))
        label = f"{score:g}"
    return f"Score: {label}\nReason: the answer addresses the question as asked."


def _message_output(req: SimRequest, plan: Plan, b: Builder) -> list[dict]:
    """Every other scenario: one message (longer when bursty; with multi-byte characters for
    utf8_split, markup for xss, one huge delta for huge_delta); stream-level faults come
    later (`_apply_faults`)."""
    scen, rng = req.scenario, b.rng
    sentences = sentence_count(req, rng, (4, 8))
    if scen == "bursty":
        sentences = max(sentences, 14)
    text = reply_text(rng, req.user_text, sentences)
    if scen in ("judge", "judge_nonsense"):
        text = judge_answer(req, rng)
        plan.faults.append({"kind": scen, "answer": text})  # (what a test checks it by)
    elif scen == "utf8_split":
        text = UTF8_SAMPLE + " " + text + " " + UTF8_SAMPLE
    elif scen == "xss":
        text = f"Careful with {XSS_IMG} and {XSS_SCRIPT} in markup. " + text
    text = capped(req, rng, text)
    if scen == "huge_delta":
        size = req.meta_int("huge_bytes", 1_000_000)
        block = "All work and no play makes a very long delta. "
        huge = (block * (size // len(block) + 1))[:size]
        tokens = tokenize(rng, text)
        k = min(len(tokens), 3)
        tokens = tokens[:k] + [" " + huge] + tokens[k:]
        text = "".join(tokens)
        b.message(0, [text], tokens=[tokens])
        plan.faults.append({"kind": "huge_delta", "bytes": len(huge.encode()) + 1})
    elif scen == "xss" and XSS_SCRIPT in text:  # (a small max_output_tokens cuts it off)
        pre = tokenize(rng, "Careful with ")
        tokens = (
            pre + [XSS_IMG, " and", " ", XSS_SCRIPT] + tokenize(rng, text.split(XSS_SCRIPT, 1)[1])
        )
        assert "".join(tokens) == text
        b.message(0, [text], tokens=[tokens])
    else:
        b.message(0, [text])
    return []


# The scenarios whose output is not one message (`_message_output`): scenario → the function
# that streams it and returns its function call items.
_OUTPUT_BUILDERS = {
    "tools": _tools_output,
    "parallel_tools": _tools_output,
    "multi_part": _multi_part_output,
    "rewrite": _rewrite_output,
}


def _terminal(
    req: SimRequest, plan: Plan, b: Builder, tool_calls: list[dict], created_at_ms: int
) -> None:
    """The final response (``plan.final_response``) and its response.completed event; for
    final_text the event carries only ``final_text``."""
    out_text = "".join(
        p["text"] for it in b.output if it["type"] == "message" for p in it["content"]
    )
    resp = _response(req, plan.response_id, created_at_ms, plan.resolved_model, "completed")
    resp["output"] = b.output
    resp["output_text"] = out_text
    if tool_calls:
        resp["tool_calls"] = tool_calls
    resp["usage"] = _usage(req, b.output_tokens)
    plan.final_response = resp
    b.step()
    if req.scenario == "final_text":
        b.emit({"type": "response.completed", "final_text": out_text})
    else:
        b.emit({"type": "response.completed", "response": resp})


def _delta_indexes(evs: list[Ev]) -> list[int]:
    return [i for i, e in enumerate(evs) if e.type == "response.output_text.delta"]


@dataclass
class _Site:
    """Where in a stream's events its fault goes: the indexes of its text deltas, the middle
    delta (``mid``; the middle event without deltas) and an early one (``early``)."""

    deltas: list[int]
    mid: int
    early: int


def _apply_faults(req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev]) -> None:
    """The scenario's stream-level fault (`_FAULTS`) applied to the events before they are
    numbered; wire-level ones (duplicate, reorder) come after (`_finish`)."""
    deltas = _delta_indexes(evs)
    site = _Site(
        deltas=deltas,
        mid=deltas[len(deltas) // 2] if deltas else len(evs) // 2,
        early=deltas[min(len(deltas) - 1, max(2, len(deltas) // 3))] if deltas else 1,
    )
    fault = _FAULTS.get(req.scenario)
    if fault is not None:
        fault(req, plan, rng, evs, site)


def _gap(req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site) -> None:
    evs[site.mid].skip_before = 1
    plan.faults.append({"kind": "gap", "at_index": site.mid})


def _missing_terminal(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    evs.pop()
    plan.end = "missing_terminal"
    plan.faults.append({"kind": "missing_terminal"})


def _cut_short(req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site) -> None:
    """error, error_no_seq, reset: the events after an early delta are dropped; then an error
    terminal (numbered or not), or a TCP RST."""
    scen = req.scenario
    del evs[site.early + 1 :]
    if scen == "reset":
        plan.end = "reset"
        plan.faults.append({"kind": "reset", "after_index": site.early})
        return
    e = Ev(
        at=evs[-1].at + rng.uniform(0.05, 0.2),
        obj={"type": "error", "code": ERROR_CODE, "message": ERROR_MESSAGE},
        numbered=scen == "error",
    )
    evs.append(e)
    plan.end = "error"
    plan.faults.append({"kind": scen})


def _malformed_json(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    mid = site.mid
    evs.insert(mid, Ev(at=evs[mid].at, raw=MALFORMED_DATA, numbered=False))
    plan.faults.append({"kind": "malformed_json", "at_index": mid})


def _stall(req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site) -> None:
    stall_s = stall_silence_s(req.metadata, req.time_scale)
    evs[site.early + 1].stall_before = stall_s
    plan.faults.append({"kind": "stall", "before_index": site.early + 1, "stall_s": stall_s})


def _slow_headers(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    plan.header_delay = req.meta_float("header_delay_s", 2.0)
    plan.faults.append({"kind": "slow_headers", "header_delay_s": plan.header_delay})


def _unknown_event(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    """A response.citation.added after the middle delta and a response.usage.partial before
    the terminal: numbered event types the checker does not know."""
    mid = site.mid
    d = evs[mid].obj or {}
    evs.insert(
        mid + 1,
        Ev(
            at=evs[mid].at,
            obj={
                "type": "response.citation.added",
                "output_index": d.get("output_index", 0),
                "content_index": d.get("content_index", 0),
                "item_id": d.get("item_id"),
                "citation": {"url": "https://example.org/source", "title": "A source"},
            },
        ),
    )
    k = len(evs) - 1
    evs.insert(
        k,
        Ev(
            at=evs[k - 1].at,
            obj={"type": "response.usage.partial", "usage": {"output_tokens": len(site.deltas)}},
        ),
    )
    plan.faults.append(
        {"kind": "unknown_event", "types": ["response.citation.added", "response.usage.partial"]}
    )


def _comments(req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site) -> None:
    for pos in sorted({1, site.mid, len(evs) - 1}, reverse=True):
        evs.insert(pos, Ev(at=evs[pos].at, comment=b": keep-alive\n\n", numbered=False))
    retry_block = _as_bool(req.metadata.get("retry_block", True))
    if retry_block:
        evs.insert(2, Ev(at=evs[2].at, comment=b"retry: 1000\n\n", numbered=False))
    plan.faults.append({"kind": "comments", "retry_block": retry_block})


def _done_sentinel(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    evs.append(Ev(at=evs[-1].at, raw="[DONE]", numbered=False, event_line=None))
    plan.faults.append({"kind": "done_sentinel"})


def _long_strings(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    long_type = _long("response.long_type.", LONG_FIELD_CHARS, "t😀")
    evs.insert(1, Ev(at=evs[0].at, obj={"type": long_type}))
    for i, ev in enumerate(evs):
        ev.event_line = _long(f"message.{i}.", LONG_FIELD_CHARS, "é😀n")
        ev.sse_id = _long(f"{i}.", LONG_FIELD_CHARS, "i😀")
    plan.content_type += "; profile=" + "p" * 300
    plan.faults.append({"kind": "long_strings", "type": long_type})


def _utf8_split(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    for i in site.deltas:
        if any(ord(ch) > 127 for ch in evs[i].obj["delta"]):
            evs[i].split_utf8 = True
            evs[i].pause_before = 0.0
    plan.faults.append({"kind": "utf8_split"})


def _wrong_content_type(
    req: SimRequest, plan: Plan, rng: random.Random, evs: list[Ev], site: _Site
) -> None:
    plan.content_type = "application/json"
    plan.end = "wrong_content_type"
    plan.faults.append({"kind": "wrong_content_type"})


# scenario → the fault `_apply_faults` applies to its events (none for the others)
_FAULTS = {
    "gap": _gap,
    "missing_terminal": _missing_terminal,
    "error": _cut_short,
    "error_no_seq": _cut_short,
    "reset": _cut_short,
    "malformed_json": _malformed_json,
    "stall": _stall,
    "slow_headers": _slow_headers,
    "unknown_event": _unknown_event,
    "comments": _comments,
    "done_sentinel": _done_sentinel,
    "long_strings": _long_strings,
    "utf8_split": _utf8_split,
    "wrong_content_type": _wrong_content_type,
}


def _serialize(ev: Ev) -> str:
    if ev.raw is not None:
        return ev.raw
    obj = ev.obj or {}
    out: dict = {"type": obj["type"]}
    if ev.seq is not None:
        out["sequence_number"] = ev.seq
    for k, v in obj.items():
        if k != "type":
            out[k] = v
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def _block(ev: Ev) -> bytes:
    if ev.comment is not None:
        return ev.comment
    head = f"event: {ev.event_line}\n" if ev.event_line else ""
    if ev.sse_id is not None:
        head += f"id: {ev.sse_id}\n"
    return f"{head}data: {ev.data}\n\n".encode()


def _long(prefix: str, chars: int, fill: str = "😀é-") -> str:
    """`prefix` padded with `fill` to `chars` characters (long_strings)."""
    return (prefix + fill * chars)[:chars]


def _finish(plan: Plan, evs: list[Ev], req: SimRequest) -> None:
    """The events numbered and serialised, the wire-level faults applied, and the plan's body
    (a JSON response) or its writes (a stream)."""
    number_events(plan, evs)
    _wire_faults(req, plan, evs)
    if req.scenario == "wrong_content_type" or not req.stream:
        _json_body(req, plan, evs)
        return
    plan_writes(req, plan, evs)


def number_events(plan: Plan, evs: list[Ev]) -> None:
    """Sequence numbers for the numbered events (skipping where a gap is; the gap fault learns
    which number is missing) and each event's data line."""
    seq = 0
    for ev in evs:
        if ev.comment is None and ev.numbered:
            seq += ev.skip_before
            if ev.skip_before:
                for f in plan.faults:
                    if f["kind"] == "gap":
                        f["missing_sequence_number"] = seq - 1
            ev.seq = seq
            seq += 1
        if ev.comment is None:
            ev.data = _serialize(ev)


def _wire_faults(req: SimRequest, plan: Plan, evs: list[Ev]) -> None:
    """duplicate (the middle delta sent twice) and reorder (it and the next event swapped)."""
    scen = req.scenario
    deltas = _delta_indexes(evs)
    if scen == "duplicate" and deltas:
        i = deltas[len(deltas) // 2]
        dup = Ev(at=evs[i].at, obj=evs[i].obj, seq=evs[i].seq, data=evs[i].data)
        evs.insert(i + 1, dup)
        plan.faults.append({"kind": "duplicate", "sequence_number": evs[i].seq})
    elif scen == "reorder" and len(deltas) >= 4:
        i = deltas[len(deltas) // 2]
        a, b = evs[i], evs[i + 1]
        a.at, b.at = b.at, a.at
        evs[i], evs[i + 1] = b, a
        plan.faults.append({"kind": "reorder", "sequence_numbers": [b.seq, a.seq]})


def _json_body(req: SimRequest, plan: Plan, evs: list[Ev]) -> None:
    """The final response as one JSON body (wrong_content_type, or ``stream: false``), sent
    after the stream's duration."""
    plan.body = json.dumps(plan.final_response, ensure_ascii=False).encode()
    if req.scenario == "wrong_content_type":
        plan.content_type = "application/json"
    else:
        plan.content_type = "application/json"
        plan.end = "complete"
    plan.header_delay += evs[-1].at * req.time_scale if evs else 0.0


def plan_writes(req: SimRequest, plan: Plan, evs: list[Ev]) -> None:
    """The events as planned events and the socket writes that send them: one block a write,
    bursts of ``burst_size`` events (bursty), or two writes split inside a character
    (utf8_split)."""
    offset = 0.0
    burst = req.meta_int("burst_size", 40) if req.scenario == "bursty" else 0
    pending: list[tuple[int, bytes]] = []
    for ev in evs:
        offset += ev.stall_before
        idx = None
        if ev.comment is None:
            idx = len(plan.events)
            name = ev.event_line if ev.event_line != "message" else None
            plan.events.append(PlannedEvent(ev.type, ev.seq, ev.data, name, ev.sse_id))
        blob = _block(ev)
        if burst:
            pending.append((idx, blob))
            n_events = sum(1 for i, _ in pending if i is not None)
            if n_events >= burst or ev is evs[-1] or idx == 0:
                plan.writes.append(_burst_write(ev, pending, offset))
                pending = []
        elif ev.split_utf8:
            _split_write(req, plan, ev, blob, idx, offset)
        else:
            plan.writes.append(
                Write(
                    at=ev.at,
                    data=blob,
                    events=[] if idx is None else [idx],
                    offset=offset,
                    pause_before=max(ev.pause_before, ev.stall_before),
                )
            )
    if burst:
        plan.faults.append({"kind": "bursty", "burst_size": burst, "writes": len(plan.writes)})


def _burst_write(ev: Ev, pending: list[tuple[int | None, bytes]], offset: float) -> Write:
    """The blocks held back (``pending``: (planned event index or None, block)) in one write,
    at the time of the last of them (``ev``)."""
    return Write(
        at=ev.at,
        data=b"".join(bl for _, bl in pending),
        events=[i for i, _ in pending if i is not None],
        offset=offset,
    )


def _split_write(
    req: SimRequest, plan: Plan, ev: Ev, blob: bytes, idx: int | None, offset: float
) -> None:
    """utf8_split: ``blob`` in two writes cut inside its first multi-byte character, with
    ``split_pause_s`` between them."""
    cut = _utf8_cut(blob)
    pause = req.meta_float("split_pause_s", 0.02)
    plan.writes.append(Write(at=ev.at, data=blob[:cut], events=[], offset=offset))
    plan.writes.append(
        Write(at=ev.at, data=blob[cut:], events=[idx], offset=offset, pause_before=pause)
    )
    plan.faults.append({"kind": "utf8_split_event", "index": idx, "cut": cut})


def _utf8_cut(blob: bytes) -> int:
    """A byte offset inside the first multi-byte UTF-8 character of the data line."""
    start = blob.index(b"data: ")
    for i in range(start, len(blob)):
        if blob[i] >= 0xC0:  # lead byte of a multi-byte sequence
            return i + 1
    return len(blob) // 2


def _fast_plan(req: SimRequest, plan: Plan, b: Builder, created_at_ms: int) -> Plan:
    """fast: ``metadata.events`` events in total (the opening ones, deltas, response.completed),
    written in batches of ``metadata.batch`` without sleeps."""
    n = max(2, req.meta_int("events", 10_000))
    batch = max(1, req.meta_int("batch", 100))
    words = [" stream", " event", " delta", " token", " fast", " data", " flow", " byte"]
    mid = f"msg_{b.rng.getrandbits(96):024x}"
    head = b.evs  # created (+ routing)
    n_deltas = max(0, n - len(head) - 1)
    rng = b.rng
    deltas = [words[rng.randrange(8)] for _ in range(n_deltas)]
    text = "".join(deltas)
    resp = _response(req, plan.response_id, created_at_ms, plan.resolved_model, "completed")
    resp["output"] = [
        {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text}],
        }
    ]
    resp["output_text"] = text
    resp["usage"] = _usage(req, n_deltas)
    plan.final_response = resp
    if not req.stream:
        plan.body = json.dumps(resp, ensure_ascii=False).encode()
        plan.content_type = "application/json"
        return plan
    _fast_writes(plan, head, mid, deltas, resp, batch)
    plan.faults.append({"kind": "fast", "events": len(plan.events), "batch": batch})
    return plan


def _fast_writes(
    plan: Plan, head: list[Ev], mid: str, deltas: list[str], resp: dict, batch: int
) -> None:
    """fast's planned events and writes: the opening events (``head``) in one write, then the
    deltas (serialised by a template rather than json.dumps of each) and the terminal in
    writes of ``batch`` events."""
    seq = 0
    blobs: list[bytes] = []
    for ev in head:
        ev.seq = seq
        ev.data = _serialize(ev)
        plan.events.append(PlannedEvent(ev.type, seq, ev.data))
        blobs.append(_block(ev))
        seq += 1
    plan.writes.append(Write(at=0.0, data=b"".join(blobs), events=list(range(len(head)))))
    dumps = json.dumps
    prefix = '{"type":"response.output_text.delta","sequence_number":'
    suffix = f',"output_index":0,"content_index":0,"item_id":"{mid}","delta":'
    buf: list[bytes] = []
    idxs: list[int] = []
    for tok in deltas:
        data = f"{prefix}{seq}{suffix}{dumps(tok)}}}"
        idxs.append(len(plan.events))
        plan.events.append(PlannedEvent("response.output_text.delta", seq, data))
        buf.append(f"event: message\ndata: {data}\n\n".encode())
        seq += 1
        if len(buf) >= batch:
            plan.writes.append(Write(at=0.0, data=b"".join(buf), events=idxs))
            buf, idxs = [], []
    term = Ev(at=0.0, obj={"type": "response.completed", "response": resp}, seq=seq)
    term.data = _serialize(term)
    idxs.append(len(plan.events))
    plan.events.append(PlannedEvent("response.completed", seq, term.data))
    buf.append(_block(term))
    plan.writes.append(Write(at=0.0, data=b"".join(buf), events=idxs))
