"""Delivery (streams/notify/deliver.py): once per (channel, key), signed, retried with backoff,
given up; every attempt bounded whatever the receiver does. Real receivers on 127.0.0.1."""

import datetime as dt
import json
import socket
import time

import pytest

from streams.models import Delivery, Project
from streams.notify import Message, channels, deliver, signing
from streams.observe import telemetry
from tests.support.receiver import HUGE_BYTES, receiver

pytestmark = pytest.mark.django_db

TIMEOUT_S = 1.0
# a hostile receiver holds on for a minute: an attempt must be over long before
HOSTILE_S = 60


@pytest.fixture
def allowed(settings):
    settings.STREAMSCOPE = {
        **settings.STREAMSCOPE,
        "ALERT_ALLOWED_HOSTS": "127.0.0.1",
        "NOTIFY_TIMEOUT_S": TIMEOUT_S,
        "NOTIFY_MAX_ATTEMPTS": 3,
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


def hook(project, r, name="hook", kind="webhook"):
    return channels.create(project, name, kind, r.url)


class TestOnce:
    def test_the_same_key_is_one_delivery_per_channel(self, allowed, project):
        with receiver() as r:
            channel, _secret = hook(project, r)
            first = deliver.send([channel], MESSAGE, "rule-1-firing-1")
            again = deliver.send([channel], MESSAGE, "rule-1-firing-1")
            assert [d.pk for d in first] == [d.pk for d in again]
            assert deliver.deliver_due() == 1
            assert deliver.deliver_due(later(3600)) == 0
            assert len(r.requests) == 1
        delivery = Delivery.objects.get()
        assert (delivery.state, delivery.attempts, delivery.last_status) == ("sent", 1, 200)
        assert delivery.sent_at is not None and delivery.next_at is None

    def test_a_row_another_process_claimed_is_not_claimed_again(self, allowed, project):
        with receiver() as r:
            channel, _secret = hook(project, r)
            deliver.send([channel], MESSAGE, "k")
            at = deliver.now()
            seen = deliver.due(at, 10)  # this process looked…
            assert len(seen) == 1
            assert len(deliver.claim_due(at)) == 1  # …another claimed meanwhile
            assert [deliver.claim(pk, next_at, at) for pk, next_at in seen] == [False]
        assert Delivery.objects.get().attempts == 1

    def test_a_disabled_channel_gets_nothing_but_its_test(self, allowed, project):
        with receiver() as r:
            channel, _secret = hook(project, r)
            channels.update(channel, enabled=False)
            assert deliver.send([channel], MESSAGE, "k") == []
            deliver.send_test(channel, None)
            deliver.deliver_due()
            assert len(r.requests) == 1
            assert json.loads(r.requests[0][3])["subject"] == "Test notification from Streamscope"


class TestSigned:
    def test_a_webhook_is_signed_over_timestamp_and_body(self, allowed, project):
        with receiver() as r:
            channel, secret = hook(project, r)
            assert secret.startswith("whsec_")
            deliver.send([channel], MESSAGE, "k")
            deliver.deliver_due()
        _method, _path, headers, body = r.requests[0]
        headers = {k.lower(): v for k, v in headers.items()}
        value = headers[signing.HEADER]
        assert signing.verify(secret, value, body)
        assert not signing.verify(secret, value, body + b" ")  # another body
        assert not signing.verify("whsec_other", value, body)  # another key
        t = int(value.split(",")[0].removeprefix("t="))
        assert not signing.verify(secret, value, body, now=t + signing.TOLERANCE_S + 1)  # replay
        sent = json.loads(body)
        assert headers["streamscope-delivery"] == str(sent["delivery"])
        assert (sent["subject"], sent["series"], sent["key"]) == (
            MESSAGE.subject,
            [1.0, 1.2, 3.1],
            "k",
        )
        assert sent["fields"] == {"Value": "3.1 s", "Threshold": "2 s"}
        assert sent["links"] == [{"label": "Latency", "url": MESSAGE.links[0][1]}]


class TestHostileReceivers:
    def test_a_500_is_retried_with_backoff_then_given_up(self, allowed, project):
        with receiver("500") as r:
            channel, _secret = hook(project, r)
            deliver.send([channel], MESSAGE, "k")
            before = telemetry.NOTIFICATIONS.labels("webhook", "given_up")._value.get()
            assert deliver.deliver_due() == 1
            row = Delivery.objects.get()
            assert (row.state, row.attempts, row.last_status) == ("failed", 1, 500)
            assert row.last_answer == "receiver broke"
            # first retry after notify_backoff_s (30 s, ±20 %), the next after twice that
            wait = (row.next_at - deliver.now()).total_seconds()
            assert 20 < wait < 37
            assert deliver.deliver_due(later(10)) == 0  # not due yet
            assert deliver.deliver_due(later(40)) == 1
            row.refresh_from_db()
            wait = (row.next_at - deliver.now()).total_seconds()
            assert 45 < wait < 73
            assert deliver.deliver_due(later(100)) == 1
            row.refresh_from_db()
            assert (row.state, row.attempts, row.next_at) == ("given_up", 3, None)
            assert deliver.deliver_due(later(10_000)) == 0
            assert len(r.requests) == 3
        after = telemetry.NOTIFICATIONS.labels("webhook", "given_up")._value.get()
        assert after == before + 1

    def test_a_404_is_given_up_at_once(self, allowed, project):
        with receiver("404") as r:
            channel, _secret = hook(project, r)
            deliver.send([channel], MESSAGE, "k")
            deliver.deliver_due()
        row = Delivery.objects.get()
        assert (row.state, row.attempts, row.last_status) == ("given_up", 1, 404)

    @pytest.mark.parametrize("behaviour", ["hang", "trickle"])
    def test_a_receiver_that_holds_on_costs_the_time_limit_and_blocks_no_other(
        self, allowed, project, behaviour
    ):
        with receiver(behaviour) as bad, receiver() as good:
            slow, _ = hook(project, bad, "slow")
            fine, _ = hook(project, good, "fine")
            deliver.send([slow, fine], MESSAGE, "k")
            started = time.monotonic()
            assert deliver.deliver_due() == 2
            took = time.monotonic() - started
            assert len(good.requests) == 1 and len(bad.requests) == 1
        assert took < HOSTILE_S / 3, took  # the receiver would have held on for a minute
        rows = {d.channel_id: d for d in Delivery.objects.all()}
        assert rows[fine.pk].state == "sent"
        assert (rows[slow.pk].state, rows[slow.pk].last_status) == ("failed", 0)
        assert rows[slow.pk].last_answer == f"no answer within {TIMEOUT_S:g} s"

    def test_a_10_mb_answer_is_read_no_further_than_its_first_bytes(self, allowed, project):
        with receiver("huge") as r:
            channel, _ = hook(project, r)
            deliver.send([channel], MESSAGE, "k")
            deliver.deliver_due()
            time.sleep(0.2)  # (the receiver's writes fail once the connection is gone)
            written = r.written
        row = Delivery.objects.get()
        assert (row.state, row.last_status) == ("sent", 200)
        assert row.last_answer == "x" * 500
        assert written < HUGE_BYTES  # it was not all taken

    def test_a_redirect_is_not_followed(self, allowed, project):
        with receiver("redirect") as r, receiver() as elsewhere:
            r.location = elsewhere.url
            channel, _ = hook(project, r)
            deliver.send([channel], MESSAGE, "k")
            deliver.deliver_due()
            assert elsewhere.requests == []
        row = Delivery.objects.get()
        assert (row.state, row.last_status) == ("given_up", 302)
        assert row.last_answer == f"redirect to {elsewhere.url} not followed"


class TestAddresses:
    def test_a_name_that_resolves_to_a_private_address_at_send_time_is_refused(
        self, settings, project, monkeypatch
    ):
        """DNS rebinding: public when the channel was saved, loopback when it is used."""
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "NOTIFY_TIMEOUT_S": TIMEOUT_S}
        real = socket.getaddrinfo
        answer = {"address": "93.184.215.14"}

        def resolving(host, port, *args, **kwargs):
            if host == "hooks.rebind.test":
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer["address"], port))]
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", resolving)
        with receiver() as r:
            url = r.url.replace("127.0.0.1", "hooks.rebind.test")
            channel, _ = channels.create(project, "rebound", "webhook", url)
            answer["address"] = "127.0.0.1"
            deliver.send([channel], MESSAGE, "k")
            deliver.deliver_due()
            assert r.requests == []
        row = Delivery.objects.get()
        assert (row.state, row.last_status) == ("failed", 0)
        assert "private or local address" in row.last_answer


def test_every_process_runs_the_delivery_jobs():
    from streams.run import periodic

    jobs = periodic.jobs()
    assert jobs["notify.deliver"].fn is deliver.deliver_due
    assert jobs["notify.deliver"].every_s == deliver.DELIVER_EVERY_S
    assert jobs["notify.remember"].fn is channels.remember_all
