"""Datasets: made, filled and versioned here, for every caller (pages, the API, uploads).

A version an experiment refers to is frozen; adding to its dataset then makes a new version
with the same items and the new ones, so a finished result never changes under its reader.
An item is checked once (`clean_item`), whatever it came from.
"""

import json

from django.db import transaction
from django.db.models import Max

from streams.core import conf
from streams.experiments import answers
from streams.models import Dataset, DatasetItem, DatasetVersion, Stream

# items one version may hold, and one bulk add from the stream list may take
MAX_ITEMS = 100_000
MAX_FROM_LIST = 1000
MAX_METADATA_CHARS = 4000
MAX_TOOLS_CHARS = 100_000


class Refused(ValueError):
    """An item (or a set of them) that cannot be added; its text says why."""


def create(project, name, *, user=None, description=""):
    """A new dataset with its (empty) first version."""
    name = (name or "").strip()
    if not name:
        raise Refused("A dataset needs a name.")
    with transaction.atomic():
        if Dataset.objects.filter(project=project, name=name).exists():
            raise Refused(f"The project already has a dataset named {name!r}.")
        dataset = Dataset.objects.create(
            project=project, name=name, description=description, created_by=user
        )
        DatasetVersion.objects.create(dataset=dataset, number=1)
    return dataset


def listed(queryset):
    """The datasets of `queryset` with their latest version's number and item count."""
    from django.db.models import Count, OuterRef, Subquery

    latest_version = DatasetVersion.objects.filter(dataset=OuterRef("pk")).order_by("-number")
    return (
        queryset.annotate(
            version_number=Subquery(latest_version.values("number")[:1]),
            item_count=Subquery(latest_version.annotate(n=Count("items")).values("n")[:1]),
        )
        .select_related("created_by")
        .order_by("name")[:200]
    )


def latest(dataset):
    return dataset.versions.order_by("-number").first()


def freeze(version):
    """`version` is used by an experiment: its items never change from now on."""
    if not version.frozen:
        DatasetVersion.objects.filter(pk=version.pk).update(frozen=True)
        version.frozen = True


def _editable(dataset):
    """The version an edit goes into: the latest while no experiment uses it, else a new one
    holding the latest's items (call in a transaction)."""
    current = latest(dataset)
    if current is not None and not current.frozen:
        return current
    number = (current.number if current is not None else 0) + 1
    version = DatasetVersion.objects.create(dataset=dataset, number=number)
    if current is not None:
        copies = [
            DatasetItem(
                version=version,
                position=item.position,
                input=item.input,
                instructions=item.instructions,
                tools=item.tools,
                expected_output=item.expected_output,
                metadata=item.metadata,
                source_stream_id=item.source_stream_id,
            )
            for item in current.items.order_by("position").iterator(chunk_size=2000)
        ]
        DatasetItem.objects.bulk_create(copies, batch_size=2000)
    return version


def add(dataset, items):
    """Add `items` (dicts as `clean_item` returns) to `dataset`, all or none; returns the
    version they went into."""
    items = list(items)
    with transaction.atomic():
        # one edit of a dataset at a time: positions are numbered from the last one
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        version = _editable(dataset)
        start = (version.items.aggregate(n=Max("position"))["n"] or 0) + 1
        if start - 1 + len(items) > MAX_ITEMS:
            raise Refused(f"A dataset version holds at most {MAX_ITEMS:,} items.")
        DatasetItem.objects.bulk_create(
            [
                DatasetItem(version=version, position=start + i, **item)
                for i, item in enumerate(items)
            ],
            batch_size=2000,
        )
    return version


def json_chars(value):
    return len(json.dumps(value, ensure_ascii=False))


