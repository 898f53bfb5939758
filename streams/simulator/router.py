"""Rule-based router for ``model: "auto"``.

The rules are applied in order; the first that matches decides the category, and the category
decides the model:

=========== ============================================================ ==================
category    rule                                                          model
=========== ============================================================ ==================
tools       the request has ``tools``, or the input mentions weather,     gpt-oss-120b
            a tool, a function or a call
reasoning   the input is longer than 400 characters, or asks to prove,    eu-reasoner
            reason, explain step by step, ...
code        the input looks like code (fences, ``def``/``class``/...)      qwen3-coder
chat        anything else                                                 mistral-small-3.2
=========== ============================================================ ==================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LONG_INPUT_CHARS = 400

CATEGORY_MODELS = {
    "tools": "gpt-oss-120b",
    "reasoning": "eu-reasoner",
    "code": "qwen3-coder",
    "chat": "mistral-small-3.2",
}

_TOOL_RE = re.compile(r"\b(weather|weer|tools?|functions?|call|calls|lookup|look up)\b", re.I)
_REASON_RE = re.compile(
    r"\b(prove|proof|bewijs|step by step|stap voor stap|reason|reasoning|derive|why)\b", re.I
)
_CODE_RE = re.compile(
    r"```|\bdef \w+\(|\bclass \w+|\bfunction \w*\(|\bimport \w+|=>|#include|\bSELECT\b.*\bFROM\b"
    r"|\b(python|javascript|typescript|rust|golang|sql|regex|bug|stack trace|compile)\b",
    re.I,
)


@dataclass(frozen=True)
class RoutingDecision:
    model_id: str
    category: str
    source: str
    reasoning: str

    def as_event_fields(self) -> dict:
        return {
            "model_id": self.model_id,
            "category": self.category,
            "source": self.source,
            "reasoning": self.reasoning,
        }


def route(text: str, has_tools: bool = False) -> RoutingDecision:
    """Choose a concrete model for ``model: "auto"`` from the request text."""

    def decide(category: str, why: str) -> RoutingDecision:
        return RoutingDecision(CATEGORY_MODELS[category], category, "rules", why)

    if has_tools:
        return decide("tools", "The request declares tools, so a tool-capable model was chosen.")
    m = _TOOL_RE.search(text)
    if m:
        return decide("tools", f"The input mentions '{m.group(0).lower()}', which needs tools.")
    if len(text) > LONG_INPUT_CHARS:
        return decide(
            "reasoning", f"Input length {len(text)} chars > {LONG_INPUT_CHARS}; long context."
        )
    m = _REASON_RE.search(text)
    if m:
        return decide("reasoning", f"The input asks for reasoning ('{m.group(0).lower()}').")
    m = _CODE_RE.search(text)
    if m:
        return decide("code", "The input looks like source code or a programming question.")
    return decide("chat", "Short conversational input; a fast chat model suffices.")
