"""What a firing sends: once per (rule, firing, kind) to a real receiver, a recovery once, nothing
while silenced, and nothing of a secret an upstream planted in what the notice is built from."""

import datetime as dt
import json

import pytest

from streams.alerts import evaluate
from streams.models import Delivery, Firing, Project, Silence
from streams.notify import channels, deliver
from streams.store import known_secrets
from tests.support.alerts import MIN, NOW, rule, streams
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db

SECRET = "sk-alertplanted0123456789abcdefXYZ"


@pytest.fixture
def allowed(settings):
    settings.STREAMSCOPE = {
        **settings.STREAMSCOPE,
        "ALERT_ALLOWED_HOSTS": "127.0.0.1",
        "NOTIFY_TIMEOUT_S": 2.0,
        "PUBLIC_URL": "https://scope.example",
    }
    return settings


@pytest.fixture
def project():
    return Project.objects.create(name="payments", slug="payments")


def later(at, seconds=0):
    # deliveries are due at the real time they were made: deliver with the real clock
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


def bodies(r):
    return [json.loads(body) for _m, _p, _h, body in r.requests]


def test_a_firing_and_its_recovery_are_sent_once_each(allowed, project):
    with receiver() as r:
        channel, _secret = channels.create(project, "hook", "webhook", r.url)
        alert = rule(project)
        alert.channels.add(channel)
        streams(project, NOW - MIN, [3000, 3100, 3200])
        assert evaluate.tick(NOW) == 1
        assert evaluate.tick(NOW) == 0  # a second process at the same tick
        evaluate.tick(NOW + MIN)  # still firing: no reminder asked for
        assert deliver.deliver_due(later(NOW)) == 1
        firing = Firing.objects.get()
        assert firing.notified == 1
        evaluate.tick(NOW + 20 * MIN)  # the slow streams left the window
        assert deliver.deliver_due(later(NOW)) == 1
        assert deliver.deliver_due(later(NOW, 3600)) == 0
        sent = bodies(r)
    assert [b["subject"] for b in sent] == ["Firing: slow TTFT", "Recovered: slow TTFT"]
    assert sorted(Delivery.objects.values_list("key", flat=True)) == [
        f"alert:{alert.pk}:{firing.pk}:fired",
        f"alert:{alert.pk}:{firing.pk}:recovered",
    ]
    fired = sent[0]
    assert fired["fields"]["Value"] == "3,200.0"
    assert fired["fields"]["Condition"] == "above 1,000.0"
    assert fired["fields"]["Window"] == "15 minutes"
    assert fired["series"] == [3200.0]
    links = {link["label"]: link["url"] for link in fired["links"]}
    assert links["Rule"] == f"https://scope.example/alerts/{alert.pk}/"
    assert links["Latency"].startswith("https://scope.example/latency/?")
    assert "start=2026-03-02T11%3A45" in links["Latency"]
    assert links["Worst stream 1"].startswith("https://scope.example/streams/")
    assert "Worst stream 4" not in links


def test_a_reminder_while_it_keeps_firing(allowed, project):
    channel, _secret = channels.create(project, "hook", "webhook", "http://127.0.0.1:9/x")
    alert = rule(project, renotify_s=600, window_s=3600)
    alert.channels.add(channel)
    streams(project, NOW - MIN, [3000] * 3)
    for minutes in range(0, 21):
        evaluate.tick(NOW + minutes * MIN)
    keys = sorted(Delivery.objects.values_list("key", flat=True))
    firing = Firing.objects.get()
    base = f"alert:{alert.pk}:{firing.pk}"
    assert keys == [f"{base}:fired", f"{base}:reminded:2", f"{base}:reminded:3"]


def test_a_silenced_rule_fires_without_sending(allowed, project):
    channel, _secret = channels.create(project, "hook", "webhook", "http://127.0.0.1:9/x")
    alert = rule(project, resolved_model="m-a")
    alert.channels.add(channel)
    Silence.objects.create(project=project, scope={"resolved_model": "m-a"}, until_at=NOW + MIN)
    streams(project, NOW - MIN, [3000] * 3)
    evaluate.tick(NOW)
    firing = Firing.objects.get()
    assert (firing.silenced, firing.notified) == (True, 0)
    assert not Delivery.objects.exists()


def test_a_secret_in_the_upstreams_model_name_is_not_sent(allowed, project):
    known_secrets.remember(SECRET)
    model = f"m-{SECRET}"
    with receiver() as r:
        channel, _secret = channels.create(project, "hook", "webhook", r.url)
        alert = rule(project, name=f"slow {model}", resolved_model=model)
        alert.channels.add(channel)
        streams(project, NOW - MIN, [3000] * 3, model=model)
        evaluate.tick(NOW)
        deliver.deliver_due(later(NOW))
        assert len(r.requests) == 1
        raw = r.requests[0][3].decode()
    assert SECRET not in raw and SECRET[:20] not in raw
    assert SECRET not in json.dumps(Delivery.objects.get().message)
    assert "m-" in raw  # the model is named, its secret part redacted


def test_a_notice_is_said_in_its_projects_language(allowed, project):
    project.language = "nl"
    project.save(update_fields=["language"])
    channel, _secret = channels.create(project, "hook", "webhook", "http://127.0.0.1:9/x")
    alert = rule(project)
    alert.channels.add(channel)
    streams(project, NOW - MIN, [3000] * 3)
    evaluate.tick(NOW)
    message = Delivery.objects.get().message
    assert message["subject"] == "Alarm: slow TTFT"
    assert message["fields"]["Venster"] == "15 minuten"
    assert message["language"] == "nl"
    assert "Regel" in {label for label, _url in message["links"]}


@pytest.mark.parametrize(
    "scope_field, value",
    [("requested_model", "m-a"), ("username", "ann"), ("source", "live"), ("tag", "prod"),
     ("session", "s-1"), ("token", None)],
)  # fmt: skip
def test_a_silence_of_any_scope_mutes_the_rules_of_that_scope(allowed, project, scope_field, value):
    from django.contrib.auth import get_user_model

    from streams.alerts import rules as alert_rules
    from streams.models import ApiToken, Membership

    owner = get_user_model().objects.create_user("owner")
    Membership.objects.create(project=project, user=owner, role="owner")
    channel, _secret = channels.create(project, "hook", "webhook", "http://127.0.0.1:9/x")
    if scope_field == "token":
        ApiToken.issue(owner, name="ci", project=project)
        token = ApiToken.objects.get(project=project)
        alert = rule(project, token=token)
        scope = {"token": token.pk}
    else:
        alert = rule(project, **{scope_field: value})
        scope = {scope_field: value}
    other = rule(project, name="unscoped")
    alert.channels.add(channel)
    other.channels.add(channel)
    alert_rules.silence(owner, project, scope=scope, hours=1, now=NOW)
    assert evaluate.notices.silenced(alert, NOW)
    assert not evaluate.notices.silenced(other, NOW)
