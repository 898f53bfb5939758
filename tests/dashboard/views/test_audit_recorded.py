"""The audit log records what the projects' pages and the `project` command do, without them
calling it (streams/store/audit.py): each change once, with who, from where and what changed —
a project made, a member added, a role changed, an invitation sent, accepted and revoked, a
member removed, the project renamed and deleted."""

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client

from streams.models import AuditEntry, Invitation, Membership, Project
from streams.run import deletions
from tests.support.mail import smtp_server

pytestmark = pytest.mark.django_db
LINK = re.compile(r"http://testserver(/invitations/(inv_[A-Za-z0-9_-]+)/)")


def client_of(user, address):
    client = Client(REMOTE_ADDR=address)
    client.force_login(user)
    return client


def actions(project=None):
    found = AuditEntry.objects.order_by("pk")
    if project is not None:
        found = found.filter(project=project)
    return [(e.action, e.target_label, e.actor_name, e.address) for e in found]


def test_the_projects_pages_are_recorded_once_each(settings):
    cache.clear()
    make = get_user_model().objects.create_user
    owner, bob, carol = make("owner"), make("bob"), make("carol")
    me = client_of(owner, "198.51.100.1")
    assert me.post("/projects/new/", {"name": "Search"}).status_code == 302
    project = Project.objects.get(name="Search")
    slug = f"/projects/{project.slug}"
    assert me.post(f"{slug}/members/add/", {"user": "bob", "role": "viewer"}).status_code == 302
    assert me.post(f"{slug}/members/{bob.pk}/role/", {"role": "admin"}).status_code == 302
    with smtp_server(settings) as inbox:
        invite = {"email": "carol@example.com", "role": "member"}
        assert me.post(f"{slug}/invitations/new/", invite).status_code == 302
        body = inbox.messages[0][1].get_payload(decode=True).decode()
        path, key = LINK.search(body).groups()
        other = {"email": "dan@example.com", "role": "viewer"}
        assert me.post(f"{slug}/invitations/new/", other).status_code == 302
    accepted = client_of(carol, "198.51.100.3").post(path + "accept/")
    assert accepted.status_code == 302
    dan = Invitation.objects.get(email="dan@example.com")
    assert me.post(f"{slug}/invitations/{dan.pk}/revoke/").status_code == 302
    assert me.post(f"{slug}/members/{bob.pk}/remove/").status_code == 302
    assert me.post(f"{slug}/rename/", {"name": "Search team"}).status_code == 302

    here = "198.51.100.1"
    assert actions(project) == [
        ("project.created", "Search", "owner", here),
        ("membership.added", "owner", "owner", here),
        ("membership.added", "bob", "owner", here),
        ("membership.role_changed", "bob", "owner", here),
        ("invitation.created", "carol@example.com", "owner", here),
        ("invitation.created", "dan@example.com", "owner", here),
        ("invitation.accepted", "carol@example.com", "carol", "198.51.100.3"),
        ("membership.added", "carol", "carol", "198.51.100.3"),
        ("invitation.revoked", "dan@example.com", "owner", here),
        ("membership.removed", "bob", "owner", here),
        ("project.renamed", "Search team", "owner", here),
    ]
    role = AuditEntry.objects.get(action="membership.role_changed")
    assert role.changes == {"role": ["viewer", "admin"]}
    sent = AuditEntry.objects.filter(action="invitation.created").first()
    assert "digest" not in sent.changes and sent.changes["role"] == [None, "member"]
    every = repr(list(AuditEntry.objects.values_list("target_label", "changes")))
    assert key not in every and Invitation.hash(key) not in every
    assert sent.changes["invited_by"] == [None, "owner"]

    # deleted: its log goes with it, its deletion is the instance's
    gone = me.post(f"{slug}/delete/", {"name": "Search team"})
    assert gone.status_code == 302
    deletions.delete_marked_projects()  # (in the background: streams/run/deletions.py)
    assert not AuditEntry.objects.filter(project__isnull=False, target_label="bob").exists()
    assert actions()[-1] == ("project.deleted", "Search team", "owner", here)


def test_the_project_command_is_recorded_as_the_command():
    make = get_user_model().objects.create_user
    make("olga"), make("dave")
    call_command("project", "create", "Ops", "--owner", "olga", stdout=io.StringIO())
    call_command("project", "add-member", "Ops", "dave", "--role", "member", stdout=io.StringIO())
    call_command("project", "remove-member", "Ops", "dave", stdout=io.StringIO())
    project = Project.objects.get(name="Ops")
    found = actions(project)
    assert [a for a, *_ in found] == [
        "project.created", "membership.added", "membership.added", "membership.removed",
    ]  # fmt: skip
    assert {address for *_, address in found} == {"command:project"}
    assert not Membership.objects.filter(project=project, user__username="dave").exists()
