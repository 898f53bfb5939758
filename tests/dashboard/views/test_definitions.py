"""A project's score types and prices (dashboard/views/definitions.py,
streams/access/definitions.py): everyone in the project reads them with the instance's; its
admins add, change and delete its own; bad input is a 400 naming the field; a type in use
keeps its kind and range; another project's are not found; every change is audited."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from streams.access import members
from streams.models import AuditEntry, Membership, Price, ScoreType, Stream
from streams.store import scores

pytestmark = pytest.mark.django_db

NUMERIC = {"name": "accuracy", "kind": "numeric", "minimum": "1", "maximum": "5"}
PRICE = {
    "model_pattern": "eu-gpt-*",
    "effective_from": "2026-01-01T00:00",
    "currency": "USD",
    "input_per_million": "0.5",
    "output_per_million": "2",
}


@pytest.fixture
def team():
    make = get_user_model().objects.create_user
    people = {n: make(n) for n in ("owner", "admin", "member", "viewer", "stranger")}
    project = members.create(people["owner"], "Search team")
    for role in ("admin", "member", "viewer"):
        Membership.objects.create(project=project, user=people[role], role=role)
    elsewhere = members.create(people["stranger"], "Elsewhere")
    clients = {}
    for name, user in people.items():
        clients[name] = Client()
        clients[name].force_login(user)
    return project, elsewhere, people, clients


class TestScoreTypes:
    def test_admins_add_change_and_delete_and_the_others_read(self, team):
        project, elsewhere, people, c = team
        base = f"/projects/{project.slug}/score-types"
        for who, status in (("member", 403), ("viewer", 403), ("stranger", 404)):
            assert c[who].post(f"{base}/new/", NUMERIC).status_code == status, who
        assert c["admin"].post(f"{base}/new/", NUMERIC).status_code == 302
        made = ScoreType.objects.get(project=project, name="accuracy")
        assert (made.kind, made.minimum, made.maximum) == ("numeric", 1, 5)
        for who in ("member", "viewer", "admin"):
            page = c[who].get(f"{base}/").content.decode()
            assert 'data-name="accuracy" data-own="1"' in page, who
            assert 'data-name="thumbs" data-own="0"' in page, who  # the instance's
            assert ("New score type" in page) == (who == "admin"), who
        assert c["stranger"].get(f"{base}/").status_code == 404
        changed = {**NUMERIC, "maximum": "10", "description": "How right"}
        assert c["admin"].post(f"{base}/{made.pk}/", changed).status_code == 302
        made.refresh_from_db()
        assert (made.maximum, made.description) == (10, "How right")
        assert c["member"].post(f"{base}/{made.pk}/delete/").status_code == 403
        assert c["admin"].post(f"{base}/{made.pk}/delete/").status_code == 302
        assert not ScoreType.objects.filter(pk=made.pk).exists()
        said = list(
            AuditEntry.objects.filter(project=project, target_type="score_type")
            .order_by("at", "pk")
            .values_list("action", "actor_id")
        )
        assert [a for a, _ in said] == [
            "score_type.created",
            "score_type.changed",
            "score_type.deleted",
        ]
        assert {actor for _, actor in said} == {people["admin"].pk}

    def test_categories_are_typed_one_a_line(self, team):
        project, _elsewhere, _people, c = team
        form = {"name": "tone", "kind": "categorical", "categories": "rude = 0\nkind = 1\n"}
        assert (
            c["admin"].post(f"/projects/{project.slug}/score-types/new/", form).status_code == 302
        )
        made = ScoreType.objects.get(project=project, name="tone")
        assert made.categories == [{"label": "rude", "value": 0}, {"label": "kind", "value": 1}]
        assert (made.minimum, made.maximum) == (0, 1)

    @pytest.mark.parametrize(
        ("form", "field"),
        [
            ({**NUMERIC, "name": ""}, "name"),
            ({**NUMERIC, "name": "not a slug!"}, "name"),
            ({**NUMERIC, "kind": "stars"}, "kind"),
            ({**NUMERIC, "minimum": "5", "maximum": "1"}, "maximum"),
            ({**NUMERIC, "maximum": ""}, "maximum"),
            ({**NUMERIC, "maximum": "nan"}, "maximum"),
            ({"name": "tone", "kind": "categorical", "categories": "rude"}, "categories"),
            ({"name": "tone", "kind": "categorical", "categories": "a = 1\na = 2"}, "categories"),
            ({"name": "tone", "kind": "categorical", "categories": "only = 1"}, "categories"),
            ({**NUMERIC, "name": "thumbs"}, "name"),  # the instance's
            ({**NUMERIC, "description": "x" * 301}, "description"),
        ],
    )
    def test_bad_input_is_a_400_naming_the_field(self, team, form, field):
        project, _elsewhere, _people, c = team
        scores.thumbs()
        answer = c["admin"].post(f"/projects/{project.slug}/score-types/new/", form)
        assert answer.status_code == 400
        assert f'data-field="{field}"' in answer.content.decode()
        assert not ScoreType.objects.filter(project=project).exists()

    def test_a_type_in_use_keeps_its_range_and_stays(self, team):
        project, _elsewhere, people, c = team
        made = ScoreType.objects.create(project=project, name="accuracy", kind="numeric", maximum=5)
        stream = Stream.objects.create(user=people["member"], project=project, status="completed")
        scores.give(stream.pk, author=people["member"], name="accuracy", value=4, source="person")
        base = f"/projects/{project.slug}/score-types/{made.pk}"
        moved = c["admin"].post(f"{base}/", {**NUMERIC, "minimum": "0", "maximum": "3"})
        assert moved.status_code == 409 and "Make a new type" in moved.content.decode()
        assert ScoreType.objects.get(pk=made.pk).maximum == 5
        described = {**NUMERIC, "minimum": "0", "maximum": "5", "description": "Right?"}
        assert c["admin"].post(f"{base}/", described).status_code == 302
        assert c["admin"].post(f"{base}/delete/").status_code == 409
        assert ScoreType.objects.filter(pk=made.pk).exists()

    def test_another_projects_type_is_not_found_nor_offered(self, team):
        project, elsewhere, people, c = team
        theirs = ScoreType.objects.create(project=elsewhere, name="secret", kind="thumbs")
        base = f"/projects/{project.slug}/score-types/{theirs.pk}"
        assert c["admin"].post(f"{base}/", NUMERIC).status_code == 404
        # deleting: nothing of this project's to delete (as for one deleted already)
        assert c["admin"].post(f"{base}/delete/").status_code == 302
        assert ScoreType.objects.filter(pk=theirs.pk).exists()
        assert (
            "secret"
            not in c["admin"].get(f"/projects/{project.slug}/score-types/").content.decode()
        )
        stream = Stream.objects.create(user=people["member"], project=project, status="completed")
        with pytest.raises(scores.Invalid):  # (a stream of this project: not its type)
            scores.give(stream.pk, author=people["member"], name="secret", value=1, source="api")
        assert "secret" not in [t.name for t in scores.types(project)]


class TestPrices:
    def test_admins_add_change_and_delete_and_the_others_read(self, team):
        project, _elsewhere, people, c = team
        base = f"/projects/{project.slug}/prices"
        for who, status in (("member", 403), ("viewer", 403), ("stranger", 404)):
            assert c[who].post(f"{base}/new/", PRICE).status_code == status, who
        assert c["admin"].post(f"{base}/new/", PRICE).status_code == 302
        made = Price.objects.get(project=project)
        assert (made.model_pattern, made.currency, str(made.input_per_million)) == (
            "eu-gpt-*",
            "USD",
            "0.500000",
        )
        for who in ("member", "viewer"):
            page = c[who].get(f"{base}/").content.decode()
            assert 'data-pattern="eu-gpt-*" data-own="1"' in page and "New price" not in page
        assert (
            c["admin"].post(f"{base}/{made.pk}/", {**PRICE, "output_per_million": "3"}).status_code
            == 302
        )
        assert str(Price.objects.get(pk=made.pk).output_per_million) == "3.000000"
        assert c["admin"].post(f"{base}/{made.pk}/delete/").status_code == 302
        actions = list(
            AuditEntry.objects.filter(project=project, target_type="price").values_list(
                "action", flat=True
            )
        )
        assert sorted(actions) == ["price.changed", "price.created", "price.deleted"]

    @pytest.mark.parametrize(
        ("form", "field"),
        [
            ({**PRICE, "model_pattern": ""}, "model_pattern"),
            ({**PRICE, "effective_from": "soon"}, "effective_from"),
            ({**PRICE, "currency": "GBP"}, "currency"),
            ({**PRICE, "input_per_million": "-1"}, "input_per_million"),
            ({**PRICE, "output_per_million": "1e30"}, "output_per_million"),
            ({**PRICE, "reasoning_per_million": "lots"}, "reasoning_per_million"),
        ],
    )
    def test_bad_input_is_a_400_naming_the_field(self, team, form, field):
        project, _elsewhere, _people, c = team
        answer = c["admin"].post(f"/projects/{project.slug}/prices/new/", form)
        assert answer.status_code == 400, answer.content.decode()[-500:]
        assert f'data-field="{field}"' in answer.content.decode()
        assert not Price.objects.filter(project=project).exists()

    def test_the_same_pattern_and_moment_twice_is_a_400(self, team):
        project, _elsewhere, _people, c = team
        assert c["admin"].post(f"/projects/{project.slug}/prices/new/", PRICE).status_code == 302
        again = c["admin"].post(f"/projects/{project.slug}/prices/new/", PRICE)
        assert again.status_code == 400 and 'data-field="effective_from"' in again.content.decode()
        assert Price.objects.filter(project=project).count() == 1

    def test_another_projects_price_is_not_found(self, team):
        project, elsewhere, _people, c = team
        theirs = Price.objects.create(
            project=elsewhere,
            model_pattern="x",
            effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            input_per_million=1,
            output_per_million=1,
        )
        base = f"/projects/{project.slug}/prices/{theirs.pk}"
        assert c["admin"].post(f"{base}/", PRICE).status_code == 404
        assert c["admin"].post(f"{base}/delete/").status_code == 302  # (nothing of this one's)
        assert Price.objects.filter(pk=theirs.pk).exists()
