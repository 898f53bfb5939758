"""The protocol checker: an incremental state machine over received Responses-API events.

Pure Python, no I/O. The recorder calls `Checker.feed()` once per received event and gets back the
findings for that event plus the milestone it represents (`FeedResult`); `Checker.close()` at the
end of the connection adds the end-of-stream findings. Imports and re-checks go through
`check_events()`, which is the same machine fed from stored rows.

What it understands (see docs/protocol.md and the real captures in tests/fixtures/streams):
- both wire conventions: EU GPT's `event: message` and OpenAI's `event: <type>` (an info finding,
  once per stream), and both terminal shapes: `response.completed` with `response.output` /
  `response.output_text`, and EU GPT's wire example with a top-level `final_text`;
- OpenAI's extra terminal events `response.incomplete` and `response.failed`;
- the OpenAI event families the EU GPT pages do not list (reasoning, refusal, tool calls, search).

Reordering. Deltas are stored with their sequence numbers and joined *in sequence order* when the
text is read, so a swapped pair still reassembles to the right text (the swap itself is reported:
`sequence_gap` when the later number arrives first, `sequence_regression` when the earlier one
fills the hole). Text comparisons (`text_mismatch`, `final_text_mismatch`) that sit above an
unfilled hole are deferred until the hole is filled or the stream closes, so a late delta is not
mistaken for a text mismatch. A duplicated sequence number is reported and the event is otherwise
ignored: it never counts twice in the text.

Cost per event: one JSON parse (`parse_json`; skipped when the caller passes `obj=`), a few
dict lookups and a list append. Text is kept as lists of chunks and joined only when read.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson
from django.utils import translation
from django.utils.translation import gettext_lazy, gettext_noop, ngettext_lazy

from streams.core.safejson import too_deep

ERROR, WARNING, INFO = "error", "warning", "info"

# A code's severity and description. The descriptions are English here, in the API and in the
# exports; pages show them in the page's language (dashboard.queries.common.describe: gettext).
CODES: dict[str, tuple[str, str]] = {
    "first_not_created": (ERROR, gettext_noop("The first event is not response.created.")),
    "sequence_gap": (ERROR, gettext_noop("sequence_number skipped one or more numbers.")),
    "sequence_duplicate": (
        ERROR,
        gettext_noop("A sequence_number arrived twice; the repeat was ignored."),
    ),
    "sequence_regression": (
        ERROR,
        gettext_noop("A sequence_number arrived lower than one already seen."),
    ),
    "missing_sequence_number": (
        ERROR,
        gettext_noop("An event other than `error` has no integer sequence_number (reported once)."),
    ),
    "event_after_terminal": (
        ERROR,
        gettext_noop(
            "Events arrived after the terminal event (reported once, with how many); "
            "they are not part of the response."
        ),
    ),
    "missing_terminal": (ERROR, gettext_noop("The connection closed without a terminal event.")),
    "invalid_json": (ERROR, gettext_noop("The event's data is not JSON.")),
    "invalid_utf8": (
        ERROR,
        gettext_noop(
            "Bytes that are not UTF-8 (reported once, at the first); kept raw, never replaced."
        ),
    ),
    "missing_type": (
        ERROR,
        gettext_noop("The event's JSON is not an object with a string `type`."),
    ),
    "delta_after_item_done": (
        ERROR,
        gettext_noop("A delta arrived after its item or part was done."),
    ),
    "text_mismatch": (
        ERROR,
        gettext_noop("A part's .done text differs from its concatenated deltas."),
    ),
    "final_text_mismatch": (
        ERROR,
        gettext_noop("The terminal event's text differs from the reassembled text."),
    ),
    "delta_without_item": (
        WARNING,
        gettext_noop("A delta for an output_index with no output_item.added."),
    ),
    "delta_without_part": (
        WARNING,
        gettext_noop("A text delta for a part with no content_part.added."),
    ),
    "routing_on_pinned_model": (
        WARNING,
        gettext_noop("A routing event arrived although the model was pinned."),
    ),
    "stall": (WARNING, gettext_noop("No event arrived for longer than the stall threshold.")),
    "buffered_delivery": (
        WARNING,
        gettext_noop("A burst of events after a long silence: a buffering proxy."),
    ),
    "rewritten_text": (
        INFO,
        gettext_noop("Text changed by an announced rewrite pass (response.rewrite)."),
    ),
    "unknown_event_type": (
        INFO,
        gettext_noop("An event type this checker does not know (reported once)."),
    ),
    "event_name_not_message": (
        INFO,
        gettext_noop("The SSE `event:` field is not `message` (OpenAI style)."),
    ),
    "done_sentinel": (INFO, gettext_noop("A `data: [DONE]` sentinel (Chat Completions style).")),
    # Chat Completions (streams/core/formats/chat.py)
    "done_missing": (ERROR, gettext_noop("The connection closed without `data: [DONE]`.")),
    "not_a_chunk": (ERROR, gettext_noop("The event's JSON is not a chunk with a `choices` list.")),
    "finish_reason_repeated": (
        ERROR,
        gettext_noop("A choice's finish_reason arrived twice (reported once per choice)."),
    ),
    "chunk_after_finish": (
        ERROR,
        gettext_noop("A chunk for a choice after its finish_reason (reported once per choice)."),
    ),
    "finish_reason_missing": (ERROR, gettext_noop("A choice had no finish_reason at [DONE].")),
    "tool_call_inconsistent": (
        ERROR,
        gettext_noop("A tool call's index, id or name does not hold across its fragments."),
    ),
    # (OpenRouter does both, and clients cope: worth knowing, not a broken stream)
    "usage_chunk_has_choices": (
        WARNING,
        gettext_noop("The usage chunk has choices; it should have an empty list."),
    ),
    "role_not_first": (
        WARNING,
        gettext_noop("delta.role after a choice's first delta (reported once per choice)."),
    ),
    "chunk_field_changed": (
        ERROR,
        gettext_noop("A chunk's id, created or model differs from the first chunk's."),
    ),
    "content_filtered": (INFO, gettext_noop("A content filter held back part of a choice.")),
    # Anthropic Messages (streams/core/formats/messages.py)
    "first_not_message_start": (ERROR, gettext_noop("The first event is not message_start.")),
    "block_index_out_of_order": (
        ERROR,
        gettext_noop("A content block started out of index order."),
    ),
    "block_delta_before_start": (
        ERROR,
        gettext_noop("A content block's delta or stop before its content_block_start."),
    ),
    "block_delta_after_stop": (
        ERROR,
        gettext_noop("A content block's delta after its content_block_stop."),
    ),
    "block_stopped_twice": (ERROR, gettext_noop("A content block was stopped twice.")),
    "block_never_stopped": (
        ERROR,
        gettext_noop("A content block was never stopped before message_stop."),
    ),
    "tool_input_invalid_json": (
        ERROR,
        gettext_noop("A tool use's input fragments do not join into valid JSON."),
    ),
    "event_name_mismatch": (
        WARNING,
        gettext_noop("The SSE `event:` line names another type than the JSON's `type`."),
    ),
}


# Our own words in a finding's expected, got or detail, by key: English here (what is stored,
# served by the API and exported), said in the page's language by the pages (`Said`). A
# parameter is data (an event type, a number, a quoted text) or another phrase; a plural's
# form is chosen by the parameter `n`, which it writes as `%(count)s`.
PHRASES = {
    "event_line": gettext_lazy(
        "OpenAI servers put the event type on the `event:` line; only the JSON `type` "
        "identifies an event. Reported once per stream."
    ),
    "not_json": gettext_lazy("non-JSON data"),
    "no_type": gettext_lazy("no `type`"),
    "json_of_type": gettext_lazy("JSON %(type)s"),
    "typed_object": gettext_lazy("an object with a string `type`"),
    "once_per_type": gettext_lazy("ignored; reported once per type"),
    "too_deep": gettext_lazy("nested deeper than %(levels)s levels"),
    "an_integer": gettext_lazy("an integer"),
    "absent": gettext_lazy("absent"),
    "first_unnumbered": gettext_lazy(
        "%(type)s; reported once per stream, at the first event without one"
    ),
    "in_file": gettext_lazy("file"),
    "in_har_body": gettext_lazy("HAR entry's response body"),
    "in_event_data": gettext_lazy("data of event %(index)s"),
    "utf8_at": gettext_lazy("byte %(offset)s of the %(where)s: %(bytes)s"),
    "utf8_detail": ngettext_lazy(
        "the first invalid UTF-8 sequence is at byte offset %(offset)s of the %(where)s (bytes "
        "%(bytes)s; Latin-1 or Windows-1252, perhaps); %(count)s event has such bytes in its data: "
        "shown with U+FFFD for each invalid sequence, kept verbatim as raw bytes (the event's "
        "page, the .sse export)",
        "the first invalid UTF-8 sequence is at byte offset %(offset)s of the %(where)s (bytes "
        "%(bytes)s; Latin-1 or Windows-1252, perhaps); %(count)s events have such bytes in their "
        "data: shown with U+FFFD for each invalid sequence, kept verbatim as raw bytes (the "
        "event's page, the .sse export)",
        "n",
    ),
    "terminal_types": gettext_lazy(
        "response.completed, response.incomplete, response.failed or error"
    ),
    "connection_closed": gettext_lazy("connection closed"),
    "after_events": ngettext_lazy("after %(count)s event", "after %(count)s events", "n"),
    "first_number": gettext_lazy("the first number is %(seq)s, not 0"),
    "missing_one": gettext_lazy("missing so far: %(first)s"),
    "missing_run": gettext_lazy("missing so far: %(first)s…%(last)s"),
    "not_applied": gettext_lazy("%(type)s; not applied again"),
    "arrived_after": gettext_lazy("%(type)s arrived after %(top)s"),
    "fills_gap": gettext_lazy(
        "%(type)s arrived after %(top)s; it fills an earlier gap (reordered delivery)"
    ),
    "burst_expected": gettext_lazy("< %(events)s events ≤ %(gap_us)s µs apart after a silence"),
    "burst_got": gettext_lazy("%(events)s events after %(ms)s ms silence"),
    "burst_detail": gettext_lazy(
        "events arrive in one lump after a long silence: something between the server and "
        "us buffers the stream (nginx: proxy_buffering off)"
    ),
    "stall_expected": gettext_lazy("≤ %(s)s s between events"),
    "seconds": gettext_lazy("%(s)s s"),
    "stall_detail": gettext_lazy("no event for %(s)s s %(where)s"),
    "before_close": gettext_lazy("before the connection closed"),
    "before_event": gettext_lazy("before event %(index)s"),
    "nothing_after": gettext_lazy("nothing after %(type)s (event %(index)s)"),
    "after_terminal_got": ngettext_lazy(
        "%(count)s event, the first %(what)s", "%(count)s events, the first %(what)s", "n"
    ),
    "after_terminal_detail": ngettext_lazy(
        "%(count)s event after the terminal event; %(first)s. None of them is part of the "
        "response's text or items.",
        "%(count)s events after the terminal event; %(first)s. None of them is part of the "
        "response's text or items.",
        "n",
    ),
    "first_numbered": gettext_lazy("the first is event %(index)s (sequence_number %(seq)s)"),
    "first_unnumbered_event": gettext_lazy("the first is event %(index)s (no sequence_number)"),
    "item_added_for": gettext_lazy("response.output_item.added for output_index %(index)s"),
    "once_per_item": gettext_lazy("reported once per item"),
    "no_delta_after": gettext_lazy("no delta after %(what)s"),
    "delta_for_index": gettext_lazy("delta for output_index %(index)s"),
    "no_routing_pinned": gettext_lazy("no routing event for a pinned model"),
    "part_added_for": gettext_lazy("response.content_part.added for (%(item)s, %(part)s)"),
    "once_per_part": gettext_lazy("reported once per part"),
    "in_part": gettext_lazy("part (%(item)s, %(part)s): %(difference)s"),
    "first_difference": gettext_lazy("first difference at character %(at)s: %(a)s vs %(b)s"),
}


@dataclass(frozen=True, slots=True)
class Said:
    """A phrase of PHRASES with its parameters: `str()` is its English (a finding's stored
    text), `said()` it in the active language with numbers written by `number`, and
    `as_json()` what Finding.said keeps for the pages (`Said.from_json` reads it back)."""

    key: str
    params: tuple = ()  # ((name, value), …): a value is a str, an int, a float or a Said

    def __str__(self) -> str:
        with translation.override("en"):
            return self.said(_english_number)

    def said(self, number) -> str:
        """In the active language: data parameters as they are, numbers through `number`."""
        values = {
            k: v.said(number) if isinstance(v, Said) else number(v) if _is_number(v) else v
            for k, v in self.params
        }
        phrase = PHRASES[self.key]
        if "n" in values:  # a plural: its form by the count, the count written as `number` does
            return phrase % {**values, "n": dict(self.params)["n"], "count": values["n"]}
        return str(phrase) % values if values else str(phrase)

    def as_json(self) -> dict:
        return {
            "key": self.key,
            "params": {k: v.as_json() if isinstance(v, Said) else v for k, v in self.params},
        }

    @classmethod
    def from_json(cls, value) -> Said | None:
        """A stored phrase, or None when it is not one this version knows (the caller then
        shows the stored English)."""
        if not isinstance(value, dict) or value.get("key") not in PHRASES:
            return None
        params = value.get("params")
        if not isinstance(params, dict):
            return None
        out = []
        for k, v in params.items():
            if isinstance(v, dict):
                v = cls.from_json(v)
                if v is None:
                    return None
            elif not isinstance(v, (str, int, float)) or isinstance(v, bool):
                return None
            out.append((k, v))
        return cls(value["key"], tuple(out))


def said(key: str, **params) -> Said:
    return Said(key, tuple(params.items()))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _english_number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_json(text):
    """json.loads, through orjson first: much faster for a typical delta, and the checker
    parses every event (JSON was a large share of the pipeline's CPU; docs/performance.md).
    Exactly json's results and errors: what orjson refuses goes to json (json also takes
    NaN, Infinity and lone surrogate escapes), and so does anything holding a float, because
    orjson turns integers beyond 64 bits into floats. Data nested deeper than
    EVENT_MAX_DEPTH is a ValueError, like any other data that is not JSON."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _json_loads(text)
    if type(obj) is dict:
        # the usual event (a delta): one flat object, looked at without a stack (an empty list
        # or object holds no float: OpenAI's deltas carry `"logprobs": []`)
        for v in obj.values():
            t = type(v)
            if t is float:
                return _json_loads(text)
            if (t is dict or t is list) and v:
                break
        else:
            return obj
    # orjson took up to 1024 levels; the stored output and the pages' pretty-printing recurse,
    # so the bound is lower. Cheapest test first (this runs for every event that is not a flat
    # object): a text nested deeper than the bound has more than twice as many characters.
    if len(text) > 2 * EVENT_MAX_DEPTH and too_deep(text, EVENT_MAX_DEPTH):
        raise ValueError(_TOO_DEEP)
    stack = [obj]
    while stack:
        o = stack.pop()
        t = type(o)
        if t is dict:
            stack.extend(o.values())
        elif t is list:
            stack.extend(o)
        elif t is float:
            return json.loads(text)  # (its depth was bounded above)
    return obj


