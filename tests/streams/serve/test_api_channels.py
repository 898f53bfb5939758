"""/api/channels/ (streams/serve/api.py): the pages' rules over the API; a token reaches its own
project's channels only and needs `write` to change them; a target is masked, a webhook's
signing secret given once; bad input is a 400 that says why."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from streams.models import ApiToken, Channel, Delivery, Membership, Project
from streams.notify import channels

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "Zq81Lm2093XbVwTy55pK"


@pytest.fixture
def world(settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "ALERT_ALLOWED_HOSTS": "127.0.0.1"}
    users = get_user_model().objects
    admin, viewer = users.create_user("admin"), users.create_user("viewer")
    team = Project.objects.create(name="Team", slug="team")
    other = Project.objects.create(name="Other", slug="other")
    Membership.objects.create(project=team, user=admin, role="admin")
    Membership.objects.create(project=other, user=admin, role="admin")
    Membership.objects.create(project=team, user=viewer, role="viewer")
    tokens = {
        "admin": ApiToken.issue(admin, project=team),
        "admin-read": ApiToken.issue(admin, project=team, scopes=["read"]),
        "admin-other": ApiToken.issue(admin, project=other),
        "viewer": ApiToken.issue(viewer, project=team),
    }
    mail, _ = channels.create(team, "ops mail", "email", "ops@example.com")
    return tokens, team, mail


def call(token, method, path, body=None):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    if method == "GET":
        r = client.get(path)
    else:
        r = client.post(path, json.dumps(body or {}), content_type="application/json")
    return r.status_code, r.json()


def test_an_admin_makes_a_webhook_and_gets_its_signing_secret_once(world):
    tokens, team, _ = world
    url = f"http://127.0.0.1:9/hook/{TOKEN}"
    status, made = call(
        tokens["admin"],
        "POST",
        "/api/channels/",
        {"name": "hook", "kind": "webhook", "target": url},
    )
    assert status == 201
    assert made["signing_secret"].startswith("whsec_")
    assert made["target"] == f"http://127.0.0.1/…{TOKEN[-4:]}"
    status, again = call(tokens["admin"], "GET", f"/api/channels/{made['id']}/")
    assert status == 200 and "signing_secret" not in again and TOKEN[:8] not in json.dumps(again)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "x", "kind": "webhook", "target": "http://10.0.0.7/hook"}, "target"),
        ({"name": "x", "kind": "webhook", "target": "ftp://example.com/"}, "target"),
        ({"name": "x", "kind": "pigeon", "target": "a@b.example"}, "kind"),
        ({"name": "", "kind": "email", "target": "a@b.example"}, "name"),
        ({"name": "ops mail", "kind": "email", "target": "a@b.example"}, "name"),
        ({"name": "x" * 101, "kind": "email", "target": "a@b.example"}, "name"),
    ],
)
def test_bad_input_is_a_400_naming_its_field(world, body, field):
    tokens, _, _ = world
    status, answer = call(tokens["admin"], "POST", "/api/channels/", body)
    assert status == 400 and field in answer["error"]["fields"]
    assert Channel.objects.count() == 1


def test_a_viewer_sees_names_only_and_changes_nothing(world):
    tokens, _, mail = world
    status, listed = call(tokens["viewer"], "GET", "/api/channels/")
    assert (status, listed) == (200, {"channels": [{"id": mail.pk, "name": "ops mail"}]})
    assert call(tokens["viewer"], "GET", f"/api/channels/{mail.pk}/")[0] == 403
    body = {"name": "x", "kind": "email", "target": "a@b.example"}
    assert call(tokens["viewer"], "POST", "/api/channels/", body)[0] == 403


def test_a_token_reaches_its_own_projects_channels_only_and_writes_with_write(world):
    tokens, _, mail = world
    assert call(tokens["admin-other"], "GET", f"/api/channels/{mail.pk}/")[0] == 404
    assert call(tokens["admin-other"], "GET", "/api/channels/")[1] == {"channels": []}
    assert call(tokens["admin-read"], "GET", f"/api/channels/{mail.pk}/")[0] == 200
    status, _ = call(tokens["admin-read"], "POST", f"/api/channels/{mail.pk}/test/")
    assert status == 403


def test_change_test_log_and_delete(world):
    tokens, _, mail = world
    path = f"/api/channels/{mail.pk}/"
    status, changed = call(tokens["admin"], "POST", path, {"enabled": False, "name": "ops"})
    assert status == 200 and (changed["enabled"], changed["name"]) == (False, "ops")
    status, queued = call(tokens["admin"], "POST", path + "test/")
    assert status == 202 and queued["state"] == "pending"
    status, log = call(tokens["admin"], "GET", path + "deliveries/")
    assert status == 200 and [d["id"] for d in log["deliveries"]] == [queued["id"]]
    assert call(tokens["admin"], "POST", path + "delete/", {})[0] == 400
    assert call(tokens["admin"], "POST", path + "delete/", {"confirm": True})[0] == 200
    assert not Channel.objects.exists() and not Delivery.objects.exists()
