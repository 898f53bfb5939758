"""Sign-in with the company's identity provider, against a real one: django-oauth-toolkit's
OpenID Connect provider in its own process (tests/support/idp/, started once per session), and
Streamscope as a real Daphne configured from the environment with only the provider's issuer (so
the discovery document is read at start), a browser's part played by httpx
(tests/support/oidc_provider.py): redirects followed across both servers, the provider's login
and consent forms posted.

Sign-in makes the user and gives the groups' project roles; a second sign-in with other groups
changes them (leaving memberships given by hand alone); a state this browser did not start, a
code that expired or was used already, and an ID token with another sign-in's nonce are refused
with a message and nobody signed in. Password sign-in switched off: refused for a normal user,
allowed for a break-glass administrator, django-axes still counting."""

import os
import re
import subprocess
import sys
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model

from streams.access import identity_provider
from streams.models import Membership, Project, SignInIdentity
from tests.conftest import DaphneServer
from tests.support import provider_urls
from tests.support.i18n import english_kept, english_left, english_words, visible_texts
from tests.support.oidc_provider import Browser, ProviderProcess
from tests.support.paths import REPO

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_ID = "streamscope-test"
CLIENT_SECRET = "oidc-client-Secret-6f1d2c3b4a"
GROUPS = "eng-admins=payments:admin,eng=payments:member,pm=payments:viewer,pm=search:viewer"
PASSWORD = "provider-pw-1"
NAME = "Test IdP"


@pytest.fixture(scope="session")
def provider():
    process = ProviderProcess()
    yield process
    process.stop()


def provider_env(provider, **more):
    return {
        "STREAMSCOPE_OIDC_ISSUER": provider.issuer,
        "STREAMSCOPE_OIDC_CLIENT_ID": CLIENT_ID,
        "STREAMSCOPE_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "STREAMSCOPE_OIDC_GROUPS": GROUPS,
        "STREAMSCOPE_OIDC_PROVIDER_NAME": NAME,
        **more,
    }


def start_app(provider, **env):
    """Streamscope on the test database, signing in with `provider` (registered with the
    provider as its client, at the callback URL of the port it will listen on)."""
    from tests.conftest import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    provider.register(CLIENT_ID, CLIENT_SECRET, f"{base}/oidc/callback/", f"{base}/login/")
    # (no stream is started here: the upstream is never asked)
    return DaphneServer("http://127.0.0.1:9/v1", env=provider_env(provider, **env), port=port)


@pytest.fixture(scope="module")
def app(django_db_setup, provider):
    server = start_app(provider)
    yield server
    server.stop()


@pytest.fixture
def browser():
    b = Browser()
    yield b
    b.close()


@pytest.fixture
def projects(transactional_db):
    return {
        slug: Project.objects.create(name=slug.title(), slug=slug)
        for slug in ("payments", "search", "other")
    }


def signed_in_as(browser, app):
    """The username the app's page shows for this browser's session, or None."""
    r = browser.http.get(app.url + "/")
    if r.status_code != 200:
        return None
    marker = '<form class="who"'
    assert marker in r.text
    return r.text.split(marker, 1)[1].split("<span>", 1)[1].split("</span>", 1)[0]


def roles(user):
    """{project: role} of `user`, their personal project aside (made at their first page)."""
    memberships = Membership.objects.filter(user=user, project__personal_of__isnull=True)
    return dict(memberships.values_list("project__slug", "role").order_by())


