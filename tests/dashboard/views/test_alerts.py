"""The alert pages and API (dashboard/views/alerts.py, /api/alerts/): making a rule through the
form and the API with the one validation (NaN, infinity, out of range, a window too short: 400;
a scope the user may not see: 404), the backtest on the form equal to the evaluation's, the
overview's states (silenced included), staff's every-project view, and the notice's latency link
opening the latency page on the rule's window."""

import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from streams.alerts import evaluate, notices
from streams.models import ApiToken, Membership, Project, Rule, RuleState, Silence
from tests.support.alerts import rule, streams

pytestmark = pytest.mark.django_db

FORM = {
    "name": "slow",
    "figure": "ttft_p95",
    "window_s": "900",
    "comparison": ">",
    "threshold": "1000",
    "min_streams": "3",
    "for_s": "0",
    "renotify_s": "0",
    "notify_recovery": "on",
    "enabled": "on",
}


class TestAlerts:
    @pytest.fixture(autouse=True)
    def _setup(self, db):
        users = get_user_model().objects
        self.people = {
            name: users.create_user(name, is_staff=name == "staff")
            for name in ("admin", "member", "viewer", "outsider", "staff")
        }
        self.team = Project.objects.create(name="Team", slug="team")
        self.other = Project.objects.create(name="Other", slug="other")
        for role in ("admin", "member", "viewer"):
            Membership.objects.create(project=self.team, user=self.people[role], role=role)
        Membership.objects.create(project=self.other, user=self.people["outsider"], role="owner")

    def client(self, who):
        client = Client()
        client.force_login(self.people[who])
        client.get(reverse("alerts"), {"project": "team" if who != "outsider" else "other"})
        return client

    def post_rule(self, who, **changes):
        return self.client(who).post(reverse("alert_rule_new"), {**FORM, **changes})

    def test_a_member_makes_a_rule(self):
        r = self.post_rule("member", channels=[])
        assert r.status_code == 302
        made = Rule.objects.get()
        assert (made.project, made.threshold, made.window_s, made.created_by) == (
            self.team,
            1000.0,
            900,
            self.people["member"],
        )
        assert r["Location"] == reverse("alert_rule", args=[made.pk])

    def test_a_viewer_may_not(self):
        assert self.post_rule("viewer").status_code == 403
        assert self.client("viewer").get(reverse("alerts")).status_code == 200
        assert not Rule.objects.exists()

    @pytest.mark.parametrize(
        "changes",
        [
            {"threshold": "nan"},
            {"threshold": "inf"},
            {"threshold": "-1"},
            {"figure": "error_rate", "threshold": "150"},
            {"window_s": "60"},
            {"figure": "findings_share"},  # without its severity
        ],
    )
    def test_bad_input_is_a_400_and_makes_nothing(self, changes):
        r = self.post_rule("member", **changes)
        assert r.status_code == 400
        assert b'class="errorlist' in r.content
        assert not Rule.objects.exists()

    def test_a_scope_the_user_may_not_see_is_a_404(self):
        ApiToken.issue(self.people["admin"], name="the admin's", project=self.team)
        theirs = ApiToken.objects.get(user=self.people["admin"])
        form = self.client("member").get(reverse("alert_rule_new")).content.decode()
        assert theirs.prefix not in form  # not offered either
        assert self.post_rule("member", token=theirs.pk).status_code == 404
        assert self.post_rule("member", username="outsider").status_code == 404
        assert self.post_rule("admin", token=theirs.pk).status_code == 302  # an admin's own

    def test_another_projects_rule_is_a_404(self):
        theirs = rule(self.other)
        assert self.client("member").get(reverse("alert_rule", args=[theirs.pk])).status_code == 404
        r = self.client("member").post(reverse("alert_rule_delete", args=[theirs.pk]))
        assert r.status_code == 404 and Rule.objects.filter(pk=theirs.pk).exists()

    def test_the_backtest_is_the_evaluations(self):
        now = dt.datetime.now(dt.UTC)
        for hours in (30, 29, 5):
            streams(self.team, now - dt.timedelta(hours=hours), [3000, 3000, 3000])
        streams(self.team, now - dt.timedelta(hours=50), [100] * 3)
        r = self.client("member").post(reverse("alert_backtest"), {**FORM, "window_s": "3600"})
        assert r.status_code == 200
        page = r.content.decode()
        draft = Rule(
            project=self.team, name="slow", figure="ttft_p95", window_s=3600, comparison=">",
            threshold=1000.0, min_streams=3, for_s=0, renotify_s=0,
        )  # fmt: skip
        expected = evaluate.backtest(draft, now).count
        assert expected == 2  # (30 and 29 hours ago fall in one firing)
        assert f'data-fired="{expected}"' in page
        assert "would have fired 2 times" in page

    def test_the_overview_says_each_rules_state(self):
        firing, quiet, muted = (rule(self.team, name=n) for n in ("firing", "quiet", "muted"))
        RuleState.objects.create(rule=firing, project=self.team, state="firing")
        Silence.objects.create(
            project=self.team, rule=muted, until_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        )
        rule(self.other, name="theirs")
        page = self.client("viewer").get(reverse("alerts")).content.decode()
        assert f'id="rule-{firing.pk}" class="alert-rule" data-state="firing"' in page
        assert f'id="rule-{quiet.pk}" class="alert-rule" data-state="ok"' in page
        assert f'id="rule-{muted.pk}" class="alert-rule" data-state="silenced"' in page
        assert "theirs" not in page

    def test_the_silence_form_mutes_any_scope_and_no_token_of_another(self):
        ApiToken.issue(self.people["member"], name="ci", project=self.team)
        ApiToken.issue(self.people["admin"], name="deploy", project=self.team)
        mine = ApiToken.objects.get(name="ci")
        theirs = ApiToken.objects.get(name="deploy")
        client = self.client("member")
        form = {"hours": "1", "reason": "release"}
        r = client.post(reverse("alert_silences"), {**form, "tag": "prod", "source": "api"})
        assert r.status_code == 302
        r = client.post(reverse("alert_silences"), {**form, "token": str(mine.pk)})
        assert r.status_code == 302
        scopes = [s.scope for s in Silence.objects.filter(project=self.team).order_by("pk")]
        assert scopes == [{"source": "api", "tag": "prod"}, {"token": str(mine.pk)}]
        # a token the member may not scope a rule to (not theirs to manage): as if none existed
        r = client.post(reverse("alert_silences"), {**form, "token": str(theirs.pk)})
        assert r.status_code == 404
        assert Silence.objects.count() == 2
        r = client.post(reverse("alert_silences"), form)  # neither a rule nor a scope
        assert r.status_code == 400

    def test_staff_see_every_projects_rules(self):
        rule(self.team, name="ours")
        rule(self.other, name="theirs")
        client = Client()
        client.force_login(self.people["staff"])
        client.post(reverse("switch_project"), {"project": "all"})
        page = client.get(reverse("alerts")).content.decode()
        assert "ours" in page and "theirs" in page

    def test_the_notices_latency_link_opens_the_rules_window(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "PUBLIC_URL": "https://scope.example"}
        made = rule(self.team, resolved_model="m-a", window_s=3600)
        end = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
        url = dict(notices.links(made, end))["Latency"]
        client = self.client("viewer")
        # a reader in another zone than UTC (the page reads a bare time as theirs)
        client.post(reverse("set_time_zone"), {"tz": "Europe/Amsterdam"})
        r = client.get(url.removeprefix("https://scope.example"))
        assert r.status_code == 200
        form = r.context["form"]
        assert form.is_valid(), form.errors
        assert form.window(end) == (end - dt.timedelta(hours=1), end)


