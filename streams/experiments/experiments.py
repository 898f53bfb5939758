"""Experiments made and checked in one place, for the page, the API and the command."""

from django.db import transaction

from streams.experiments import datasets
from streams.models import Experiment, Variant

MAX_VARIANTS = 6
MAX_CONCURRENCY = 200
EFFORTS = ("minimal", "low", "medium", "high")
MAX_NAME = 100


def _variant(data, position):
    """The columns of one variant from `data` (a dict), or Refused."""
    if not isinstance(data, dict):
        raise datasets.Refused("A variant is an object with at least a 'model'.")
    known = {
        "name",
        "model",
        "instructions",
        "temperature",
        "reasoning_effort",
        "max_output_tokens",
        "tools",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise datasets.Refused(f"Unknown variant field {unknown[0]!r}.")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 100:
        raise datasets.Refused("Each variant needs a model (at most 100 characters).")
    temperature = data.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise datasets.Refused("'temperature' must be a number.")
        if not 0 <= temperature <= 2:
            raise datasets.Refused("'temperature' must be between 0 and 2.")
    effort = data.get("reasoning_effort") or ""
    if effort not in ("", *EFFORTS):
        raise datasets.Refused(f"'reasoning_effort' must be one of {', '.join(EFFORTS)}.")
    tokens = data.get("max_output_tokens")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 1_000_000
    ):
        raise datasets.Refused("'max_output_tokens' must be a whole number from 1.")
    tools = data.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or datasets.json_chars(tools) > datasets.MAX_TOOLS_CHARS
    ):
        # (bounded as an item's are)
        raise datasets.Refused(
            f"'tools' must be a list of at most {datasets.MAX_TOOLS_CHARS:,} characters."
        )
    instructions = data.get("instructions") or ""
    if not isinstance(instructions, str):
        raise datasets.Refused("'instructions' must be a text.")
    name = data.get("name") or model
    if not isinstance(name, str) or len(name) > MAX_NAME:
        raise datasets.Refused("A variant's name is a text of at most 100 characters.")
    return Variant(
        position=position,
        name=name.strip(),
        model=model.strip(),
        instructions=instructions,
        temperature=temperature,
        reasoning_effort=effort,
        max_output_tokens=tokens,
        tools=tools,
    )


def parse_variant(text):
    """A variant from the command line: `MODEL` or `MODEL;key=value;…` (keys: name,
    instructions, temperature, reasoning_effort (or effort), max_output_tokens)."""
    model, *pairs = text.split(";")
    data = {"model": model.strip()}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = {"effort": "reasoning_effort"}.get(key.strip(), key.strip())
        if not sep:
            raise datasets.Refused(f"Not key=value: {pair!r}.")
        if key == "temperature":
            try:
                data[key] = float(value)
            except ValueError:
                raise datasets.Refused("'temperature' must be a number.") from None
        elif key == "max_output_tokens":
            if not value.strip().isdigit():
                raise datasets.Refused("'max_output_tokens' must be a whole number.")
            data[key] = int(value)
        else:
            data[key] = value
    return data


def create(project, *, name, version, variants, concurrency=5, user=None, evaluators=()):
    """A new experiment of `project` over dataset `version` with `variants` (dicts), or
    Refused. `evaluators`: of the same project."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME:
        raise datasets.Refused("An experiment needs a name of at most 100 characters.")
    if version.dataset.project_id != project.pk:
        raise datasets.Refused("No such dataset in this project.")
    if not version.items.exists():
        raise datasets.Refused("The dataset has no items.")
    if not 1 <= len(variants) <= MAX_VARIANTS:
        raise datasets.Refused(f"An experiment has 1 to {MAX_VARIANTS} variants.")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        raise datasets.Refused("'concurrency' must be a whole number.")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise datasets.Refused(f"'concurrency' must be from 1 to {MAX_CONCURRENCY}.")
    built = [_variant(data, position) for position, data in enumerate(variants)]
    if len({v.name for v in built}) != len(built):
        raise datasets.Refused("Two variants have the same name.")
    if any(e.project_id != project.pk for e in evaluators):
        raise datasets.Refused("No such evaluator in this project.")
    with transaction.atomic():
        experiment = Experiment.objects.create(
            project=project,
            name=name,
            dataset_version=version,
            concurrency=concurrency,
            created_by=user if getattr(user, "pk", None) else None,
        )
        for variant in built:
            variant.experiment = experiment
        Variant.objects.bulk_create(built)
        experiment.evaluators.set(evaluators)
    return experiment
