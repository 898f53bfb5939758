"""The analytics pages (/latency/, /routing/, /analytics/): who may see what, filters, empty
states, polling, escaping of untrusted model names and reasoning, the admin index link.

Besides the owner and a stranger (each in their personal project), the third person of the
healthchecks-style base is a staff member, who works in every project at once (the switcher's
"all"; `TestProjects` has them in one)."""

import csv
import datetime as dt
import io
import re

import pytest
from django.test import Client

from streams.management.commands.seed_demo import _settable_created_at
from streams.models import Finding, Project, Stream
from tests.conftest import log_in_people

EVIL = '<script>alert("m")</script>'


def stream(user, resolved, ttft, requested="auto", minutes_ago=30, **kw):
    created = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes_ago)
    fields = {
        "user": user,
        "resolved_model": resolved,
        "requested_model": requested,
        "status": "completed",
        "ttft_ms": ttft,
        "request_written_us": 1000,
        "headers_us": 5000,
        "created_event_us": 6000,
        "first_token_us": 1000 + int(ttft * 1000),
        "created_at": created,
    }
    fields.update(kw)
    return Stream(**fields)


class Base:
    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)
        self.anonymous_client = Client()
        r = self.staff_client.post("/projects/switch/", {"project": "all", "next": "/"})
        assert r.status_code == 302
        with _settable_created_at():
            self.streams = Stream.objects.bulk_create(
                [
                    stream(self.owner, "owner-model", 120.0, routing_category="chat",
                           routing_source="rules", routing_us=30_000,
                           routing_reasoning="Because <i>short</i>"),
                    stream(self.owner, "owner-model", 240.0, routing_category="chat",
                           routing_source="rules", routing_us=30_000),
                    stream(self.owner, "owner-model", 360.0, requested="owner-model"),
                    stream(self.stranger, "stranger-model", 999.0, routing_category="code",
                           routing_source="rules", routing_us=30_000),
                ]
            )  # fmt: skip


