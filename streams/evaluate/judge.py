"""LLM-as-judge: a judge model asked, with a prompt made from the judged stream's redacted
input, output and expected output, for a score it answers as a number or a category.

The judge's call is a stream like any other, started through `streams.run.services` (the
per-user limit, the recording, the workers when configured, the live list), tagged `judge`
and carrying the judged stream's id in its metadata (JUDGED_KEY): online rules never judge a
judge. It is bounded twice: the judge's answer is read up to MAX_ANSWER_CHARS (and asked for
at most `max_output_tokens`), and a judge that has not finished after `timeout_s` is
cancelled and writes no score.
"""

from __future__ import annotations

import asyncio
import re

from asgiref.sync import async_to_sync, sync_to_async
from django.utils.translation import gettext

from streams.evaluate import kinds
from streams.models import Stream
from streams.run import services
from streams.store import known_secrets, rows

JUDGED_KEY = "streamscope_judged"
TAG = "judge"
PLACEHOLDERS = ("{{input}}", "{{output}}", "{{expected_output}}")
MAX_PROMPT_CHARS = 10_000
# each placeholder's text at most this long in the judge's prompt
MAX_FILLED_CHARS = 50_000
MAX_ANSWER_CHARS = 20_000
DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S = 60, 600
DEFAULT_MAX_OUTPUT_TOKENS = 1_000
# waiting for a judge recorded by a worker: the row is looked at this often
POLL_S = 0.2
# a cancelled judge's task is given this long to write its end
CANCEL_GRACE_S = 10

DEFAULT_PROMPT = (
    "You grade an assistant's answer.\n\nQuestion:\n{{input}}\n\nAnswer:\n{{output}}\n\n"
    "Expected answer (may be empty):\n{{expected_output}}\n\n"
    "Reply with 'Score: N' on the first line, N from 1 (wrong) to 5 (right), then "
    "'Reason: ' and one sentence."
)

ConfigError = kinds.ConfigError


def clean(config):
    """A judge's config: `model`, `prompt` (with {{output}}), `instructions`, the scale (a
    `minimum` and `maximum`, or `categories` [{label, value}]), `metadata` (sent with the
    request: the simulator's `scenario`), `timeout_s`, `max_output_tokens`."""
    if not isinstance(config, dict):
        raise ConfigError("config", gettext("The configuration is a JSON object."))
    model = kinds.text_of(config, "model", 100, required=True).strip()
    if not model or any(c.isspace() for c in model):
        raise ConfigError("model", gettext("A model id has no whitespace."))
    prompt = kinds.text_of(config, "prompt", MAX_PROMPT_CHARS) or DEFAULT_PROMPT
    if "{{output}}" not in prompt:
        raise ConfigError("prompt", gettext("The prompt shows the output: put {{output}} in it."))
    cleaned = {
        "model": model,
        "prompt": prompt,
        "instructions": kinds.text_of(config, "instructions", MAX_PROMPT_CHARS),
    }
    categories = config.get("categories") or []
    if categories:
        cleaned["categories"] = _categories(categories)
    else:
        lo = kinds.number_of(config, "minimum", minimum=-1e9)
        hi = kinds.number_of(config, "maximum", minimum=-1e9)
        lo, hi = (1.0 if lo is None else lo), (5.0 if hi is None else hi)
        if lo >= hi:
            raise ConfigError("maximum", gettext("The maximum is above the minimum."))
        cleaned["minimum"], cleaned["maximum"] = lo, hi
    cleaned["metadata"] = _metadata(config.get("metadata") or {})
    timeout = kinds.number_of(config, "timeout_s", minimum=1)
    cleaned["timeout_s"] = min(timeout or DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S)
    tokens = kinds.number_of(config, "max_output_tokens", minimum=1)
    cleaned["max_output_tokens"] = int(min(tokens or DEFAULT_MAX_OUTPUT_TOKENS, 100_000))
    return cleaned


