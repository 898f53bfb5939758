"""Invitations by e-mail (streams/access/invitations.py), through a real SMTP server: aiosmtpd
on 127.0.0.1, Django's SMTP backend pointed at it. An admin invites an address; the link is read
out of the mail the server received; another user opens it and joins; the link then works no
more; an expired, a revoked, a wrong link and one whose maker lost the right open nothing."""

import datetime as dt
import re
import socket

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from streams.access import invitations, members
from streams.models import Invitation, Membership
from tests.support.mail import smtp_server

pytestmark = pytest.mark.django_db
LINK = re.compile(r"http://testserver(/invitations/(inv_[A-Za-z0-9_-]+)/)")


@pytest.fixture
def smtp(settings):
    with smtp_server(settings) as inbox:
        yield inbox


@pytest.fixture
def team():
    cache.clear()  # (wrong links count per IP, as wrong tokens: start from none)
    make = get_user_model().objects.create_user
    admin, bob, viewer = make("admin"), make("bob"), make("viewer")
    project = members.create(make("owner"), "Search team")
    Membership.objects.create(project=project, user=admin, role="admin")
    Membership.objects.create(project=project, user=viewer, role="viewer")
    return project, admin, bob, viewer


def client_of(user=None):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def invite(who, project, address="carol@example.com", role="member"):
    return client_of(who).post(
        f"/projects/{project.slug}/invitations/new/", {"email": address, "role": role}
    )


def test_an_invitation_is_mailed_opened_by_another_user_and_works_once(smtp, team):
    project, admin, bob, _ = team
    response = invite(admin, project)
    assert response.status_code == 302

    assert len(smtp.messages) == 1
    recipients, message = smtp.messages[0]
    assert recipients == ["carol@example.com"]
    assert "Search team" in message["Subject"]
    body = message.get_payload(decode=True).decode()
    assert "admin invites you" in body and "as Member" in body
    path, secret = LINK.search(body).groups()
    # only its digest is stored
    invitation = Invitation.objects.get()
    assert invitation.digest == Invitation.hash(secret) and secret not in str(vars(invitation))

    bob_client = client_of(bob)  # not carol: whoever opens the link signed in joins
    page = bob_client.get(path)
    assert page.status_code == 200
    assert "carol@example.com" in page.content.decode() and "Join" in page.content.decode()
    assert page["Cache-Control"] == "private, no-store"
    assert not Membership.objects.filter(user=bob).exclude(project__personal_of=bob).exists()

    joined = bob_client.post(path + "accept/")
    assert joined.status_code == 302 and joined["Location"] == f"/?project={project.slug}"
    assert Membership.objects.get(project=project, user=bob).role == "member"
    invitation.refresh_from_db()
    assert invitation.accepted_by == bob and invitation.accepted_at is not None

    # the second use: refused, for anyone
    assert bob_client.post(path + "accept/").status_code == 404
    assert client_of(admin).get(path).status_code == 404
    assert client_of(admin).post(path + "accept/").status_code == 404


def test_expired_revoked_and_wrong_links_open_nothing(smtp, team):
    project, admin, bob, _ = team
    for _n in range(3):
        invite(admin, project)
    paths = [LINK.search(smtp.body(n)).group(1) for n in range(3)]
    expired, revoked, kept = Invitation.objects.order_by("pk")
    Invitation.objects.filter(pk=expired.pk).update(
        expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    )
    assert (
        client_of(admin)
        .post(f"/projects/{project.slug}/invitations/{revoked.pk}/revoke/")
        .status_code
        == 302
    )
    bob_client = client_of(bob)
    for path in paths[:2] + ["/invitations/inv_wrong/", "/invitations/sl_other/"]:
        assert bob_client.get(path).status_code == 404, path
        assert bob_client.post(path + "accept/").status_code == 404, path
    assert not Membership.objects.filter(project=project, user=bob).exists()
    assert bob_client.post(paths[2] + "accept/").status_code == 302  # the third still works


