"""Share links (streams/access/shares.py, dashboard/views/shares.py, streams/live/shared.py):
making one, opening it (counted), expiry, revocation, throttling of wrong secrets, what a shared
page shows and what it must not (other streams, the owner), redaction on it, session links, and
the live socket that closes within seconds when its link is revoked or expires.

Who may use each route and socket, for every kind of visitor and link, is in
tests/streams/access/test_access.py's table."""

import datetime as dt
import hashlib
import json
import re
import time
from html.parser import HTMLParser

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from streams.access import shares
from streams.core import conf
from streams.live import relay, shared
from streams.models import Event, ShareLink, Stream
from streams.shapes import event_message
from streams.store import event_row
from tests.conftest import log_in_people
from tests.support.clients import ws
from tests.support.recording import recorded, text_events

KEY = "sk-shared-upstream-key-5521zz"


@pytest.fixture(autouse=True)
def _fresh_throttle(throttle_clock):
    # the wrong-secret counts live in the cache (per process here: locmem); their clock
    # stands still (tests/conftest.py)
    cache.clear()
    yield
    cache.clear()


def public_links(settings, on=True):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "PUBLIC_SHARE_LINKS": on}


def expire(link, seconds_ago=1):
    ShareLink.objects.filter(pk=link.pk).update(
        expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    )


class _Links(HTMLParser):
    """Every href and form action inside <main>."""

    def __init__(self):
        super().__init__()
        self.depth, self.found = 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "main":
            self.depth += 1
        if self.depth:
            self.found += [v for k, v in attrs if k in ("href", "action") and v is not None]

    def handle_endtag(self, tag):
        if tag == "main":
            self.depth -= 1


def links_in_main(text):
    parser = _Links()
    parser.feed(text)
    return parser.found


def main_of(text):
    return text[text.index("<main") : text.index("</main>")]


class Base:
    """An owner with a telling name and e-mail, a stream and a link to it; a teammate (another
    signed-in user), a staff member and anonymous clients."""

    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)
        self.alice = get_user_model().objects.create_user(
            "alice-ownr-91", email="alice91@example.org"
        )
        self.alice_client = Client()
        self.alice_client.force_login(self.alice)
        self.teammate_client = self.stranger_client
        self.anonymous = Client()
        self.stream = recorded(
            self.alice, text_events("The Dom ", "is tall."), prompt="How tall is the Dom?"
        )
        self.link, self.secret = shares.create(self.alice, stream=self.stream.pk)
        self.url = f"/s/{self.secret}/"


