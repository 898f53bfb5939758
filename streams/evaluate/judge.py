"""LLM-as-judge: a judge model asked, with a prompt made from the judged stream's redacted
input, output and expected output, for a score it answers as a number or a category."""

from __future__ import annotations

from django.utils.translation import gettext

from streams.evaluate import kinds


def clean(config):
    raise kinds.ConfigError("kind", gettext("LLM as judge is not available yet."))


def run(evaluator, stream, subject):
    return kinds.none(gettext("LLM as judge is not available yet.")), None
