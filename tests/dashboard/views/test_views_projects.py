"""The projects' pages (dashboard/views/projects.py): /projects/, a project's members page and
its settings, for each role, a stranger and someone signed out; their forms' answers."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from streams.access import members
from streams.models import Membership, Project, Stream

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    make = get_user_model().objects.create_user
    people = {n: make(n) for n in ("owner", "admin", "member", "viewer", "stranger")}
    project = members.create(people["owner"], "Search team")
    for role in ("admin", "member", "viewer"):
        Membership.objects.create(project=project, user=people[role], role=role)
    members.create(people["stranger"], "Elsewhere")
    clients = {}
    for name, user in people.items():
        clients[name] = Client()
        clients[name].force_login(user)
    clients["anonymous"] = Client()
    return project, people, clients


def test_the_list_shows_ones_projects_and_makes_one(team):
    project, people, c = team
    page = c["viewer"].get("/projects/").content.decode()
    assert "Search team" in page and "Elsewhere" not in page and "Viewer" in page
    response = c["viewer"].post("/projects/new/", {"name": "Mine too"})
    assert response.status_code == 302 and response["Location"] == "/projects/mine-too/members/"
    assert Membership.objects.get(project__slug="mine-too", user=people["viewer"]).role == "owner"
    taken = c["viewer"].post("/projects/new/", {"name": "search TEAM"})
    assert taken.status_code == 409 and "of that name already" in taken.content.decode()
    assert c["viewer"].post("/projects/new/", {"name": ""}).status_code == 400
    assert c["anonymous"].get("/projects/").status_code == 302


def test_the_members_page_for_each_role(team):
    project, people, c = team
    url = f"/projects/{project.slug}/members/"
    for who in ("owner", "admin", "member", "viewer"):
        page = c[who].get(url)
        assert page.status_code == 200, who
        text = page.content.decode()
        assert all(name in text for name in ("owner", "admin", "member", "viewer"))
        assert ("Invite by e-mail" in text) == (who in ("owner", "admin")), who
        assert "Leave the project" in text
    assert c["stranger"].get(url).status_code == 404
    assert c["stranger"].get("/projects/no-such/members/").status_code == 404
    assert c["anonymous"].get(url).status_code == 302


def test_admins_add_change_and_remove(team):
    project, people, c = team
    base = f"/projects/{project.slug}/members"
    newcomer = get_user_model().objects.create_user("newcomer", email="new@example.com")
    assert (
        c["member"].post(f"{base}/add/", {"user": "newcomer", "role": "viewer"}).status_code == 403
    )
    assert (
        c["stranger"].post(f"{base}/add/", {"user": "newcomer", "role": "viewer"}).status_code
        == 404
    )
    added = c["admin"].post(f"{base}/add/", {"user": "new@example.com", "role": "viewer"})
    assert added.status_code == 302
    unknown = c["admin"].post(f"{base}/add/", {"user": "nobody", "role": "viewer"})
    assert unknown.status_code == 400 and "No active user" in unknown.content.decode()
    assert c["admin"].post(f"{base}/{newcomer.pk}/role/", {"role": "member"}).status_code == 302
    assert Membership.objects.get(project=project, user=newcomer).role == "member"
    owner_pk = people["owner"].pk
    assert c["admin"].post(f"{base}/{owner_pk}/role/", {"role": "viewer"}).status_code == 403
    assert c["admin"].post(f"{base}/{newcomer.pk}/remove/").status_code == 302
    assert not Membership.objects.filter(project=project, user=newcomer).exists()
    assert c["admin"].post(f"{base}/{people['stranger'].pk}/remove/").status_code == 404


def test_the_last_owner_is_told_why_not(team):
    project, people, c = team
    response = c["owner"].post(f"/projects/{project.slug}/leave/")
    assert response.status_code == 409
    assert "always has an owner" in response.content.decode()
    demoted = c["owner"].post(
        f"/projects/{project.slug}/members/{people['owner'].pk}/role/", {"role": "admin"}
    )
    assert demoted.status_code == 409
    assert Membership.objects.get(project=project, user=people["owner"]).role == "owner"
    left = c["viewer"].post(f"/projects/{project.slug}/leave/")
    assert left.status_code == 302 and left["Location"] == "/projects/"
    assert c["viewer"].get(f"/projects/{project.slug}/members/").status_code == 404


def test_settings_rename_and_delete_for_owners(team):
    project, people, c = team
    for _n in range(2):
        Stream.objects.create(user=people["member"], project=project, status="completed")
    url = f"/projects/{project.slug}/settings/"
    page = c["owner"].get(url)
    assert page.status_code == 200 and "deletes its 2 streams" in page.content.decode()
    admins = c["admin"].get(url)  # (their settings: currency and retention)
    assert admins.status_code == 200 and "deletes its 2 streams" not in admins.content.decode()
    assert 'action="/projects/search-team/rename/"' not in admins.content.decode()
    for who in ("admin", "member", "viewer"):
        if who != "admin":
            assert c[who].get(url).status_code == 403, who
        assert (
            c[who].post(f"/projects/{project.slug}/delete/", {"name": "Search team"}).status_code
            == 403
        )
    assert c["stranger"].get(url).status_code == 404
    renamed = c["owner"].post(f"/projects/{project.slug}/rename/", {"name": "Find team"})
    assert renamed.status_code == 302
    assert Project.objects.get(pk=project.pk).name == "Find team"
    wrong = c["owner"].post(f"/projects/{project.slug}/delete/", {"name": "Search team"})
    assert wrong.status_code == 400 and Project.objects.filter(pk=project.pk).exists()
    deleted = c["owner"].post(
        f"/projects/{project.slug}/delete/", {"name": "Find team"}, follow=True
    )
    assert "is being deleted, with its 2 streams" in deleted.content.decode()
    assert members.delete_marked() == {project.pk: 2}  # (the periodic job's work)
    assert not Project.objects.filter(pk=project.pk).exists()
    assert not Stream.objects.filter(project_id=project.pk).exists()


def test_admins_set_the_currency_and_the_projects_own_retention(team):
    from streams.models import AuditEntry

    project, people, c = team
    url = f"/projects/{project.slug}/settings/save/"
    form = {"currency": "USD", "retain_streams_days": "30", "retain_events_days": ""}
    for who, status in (("member", 403), ("viewer", 403), ("stranger", 404)):
        assert c[who].post(url, form).status_code == status, who
    assert c["anonymous"].post(url, form).status_code == 302
    assert c["admin"].post(url, form).status_code == 302
    saved = Project.objects.get(pk=project.pk)
    assert (saved.currency, saved.retain_streams_days, saved.retain_events_days) == (
        "USD",
        30,
        None,
    )
    entry = AuditEntry.objects.filter(project=project, action="project.changed").latest("at")
    assert entry.actor_id == people["admin"].pk
    assert entry.changes["currency"] == ["EUR", "USD"]
    assert entry.changes["retain_streams_days"] == [None, 30]
    page = c["admin"].get(f"/projects/{project.slug}/settings/").content.decode()
    assert 'value="30"' in page and "The instance keeps streams for ever." in page
    # bad input: 400 naming the field, nothing changed
    for bad, field in (
        ({**form, "retain_streams_days": "0"}, "retain_streams_days"),
        ({**form, "retain_events_days": "99999"}, "retain_events_days"),
        ({**form, "retain_events_days": "soon"}, "retain_events_days"),
        ({**form, "currency": "XXX"}, "currency"),
    ):
        answer = c["admin"].post(url, bad)
        assert answer.status_code == 400, bad
        assert f'data-field="{field}"' in answer.content.decode(), bad
    assert Project.objects.get(pk=project.pk).retain_streams_days == 30


def test_a_members_page_leaves_the_current_project_alone(team):
    """The page's project is `this_project`; `project` stays the one the top bar shows (the
    request's, dashboard/project.py), not the one whose members are shown."""
    project, people, c = team
    response = c["viewer"].get(f"/projects/{project.slug}/members/")
    assert response.context["this_project"] == project
    assert response.context["project"] == Project.personal(people["viewer"])


