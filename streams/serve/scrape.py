"""GET /metrics: the Prometheus scrape endpoint, for a bearer token (METRICS_TOKEN) or a staff
session. What it serves is streams/observe/telemetry.py's registry."""

import hmac

from django.http import HttpResponse
from django.views.decorators.http import require_safe

from streams.access.throttle import throttled_check
from streams.access.tokens import bearer_token
from streams.core import conf
from streams.observe import telemetry


def _allowed(request):
    """None when `request` may scrape, else the refusal: a bearer token must be
    METRICS_TOKEN's (401 otherwise); without one, a staff session (anonymous 401, other
    users 403)."""
    header = request.headers.get("Authorization")
    if header:
        # guesses count with the API's and the proxy's wrong tokens, per client IP
        expected = conf.get().metrics_token

        def check(token):
            if expected and hmac.compare_digest(token.encode(), expected.encode()):
                return True
            return None

        ip = request.META.get("REMOTE_ADDR") or "-"
        ok, retry = throttled_check(bearer_token(header) or "", ip, check)
        if retry is not None:
            response = _refusal(429, f"too many wrong tokens: retry in {retry} s")
            response["Retry-After"] = str(retry)
            return response
        return None if ok else _refusal(401, "invalid metrics token")
    user = request.user
    if not user.is_authenticated:
        return _refusal(401, "authentication required")
    if not user.is_staff:
        return _refusal(403, "staff only")
    return None


def _refusal(status, text):
    response = HttpResponse(text + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@require_safe
def metrics(request):
    """GET /metrics: the Prometheus scrape endpoint."""
    refusal = _allowed(request)
    if refusal is not None:
        return refusal
    body, content_type = telemetry.exposition(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)