class TestApi:
    @pytest.fixture(autouse=True)
    def _setup(self, db):
        users = get_user_model().objects
        self.member = users.create_user("member")
        self.admin = users.create_user("admin")
        self.team = Project.objects.create(name="Team", slug="team")
        Membership.objects.create(project=self.team, user=self.member, role="member")
        Membership.objects.create(project=self.team, user=self.admin, role="admin")
        self.token = ApiToken.issue(self.member, project=self.team)

    def post(self, path, body, token=None):
        return Client().post(
            path,
            body if isinstance(body, str) else json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {token or self.token}"},
        )

    def body(self, **changes):
        return {**{k: v for k, v in FORM.items() if k not in ("notify_recovery", "enabled")},
                "threshold": 1000, "window_s": 900, **changes}  # fmt: skip

    def test_it_makes_and_lists_a_rule(self):
        r = self.post(reverse("api_alert_rules"), self.body())
        assert r.status_code == 201, r.content
        made = r.json()
        assert (made["figure"], made["threshold"], made["state"]["state"]) == (
            "ttft_p95",
            1000.0,
            "ok",
        )
        listed = Client().get(
            reverse("api_alert_rules"), headers={"Authorization": f"Bearer {self.token}"}
        )
        assert [x["id"] for x in listed.json()["rules"]] == [made["id"]]

    @pytest.mark.parametrize(
        "body",
        [
            '{"name": "x", "figure": "ttft_p95", "threshold": NaN, "window_s": 900}',
            '{"name": "x", "figure": "ttft_p95", "threshold": Infinity, "window_s": 900}',
            '{"name": "x", "figure": "ttft_p95", "threshold": 1e999, "window_s": 900}',
            '{"name": "x", "figure": "stalled_rate", "threshold": 101, "window_s": 900}',
            '{"name": "x", "figure": "ttft_p95", "threshold": 1, "window_s": 604801}',
            '{"name": "x", "figure": "ttft_p95", "threshold": "fast", "window_s": 900}',
        ],
    )
    def test_bad_input_is_a_400(self, body):
        r = self.post(reverse("api_alert_rules"), body)
        assert r.status_code == 400, r.content
        assert not Rule.objects.exists()

    def test_a_token_of_someone_else_is_a_404(self):
        ApiToken.issue(self.admin, name="theirs", project=self.team)
        theirs = ApiToken.objects.get(user=self.admin)
        r = self.post(reverse("api_alert_rules"), self.body(token=theirs.pk))
        assert r.status_code == 404
        assert not Rule.objects.exists()