class TestCreating(Base):
    def test_the_secret_is_unguessable_and_only_its_digest_is_stored(self):
        assert self.secret.startswith("sl_") and len(self.secret) >= 3 + 43
        row = ShareLink.objects.values().get(pk=self.link.pk)
        assert row["digest"] == hashlib.sha256(self.secret.encode()).hexdigest()
        assert self.secret not in json.dumps(row, default=str)
        assert self.secret[3:13] not in json.dumps(row, default=str)
        _, other = shares.create(self.alice, stream=self.stream.pk)
        assert other != self.secret

    def test_it_expires_in_seven_days_by_default_and_never_beyond_thirty(self):
        left = self.link.expires_at - dt.datetime.now(dt.UTC)
        assert dt.timedelta(days=7) - dt.timedelta(minutes=1) < left <= dt.timedelta(days=7)
        for bad in (dt.timedelta(days=31), dt.timedelta(minutes=5), dt.timedelta(0)):
            with pytest.raises(ValueError):
                shares.create(self.alice, stream=self.stream.pk, expires_in=bad)

    def test_only_the_streams_owner_or_staff_may_share_it(self):
        with pytest.raises(shares.Refused):
            shares.create(self.stranger, stream=self.stream.pk)
        link, _ = shares.create(self.staff, stream=self.stream.pk)
        assert link.owner == self.staff

    def test_a_session_is_shared_by_who_has_streams_in_it(self):
        Stream.objects.filter(pk=self.stream.pk).update(session="s-1")
        link, _ = shares.create(self.alice, session="s-1")
        assert link.session == "s-1" and link.stream_id is None
        with pytest.raises(shares.Refused):
            shares.create(self.stranger, session="s-1")
        with pytest.raises(shares.Refused):
            shares.create(self.alice, session="s-nobody")
        with pytest.raises(ValueError):
            shares.create(self.alice, stream=self.stream.pk, session="s-1")

    def test_the_stream_page_offers_it_and_the_post_shows_the_link_once(self):
        page = self.alice_client.get(f"/streams/{self.stream.pk}/")
        assert 'action="/shares/new/"' in page.text and 'name="anyone"' not in page.text
        r = self.alice_client.post("/shares/new/", {"stream": self.stream.pk, "expires": "1d"})
        assert r.status_code == 200 and r["Cache-Control"] == "private, no-store"
        (url,) = re.findall(r'value="(http://testserver/s/sl_[\w-]+/)"', r.text)
        secret = url.rstrip("/").rsplit("/", 1)[1]
        link = ShareLink.objects.get(digest=ShareLink.hash(secret))
        assert link.owner == self.alice and link.stream_id == self.stream.pk and not link.anyone
        assert (
            dt.timedelta(hours=23)
            < link.expires_at - dt.datetime.now(dt.UTC)
            <= dt.timedelta(days=1)
        )
        assert self.teammate_client.get(url).status_code == 200
        # not shown again, anywhere
        assert secret not in self.alice_client.get("/shares/").text
        assert secret not in self.alice_client.get(f"/streams/{self.stream.pk}/").text

    def test_the_session_page_offers_it(self):
        Stream.objects.filter(pk=self.stream.pk).update(session="s-1")
        page = self.alice_client.get("/sessions/s-1/")
        assert 'action="/shares/new/"' in page.text and 'name="session" value="s-1"' in page.text
        r = self.alice_client.post("/shares/new/", {"session": "s-1", "expires": "7d"})
        assert r.status_code == 200 and "/s/sl_" in r.text

    def test_someone_elses_stream_is_a_404_and_bad_forms_a_400(self):
        r = self.stranger_client.post("/shares/new/", {"stream": self.stream.pk, "expires": "1d"})
        assert r.status_code == 404
        assert (
            self.staff_client.post(
                "/shares/new/", {"stream": self.stream.pk, "expires": "1d"}
            ).status_code
            == 200
        )
        for data in (
            {"stream": self.stream.pk, "expires": "never"},
            {"stream": self.stream.pk, "session": "s-1", "expires": "1d"},
            {"expires": "1d"},
        ):
            assert self.alice_client.post("/shares/new/", data).status_code == 400, data
        assert ShareLink.objects.filter(owner=self.alice).count() == 1

    def test_anyone_is_offered_and_kept_only_when_the_instance_allows_it(self, settings):
        data = {"stream": self.stream.pk, "expires": "1d", "anyone": "on"}
        self.alice_client.post("/shares/new/", data)
        assert not ShareLink.objects.latest("pk").anyone  # (a hand-made POST: ignored)
        public_links(settings)
        assert 'name="anyone"' in self.alice_client.get(f"/streams/{self.stream.pk}/").text
        self.alice_client.post("/shares/new/", data)
        assert ShareLink.objects.latest("pk").anyone