def test_a_first_sign_in_makes_the_user_and_gives_the_groups_roles(
    app, provider, browser, projects
):
    sub = provider.user("ann", PASSWORD, groups=["eng", "pm", "unmapped"], email="ann@example.org")

    page = browser.sign_in(app.url, "ann", PASSWORD)

    assert page.status_code == 200 and urlsplit(str(page.url)).path == "/"
    assert signed_in_as(browser, app) == "ann"
    user = get_user_model().objects.get(username="ann")
    assert user.email == "ann@example.org"
    assert not user.has_usable_password()  # never a password sign-in
    identity = SignInIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (provider.issuer, sub)
    # eng (member) and pm (viewer) both name payments: the higher role; pm gives search too
    assert roles(user) == {"payments": "member", "search": "viewer"}
    assert set(
        Membership.objects.filter(user=user, project__slug__in=["payments", "search"]).values_list(
            "origin", flat=True
        )
    ) == {Membership.Origin.IDP}
    # the PKCE challenge went to the provider (the library's setting, checked on the wire)
    authorize = next(u for u in browser.visited if "/o/authorize/" in u)
    query = parse_qs(urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert query["nonce"] and query["state"]
    assert query["scope"] == ["openid email profile"]


def test_each_sign_in_applies_the_groups_of_that_moment(app, provider, browser, projects):
    provider.user("bob", PASSWORD, groups=["eng-admins", "pm"])
    browser.sign_in(app.url, "bob", PASSWORD)
    user = get_user_model().objects.get(username="bob")
    assert roles(user) == {"payments": "admin", "search": "viewer"}
    # given by hand: the provider leaves it alone, whatever the groups say
    Membership.objects.create(project=projects["other"], user=user, role="owner")
    Membership.objects.filter(user=user, project__slug="search").update(
        origin=Membership.Origin.HAND, role="member"
    )

    provider.user("bob", PASSWORD, groups=["pm"])  # no longer an engineer
    browser.http.post(app.url + "/logout/", headers={"x-csrftoken": browser.csrf(app)})
    assert signed_in_as(browser, app) is None
    browser.sign_in(app.url, "bob", PASSWORD)

    assert signed_in_as(browser, app) == "bob"
    assert get_user_model().objects.filter(username__startswith="bob").count() == 1
    assert roles(user) == {"payments": "viewer", "search": "member", "other": "owner"}

    provider.user("bob", PASSWORD, groups=[])
    browser.http.post(app.url + "/logout/", headers={"x-csrftoken": browser.csrf(app)})
    browser.sign_in(app.url, "bob", PASSWORD)
    assert roles(user) == {"search": "member", "other": "owner"}


def test_a_taken_username_gets_a_free_one(app, provider, browser, projects):
    get_user_model().objects.create_user("cy", password="local-pw")
    provider.user("cy", PASSWORD)
    browser.sign_in(app.url, "cy", PASSWORD)
    assert signed_in_as(browser, app) == "cy-2"
    assert not get_user_model().objects.get(username="cy").sign_in_identities.exists()


def refused(browser, app, page, says):
    assert page.status_code == 200 and urlsplit(str(page.url)).path == "/login/", page.url
    assert says in page.text
    assert signed_in_as(browser, app) is None


def test_a_state_this_browser_did_not_start_is_refused(app, provider, browser, projects):
    provider.user("dee", PASSWORD, groups=["eng"])
    callback = browser.to_callback(app.url, "dee", PASSWORD)
    parts = urlsplit(callback)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}

    # tampered: a state of the attacker's own
    tampered = parts._replace(query=urlencode({**query, "state": "x" * 32})).geturl()
    page = browser.follow(browser.http.get(tampered))
    refused(browser, app, page, "was not started in this browser")
    # another browser (no sign-in started in its session) with the genuine callback
    other = Browser()
    try:
        page = other.follow(other.http.get(callback))
        refused(other, app, page, "was not started in this browser")
    finally:
        other.close()
    assert not get_user_model().objects.filter(username="dee").exists()


def test_a_used_code_is_refused(app, provider, browser, projects):
    provider.user("eve", PASSWORD, groups=["eng"])
    callback = browser.to_callback(app.url, "eve", PASSWORD)
    assert browser.follow(browser.http.get(callback)).status_code == 200
    assert signed_in_as(browser, app) == "eve"
    browser.http.post(app.url + "/logout/", headers={"x-csrftoken": browser.csrf(app)})

    # the used code again, with a state this browser did start: the provider refuses the code
    fresh = urlsplit(browser.to_callback(app.url, "eve", PASSWORD))
    state = parse_qs(fresh.query)["state"][0]
    code = parse_qs(urlsplit(callback).query)["code"][0]
    page = browser.follow(
        browser.http.get(fresh._replace(query=urlencode({"code": code, "state": state})).geturl())
    )
    refused(browser, app, page, "did not accept the sign-in")