# Real events nest under 10 deep. json parses recursively (100,000 levels raise RecursionError,
# which would end the stream's task); json.dumps(indent=…) takes two frames a level.
EVENT_MAX_DEPTH = 128
_TOO_DEEP = f"nested deeper than {EVENT_MAX_DEPTH} levels"


def _json_loads(text):
    """json.loads behind the depth bound: measured without recursion before json recurses."""
    if too_deep(text, EVENT_MAX_DEPTH):
        raise ValueError(_TOO_DEEP)
    return json.loads(text)


@dataclass(frozen=True, slots=True)
class Violation:
    """A finding. `expected`, `got` and `detail` are English text (stored, served, exported);
    `said` names which of them are the checker's own words and says them again as phrases
    ({field: Said}), for the pages to say in their language. A field not in it is data."""

    code: str
    severity: str  # "error" | "warning" | "info"
    event_index: int | None
    expected: str = ""
    got: str = ""
    detail: str = ""
    said: tuple = field(default=(), compare=False)  # ((field, Said), …)

    def as_dict(self) -> dict:
        """The keyword arguments for a `streams.models.Finding`."""
        return {
            "code": self.code,
            "severity": self.severity,
            "event_index": self.event_index,
            "expected": self.expected,
            "got": self.got,
            "detail": self.detail,
            "said": {name: phrase.as_json() for name, phrase in self.said},
        }


