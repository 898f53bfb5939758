"""The analytics pages (/latency/, /routing/, /analytics/): who may see what, filters, empty
states, polling, escaping of untrusted model names and reasoning, the admin index link.

There are no teams in Streamscope: besides the owner and a stranger, the third person of the
healthchecks-style base is a staff member, who sees every stream."""

import datetime as dt
import re

import pytest
from django.test import Client

from streams.management.commands.seed_demo import _settable_created_at
from streams.models import Finding, Stream
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