def _categories(categories):
    if isinstance(categories, str):  # "label=value" a line (the form's)
        parsed = []
        for line in categories.splitlines():
            if line.strip():
                label, _, value = line.partition("=")
                try:
                    parsed.append({"label": label.strip(), "value": float(value)})
                except ValueError:
                    raise ConfigError(
                        "categories", gettext("Each line: a label = a number.")
                    ) from None
        categories = parsed
    if not isinstance(categories, list) or not 2 <= len(categories) <= kinds.MAX_CATEGORIES:
        raise ConfigError(
            "categories",
            gettext("From 2 to %(n)s categories.") % {"n": kinds.MAX_CATEGORIES},
        )
    seen, cleaned = set(), []
    for c in categories:
        label = c.get("label") if isinstance(c, dict) else None
        value = c.get("value") if isinstance(c, dict) else None
        if (
            not isinstance(label, str)
            or not label.strip()
            or len(label) > 50
            or isinstance(value, bool)
            or not isinstance(value, int | float)
        ):
            raise ConfigError(
                "categories",
                gettext("Each category: a label (up to 50 characters) and a number."),
            )
        if label.strip().casefold() in seen:
            raise ConfigError("categories", gettext("Each category's label once."))
        seen.add(label.strip().casefold())
        cleaned.append({"label": label.strip(), "value": float(value)})
    if len({c["value"] for c in cleaned}) < 2:
        raise ConfigError("categories", gettext("At least two different values."))
    return cleaned


def _metadata(metadata):
    if not isinstance(metadata, dict) or len(metadata) > 15:
        raise ConfigError("metadata", gettext("Metadata: an object of at most 15 texts."))
    for key, value in metadata.items():
        if key == JUDGED_KEY or len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise ConfigError("metadata", gettext("Metadata: an object of at most 15 texts."))
    return dict(metadata)


# ---------------------------------------------------------------------------------------------
# Asking


def prompt_for(config, subject: kinds.Subject) -> str:
    """The judge's prompt: the template with the subject's texts (redacted already) in place.
    Filled in one pass, so a judged output holding `{{expected_output}}` stays as it was written."""
    values = {
        "{{input}}": subject.input[:MAX_FILLED_CHARS],
        "{{output}}": subject.output[:MAX_FILLED_CHARS],
        "{{expected_output}}": (subject.expected or "")[:MAX_FILLED_CHARS],
    }
    return re.sub(
        "|".join(re.escape(p) for p in PLACEHOLDERS), lambda m: values[m.group(0)], config["prompt"]
    )


def body_for(config, subject, judged_id):
    metadata = {**config.get("metadata", {}), JUDGED_KEY: str(judged_id)}
    return rows.build_request_body(
        prompt_for(config, subject),
        config["model"],
        instructions=config.get("instructions", ""),
        max_output_tokens=config.get("max_output_tokens", DEFAULT_MAX_OUTPUT_TOKENS),
        metadata=metadata,
    )


def run(evaluator, stream, subject, user=None, for_run=False):
    """(Verdict, the judge's stream or None): ask the judge about `stream`, as `user` (by
    default the evaluator's author), and read its score."""
    if not subject.finished:
        return kinds.none(gettext("The stream has not finished.")), None
    user = user or evaluator.created_by
    if user is None:
        gone = gettext("No one to run the judge as: the evaluator's author is gone.")
        return kinds.none(gone), None
    config = evaluator.config
    body = body_for(config, subject, stream.pk)
    try:
        if for_run:
            # (an experiment's judges are as deliberate as its streams, and as many at most as
            # its concurrency: under the per-user limit of pages, a run of more than 5 at once
            # had its judges refused while its own streams were running)
            judge_stream = services.create_for_run(user, body, evaluator.project, tags=[TAG])
        else:
            judge_stream = services.create(user, body, project=evaluator.project, tags=[TAG])
    except services.TooMany as exc:
        return kinds.none(
            gettext("The judge was not started: %(why)s") % {"why": exc.message()}
        ), None
    finished = async_to_sync(_record)(judge_stream, config.get("timeout_s", DEFAULT_TIMEOUT_S))
    judge_stream.refresh_from_db()
    if not finished:
        return kinds.none(
            gettext("The judge did not answer within %(s)s s: cancelled.")
            % {"s": f"{config.get('timeout_s', DEFAULT_TIMEOUT_S):g}"}
        ), judge_stream
    if judge_stream.status != Stream.Status.COMPLETED:
        return kinds.none(
            gettext("The judge's stream ended %(status)s.")
            % {"status": judge_stream.get_status_display()}
        ), judge_stream
    answer = judge_stream.output_text or judge_stream.final_text or ""
    return parse(config, answer), judge_stream


