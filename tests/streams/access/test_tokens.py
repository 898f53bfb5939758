"""Project tokens (streams/access/tokens.py, limits.py, streams/store/spend.py): real proxied
streams through a real Daphne and the simulator, with the official openai SDK and httpx, reach
a spend cap; a rate limit; expired, revoked, out-of-scope and too-low-role tokens; the API in a
token's project; `create_token`."""

import datetime as dt
import io
import json
import time
from decimal import Decimal

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.db.models import Sum

from streams.access import limits
from streams.core.pricing import NANO
from streams.models import ApiToken, Membership, Price, Project, Stream
from streams.store import spend
from tests.conftest import DaphneServer
from tests.support.clients import HeaderClient
from tests.support.recording import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

META = {"deterministic_ids": "true", "seed": "7", "time_scale": "0.02"}


def request(scenario="normal", **metadata):
    return {
        "model": "auto",
        "input": "Tell me about Utrecht",
        "stream": True,
        "metadata": {**META, "scenario": scenario, **metadata},
    }


def post(server, body, token, timeout=30):
    """The raw exchange: status, headers and the body's bytes."""
    with httpx.Client(timeout=timeout) as client:
        r = client.post(
            f"{server.url}/v1/responses",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )
        return r.status_code, r.headers, r.content


def models(server, token):
    with httpx.Client(timeout=30) as client:
        return client.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(autouse=True)
def _requests_counted_per_test(monkeypatch):
    """Requests per token are counted in the cache by token id (streams/access/throttle.py):
    each test counts its own, in keys of its own."""
    import os

    from streams.access import throttle

    monkeypatch.setattr(throttle, "_TOKEN_KEY", f"{throttle._TOKEN_KEY}:{os.urandom(6).hex()}")


@pytest.fixture
def team(people):
    """A project with the owner as its admin, `people.member` a member, `people.viewer` a
    viewer."""
    from django.contrib.auth import get_user_model

    project = Project.objects.create(name="Team", slug="team")
    User = get_user_model()
    people.member = User.objects.create_user("member")
    people.viewer = User.objects.create_user("viewer")
    for user, role in (
        (people.owner, Membership.Role.ADMIN),
        (people.member, Membership.Role.MEMBER),
        (people.viewer, Membership.Role.VIEWER),
    ):
        Membership.objects.create(project=project, user=user, role=role)
    return project


# ---- the proxy -------------------------------------------------------------------------------


class TestProxy:
    def test_a_proxied_stream_lands_in_the_tokens_project_and_names_its_token(
        self, live_server_daphne, team, people
    ):
        token = ApiToken.issue(people.member, project=team)
        client = openai.OpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )
        events = list(client.responses.create(**request()))
        assert events[-1].type == "response.completed"
        stream = wait_terminal(Stream.objects.get(source=Stream.Source.PROXY).pk)
        row = ApiToken.objects.get(digest=ApiToken.hash(token))
        assert (stream.project_id, stream.token_id, stream.user) == (team.pk, row.pk, people.member)

    def test_an_expired_token_is_401_saying_so(self, live_server_daphne, people):
        token = ApiToken.issue(
            people.owner, expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        )
        status, headers, body = post(live_server_daphne, request(), token)
        error = json.loads(body)["error"]
        assert status == 401 and error["code"] == "token_expired"
        assert "expired" in error["message"] and headers["www-authenticate"].startswith("Bearer")
        assert not Stream.objects.exists()

    def test_a_revoked_token_is_401_saying_so(self, live_server_daphne, people):
        token = ApiToken.issue(people.owner, revoked=True)
        status, _, body = post(live_server_daphne, request(), token)
        assert status == 401 and json.loads(body)["error"]["code"] == "token_revoked"

    def test_a_token_without_the_proxy_scope_is_403_naming_it(self, live_server_daphne, people):
        token = ApiToken.issue(people.owner, scopes=["read", "write"])
        status, _, body = post(live_server_daphne, request(), token)
        error = json.loads(body)["error"]
        assert status == 403 and error["code"] == "insufficient_scope"
        assert error["scope"] == "proxy" and "'proxy'" in error["message"]
        assert not Stream.objects.exists()

    def test_a_viewers_token_may_not_start_streams(self, live_server_daphne, team, people):
        token = ApiToken.issue(people.viewer, project=team)
        status, _, body = post(live_server_daphne, request(), token)
        assert status == 403 and json.loads(body)["error"]["code"] == "role_too_low"
        assert not Stream.objects.exists()

    def test_a_token_of_someone_no_longer_a_member_is_401(self, live_server_daphne, team, people):
        token = ApiToken.issue(people.member, project=team)
        Membership.objects.filter(user=people.member, project=team).delete()
        status, _, body = post(live_server_daphne, request(), token)
        assert status == 401 and json.loads(body)["error"]["code"] == "not_a_member"

    def test_over_its_requests_per_minute_a_token_gets_429_with_retry_after(
        self, live_server_daphne, people
    ):
        token = ApiToken.issue(people.owner, requests_per_minute=3)
        # The window slides over two fixed minutes, the previous one weighted by how much of it
        # still overlaps (streams/access/throttle.py): a 4th request just past a minute's turn
        # counts the 3 as 2.99 and passes. The four go early in one minute.
        if time.time() % 60 > 40:
            time.sleep(60.5 - time.time() % 60)
        assert [models(live_server_daphne, token).status_code for _ in range(3)] == [200] * 3
        r = models(live_server_daphne, token)
        error = r.json()["error"]
        assert r.status_code == 429 and error["code"] == "rate_limited" and error["limit"] == 3
        assert 1 <= int(r.headers["retry-after"]) <= 60
        # another token of the same user is not held back by it
        assert models(live_server_daphne, people.owner.token).status_code == 200