def _v(code: str, index: int | None, expected="", got="", detail="") -> Violation:
    texts = {"expected": expected, "got": got, "detail": detail}
    said_ = tuple((name, v) for name, v in texts.items() if isinstance(v, Said))
    return Violation(code, CODES[code][0], index, str(expected), str(got), str(detail), said_)


@dataclass(frozen=True, slots=True)
class BufferedThresholds:
    """When a run of events counts as buffered delivery.

    A burst is a run of events each at most `max_gap_us` after the previous one, whose first event
    came at least `min_silence_us` after the event before it (or after the stream started). It is
    reported once, when it reaches `min_events`. At 30–100 tokens/s the gaps are 10–33 ms, so a
    normally paced stream never chains 20 events 1 ms apart; the first write of a stream (created,
    in_progress, item and part added: 4 events) and the final flurry of .done events stay well
    below 20.
    """

    min_events: int = 20
    max_gap_us: int = 1_000
    min_silence_us: int = 250_000


DEFAULT_STALL_US = 30_000_000  # half of the 60 s after which docs/protocol.md says to retry
DEFAULT_BUFFERED = BufferedThresholds()

TERMINAL_STATUS = {
    "response.completed": "completed",
    "response.incomplete": "incomplete",
    "response.failed": "failed",
    "error": "failed",
}

# Deltas that carry model output; the first one is the "first token" milestone.
OUTPUT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
        "response.audio.transcript.delta",
    }
)

KNOWN_TYPES = frozenset(
    {
        # EU GPT (docs/protocol.md)
        "response.created",
        "response.routing.completed",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
        "response.rewrite.in_progress",
        "response.completed",
        "error",
        # OpenAI Responses API (the captures and the openai SDK's ResponseStreamEvent union)
        "response.queued",
        "response.in_progress",
        "response.incomplete",
        "response.failed",
        "response.content_part.done",
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.audio.delta",
        "response.audio.done",
        "response.audio.transcript.delta",
        "response.audio.transcript.done",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.compaction.compacting",
    }
)

TOOL_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})

# How each output item type is reassembled and shown: the one list, read by `Checker.items`,
# streams.shapes.public.output and (as `output_item_kinds`) the pages' scripts. Any other type is
# "other": kept as its item JSON.
ITEM_KINDS = {
    "message": "message",
    "function_call": "tool",
    "custom_tool_call": "tool",
    "mcp_call": "tool",
    "reasoning": "reasoning",
}

# FeedResult.kind values
CREATED, ROUTING, OUTPUT, TOOL_CALL, TERMINAL = (
    "created",
    "routing",
    "output",
    "tool_call",
    "terminal",
)


class _Missing:
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()  # `obj=` default: "parse `data` yourself"


@dataclass(slots=True)
class FeedResult:
    """What one fed event produced: findings, the milestone it is, and its parsed envelope."""

    violations: list[Violation]
    kind: str | None = None  # created | routing | output | tool_call | terminal | None
    first_output: bool = False  # this is the first output-bearing delta of the stream
    first_tool_call: bool = False  # this is the first tool-call output_item.added
    type: str = ""
    sequence_number: int | None = None
    output_index: int | None = None
    content_index: int | None = None
    is_json: bool = False
    obj: object = None  # the parsed JSON (None when not JSON)


class _Buffer:
    """Deltas of one part, kept with their sequence keys; joined in sequence order on read."""

    __slots__ = ("keys", "chunks", "dirty", "_cache", "_cached")

    def __init__(self):
        self.keys: list[float] = []
        self.chunks: list[str] = []
        self.dirty = False
        self._cache = ""
        self._cached = 0

    def append(self, key: float, chunk: str) -> None:
        if self.keys and key < self.keys[-1]:
            self.dirty = True
        self.keys.append(key)
        self.chunks.append(chunk)

    def __bool__(self):
        return bool(self.chunks)

    def text(self) -> str:
        if self.dirty:
            order = sorted(range(len(self.keys)), key=self.keys.__getitem__)  # stable
            self.keys = [self.keys[i] for i in order]
            self.chunks = [self.chunks[i] for i in order]
            self.dirty = False
            self._cache, self._cached = "", 0
        if self._cached < len(self.chunks):
            self._cache += "".join(self.chunks[self._cached :])
            self._cached = len(self.chunks)
        return self._cache


