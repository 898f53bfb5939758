"""What each kind of evaluator checks, on text that is already redacted: pure functions of a
config and a `Subject`, each giving a `Verdict` (a value and label for a score, or the reason
there is none). The config's rules, and the score type each kind writes, live here too, so a
form, the API and `apply` read one definition (docs/experiments.md, "Evaluators").

A regular expression is someone's input run over an upstream's output: it runs with the `regex`
module's timeout (REGEX_TIMEOUT_S), so a pattern that would backtrack for minutes stops and says
so instead of holding a worker.
"""

from __future__ import annotations

import dataclasses
import json
import re

import jsonschema
import regex
from django.utils.translation import gettext

from streams.models import Evaluator, ScoreType

Kind = Evaluator.Kind

PASS, FAIL = "pass", "fail"
PASS_FAIL = [{"label": FAIL, "value": 0}, {"label": PASS, "value": 1}]
DETERMINISTIC = tuple(k for k in Kind if k != Kind.JUDGE)

# bounds on what a config may hold (it is someone's input, stored and run)
MAX_TEXT_CHARS = 10_000
MAX_PATTERN_CHARS = 1_000
MAX_SCHEMA_CHARS = 50_000
MAX_CATEGORIES = 20
# the most of an output a check reads: a 1 MB answer is judged on its first MAX_OUTPUT_CHARS
MAX_OUTPUT_CHARS = 200_000
REGEX_TIMEOUT_S = 0.5

# what an answer that refuses usually starts with (lower case); a config may name its own
REFUSALS = (
    "i can't",
    "i cannot",
    "i can not",
    "i'm sorry",
    "i am sorry",
    "i'm unable",
    "i am unable",
    "i won't",
    "i will not",
    "as an ai",
    "sorry, but",
    "i'm not able",
    "i am not able",
)


@dataclasses.dataclass(frozen=True)
class Subject:
    """What an evaluator reads of a stream, redacted: its input (the prompt), its output, the
    expected output if there is one, and its timings."""

    input: str = ""
    output: str = ""
    expected: str | None = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    finished: bool = True


@dataclasses.dataclass(frozen=True)
class Verdict:
    value: float | None = None
    label: str = ""
    reason: str = ""

    @property
    def scored(self):
        return self.value is not None


def passed(ok, reason):
    return Verdict(1.0 if ok else 0.0, PASS if ok else FAIL, reason)


def none(reason):
    return Verdict(None, "", reason)