class TestOpening(Base):
    def test_a_teammate_opens_it_and_it_is_counted(self):
        r = self.teammate_client.get(self.url)
        assert r.status_code == 200 and r["Cache-Control"] == "private, no-store"
        assert "The Dom is tall." in r.text
        self.link.refresh_from_db()
        assert self.link.opened == 1 and self.link.last_opened_at is not None
        # the page's own requests are not openings
        base = f"/s/{self.secret}/streams/{self.stream.pk}/"
        for url in (base, f"{base}events/", f"{base}events/3/", f"{base}timing.json",
                    f"{base}replay.json"):  # fmt: skip
            assert self.teammate_client.get(url).status_code == 200, url
        self.anonymous.get(self.url)  # (a login redirect: not shown, not counted)
        self.alice_client.get(self.url)
        self.link.refresh_from_db()
        assert self.link.opened == 2

    def test_a_signed_out_visitor_is_sent_to_log_in_and_back(self):
        r = self.anonymous.get(self.url)
        assert r.status_code == 302 and r["Location"] == f"/login/?next=/s/{self.secret}/"
        # the login page says why, in the visitor's language
        login = self.anonymous.get(r["Location"]).content.decode()
        assert "This link is shared with the people who can log in here" in login
        dutch = Client(HTTP_ACCEPT_LANGUAGE="nl")
        r = dutch.get(self.url)
        login = dutch.get(r["Location"]).content.decode()
        assert "Deze link is gedeeld met wie hier kan inloggen" in login
        assert "This link" not in self.anonymous.get(r["Location"]).content.decode()  # (once)

    def test_a_link_for_anyone_opens_signed_out_only_while_the_instance_allows_it(self, settings):
        link, secret = shares.create(self.alice, stream=self.stream.pk, anyone=True)
        assert self.anonymous.get(f"/s/{secret}/").status_code == 302
        public_links(settings)
        r = self.anonymous.get(f"/s/{secret}/")
        assert r.status_code == 200 and "The Dom is tall." in r.text
        assert self.anonymous.get(self.url).status_code == 302  # a link for signed-in users
        public_links(settings, on=False)
        assert self.anonymous.get(f"/s/{secret}/").status_code == 302
        assert self.teammate_client.get(f"/s/{secret}/").status_code == 200

    def test_unknown_expired_and_revoked_links_get_one_and_the_same_404(self):
        _, expired = shares.create(self.alice, stream=self.stream.pk)
        expire(ShareLink.objects.get(digest=ShareLink.hash(expired)))
        revoked_link, revoked = shares.create(self.alice, stream=self.stream.pk)
        shared.revoke(self.alice, revoked_link.pk)
        pages = []
        for secret in ("sl_" + "x" * 43, expired, revoked, "nonsense", "sl_" + "y" * 500):
            r = self.teammate_client.get(f"/s/{secret}/")
            assert r.status_code == 404, secret
            assert r["Cache-Control"] == "private, no-store"
            pages.append(main_of(r.text))
        assert len(set(pages)) == 1 and "This link does not open" in pages[0]
        # the sub-resources too (signed out: 404 before any login redirect, nothing to keep)
        for secret in (expired, revoked):
            base = f"/s/{secret}/streams/{self.stream.pk}/"
            for url in (base, f"{base}events/", f"{base}timing.json"):
                assert self.teammate_client.get(url).status_code == 404, url
                assert self.anonymous.get(url).status_code == 404, url

    def test_an_owner_deactivated_opens_nothing(self):
        get_user_model().objects.filter(pk=self.alice.pk).update(is_active=False)
        assert self.teammate_client.get(self.url).status_code == 404


class TestThrottling(Base):
    def test_wrong_secrets_are_throttled_like_tokens(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "TOKEN_FAILURE_LIMIT": 3}
        fresh_link, fresh = shares.create(self.alice, stream=self.stream.pk)
        # a valid link used while this IP has failures on record is remembered as valid
        assert self.teammate_client.get("/s/sl_wrong-1/").status_code == 404
        assert self.teammate_client.get(self.url).status_code == 200
        for n in (2, 3):
            assert self.teammate_client.get(f"/s/sl_wrong-{n}/").status_code == 404
        r = self.teammate_client.get("/s/sl_wrong-4/")
        assert r.status_code == 429 and int(r["Retry-After"]) >= 1
        assert "Too many attempts" in r.text
        # a guess is not even looked up now, a valid link never seen from here neither...
        assert self.teammate_client.get(f"/s/{fresh}/").status_code == 429
        # ...but the one this IP used while valid still opens (a teammate behind the same NAT)
        assert self.teammate_client.get(self.url).status_code == 200
        # and the same window counts wrong bearer tokens
        r = self.anonymous.get("/api/streams/", headers={"Authorization": "Bearer ss_nope"})
        assert r.status_code == 429
        fresh_link.refresh_from_db()
        assert fresh_link.opened == 0

    def test_expired_and_revoked_secrets_count_as_wrong(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "TOKEN_FAILURE_LIMIT": 2}
        expire(self.link)
        for _ in range(2):
            assert self.teammate_client.get(self.url).status_code == 404
        assert self.teammate_client.get(self.url).status_code == 429


