"""The site's routes as a server configured with an identity provider has them (dashboard/urls.py
adds the provider's only then), for the route walkers, which must walk them too: set
ROOT_URLCONF to this module and STREAMSCOPE to `settings(...)` (`ENV` for a server's process).
The provider is named but never asked: every endpoint is given (nothing to discover), and
nothing listens at them."""

from dashboard.urls import provider_routes
from dashboard.urls import urlpatterns as site

NOWHERE = "http://127.0.0.1:9/o"  # (the discard port)
ENV = {
    "STREAMSCOPE_OIDC_ISSUER": NOWHERE,
    "STREAMSCOPE_OIDC_AUTHORIZATION_ENDPOINT": f"{NOWHERE}/authorize/",
    "STREAMSCOPE_OIDC_TOKEN_ENDPOINT": f"{NOWHERE}/token/",
    "STREAMSCOPE_OIDC_USERINFO_ENDPOINT": f"{NOWHERE}/userinfo/",
    "STREAMSCOPE_OIDC_JWKS_ENDPOINT": f"{NOWHERE}/jwks/",
    "STREAMSCOPE_OIDC_CLIENT_ID": "streamscope-walk",
    "STREAMSCOPE_OIDC_CLIENT_SECRET": "oidc-Client-Secret-walk-90817263",
}


def settings(streamscope):
    """`streamscope` (a settings.STREAMSCOPE) with the provider configured."""
    return {**streamscope, **{k.removeprefix("STREAMSCOPE_"): v for k, v in ENV.items()}}


urlpatterns = site if any(p in site for p in provider_routes) else [*site, *provider_routes]