class ConfigError(ValueError):
    """A config that cannot be used: `field` and a message for a form or a 400."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field, self.message = field, message


# ---------------------------------------------------------------------------------------------
# Configs


def text_of(config, field, limit=MAX_TEXT_CHARS, required=False):
    value = config.get(field, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ConfigError(field, gettext("%(field)s: a text.") % {"field": field})
    if required and not value:
        raise ConfigError(field, gettext("%(field)s: required.") % {"field": field})
    if len(value) > limit:
        raise ConfigError(
            field,
            gettext("%(field)s: at most %(limit)s characters.") % {"field": field, "limit": limit},
        )
    return value


def number_of(config, field, required=False, minimum=0):
    value = config.get(field)
    if value in (None, ""):
        if required:
            raise ConfigError(field, gettext("%(field)s: required.") % {"field": field})
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        try:
            value = float(value) if isinstance(value, str) else None
        except ValueError:
            value = None
        if value is None or value < minimum or value != value:
            raise ConfigError(
                field,
                gettext("%(field)s: a number of at least %(minimum)s.")
                % {"field": field, "minimum": minimum},
            )
    return float(value)


def clean(kind, config) -> dict:
    """The config a deterministic `kind` runs with, from what someone gave (a dict);
    ConfigError otherwise (a judge's: `judge.clean`)."""
    if not isinstance(config, dict):
        raise ConfigError("config", gettext("The configuration is a JSON object."))
    cleaned = {}
    if kind in (Kind.EXACT, Kind.CONTAINS):
        cleaned["text"] = text_of(config, "text")
        cleaned["case_sensitive"] = bool(config.get("case_sensitive", kind == Kind.EXACT))
    elif kind == Kind.REGEX:
        pattern = text_of(config, "pattern", MAX_PATTERN_CHARS, required=True)
        try:
            regex.compile(pattern)
        except regex.error as exc:
            raise ConfigError(
                "pattern", gettext("Not a regular expression: %(error)s") % {"error": exc}
            ) from None
        cleaned["pattern"] = pattern
        cleaned["case_sensitive"] = bool(config.get("case_sensitive", True))
    elif kind == Kind.JSON_SCHEMA:
        schema = config.get("schema")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError:
                raise ConfigError("schema", gettext("The schema is not JSON.")) from None
        if not isinstance(schema, dict | bool):
            raise ConfigError("schema", gettext("A JSON Schema: an object."))
        if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
            raise ConfigError(
                "schema",
                gettext("The schema: at most %(limit)s characters.") % {"limit": MAX_SCHEMA_CHARS},
            )
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigError(
                "schema", gettext("Not a JSON Schema: %(error)s") % {"error": exc.message[:200]}
            ) from None
        cleaned["schema"] = schema
    elif kind == Kind.LENGTH:
        cleaned["min"] = number_of(config, "min")
        cleaned["max"] = number_of(config, "max")
        if cleaned["min"] is None and cleaned["max"] is None:
            raise ConfigError("min", gettext("Give a least or a most length, or both."))
        if None not in (cleaned["min"], cleaned["max"]) and cleaned["min"] > cleaned["max"]:
            raise ConfigError("max", gettext("The most is below the least."))
        unit = config.get("unit") or "chars"
        if unit not in ("chars", "words"):
            raise ConfigError("unit", gettext("Characters or words."))
        cleaned["unit"] = unit
    elif kind == Kind.REFUSAL:
        phrases = config.get("phrases") or []
        if isinstance(phrases, str):
            phrases = [p for p in phrases.splitlines()]
        if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
            raise ConfigError("phrases", gettext("Phrases: a list of texts."))
        phrases = [p.strip().lower() for p in phrases if p.strip()][:100]
        cleaned["phrases"] = [p[:200] for p in phrases]
    elif kind in (Kind.TTFT, Kind.DURATION):
        cleaned["max_ms"] = number_of(config, "max_ms", required=True)
    elif kind != Kind.JSON_VALID:
        raise ConfigError("kind", gettext("No such kind of evaluator."))
    return cleaned


def score_type_fields(kind, config) -> dict:
    """The score type a `kind` evaluator with `config` writes: pass (1) or fail (0), or the
    judge's scale."""
    if kind == Kind.JUDGE:
        if config.get("categories"):
            values = [c["value"] for c in config["categories"]]
            return {
                "kind": ScoreType.Kind.CATEGORICAL,
                "minimum": min(values),
                "maximum": max(values),
                "categories": config["categories"],
            }
        return {
            "kind": ScoreType.Kind.NUMERIC,
            "minimum": config["minimum"],
            "maximum": config["maximum"],
            "categories": [],
        }
    return {
        "kind": ScoreType.Kind.CATEGORICAL,
        "minimum": 0,
        "maximum": 1,
        "categories": PASS_FAIL,
    }


# ---------------------------------------------------------------------------------------------
# The checks


def check(kind, config, subject: Subject) -> Verdict:
    """The verdict of a deterministic `kind` on `subject` (never raises on what it reads)."""
    if kind in (Kind.TTFT, Kind.DURATION):
        return _timing(kind, config, subject)
    if not subject.finished:
        return none(gettext("The stream has not finished."))
    output = subject.output[:MAX_OUTPUT_CHARS]
    return _CHECKS[kind](config, output, subject)


def _fold(text, case_sensitive):
    return text if case_sensitive else text.casefold()


def _wanted(config, subject):
    return config.get("text") or subject.expected


def _exact(config, output, subject):
    wanted = _wanted(config, subject)
    if wanted is None:
        return none(gettext("Nothing to compare with: no text set and no expected output."))
    cs = config.get("case_sensitive", True)
    ok = _fold(output.strip(), cs) == _fold(wanted.strip(), cs)
    return passed(
        ok,
        gettext("The output is the expected text.")
        if ok
        else gettext("The output differs from the expected text."),
    )


def _contains(config, output, subject):
    wanted = _wanted(config, subject)
    if not wanted:
        return none(gettext("Nothing to look for: no text set and no expected output."))
    cs = config.get("case_sensitive", False)
    ok = _fold(wanted, cs) in _fold(output, cs)
    return passed(
        ok,
        gettext("The output contains the text.")
        if ok
        else gettext("The output does not contain the text."),
    )


def _regex(config, output, subject):
    flags = 0 if config.get("case_sensitive", True) else regex.IGNORECASE
    try:
        found = regex.search(config["pattern"], output, flags, timeout=REGEX_TIMEOUT_S)
    except TimeoutError:
        return none(
            gettext("The regular expression took over %(s)s s on this output: stopped.")
            % {"s": REGEX_TIMEOUT_S}
        )
    except regex.error as exc:
        return none(gettext("Not a regular expression: %(error)s") % {"error": exc})
    return passed(
        found is not None,
        gettext("The pattern matches the output.")
        if found
        else gettext("The pattern does not match the output."),
    )


# a fenced block (```json … ```) around JSON is how models often answer; read what is inside
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*?)\n\s*```\s*$", re.S)


def _json_of(output):
    fenced = _FENCE.match(output)
    text = fenced.group(1) if fenced else output
    return json.loads(text)


def _json_valid(config, output, subject):
    try:
        _json_of(output)
    except ValueError as exc:
        return passed(False, gettext("Not JSON: %(error)s") % {"error": str(exc)[:200]})
    return passed(True, gettext("The output is JSON."))


def _json_schema(config, output, subject):
    try:
        document = _json_of(output)
    except ValueError as exc:
        return passed(False, gettext("Not JSON: %(error)s") % {"error": str(exc)[:200]})
    validator = _bounded(jsonschema.validators.validator_for(config["schema"]))(config["schema"])
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    except TimeoutError:
        return none(
            gettext("A pattern of the schema took over %(s)s s on this output: stopped.")
            % {"s": REGEX_TIMEOUT_S}
        )
    if error is None:
        return passed(True, gettext("The output is valid against the schema."))
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    # (the message may quote the output: it is redacted already, and cut)
    return passed(
        False,
        gettext("Not valid against the schema at %(where)s: %(error)s")
        % {"where": where[:100], "error": error.message[:200]},
    )


def _search(pattern, text):
    """A schema's `pattern` searched with the timeout (TimeoutError past it): a schema is
    someone's input too, and jsonschema's own keywords use `re`, which has none."""
    if not isinstance(text, str):
        return True
    return regex.search(pattern, text, timeout=REGEX_TIMEOUT_S) is not None


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance[:100]!r} does not match {pattern[:100]!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


_BOUNDED = {}


def _bounded(cls):
    """`cls` (a jsonschema validator class) with its pattern keywords bounded in time."""
    if cls not in _BOUNDED:
        _BOUNDED[cls] = jsonschema.validators.extend(
            cls, {"pattern": _pattern, "patternProperties": _pattern_properties}
        )
    return _BOUNDED[cls]


def _length(config, output, subject):
    words = config.get("unit") == "words"
    n = len(output.split()) if words else len(output)
    lo, hi = config.get("min"), config.get("max")
    ok = (lo is None or n >= lo) and (hi is None or n <= hi)
    bounds = f"[{'' if lo is None else f'{lo:g}'}, {'' if hi is None else f'{hi:g}'}]"
    what = gettext("words") if words else gettext("characters")
    return passed(
        ok,
        (
            gettext("%(n)s %(what)s, within %(bounds)s.")
            if ok
            else gettext("%(n)s %(what)s, outside %(bounds)s.")
        )
        % {"n": n, "what": what, "bounds": bounds},
    )


def _refusal(config, output, subject):
    phrases = config.get("phrases") or REFUSALS
    head = " ".join(output[:300].lower().replace("\u2019", "'").split())
    refused = next((p for p in phrases if p in head), None)
    if refused is None and not output.strip():
        return passed(False, gettext("The output is empty."))
    return passed(
        refused is None,
        gettext("Not a refusal.")
        if refused is None
        else gettext("A refusal (it says %(phrase)r).") % {"phrase": refused[:60]},
    )


def _timing(kind, config, subject):
    measured = subject.ttft_ms if kind == Kind.TTFT else subject.duration_ms
    what = gettext("Time to first token") if kind == Kind.TTFT else gettext("Duration")
    if measured is None:
        return none(gettext("%(what)s was not measured on this stream.") % {"what": what})
    bound = config["max_ms"]
    ok = measured <= bound
    return passed(
        ok,
        (
            gettext("%(what)s %(ms)s ms, within %(bound)s ms.")
            if ok
            else gettext("%(what)s %(ms)s ms, over %(bound)s ms.")
        )
        % {"what": what, "ms": f"{measured:.0f}", "bound": f"{bound:g}"},
    )


_CHECKS = {
    Kind.EXACT: _exact,
    Kind.CONTAINS: _contains,
    Kind.REGEX: _regex,
    Kind.JSON_VALID: _json_valid,
    Kind.JSON_SCHEMA: _json_schema,
    Kind.LENGTH: _length,
    Kind.REFUSAL: _refusal,
}