class TestRevoking(Base):
    def test_an_admin_revokes_links_in_the_admin_and_cannot_make_one_there(self):
        admin = Client()
        admin.force_login(get_user_model().objects.create_superuser("root-admin"))
        r = admin.post(
            "/admin/streams/sharelink/",
            {"action": "revoke", "_selected_action": [self.link.pk]},
        )
        assert r.status_code == 302
        self.link.refresh_from_db()
        assert self.link.revoked_at is not None
        assert self.teammate_client.get(self.url).status_code == 404
        assert admin.get("/admin/streams/sharelink/add/").status_code == 403

    def test_the_owner_revokes_on_the_shares_page(self):
        self.teammate_client.get(self.url)
        page = self.alice_client.get("/shares/")
        row = re.search(rf'<tr id="share-{self.link.pk}".*?</tr>', page.text, re.S).group(0)
        assert 'data-status="active"' in row and f"stream #{self.stream.pk}" in row
        assert f'action="/shares/{self.link.pk}/revoke/"' in row
        assert re.search(r'<td class="num">1</td>', row)  # opened once
        r = self.alice_client.post(f"/shares/{self.link.pk}/revoke/")
        assert r.status_code == 302 and r["Location"] == "/shares/"
        self.link.refresh_from_db()
        assert self.link.revoked_at is not None
        assert self.teammate_client.get(self.url).status_code == 404
        row = re.search(
            rf'<tr id="share-{self.link.pk}".*?</tr>', self.alice_client.get("/shares/").text, re.S
        ).group(0)
        assert 'data-status="revoked"' in row and "revoke/" not in row

    def test_expired_links_say_so(self):
        expire(self.link)
        assert f'id="share-{self.link.pk}" class="share-link" data-status="expired"' in (
            self.alice_client.get("/shares/").text
        )

    def test_nobody_else_sees_or_revokes_them_but_staff(self):
        assert f"share-{self.link.pk}" not in self.stranger_client.get("/shares/").text
        assert self.stranger_client.post(f"/shares/{self.link.pk}/revoke/").status_code == 404
        self.link.refresh_from_db()
        assert self.link.revoked_at is None
        assert self.staff_client.post(f"/shares/{self.link.pk}/revoke/").status_code == 302
        self.link.refresh_from_db()
        first = self.link.revoked_at
        assert first is not None
        self.alice_client.post(f"/shares/{self.link.pk}/revoke/")  # twice: the first time stays
        self.link.refresh_from_db()
        assert self.link.revoked_at == first


