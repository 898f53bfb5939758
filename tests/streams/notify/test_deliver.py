"""Delivery: once per (channel, key), signed, retried with backoff, given up; real receivers."""

import datetime as dt
import json

import pytest

from streams.models import Delivery, Project
from streams.notify import Message, channels, deliver, signing
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def allowed(settings):
    settings.STREAMSCOPE = {
        **settings.STREAMSCOPE,
        "ALERT_ALLOWED_HOSTS": "127.0.0.1",
        "NOTIFY_TIMEOUT_S": 2.0,
    }
    return settings


@pytest.fixture
def project():
    return Project.objects.create(name="payments", slug="payments")


def later(seconds):
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


MESSAGE = Message(
    subject="TTFT p95 above 2 s",
    lines=["gpt-oss-120b: 3.1 s against 2 s over 15 minutes"],
    fields={"Value": "3.1 s", "Threshold": "2 s"},
    series=[1.0, 1.2, 3.1],
    links=[("Latency", "https://streamscope.example/latency/?model=gpt-oss-120b")],
)


class TestSend:
    def test_the_same_key_is_one_delivery_per_channel(self, allowed, project):
        with receiver() as r:
            channel, secret = channels.create(project, "hook", "webhook", r.url)
            first = deliver.send([channel], MESSAGE, "rule-1-firing-1")
            again = deliver.send([channel], MESSAGE, "rule-1-firing-1")
            assert [d.pk for d in first] == [d.pk for d in again]
            assert deliver.deliver_due() == 1
            assert deliver.deliver_due(later(3600)) == 0
            assert len(r.requests) == 1
        delivery = Delivery.objects.get()
        assert (delivery.state, delivery.attempts, delivery.last_status) == ("sent", 1, 200)

    def test_a_webhook_is_signed_over_timestamp_and_body(self, allowed, project):
        with receiver() as r:
            channel, secret = channels.create(project, "hook", "webhook", r.url)
            deliver.send([channel], MESSAGE, "k")
            deliver.deliver_due()
        _method, _path, headers, body = r.requests[0]
        value = {k.lower(): v for k, v in headers.items()}[signing.HEADER]
        assert signing.verify(secret, value, body)
        assert not signing.verify(secret, value, body + b" ")
        t = int(value.split(",")[0][2:])
        assert not signing.verify(secret, value, body, now=t + signing.TOLERANCE_S + 1)
        sent = json.loads(body)
        assert sent["subject"] == "TTFT p95 above 2 s"
        assert sent["series"] == [1.0, 1.2, 3.1]
