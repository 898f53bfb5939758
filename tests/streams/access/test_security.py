"""Hostile users: login and token throttling, the deploy settings, WebSocket origin, per-user
socket cap and token revocation (docs/security.md)."""

import asyncio
import os
import secrets
import subprocess
import sys

import httpx
import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from dashboard.asgi import application
from streams.access import sockets, throttle
from streams.models import ApiToken, Stream
from streams.serve import proxy
from tests.conftest import REPO

FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_cache(throttle_clock):
    # the throttles and socket slots live in the cache (per process here: locmem); the
    # throttles' clock stands still (tests/conftest.py)
    cache.clear()
    proxy._token_cache.clear()
    yield
    cache.clear()
    proxy._token_cache.clear()


def _login(username, password, ip):
    client = Client(REMOTE_ADDR=ip)
    response = client.post("/login/", {"username": username, "password": password})
    return client, response


@pytest.mark.django_db
class TestLoginThrottling:
    @pytest.fixture(autouse=True)
    def _users(self, settings):
        settings.PASSWORD_HASHERS = FAST_HASHERS
        users = get_user_model().objects
        self.alice = users.create_user("alice", password="alice-right-password")
        self.bob = users.create_user("bob", password="bob-right-password")

    def test_60_wrong_passwords_then_the_right_one_is_refused(self):
        codes = [_login("alice", f"guess{i}", "10.0.0.1")[1].status_code for i in range(60)]
        limit = 10  # STREAMSCOPE_LOGIN_FAILURE_LIMIT's default
        assert codes[: limit - 1] == [200] * (limit - 1)  # the form again, with its error
        assert set(codes[limit:]) == {429}
        client, response = _login("alice", "alice-right-password", "10.0.0.1")
        assert response.status_code == 429
        assert b"Too many login attempts" in response.content
        assert "_auth_user_id" not in client.session

    def test_another_user_from_another_ip_logs_in_at_once(self):
        for i in range(60):
            _login("alice", f"guess{i}", "10.0.0.1")
        client, response = _login("bob", "bob-right-password", "10.0.0.2")
        assert response.status_code == 302
        assert client.session["_auth_user_id"] == str(self.bob.pk)

    def test_the_attacked_user_still_logs_in_from_her_own_address(self):
        for i in range(60):
            _login("alice", f"guess{i}", "10.0.0.1")
        client, response = _login("alice", "alice-right-password", "10.0.0.3")
        assert response.status_code == 302
        assert client.session["_auth_user_id"] == str(self.alice.pk)

    def test_the_lockout_ends_after_the_cool_off(self, settings):
        import datetime as dt

        from axes.models import AccessAttempt

        for i in range(12):
            _login("alice", f"guess{i}", "10.0.0.1")
        assert _login("alice", "alice-right-password", "10.0.0.1")[1].status_code == 429
        # as if the cool-off had passed
        AccessAttempt.objects.update(attempt_time=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        assert _login("alice", "alice-right-password", "10.0.0.1")[1].status_code == 302


@pytest.mark.django_db
class TestApiTokenThrottling:
    def test_300_guessed_tokens_are_throttled_after_the_limit(self):
        limit = 50  # STREAMSCOPE_TOKEN_FAILURE_LIMIT's default
        client = Client(REMOTE_ADDR="10.0.1.1")
        codes = []
        for _ in range(300):
            guess = "ss_" + secrets.token_urlsafe(32)
            r = client.get("/api/streams/", HTTP_AUTHORIZATION=f"Bearer {guess}")
            codes.append(r.status_code)
        assert codes[:limit] == [401] * limit
        assert set(codes[limit:]) == {429}
        r = client.get("/api/streams/", HTTP_AUTHORIZATION="Bearer ss_another-guess")
        assert r.json()["error"]["code"] == "too_many_attempts"
        assert 1 <= int(r["Retry-After"]) <= 120

    def test_valid_tokens_are_never_throttled(self):
        user = get_user_model().objects.create_user("carol")
        token = ApiToken.issue(user)
        client = Client(REMOTE_ADDR="10.0.1.2")
        # a valid request while a few failures are on record marks the token as seen valid
        client.get("/api/streams/", HTTP_AUTHORIZATION="Bearer ss_wrong")
        assert client.get("/api/streams/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
        for _ in range(100):
            client.get("/api/streams/", HTTP_AUTHORIZATION="Bearer ss_wrong")
        assert client.get("/api/streams/", HTTP_AUTHORIZATION="Bearer ss_wrong").status_code == 429
        # from the attacked address (a shared NAT) and from any other
        assert client.get("/api/streams/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
        other = Client(REMOTE_ADDR="10.0.1.3")
        assert other.get("/api/streams/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
        for _ in range(100):
            assert (
                other.get("/api/streams/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
            )

    def test_the_window_slides(self, settings):
        settings.STREAMSCOPE = {"TOKEN_FAILURE_LIMIT": 5, "TOKEN_FAILURE_WINDOW_S": 60}
        now = 6000.0  # the start of a window
        for _ in range(5):
            throttle.note_token_failure("10.0.1.4")
        # all five in the window now; half of them still "count" half a window later
        import time as time_module

        real = time_module.time
        try:
            time_module.time = lambda: now
            estimate, retry = throttle._failures("10.0.1.9", now)
            assert (estimate, retry) == (0, None)
        finally:
            time_module.time = real
        n = int(real() // 60)
        key_prev = throttle._FAIL_KEY.format("10.0.1.5", n - 1)
        cache.set(key_prev, 10, 300)
        start = n * 60
        assert throttle._failures("10.0.1.5", start + 1)[1] is not None  # ~10 of 5
        # 10 × (1 − 45/60) = 2.5 < 5: through again
        assert throttle._failures("10.0.1.5", start + 45)[1] is None


@pytest.mark.django_db
class TestSearchThrottling:
    """Searches per user (STREAMSCOPE_SEARCH_MAX_PER_MINUTE), on the list, its CSV and the API:
    an index walked one prefix at a time is walked in thousands of searches."""

    @pytest.fixture(autouse=True)
    def _people(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "SEARCH_MAX_PER_MINUTE": 5}
        self.mallory = get_user_model().objects.create_user("mallory", is_staff=True)
        self.alice = get_user_model().objects.create_user("alice")
        self.token = ApiToken.issue(self.mallory)

    def client(self, user, ip):
        client = Client(REMOTE_ADDR=ip)
        client.force_login(user)
        return client

    def test_the_sixth_search_in_a_minute_is_refused_with_retry_after(self):
        pages = [self.client(self.mallory, f"10.0.3.{i}") for i in range(3)]  # (any address)
        codes = [pages[i % 3].get("/", {"q": f"incorrect 406{i}*"}).status_code for i in range(5)]
        assert codes == [200] * 5
        r = pages[0].get("/", {"q": "incorrect 4070*"})
        assert r.status_code == 429 and 1 <= int(r["Retry-After"]) <= 60
        assert f"Too many searches: try again in {r['Retry-After']} s." in r.text
        assert "stream-row-" not in r.text
        # htmx's request for the results: the same, as the piece it swaps (data-swap-invalid)
        r = pages[1].get("/", {"q": "x"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="results")
        assert r.status_code == 429 and r.text.lstrip().startswith('<section id="results"')
        assert "data-swap-invalid" in r.text and "Too many searches" in r.text
        # the CSV and the API, with a token, from yet another address: the same user's count
        r = pages[2].get("/streams.csv", {"q": "x"})
        assert r.status_code == 429 and int(r["Retry-After"]) >= 1
        api = Client(REMOTE_ADDR="10.0.3.99")
        r = api.get("/api/streams/", {"q": "x"}, HTTP_AUTHORIZATION=f"Bearer {self.token}")
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_searches"
        assert int(r["Retry-After"]) >= 1
        # what is not a search of the text is not counted nor refused
        assert pages[0].get("/").status_code == 200
        assert pages[0].get("/", {"status": "failed"}).status_code == 200
        assert pages[0].get("/", {"q": "#42"}).status_code == 200
        stream = Stream.objects.create(user=self.mallory, upstream_id="resp_live1")
        r = pages[0].get("/", {"q": "resp_live1", "fragment": "streams"})  # (the live list's)
        assert r.status_code == 200 and f"stream-row-{stream.pk}" in r.text

    def test_other_users_search_on_from_the_same_address(self):
        mallory, alice = self.client(self.mallory, "10.0.4.1"), self.client(self.alice, "10.0.4.1")
        for i in range(5):
            assert mallory.get("/", {"q": f"w{i}"}).status_code == 200
        assert mallory.get("/", {"q": "w9"}).status_code == 429
        assert [alice.get("/", {"q": f"v{i}"}).status_code for i in range(5)] == [200] * 5

    def test_the_minute_slides(self, throttle_clock):
        for _ in range(5):
            assert throttle.search_allowed(self.mallory) is None
        retry = throttle.search_allowed(self.mallory)
        assert retry is not None and 1 <= retry <= 120
        throttle_clock.now += retry + throttle.SEARCH_WINDOW_S
        assert throttle.search_allowed(self.mallory) is None


@pytest.mark.django_db(transaction=True)
class TestProxyTokenThrottling:
    async def test_guessed_tokens_get_429_in_the_openai_shape_with_retry_after(self):
        transport = httpx.ASGITransport(app=proxy.application, client=("10.0.2.1", 5555))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            codes = []
            for _ in range(300):
                guess = "ss_" + secrets.token_urlsafe(32)
                r = await client.get("/v1/models", headers={"Authorization": f"Bearer {guess}"})
                codes.append(r.status_code)
            assert codes[:50] == [401] * 50 and set(codes[50:]) == {429}
            error = r.json()["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_attempts")
            assert int(r.headers["retry-after"]) >= 1


def test_check_deploy_with_the_documented_production_environment_is_clean():
    """README's "Production and security" environment: 0 warnings, 0 errors."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "STREAMSCOPE_")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="scope.example.org",
        DJANGO_CSRF_TRUSTED_ORIGINS="https://scope.example.org",
        STREAMSCOPE_SECURE="true",
        STREAMSCOPE_HSTS_PRELOAD="true",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_without_secure_check_deploy_names_what_secure_turns_on():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "STREAMSCOPE_"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    for code in ("W004", "W008", "W012", "W016"):
        assert code in done.stderr + done.stdout


@pytest.mark.django_db
def test_every_page_has_a_csp_without_unsafe_inline_scripts():
    user = get_user_model().objects.create_user("dave")
    client = Client()
    client.force_login(user)
    for path in ("/", "/playground/", "/login/"):
        policy = client.get(path)["Content-Security-Policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
        assert directives["script-src"] == "'self'"
        assert "unsafe" not in directives["style-src"]
        assert directives["object-src"] == "'none'"


# ---- WebSockets --------------------------------------------------------------------------------

HOST = b"127.0.0.1:8000"


def _ws(path, token, origin="http://127.0.0.1:8000", host=HOST, scheme="ws"):
    headers = [(b"host", host), (b"authorization", f"Bearer {token}".encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    comm = WebsocketCommunicator(application, path, headers=headers)
    comm.scope["scheme"] = scheme
    return comm


@pytest.fixture
def streaming(db):
    user = get_user_model().objects.create_user("erin")
    stream = Stream.objects.create(user=user, status=Stream.Status.STREAMING, requested_model="m")
    return user, stream, ApiToken.issue(user)


async def _opens(comm):
    connected, _ = await comm.connect(timeout=5)
    if connected:
        await comm.disconnect()
    return connected


@pytest.mark.django_db(transaction=True)
class TestWebSocketOrigin:
    @pytest.mark.parametrize(
        "origin, scheme, expected",
        [
            ("http://127.0.0.1:8000", "ws", True),
            ("http://127.0.0.1:8001", "ws", False),  # another port of an allowed host
            ("https://127.0.0.1:8000", "ws", False),  # another scheme
            ("http://127.0.0.1", "ws", False),  # port 80 is another origin
            ("https://127.0.0.1:8000", "wss", True),
            ("http://127.0.0.1:8000", "wss", False),  # a plain-http page on a TLS socket
            ("http://localhost:8000", "ws", False),  # an allowed host, but not this one
            ("null", "ws", False),
            (None, "ws", False),
        ],
    )
    async def test_scheme_host_and_port_must_be_the_servers_own(
        self, streaming, origin, scheme, expected
    ):
        _, stream, token = streaming
        comm = _ws(f"/ws/streams/{stream.pk}/", token, origin=origin, scheme=scheme)
        assert await _opens(comm) is expected

    async def test_a_csrf_trusted_origin_is_allowed(self, streaming, settings):
        # (its host must be in ALLOWED_HOSTS too: asgi.py's validator stays in front)
        settings.CSRF_TRUSTED_ORIGINS = ["https://localhost:8443"]
        _, stream, token = streaming
        comm = _ws(f"/ws/streams/{stream.pk}/", token, origin="https://localhost:8443")
        assert await _opens(comm)
        comm = _ws(f"/ws/streams/{stream.pk}/", token, origin="https://localhost:8444")
        assert not await _opens(comm)


@pytest.mark.django_db(transaction=True)
class TestSocketCap:
    async def test_sockets_beyond_the_cap_are_closed_with_4029_and_a_slot_comes_back(
        self, streaming, settings
    ):
        settings.STREAMSCOPE = {"MAX_SOCKETS_PER_USER": 3}
        _, stream, token = streaming
        open_ = []
        for _ in range(3):
            comm = _ws(f"/ws/streams/{stream.pk}/", token)
            assert (await comm.connect(timeout=5))[0]
            open_.append(comm)
        extra = _ws("/ws/streams/", token)
        assert (await extra.connect(timeout=5))[0]  # accepted to say why…
        out = await extra.receive_output(5)
        assert out == {"type": "websocket.close", "code": 4029}  # …and closed
        await open_.pop().disconnect()
        again = _ws(f"/ws/streams/{stream.pk}/", token)
        assert (await again.connect(timeout=5))[0]
        first = await again.receive_output(5)  # the stream's first frame, not a close:
        assert first["type"] == "websocket.send"  # it holds the freed slot
        for comm in [*open_, again]:
            await comm.disconnect()

    def test_a_socket_that_died_uncleanly_frees_its_slot_when_its_lease_runs_out(
        self, monkeypatch, settings, db
    ):
        import time

        settings.STREAMSCOPE = {"MAX_SOCKETS_PER_USER": 2}
        monkeypatch.setattr(sockets, "SOCKET_LEASE_S", 1)
        # a process that took both slots and was killed: nobody frees or renews them
        assert sockets.take_socket_slot(7, "dead-1") and sockets.take_socket_slot(7, "dead-2")
        assert sockets.take_socket_slot(7, "new") is None
        time.sleep(1.5)
        assert sockets.take_socket_slot(7, "new") is not None

    def test_renewing_keeps_a_lease_and_freeing_spares_someone_elses_slot(
        self, monkeypatch, settings, db
    ):
        import time

        settings.STREAMSCOPE = {"MAX_SOCKETS_PER_USER": 1}
        monkeypatch.setattr(sockets, "SOCKET_LEASE_S", 1)
        key = sockets.take_socket_slot(8, "a")
        for _ in range(3):
            time.sleep(0.5)
            sockets.renew_socket_slots({key: "a"})
        assert sockets.take_socket_slot(8, "b") is None
        sockets.free_socket_slot(key, "someone-else")  # a stale holder must not free it
        assert sockets.take_socket_slot(8, "b") is None
        sockets.free_socket_slot(key, "a")
        assert sockets.take_socket_slot(8, "b") == key


@pytest.mark.django_db(transaction=True)
class TestTokenRevocation:
    async def test_revoking_a_token_closes_its_open_sockets_within_seconds(self, streaming):
        user, stream, token = streaming
        other_token = await asyncio.to_thread(ApiToken.issue, user)
        revoked = _ws(f"/ws/streams/{stream.pk}/", token)
        kept = _ws(f"/ws/streams/{stream.pk}/", other_token)
        listing = _ws("/ws/streams/", token)
        for comm in (revoked, kept, listing):
            assert (await comm.connect(timeout=5))[0]
        await revoked.receive_output(5)  # the first frame
        await listing.receive_output(5)
        await kept.receive_output(5)
        await asyncio.to_thread(
            lambda: ApiToken.objects.filter(digest=ApiToken.hash(token)).update(revoked=True)
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        for comm in (revoked, listing):
            while True:
                out = await comm.receive_output(10)
                if out["type"] == "websocket.close":
                    break
            assert out["code"] == 4003
        # the guard checks every REVOCATION_CHECK_S (2 s)
        assert loop.time() - started < 10
        assert await kept.receive_nothing(0.5)
        await kept.disconnect()


# ---- pass-through keys: redacted on the way out, whoever's they are ---------------------------

PASS_KEY = "sk-proj-Cl13ntOwnK3yNobodyKnows0123456789"


@pytest.mark.django_db
def test_a_pass_through_key_an_upstream_echoed_leaves_through_no_page_export_or_admin_page(
    settings,
):
    """A row as the proxy stores it in pass-through mode when the upstream echoes the client's
    own key (verbatim: the server never knew the key), crawled as staff: the timeline, event
    pages, exports, the API, and every registered model's admin changelist and change form."""
    import json as json_module

    from django.contrib import admin
    from django.urls import reverse

    from streams.models import Capture, Event, Finding, ImportFile, ImportJob

    settings.UPSTREAM_API_KEY = ""  # pass-through: the server's own key plays no part
    staff = get_user_model().objects.create_user("root", is_staff=True, is_superuser=True)
    echoed = f"Incorrect API key provided: {PASS_KEY}"
    escaped = "".join(f"\\u{ord(c):04x}" for c in PASS_KEY[:4]) + PASS_KEY[4:]
    stream = Stream.objects.create(
        user=staff, source=Stream.Source.PROXY, status=Stream.Status.FAILED,
        requested_model=PASS_KEY, resolved_model=PASS_KEY, upstream_id=PASS_KEY,
        error_code="invalid_api_key", error_message=echoed, output_text=echoed,
        final_text=echoed, event_count=2, parts=[{"type": "function_call", "name": PASS_KEY}],
        request_body={"model": PASS_KEY}, tags=[PASS_KEY], session=PASS_KEY,
    )  # fmt: skip
    data = [
        json_module.dumps({"type": "error", "message": echoed}),
        '{"type": "response.output_text.delta", "delta": "' + escaped + '"}',
    ]
    for i, d in enumerate(data):
        Event.objects.create(stream=stream, index=i, type=PASS_KEY if i else "error",
                             event_name=PASS_KEY, sse_id=PASS_KEY, t_us=i, data=d,
                             raw=d.encode())  # fmt: skip
    Finding.objects.create(stream=stream, code="invalid_json", severity="error",
                           event_index=0, detail=echoed)  # fmt: skip
    Capture.objects.create(stream=stream, filename=PASS_KEY, content=data[0].encode())
    job = ImportJob.objects.create(user=staff, error=echoed)
    ImportFile.objects.create(job=job, position=0, filename=PASS_KEY, size=1, error=echoed)
    ApiToken.issue(staff, name="t")
    client = Client()
    client.force_login(staff)
    pages = [
        f"/streams/{stream.pk}/", f"/streams/{stream.pk}/events/",
        f"/streams/{stream.pk}/events/0/", f"/streams/{stream.pk}/events/1/",
        f"/streams/{stream.pk}.sse", f"/streams/{stream.pk}.json", "/",
        f"/api/streams/{stream.pk}/", f"/api/streams/{stream.pk}/events/",
        f"/streams/{stream.pk}/timing.json", f"/streams/{stream.pk}/replay.json",
        f"/imports/{job.pk}/",
    ]  # fmt: skip
    for model in admin.site._registry:
        meta = model._meta
        changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        pages.append(changelist)
        for pk in model.objects.values_list("pk", flat=True)[:5]:
            pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk]))
    leaks = []
    for path in pages:
        r = client.get(path)
        body = b"".join(r.streaming_content) if r.streaming else r.content
        assert r.status_code == 200, (path, r.status_code)
        text = body.decode("utf-8", "replace")
        decoded = text.encode().decode("unicode_escape", "ignore")
        if PASS_KEY in text or PASS_KEY in decoded or PASS_KEY[8:] in text:
            leaks.append(path)
    assert len(pages) > 20
    assert leaks == [], leaks