class _Part:
    __slots__ = (
        "type",
        "added",
        "buf",
        "done_text",
        "done_seq",
        "part_text",
        "annotations",
        "reported",
        "rewritten",
    )

    def __init__(self, type_: str):
        self.type = type_
        self.added = False
        self.buf = _Buffer()
        self.done_text: str | None = None  # from output_text.done / refusal.done
        self.done_seq: int | None = None
        self.part_text: str | None = None  # from content_part.done or the item's done content
        self.annotations: list = []
        self.reported = False  # delta_without_part already said
        self.rewritten = False  # its .done came after response.rewrite.in_progress

    def text(self) -> str:
        """The part's final text: its .done text when it has one (after a rewrite pass that is
        the rewritten text, docs/protocol.md), else its deltas, else the text of its
        content_part.done / output_item.done. The one rule, for every reader: the recorder's and
        the importer's `output_text` and `parts`, the serializer, the pages and the CLI."""
        if self.done_text is not None:
            return self.done_text
        if self.buf:
            return self.buf.text()
        return self.part_text or ""

    def streamed(self) -> str | None:
        """What the deltas spelled, when that is not the final text (a rewrite's draft, or a
        .done text that disagrees with its deltas); None otherwise."""
        if not self.buf:
            return None
        streamed = self.buf.text()
        return None if streamed == self.text() else streamed


class _Item:
    __slots__ = (
        "output_index",
        "type",
        "added",
        "item",
        "done_item",
        "done_seq",
        "parts",
        "args",
        "args_done",
        "summary",
        "reasoning",
        "reported_after_done",
        "reported_no_item",
    )

    def __init__(self, output_index: int, type_: str):
        self.output_index = output_index
        self.type = type_
        self.added = False
        self.item: dict = {}
        self.done_item: dict | None = None
        self.done_seq: int | None = None
        self.parts: dict[int, _Part] = {}
        self.args = _Buffer()  # function-call arguments, custom tool input, MCP arguments, code
        self.args_done: str | None = None
        self.summary: dict[int, _Part] = {}  # reasoning summary parts by summary_index
        self.reasoning: dict[int, _Part] = {}  # reasoning_text by content_index
        self.reported_after_done = False
        self.reported_no_item = False

    @property
    def done(self) -> bool:
        return self.done_item is not None

    def get(self, key: str):
        if self.done_item is not None and key in self.done_item:
            return self.done_item[key]
        return self.item.get(key)


def _int(value, bits=64) -> int | None:
    """An integer field of an event as a number its database column holds (`bits`); anything
    else, a 2**70 included, is no number (the event's data keeps what came)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            return value
    return None


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


def word_ops(old: str, new: str) -> list[tuple[str, str]]:
    """A word diff as [(op, text)], op in "same" | "del" | "ins": the one word diff of the
    checker, the pages (a rewrite's, the terminal text's) and the experiments' answers."""
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    ops = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            ops.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            ops.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            ops.append(("ins", "".join(b[j1:j2])))
    return ops


_WDIFF = {"same": "{}", "del": "[-{}-]", "ins": "{{+{}+}}"}


def word_diff(old: str, new: str, limit: int = 4000) -> str:
    """A wdiff-style diff: unchanged text as is, `[-removed-]` and `{+added+}`."""
    text = "".join(_WDIFF[op].format(part) for op, part in word_ops(old, new))
    return text if len(text) <= limit else text[:limit] + "…"


def _first_difference(a: str, b: str) -> Said:
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return said(
        "first_difference",
        at=n,
        a=repr(a[max(0, n - 20) : n + 20]),
        b=repr(b[max(0, n - 20) : n + 20]),
    )


def _final_text(obj: dict) -> str | None:
    """The text a terminal event carries, or None when it carries none.

    Preference: the message parts of `response.output` (OpenAI; some servers also send an empty
    `output_text` beside them), then `response.output_text` (EU GPT events page), then a top-level
    `final_text` (EU GPT wire example). A non-empty `output` without messages means "no text"
    (""), e.g. a function-call-only response. An empty `output: []` means the terminal carries
    nothing to compare (None): the ChatGPT Codex backend, vLLM and several gateways send
    `response.completed` with `output: []` after streaming everything, which is a known quirk
    rather than a claim that the text was empty.
    """
    response = obj.get("response")
    if isinstance(response, dict):
        output = response.get("output")
        if isinstance(output, list):
            texts = [
                part.get("text") or ""
                for item in output
                if isinstance(item, dict) and item.get("type") == "message"
                for part in item.get("content") or ()
                if isinstance(part, dict) and part.get("type") == "output_text"
            ]
            has_message = any(isinstance(i, dict) and i.get("type") == "message" for i in output)
            if has_message:
                return "".join(texts)
        if isinstance(response.get("output_text"), str):
            return response["output_text"]
        if output:
            return ""
    if isinstance(obj.get("final_text"), str):
        return obj["final_text"]
    return None


