"""/channels/ (dashboard/views/channels.py): a project's admins make, change, test and delete
its channels and read each one's delivery log; members and viewers see the names only; someone
outside the project finds nothing. A target is never shown whole again, nor written back."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from streams.models import Channel, Delivery, Membership, Project
from streams.notify import channels, deliver
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db

TOKEN = "Zq81Lm2093XbVwTy55pK"


class TestChannelPages:
    @pytest.fixture(autouse=True)
    def _setup(self, settings):
        settings.STREAMSCOPE = {
            **settings.STREAMSCOPE,
            "ALERT_ALLOWED_HOSTS": "127.0.0.1",
            "NOTIFY_TIMEOUT_S": 2.0,
        }
        users = get_user_model().objects
        self.people = {
            name: users.create_user(name) for name in ("owner", "admin", "member", "outsider")
        }
        self.team = Project.objects.create(name="Team", slug="team")
        for role in ("owner", "admin", "member"):
            Membership.objects.create(project=self.team, user=self.people[role], role=role)
        other = Project.objects.create(name="Other", slug="other")
        Membership.objects.create(project=other, user=self.people["outsider"], role="owner")
        self.channel, _ = channels.create(self.team, "ops mail", "email", "ops@example.com")

    def client(self, who):
        client = Client()
        client.force_login(self.people[who])
        client.get(reverse("channel_list"), {"project": "team" if who != "outsider" else "other"})
        return client

    def test_an_admin_makes_a_webhook_and_sees_its_signing_secret_once(self):
        admin = self.client("admin")
        with receiver() as r:
            url = f"{r.url}/{TOKEN}"
            page = admin.post(
                reverse("channel_list"), {"name": "hook", "kind": "webhook", "target": url}
            )
            assert page.status_code == 200
            secret = re.search(r'value="(whsec_[^"]+)"', page.content.decode()).group(1)
            channel = Channel.objects.get(name="hook")
            assert channels.signing_secret_of(channel) == secret
            detail = admin.get(reverse("channel_detail", args=[channel.pk])).content.decode()
            assert secret not in detail and TOKEN[:8] not in detail
            assert f"http://127.0.0.1/…{TOKEN[-4:]}" in detail
            listed = admin.get(reverse("channel_list")).content.decode()
            assert TOKEN[:8] not in listed and "whsec_" not in listed

    def test_a_refused_target_is_a_400_that_says_why_and_does_not_write_it_back(self):
        page = self.client("owner").post(
            reverse("channel_list"),
            {"name": "meta", "kind": "webhook", "target": f"http://169.254.169.254/{TOKEN}"},
        )
        assert page.status_code == 400
        text = page.content.decode()
        assert "169.254.169.254 is a private or local address" in text
        assert TOKEN not in text
        assert not Channel.objects.filter(name="meta").exists()

    def test_members_see_the_names_only_and_an_outsider_finds_nothing(self):
        member = self.client("member")
        listed = member.get(reverse("channel_list")).content.decode()
        assert "ops mail" in listed and "ops@example.com" not in listed
        assert 'name="target"' not in listed
        detail = reverse("channel_detail", args=[self.channel.pk])
        assert member.get(detail).status_code == 403
        assert member.post(reverse("channel_list"), {"name": "x"}).status_code == 403
        outsider = self.client("outsider")
        assert "ops mail" not in outsider.get(reverse("channel_list")).content.decode()
        assert outsider.get(detail).status_code == 404
        assert outsider.post(reverse("channel_test", args=[self.channel.pk])).status_code == 404

    def test_send_test_is_delivered_and_logged(self):
        owner = self.client("owner")
        with receiver() as r:
            channel, _ = channels.create(self.team, "hook", "webhook", r.url)
            answer = owner.post(reverse("channel_test", args=[channel.pk]))
            assert answer.status_code == 302
            assert deliver.deliver_due() == 1
            assert len(r.requests) == 1
        log = owner.get(reverse("channel_detail", args=[channel.pk])).content.decode()
        row = Delivery.objects.get(channel=channel)
        assert f'id="delivery-{row.pk}" class="delivery" data-state="sent"' in log
        assert "Test notification from Streamscope" in log

    def test_a_change_keeps_the_target_unless_a_new_one_is_given(self):
        owner = self.client("owner")
        url = reverse("channel_detail", args=[self.channel.pk])
        assert owner.post(url, {"name": "ops", "target": ""}).status_code == 302
        self.channel.refresh_from_db()
        assert (self.channel.name, self.channel.enabled) == ("ops", False)
        assert channels.target_of(self.channel) == "ops@example.com"
        owner.post(url, {"name": "ops", "target": "oncall@example.com", "enabled": "on"})
        self.channel.refresh_from_db()
        assert channels.target_of(self.channel) == "oncall@example.com" and self.channel.enabled

    def test_deleting_needs_the_confirmation(self):
        owner = self.client("owner")
        url = reverse("channel_delete", args=[self.channel.pk])
        assert owner.post(url).status_code == 400
        assert Channel.objects.filter(pk=self.channel.pk).exists()
        assert owner.post(url, {"confirm": "on"}).status_code == 302
        assert not Channel.objects.filter(pk=self.channel.pk).exists()
