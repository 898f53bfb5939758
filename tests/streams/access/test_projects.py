"""Projects (streams/access/projects.py, dashboard/project.py): the migration keeps today's
privacy, the role ladder, which streams a member sees, and which project a request works in."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from dashboard.models import SavedView
from streams.access import projects
from streams.access.projects import ACTIONS, RANKS, Action
from streams.access.rules import streams_for
from streams.models import Membership, Project, Stream

Role = Membership.Role
User = get_user_model()


def _user(name, **kwargs):
    return User.objects.create_user(name, **kwargs)


def _member(user, project, role):
    Membership.objects.create(user=user, project=project, role=role)
    projects.forget(user)


@pytest.mark.django_db(transaction=True)
def test_the_migration_puts_each_users_things_in_their_own_project():
    executor = MigrationExecutor(connection)
    executor.migrate([("streams", "0017_source_labels"), ("dashboard", "0002_saved_views")])
    old = executor.loader.project_state(
        [("streams", "0017_source_labels"), ("dashboard", "0002_saved_views")]
    ).apps
    OldUser, OldStream = old.get_model("auth", "User"), old.get_model("streams", "Stream")
    OldView = old.get_model("dashboard", "SavedView")
    ann, bob = OldUser.objects.create(username="ann"), OldUser.objects.create(username="Ann")
    mine = [OldStream.objects.create(user_id=ann.pk).pk for _ in range(3)]
    theirs = OldStream.objects.create(user_id=bob.pk).pk
    nobody = OldStream.objects.create(user_id=None).pk
    view = OldView.objects.create(owner_id=ann.pk, name="v", page="latency", shared=True).pk

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    ann_project = Project.objects.get(personal_of_id=ann.pk)
    bob_project = Project.objects.get(personal_of_id=bob.pk)
    assert ann_project != bob_project and ann_project.slug != bob_project.slug  # (ann vs Ann)
    assert set(Stream.objects.filter(project=ann_project).values_list("pk", flat=True)) == set(mine)
    assert Stream.objects.get(pk=theirs).project == bob_project
    assert Stream.objects.get(pk=nobody).project is None  # only staff saw it, and still do
    assert SavedView.objects.get(pk=view).project == ann_project
    assert Membership.objects.get(user_id=ann.pk).role == Role.OWNER
    # nothing changed for them: each still sees exactly their own streams
    ann_user = User.objects.get(pk=ann.pk)
    assert set(streams_for(ann_user).values_list("pk", flat=True)) == set(mine)
    staff = _user("root", is_staff=True)
    assert nobody in set(streams_for(staff).values_list("pk", flat=True))


@pytest.mark.django_db
def test_each_role_may_what_the_one_before_it_may_and_more():
    team = Project.objects.create(name="Team", slug="team")
    people = {role: _user(f"u-{role}") for role in Role.values}
    for role, user in people.items():
        _member(user, team, role)
    outsider, staff = _user("outsider"), _user("staff", is_staff=True)
    for action, least in ACTIONS.items():
        for role, user in people.items():
            assert projects.may(user, action, team) == (RANKS[role] >= RANKS[least]), (
                action,
                role,
            )
        assert not projects.may(outsider, action, team)
        assert projects.may(staff, action, team)
    # every action has a least role, and the table has every role's step
    assert set(ACTIONS) == set(Action)
    assert {ACTIONS[Action.READ], ACTIONS[Action.RUN], ACTIONS[Action.MANAGE_MEMBERS]} == {
        Role.VIEWER,
        Role.MEMBER,
        Role.ADMIN,
    }
    assert ACTIONS[Action.DELETE_PROJECT] == Role.OWNER


@pytest.mark.django_db
def test_a_member_sees_the_projects_streams_and_nobody_elses():
    ann, bob, cat = _user("ann"), _user("bob"), _user("cat")
    team = Project.objects.create(name="Team", slug="team")
    _member(ann, team, Role.VIEWER)
    _member(bob, team, Role.MEMBER)
    shared = Stream.objects.create(user=bob, project=team)
    bobs_own = Stream.objects.create(user=bob)  # (his personal project)
    cats = Stream.objects.create(user=cat)
    assert bobs_own.project == Project.personal(bob)
    assert set(streams_for(ann)) == {shared}
    assert set(streams_for(bob)) == {shared, bobs_own}
    assert set(streams_for(bob, team)) == {shared}
    assert set(streams_for(cat)) == {cats}
    assert not streams_for(cat, team).exists()  # (a project one is not in: nothing)


@pytest.mark.django_db
def test_the_page_works_in_the_linked_then_the_remembered_project():
    ann = _user("ann")
    team = Project.objects.create(name="Team", slug="team")
    other = Project.objects.create(name="Other", slug="other")
    _member(ann, team, Role.VIEWER)
    client = Client()
    client.force_login(ann)

    def current():
        response = client.get("/views/")
        assert response.status_code == 200
        return response.context["project"]

    assert current() == Project.personal(ann)  # a new user: their own project
    assert client.get("/views/", {"project": "team"}).context["project"] == team
    assert current() == team  # remembered
    assert client.get("/views/", {"project": "other"}).status_code == 404  # not theirs
    assert client.get("/views/", {"project": "nothing"}).status_code == 404
    assert current() == team
    response = client.post("/projects/switch/", {"project": "other", "next": "/"})
    assert response.status_code == 400 and current() == team
    personal = Project.personal(ann).slug
    response = client.post(
        "/projects/switch/", {"project": personal, "next": "/latency/?project=team&x=1"}
    )
    assert response.status_code == 302 and response["Location"] == "/latency/?x=1"
    assert current() == Project.personal(ann)
    # a new session starts in the project last worked in
    _member(ann, other, Role.MEMBER)
    client.get("/views/", {"project": "other"})
    fresh = Client()
    fresh.force_login(ann)
    assert fresh.get("/views/").context["project"] == other
    # an off-site `next` goes home
    response = client.post("/projects/switch/", {"project": "team", "next": "https://evil/"})
    assert response["Location"] == "/"


@pytest.mark.django_db
def test_staff_may_work_in_every_project_at_once():
    staff = _user("root", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.post("/projects/switch/", {"project": "all"}).status_code == 302
    assert client.get("/views/").context["project"] is None
    ann = _user("ann")
    other = Client()
    other.force_login(ann)
    other.post("/projects/switch/", {"project": "all"})  # (not staff: no such choice)
    assert other.get("/views/").context["project"] == Project.personal(ann)


@pytest.mark.django_db(transaction=True)
def test_personal_projects_get_free_names():
    Project.objects.create(name="ann", slug="ann")
    ann = _user("ann")
    mine = Project.personal(ann)
    assert (mine.name, mine.slug) == ("ann (2)", "ann-2")
    assert Project.personal(User.objects.get(pk=ann.pk)) == mine  # made once
    assert Membership.objects.get(project=mine).role == Role.OWNER


@pytest.mark.django_db
def test_a_user_named_all_gets_no_personal_project_of_the_switchers_slug():
    # "all" is the switcher's every-project choice (staff's): a project of that slug could
    # never be chosen, and `?project=all` would name two things
    everyone = _user("All")
    mine = Project.personal(everyone)
    assert (mine.name, mine.slug) == ("All (2)", "all-2")
