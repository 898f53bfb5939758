"""Who may sign in, and how: the two authentication backends (settings.AUTHENTICATION_BACKENDS).

- `ProviderBackend`: OpenID Connect's authorization code flow with PKCE, through
  mozilla-django-oidc (its views, dashboard/views/sign_in.py, keep the state, the nonce and the
  code verifier in the session and check the state). Configured by
  streams/access/identity_provider.py instead of Django settings. On top of the library: the ID
  token's audience and issuer are checked (the library checks the signature, expiry and
  nonce); a user is found by their (issuer, subject), never by a name or address they could
  change at the provider; a new user gets a username from `preferred_username` (or the email's
  local part), made unique and cut to the column; the groups claim sets their project roles at
  each sign-in (streams/access/group_roles.py). Every refusal raises `SignInRefused` with the
  reason, so nothing reaches Django's failed-login signal (django-axes counts wrong passwords,
  not a provider's refusals, which would lock out an office's shared address).
- `PasswordBackend`: Django's, but with STREAMSCOPE_PASSWORD_LOGIN=off only the break-glass users
  pass (and their sessions only stay valid while they are); django-axes' backend still comes first.
"""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlencode

import jwt
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.shortcuts import resolve_url
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from streams.access import group_roles, identity_provider
from streams.models import SignInIdentity

PROVIDER_BACKEND = "streams.access.sign_in.ProviderBackend"
PASSWORD_BACKEND = "streams.access.sign_in.PasswordBackend"
SUBJECT_MAX_CHARS = SignInIdentity._meta.get_field("subject").max_length
# a username that is taken gets "-2", "-3", …; past this many, a random suffix
USERNAME_TRIES = 50
_NOT_IN_USERNAME = re.compile(r"[^\w.@+-]")