class TestLatency(Base):
    url = "/latency/"

    def test_it_redirects_anonymous_users_to_login(self):
        r = self.anonymous_client.get(self.url)
        assert r.status_code == 302 and r["Location"].startswith("/login/?next=/latency/")

    def test_it_shows_the_owner_only_their_streams(self):
        r = self.owner_client.get(self.url)
        assert r.status_code == 200
        body = r.content.decode()
        assert "owner-model" in body
        assert "stranger-model" not in body  # not in tables, charts or filter menus
        assert "request sent → first output token" in body

    def test_it_hides_the_owners_streams_from_strangers(self):
        body = self.stranger_client.get(self.url).content.decode()
        assert "stranger-model" in body and "owner-model" not in body

    def test_staff_see_everyone(self):
        body = self.staff_client.get(self.url).content.decode()
        assert "owner-model" in body and "stranger-model" in body

    def test_it_lists_the_slowest_streams_with_links_to_their_timelines(self):
        body = self.owner_client.get(self.url).content.decode()
        slowest = body[body.index('id="slow-h"') :]
        first, second = (
            slowest.index(f"/streams/{self.streams[2].pk}/"),
            slowest.index(f"/streams/{self.streams[1].pk}/"),
        )
        assert first < second

    def test_it_filters_by_model(self):
        r = self.staff_client.get(self.url, {"model": "stranger-model"})
        assert r.status_code == 200
        assert r.context["report"].overall["count"] == 1
        assert r.context["report"].overall["p50"] == 999.0

    def test_it_filters_by_requested_model_and_status(self):
        r = self.owner_client.get(self.url, {"requested": "owner-model"})
        assert r.context["report"].overall["count"] == 1
        r = self.owner_client.get(self.url, {"status": "failed"})
        assert r.context["report"].empty

    def test_it_shows_an_empty_state(self):
        r = self.owner_client.get(self.url, {"range": "1h", "source": "import"})
        assert r.status_code == 200
        assert b'id="empty-state"' in r.content

    def test_it_rejects_invalid_filters(self):
        r = self.owner_client.get(self.url, {"range": "forever"})
        assert r.status_code == 400
        assert b"Select a valid choice" in r.content
        r = self.owner_client.get(self.url, {"range": "custom"})
        assert r.status_code == 400 and b"A custom range needs a start" in r.content

    def test_it_accepts_a_custom_range(self):
        start = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
        r = self.owner_client.get(self.url, {"range": "custom", "start": start})
        assert r.status_code == 200 and r.context["report"].overall["count"] == 3

    def test_it_compares_two_models(self):
        r = self.staff_client.get(
            self.url, {"compare": "models", "a": "owner-model", "b": "stranger-model"}
        )
        comparison = r.context["report"].comparison
        p50 = next(d for d in comparison.deltas if d["key"] == "p50")
        assert (p50["a"], p50["b"]) == (240.0, 999.0)
        assert b'id="cmp-h"' in r.content

    def test_it_compares_a_range_with_the_one_before(self):
        r = self.owner_client.get(self.url, {"range": "1h", "compare": "previous"})
        comparison = r.context["report"].comparison
        assert comparison.a is None and comparison.b["count"] == 3

    def test_charts_get_their_data_as_json_script(self):
        body = self.owner_client.get(self.url).content.decode()
        assert '<script id="hist-data" type="application/json">' in body
        assert '<script id="series-data" type="application/json">' in body
        assert 'data-chart="histogram"' in body and "<details" in body

    def test_a_poll_gets_the_content_region_or_204_when_nothing_changed(self):
        r = self.owner_client.get(self.url, headers={"HX-Request": "true"})
        assert r.status_code == 200
        assert b"<html" not in r.content and b'id="analytics"' in r.content
        version = re.search(rb'"v": "([^"]+)"', r.content).group(1).decode()
        r = self.owner_client.get(self.url, {"v": version}, headers={"HX-Request": "true"})
        assert r.status_code == 204
        # a full page load ignores the version
        assert self.owner_client.get(self.url, {"v": version}).status_code == 200

    def test_it_escapes_model_names(self):
        with _settable_created_at():
            Stream.objects.bulk_create([stream(self.owner, EVIL, 50.0)])
        body = self.owner_client.get(self.url).content.decode()
        assert EVIL not in body
        assert "&lt;script&gt;alert(&quot;m&quot;)&lt;/script&gt;" in body
        assert "\\u003Cscript\\u003E" in body  # inside the charts' JSON


class TestRouting(Base):
    url = "/routing/"

    def test_it_redirects_anonymous_users_to_login(self):
        r = self.anonymous_client.get(self.url)
        assert r.status_code == 302 and r["Location"].startswith("/login/?next=/routing/")

    def test_it_shows_the_owner_only_their_routing(self):
        r = self.owner_client.get(self.url)
        assert r.status_code == 200
        report = r.context["report"]
        assert report.total == 2
        assert [s["model"] for s in report.shares] == ["owner-model"]
        assert b"stranger-model" not in r.content

    def test_staff_see_everyone(self):
        report = self.staff_client.get(self.url).context["report"]
        assert {s["model"]: s["count"] for s in report.shares} == {
            "owner-model": 2,
            "stranger-model": 1,
        }

    def test_it_escapes_reasoning(self):
        body = self.owner_client.get(self.url).content.decode()
        assert "Because &lt;i&gt;short&lt;/i&gt;" in body and "<i>short</i>" not in body

    def test_it_lists_pinned_requests_with_a_routing_event(self):
        with _settable_created_at():
            [bad] = Stream.objects.bulk_create(
                [
                    stream(
                        self.owner,
                        "owner-model",
                        80.0,
                        requested="owner-model",
                        routing_us=20_000,
                        routing_category="chat",
                    )
                ]  # fmt: skip
            )
        r = self.owner_client.get(self.url)
        assert r.context["report"].pinned_routed_count == 1
        assert f'href="/streams/{bad.pk}/"'.encode() in r.content
        # the stranger does not see it
        assert self.stranger_client.get(self.url).context["report"].pinned_routed_count == 0

    def test_it_shows_an_empty_state(self):
        r = self.owner_client.get(self.url, {"source": "import"})
        assert r.status_code == 200 and b'id="empty-state"' in r.content