async def _record(judge_stream, timeout_s):
    """Start the judge's stream the one way and wait for it to end, at most `timeout_s`
    (cancelled past it); True when it ended in time."""
    task = await services.start(judge_stream)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    if task is not None:
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
            return True
        except TimeoutError:
            pass
        except Exception:  # (the runner logged it; the row says how it ended)
            return True
    else:  # a worker records it: its row says when it has ended
        while loop.time() < deadline:
            if not await _active(judge_stream.pk):
                return True
            await asyncio.sleep(POLL_S)
    services.cancel(judge_stream)
    if task is not None:
        await asyncio.wait([task], timeout=CANCEL_GRACE_S)
    return False


@sync_to_async
def _active(stream_id):
    return Stream.objects.filter(pk=stream_id, status__in=Stream.ACTIVE_STATUSES).exists()


# ---------------------------------------------------------------------------------------------
# Reading the answer

_SCORE_LINE = re.compile(r"\bscore\s*[:=]\s*([^\n]{0,80})", re.I)
_NUMBER = re.compile(r"^[\s*\"'`]*(-?\d+(?:\.\d+)?)")
_REASON = re.compile(r"\breason\s*[:=]\s*([^\n]{1,400})", re.I)


def parse(config, answer) -> kinds.Verdict:
    """The score in a judge's `answer`: after `Score:` (or the whole answer), a number within
    the scale or one of the categories; no score, and why, otherwise."""
    answer = known_secrets.redact(answer[:MAX_ANSWER_CHARS])
    found = _SCORE_LINE.search(answer)
    said = (found.group(1) if found else answer.strip()[:80]).strip()
    why = _REASON.search(answer)
    reason = gettext("Judge: %(reason)s") % {"reason": why.group(1).strip()} if why else ""
    if config.get("categories"):
        word = said.strip(" *\"'`.").casefold()
        for c in config["categories"]:
            if word == c["label"].casefold() or word.startswith(c["label"].casefold() + " "):
                return kinds.Verdict(c["value"], c["label"], reason)
        labels = ", ".join(c["label"] for c in config["categories"])
        return kinds.none(
            gettext("The judge's answer names none of the categories (%(labels)s): %(said)s")
            % {"labels": labels, "said": _quoted(answer)}
        )
    number = _NUMBER.match(said)
    if number is None:
        return kinds.none(
            gettext("The judge's answer holds no score ('Score: N'): %(said)s")
            % {"said": _quoted(answer)}
        )
    value = float(number.group(1))
    lo, hi = config["minimum"], config["maximum"]
    if not lo <= value <= hi:
        return kinds.none(
            gettext("The judge answered %(value)s, outside %(lo)s to %(hi)s.")
            % {"value": f"{value:g}", "lo": f"{lo:g}", "hi": f"{hi:g}"}
        )
    return kinds.Verdict(value, "", reason)


def _quoted(answer):
    text = " ".join(answer.split())
    return f"“{text[:120]}…”" if len(text) > 120 else f"“{text}”"