def clean_item(data):
    """The columns of an item from `data` (an upload's line, an API body's item): `input` a
    non-empty string or a list of input items; optional `instructions`, `tools` (a list),
    `expected_output` (or `expected`), `metadata` (an object). Raises Refused."""
    if not isinstance(data, dict):
        raise Refused("An item is an object with at least an 'input'.")
    known = {"input", "instructions", "tools", "expected_output", "expected", "metadata"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise Refused(f"Unknown field {unknown[0]!r}.")
    value = data.get("input")
    if isinstance(value, str):
        if not value.strip():
            raise Refused("'input' is empty.")
    elif not (isinstance(value, list) and value and all(isinstance(v, dict) for v in value)):
        raise Refused("'input' must be a text or a list of input items.")
    if json_chars(value) > conf.get().max_input_chars:
        raise Refused(f"'input' is over {conf.get().max_input_chars:,} characters.")
    instructions = data.get("instructions") or ""
    if not isinstance(instructions, str) or len(instructions) > conf.get().max_input_chars:
        raise Refused("'instructions' must be a text of at most the input's length.")
    tools = data.get("tools") or []
    if not isinstance(tools, list) or json_chars(tools) > MAX_TOOLS_CHARS:
        raise Refused(f"'tools' must be a list of at most {MAX_TOOLS_CHARS:,} characters.")
    expected = data.get("expected_output", data.get("expected")) or ""
    if not isinstance(expected, str):
        raise Refused("'expected_output' must be a text.")
    if len(expected) > DatasetItem._meta.get_field("expected_output").max_length:
        raise Refused("'expected_output' is too long.")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict) or json_chars(metadata) > MAX_METADATA_CHARS:
        raise Refused(f"'metadata' must be an object of at most {MAX_METADATA_CHARS:,} characters.")
    return {
        "input": value,
        "instructions": instructions,
        "tools": tools,
        "expected_output": expected,
        "metadata": metadata,
    }


def _redacted_json(value):
    """`value` (a request's input or tools) with every string redacted."""
    if isinstance(value, str):
        return answers.redacted(value)
    if isinstance(value, list):
        return [_redacted_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _redacted_json(v) for k, v in value.items()}
    return value


def item_from_stream(stream, *, with_answer=True):
    """An item replaying `stream`'s request: its input, instructions and tools, and (with
    `with_answer`) its answer as the expected output; built from the redacted view, as
    everything derived from stored text is."""
    body = stream.request_body if isinstance(stream.request_body, dict) else {}
    value = body.get("input")
    if not (isinstance(value, str) and value.strip()) and not isinstance(value, list):
        value = stream.prompt
    instructions = body.get("instructions")
    tools = body.get("tools")
    return {
        "input": _redacted_json(value or ""),
        "instructions": answers.redacted(instructions) if isinstance(instructions, str) else "",
        "tools": _redacted_json(tools) if isinstance(tools, list) else [],
        "expected_output": answers.answer_of(stream) if with_answer else "",
        # (the request's metadata: the simulator's scenario and pace come again on a replay)
        "metadata": _redacted_json(body["metadata"])
        if isinstance(body.get("metadata"), dict)
        else {},
        "source_stream_id": stream.pk,
    }


def add_streams(dataset, streams, *, with_answer=True):
    """Add the streams of `streams` (a queryset the caller narrowed to what its user may read;
    the first MAX_FROM_LIST, oldest first) as items; returns (version, how many)."""
    chosen = list(streams.order_by("created_at", "pk")[:MAX_FROM_LIST])
    if not chosen:
        raise Refused("No streams to add.")
    items = [item_from_stream(stream, with_answer=with_answer) for stream in chosen]
    return add(dataset, items), len(items)


def add_found(project, streams, dataset, *, user=None, with_answer=True):
    """Add `streams` (a queryset of `project`'s the caller narrowed to what its user may read:
    a filter or search of the list) to `dataset` (an id of the project's, or a new one's name);
    returns the dataset. All or nothing: a new dataset is not left empty."""
    with transaction.atomic():
        if isinstance(dataset, int):
            found = Dataset.objects.filter(project=project, pk=dataset).first()
            if found is None:
                raise Refused("No such dataset in this project.")
        else:
            found = create(project, dataset, user=user)
        add_streams(found, streams, with_answer=with_answer)
    return found


def add_stream(stream, dataset, *, user=None, with_answer=True):
    """Add `stream` to `dataset` (an id of a dataset of the stream's project, or the name of a
    new one); returns the dataset."""
    return add_found(
        stream.project,
        Stream.objects.filter(pk=stream.pk),
        dataset,
        user=user,
        with_answer=with_answer,
    )