def test_the_members_page_is_paged_by_a_cursor(team, monkeypatch):
    project, people, c = team
    monkeypatch.setattr(members, "MEMBERS_PAGE", 3)
    make = get_user_model().objects.create_user
    for n in range(3):
        Membership.objects.create(project=project, user=make(f"zed{n}"), role="viewer")
    url = f"/projects/{project.slug}/members/"
    first = c["viewer"].get(url)
    rows = first.context["memberships"]
    assert [m.user.username for m in rows] == ["owner", "admin", "member"]
    assert first.context["n_members"] == 7
    page = first.content.decode()
    assert f'href="{url}?after={people["member"].pk}" rel="next"' in page
    assert "7 members, owners first" in page
    second = c["viewer"].get(f"{url}?after={people['member'].pk}")
    assert [m.user.username for m in second.context["memberships"]] == ["viewer", "zed0", "zed1"]
    last_user = second.context["next_after"]
    third = c["viewer"].get(f"{url}?after={last_user}")
    assert [m.user.username for m in third.context["memberships"]] == ["zed2"]
    assert third.context["next_after"] is None and 'rel="next"' not in third.content.decode()
    assert c["viewer"].get(f"{url}?after=x").status_code == 400


def test_staff_list_and_revoke_invitations_in_the_django_admin(team):
    from streams.access import invitations
    from streams.models import AuditEntry, Invitation

    project, people, c = team
    made = [
        invitations.invite(people["admin"], project, f"p{n}@example.com", "viewer")[0]
        for n in range(3)
    ]
    invitations.accept(made[2], people["stranger"])
    staff = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/streams/invitation/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "p0@example.com" in text and "accepted" in text
    assert made[0].digest not in text
    detail = client.get(f"/admin/streams/invitation/{made[0].pk}/change/").content.decode()
    assert made[0].digest not in detail and "p0@example.com" in detail
    assert client.get("/admin/streams/invitation/add/").status_code == 403
    revoked = client.post(
        "/admin/streams/invitation/",
        {"action": "revoke", "_selected_action": [m.pk for m in made]},
        follow=True,
    )
    assert "2 invitations revoked." in revoked.content.decode()  # (the accepted one stays so)
    states = {
        i.email: (i.revoked_at is not None, i.accepted_at is not None)
        for i in Invitation.objects.all()
    }
    assert states == {
        "p0@example.com": (True, False),
        "p1@example.com": (True, False),
        "p2@example.com": (False, True),
    }
    entries = AuditEntry.objects.filter(
        project=project, target_type="invitation", actor_id=staff.pk
    )
    assert entries.count() == 2
    # no deleting from the admin: who invited whom stays the project's history
    assert client.post(
        "/admin/streams/invitation/",
        {"action": "delete_selected", "_selected_action": [made[0].pk]},
    ).status_code in (200, 302)
    assert Invitation.objects.filter(pk=made[0].pk).exists()
