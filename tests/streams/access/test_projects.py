"""Projects (streams/access/projects.py, dashboard/project.py): the migration keeps today's
privacy, the role ladder, which streams a member sees, and which project a request works in."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from streams.access import projects
from streams.access.projects import ACTIONS, RANKS, Action
from streams.access.rules import streams_for
from streams.models import Membership, Project, Stream
from tests.support.migrations import own_database

Role = Membership.Role
User = get_user_model()


def _user(name, **kwargs):
    return User.objects.create_user(name, **kwargs)


def _member(user, project, role):
    Membership.objects.create(user=user, project=project, role=role)
    projects.forget(user)


@pytest.mark.django_db
def test_the_migration_puts_each_users_things_in_their_own_project():
    with own_database() as db:
        old = db.forward(("streams", "0017_source_labels"), ("dashboard", "0002_saved_views"))
        OldUser, OldStream = old.get_model("auth", "User"), old.get_model("streams", "Stream")
        OldView = old.get_model("dashboard", "SavedView")
        ann, bob = OldUser.objects.create(username="ann"), OldUser.objects.create(username="Ann")
        mine = [OldStream.objects.create(user_id=ann.pk).pk for _ in range(3)]
        theirs = OldStream.objects.create(user_id=bob.pk).pk
        nobody = OldStream.objects.create(user_id=None).pk
        view = OldView.objects.create(owner_id=ann.pk, name="v", page="latency", shared=True).pk

        # the migrations that made projects: streams' (the projects, the streams, the
        # members) and the dashboard's (the saved views)
        new = db.forward(("streams", "0018_projects"), ("dashboard", "0003_projects"))
        made = new.get_model("streams", "Project").objects.values_list("pk", "slug")
        (ann_project, ann_slug), (bob_project, bob_slug) = (
            made.get(personal_of_id=user.pk) for user in (ann, bob)
        )
        assert ann_project != bob_project and ann_slug != bob_slug  # (ann vs Ann)
        projects_of = dict(new.get_model("streams", "Stream").objects.values_list("pk", "project"))
        assert projects_of == {
            **dict.fromkeys(mine, ann_project),
            theirs: bob_project,
            nobody: None,  # only staff saw it, and still do
        }
        views = new.get_model("dashboard", "SavedView").objects
        assert views.get(pk=view).project_id == ann_project
        # nothing changed for them: each is a member of their own project only, as its owner,
        # so sees exactly their own streams (the access rule, streams/access/projects.py,
        # reads a user's memberships and a stream's project: tested on its own below)
        members = new.get_model("streams", "Membership").objects
        memberships = {
            user.pk: list(members.filter(user_id=user.pk).values_list("project", "role"))
            for user in (ann, bob)
        }
    assert memberships == {ann.pk: [(ann_project, Role.OWNER)], bob.pk: [(bob_project, Role.OWNER)]}


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
