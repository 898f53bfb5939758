"""Issue 46's "done when", with real parts: two Daphne servers and a stream worker beside each
other on the test database, each running the periodic jobs; real paced streams from the
simulator process, one model turned slow (its pacing × 3, so its TTFT × 3); a real SMTP server
(aiosmtpd) and a real HTTP receiver on 127.0.0.1. The rule fires within two evaluation ticks of
the slow streams' end, the mail and the signed webhook arrive exactly once each, and when the
model is back to normal one recovery notice each."""

import json
import os
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from streams.models import ApiToken, Delivery, Firing, Project, Rule, RuleState, Stream
from streams.notify import channels, signing
from streams.stats.source import source_for
from streams.stats.sql import Scope
from tests.conftest import REPO, DaphneServer, database_url
from tests.support.mail import smtp_server
from tests.support.processes import wait_until
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-oss-20b"
TICK_S = 2.0
OVERRIDES = {
    "ALERT_TICK_S": TICK_S,
    "ALERT_ALLOWED_HOSTS": "127.0.0.1",
    "NOTIFY_TIMEOUT_S": 5.0,
    "MAX_CONCURRENT_PER_USER": 100,  # (a phase's streams are started at once)
    "JOBS_APART": True,  # (as production runs them; test servers otherwise run none apart)
}


class Worker:
    """`manage.py stream_worker` on the test database: a third process running the jobs."""

    def __init__(self, upstream_url, env):
        self.log = tempfile.NamedTemporaryFile(prefix="worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "stream_worker", "--drain", "2"],
            cwd=REPO,
            env=env | {"UPSTREAM_BASE_URL": upstream_url, "STREAMSCOPE_RUNNER": "worker"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()
        os.unlink(self.log.name)


def start(server, token, n, slow, first=0):
    ids = []
    for i in range(first, first + n):
        metadata = {"sentences": "1", "seed": str(i)}
        if slow:
            metadata["time_scale"] = "3"
        r = httpx.post(
            f"{server.url}/api/streams/",
            json={"input": "Utrecht?", "model": MODEL, "metadata": metadata},
            headers={"Authorization": f"Bearer {token}"},
            timeout=15,
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def finished(ids, timeout=60):
    def done():
        return not Stream.objects.filter(pk__in=ids, status__in=Stream.ACTIVE_STATUSES).exists()

    wait_until(done, timeout, interval=0.2, what="streams to finish")
    return time.time()


def ttft_p50(project, model):
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    scope = Scope(project.pk, start=now - dt.timedelta(minutes=5), end=now, resolved_model=model)
    return source_for(scope, now).percentiles({None: None}, qs=(500,))[None][500]


def test_a_slow_model_fires_once_and_recovers_once(simulator_process, settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, **OVERRIDES}
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("alerting")
    project = Project.personal(user)
    token = ApiToken.issue(user, name="done-when", project=project)
    with smtp_server(settings) as inbox, receiver() as hook:
        mail_env = {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(settings.EMAIL_PORT),
        }
        mail, _none = channels.create(project, "ops mail", "email", "ops@example.com")
        webhook, secret = channels.create(project, "ops hook", "webhook", hook.url)
        servers = [
            DaphneServer(simulator_process.base_url, overrides=OVERRIDES, env=mail_env)
            for _n in range(2)
        ]
        worker_env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "tests.live_settings",
            "DATABASE_URL": database_url(),
            "STREAMSCOPE_TEST_OVERRIDES": json.dumps(OVERRIDES),
            **mail_env,
        }
        worker = Worker(simulator_process.base_url, worker_env)
        try:
            # normal traffic, then a rule at 1.5 times its TTFT p50
            normal = start(servers[0], token, 3, False) + start(servers[1], token, 3, False, 3)
            finished(normal)
            normal_p50 = ttft_p50(project, MODEL)
            rule = Rule.objects.create(
                project=project, name="slow gpt-oss-20b", figure="ttft_p50", window_s=300,
                resolved_model=MODEL, comparison=">", threshold=1.5 * normal_p50, min_streams=3,
            )  # fmt: skip
            rule.channels.set([mail, webhook])
            wait_until(
                lambda: RuleState.objects.filter(rule=rule, evaluated_at__isnull=False).exists(),
                10 * TICK_S,
                interval=0.2,
                what="the rule's first evaluation",
            )
            assert RuleState.objects.get(rule=rule).state == "ok"

            # the model turned slow: more slow streams than normal ones in the window
            slow = start(servers[0], token, 4, True, 10) + start(servers[1], token, 4, True, 20)
            slow_done = finished(slow)
            assert ttft_p50(project, MODEL) > 1.5 * normal_p50
            wait_until(
                lambda: Firing.objects.filter(rule=rule).exists(), 6 * TICK_S, interval=0.1,
                what="the rule to fire",
            )  # fmt: skip
            firing = Firing.objects.get(rule=rule)
            # within two ticks (and the second the jobs look for due work) of the slow streams'
            # end; the recorded end is a moment later than the rows say they ended
            assert firing.started_at.timestamp() - slow_done <= 2 * TICK_S + 1.5
            wait_until(lambda: len(inbox.messages) >= 1 and len(hook.requests) >= 1, 30,
                       interval=0.2, what="the mail and the webhook")  # fmt: skip

            # back to normal: normal streams outnumber the slow ones again
            back = start(servers[1], token, 6, False, 30) + start(servers[0], token, 6, False, 40)
            finished(back)
            wait_until(
                lambda: Firing.objects.filter(rule=rule, ended_at__isnull=False).exists(),
                6 * TICK_S, interval=0.1, what="the rule to recover",
            )  # fmt: skip
            wait_until(lambda: len(inbox.messages) >= 2 and len(hook.requests) >= 2, 30,
                       interval=0.2, what="the recovery notices")  # fmt: skip
            time.sleep(3 * TICK_S)  # (three more ticks: nothing more is sent)
        finally:
            worker.stop()
            for server in servers:
                server.stop()
    subjects = [m["Subject"] for _to, m in inbox.messages]
    assert subjects == ["Firing: slow gpt-oss-20b", "Recovered: slow gpt-oss-20b"]
    assert [to for to, _m in inbox.messages] == [["ops@example.com"], ["ops@example.com"]]
    bodies = []
    for _method, _path, headers, body in hook.requests:
        value = {k.lower(): v for k, v in headers.items()}[signing.HEADER]
        assert signing.verify(secret, value, body)
        bodies.append(json.loads(body)["subject"])
    assert bodies == ["Firing: slow gpt-oss-20b", "Recovered: slow gpt-oss-20b"]
    assert Firing.objects.filter(rule=rule).count() == 1
    assert Delivery.objects.filter(state="sent").count() == 4
