"""The company's identity provider (OpenID Connect): its configuration, read from the
STREAMSCOPE_OIDC_* knobs (streams/core/conf.py), and its discovery document, read once at start.

`discovered(values)` is called by dashboard/settings.py on what the environment set: with an issuer
and endpoints left out, it reads `<issuer>/.well-known/openid-configuration` (within
OIDC_TIMEOUT_S) and fills them in, so an administrator gives one URL; a provider that cannot be
read, or whose document names another issuer, stops the process with a message saying which
(OpenID Connect Discovery 1.0, section 4.3). `current()` is the provider in force, or None when
sign-in with a provider is off. Importable before Django's apps are (settings.py imports it): no
models here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from streams.core import conf

# the endpoints a discovery document may give, by the knob that takes each
ENDPOINTS = {
    "OIDC_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_USERINFO_ENDPOINT": "userinfo_endpoint",
    "OIDC_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_END_SESSION_ENDPOINT": "end_session_endpoint",
}
REQUIRED = ("OIDC_AUTHORIZATION_ENDPOINT", "OIDC_TOKEN_ENDPOINT", "OIDC_USERINFO_ENDPOINT")
SIGN_ALGOS = ("RS256", "HS256")
ISSUER_MAX_CHARS = 255  # SignInIdentity.issuer's (models cannot be imported here)
# A discovery document is a few kB; a bigger answer is not one.
DOCUMENT_MAX_BYTES = 256 * 1024


class ProviderError(Exception):
    """The identity provider's configuration cannot be used; the message says why and which knob."""


@dataclass(frozen=True)
class Provider:
    name: str
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_endpoint: str
    end_session_endpoint: str
    client_id: str
    client_secret: str
    scopes: str
    sign_algo: str
    groups_claim: str
    groups: str  # the group → role mapping's text (streams/access/group_roles.py reads it)
    timeout_s: float


