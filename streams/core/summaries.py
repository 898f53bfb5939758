"""How each protocol event type is summarised in one line (the event table's "summary" column):
protocol knowledge, kept in the engine beside the checker's item kinds (`checks.ITEM_KINDS`),
as pure functions of an event's type and data. The pages call `event_summary`.

The data is untrusted and returned verbatim (clipped, never marked safe): the page it lands on
leaves through the egress gate (streams/serve/egress.py), which takes out a secret even when the
clipping cut it.
"""

import json

from django.utils.translation import ngettext

SUMMARY_MAX = 160  # characters of an event's one-line summary


def _clip(text, limit=SUMMARY_MAX):
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _quoted(text, limit=SUMMARY_MAX):
    return _clip(json.dumps(text, ensure_ascii=False), limit)


def _where(obj):
    oi, ci = obj.get("output_index"), obj.get("content_index")
    if oi is None:
        return ""
    return f" [{oi}:{ci}]" if ci is not None else f" [{oi}]"


def event_summary(type_, data, is_json=True):
    """One line about an event for the table: the delta text, the item, the error, …
    (`data` verbatim: the page leaves through the egress gate)."""
    data = data or ""
    if not is_json:
        return "not JSON: " + _clip(data, SUMMARY_MAX - 10)
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return "not JSON: " + _clip(data, SUMMARY_MAX - 10)
    if not isinstance(obj, dict):
        return _clip(data)
    t = type_ or obj.get("type") or ""
    return _summarizer(t)(obj)


def _summarizer(type_):
    """The summary of an event of this type: by its exact type, else by how its type ends
    (a family: every `….delta`, every `…_text.done`), else the generic one."""
    summarize = _SUMMARY_BY_TYPE.get(type_)
    if summarize is None:
        ending = next((e for e in _SUMMARY_BY_ENDING if type_.endswith(e)), None)
        summarize = _SUMMARY_BY_ENDING[ending] if ending else _summary_other
    return summarize


def _chars(n):
    """A length in characters, as the page's language says it."""
    return ngettext("%(n)s char", "%(n)s chars", n) % {"n": n}


def _summary_delta(obj):
    delta = obj.get("delta")
    return _quoted(delta if isinstance(delta, str) else str(delta)) + _where(obj)


def _summary_text_done(obj):
    text = obj.get("text", obj.get("refusal"))
    if not isinstance(text, str):
        return _summary_other(obj)
    return _chars(len(text)) + f"{_where(obj)}: " + _quoted(text, 100)


def _summary_input_done(obj):
    value = obj.get("arguments", obj.get("input"))
    return _quoted(value if isinstance(value, str) else str(value)) + _where(obj)


def _summary_item(obj):
    item = obj.get("item") if isinstance(obj.get("item"), dict) else {}
    bits = [str(item.get("type") or "item")]
    bits += [str(item[key]) for key in ("name", "call_id", "id", "status") if item.get(key)]
    return _clip(" ".join(bits) + _where(obj))


def _summary_part(obj):
    part = obj.get("part") if isinstance(obj.get("part"), dict) else {}
    return _clip(str(part.get("type") or "part") + _where(obj))


def _summary_routing(obj):
    extra = ", ".join(str(obj[k]) for k in ("category", "source") if obj.get(k))
    return _clip(f"→ {obj.get('model_id', '?')}" + (f" ({extra})" if extra else ""))


def _summary_error(obj):
    nested = obj.get("error") if isinstance(obj.get("error"), dict) else {}
    code = obj.get("code") or nested.get("code") or ""
    message = obj.get("message") or nested.get("message") or ""
    return _clip(f"{code}: {message}" if code else str(message))


def _summary_other(obj):
    """A response (created, terminal, …), a terminal event's `final_text`, or the fields."""
    response = obj.get("response")
    if isinstance(response, dict):
        bits = [str(response.get(k)) for k in ("id", "status", "model") if response.get(k)]
        text = response.get("output_text")
        if isinstance(text, str) and text:
            bits.append(_chars(len(text)))
        return _clip(" ".join(bits))
    if isinstance(obj.get("final_text"), str):
        return "final_text, " + _chars(len(obj["final_text"]))
    rest = {k: v for k, v in obj.items() if k not in ("type", "sequence_number")}
    return _clip(json.dumps(rest, ensure_ascii=False)) if rest else ""


_SUMMARY_BY_TYPE = {
    "response.refusal.done": _summary_text_done,
    "response.output_item.added": _summary_item,
    "response.output_item.done": _summary_item,
    "response.content_part.added": _summary_part,
    "response.content_part.done": _summary_part,
    "response.routing.completed": _summary_routing,
    "error": _summary_error,
}
# (no event type ends in two of these)
_SUMMARY_BY_ENDING = {
    ".delta": _summary_delta,
    "_text.done": _summary_text_done,  # output_text, reasoning_text, reasoning_summary_text
    "arguments.done": _summary_input_done,
    "input.done": _summary_input_done,
}
