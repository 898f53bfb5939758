"""Channels (streams/notify/channels.py, targets.py): what targets are refused, sealed at rest,
never shown whole, and known to the egress gate (in this process and after a restart)."""

import json

import pytest
from django.core import serializers

from streams.models import Channel, Project
from streams.notify import channels, targets
from streams.notify.targets import Refused
from streams.serve import egress
from streams.store import known_secrets
from tests.support.clients import run_asgi as run

pytestmark = pytest.mark.django_db

TOKEN = "XyZ9abc7DEF3ghi1JKL5mno2"  # a Slack-like webhook token
SLACK_URL = f"https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/{TOKEN}"


@pytest.fixture
def project():
    return Project.objects.create(name="payments", slug="payments")


@pytest.fixture(autouse=True)
def _fresh_gate():
    known_secrets.forget_all()
    yield
    known_secrets.forget_all()


@pytest.fixture
def public_dns(monkeypatch):
    """hooks.slack.com (and any other name) resolves to a public address, offline."""
    monkeypatch.setattr(targets, "resolve", lambda host, port: ["93.184.215.14"])


class TestRefused:
    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1:8080/hook",
            "http://localhost/hook",
            "http://[::1]/hook",
            "http://10.1.2.3/hook",
            "http://192.168.0.10/hook",
            "http://169.254.169.254/latest/meta-data/",  # a cloud's metadata service
            "http://0.0.0.0/hook",
            "http://[::ffff:127.0.0.1]/hook",
            "http://2130706433/hook",  # 127.0.0.1 as one number
        ],
    )
    def test_private_and_local_addresses_unless_allowed(self, url, project, settings):
        with pytest.raises(Refused, match="private or local address"):
            channels.create(project, "x", "webhook", url)
        assert Channel.objects.count() == 0

    def test_an_allowed_host_is_accepted(self, project, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "ALERT_ALLOWED_HOSTS": "127.0.0.1"}
        channel, secret = channels.create(project, "x", "webhook", "http://127.0.0.1:9/hook")
        assert channel.pk and secret

    @pytest.mark.parametrize(
        "url",
        [
            "ftp://example.com/x",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "example.com/x",
            "https://",
        ],
    )
    def test_only_http_urls(self, url, project):
        with pytest.raises(Refused, match="Only http"):
            channels.create(project, "x", "slack", url)

    @pytest.mark.parametrize("target", ["file:///tmp/x", "windows://", "nosuch://x/y", "https://x"])
    def test_apprise_urls_it_does_not_send_over_the_network(self, target, project):
        with pytest.raises(Refused, match="Apprise does not know"):
            channels.create(project, "x", "apprise", target)

    def test_an_apprise_url_to_a_private_host(self, project):
        with pytest.raises(Refused, match="private or local"):
            channels.create(project, "x", "apprise", "json://127.0.0.1:9/hook")

    @pytest.mark.parametrize("target", ["", "not an address", "a@b.example, nope"])
    def test_e_mail_addresses(self, target, project):
        with pytest.raises(Refused):
            channels.create(project, "x", "email", target)

    def test_a_name_twice_in_a_project(self, project):
        channels.create(project, "ops", "email", "ops@example.com")
        with pytest.raises(Refused) as refused:
            channels.create(project, "ops", "email", "other@example.com")
        assert refused.value.field == "name"


class TestSealed:
    def test_the_target_is_sealed_at_rest_and_shown_masked(self, project, public_dns):
        channel, _ = channels.create(project, "slack", "slack", SLACK_URL)
        dumped = serializers.serialize("json", Channel.objects.all())
        assert TOKEN[:8] not in dumped and "B0EF45GH6" not in dumped
        assert channel.target_masked == f"https://hooks.slack.com/…{TOKEN[-4:]}"
        assert channels.target_of(Channel.objects.get()) == SLACK_URL

    def test_another_secret_key_cannot_open_it(self, project, public_dns, settings):
        channels.create(project, "slack", "slack", SLACK_URL)
        settings.SECRET_KEY = "another-secret-key-entirely-0123456789"
        assert channels.target_of(Channel.objects.get()) is None

    def test_the_gate_knows_its_secret_parts_here_and_after_a_restart(self, project, public_dns):
        channels.create(project, "slack", "slack", SLACK_URL)
        planted = f"<p>an upstream echoed {TOKEN} and {TOKEN[3:14]}</p>".encode()

        async def page(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": planted})

        def through_the_gate():
            sent = run(egress.EgressGate(page), {"type": "http", "path": "/x"})
            return b"".join(m.get("body", b"") for m in sent[1:])

        assert through_the_gate() == b"<p>an upstream echoed [redacted] and [redacted]</p>"
        known_secrets.forget_all()  # a new process
        known_secrets.refresh()
        assert through_the_gate() == b"<p>an upstream echoed [redacted] and [redacted]</p>"
        # the URL's words are not secrets: every page that says them would lose them
        assert known_secrets.redact("hooks.slack.com/services") == "hooks.slack.com/services"

    def test_remember_all_seals_a_part_pushed_out_again(self, project, public_dns):
        from streams.models import SealedSecret

        channels.create(project, "slack", "slack", SLACK_URL)
        SealedSecret.objects.all().delete()  # (pushed out by MAX_SEALED newer proxy keys)
        channels.remember_all()
        known_secrets.forget_all()
        known_secrets.refresh()
        assert known_secrets.redact(TOKEN) == "[redacted]"


def test_secret_parts_of_urls():
    parts = targets.secret_parts
    assert parts("slack", SLACK_URL) == {"T0AB12CD3", "B0EF45GH6", TOKEN}
    assert parts("webhook", "https://u:pa55word-x@h.example/hooks/incoming?token=abcDEF123456") == {
        "u:pa55word-x",
        "pa55word-x",
        "abcDEF123456",
    }
    assert parts("apprise", "discord://1234567890123/AbCdEfGhIjKl-mn") == {
        "1234567890123",
        "AbCdEfGhIjKl-mn",
    }
    assert parts("email", "ops@example.com") == set()
    # a query's free text is no credential (and spaces or quotes in a secret weaken the gate)
    assert parts("webhook", 'https://h.example/x?note="><img src=x onerror=alert(1)>') == set()


def test_masked_never_shows_more_than_the_host_and_last_4():
    assert (
        targets.masked("webhook", "https://h.example/a/b?c=SECRETVALUE9")
        == "https://h.example/…LUE9"
    )
    assert targets.masked("apprise", "discord://1234567890123/AbCdEfGhIjKl") == "discord://…IjKl"
    assert json.dumps(targets.masked("email", "a@b.example")) == '"a@b.example"'
