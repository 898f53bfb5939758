"""Signing in (docs/sign-in.md): the login page, and the identity provider's three routes under
/oidc/ when one is configured (streams/access/identity_provider.py): `oidc_authentication_init`
sends the browser to the provider with a new state, nonce and PKCE challenge;
`oidc_authentication_callback` takes the provider's answer; `oidc_logout` ends the session here and
sends the browser to the provider's sign-out page when it has one. mozilla-django-oidc's views,
configured from the provider, with a refusal shown on the login page as a message saying why
(and logged), never as an error page.

With STREAMSCOPE_PASSWORD_LOGIN off the login page offers the provider only; the password form
is one link away ("?break-glass=1") for the break-glass administrators, whom alone the password
backend lets in (streams/access/sign_in.py), django-axes counting wrong passwords as ever.
"""

import logging

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.shortcuts import resolve_url
from django.urls import path
from django.utils.translation import gettext_lazy as _
from mozilla_django_oidc import views as oidc_views

from streams.access import identity_provider, sign_in
from streams.core import conf

log = logging.getLogger("streams.sign_in")

REFUSED = {
    sign_in.STATE: _(
        "Sign-in did not complete: this sign-in was not started in this browser, or it was "
        "already used. Please sign in again."
    ),
    sign_in.PROVIDER: _("Sign-in was cancelled or refused by %(provider)s."),
    sign_in.CODE: _(
        "Sign-in did not complete: %(provider)s did not accept the sign-in (it may have "
        "expired). Please sign in again."
    ),
    sign_in.TOKEN: _(
        "Sign-in refused: the answer from %(provider)s could not be verified. Please sign in "
        "again; if this keeps happening, tell your administrator."
    ),
    sign_in.UNREACHABLE: _("Sign-in failed: %(provider)s could not be reached. Please try again."),
    sign_in.ACCOUNT: _(
        "Sign-in refused: your account cannot sign in here. Ask your administrator."
    ),
}


def provider_name(provider):
    return provider.name or _("single sign-on")


class Login(auth_views.LoginView):
    template_name = "registration/login.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        password = conf.get().password_login
        provider = identity_provider.current()
        context.update(
            provider_name=provider_name(provider) if provider else None,
            password_login=password,
            # the form is there unless password sign-in is off; then behind the break-glass link
            # (and after a POST, to show its error)
            password_form=password
            or "break-glass" in self.request.GET
            or self.request.method == "POST",
        )
        return context


class ProviderStart(oidc_views.OIDCAuthenticationRequestView):
    get_settings = staticmethod(sign_in.library_setting)


class ProviderCallback(oidc_views.OIDCAuthenticationCallbackView):
    get_settings = staticmethod(sign_in.library_setting)

    @property
    def failure_url(self):
        return resolve_url("login")

    def get(self, request):
        try:
            return super().get(request)
        except sign_in.SignInRefused as exc:
            return self.refused(exc.reason, exc)
        except SuspiciousOperation as exc:  # the library's: a state this browser did not start
            return self.refused(sign_in.STATE, exc)

    def login_failure(self):
        # (the library's answer to an error from the provider, or to a callback with no state
        # this session knows)
        if self.request.GET.get("error"):
            return self.refused(sign_in.PROVIDER, f"error={self.request.GET['error'][:100]!r}")
        return self.refused(sign_in.STATE, "no sign-in started in this session")

    def refused(self, reason, detail):
        log.warning("sign-in with the identity provider refused (%s): %s", reason, detail)
        provider = identity_provider.current()
        messages.error(self.request, REFUSED[reason] % {"provider": provider_name(provider)})
        return super().login_failure()


class ProviderLogout(oidc_views.OIDCLogoutView):
    get_settings = staticmethod(sign_in.library_setting)


provider_urls = [
    path("authenticate/", ProviderStart.as_view(), name="oidc_authentication_init"),
    path("callback/", ProviderCallback.as_view(), name="oidc_authentication_callback"),
    path("logout/", ProviderLogout.as_view(), name="oidc_logout"),
]