def test_an_expired_code_is_refused(app, provider, browser, projects):
    provider.user("fay", PASSWORD, groups=["eng"])
    callback = browser.to_callback(app.url, "fay", PASSWORD)
    assert provider.expire_codes() >= 1
    page = browser.follow(browser.http.get(callback))
    refused(browser, app, page, "did not accept the sign-in")
    assert not get_user_model().objects.filter(username="fay").exists()


@pytest.mark.parametrize(
    "name",
    [
        "wrong-nonce-gus",  # another sign-in's answer
        "wrong-audience-ida",  # made for another client (the library does not check)
        "wrong-issuer-jo",  # naming another issuer (nor this)
    ],
)
def test_an_id_token_that_is_not_for_this_sign_in_is_refused(
    app, provider, browser, projects, name
):
    provider.user(name, PASSWORD, groups=["eng"])
    page = browser.sign_in(app.url, name, PASSWORD)
    refused(browser, app, page, "could not be verified")
    assert not get_user_model().objects.filter(username__startswith="wrong-").exists()


def test_the_provider_refusing_is_said(app, provider, browser, projects):
    provider.user("hal", PASSWORD)
    page = browser.follow(browser.http.get(app.url + "/oidc/authenticate/"))
    page = browser.follow(
        browser.submit(page, "provider-login", username="hal", password=PASSWORD),
        stop=lambda url: False,
    )
    # "Cancel" on the consent form: the provider sends back error=access_denied
    page = browser.follow(browser.submit(page, "authorizationForm"))
    refused(browser, app, page, "cancelled or refused by Test IdP")


def test_signing_out_there_signs_out_at_the_provider_too(app, provider, browser, projects):
    provider.user("kim", PASSWORD)
    browser.sign_in(app.url, "kim", PASSWORD)
    assert signed_in_as(browser, app) == "kim"

    r = browser.http.post(app.url + "/oidc/logout/", headers={"x-csrftoken": browser.csrf(app)})
    sign_out = urlsplit(r.headers["location"])
    assert sign_out._replace(query="").geturl() == provider.issuer + "/logout/"
    assert parse_qs(sign_out.query) == {
        "client_id": [CLIENT_ID],
        "post_logout_redirect_uri": [app.url + "/login/"],
    }
    page = browser.follow(r)  # the provider asks (no ID token names the session): yes
    page = browser.follow(browser.submit(page, "authorizationForm", allow="Logout"))
    assert urlsplit(str(page.url)).path == "/login/"
    assert signed_in_as(browser, app) is None
    # signed out there too: the next sign-in asks for the password again
    page = browser.follow(browser.http.get(app.url + "/oidc/authenticate/"))
    assert "provider-login" in page.text


def test_the_login_page_offers_the_provider(app, browser):
    page = browser.http.get(app.url + "/login/?next=/usage/")
    assert f"Sign in with {NAME}" in page.text
    assert "/oidc/authenticate/?next=/usage/" in page.text.replace("%2F", "/")
    assert 'name="password"' in page.text  # password sign-in is on here


# ---- password sign-in switched off ---------------------------------------------------------


@pytest.fixture(scope="module")
def app_without_passwords(django_db_setup, provider):
    server = start_app(
        provider,
        STREAMSCOPE_PASSWORD_LOGIN="off",
        STREAMSCOPE_BREAK_GLASS_USERS="root,admin",
        STREAMSCOPE_LOGIN_FAILURE_LIMIT="3",
    )
    yield server
    server.stop()