class TestLabels(Base):
    """The latency and routing pages filter by what a proxied request's client labelled it
    with (tag, session) and, for staff, by user; for anyone else a user only narrows."""

    @pytest.fixture(autouse=True)
    def _labelled(self, _people):
        routed = {"routing_source": "rules", "routing_us": 30_000, "source": "proxy"}
        with _settable_created_at():
            self.labelled = Stream.objects.bulk_create(
                [
                    stream(self.owner, "owner-model", 50.0, tags=["checkout", 'a"b'],
                           session="s-1", routing_category="chat", **routed),
                    stream(self.owner, "owner-model", 70.0, tags=["beta"], session="s-2",
                           routing_category="code", **routed),
                    stream(self.stranger, "stranger-model", 90.0, tags=["checkout"],
                           session="s-1", routing_category="chat", **routed),
                    stream(self.owner, "owner-model", 30.0, requested="owner-model",
                           tags=["pinned"], session="s-3", routing_category="chat", **routed),
                ]
            )  # fmt: skip
        Finding.objects.create(
            stream=self.labelled[3], code="routing_on_pinned_model", severity="error"
        )

    def latency(self, client, **query):
        r = client.get("/latency/", query)
        assert r.status_code == 200
        return r.context["report"]

    def test_latency_filters_by_tag(self):
        report = self.latency(self.owner_client, tag="checkout")
        assert (report.overall["count"], report.overall["p50"]) == (1, 50.0)
        assert [s["id"] for s in report.slowest] == [self.labelled[0].pk]
        assert self.latency(self.owner_client, tag='a"b').overall["count"] == 1
        assert self.latency(self.owner_client, tag="b").empty  # whole tags only
        assert self.latency(self.staff_client, tag="checkout").overall["count"] == 2

    def test_latency_filters_by_session_and_source(self):
        assert self.latency(self.owner_client, session="s-1").overall["count"] == 1
        assert self.latency(self.staff_client, session="s-1").overall["count"] == 2
        report = self.latency(self.owner_client, source="proxy", session="s-2")
        assert (report.overall["count"], report.overall["p50"]) == (1, 70.0)

    def test_staff_filter_by_user_and_others_only_narrow(self):
        report = self.latency(self.staff_client, user="stranger")
        assert report.overall["count"] == 2 and report.overall["max"] == 999.0
        assert self.latency(self.staff_client, user="stranger", tag="checkout").overall[
            "p50"
        ] == 90.0  # fmt: skip
        assert self.latency(self.staff_client, user="nobody").empty
        assert self.latency(self.owner_client, user="stranger").empty
        assert self.latency(self.owner_client, user="owner").overall["count"] == 6
        assert b'name="user"' in self.staff_client.get("/latency/").content
        assert b'name="user"' not in self.owner_client.get("/latency/").content

    def test_latency_routing_and_usage_filter_by_format(self):
        Stream.objects.filter(pk=self.labelled[1].pk).update(format="chat")
        report = self.latency(self.owner_client, format="chat")
        assert (report.overall["count"], report.overall["p50"]) == (1, 70.0)
        assert self.latency(self.owner_client, format="messages").empty
        # the owner's other streams (the base's three, two labelled) are Responses
        assert self.latency(self.owner_client, format="responses").overall["count"] == 5
        report = self.owner_client.get("/routing/", {"format": "chat"}).context["report"]
        assert report.total == 1 and report.categories == ["code"]
        usage = self.owner_client.get("/usage/", {"format": "chat"}).context["report"]
        assert usage.totals["streams"] == 1
        page = self.owner_client.get("/latency/", {"format": "chat"}).content.decode()
        assert '<option value="chat" selected>Chat Completions</option>' in page
        r = self.owner_client.get("/latency/", {"format": "grpc"})
        assert r.status_code == 400 and b"Select a valid choice" in r.content

    def test_routing_filters_by_tag_session_and_user(self):
        report = self.owner_client.get("/routing/", {"tag": "checkout"}).context["report"]
        assert report.total == 1 and report.categories == ["chat"]
        report = self.owner_client.get("/routing/", {"session": "s-2"}).context["report"]
        assert report.total == 1 and report.categories == ["code"]
        report = self.staff_client.get("/routing/", {"user": "stranger"}).context["report"]
        assert report.total == 2
        assert self.owner_client.get("/routing/", {"user": "stranger"}).context["report"].empty
        # findings are counted over the same streams
        report = self.owner_client.get("/routing/", {"tag": "pinned"}).context["report"]
        assert report.pinned_routed_findings == 1
        report = self.owner_client.get("/routing/", {"tag": "beta"}).context["report"]
        assert report.pinned_routed_findings == 0