class Checker:
    """Feed events in arrival order; read findings, milestones and the reassembled response."""

    def __init__(
        self,
        pinned_model: bool | None = None,
        stall_threshold_us: int | None = None,
        buffered: BufferedThresholds | bool | None = None,
    ):
        """`pinned_model`: True when the request named a concrete model (routing is then a
        warning), False for "auto", None when unknown. `stall_threshold_us`: None means
        DEFAULT_STALL_US, 0 disables. `buffered`: thresholds for buffered_delivery; None or True
        means DEFAULT_BUFFERED, False disables."""
        self.pinned_model = pinned_model
        self.stall_threshold_us = (
            DEFAULT_STALL_US if stall_threshold_us is None else stall_threshold_us
        )
        if buffered is None or buffered is True:
            buffered = DEFAULT_BUFFERED
        self.buffered: BufferedThresholds | None = buffered or None

        self._init_response()
        self._init_progress()
        self._init_once_reported()
        self._init_timing()

    def _init_response(self) -> None:
        """The response as its events tell it so far: the findings, the counts, its ids and
        model, routing, error, usage, terminal event and text, and its status."""
        self.violations: list[Violation] = []  # everything reported so far, feed and close
        self.event_count = 0
        self.output_deltas = 0
        self.upstream_id = ""
        self.response_model = ""
        self.routing: dict = {}
        self.rewrite_announced = False
        self.error_code = ""
        self.error_message = ""
        self.incomplete_reason = ""
        self.usage: dict = {}  # the terminal response's `usage`, as sent (telemetry's token counts)
        self.terminal_type = ""
        self.terminal_index: int | None = None
        self.final_text: str | None = None
        self.closed = False
        self._status = "streaming"

    def _init_progress(self) -> None:
        """Where the stream stands: its items by output_index, the highest sequence number and
        the holes below it, the text checks waiting on a hole, the milestones seen, and the
        events after the terminal one."""
        self._items: dict[int, _Item] = {}
        self._max_seq: int | None = None
        self._holes: list[list[int]] = []  # [lo, hi] inclusive, ascending, numbers not yet seen
        self._deferred: list[tuple[int, Callable[[], list[Violation]]]] = []
        self._first_output_seen = False
        self._first_tool_call_seen = False
        self._after_terminal_n = 0  # events after the terminal one (reported once, at close)
        self._after_terminal_first: tuple = (None, None, "")

    def _init_once_reported(self) -> None:
        """The findings reported once per stream (or once per event type): said yet?"""
        self._name_reported = False
        self._invalid_utf8_reported = False
        self._unnumbered_reported = False
        self._routing_reported = False
        self._unknown_reported: set[str] = set()

    def _init_timing(self) -> None:
        """The timing checks' state: the last arrival time, and the burst being counted."""
        self._last_t: int | None = None
        self._burst_n = 0
        self._burst_start: int | None = None
        self._burst_silence = 0

    # ---- feeding -------------------------------------------------------------------------------

    def feed(
        self,
        index: int,
        event_name: str,
        data: str,
        obj: object = MISSING,
        t_us: int | None = None,
    ) -> FeedResult:
        """Check one received event. `data` is the verbatim data text; pass `obj=` when it has
        already been parsed. `t_us`: arrival time in µs since the stream started, enabling the
        timing checks.

        The per-event entry: timing, the `event:` name, the parse, then the next text delta of
        an open part (`_fast_delta`) or any other event (`_feed_event`)."""
        out: list[Violation] = []
        first = self.event_count == 0
        self.event_count += 1
        if t_us is not None:
            self._timing(index, t_us, out)
        if event_name and event_name != "message" and not self._name_reported:
            self._report_event_name(index, event_name, out)
        if obj is MISSING:
            try:
                obj = parse_json(data)
            except ValueError as exc:
                return self._feed_not_json(index, data, str(exc), first, out)
        fast = self._fast_delta(index, event_name, obj, t_us, out)
        if fast is not None:
            return fast
        return self._feed_event(index, obj, first, out)

    def _report_event_name(self, index: int, event_name: str, out: list) -> None:
        self._name_reported = True
        out.append(
            _v(
                "event_name_not_message",
                index,
                "message",
                event_name,
                said("event_line"),
            )
        )

    def _feed_not_json(self, index: int, data: str, error: str, first: bool, out: list):
        """An event whose data is not JSON: a `[DONE]` sentinel, or invalid_json."""
        result = FeedResult(out)
        if data.strip() == "[DONE]":
            out.append(_v("done_sentinel", index, got="[DONE]"))
            sentinel = True
        else:
            reason = said("too_deep", levels=EVENT_MAX_DEPTH) if error == _TOO_DEEP else error
            out.append(_v("invalid_json", index, "JSON", _short(data), reason))
            sentinel = False
        if first:
            out.append(_v("first_not_created", index, "response.created", said("not_json")))
        if self.terminal_index is not None and not sentinel:
            self._note_after_terminal(index, None, said("not_json"))
        return self._done(result)

    def _feed_untyped(self, index: int, obj: object, first: bool, result: FeedResult):
        """JSON that is not an object with a string `type`: missing_type, nothing applied."""
        got = (
            said("no_type")
            if isinstance(obj, dict)
            else said("json_of_type", type=type(obj).__name__)
        )
        out = result.violations
        out.append(_v("missing_type", index, said("typed_object"), got))
        if first:
            out.append(_v("first_not_created", index, "response.created", got))
        if self.terminal_index is not None:
            self._note_after_terminal(index, None, got)
        return self._done(result)

    def _feed_event(self, index: int, obj: object, first: bool, out: list) -> FeedResult:
        """Any JSON event the fast path did not take: its envelope checked (type, first event,
        sequence number, after the terminal), then its handler applied and its milestone
        counted."""
        result = FeedResult(out)
        result.is_json = True
        result.obj = obj
        etype = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(etype, str) or not etype:
            return self._feed_untyped(index, obj, first, result)
        result.type = etype
        seq = result.sequence_number = _int(obj.get("sequence_number"))
        result.output_index = _int(obj.get("output_index"), 32)
        result.content_index = _int(obj.get("content_index"), 32)
        if first and etype != "response.created":
            out.append(_v("first_not_created", index, "response.created", etype))
        after_terminal = self.terminal_index is not None
        if after_terminal:
            self._note_after_terminal(index, seq, etype)
        if seq is None:
            if etype != "error" and not self._unnumbered_reported:
                self._report_unnumbered(index, obj, etype, out)
        elif not self._sequence(index, seq, etype, out):
            return self._done(result)  # a duplicate: reported, not applied
        if after_terminal:
            # The response ended with its terminal event: what comes after is recorded and
            # reported (once, at close), never part of its text, items or milestones.
            return self._done(result)
        handler = EVENT_HANDLERS.get(etype)
        if handler is not None:
            result.kind = handler(self, index, obj, seq, out)
        if self._deferred and seq is not None and seq < self._max_seq:
            self._run_ready(out)  # this late event may have filled the hole a check waited on
        elif etype not in KNOWN_TYPES and etype not in self._unknown_reported:
            self._unknown_reported.add(etype)
            out.append(_v("unknown_event_type", index, got=etype, detail=said("once_per_type")))
        if result.kind == OUTPUT:
            self.output_deltas += 1
            if not self._first_output_seen:
                self._first_output_seen = result.first_output = True
        elif result.kind == TOOL_CALL and not self._first_tool_call_seen:
            self._first_tool_call_seen = result.first_tool_call = True
        return self._done(result)

    def _report_unnumbered(self, index: int, obj: dict, etype: str, out: list) -> None:
        # One fact (this server leaves numbers out), however many events show it: the event
        # table's seq column shows every one.
        self._unnumbered_reported = True
        raw = obj.get("sequence_number", MISSING)
        got = said("absent") if raw is MISSING else f"{raw!r} ({type(raw).__name__})"
        detail = said("first_unnumbered", type=etype)
        out.append(_v("missing_sequence_number", index, said("an_integer"), got, detail))

    def _fast_delta(self, index, event_name, obj, t_us, out) -> FeedResult | None:
        """The bulk of every stream: the next text delta of an announced, still open part.
        Same state changes and findings as the general path, at a fraction of the cost (this
        runs for every token of every recorded stream; docs/performance.md, "Checker")."""
        if (
            type(obj) is not dict
            or obj.get("type") != "response.output_text.delta"
            or not self._first_output_seen
            or self.terminal_index is not None
            or self._holes
            or self._deferred
        ):
            return None
        seq = obj.get("sequence_number")
        top = self._max_seq
        if type(seq) is not int or top is None or seq != top + 1:
            return None
        if event_name != "message" and not self._name_reported:
            return None
        oi = obj.get("output_index")
        ci = obj.get("content_index")
        delta = obj.get("delta")
        if type(oi) is not int or type(ci) is not int or type(delta) is not str:
            return None
        # An item or part that was never announced was reported on its first delta already:
        # later deltas to it take the fast path too.
        item = self._items.get(oi)
        if item is None or item.done_item is not None:
            return None
        if not item.added and not item.reported_no_item:
            return None
        part = item.parts.get(ci)
        if part is None or part.done_seq is not None or not (part.added or part.reported):
            return None
        if part.done_text is not None or part.type != "output_text":
            return None
        self._max_seq = seq
        part.buf.append(seq, delta)
        self.output_deltas += 1
        if out:
            self.violations.extend(out)
        return FeedResult(
            out, OUTPUT, False, False, "response.output_text.delta", seq, oi, ci, True, obj
        )

    def report_invalid_utf8(
        self, index: int | None, offset: int, bad: bytes, events: int, where: Said | None = None
    ) -> list[Violation]:
        """The body is not UTF-8 (a Latin-1 capture, say): one finding for the stream, at the
        first invalid sequence (`offset` in bytes from the start of the `where`, `index` the
        event holding it, None outside any event), `events` holding such bytes. Their text shows
        U+FFFD in place of each bad sequence; the bytes themselves are kept by the caller
        (`Event.raw`, and an import's `Capture`), so the finding says where to find them."""
        if self._invalid_utf8_reported:
            return []
        self._invalid_utf8_reported = True
        shown = " ".join(f"{b:02X}" for b in bad[:8])
        where = where or said("in_file")
        violation = _v(
            "invalid_utf8",
            index,
            "UTF-8",
            said("utf8_at", offset=offset, where=where, bytes=shown),
            said("utf8_detail", offset=offset, where=where, bytes=shown, n=events),
        )
        self.violations.append(violation)
        return [violation]

    def _done(self, result: FeedResult) -> FeedResult:
        if result.violations:
            self.violations.extend(result.violations)
        return result

    def close(self, connection_closed: bool = True, t_us: int | None = None) -> list[Violation]:
        """End of stream. `connection_closed=False` means we stopped reading (cancel, stall
        timeout), so a missing terminal is not the server's fault and is not reported; the status
        then stays "streaming" for the caller to replace. `t_us`: when the connection closed, to
        check the last silence for a stall."""
        if self.closed:
            return []
        self.closed = True
        out: list[Violation] = []
        if t_us is not None and self._last_t is not None:
            self._stall(None, t_us - self._last_t, out, said("before_close"))
        for _seq, check in self._deferred:
            out.extend(check())
        self._deferred.clear()
        if self._after_terminal_n:
            out.append(self._after_terminal())
        if self.terminal_index is None and connection_closed:
            self._status = "truncated"
            out.append(
                _v(
                    "missing_terminal",
                    None,
                    said("terminal_types"),
                    said("connection_closed"),
                    said("after_events", n=self.event_count),
                )
            )
        self.violations.extend(out)
        return out

    # ---- sequence and timing -------------------------------------------------------------------

    def _sequence(self, index: int, seq: int, etype: str, out: list) -> bool:
        """Track sequence numbers; False when the event is a duplicate and must not be applied."""
        top = self._max_seq
        if top is None:
            self._max_seq = seq
            if seq > 0:
                self._holes.append([0, seq - 1])
                out.append(_v("sequence_gap", index, 0, seq, said("first_number", seq=seq)))
            return True
        if seq == top + 1:
            self._max_seq = seq
            return True
        if seq > top + 1:
            self._max_seq = seq
            self._holes.append([top + 1, seq - 1])
            if seq == top + 2:
                missing = said("missing_one", first=top + 1)
            else:
                missing = said("missing_run", first=top + 1, last=seq - 1)
            out.append(_v("sequence_gap", index, top + 1, seq, missing))
            return True
        hole = next((h for h in self._holes if h[0] <= seq <= h[1]), None)
        if hole is None and seq >= 0:
            out.append(
                _v("sequence_duplicate", index, top + 1, seq, said("not_applied", type=etype))
            )
            return False
        detail = said("arrived_after", type=etype, top=top)
        if hole is not None:
            detail = said("fills_gap", type=etype, top=top)
            i = self._holes.index(hole)
            parts = [h for h in ([hole[0], seq - 1], [seq + 1, hole[1]]) if h[0] <= h[1]]
            self._holes[i : i + 1] = parts
        out.append(_v("sequence_regression", index, top + 1, seq, detail))
        return True

    def _run_ready(self, out: list) -> None:
        """Run the deferred text checks no longer sitting above a hole."""
        ready = [d for d in self._deferred if not self._hole_below(d[0])]
        if ready:
            self._deferred = [d for d in self._deferred if self._hole_below(d[0])]
            for _seq, check in ready:
                out.extend(check())

    def _hole_below(self, seq: int | None) -> bool:
        return seq is not None and bool(self._holes) and self._holes[0][0] < seq

    def _run_or_defer(self, seq: int | None, check: Callable[[], list[Violation]], out: list):
        if self._hole_below(seq):
            self._deferred.append((seq, check))
        else:
            out.extend(check())

    def _timing(self, index: int, t_us: int, out: list) -> None:
        prev = self._last_t
        self._last_t = t_us
        if prev is not None and self.stall_threshold_us and t_us - prev > self.stall_threshold_us:
            self._stall(index, t_us - prev, out, said("before_event", index=index))
        b = self.buffered
        if b is None:
            return
        gap = t_us - (prev if prev is not None else 0)
        if gap >= b.min_silence_us:
            self._burst_n, self._burst_start, self._burst_silence = 1, index, gap
        elif self._burst_n and gap <= b.max_gap_us:
            self._burst_n += 1
            if self._burst_n == b.min_events:
                out.append(
                    _v(
                        "buffered_delivery",
                        self._burst_start,
                        said("burst_expected", events=b.min_events, gap_us=b.max_gap_us),
                        said(
                            "burst_got",
                            events=b.min_events,
                            ms=round(self._burst_silence / 1000),
                        ),
                        said("burst_detail"),
                    )
                )
        else:
            self._burst_n = 0

    def _stall(self, index: int | None, gap: int, out: list, where: str) -> None:
        limit = self.stall_threshold_us
        if limit and gap > limit:
            out.append(
                _v(
                    "stall",
                    index,
                    said("stall_expected", s=limit / 1e6),
                    said("seconds", s=round(gap / 1e6, 1)),
                    said("stall_detail", s=round(gap / 1e6, 1), where=where),
                )
            )

    def _note_after_terminal(self, index: int, seq: int | None, what: str) -> None:
        if not self._after_terminal_n:
            self._after_terminal_first = (index, seq, what)
        self._after_terminal_n += 1

    def _after_terminal(self) -> Violation:
        """One finding for every event after the terminal one: one fact (the server did not
        stop), with how many came and where the first one was."""
        index, seq, what = self._after_terminal_first
        n = self._after_terminal_n
        if seq is None:
            first = said("first_unnumbered_event", index=index)
        else:
            first = said("first_numbered", index=index, seq=seq)
        return _v(
            "event_after_terminal",
            index,
            said("nothing_after", type=self.terminal_type, index=self.terminal_index),
            said("after_terminal_got", n=n, what=what),
            said("after_terminal_detail", n=n, first=first),
        )

    # ---- state -----------------------------------------------------------------------------------

    def _key(self, seq: int | None) -> float:
        # Events without a number sort right after the highest number seen so far.
        if seq is not None:
            return seq
        return (self._max_seq if self._max_seq is not None else -1) + 0.5

    def _item(self, index: int, obj: dict, type_: str, out: list | None) -> _Item:
        """The item for the event's output_index; created (with a finding) when not yet added."""
        oi = _int(obj.get("output_index"))
        if oi is None:
            oi = 0
        item = self._items.get(oi)
        if item is None:
            item = self._items[oi] = _Item(oi, type_)
        if out is not None and not item.added and not item.reported_no_item:
            item.reported_no_item = True
            out.append(
                _v(
                    "delta_without_item",
                    index,
                    said("item_added_for", index=oi),
                    obj.get("type"),
                    said("once_per_item"),
                )
            )
        return item

    def _after_done(self, index: int, item: _Item, done_seq: int | None, seq, what, out) -> None:
        # A delta numbered below the .done event is a reordering, already reported as such.
        if item.reported_after_done or (
            seq is not None and done_seq is not None and seq < done_seq
        ):
            return
        item.reported_after_done = True
        out.append(
            _v(
                "delta_after_item_done",
                index,
                said("no_delta_after", what=what),
                said("delta_for_index", index=item.output_index),
                said("once_per_item"),
            )
        )

    def _on_created(self, index, obj, seq, out):
        response = obj.get("response")
        if isinstance(response, dict):
            self.upstream_id = self.upstream_id or _str(response.get("id"))
            self.response_model = _str(response.get("model")) or self.response_model
        return CREATED

    def _on_routing(self, index, obj, seq, out):
        self.routing = {
            k: obj[k] for k in ("model_id", "category", "source", "reasoning") if k in obj
        }
        if self.pinned_model and not self._routing_reported:
            self._routing_reported = True  # a second routing event is the same fact
            out.append(
                _v(
                    "routing_on_pinned_model",
                    index,
                    said("no_routing_pinned"),
                    _str(obj.get("model_id")),
                )
            )
        return ROUTING

    def _on_item_added(self, index, obj, seq, out):
        raw = obj.get("item")
        raw = raw if isinstance(raw, dict) else {}
        type_ = _str(raw.get("type")) or "message"
        item = self._item(index, obj, type_, None)
        item.type, item.item, item.added = type_, raw, True
        return TOOL_CALL if type_ in TOOL_CALL_ITEMS else None

    def _on_item_done(self, index, obj, seq, out):
        raw = obj.get("item")
        raw = raw if isinstance(raw, dict) else {}
        item = self._item(index, obj, _str(raw.get("type")) or "message", None)
        if not item.added and raw.get("type"):
            item.type = raw["type"]
        item.done_item, item.done_seq = raw, seq
        for ci, content in enumerate(raw.get("content") or ()):
            if isinstance(content, dict):
                part = item.parts.get(ci)
                if part is None:
                    part = item.parts[ci] = _Part(_str(content.get("type")) or "output_text")
                text = content.get("text", content.get("refusal"))
                if isinstance(text, str):
                    part.part_text = text
        return None

    def _part(self, index, obj, type_: str, out: list | None) -> tuple[_Item, _Part]:
        item = self._item(index, obj, "message", out)
        ci = _int(obj.get("content_index"))
        ci = 0 if ci is None else ci
        part = item.parts.get(ci)
        if part is None:
            part = item.parts[ci] = _Part(type_)
        if out is not None and not part.added and not part.reported:
            part.reported = True
            out.append(
                _v(
                    "delta_without_part",
                    index,
                    said("part_added_for", item=item.output_index, part=ci),
                    obj.get("type"),
                    said("once_per_part"),
                )
            )
        return item, part

    def _on_part_added(self, index, obj, seq, out):
        raw = obj.get("part")
        raw = raw if isinstance(raw, dict) else {}
        _item, part = self._part(index, obj, _str(raw.get("type")) or "output_text", None)
        part.added = True
        if raw.get("type"):
            part.type = raw["type"]
        return None

    def _on_part_done(self, index, obj, seq, out):
        raw = obj.get("part")
        raw = raw if isinstance(raw, dict) else {}
        _item, part = self._part(index, obj, _str(raw.get("type")) or "output_text", None)
        text = raw.get("text", raw.get("refusal"))
        if isinstance(text, str):
            part.part_text = text
        return None

    def _on_text_delta(self, index, obj, seq, out):
        kind = "refusal" if obj["type"] == "response.refusal.delta" else "output_text"
        item, part = self._part(index, obj, kind, out)
        if part.done_seq is not None or part.done_text is not None:
            self._after_done(index, item, part.done_seq, seq, f"{kind}.done", out)
        elif item.done:
            self._after_done(index, item, item.done_seq, seq, "output_item.done", out)
        part.buf.append(self._key(seq), _str(obj.get("delta")))
        return OUTPUT

    def _on_text_done(self, index, obj, seq, out):
        is_refusal = obj["type"] == "response.refusal.done"
        item, part = self._part(index, obj, "refusal" if is_refusal else "output_text", None)
        text = obj.get("refusal" if is_refusal else "text")
        part.done_text, part.done_seq = (text if isinstance(text, str) else ""), seq
        part.rewritten = self.rewrite_announced
        ci = _int(obj.get("content_index")) or 0

        def check() -> list[Violation]:
            streamed, done = part.buf.text(), part.done_text
            if streamed == done:
                return []
            if part.rewritten:
                return [_v("rewritten_text", index, streamed, done, word_diff(streamed, done))]
            return [
                _v(
                    "text_mismatch",
                    index,
                    streamed,
                    done,
                    said(
                        "in_part",
                        item=item.output_index,
                        part=ci,
                        difference=_first_difference(streamed, done),
                    ),
                )
            ]

        self._run_or_defer(seq, check, out)
        return None

    def _on_annotation(self, index, obj, seq, out):
        _item, part = self._part(index, obj, "output_text", None)
        part.annotations.append(obj.get("annotation"))
        return None

    def _on_args_delta(self, index, obj, seq, out):
        item = self._item(index, obj, "function_call", out)
        if item.done:
            self._after_done(index, item, item.done_seq, seq, "output_item.done", out)
        item.args.append(self._key(seq), _str(obj.get("delta")))
        return OUTPUT

    def _on_args_done(self, index, obj, seq, out):
        item = self._item(index, obj, "function_call", None)
        value = obj.get("arguments", obj.get("input", obj.get("code")))
        if isinstance(value, str):
            item.args_done = value
        return None

    def _reasoning_part(self, index, obj, out) -> tuple[_Item, _Part]:
        item = self._item(index, obj, "reasoning", out)
        if "summary" in obj["type"]:
            parts, key = item.summary, _int(obj.get("summary_index"))
        else:
            parts, key = item.reasoning, _int(obj.get("content_index"))
        key = key or 0
        part = parts.get(key)
        if part is None:
            part = parts[key] = _Part("summary_text")
        return item, part

    def _on_summary_part(self, index, obj, seq, out):
        _item, part = self._reasoning_part(index, obj, None)
        part.added = True
        return None

    def _on_reasoning_delta(self, index, obj, seq, out):
        item, part = self._reasoning_part(index, obj, out)
        if item.done:
            self._after_done(index, item, item.done_seq, seq, "output_item.done", out)
        part.buf.append(self._key(seq), _str(obj.get("delta")))
        return OUTPUT

    def _on_reasoning_done(self, index, obj, seq, out):
        _item, part = self._reasoning_part(index, obj, None)
        if isinstance(obj.get("text"), str):
            part.done_text = obj["text"]
        return None

    def _on_output_only(self, index, obj, seq, out):
        return OUTPUT

    def _on_rewrite(self, index, obj, seq, out):
        self.rewrite_announced = True
        return None

    def _on_terminal(self, index, obj, seq, out):
        etype = obj["type"]
        self.terminal_type, self.terminal_index = etype, index
        self._status = TERMINAL_STATUS[etype]
        response = obj.get("response")
        response = response if isinstance(response, dict) else {}
        self.upstream_id = self.upstream_id or _str(response.get("id"))
        self.response_model = _str(response.get("model")) or self.response_model
        self.usage = response["usage"] if isinstance(response.get("usage"), dict) else {}
        if etype == "error":
            nested = obj.get("error") if isinstance(obj.get("error"), dict) else {}
            self.error_code = _str(obj.get("code")) or _str(nested.get("code"))
            self.error_message = _str(obj.get("message")) or _str(nested.get("message"))
        elif etype == "response.failed":
            error = response.get("error") if isinstance(response.get("error"), dict) else {}
            self.error_code = _str(error.get("code")) or self.error_code
            self.error_message = _str(error.get("message")) or self.error_message
        elif etype == "response.incomplete":
            details = response.get("incomplete_details")
            if isinstance(details, dict):
                self.incomplete_reason = _str(details.get("reason"))
        self.final_text = _final_text(obj)
        if self.final_text is not None:

            def check() -> list[Violation]:
                # Against the final output (each part's .done text where it has one): a part
                # whose .done disagrees with its deltas, or was rewritten, is reported at that
                # .done already, and a terminal that agrees with it repeats no fact.
                assembled, final = self.output_text, self.final_text
                if assembled == final:
                    return []
                if self.rewrite_announced:
                    return [
                        _v("rewritten_text", index, assembled, final, word_diff(assembled, final))
                    ]
                return [
                    _v(
                        "final_text_mismatch",
                        index,
                        assembled,
                        final,
                        _first_difference(assembled, final),
                    )
                ]

            self._run_or_defer(seq, check, out)
        return TERMINAL

    # ---- reading the reassembled response ---------------------------------------------------

    @property
    def status(self) -> str:
        """completed | incomplete | failed | truncated (closed without a terminal) | streaming"""
        return self._status

    @property
    def resolved_model(self) -> str:
        return _str(self.routing.get("model_id")) or self.response_model

    @property
    def output_text(self) -> str:
        """As the openai SDK's `Response.output_text`: every output_text part of every message,
        in output order, each its final text (`_Part.text`: the .done text, which after a
        rewrite pass is the rewritten one, else its deltas)."""
        return "".join(
            part.text()
            for _, item in sorted(self._items.items())
            if item.type == "message"
            for _, part in sorted(item.parts.items())
            if part.type == "output_text"
        )

    def items(self) -> list[dict]:
        """The output items in output_index order, JSON-able, for storage and display."""
        result = []
        for oi, item in sorted(self._items.items()):
            kind = ITEM_KINDS.get(item.type)
            if kind == "message":
                entry = {"output_index": oi, "type": "message", "id": _str(item.get("id"))}
                status = item.get("status")
                if status:
                    entry["status"] = status
                entry["parts"] = [
                    self._part_dict(ci, part) for ci, part in sorted(item.parts.items())
                ]
            elif kind == "tool":
                streamed = item.args.text()
                final = item.args_done
                if final is None:
                    final = item.get("input" if item.type == "custom_tool_call" else "arguments")
                    final = final if isinstance(final, str) and final else None
                arguments = final if final is not None else streamed
                entry = {
                    "output_index": oi,
                    "type": item.type,
                    "id": _str(item.get("id")),
                    "name": _str(item.get("name")),
                    "call_id": _str(item.get("call_id")),
                    "arguments": arguments,
                    "status": _str(item.get("status")),
                    "output": item.get("output"),
                }
                if item.args and streamed != arguments:
                    entry["streamed_arguments"] = streamed
            elif kind == "reasoning":
                summary = [p.text() for _, p in sorted(item.summary.items())]
                if not summary and item.done_item:
                    summary = [
                        s.get("text", "")
                        for s in item.done_item.get("summary") or ()
                        if isinstance(s, dict)
                    ]
                entry = {"output_index": oi, "type": "reasoning", "summary": summary}
                if item.reasoning:
                    entry["content"] = [p.text() for _, p in sorted(item.reasoning.items())]
            else:
                entry = {"output_index": oi, "type": item.type, "item": item.done_item or item.item}
                if item.args:
                    entry["streamed"] = item.args.text()
            result.append(entry)
        return result

    @staticmethod
    def _part_dict(ci: int, part: _Part) -> dict:
        """`text` is the final text, `streamed_text` the deltas' when they differ from it
        (`rewritten`: by an announced rewrite pass; else a text_mismatch). Rows stored before
        this shape have the deltas as `text` and a differing .done text as `done_text`;
        streams.shapes.public.output reads both."""
        entry = {"content_index": ci, "type": part.type, "text": part.text()}
        entry["done"] = part.done_text is not None
        streamed = part.streamed()
        if streamed is not None:
            entry["streamed_text"] = streamed
            if part.rewritten:
                entry["rewritten"] = True
        if part.annotations:
            entry["annotations"] = part.annotations
        return entry