class SignInRefused(SuspiciousOperation):
    """A sign-in with the provider that must not succeed; `reason` is for the user (translated by
    the view), the message for the log."""

    def __init__(self, reason, detail=""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


# the reasons a view shows (dashboard/views/sign_in.py translates them)
STATE = "state"  # the callback's state is not one this browser started
PROVIDER = "provider"  # the provider answered with an error (refused, cancelled)
CODE = "code"  # the provider refused the code (expired, used, wrong verifier)
TOKEN = "token"  # the ID token is not valid (signature, expiry, nonce, audience, issuer)
UNREACHABLE = "unreachable"  # the provider did not answer
ACCOUNT = "account"  # the claims lack a subject, or the user is inactive


def library_setting(name, *default):
    """mozilla-django-oidc's settings, from the provider's configuration (the rest: Django's)."""
    provider = identity_provider.current()
    if provider is not None:
        values = {
            "OIDC_RP_CLIENT_ID": provider.client_id,
            "OIDC_RP_CLIENT_SECRET": provider.client_secret,
            "OIDC_OP_AUTHORIZATION_ENDPOINT": provider.authorization_endpoint,
            "OIDC_OP_TOKEN_ENDPOINT": provider.token_endpoint,
            "OIDC_OP_USER_ENDPOINT": provider.userinfo_endpoint,
            "OIDC_OP_JWKS_ENDPOINT": provider.jwks_endpoint or None,
            "OIDC_RP_SIGN_ALGO": provider.sign_algo,
            "OIDC_RP_SCOPES": provider.scopes,
            "OIDC_TIMEOUT": provider.timeout_s,
            "OIDC_USE_PKCE": True,
            "OIDC_USE_NONCE": True,
            "OIDC_CREATE_USER": True,
            # the tokens are used once, here, and never kept
            "OIDC_STORE_ACCESS_TOKEN": False,
            "OIDC_STORE_ID_TOKEN": False,
            "OIDC_OP_LOGOUT_URL_METHOD": "streams.access.sign_in.provider_logout_url",
        }
        if name in values:
            return values[name]
    return import_from_settings(name, *default)


def provider_logout_url(request):
    """Where /oidc/logout/ sends a user: the provider's sign-out page when it has one (so the
    next person at a shared computer is not signed straight back in), else the login page."""
    provider = identity_provider.current()
    back = request.build_absolute_uri(resolve_url("login"))
    if provider is None or not provider.end_session_endpoint:
        return back
    query = urlencode({"client_id": provider.client_id, "post_logout_redirect_uri": back})
    return f"{provider.end_session_endpoint}?{query}"


def username_for(claims):
    """A free username for a new user, from `preferred_username`, else the email's local part,
    else the subject: Django's username characters only, within the column's length."""
    User = get_user_model()
    limit = User._meta.get_field(User.USERNAME_FIELD).max_length
    wish = claims.get("preferred_username") or (claims.get("email") or "").partition("@")[0]
    if not isinstance(wish, str) or not wish.strip():
        wish = f"user-{claims.get('sub', '')}"
    base = _NOT_IN_USERNAME.sub("-", wish.strip())[: limit - 8] or "user"
    taken = User.objects.filter(**{f"{User.USERNAME_FIELD}__istartswith": base})
    taken = {n.lower() for n in taken.values_list(User.USERNAME_FIELD, flat=True)[:1000]}
    if base.lower() not in taken:
        return base
    for n in range(2, USERNAME_TRIES + 1):
        name = f"{base}-{n}"
        if name.lower() not in taken:
            return name
    return f"{base}-{secrets.token_hex(3)}"


class ProviderBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(library_setting)

    def __init__(self, *args, **kwargs):
        # Django makes a backend for every authenticate() and session read: with no provider
        # there are no endpoints to read, and this backend only restores sessions
        if identity_provider.current() is None:
            self.UserModel = get_user_model()
            return
        super().__init__(*args, **kwargs)

    def authenticate(self, request, **kwargs):
        # only the callback view's call (it passes the nonce): a password form is never read here
        if request is None or "nonce" not in kwargs or identity_provider.current() is None:
            return None
        if not request.GET.get("code") or not request.GET.get("state"):
            raise SignInRefused(STATE, "no code or state")
        self._refused = None
        try:
            user = super().authenticate(request, **kwargs)
        except SignInRefused:
            raise
        except requests.RequestException as exc:
            raise SignInRefused(UNREACHABLE, type(exc).__name__) from None
        except (SuspiciousOperation, jwt.PyJWTError, KeyError, TypeError, ValueError) as exc:
            # a signature, expiry or nonce the library refused, or an answer that is no token
            raise SignInRefused(TOKEN, f"{type(exc).__name__}: {exc}") from None
        if user is None:
            # (the library turns a refusal while finding the user into None)
            raise self._refused or SignInRefused(ACCOUNT, "no user")
        return user

    def get_token(self, payload):
        try:
            return super().get_token(payload)
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            # 4xx: the code was refused (expired, used already, another verifier's)
            reason = CODE if 400 <= status < 500 else UNREACHABLE
            raise SignInRefused(reason, f"the token endpoint answered {status}") from None

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        if kwargs.get("nonce") is None:  # (user info sent as a JWT: not an ID token)
            return payload
        provider = identity_provider.current()
        aud = payload.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        # the library checks neither: a token the provider made for another client, or another
        # provider's, must not sign anyone in here
        if provider.client_id not in audiences:
            raise SignInRefused(TOKEN, f"audience {aud!r}")
        if payload.get("iss") != provider.issuer:
            raise SignInRefused(TOKEN, f"issuer {payload.get('iss')!r}")
        sub = payload.get("sub")
        if not isinstance(sub, str) or not sub or len(sub) > SUBJECT_MAX_CHARS:
            # (cut to the column, two subjects could become one person)
            raise SignInRefused(TOKEN, f"subject {str(sub)[:50]!r}")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        claims = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(claims, dict):
            raise SignInRefused(ACCOUNT, "user info is not an object")
        # the subject of the user info must be the ID token's (OpenID Connect Core 5.3.2)
        if claims.get("sub") != payload.get("sub"):
            raise SignInRefused(TOKEN, "user info is another subject's")
        # a claim the ID token has and the user info lacks (groups, often) is the ID token's
        return {**payload, **claims}

    def verify_claims(self, claims):
        return True  # the subject is checked in verify_token; the rest is optional

    def get_or_create_user(self, access_token, id_token, payload):
        try:
            return self._user_for(self.get_userinfo(access_token, id_token, payload))
        except SignInRefused as exc:
            self._refused = exc
            raise

    def _user_for(self, claims):
        provider = identity_provider.current()
        issuer = provider.issuer
        with transaction.atomic():
            identity = (
                SignInIdentity.objects.select_for_update()
                .select_related("user")
                .filter(issuer=issuer, subject=claims["sub"])
                .first()
            )
            if identity is None:
                try:
                    with transaction.atomic():
                        identity = SignInIdentity.objects.create(
                            user=self._new_user(claims), issuer=issuer, subject=claims["sub"]
                        )
                except IntegrityError:
                    # the same person's sign-in in another tab, or another new user given the
                    # same name a moment ago, won: the next try finds the name taken
                    raise SignInRefused(ACCOUNT, "a new user made twice at once") from None
            user = identity.user
            if not user.is_active:
                raise SignInRefused(ACCOUNT, f"user {user.pk} is inactive")
            self._update(user, claims)
            identity.last_sign_in_at = timezone.now()
            identity.save(update_fields=["last_sign_in_at"])
            groups = group_roles.groups_of(claims, provider.groups_claim)
            group_roles.apply(user, groups, group_roles.parse(provider.groups))
        return user

    def _new_user(self, claims):
        User = get_user_model()
        email = claims.get("email") if isinstance(claims.get("email"), str) else ""
        email = email[: User._meta.get_field("email").max_length]
        # no password: an unusable one, so this user cannot sign in with one
        return User.objects.create_user(username_for(claims), email=email)

    def _update(self, user, claims):
        User = get_user_model()
        email = claims.get("email")
        if isinstance(email, str) and email != user.email:
            user.email = email[: User._meta.get_field("email").max_length]
            user.save(update_fields=["email"])


class PasswordBackend(ModelBackend):
    def user_can_authenticate(self, user):
        return super().user_can_authenticate(user) and identity_provider.password_allowed(
            user.get_username()
        )