def password_login(app, username, password):
    http = httpx.Client(timeout=30)
    page = http.get(app.url + "/login/?break-glass=1")
    token = http.cookies["csrftoken"]
    r = http.post(
        app.url + "/login/?break-glass=1",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token},
    )
    assert page.status_code == 200
    return http, r


def test_without_passwords_the_page_offers_only_the_provider(app_without_passwords):
    page = httpx.get(app_without_passwords.url + "/login/", timeout=30)
    assert f"Sign in with {NAME}" in page.text
    assert 'name="password"' not in page.text
    assert "?break-glass=1" in page.text
    page = httpx.get(app_without_passwords.url + "/login/?break-glass=1", timeout=30)
    assert 'name="password"' in page.text


def test_without_passwords_a_normal_user_is_refused(app_without_passwords, transactional_db):
    get_user_model().objects.create_user("norm", password="right-pw-123")
    http, r = password_login(app_without_passwords, "norm", "right-pw-123")
    assert r.status_code == 200 and "username and password didn" in r.text
    assert http.get(app_without_passwords.url + "/").status_code == 302


def test_without_passwords_a_break_glass_user_is_let_in(app_without_passwords, transactional_db):
    get_user_model().objects.create_user("admin", password="right-pw-123", is_staff=True)
    http, r = password_login(app_without_passwords, "admin", "right-pw-123")
    assert r.status_code == 302
    assert http.get(app_without_passwords.url + "/").status_code == 200


def test_without_passwords_axes_still_counts(app_without_passwords, transactional_db):
    get_user_model().objects.create_user("root", password="right-pw-123", is_staff=True)
    for _ in range(3):
        password_login(app_without_passwords, "root", "wrong")
    http, r = password_login(app_without_passwords, "root", "right-pw-123")
    assert r.status_code == 429


# ---- the configuration ----------------------------------------------------------------------


def test_the_issuer_alone_gives_the_endpoints(provider):
    found = identity_provider.discover(provider.issuer, timeout_s=10)
    assert found["OIDC_AUTHORIZATION_ENDPOINT"] == provider.issuer + "/authorize/"
    assert found["OIDC_TOKEN_ENDPOINT"] == provider.issuer + "/token/"
    assert found["OIDC_JWKS_ENDPOINT"] == provider.issuer + "/.well-known/jwks.json"
    assert found["OIDC_USERINFO_ENDPOINT"] == provider.issuer + "/userinfo/"
    # given ones win over the document's
    values = {"OIDC_ISSUER": provider.issuer, "OIDC_CLIENT_ID": "c", "OIDC_TOKEN_ENDPOINT": "x"}
    filled = identity_provider.discovered(values)
    assert filled["OIDC_TOKEN_ENDPOINT"] == "x"
    assert filled["OIDC_JWKS_ENDPOINT"] == found["OIDC_JWKS_ENDPOINT"]


@pytest.mark.parametrize(
    ("issuer", "says"),
    [
        # (a port nothing listens on: refused at once)
        ("http://127.0.0.1:{free}/o", "could not read http://127.0.0.1:{free}/o/.well-known/"),
        ("{issuer}/", "says the issuer is '{issuer}'"),
        ("{url}/nowhere", "answered 404, not the provider's configuration"),
        ("http://idp.example.org/o", "an https:// URL is needed"),
    ],
)
def test_an_issuer_that_cannot_be_read_says_why(provider, issuer, says):
    from tests.conftest import free_port

    names = {"free": free_port(), "issuer": provider.issuer, "url": provider.url}
    with pytest.raises(identity_provider.ProviderError, match=re.escape(says.format(**names))):
        identity_provider.discover(issuer.format(**names), timeout_s=5)


def test_the_issuers_limit_is_its_columns():
    assert identity_provider.ISSUER_MAX_CHARS == SignInIdentity._meta.get_field("issuer").max_length