# The Checker method that applies each event type. A type not here changes no state: a known
# one is applied as it is (its envelope checked), an unknown one is reported once per type.
EVENT_HANDLERS: dict[str, Callable[[Checker, int, dict, int | None, list], str | None]] = {
    "response.created": Checker._on_created,
    "response.routing.completed": Checker._on_routing,
    "response.output_item.added": Checker._on_item_added,
    "response.output_item.done": Checker._on_item_done,
    "response.content_part.added": Checker._on_part_added,
    "response.content_part.done": Checker._on_part_done,
    "response.output_text.delta": Checker._on_text_delta,
    "response.refusal.delta": Checker._on_text_delta,
    "response.output_text.done": Checker._on_text_done,
    "response.refusal.done": Checker._on_text_done,
    "response.output_text.annotation.added": Checker._on_annotation,
    "response.function_call_arguments.delta": Checker._on_args_delta,
    "response.custom_tool_call_input.delta": Checker._on_args_delta,
    "response.mcp_call_arguments.delta": Checker._on_args_delta,
    "response.code_interpreter_call_code.delta": Checker._on_args_delta,
    "response.function_call_arguments.done": Checker._on_args_done,
    "response.custom_tool_call_input.done": Checker._on_args_done,
    "response.mcp_call_arguments.done": Checker._on_args_done,
    "response.code_interpreter_call_code.done": Checker._on_args_done,
    "response.reasoning_summary_part.added": Checker._on_summary_part,
    "response.reasoning_summary_text.delta": Checker._on_reasoning_delta,
    "response.reasoning_text.delta": Checker._on_reasoning_delta,
    "response.reasoning_summary_text.done": Checker._on_reasoning_done,
    "response.reasoning_text.done": Checker._on_reasoning_done,
    "response.audio.transcript.delta": Checker._on_output_only,
    "response.rewrite.in_progress": Checker._on_rewrite,
    "response.completed": Checker._on_terminal,
    "response.incomplete": Checker._on_terminal,
    "response.failed": Checker._on_terminal,
    "error": Checker._on_terminal,
}


def check_events(
    events: Iterable[tuple], *, connection_closed: bool = True, **checker_options
) -> tuple[Checker, list[Violation]]:
    """Check a whole stored or imported stream: `(index, event_name, data[, t_us])` tuples."""
    checker = Checker(**checker_options)
    feed = checker.feed
    for event in events:
        index, event_name, data = event[0], event[1], event[2]
        feed(index, event_name, data, t_us=event[3] if len(event) > 3 else None)
    checker.close(connection_closed=connection_closed)
    return checker, checker.violations


# The helpers the other formats' checkers (streams/core/formats/) build on, by public names.
finding = _v
as_int = _int
as_str = _str
short = _short
