"""The datasets and experiments pages (dashboard/views/experiments.py): viewers read, members
make and run, someone outside the project finds nothing; uploads all or nothing with every bad
line named, a declared gigabyte refused before it is read; results and exports from the
streams' own rows; a secret in an answer does not come back through a diff or an export."""

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from streams.experiments import datasets, experiments, results, uploads
from streams.models import Dataset, DatasetItem, Membership, Project, Stream
from streams.store import known_secrets
from tests.support.experiments import finished_run, made

pytestmark = pytest.mark.django_db


class TestPages:
    @pytest.fixture(autouse=True)
    def _setup(self, db):
        users = get_user_model().objects
        self.people = {n: users.create_user(n) for n in ("owner", "member", "viewer", "outsider")}
        self.team = Project.objects.create(name="Team", slug="team")
        for role in ("owner", "member", "viewer"):
            Membership.objects.create(project=self.team, user=self.people[role], role=role)
        Project.personal(self.people["outsider"])
        self.made = made(self.people["owner"], self.team)

    def client(self, who):
        client = Client()
        client.force_login(self.people[who])
        client.get("/", {"project": "team"} if who != "outsider" else {})
        return client

    def test_viewers_read_members_make_outsiders_find_nothing(self):
        m = self.made
        pages = [
            reverse("dataset_list"),
            reverse("dataset_detail", args=[m.dataset.pk]),
            reverse("experiment_list"),
            reverse("experiment_detail", args=[m.experiment.pk]),
            reverse("run_detail", args=[m.run.pk]),
            reverse("run_compare", args=[m.run.pk, m.earlier.pk]),
            reverse("run_export_csv", args=[m.run.pk]),
            reverse("run_export_json", args=[m.run.pk]),
        ]
        for url in pages:
            assert self.client("viewer").get(url).status_code == 200, url
        for url in pages[1:2] + pages[3:]:
            assert self.client("outsider").get(url).status_code == 404, url
        viewer = self.client("viewer")
        assert viewer.post(reverse("dataset_list"), {"name": "x"}).status_code == 403
        assert viewer.post(reverse("run_cancel", args=[m.run.pk])).status_code == 403
        assert "Start a run" not in viewer.get(pages[3]).content.decode()
        member = self.client("member")
        r = member.post(reverse("dataset_list"), {"name": "fresh"})
        assert r.status_code == 302
        assert Dataset.objects.filter(project=self.team, name="fresh").exists()
        assert "Start a run" in member.get(pages[3]).content.decode()

    def test_a_variants_tools_are_set_in_the_form_and_sent_with_each_item(self):
        from streams.experiments import runs
        from streams.models import Experiment

        tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
        form = {"name": "with tools", "dataset": self.made.dataset.pk, "concurrency": 2,
                "v1_model": "gpt-oss-20b", "v1_tools": json.dumps([tool]),
                "v2_model": "eu-reasoner"}  # fmt: skip
        member = self.client("member")
        assert 'name="v1_tools"' in member.get(reverse("experiment_list")).content.decode()
        bad = member.post(reverse("experiment_list"), {**form, "v1_tools": '{"type": 1}'})
        assert bad.status_code == 400 and not Experiment.objects.filter(name="with tools")
        assert "A JSON list of tool objects" in bad.content.decode()

        assert member.post(reverse("experiment_list"), form).status_code == 302

        made = Experiment.objects.get(name="with tools")
        with_tools, own = made.variants.order_by("position")
        assert (with_tools.tools, own.tools) == ([tool], None)
        item = made.dataset_version.items.first()
        assert runs.request_body(item, with_tools)["tools"] == [tool]
        assert "tools" not in runs.request_body(item, own)  # (the item has none of its own)

    def test_the_lists_filter_is_added_to_a_dataset_all_or_nothing(self):
        # the made runs' streams are of the team: the tag of the later run finds its 6
        tag = f"run:{self.made.run.pk}"
        member = self.client("member")
        url = reverse("streams_add_to_dataset") + f"?tag={tag}"
        page = member.get(url)
        assert page.status_code == 200 and "6 streams match" in page.content.decode()
        r = member.post(url, {"new_name": "from the list"})
        assert r.status_code == 302
        dataset = Dataset.objects.get(project=self.team, name="from the list")
        items = DatasetItem.objects.filter(version__dataset=dataset)
        assert items.count() == 6
        assert {i.source_stream.tags[0] for i in items.select_related("source_stream")} == {tag}
        # a filter that finds nothing adds nothing, and leaves no empty new dataset behind
        r = member.post(reverse("streams_add_to_dataset") + "?tag=none", {"new_name": "empty"})
        assert r.status_code == 400
        assert not Dataset.objects.filter(name="empty").exists()
        assert self.client("viewer").post(url, {"new_name": "x"}).status_code == 403

    def test_the_run_page_shows_the_streams_own_figures_and_a_diff(self):
        page = self.client("viewer").get(reverse("run_detail", args=[self.made.run.pk]))
        text = page.content.decode()
        # three items: TTFT 100/200/300 ms (+ the variant's position): p50 200, p95 300
        assert text.count('class="variant-summary"') == 2
        assert '<td class="num ttft-p50">200</td>' in text.replace("200.0", "200")
        assert "<ins>Item</ins>" in text or "<ins>" in text  # diff against the expected output
        assert text.count('class="run-item"') == 3

    def test_the_comparison_names_the_changed_items(self):
        m = self.made
        third = finished_run(
            m.experiment,
            self.people["owner"],
            answer_of=lambda p, v, n: "Something else." if p == 2 else f"Item {p} by {v} in run 1.",
        )
        text = self.client("viewer").get(reverse("run_compare", args=[third.pk, m.earlier.pk]))
        body = text.content.decode()
        changed = body[body.index('id="changed"') :]
        # only item 2 changed (1 and 3 answer as in run 1), with both variants, all words new
        assert changed.count('data-position="2"') == 2 and "Something else." in changed
        assert 'data-position="1"' not in changed and 'data-position="3"' not in changed
        shares = [int(n) for n in re.findall(r'class="num">(\d+)%<', changed)]
        assert len(shares) == 2 and all(80 <= n < 100 for n in shares)  # (the "." is kept)

    def test_exports_agree_with_the_page(self):
        client = self.client("viewer")
        data = json.loads(client.get(reverse("run_export_json", args=[self.made.run.pk])).content)
        assert [v["ttft_p50_ms"] for v in data["variants"]] == [200.0, 201.0]
        assert len(data["items"]) == 6 and data["items"][0]["answer"].startswith("Item 1 by")
        csv_text = b"".join(client.get(reverse("run_export_csv", args=[self.made.run.pk]))).decode()
        lines = csv_text.strip().splitlines()
        assert lines[0].startswith("item,variant,model,stream,status,ttft_ms")
        assert len(lines) == 7