@pytest.fixture
def priced_server(django_db_setup, simulator_process, _relay_db_connections):
    """A Daphne of its own: it reads the team's prices at its first stream, so a test that sets
    one before then has it from the start (another server may have read none a moment ago)."""
    server = DaphneServer(simulator_process.base_url)
    yield server
    server.stop()


class TestSpendCap:
    # 1000 EUR per million tokens: a simulated answer costs some tenths of a euro
    PER_MILLION = Decimal(1000)
    CAP = Decimal("0.5")

    def test_streams_reach_the_cap_then_429_until_the_next_utc_day(self, priced_server, people):
        Price.objects.create(
            model_pattern="*",
            effective_from=dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
            currency="EUR",
            input_per_million=self.PER_MILLION,
            output_per_million=self.PER_MILLION,
        )
        cap = int(self.CAP * NANO)
        token = ApiToken.issue(people.owner, spend_cap_day_nanos=cap)
        row = ApiToken.objects.get(digest=ApiToken.hash(token))
        client = openai.OpenAI(base_url=f"{priced_server.url}/v1", api_key=token, max_retries=0)
        served = 0
        for _ in range(30):
            try:
                events = list(client.responses.create(**request()))
            except openai.RateLimitError as refused:
                error = refused.body
                retry_after = int(refused.response.headers["retry-after"])
                break
            assert events[-1].type == "response.completed"
            served += 1
        else:
            raise AssertionError("30 streams and never refused")
        assert served >= 1
        streams = list(Stream.objects.filter(token=row))
        assert len(streams) == served and all(s.cost_nanos for s in streams)
        assert all(s.cost_currency == "EUR" for s in streams)
        spent = sum(s.cost_nanos for s in streams)
        # the cap was reached, by at most the last stream's cost
        assert spent >= cap and spent - cap < streams[-1].cost_nanos
        assert spent - streams[-1].cost_nanos < cap  # (it was let through: under the cap)
        assert error["code"] == "spend_cap_reached" and error["period"] == "day"
        assert error["cap"] == "0.500000000" and error["currency"] == "EUR"
        assert Decimal(error["spent"]) * NANO == spent
        now = dt.datetime.now(dt.UTC)
        midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
        assert abs(retry_after - (midnight - now).total_seconds()) <= 5
        # listing the models costs nothing: not refused for the cap
        assert models(priced_server, token).status_code == 200
        # the counter is the sum over the token's streams, and the refused request made none
        row.refresh_from_db()
        assert row.spent_day_nanos == row.spent_month_nanos == spent
        assert Stream.objects.filter(token=row).aggregate(n=Sum("cost_nanos"))["n"] == spent

    def test_streams_started_through_the_api_count_and_reach_the_cap_too(
        self, priced_server, people
    ):
        Price.objects.create(
            model_pattern="*",
            effective_from=dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
            currency="EUR",
            input_per_million=self.PER_MILLION,
            output_per_million=self.PER_MILLION,
        )
        cap = int(self.CAP * NANO)
        team = Project.objects.create(name="API team", slug="api-team")
        Membership.objects.create(project=team, user=people.owner, role="member")
        token = ApiToken.issue(people.owner, project=team, spend_cap_day_nanos=cap)
        row = ApiToken.objects.get(digest=ApiToken.hash(token))
        auth = {"Authorization": f"Bearer {token}"}
        body = {"input": "Tell me about Utrecht", "metadata": {"time_scale": 0.02}}
        with httpx.Client(base_url=priced_server.url, headers=auth, timeout=30) as client:
            # a token works in its own project, and only there
            assert client.get("/api/streams/", params={"project": "nope"}).status_code == 404
            for _ in range(30):
                r = client.post("/api/streams/", json=body)
                if r.status_code == 429:
                    break
                assert r.status_code == 201, r.text
                wait_terminal(r.json()["id"], timeout=30)
            else:
                raise AssertionError("30 streams and never refused")
        assert r.json()["error"]["code"] == "spend_cap_reached" and "retry-after" in r.headers
        streams = list(Stream.objects.filter(token=row))
        assert streams and all(s.project_id == team.pk for s in streams)
        spent = sum(s.cost_nanos for s in streams)
        assert spent >= cap and spent - streams[-1].cost_nanos < cap
        row.refresh_from_db()
        assert row.spent_day_nanos == spent


