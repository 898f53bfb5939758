"""The evaluators' pages (dashboard/views/evaluators.py): making one, a new version on each
edit, trying it on a stream, a viewer reads and may not edit, an online rule's page saying it
stopped at its spend cap or passes streams over its hourly budget."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from streams import evaluate
from streams.evaluate import online
from streams.models import Evaluator, Membership, OnlineRule, Project, Score, Stream

# (trying runs on a thread of its own: it sees committed rows only)
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team():
    users = get_user_model().objects
    project = Project.objects.create(name="Team", slug="team")
    people = {}
    for role in ("member", "viewer"):
        people[role] = users.create_user(f"ann-{role}")
        Membership.objects.create(project=project, user=people[role], role=role)
    return project, people


def client_of(user):
    client = Client()
    client.force_login(user)
    client.get("/?project=team")
    return client


def test_a_member_makes_an_evaluator_and_each_edit_is_a_version(team):
    project, people = team
    member = client_of(people["member"])
    r = member.post("/evaluators/new/", {"name": "short", "kind": "length", "max": "5"})
    assert r.status_code == 302
    made = Evaluator.objects.get()
    assert (made.project, made.version, made.config["max"]) == (project, 1, 5.0)
    r = member.post(f"/evaluators/{made.pk}/", {"kind": "length", "max": "9"})
    assert r.status_code == 302
    made.refresh_from_db()
    assert (made.version, made.config["max"]) == (2, 9.0)
    page = member.get(f"/evaluators/{made.pk}/").content.decode()
    assert "short@v2" in page


def test_a_bad_config_is_a_400_on_its_field(team):
    member = client_of(team[1]["member"])
    r = member.post("/evaluators/new/", {"name": "re", "kind": "regex", "pattern": "("})
    assert r.status_code == 400
    assert "Not a regular expression" in r.content.decode()
    assert not Evaluator.objects.exists()


def test_trying_it_on_a_stream_scores_it(team):
    project, people = team
    made = evaluate.save(project, name="has-x", kind="contains", config={"text": "x"})
    stream = Stream.objects.create(project=project, status="completed", output_text="xyz")
    r = client_of(people["member"]).post(f"/evaluators/{made.pk}/try/", {"stream": stream.pk})
    assert r.status_code == 200
    assert "Scored pass as has-x@v1." in r.content.decode()
    assert Score.objects.get(stream=stream).key == "has-x@v1"


def test_a_stream_of_another_project_is_not_tried(team):
    project, people = team
    made = evaluate.save(project, name="has-x", kind="contains", config={"text": "x"})
    elsewhere = Stream.objects.create(status="completed", output_text="xyz")
    r = client_of(people["member"]).post(f"/evaluators/{made.pk}/try/", {"stream": elsewhere.pk})
    assert r.status_code == 404 and not Score.objects.exists()


def test_a_viewer_reads_and_may_not_edit(team):
    project, people = team
    made = evaluate.save(project, name="short", kind="length", config={"max": 5})
    viewer = client_of(people["viewer"])
    page = viewer.get(f"/evaluators/{made.pk}/")
    assert page.status_code == 200 and "Save as a new version" not in page.content.decode()
    assert viewer.post(f"/evaluators/{made.pk}/", {"kind": "length", "max": "9"}).status_code == 403
    assert viewer.get("/evaluators/new/").status_code == 403
    made.refresh_from_db()
    assert made.version == 1


def test_a_rules_page_says_it_stopped_and_that_it_passes_streams(team):
    project, people = team
    made = evaluate.save(project, name="short", kind="length", config={"max": 5})
    rule = online.create(project, user=people["member"], name="r", evaluators=[made])
    OnlineRule.objects.filter(pk=rule.pk).update(
        stopped_reason=online.SPEND_CAP_REACHED, over_budget=7, over_budget_at=timezone.now()
    )
    page = client_of(people["viewer"]).get(f"/evaluators/rules/{rule.pk}/").content.decode()
    assert "Stopped: Its spend cap was reached." in page
    assert "Its budget of 100 judgements an hour is used up" in page
    OnlineRule.objects.filter(pk=rule.pk).update(
        over_budget_at=timezone.now() - dt.timedelta(hours=2)
    )
    page = client_of(people["viewer"]).get(f"/evaluators/rules/{rule.pk}/").content.decode()
    assert "is used up" not in page


def test_saving_a_rule_clears_its_stop(team):
    project, people = team
    made = evaluate.save(project, name="short", kind="length", config={"max": 5})
    rule = online.create(project, user=people["member"], name="r", evaluators=[made])
    OnlineRule.objects.filter(pk=rule.pk).update(stopped_reason=online.SPEND_CAP_REACHED)
    form = {"name": "r", "evaluators": [made.pk], "enabled": "on", "sample_rate": "1",
            "per_hour": "100", "spend_cap": "2.5"}  # fmt: skip
    r = client_of(people["member"]).post(f"/evaluators/rules/{rule.pk}/", form)
    assert r.status_code == 302
    rule.refresh_from_db()
    assert (rule.stopped_reason, rule.spend_cap_nanos) == ("", 2_500_000_000)


def test_deleting_an_evaluator_keeps_its_scores_and_stops_what_applied_it(team):
    from tests.support import experiments as made_runs

    project, people = team
    made = evaluate.save(project, name="has-x", kind="contains", config={"text": "x"})
    stream = Stream.objects.create(project=project, status="completed", output_text="xyz")
    assert evaluate.apply(made, stream=stream).written
    rule = online.create(project, user=people["member"], name="r", evaluators=[made])
    experiment = made_runs.made(people["member"], project, items=1).experiment
    experiment.evaluators.add(made)
    viewer, member = client_of(people["viewer"]), client_of(people["member"])
    assert "Delete the evaluator" not in viewer.get(f"/evaluators/{made.pk}/").content.decode()
    assert viewer.post(f"/evaluators/{made.pk}/delete/").status_code == 403
    assert "Delete the evaluator" in member.get(f"/evaluators/{made.pk}/").content.decode()

    r = member.post(f"/evaluators/{made.pk}/delete/")

    assert r.status_code == 302 and r["Location"] == "/evaluators/"
    assert not Evaluator.objects.exists()
    assert list(rule.evaluators.all()) == [] and list(experiment.evaluators.all()) == []
    # the score stays, on its stream, under its type; and the name stays taken by that type
    score = Score.objects.get(stream=stream)
    assert (score.key, score.score_type.name, score.value) == ("has-x@v1", "has-x", 1.0)
    r = member.post("/evaluators/new/", {"name": "has-x", "kind": "contains", "text": "y"})
    assert r.status_code == 400 and not Evaluator.objects.exists()
    assert member.post(f"/evaluators/{made.pk}/delete/").status_code == 404


def test_deleting_an_online_rule_keeps_what_it_judged(team):
    project, people = team
    made = evaluate.save(project, name="has-x", kind="contains", config={"text": "x"})
    rule = online.create(project, user=people["member"], name="r", evaluators=[made])
    stream = Stream.objects.create(project=project, status="completed", output_text="xyz")
    assert evaluate.apply(made, stream=stream, rule=rule).written
    viewer, member = client_of(people["viewer"]), client_of(people["member"])
    assert viewer.post(f"/evaluators/rules/{rule.pk}/delete/").status_code == 403

    r = member.post(f"/evaluators/rules/{rule.pk}/delete/")

    assert r.status_code == 302 and r["Location"] == "/evaluators/rules/"
    assert not OnlineRule.objects.exists()
    assert Evaluator.objects.get() == made
    assert Score.objects.get(stream=stream).key == "has-x@v1"
    assert made.evaluations.get().rule is None