class TestUploads:
    @pytest.fixture(autouse=True)
    def _setup(self, db):
        self.user = get_user_model().objects.create_user("owner")
        self.project = Project.personal(self.user)
        self.client = Client()
        self.client.force_login(self.user)
        self.client.post(reverse("dataset_list"), {"name": "up"})
        self.dataset = Dataset.objects.get(name="up")
        self.url = reverse("dataset_upload", args=[self.dataset.pk])

    def upload(self, content, name="items.jsonl", **extra):
        return self.client.post(self.url, {"file": SimpleUploadedFile(name, content)}, **extra)

    def test_a_good_file_adds_every_line(self):
        r = self.upload(b'{"input": "a"}\n{"input": "b", "expected_output": "B"}\n')
        assert r.status_code == 302
        assert list(DatasetItem.objects.values_list("input", flat=True)) == ["a", "b"]

    def test_bad_lines_are_named_and_nothing_is_added(self):
        r = self.upload(b'{"input": "a"}\n{oops\n{"input": ""}\n')
        assert r.status_code == 400
        text = r.content.decode()
        assert "Line 2:" in text and "Line 3:" in text and "Line 1:" not in text
        assert DatasetItem.objects.count() == 0

    def test_a_declared_gigabyte_is_refused_with_its_limit_before_reading(self):
        r = self.client.post(
            self.url,
            data=b"",
            content_type="multipart/form-data; boundary=x",
            CONTENT_LENGTH=str(1024**3),
        )
        assert r.status_code == 413
        assert f"{uploads.max_bytes():,}" in r.content.decode()
        assert DatasetItem.objects.count() == 0


def test_a_secret_in_an_answer_does_not_come_back_through_the_results(settings, db):
    """The word diff cuts an answer into pieces, each sent as its own text: the egress gate
    would see the secret's tail apart from its head. So the diff is of the redacted answers
    (streams/experiments/answers.py); this fails when it is not."""
    secret = "sk-proj-" + "Zx9" * 12
    settings.UPSTREAM_API_KEY = secret
    known_secrets.forget_all()
    user = get_user_model().objects.create_user("owner")
    project = Project.personal(user)
    dataset = datasets.create(project, "leak", user=user)
    datasets.add(
        dataset, [datasets.clean_item({"input": "q", "expected_output": "the key sk-proj- ok"})]
    )
    experiment = experiments.create(
        project, name="leak", version=datasets.latest(dataset), variants=[{"model": "m"}]
    )
    earlier = finished_run(experiment, user)
    leaky = finished_run(experiment, user, answer_of=lambda p, v, n: f"the key {secret} ok")
    client = Client()
    client.force_login(user)
    for url in (
        reverse("run_detail", args=[leaky.pk]),
        reverse("run_compare", args=[leaky.pk, earlier.pk]),
        reverse("run_export_json", args=[leaky.pk]),
        reverse("run_export_csv", args=[leaky.pk]),
    ):
        response = client.get(url)
        body = b"".join(response) if response.streaming else response.content
        assert response.status_code == 200
        assert b"Zx9Zx9" not in body, url
        assert b"the key" in re.sub(rb"<[^>]+>", b"", body), url
    assert Stream.objects.filter(final_text__contains=secret).exists()  # (stored as it came)
    # and before the gate: what the results build holds no piece of it (the gate is the last
    # line, not the only one: a piece short enough would pass it)
    items = results.item_rows(leaky).rows
    built = [c.answer for row in items for c in row.cells]
    built += [text for row in items for c in row.cells for _op, text in c.diff]
    built += [json.dumps(row) for row in results.export_rows(leaky)]
    built += [c.after_value for c in results.compare(earlier, leaky)["changed"]]
    assert built and not [b for b in built if "Zx9" in b]


def test_an_item_without_its_stream_is_left_out_of_the_comparison(db):
    user = get_user_model().objects.create_user("owner")
    m = made(user, Project.personal(user), items=2, models=("a",))
    # the stream of item 1 in the later run was deleted (retention, by hand)
    Stream.objects.filter(run_item__run=m.run, run_item__item__position=1).delete()
    client = Client()
    client.force_login(user)
    response = client.get(reverse("run_compare", args=[m.run.pk, m.earlier.pk]))
    assert response.status_code == 200
    assert results.compare(m.earlier, m.run)["pairs"] == 1