class TestUsage(Base):
    url = "/usage/"

    @pytest.fixture(autouse=True)
    def _usage(self, _people):
        usage = {"input_tokens": 1000, "output_tokens": 200}
        with _settable_created_at():
            Stream.objects.bulk_create(
                [
                    stream(self.owner, "owner-model", 50.0, usage_source="reported",
                           cost_nanos=1_500_000, cost_currency="EUR", cached_input_tokens=30,
                           tags=["checkout"], **usage),
                    stream(self.owner, "owner-model", 60.0, usage_source="estimated",
                           cost_nanos=2_000_000, cost_currency="USD", **usage),
                    stream(self.stranger, "stranger-model", 70.0, usage_source="estimated",
                           cost_nanos=9_000_000, cost_currency="USD", **usage),
                    stream(self.owner, EVIL, 80.0, usage_source="estimated", **usage),
                ]
            )  # fmt: skip

    def test_it_redirects_anonymous_users_to_login(self):
        r = self.anonymous_client.get(self.url)
        assert r.status_code == 302 and r["Location"].startswith("/login/?next=/usage/")
        r = self.anonymous_client.get("/usage/export.csv")
        assert r.status_code == 302 and r["Location"].startswith("/login/?next=/usage/export.csv")

    def test_the_owner_sees_their_own_costs_per_currency(self):
        r = self.owner_client.get(self.url)
        assert r.status_code == 200
        body = r.content.decode()
        report = r.context["report"]
        assert report.totals["streams"] == 6 and report.users is None
        assert "stranger-model" not in body and 'id="users-h"' not in body
        assert report.currencies == ["EUR", "USD"]
        # each currency apart, as the money filter writes it; never added together
        assert "€0.00150" in body and "$0.00200" in body and "$0.0110" not in body
        # the streams without a price are counted, never shown as a cost of 0
        assert "no price" in body and "€0.00<" not in body
        assert "incl. 2 estimated streams" in body  # the tokens say they include estimates
        assert '<a href="/usage/" aria-current="page">' in body

    def test_staff_see_everyone_per_user(self):
        r = self.staff_client.get(self.url)
        users = {u["username"]: u["streams"] for u in r.context["report"].users}
        assert users == {"owner": 6, "stranger": 2}
        assert b'id="users-h"' in r.content and b"$0.0110" in r.content

    def test_it_filters_by_model_and_tag(self):
        report = self.staff_client.get(self.url, {"model": "stranger-model"}).context["report"]
        assert report.totals["streams"] == 2 and report.currencies == ["USD"]
        report = self.owner_client.get(self.url, {"tag": "checkout"}).context["report"]
        assert [t["tag"] for t in report.tags] == ["checkout"] and report.currencies == ["EUR"]

    def test_the_chart_gets_its_data_as_json_script(self):
        body = self.owner_client.get(self.url).content.decode()
        assert '<script id="spend-data" type="application/json">' in body
        assert 'data-chart="spend"' in body and "js/charts.js" in body

    def test_empty_state_invalid_filters_and_polls(self):
        r = self.owner_client.get(self.url, {"range": "1h", "source": "import"})
        assert r.status_code == 200 and b'id="empty-state"' in r.content
        assert self.owner_client.get(self.url, {"range": "forever"}).status_code == 400
        r = self.owner_client.get(self.url, headers={"HX-Request": "true"})
        version = re.search(rb'"v": "([^"]+)"', r.content).group(1).decode()
        r = self.owner_client.get(self.url, {"v": version}, headers={"HX-Request": "true"})
        assert r.status_code == 204

    def test_it_escapes_model_names(self):
        body = self.owner_client.get(self.url).content.decode()
        assert EVIL not in body and "&lt;script&gt;alert(&quot;m&quot;)&lt;/script&gt;" in body

    def test_dutch_amounts(self):
        self.owner_client.cookies["django_language"] = "nl"
        body = self.owner_client.get(self.url).content.decode()
        assert "€\u00a00,00150" in body

    def csv(self, client, query=None, **headers):
        r = client.get("/usage/export.csv", query or {}, headers=headers)
        assert r.status_code == 200
        assert r["Content-Type"] == "text/csv; charset=utf-8"
        assert r["Content-Disposition"] == 'attachment; filename="usage.csv"'
        assert r.streaming
        text = b"".join(r.streaming_content).decode()
        assert text.endswith("\r\n")
        return list(csv.DictReader(io.StringIO(text)))

    def test_the_csv_is_the_per_model_table_as_data(self):
        rows = {r["resolved_model"]: r for r in self.csv(self.owner_client)}
        assert set(rows) == {"owner-model", EVIL}
        row = rows["owner-model"]
        assert (row["streams"], row["streams_estimated"], row["input_tokens"]) == ("5", "1", "2000")
        # amounts as decimal strings in their currency; no price is empty, not 0
        assert (row["cost_eur"], row["cost_usd"]) == ("0.001500000", "0.002000000")
        assert (rows[EVIL]["cost_eur"], rows[EVIL]["cost_usd"]) == ("", "")
        assert row["range_end_utc"].endswith("Z")

    def test_the_csv_takes_the_pages_filters_and_stays_english(self):
        rows = self.csv(self.staff_client, {"model": "stranger-model"}, HTTP_ACCEPT_LANGUAGE="nl")
        assert [r["resolved_model"] for r in rows] == ["stranger-model"]
        assert rows[0]["cost_usd"] == "0.009000000"  # "." decimals, whatever the language
        # a custom start is read in the zone the page showed it in (the link's tz), then UTC
        start = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)).astimezone(
            dt.timezone(dt.timedelta(hours=9))
        )
        query = {"range": "custom", "start": start.strftime("%Y-%m-%dT%H:%M"), "tz": "Asia/Tokyo"}
        rows = self.csv(self.owner_client, query)
        assert rows[0]["range_start_utc"] == start.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:00Z")
        r = self.owner_client.get(
            "/usage/export.csv", {"range": "forever"}, HTTP_ACCEPT_LANGUAGE="nl"
        )
        assert r.status_code == 400 and b"Select a valid choice" in r.content

    def test_the_page_links_its_csv_with_its_filters_and_zone(self):
        body = self.owner_client.get(self.url, {"range": "24h", "tag": "checkout"}).content.decode()
        assert 'href="/usage/export.csv?range=24h&amp;tag=checkout&amp;tz=UTC"' in body


