"""Who is asking, and what they may see: one place for the API and the WebSocket consumers.

- Browsers use the session (and CSRF on unsafe methods); scripts send `Authorization: Bearer
  ss_…`, a per-user token of which only the SHA-256 digest is stored (`ApiToken`). Bearer
  requests are exempt from CSRF: a browser never attaches that header on its own, so a forged
  cross-site request cannot carry it.
- A user sees their own streams; staff see every stream. A stream someone may not see is
  reported as not found, so ids of other users' streams do not leak.
"""

import datetime as dt
import functools

from asgiref.sync import sync_to_async
from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from .models import ApiToken, Stream

TOKEN_PREFIX = "ss_"
# `last_used_at` is for telling live tokens from forgotten ones: minute precision is enough,
# and it saves a write on every request of a busy script.
LAST_USED_PRECISION = dt.timedelta(seconds=60)


def bearer_token(authorization):
    """The token of an `Authorization: Bearer …` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def user_for_token(token):
    """The active user a valid, unrevoked token belongs to, or None (sync)."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    row = (
        ApiToken.objects.select_related("user")
        .filter(digest=ApiToken.hash(token), revoked=False)
        .first()
    )
    if row is None or not row.user.is_active:
        return None
    now = dt.datetime.now(dt.UTC)
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_PRECISION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row.user


def streams_for(user):
    """The streams `user` may see."""
    if user is None or not user.is_authenticated:
        return Stream.objects.none()
    if user.is_staff:
        return Stream.objects.all()
    return Stream.objects.filter(user_id=user.pk)


def may_see(user, stream_user_id):
    return bool(
        user is not None and user.is_authenticated and (user.is_staff or stream_user_id == user.pk)
    )


def json_error(http_status, code, message, **extra):
    """The API's one error shape: `{"error": {"code", "message", …}}`."""
    return JsonResponse({"error": {"code": code, "message": message, **extra}}, status=http_status)


def _csrf_failure(request):
    # Django's own check (origin, referer, token), without the middleware's HTML 403 page.
    check = CsrfViewMiddleware(lambda request: None)
    check.process_request(request)
    return check.process_view(request, None, (), {})


def api_view(view):
    """Authenticate an async API view: bearer token, else the session (+ CSRF on unsafe
    methods). Unauthenticated requests get a 401 JSON error, never a login redirect."""

    @csrf_exempt
    @functools.wraps(view)
    async def wrapper(request, *args, **kwargs):
        authorization = request.headers.get("Authorization")
        if authorization:
            token = bearer_token(authorization)
            user = await sync_to_async(user_for_token)(token) if token else None
            if user is None:
                response = json_error(401, "invalid_token", "Unknown, revoked or malformed token.")
                response["WWW-Authenticate"] = 'Bearer realm="streamscope"'
                return response
            request.user = user
            request.auth_method = "token"
        else:
            user = await request.auser()
            if not user.is_authenticated:
                response = json_error(
                    401,
                    "not_authenticated",
                    "Log in, or send 'Authorization: Bearer <token>' "
                    "(python manage.py create_token USER).",
                )
                response["WWW-Authenticate"] = 'Bearer realm="streamscope"'
                return response
            if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
                failure = await sync_to_async(_csrf_failure)(request)
                if failure is not None:
                    return json_error(
                        403,
                        "csrf_failed",
                        "CSRF check failed: send the X-CSRFToken header, or use a bearer token.",
                    )
            request.auth_method = "session"
        return await view(request, *args, **kwargs)

    return wrapper