class TestSpendCounter:
    def test_a_new_day_starts_from_zero_and_the_month_keeps_adding(self, people):
        now = dt.datetime(2026, 3, 31, 23, 0, tzinfo=dt.UTC)
        day, month = spend.periods(now)
        got = spend.of_row(day - dt.timedelta(days=1), 7, month, 9, now=now)
        assert (got.day_nanos, got.month_nanos) == (0, 9)
        later = now + dt.timedelta(hours=2)  # April
        assert spend.of_row(day, 7, month, 9, now=later) == spend.Spent(0, 0)

    def test_until_the_next_utc_day_and_month(self):
        now = dt.datetime(2026, 12, 31, 23, 59, 30, tzinfo=dt.UTC)
        assert limits.until_next(limits.DAY, now) == 30
        assert limits.until_next(limits.MONTH, now) == 30
        now = dt.datetime(2026, 2, 10, 12, tzinfo=dt.UTC)
        assert limits.until_next(limits.MONTH, now) == (18 * 24 + 12) * 3600

    def test_only_costs_in_the_projects_currency_count(self, people):
        class Rec:
            def __init__(self, token_id):
                self.token_id = token_id

        ApiToken.issue(people.owner)
        row = ApiToken.objects.get(user=people.owner, name="")
        finished = dt.datetime.now(dt.UTC)
        spend.count(
            {Rec(row.pk): {"cost_nanos": 5, "cost_currency": "EUR", "finished_at": finished}}
        )
        spend.count(
            {Rec(row.pk): {"cost_nanos": 7, "cost_currency": "USD", "finished_at": finished}}
        )
        spend.count(
            {Rec(row.pk): {"cost_nanos": 11, "cost_currency": "EUR", "finished_at": finished}}
        )
        assert spend.figures(row.pk) == spend.Spent(16, 16)


# ---- the API ---------------------------------------------------------------------------------


def client_of(token):
    return HeaderClient({"authorization": f"Bearer {token}"})