class TestAdminAnalytics(Base):
    url = "/analytics/"

    def test_it_redirects_anonymous_users_to_login(self):
        r = self.anonymous_client.get(self.url)
        assert r.status_code == 302 and r["Location"].startswith("/login/?next=/analytics/")

    def test_it_returns_403_for_non_staff(self):
        assert self.owner_client.get(self.url).status_code == 403

    def test_it_shows_staff_every_user(self):
        r = self.staff_client.get(self.url)
        assert r.status_code == 200
        users = {u["username"]: u["streams"] for u in r.context["report"].users}
        assert users == {"owner": 3, "stranger": 1}
        assert b'id="daily-data"' in r.content

    def test_the_admin_index_links_to_it(self):
        r = self.staff_client.get("/admin/")
        assert r.status_code == 200 and b'href="/analytics/"' in r.content


class TestRangeDefault(Base):
    def test_a_query_without_a_range_uses_and_shows_the_default(self):
        r = self.owner_client.get("/latency/", {"source": "live"})
        assert r.status_code == 200
        assert b'<option value="7d" selected>' in r.content
        assert r.context["report"].scope.start is not None


class TestLatencyScores(Base):
    """The latency page's "Scores by model" section (dashboard/stats/scores.py)."""

    url = "/latency/"

    @pytest.fixture(autouse=True)
    def _scores(self, _people):
        from django.db import transaction

        from streams.models import Score, ScoreType
        from streams.store import aggregates

        self.thumbs = ScoreType.objects.get(name="thumbs")
        self.quality = ScoreType.objects.create(name="quality", kind="numeric", maximum=10)
        given = [(0, 1), (1, 1), (2, 0), (3, 0)]  # (stream, thumbs): the owner's three, then
        for i, value in given:  # the stranger's
            Score.objects.create(stream=self.streams[i], score_type=self.thumbs, value=value,
                                 author=self.owner, source="person")  # fmt: skip
        with transaction.atomic():
            aggregates.rebuild()

    def test_it_shows_the_owners_scores_beside_ttft(self):
        r = self.owner_client.get(self.url)
        assert r.status_code == 200
        rows = r.context["report"].scores.rows
        assert [(x["model"], x["scores"], x["positive"], x["ttft_p50"]) for x in rows] == [
            ("owner-model", 3, 2, 240.0)
        ]
        assert rows[0]["mean"] == 2 / 3
        body = r.content.decode()
        assert 'id="scores-h"' in body and "Scores by model: thumbs" in body
        assert '<script id="scores-data" type="application/json">' in body
        assert 'data-chart="scores"' in body
        assert '<option value="thumbs" selected>' in body
        assert "stranger-model" not in body

    def test_a_score_type_is_chosen_by_name(self):
        r = self.staff_client.get(self.url, {"score": "quality"})
        assert r.status_code == 200
        assert r.context["report"].scores.score_type == self.quality
        body = r.content.decode()
        assert '<option value="quality" selected>' in body
        assert 'id="scores-empty"' in body and "No scores in this range" in body
        assert 'data-chart="scores"' not in body

    def test_it_rejects_a_score_type_that_does_not_exist(self):
        r = self.owner_client.get(self.url, {"score": "<b>nope</b>"})
        assert r.status_code == 400
        body = r.content.decode()
        assert "There is no score type named" in body
        assert "&lt;b&gt;nope&lt;/b&gt;" in body and "<b>nope</b>" not in body
        assert r.context["report"] is None

    def test_the_scores_of_deleted_streams_stay_when_the_page_has_no_streams(self):
        """Retention deletes the stream rows and keeps the rollups: a model whose streams are
        all gone has no TTFT figures, and its scores are still shown."""
        from django.db import transaction

        from streams.models import Score
        from streams.store import aggregates

        with _settable_created_at():
            (old,) = Stream.objects.bulk_create(
                [stream(self.owner, "old-model", 300.0, minutes_ago=3 * 24 * 60)]
            )
        with transaction.atomic(), aggregates.tracking([old.pk]):
            aggregates.add_streams([old.pk])
            Score.objects.create(stream=old, score_type=self.thumbs, value=1, source="api")
        with transaction.atomic(), aggregates.keeping():  # as retention deletes
            Stream.objects.filter(pk=old.pk).delete()
        r = self.owner_client.get(self.url, {"model": "old-model"})
        assert r.status_code == 200 and r.context["report"].empty
        rows = r.context["report"].scores.rows
        assert [(x["model"], x["scores"], x["positive"], x["ttft_p50"]) for x in rows] == [
            ("old-model", 1, 1, None)
        ]
        assert b'id="empty-state"' in r.content and b'id="scores-h"' in r.content