def test_a_signed_out_visitor_logs_in_and_comes_back(smtp, team):
    project, admin, bob, _ = team
    invite(admin, project, role="viewer")
    path = LINK.search(smtp.body(0)).group(1)
    response = client_of().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"
    pressed = client_of().post(path + "accept/")  # (a session that ended on the page)
    assert pressed.status_code == 302 and pressed["Location"] == f"/login/?next={path}"
    assert client_of(bob).post(path + "accept/").status_code == 302
    assert Membership.objects.get(project=project, user=bob).role == "viewer"


def test_an_invitation_is_worth_what_its_maker_may_still_do(smtp, team):
    project, admin, bob, _ = team
    invite(admin, project)
    path = LINK.search(smtp.body(0)).group(1)
    Membership.objects.filter(project=project, user=admin).update(role="member")
    assert client_of(bob).get(path).status_code == 404
    Membership.objects.filter(project=project, user=admin).update(role="admin")
    assert client_of(bob).get(path).status_code == 200


def test_joining_never_lowers_a_role(smtp, team):
    project, admin, _, viewer = team
    invite(admin, project, role="admin")
    path = LINK.search(smtp.body(0)).group(1)
    assert client_of(viewer).post(path + "accept/").status_code == 302
    assert Membership.objects.get(project=project, user=viewer).role == "admin"
    owner = Membership.objects.get(project=project, role="owner").user
    invite(admin, project, role="viewer")
    path = LINK.search(smtp.body(1)).group(1)
    assert client_of(owner).post(path + "accept/").status_code == 302
    assert Membership.objects.get(project=project, user=owner).role == "owner"


def test_who_may_invite(smtp, team):
    project, admin, bob, viewer = team
    assert invite(viewer, project).status_code == 403
    assert invite(bob, project).status_code == 404  # not a member: not found
    assert invite(admin, project, role="owner").status_code == 403  # an owner by an owner only
    assert invite(admin, project, address="not an address").status_code == 400
    assert not smtp.messages and not Invitation.objects.exists()
    owner = Membership.objects.get(project=project, role="owner").user
    assert invite(owner, project, role="owner").status_code == 302
    assert len(smtp.messages) == 1


def test_a_mail_server_that_does_not_answer_keeps_nothing(settings, team):
    project, admin, _, _ = team
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    response = invite(admin, project)
    assert response.status_code == 502
    assert "could not be sent" in response.content.decode()
    assert not Invitation.objects.exists()


def test_it_expires_after_the_configured_days(settings, team):
    project, admin, _, _ = team
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "INVITATION_EXPIRY_DAYS": 2}
    invitation, _secret = invitations.invite(admin, project, "dee@example.com", "viewer")
    left = invitation.expires_at - dt.datetime.now(dt.UTC)
    assert dt.timedelta(days=2) - dt.timedelta(minutes=1) < left <= dt.timedelta(days=2)


def test_a_project_has_a_bounded_number_of_open_invitations(settings, team, monkeypatch):
    project, admin, _, _ = team
    monkeypatch.setattr(invitations, "MAX_OPEN", 2)
    assert invite(admin, project, "a@example.com").status_code == 302
    assert invite(admin, project, "b@example.com").status_code == 302
    refused = invite(admin, project, "c@example.com")
    assert refused.status_code == 409 and "too many open invitations" in refused.content.decode()
    first = Invitation.objects.order_by("pk").first()
    client_of(admin).post(f"/projects/{project.slug}/invitations/{first.pk}/revoke/")
    assert invite(admin, project, "c@example.com").status_code == 302


def test_the_mail_is_in_the_inviters_language(smtp, team):
    project, admin, _, _ = team
    client = client_of(admin)
    response = client.post(
        f"/projects/{project.slug}/invitations/new/",
        {"email": "dirk@example.com", "role": "viewer"},
        HTTP_ACCEPT_LANGUAGE="nl",
    )
    assert response.status_code == 302
    message = smtp.messages[0][1]
    assert message["Subject"] == "Uitnodiging voor het project Search team op Streamscope"
    assert "admin nodigt je uit" in smtp.body() and "als Lezer" in smtp.body()
    assert "binnen 7 dagen" in smtp.body()