class TestApi:
    async def test_a_read_only_token_may_read_but_not_write(self, people):
        token = await sync_to_async(ApiToken.issue)(people.owner, scopes=["read"])
        r = await client_of(token).get("/api/streams/")
        assert r.status_code == 200
        r = await client_of(token).post(
            "/api/comments/", json.dumps({"stream": 1, "body": "x"}), "application/json"
        )
        error = r.json()["error"]
        assert r.status_code == 403 and error["code"] == "insufficient_scope"
        assert error["scope"] == "write"

    async def test_a_token_without_read_may_not_read(self, people):
        token = await sync_to_async(ApiToken.issue)(people.owner, scopes=["proxy"])
        r = await client_of(token).get("/api/streams/")
        assert r.status_code == 403 and r.json()["error"]["scope"] == "read"

    async def test_an_expired_token_is_401_saying_so(self, people):
        expired = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        token = await sync_to_async(ApiToken.issue)(people.owner, expires_at=expired)
        r = await client_of(token).get("/api/streams/")
        assert r.status_code == 401 and r.json()["error"]["code"] == "token_expired"

    async def test_a_tokens_request_works_in_the_tokens_project(self, team, people):
        from django.http import JsonResponse
        from django.test import RequestFactory

        from dashboard.project import ProjectMiddleware, project_of
        from streams.serve.http import api_view

        token = await sync_to_async(ApiToken.issue)(people.member, project=team)
        seen = {}

        @api_view
        async def view(request):
            seen["project"] = await sync_to_async(project_of)(request)
            return JsonResponse({})

        async def through_middleware(request):
            return await view(request)

        request = RequestFactory().get("/api/x/", headers={"authorization": f"Bearer {token}"})
        # (the member's remembered project would be their personal one)
        response = await ProjectMiddleware(through_middleware)(request)
        assert response.status_code == 200 and seen["project"] == team

    async def test_over_its_requests_per_minute_the_api_is_429(self, people, throttle_clock):
        token = await sync_to_async(ApiToken.issue)(people.owner, requests_per_minute=2)
        codes = [(await client_of(token).get("/api/streams/")).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        r = await client_of(token).get("/api/streams/")
        assert r.json()["error"]["code"] == "rate_limited" and int(r["Retry-After"]) >= 1


# ---- create_token ----------------------------------------------------------------------------


class TestCreateToken:
    def test_it_makes_a_token_in_the_project_with_its_scopes_and_expiry(self, team, people):
        out = io.StringIO()
        call_command(
            "create_token", "member", "--project", "Team", "--scope", "read", "--expires", "3",
            stdout=out,
        )  # fmt: skip
        row = ApiToken.objects.get(digest=ApiToken.hash(out.getvalue().strip()))
        assert (row.project, row.user, row.scopes) == (team, people.member, ["read"])
        left = row.expires_at - dt.datetime.now(dt.UTC)
        assert dt.timedelta(days=2, hours=23) < left <= dt.timedelta(days=3)

    def test_by_default_every_scope_in_the_personal_project(self, people):
        out = io.StringIO()
        call_command("create_token", "owner", stdout=out)
        row = ApiToken.objects.get(digest=ApiToken.hash(out.getvalue().strip()))
        assert row.project == Project.personal(people.owner)
        assert sorted(row.scopes) == ["proxy", "read", "write"] and row.expires_at is None

    def test_a_viewer_gets_no_token_and_a_stranger_none_either(self, team, people):
        with pytest.raises(CommandError, match="viewer"):
            call_command("create_token", "viewer", "--project", "team")
        with pytest.raises(CommandError, match="none"):
            call_command("create_token", "stranger", "--project", "team")
        with pytest.raises(CommandError, match="no project"):
            call_command("create_token", "owner", "--project", "nope")


# ---- the token page --------------------------------------------------------------------------


def signed_in(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def in_team(client, path="/tokens/"):
    """The page in the team's project (remembered for the POSTs after it)."""
    return client.get(path, {"project": "team"})


def row_ids(response):
    import re

    return sorted(int(n) for n in re.findall(r'id="token-(\d+)"', response.content.decode()))


def token_of(people, who, project, **fields):
    ApiToken.issue(getattr(people, who), project=project, name=f"{who}'s", **fields)
    return ApiToken.objects.get(user=getattr(people, who), project=project, name=f"{who}'s")


class TestTokenPage:
    def test_a_member_sees_and_makes_only_their_own(self, team, people):
        mine, admins = token_of(people, "member", team), token_of(people, "owner", team)
        client = signed_in(people.member)
        r = in_team(client)
        assert r.status_code == 200 and row_ids(r) == [mine.pk]
        assert r["Cache-Control"] == "private, no-store"
        # "for" offers themselves only: a token for someone else is not theirs to make
        r = client.post("/tokens/", {"owner": people.owner.pk, "scopes": ["read"]})
        assert r.status_code == 400
        assert not ApiToken.objects.filter(created_by=people.member).exists()
        r = client.post("/tokens/", {"name": "ci", "owner": people.member.pk, "scopes": ["read"]})
        assert r.status_code == 200
        made = ApiToken.objects.get(created_by=people.member)
        assert (made.user, made.project, made.scopes, made.name) == (
            people.member,
            team,
            ["read"],
            "ci",
        )
        # revoking: their own yes, the admin's is not found
        assert client.post(f"/tokens/{admins.pk}/revoke/").status_code == 404
        assert client.post(f"/tokens/{mine.pk}/revoke/").status_code == 302
        admins.refresh_from_db(), mine.refresh_from_db()
        assert (admins.revoked, mine.revoked) == (False, True)

    def test_an_admin_sees_every_token_of_the_project_and_makes_one_for_a_member(
        self, team, people
    ):
        mine, members = token_of(people, "owner", team), token_of(people, "member", team)
        elsewhere = token_of(people, "member", Project.personal(people.member))
        client = signed_in(people.owner)
        r = in_team(client)
        assert row_ids(r) == sorted([mine.pk, members.pk])
        assert elsewhere.pk not in row_ids(r)
        r = client.post(
            "/tokens/",
            {
                "name": "for ci",
                "owner": people.member.pk,
                "scopes": ["proxy"],
                "expires": "30",
                "requests_per_minute": "60",
                "spend_cap_day": "2.5",
                "spend_cap_month": "40",
            },
        )
        assert r.status_code == 200
        made = ApiToken.objects.get(name="for ci")
        assert (made.user, made.created_by, made.project) == (people.member, people.owner, team)
        assert (made.requests_per_minute, made.spend_cap_day_nanos) == (60, 2_500_000_000)
        assert made.spend_cap_month_nanos == 40 * NANO
        assert dt.timedelta(days=29) < made.expires_at - made.created_at <= dt.timedelta(days=30)
        # the token is on the page this once, and works (only its digest is kept)
        import re

        shown = re.search(r'value="(ss_[^"]+)"', r.content.decode()).group(1)
        assert ApiToken.hash(shown) == made.digest
        assert shown not in in_team(client).content.decode()
        # a viewer is no member to make one for
        r = client.post("/tokens/", {"owner": people.viewer.pk, "scopes": ["read"]})
        assert r.status_code == 400
        assert client.post(f"/tokens/{members.pk}/revoke/").status_code == 302
        members.refresh_from_db()
        assert members.revoked

    def test_a_viewer_is_refused_and_a_stranger_finds_nothing(self, team, people):
        members = token_of(people, "member", team)
        viewer = signed_in(people.viewer)
        assert in_team(viewer).status_code == 403
        assert viewer.post(f"/tokens/{members.pk}/revoke/").status_code == 404
        stranger = signed_in(people.stranger)
        assert in_team(stranger).status_code == 404  # a project they are not in
        assert stranger.post(f"/tokens/{members.pk}/revoke/").status_code == 404
        members.refresh_from_db()
        assert not members.revoked

    def test_the_page_shows_use_against_the_limits(self, team, people):
        from streams.access import throttle

        token = token_of(
            people, "member", team, requests_per_minute=10, spend_cap_day_nanos=2 * NANO
        )
        today, month = spend.periods(dt.datetime.now(dt.UTC))
        ApiToken.objects.filter(pk=token.pk).update(
            spent_day=today, spent_day_nanos=NANO // 4, spent_month=month, spent_month_nanos=NANO
        )
        for _ in range(3):
            throttle.token_request_allowed(token.pk, 10)
        page = in_team(signed_in(people.member)).content.decode()
        row = page[page.index(f'id="token-{token.pk}"') :]
        row = row[: row.index("</tr>")]
        assert '<td class="num requests">3 / 10</td>' in row
        assert '<td class="num spent-day">€0.250 / €2.00</td>' in row
        assert "€1.00 / <span" in row  # the month: no cap


# ---- the WebSockets --------------------------------------------------------------------------


class TestSockets:
    pytestmark = pytest.mark.usefixtures("_disconnect_communicators")

    async def test_a_socket_needs_the_read_scope(self, people):
        from tests.support.clients import ws

        proxy_only = await sync_to_async(ApiToken.issue)(people.owner, scopes=["proxy"])
        reader = await sync_to_async(ApiToken.issue)(people.owner, scopes=["read"])
        assert not (await ws("/ws/streams/", token=proxy_only).connect())[0]
        assert (await ws("/ws/streams/", token=reader).connect())[0]