class TestProjects(Base):
    """The pages read the page's project (`request.project`): a colleague sees a team
    project's streams, whoever recorded them; someone outside it gets a 404; staff in one
    project see that project's streams alone."""

    @pytest.fixture(autouse=True)
    def _team(self, _people):
        from streams.models import Membership, Project

        self.team = Project.objects.create(name="Team", slug="team")
        Membership.objects.create(project=self.team, user=self.owner, role="owner")
        self.colleague, self.colleague_client = _member(self.team, "colleague", "viewer")
        with _settable_created_at():
            Stream.objects.bulk_create(
                [stream(self.owner, "team-model", 50.0, project=self.team) for _ in range(3)]
            )

    @pytest.mark.parametrize("url", ["/latency/", "/routing/", "/usage/"])
    def test_a_colleague_sees_the_projects_streams(self, url):
        body = self.colleague_client.get(url + "?project=team").content.decode()
        assert "team-model" in body and "owner-model" not in body

    def test_the_owner_sees_their_personal_project_by_default_and_the_team_by_choice(self):
        body = self.owner_client.get("/latency/").content.decode()
        assert "owner-model" in body and "team-model" not in body
        body = self.owner_client.get("/latency/?project=team").content.decode()
        assert "team-model" in body and "owner-model" not in body

    def test_it_returns_404_for_strangers(self):
        assert self.stranger_client.get("/latency/?project=team").status_code == 404

    def test_staff_in_one_project_see_that_project_alone(self):
        body = self.staff_client.get("/analytics/?project=team").content.decode()
        assert "team-model" in body and "owner-model" not in body
        report = self.staff_client.get("/latency/?project=team").context["report"]
        assert report.overall["count"] == 3

    def test_the_usage_export_is_the_projects(self):
        body = self.colleague_client.get("/usage/export.csv?project=team")
        text = b"".join(body.streaming_content).decode()
        assert "team-model" in text and "owner-model" not in text