def test_a_configuration_that_cannot_work_stops_the_process_at_start(provider):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "DJANGO_SETTINGS"))
    }

    def check(**more):
        return subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=REPO,
            env={**env, **more},
            capture_output=True,
            text=True,
            timeout=120,
        )

    out = check(**provider_env(provider, STREAMSCOPE_OIDC_ISSUER=provider.url + "/nowhere"))
    assert out.returncode != 0
    assert "sign-in: STREAMSCOPE_OIDC_ISSUER: " in out.stderr and "answered 404" in out.stderr
    out = check(STREAMSCOPE_PASSWORD_LOGIN="off")
    assert out.returncode != 0 and "STREAMSCOPE_PASSWORD_LOGIN=off needs an identity" in out.stderr
    out = check(**provider_env(provider, STREAMSCOPE_OIDC_GROUPS="eng=payments:boss"))
    assert out.returncode != 0 and "STREAMSCOPE_OIDC_GROUPS: 'eng=payments:boss'" in out.stderr
    assert check(**provider_env(provider)).returncode == 0


# ---- the page in both languages, the secret at every exit -------------------------------------


@pytest.fixture
def provider_on(settings):
    """This process's pages with an identity provider configured (its routes included) and
    password sign-in off."""
    settings.ROOT_URLCONF = "tests.support.provider_urls"
    settings.STREAMSCOPE = {
        **provider_urls.settings(settings.STREAMSCOPE),
        "PASSWORD_LOGIN": False,
        "BREAK_GLASS_USERS": "admin",
    }
    return settings


@pytest.mark.parametrize("query", ["", "?break-glass=1"])
def test_the_login_page_is_dutch_in_dutch(provider_on, client, query):
    english = visible_texts(client.get("/login/" + query, HTTP_ACCEPT_LANGUAGE="en").text)
    dutch = visible_texts(client.get("/login/" + query, HTTP_ACCEPT_LANGUAGE="nl").text)
    assert "Sign in with single sign-on" in english
    assert "Inloggen met eenmalige aanmelding (SSO)" in dutch
    words, left = english_words(english), {}
    for text in dutch:
        found = english_left(text, set()) if text in english else []
        if found := found or english_kept(text, words, set()):
            left[text] = found
    assert left == {}


def test_every_refusal_is_said_in_dutch():
    from django.utils import translation

    from dashboard.views.sign_in import REFUSED

    for reason, message in REFUSED.items():
        with translation.override("nl"):
            dutch = str(message) % {"provider": "Keycloak"}
        assert dutch != str(message) % {"provider": "Keycloak"}, reason
        assert ("Keycloak" in dutch) == ("%(provider)s" in str(message)), reason


def test_the_client_secret_is_redacted_at_every_exit(provider_on):
    from streams.store import known_secrets

    secret = provider_urls.ENV["STREAMSCOPE_OIDC_CLIENT_SECRET"]
    assert secret not in known_secrets.redact(f"token request: client_secret={secret}&code=1")


def test_without_a_provider_there_are_no_provider_routes_and_no_button(client):
    from django.urls import NoReverseMatch, reverse

    assert identity_provider.current() is None
    with pytest.raises(NoReverseMatch):
        reverse("oidc_authentication_init")
    assert client.get("/oidc/authenticate/").status_code == 404
    page = client.get("/login/").text
    assert "Sign in with" not in page and 'name="password"' in page


@pytest.mark.django_db
def test_a_new_username_is_made_of_django_characters_within_the_column():
    from streams.access.sign_in import username_for

    assert username_for({"preferred_username": "Ann Smith/ops", "sub": "1"}) == "Ann-Smith-ops"
    assert username_for({"email": "bo.b+x@example.org", "sub": "1"}) == "bo.b+x"
    assert username_for({"sub": "a1b2"}) == "user-a1b2"
    long = username_for({"preferred_username": "x" * 500, "sub": "1"})
    get_user_model().objects.create_user(long)
    longer = username_for({"preferred_username": "x" * 500, "sub": "2"})
    assert len(long) <= 150 and longer == long + "-2" and len(longer) <= 150
    get_user_model().objects.create_user("ANN")
    assert username_for({"preferred_username": "ann", "sub": "3"}) == "ann-2"  # case aside
