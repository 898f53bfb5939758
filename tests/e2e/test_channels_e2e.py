"""The channels' page in real Chromium against a real Daphne, whose own delivery job sends: a
project's admin makes a webhook channel, copies its signing secret from the page that shows it
once, presses "Send test", and a real receiver on 127.0.0.1 gets one webhook that the secret
verifies; the channel's log says it was sent. The target is never on a page whole."""

import json
import time

import pytest

from streams.models import Channel, Membership, Project
from streams.notify import signing
from tests.conftest import DaphneServer
from tests.e2e.conftest import take_screenshot
from tests.support.receiver import receiver

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOKEN = "Zq81Lm2093XbVwTy55pK"


def test_an_admin_makes_a_webhook_and_its_test_arrives_signed(
    logged_in_page, people, simulator_process
):
    team = Project.objects.create(name="Team", slug="team")
    Membership.objects.create(project=team, user=people.owner, role=Membership.Role.ADMIN)
    server = DaphneServer(
        simulator_process.base_url, overrides={"ALERT_ALLOWED_HOSTS": "127.0.0.1"}
    )
    try:
        with receiver() as r:
            page = logged_in_page(people.owner, base_url=server.url, path="/channels/?project=team")
            page.fill("#id_name", "on-call hook")
            page.select_option("#id_kind", "webhook")
            page.fill("#id_target", f"{r.url}/{TOKEN}")
            page.click(".channel-form button[type=submit]")
            secret = page.input_value("#channel-secret")
            assert secret.startswith("whsec_") and not page.errors and not page.csp_violations
            take_screenshot(page, "channel_created")

            page.click("text=To the channel")
            assert TOKEN[:8] not in page.content()
            assert page.inner_text("#channel-target") == f"http://127.0.0.1/…{TOKEN[-4:]}"
            page.click("#channel-send-test")
            deadline = time.monotonic() + 30  # (the server's job looks every 2 s)
            while not r.requests:
                assert time.monotonic() < deadline, "the test notification did not arrive"
                time.sleep(0.2)
            _method, path, headers, body = r.requests[0]
            headers = {k.lower(): v for k, v in headers.items()}
            assert path == f"/hook/{TOKEN}"
            assert signing.verify(secret, headers[signing.HEADER], body)
            assert json.loads(body)["subject"] == "Test notification from Streamscope"

            channel = Channel.objects.get(name="on-call hook")
            deadline = time.monotonic() + 15
            while not page.locator(".delivery[data-state=sent]").count():
                assert time.monotonic() < deadline, "the log does not say it was sent"
                time.sleep(0.5)
                page.goto(f"{server.url}/channels/{channel.pk}/")
            take_screenshot(page, "channel_detail")
            assert len(r.requests) == 1 and not page.errors and not page.csp_violations
    finally:
        server.stop()
