"""The latency page's score types with evaluators (each keeps a score type of its own, in its
project): two projects' evaluators of one name are no 500, and a page offers only the types
of the projects its user may read."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.project import SESSION_KEY
from streams import evaluate
from streams.access import projects
from streams.models import Project

pytestmark = pytest.mark.django_db


def test_two_projects_evaluators_of_one_name():
    users = get_user_model().objects
    ann, bob = users.create_user("ann"), users.create_user("bob")
    for user in (ann, bob):
        evaluate.save(Project.personal(user), name="grader", kind="json_valid", config={})
    evaluate.save(Project.personal(bob), name="bobs-secret-check", kind="json_valid", config={})
    client = Client()
    client.force_login(ann)
    r = client.get("/latency/?score=grader")
    assert r.status_code == 200
    page = r.content.decode()
    assert 'value="grader" selected' in page
    assert "bobs-secret-check" not in page


def test_staff_looking_at_every_project_see_one_of_a_name():
    users = get_user_model().objects
    ann, bob = users.create_user("ann"), users.create_user("bob")
    for user in (ann, bob):
        evaluate.save(Project.personal(user), name="grader", kind="json_valid", config={})
    staff = Client()
    staff.force_login(users.create_user("root", is_staff=True))
    session = staff.session
    session[SESSION_KEY] = projects.ALL  # (every project at once)
    session.save()
    r = staff.get("/latency/?score=grader")
    assert r.status_code == 200
    assert r.content.decode().count('<option value="grader"') == 2  # (one of each project)