def _plain_http_allowed(url):
    """Plain http only to this machine (a provider under test, a tunnel); anything else must be
    https, or the code, the tokens and the client secret would cross the network readable."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_url(knob, url):
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and _plain_http_allowed(url):
        return
    raise ProviderError(f"STREAMSCOPE_{knob}={url!r}: an https:// URL is needed")


def discover(issuer, timeout_s):
    """{knob: URL} of the endpoints `issuer`'s discovery document gives."""
    _check_url("OIDC_ISSUER", issuer)
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = httpx.get(url, timeout=timeout_s, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise ProviderError(
            f"STREAMSCOPE_OIDC_ISSUER: could not read {url} within {timeout_s:g} s: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    if response.status_code != 200:
        raise ProviderError(
            f"STREAMSCOPE_OIDC_ISSUER: {url} answered {response.status_code}, not the provider's "
            "configuration (is the issuer URL right?)"
        )
    if len(response.content) > DOCUMENT_MAX_BYTES:
        raise ProviderError(f"STREAMSCOPE_OIDC_ISSUER: {url} is over {DOCUMENT_MAX_BYTES} bytes")
    try:
        document = response.json()
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise ProviderError(f"STREAMSCOPE_OIDC_ISSUER: {url} is not a JSON object")
    if document.get("issuer") != issuer:
        # a document for another issuer is another provider's (or a mix-up): its tokens would
        # not be this issuer's
        raise ProviderError(
            f"STREAMSCOPE_OIDC_ISSUER={issuer!r}, but {url} says the issuer is "
            f"{document.get('issuer')!r}: give exactly the provider's issuer"
        )
    found = {}
    for knob, field in ENDPOINTS.items():
        value = document.get(field)
        if isinstance(value, str) and value:
            found[knob] = value
    return found


def discovered(values):
    """`values` (what the environment set: `settings.STREAMSCOPE`) with the endpoints the
    issuer's discovery document gives filled in where none was set. Raises ProviderError."""
    settings_ = conf.build(values)
    if not settings_.oidc_client_id or not settings_.oidc_issuer:
        return values
    missing = [k for k in ENDPOINTS if not values.get(k)]
    # (all the needed ones given: the optional sign-out page is no reason to ask the provider)
    if not any(k in missing for k in (*REQUIRED, "OIDC_JWKS_ENDPOINT")):
        return values
    found = discover(settings_.oidc_issuer, settings_.oidc_timeout_s)
    return {**values, **{k: found[k] for k in missing if k in found}}


def from_settings(s: conf.Settings) -> Provider | None:
    """The provider `s` configures, or None when sign-in with a provider is off (no client id).
    Raises ProviderError for a configuration that cannot work."""
    if not s.oidc_client_id:
        if not s.password_login:
            raise ProviderError(
                "STREAMSCOPE_PASSWORD_LOGIN=off needs an identity provider (STREAMSCOPE_OIDC_"
                "CLIENT_ID and STREAMSCOPE_OIDC_ISSUER): nobody but the break-glass users could "
                "sign in"
            )
        return None
    if not s.oidc_issuer:
        # (also without discovery: the ID token's `iss` is checked against it, and a user is
        # known by their issuer and subject)
        raise ProviderError("STREAMSCOPE_OIDC_ISSUER is not set: the provider's issuer URL")
    _check_url("OIDC_ISSUER", s.oidc_issuer)
    if len(s.oidc_issuer) > ISSUER_MAX_CHARS:  # (a sign-in identity's column)
        raise ProviderError(f"STREAMSCOPE_OIDC_ISSUER is over {ISSUER_MAX_CHARS} characters")
    for knob in REQUIRED:
        if not getattr(s, knob.lower()):
            raise ProviderError(
                f"STREAMSCOPE_{knob} is not set, and the issuer's discovery document did not "
                "give it"
            )
    for knob in ENDPOINTS:
        if value := getattr(s, knob.lower()):
            _check_url(knob, value)
    if s.oidc_sign_algo not in SIGN_ALGOS:
        raise ProviderError(
            f"STREAMSCOPE_OIDC_SIGN_ALGO: {s.oidc_sign_algo!r} is not one of {SIGN_ALGOS}"
        )
    if s.oidc_sign_algo == "RS256" and not s.oidc_jwks_endpoint:
        raise ProviderError("STREAMSCOPE_OIDC_JWKS_ENDPOINT is needed to check RS256 ID tokens")
    if "openid" not in s.oidc_scopes.split():
        raise ProviderError(f"STREAMSCOPE_OIDC_SCOPES={s.oidc_scopes!r} lacks 'openid'")
    return Provider(
        name=s.oidc_provider_name,
        issuer=s.oidc_issuer,
        authorization_endpoint=s.oidc_authorization_endpoint,
        token_endpoint=s.oidc_token_endpoint,
        userinfo_endpoint=s.oidc_userinfo_endpoint,
        jwks_endpoint=s.oidc_jwks_endpoint,
        end_session_endpoint=s.oidc_end_session_endpoint,
        client_id=s.oidc_client_id,
        client_secret=s.oidc_client_secret,
        scopes=s.oidc_scopes,
        sign_algo=s.oidc_sign_algo,
        groups_claim=s.oidc_groups_claim,
        groups=s.oidc_groups,
        timeout_s=s.oidc_timeout_s,
    )


_cache = (None, None)


def current() -> Provider | None:
    """The provider in force (rebuilt only when the settings changed), or None: off."""
    global _cache
    s = conf.get()
    source, built = _cache
    if source is not s:
        built = from_settings(s)
        _cache = (s, built)
    return built


def break_glass_users(s: conf.Settings | None = None) -> frozenset[str]:
    s = s or conf.get()
    return frozenset(u.strip() for u in s.break_glass_users.split(",") if u.strip())


def password_allowed(username) -> bool:
    """Whether `username` may sign in with a password: everyone, unless password sign-in is off,
    then the break-glass users only."""
    s = conf.get()
    return s.password_login or username in break_glass_users(s)
