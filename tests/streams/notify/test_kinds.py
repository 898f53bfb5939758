"""Each kind of channel delivers to a real receiver on 127.0.0.1 (aiosmtpd for mail, an HTTP
server for the rest), and no secret comes out through a notification."""

import json

import pytest

from streams.models import Delivery, Project
from streams.notify import Message, channels, deliver, kinds
from streams.store import known_secrets
from tests.support.leaks import SecretFinder
from tests.support.mail import smtp_server
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db

KEY = "sk-NOTIFY-CANARY-77120943qx"  # the upstream's key, echoed by an upstream answer


@pytest.fixture
def allowed(settings):
    settings.STREAMSCOPE = {
        **settings.STREAMSCOPE,
        "ALERT_ALLOWED_HOSTS": "127.0.0.1",
        "NOTIFY_TIMEOUT_S": 5.0,
    }
    settings.UPSTREAM_API_KEY = KEY
    known_secrets.forget_all()
    yield settings
    known_secrets.forget_all()


@pytest.fixture
def project():
    return Project.objects.create(name="payments", slug="payments")


# what an alert built from stored text could carry: the upstream's answer echoing its key
ECHOING = Message(
    subject=f"Errors on model m-{KEY}",
    lines=[f"The last answer said: invalid key {KEY[:14]}…{KEY[14:]}"],
    fields={"Model": f"m-{KEY}", "Error rate": "12 %"},
    series=[0.01, 0.02, 0.12],
    links=[("Streams", f"https://streamscope.example/?q={KEY}")],
    language="en",
)


def leaks(data):
    return SecretFinder({"key": KEY}).find(data if isinstance(data, str) else data.decode())


def sent_once(project, kind, target):
    channel, _ = channels.create(project, kind, kind, target)
    deliver.send([channel], ECHOING, "k")
    assert deliver.deliver_due() == 1
    return Delivery.objects.get(channel=channel)


class TestEmail:
    def test_it_arrives_by_smtp_with_the_whole_message_and_no_secret(self, allowed, project):
        with smtp_server(allowed) as inbox:
            row = sent_once(project, "email", "ops@example.com, oncall@example.com")
        assert (row.state, row.last_status) == ("sent", 250)
        recipients, mail = inbox.messages[0]
        assert recipients == ["ops@example.com", "oncall@example.com"]
        body = inbox.body()
        assert mail["Subject"] == "Errors on model m-[redacted]"
        assert "Error rate: 12 %" in body
        assert kinds.sparkline([0.01, 0.02, 0.12]) in body
        assert "Streams: https://streamscope.example/?q=[redacted]" in body
        assert leaks(mail.as_string()) == []

    def test_a_server_that_is_not_there_is_a_failure_retried(self, allowed, project):
        allowed.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        allowed.EMAIL_HOST, allowed.EMAIL_PORT = "127.0.0.1", 9  # (discard: nobody listens)
        row = sent_once(project, "email", "ops@example.com")
        assert (row.state, row.last_status) == ("failed", 0)
        assert "ConnectionRefusedError" in row.last_answer


class TestSlack:
    def test_it_posts_slacks_incoming_webhook_json(self, allowed, project):
        with receiver() as r:
            row = sent_once(project, "slack", r.url)
        assert row.state == "sent"
        body = r.requests[0][3]
        sent = json.loads(body)
        assert sent["text"] == "Errors on model m-[redacted]"
        kinds_of_blocks = [b["type"] for b in sent["blocks"]]
        assert kinds_of_blocks == ["header", "section", "section", "context", "context"]
        assert sent["blocks"][2]["fields"][1] == {"type": "mrkdwn", "text": "*Error rate*\n12 %"}
        links = sent["blocks"][4]["elements"][0]["text"]
        assert links == "<https://streamscope.example/?q=[redacted]|Streams>"
        assert leaks(body) == []


class TestWebhook:
    def test_no_secret_in_the_body_nor_in_what_is_stored(self, allowed, project):
        with receiver() as r:
            sent_once(project, "webhook", r.url)
        assert leaks(r.requests[0][3]) == []
        assert leaks(json.dumps(list(Delivery.objects.values("subject", "message")))) == []

    def test_a_receivers_answer_is_kept_redacted(self, allowed, project):
        with receiver("500") as r:
            r.answer = f"denied for {KEY}".encode()
            row = sent_once(project, "webhook", r.url)
        assert row.last_answer == "denied for [redacted]"


class TestApprise:
    def test_it_sends_through_apprise_to_a_json_service(self, allowed, project):
        with receiver() as r:
            target = r.url.replace("http://", "json://")
            row = sent_once(project, "apprise", target)
        assert row.state == "sent"
        sent = json.loads(r.requests[0][3])
        assert sent["title"] == "Errors on model m-[redacted]"
        assert "Error rate: 12 %" in sent["message"]
        assert leaks(r.requests[0][3]) == []


def test_a_message_is_bounded():
    m = Message(
        subject="x" * 10_000,
        lines=["y" * 5000] * 100,
        fields={f"k{i}": "v" for i in range(100)},
        series=[1.5] * 1000,
        links=[("ok", "https://a.example/"), ("js", "javascript:alert(1)")] * 20,
    )
    assert len(m.subject) == 200 and len(m.lines) == 30 and len(m.lines[0]) == 1000
    assert len(m.fields) == 20 and len(m.series) == 200
    assert Message("s", series=[1.0, float("nan"), float("inf"), "2", None, "x"]).series == (
        1.0,
        2.0,
    )
    assert set(m.links) == {("ok", "https://a.example/")}
    assert Message.from_json(m.as_json()) == m