def _member(project, name, role):
    from django.contrib.auth import get_user_model

    from streams.models import Membership

    user = get_user_model().objects.create_user(name)
    Membership.objects.create(project=project, user=user, role=role)
    client = Client()
    client.force_login(user)
    return user, client


class TestSpendPerProject(Base):
    """The staff page over every project says which project spends what; in one project it
    is that project's page, without the table."""

    @pytest.fixture(autouse=True)
    def _spend(self, _people):
        from streams.models import Project

        self.team = Project.objects.create(name="Team <b>", slug="team")
        with _settable_created_at():
            Stream.objects.bulk_create(
                [
                    stream(None, "team-model", 50.0, project=self.team, cost_nanos=2_500_000_000,
                           cost_currency="EUR", input_tokens=100, output_tokens=40,
                           usage_source="reported"),
                    stream(self.owner, "owner-model", 50.0, cost_nanos=1_000_000_000,
                           cost_currency="EUR", input_tokens=10, output_tokens=4,
                           usage_source="reported"),
                ]
            )  # fmt: skip

    def test_it_lists_each_projects_spend_most_first(self):
        r = self.staff_client.get("/analytics/")
        projects = r.context["report"].projects
        rows = [(p["slug"], p["streams"], dict(p["costs"])["EUR"]) for p in projects]
        owner = Project.personal(self.owner).slug
        stranger = Project.personal(self.stranger).slug
        assert rows == [("team", 1, 2_500_000_000), (owner, 4, 1_000_000_000), (stranger, 1, 0)]
        assert r.context["report"].project_count == 3
        body = r.content.decode()
        assert "Team &lt;b&gt;" in body and 'href="/analytics/?project=team"' in body

    def test_in_one_project_it_has_no_project_table(self):
        r = self.staff_client.get("/analytics/?project=team")
        assert r.context["report"].projects is None
        assert r.context["report"].totals["streams"] == 1
        assert "Team &lt;b&gt;" in r.content.decode()