class TestWhatALinkShows(Base):
    """The stream's content and nothing else: no other stream's id, no link out of the link,
    nothing of the owner; secrets the upstream echoed are redacted."""

    @pytest.fixture(autouse=True)
    def _more(self, _people, settings):
        settings.UPSTREAM_API_KEY = KEY
        events = text_events("Your key is ", KEY, " and that is that.")
        self.echo = recorded(
            self.alice,
            events,
            session="s-alice",
            tags=["tag-alice"],
            resolved_model=f"m-{KEY}",
            error_code="invalid_api_key",
            error_message=f"Incorrect API key provided: {KEY}",
            status="failed",
        )
        # a retry of it, and other streams of the owner (one in the same session)
        self.retry = recorded(
            self.alice, text_events("again"), first_attempt=self.echo, attempt=2, session="s-alice"
        )
        self.others = [
            self.stream,
            self.retry,
            recorded(self.alice, text_events("x"), session="s-alice"),
        ]
        self.echo_link, self.echo_secret = shares.create(
            self.alice, stream=self.echo.pk, anyone=True
        )

    def pages(self):
        base = f"/s/{self.echo_secret}/"
        stream = f"{base}streams/{self.echo.pk}/"
        return [base, stream, f"{stream}events/", f"{stream}events/3/", f"{stream}timing.json",
                f"{stream}replay.json"]  # fmt: skip

    def test_no_other_stream_no_owner_and_no_way_out(self, settings):
        public_links(settings)
        for client in (self.teammate_client, self.anonymous, self.staff_client):
            r = client.get(f"/s/{self.echo_secret}/")
            assert r.status_code == 200
            text = r.text
            for other in self.others:
                found = re.search(rf'(streams/|#|stream-row-|"id": ){other.pk}\b', text)
                assert not found, (other.pk, found)
            for telling in (
                "alice-ownr-91",
                "alice91@example.org",
                "alice",
                "s-alice",
                "tag-alice",
            ):
                assert telling not in text, telling
            prefix = f"/s/{self.echo_secret}/"
            outside = [h for h in links_in_main(text) if not h.startswith((prefix, "?", "#"))]
            assert outside == []
            config = json.loads(re.search(
                r'<script id="timeline-config" type="application/json">(.*?)</script>', text, re.S
            ).group(1))  # fmt: skip
            assert config["ws"] == f"/ws/shared/{self.echo_secret}/{self.echo.pk}/"
            assert all(u.startswith(prefix) for u in config["urls"].values())
            assert config["probeUrl"] is None
        # signed out: no navigation of the site either
        anonymous = self.anonymous.get(f"/s/{self.echo_secret}/").text
        assert "/playground/" not in anonymous and 'href="/"' not in main_of(anonymous)

    def test_the_check_above_can_fail(self):
        # the owner's own stream page has all of it: attempts, session, tags, exports
        text = self.alice_client.get(f"/streams/{self.echo.pk}/").text
        assert f"/streams/{self.retry.pk}/" in text and "s-alice" in text and "tag-alice" in text
        assert [h for h in links_in_main(text) if h.startswith("/streams/")]

    def test_its_header_is_the_stream_pages_without_the_owners_rows(self, settings):
        # one partial (stream_detail.html#head) renders both: the same rows, in the same words
        public_links(settings)
        rows = re.compile(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", re.S)

        def header(text):
            head = re.search(r'<dl class="meta">(.*?)</dl>', text, re.S).group(1)
            return dict(rows.findall(head))

        own = header(self.alice_client.get(f"/streams/{self.echo.pk}/").text)
        link = header(self.anonymous.get(f"/s/{self.echo_secret}/").text)
        owners = {"Tags", "Session", "Attempts", "Receipt times", "Project"}
        assert {"Tags", "Session", "Attempts", "Project"} <= own.keys()
        assert link.pop("Link expires")
        assert link == {k: v for k, v in own.items() if k not in owners}
        assert {"Model", "Source", "Created", "Prompt"} <= link.keys()

    def test_secrets_the_upstream_echoed_are_redacted(self):
        for url in self.pages():
            r = self.teammate_client.get(url)
            assert r.status_code == 200 and KEY not in r.text, url
            assert KEY[8:20] not in r.text, url
        text = self.teammate_client.get(self.pages()[0]).text
        assert "Incorrect API key provided: [redacted]" in text and "m-[redacted]" in text
        assert "Your key is [redacted]" in text


class TestSessionLinks(Base):
    @pytest.fixture(autouse=True)
    def _session(self, _people):
        Stream.objects.filter(pk=self.stream.pk).update(session="s-1")
        self.second = recorded(self.alice, text_events("Second."), session="s-1", prompt="two")
        self.elsewhere = recorded(self.alice, text_events("Elsewhere."), session="s-2")
        self.strangers = recorded(self.stranger, text_events("Theirs."), session="s-1")
        self.session_link, self.session_secret = shares.create(self.alice, session="s-1")

    def test_it_lists_the_owners_streams_of_that_session_only(self):
        r = self.teammate_client.get(f"/s/{self.session_secret}/")
        assert r.status_code == 200
        ids = [int(i) for i in re.findall(r'id="stream-row-(\d+)"', r.text)]
        assert ids == [self.stream.pk, self.second.pk]
        for pk in ids:
            assert f'href="/s/{self.session_secret}/streams/{pk}/"' in r.text
        for other in (self.elsewhere, self.strangers):
            assert not re.search(rf"(streams/|#|stream-row-){other.pk}\b", r.text), other.pk

    def test_each_of_its_streams_opens_through_it_and_no_other(self):
        base = f"/s/{self.session_secret}/streams/"
        r = self.teammate_client.get(f"{base}{self.second.pk}/")
        assert r.status_code == 200 and "Second." in r.text
        assert f'href="/s/{self.session_secret}/"' in r.text  # back to the session
        for other in (self.elsewhere, self.strangers):
            for tail in ("", "events/", "timing.json", "replay.json", "events/0/"):
                assert self.teammate_client.get(f"{base}{other.pk}/{tail}").status_code == 404
        # a stream link shows its stream and no other
        r = self.teammate_client.get(f"/s/{self.secret}/streams/{self.second.pk}/")
        assert r.status_code == 404

    def test_staffs_session_link_shows_what_their_session_page_shows(self):
        link, secret = shares.create(self.staff, session="s-1")
        r = self.alice_client.get(f"/s/{secret}/")
        ids = sorted(int(i) for i in re.findall(r'id="stream-row-(\d+)"', r.text))
        assert ids == sorted([self.stream.pk, self.second.pk, self.strangers.pk])
        assert "stranger" not in r.text and "staff" not in r.text  # (whose they are: not told)


# ---- the live socket --------------------------------------------------------------------------


async def receive(comm, timeout=5):
    out = await comm.receive_output(timeout)
    return out


async def close_code(comm, timeout):
    """Frames until the server closes: (seconds it took, close code). Polls instead of timing
    out `receive_output`, which would kill the consumer (and leave the test's rows behind)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await comm.receive_nothing(0.05):
            continue
        out = await comm.receive_output(1)
        if out["type"] == "websocket.close":
            return time.monotonic() - started, out.get("code")
    raise AssertionError(f"the socket was not closed within {timeout} s")


@sync_to_async
def running_stream(owner, n=3):
    stream = Stream.objects.create(user=owner, status=Stream.Status.STREAMING, event_count=n)
    Event.objects.bulk_create(
        Event(stream=stream, index=i, type="response.output_text.delta", sequence_number=i,
              t_us=i * 100, data=json.dumps({"type": "response.output_text.delta", "delta": KEY}))
        for i in range(n)
    )  # fmt: skip
    return stream


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_disconnect_communicators")
class TestLive:
    async def test_a_teammate_follows_it_read_only_and_revocation_closes_it_at_once(
        self, people, settings
    ):
        settings.UPSTREAM_API_KEY = KEY
        stream = await running_stream(people.owner)
        link, secret = await sync_to_async(shares.create)(people.owner, stream=stream.pk)
        comm = ws(f"/ws/shared/{secret}/{stream.pk}/", people.stranger)
        connected, _ = await comm.connect()
        assert connected
        first = json.loads((await receive(comm))["text"])
        assert [e["index"] for e in first["events"]] == [0, 1, 2]
        assert first["status"] == "streaming"
        assert KEY not in json.dumps(first) and "[redacted]" in first["events"][0]["data"]
        # the live batches come as on the stream's own socket
        checked = event_row.Checked("response.output_text.delta", 3, None, None, True)
        batch = [event_message.message(3, 300, checked, '{"delta":"ok"}')]
        pending = relay.publish(stream.pk, stream.project_id, batch)
        if pending is not None:
            await pending
        frame = json.loads((await receive(comm))["text"])
        assert [e["index"] for e in frame["events"]] == [3]
        # nothing it sends is read
        await comm.send_to(text_data='{"cancel": true}')
        await comm.send_to(text_data="nonsense")
        assert await comm.receive_nothing(0.3)
        await sync_to_async(shared.revoke)(people.owner, link.pk)
        took, code = await close_code(comm, 5)
        assert code == 4003 and took < 1.0
        # and it does not open again
        again = ws(f"/ws/shared/{secret}/{stream.pk}/", people.stranger)
        assert (await again.connect())[0] is False

    async def test_a_lost_revocation_message_still_closes_it_within_seconds(
        self, people, monkeypatch
    ):
        stream = await running_stream(people.owner)
        link, secret = await sync_to_async(shares.create)(people.owner, stream=stream.pk)
        comm = ws(f"/ws/shared/{secret}/{stream.pk}/", people.stranger)
        assert (await comm.connect())[0]
        await receive(comm)

        async def lost(link_id):
            pass

        monkeypatch.setattr(relay, "close_share", lost)
        await sync_to_async(shared.revoke)(people.owner, link.pk)
        took, code = await close_code(comm, 8)
        assert code == 4003 and took <= 2.0 + 1.5  # the guard's check, every 2 s

    async def test_expiry_closes_it_within_seconds(self, people):
        stream = await running_stream(people.owner)
        link, secret = await sync_to_async(shares.create)(people.owner, stream=stream.pk)
        soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
        await ShareLink.objects.filter(pk=link.pk).aupdate(expires_at=soon)
        comm = ws(f"/ws/shared/{secret}/{stream.pk}/", people.stranger)
        assert (await comm.connect())[0]
        await receive(comm)
        took, code = await close_code(comm, 8)
        assert code == 4003 and took <= 1 + 2.0 + 1.5

    async def test_who_may_connect(self, people, settings):
        stream = await running_stream(people.owner)
        other = await running_stream(people.owner)
        link, secret = await sync_to_async(shares.create)(people.owner, stream=stream.pk)
        public, public_secret = await sync_to_async(shares.create)(
            people.owner, stream=stream.pk, anyone=True
        )
        path = f"/ws/shared/{secret}/{stream.pk}/"
        for who in (people.owner, people.stranger, people.staff):
            assert (await ws(path, who).connect())[0], who
        assert not (await ws(path).connect())[0]  # signed out
        assert not (await ws(f"/ws/shared/{secret}/{other.pk}/", people.stranger).connect())[0]
        assert not (await ws(f"/ws/shared/sl_nope/{stream.pk}/", people.stranger).connect())[0]
        assert not (await ws(path, people.stranger, origin="http://evil.example").connect())[0]
        public_path = f"/ws/shared/{public_secret}/{stream.pk}/"
        assert not (await ws(public_path).connect())[0]
        public_links(settings)
        assert conf.get().public_share_links
        comm = ws(public_path)
        assert (await comm.connect())[0]
        assert json.loads((await receive(comm))["text"])["events"]
        await sync_to_async(expire)(public)
        assert not (await ws(public_path).connect())[0]

    async def test_a_finished_stream_is_sent_whole_and_closed_normally(self, people):
        stream = await sync_to_async(recorded)(people.owner, text_events("Done."))
        link, secret = await sync_to_async(shares.create)(people.owner, stream=stream.pk)
        comm = ws(f"/ws/shared/{secret}/{stream.pk}/", people.stranger)
        assert (await comm.connect())[0]
        frames = []
        while True:
            out = await receive(comm)
            if out["type"] == "websocket.close":
                break
            frames.append(json.loads(out["text"]))
        assert out["code"] == 1000 and frames[-1]["terminal"] is True
        assert sum(len(f["events"]) for f in frames) == stream.event_count


class TestTheOwnersPage(Base):
    def test_open_links_come_first_and_the_page_is_bounded(self):
        closed = [shares.create(self.alice, stream=self.stream.pk)[0] for _ in range(3)]
        ShareLink.objects.filter(pk__in=[c.pk for c in closed]).update(revoked_at=shares._now())
        newest_open, _ = shares.create(self.alice, stream=self.stream.pk)
        links, more = shares.links_of(self.alice, limit=3)
        assert [link.pk for link in links] == [newest_open.pk, self.link.pk, closed[-1].pk]
        assert more == 2 and [link.status for link in links] == ["active", "active", "revoked"]
        page = self.alice_client.get("/shares/").text
        assert "share-more" not in page  # (5 links: under the page's bound)
