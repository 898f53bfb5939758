"""Dataset uploads: every bad line named by its number, nothing half-imported, the size bounded
before a byte is parsed; items from streams built from the redacted view."""

import io
import json

import pytest

from streams.experiments import datasets, uploads
from streams.models import DatasetItem, Project, Stream
from streams.store import known_secrets
from tests.support.recording import recorded, text_events


def jsonl(*lines):
    return "\n".join(lines).encode()


def test_good_jsonl_lines_become_items():
    items, errors = uploads.parse(
        jsonl(
            json.dumps({"input": "What is 2+2?", "expected_output": "4"}),
            "",
            json.dumps(
                {
                    "input": [{"role": "user", "content": "hi"}],
                    "instructions": "Be brief.",
                    "tools": [{"type": "function", "name": "f"}],
                    "metadata": {"topic": "greeting"},
                }
            ),
        )
    )
    assert errors == []
    assert [i["input"] for i in items] == ["What is 2+2?", [{"role": "user", "content": "hi"}]]
    assert items[0]["expected_output"] == "4" and items[1]["instructions"] == "Be brief."


def test_every_bad_line_is_reported_by_number_and_nothing_is_kept():
    items, errors = uploads.parse(
        jsonl(
            json.dumps({"input": "fine"}),
            "{not json",
            json.dumps({"input": ""}),
            json.dumps({"input": "x", "colour": "red"}),
            json.dumps({"input": "x", "metadata": [1]}),
            json.dumps({"input": "fine too"}),
            "[" * 100 + "]" * 100,
        )
    )
    assert items == []
    assert [n for n, _ in errors] == [2, 3, 4, 5, 7]
    assert "Not JSON" in errors[0][1] and "'input' is empty" in errors[1][1]
    assert "'colour'" in errors[2][1] and "'metadata'" in errors[3][1]


def test_csv_with_a_header_and_a_json_column():
    data = (
        b'input,expected_output,metadata\n"What, exactly?",yes,"{""a"": 1}"\nSecond,,\n'
        b'Third,no,"{broken"\n'
    )
    items, errors = uploads.parse(data, "set.csv")
    assert items == [] and errors == [(4, errors[0][1])]
    assert "JSON" in errors[0][1]
    items, errors = uploads.parse(data.rsplit(b"Third", 1)[0], "set.csv")
    assert errors == []
    assert [(i["input"], i["expected_output"], i["metadata"]) for i in items] == [
        ("What, exactly?", "yes", {"a": 1}),
        ("Second", "", {}),
    ]


def test_csv_without_an_input_column_and_non_utf8_are_refused():
    assert uploads.parse(b"question,answer\nq,a\n", "x.csv") == (
        [],
        [(1, "The header row has no 'input' column.")],
    )
    items, errors = uploads.parse(b'{"input": "caf\xe9"}')
    assert items == [] and "not UTF-8" in errors[0][1]


def test_a_declared_gigabyte_is_refused_before_reading_and_a_lying_stream_while_reading():
    with pytest.raises(uploads.TooLarge) as refused:
        uploads.refuse_declared(str(1024**3))
    assert refused.value.limit == uploads.max_bytes()
    uploads.refuse_declared(str(uploads.max_bytes()))  # (at the limit: read)

    class Endless(io.RawIOBase):
        """A body without end: never more than the bound is read from it."""

        read_total = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            Endless.read_total += len(buffer)
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    with pytest.raises(uploads.TooLarge):
        uploads.read_bounded(io.BufferedReader(Endless()), limit=1000)
    assert Endless.read_total <= 1001 + io.DEFAULT_BUFFER_SIZE


@pytest.mark.django_db
def test_items_from_a_stream_carry_no_secret_and_adding_is_all_or_nothing(
    people, settings, monkeypatch
):
    secret = "sk-proj-" + "Q7w" * 12
    settings.UPSTREAM_API_KEY = secret
    known_secrets.forget_all()
    project = Project.personal(people.owner)
    stream = recorded(
        people.owner,
        text_events("the key is ", secret, " ok"),
        project=project,
        request_body={"input": f"repeat {secret}", "instructions": f"use {secret}"},
    )
    dataset = datasets.create(project, "leaks", user=people.owner)
    datasets.add_streams(dataset, Stream.objects.filter(pk=stream.pk))
    item = DatasetItem.objects.get(version__dataset=dataset)
    assert item.source_stream_id == stream.pk
    stored = json.dumps([item.input, item.instructions, item.expected_output])
    assert secret not in stored and secret[:20] not in stored
    assert "the key is" in item.expected_output
    # over the limit after a frozen version: no item, and no new version either
    datasets.freeze(datasets.latest(dataset))
    monkeypatch.setattr(datasets, "MAX_ITEMS", 2)
    with pytest.raises(datasets.Refused):
        datasets.add(dataset, [datasets.clean_item({"input": "ok"})] * 2)
    assert DatasetItem.objects.filter(version__dataset=dataset).count() == 1
    assert dataset.versions.count() == 1
