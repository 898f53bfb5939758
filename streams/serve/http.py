"""The API's HTTP side of access: its error shape, and the decorator that authenticates a view
(bearer token, else the session with CSRF on unsafe methods), and the middleware refusing a NUL
anywhere a request is read. The rules are streams/access/."""

import functools

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpResponseBadRequest, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.decorators import sync_and_async_middleware
from django.views.decorators.csrf import csrf_exempt

from streams.access import limits
from streams.access.throttle import token_user
from streams.access.tokens import Scope, bearer_token
from streams.core import safejson

SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


def json_error(http_status, code, message, **extra):
    """The API's one error shape: `{"error": {"code", "message", …}}`."""
    return JsonResponse({"error": {"code": code, "message": message, **extra}}, status=http_status)


def _csrf_failure(request):
    # Django's own check (origin, referer, token), without the middleware's HTML 403 page.
    check = CsrfViewMiddleware(lambda request: None)
    check.process_request(request)
    return check.process_view(request, None, (), {})


async def _token_refusal(bearer, method):
    """The response refusing a request of `bearer` (a `tokens.Bearer` or `tokens.Invalid`),
    or None: 401 for no valid token, 403 for a scope it lacks (reads need `read`, anything
    else `write`), 429 over its requests per minute."""
    if not bearer:
        response = json_error(401, bearer.code, bearer.message)
        response["WWW-Authenticate"] = 'Bearer realm="streamscope"'
        return response
    scope = Scope.READ if method in SAFE_METHODS else Scope.WRITE
    if bearer.lacks(scope):
        return json_error(
            403,
            "insufficient_scope",
            f"This token lacks the '{scope}' scope.",
            scope=str(scope),
        )
    if limits.limited(bearer):
        over = await sync_to_async(limits.over)(bearer)
        if over is not None:
            return limit_error(over)
    return None


def limit_error(over):
    """The 429 of a request a token's limits refuse (`limits.Over`)."""
    response = json_error(429, over.code, over.message, **over.extra)
    response["Retry-After"] = str(over.retry_after)
    return response


def api_view(view):
    """Authenticate an async API view: bearer token, else the session (+ CSRF on unsafe
    methods). Unauthenticated requests get a 401 JSON error, never a login redirect."""

    @csrf_exempt
    @functools.wraps(view)
    async def wrapper(request, *args, **kwargs):
        authorization = request.headers.get("Authorization")
        if authorization:
            token = bearer_token(authorization)
            ip = request.META.get("REMOTE_ADDR") or "-"
            bearer, retry = await sync_to_async(token_user)(token, ip)
            if retry is not None:
                response = json_error(
                    429, "too_many_attempts", f"Too many wrong tokens: retry in {retry} s."
                )
                response["Retry-After"] = str(retry)
                return response
            refusal = await _token_refusal(bearer, request.method)
            if refusal is not None:
                return refusal
            request.user = bearer.user
            # a token works in its own project (streams/access/tokens.py)
            request.project = bearer.project
            request.token = bearer.token
            request.bearer = bearer
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
            if request.method not in SAFE_METHODS:
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


def _holds_nul(request):
    """Where `request` carries a NUL character, or "": its path, a query parameter's name or
    value, or a cookie (a quoted cookie may spell one as \\000)."""
    if "\x00" in request.path:
        return "path"
    for name, values in request.GET.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            return "query"
    if any("\x00" in name or "\x00" in value for name, value in request.COOKIES.items()):
        return "cookies"
    return ""


@sync_and_async_middleware
def refuse_nul(get_response):
    """400 for a request carrying NUL where anything reads it before a form could refuse it:
    PostgreSQL refuses NUL in any query parameter, so a filter, a lookup or a session cookie
    holding one failed as a 500 there (SQLite matched nothing). One place for every page, the
    API and the admin, before anything reads the request."""

    def refusal(request):
        where = _holds_nul(request)
        if where:
            return HttpResponseBadRequest(
                f"NUL characters are not allowed in a request's {where}.",
                content_type="text/plain; charset=utf-8",
            )
        return None

    if iscoroutinefunction(get_response):

        async def middleware(request):
            return refusal(request) or await get_response(request)

    else:

        def middleware(request):
            return refusal(request) or get_response(request)

    return middleware


def method_not_allowed(*allowed):
    """405 naming the methods a route takes (its Allow header too)."""
    response = json_error(405, "method_not_allowed", f"Use {' or '.join(allowed)}.")
    response["Allow"] = ", ".join(allowed)
    return response


def json_body(request, limit):
    """(the JSON object a request's body holds, None), or (None, the error response): 413 for
    a body over `limit` bytes (by its declared length first: Django refuses to read a body
    over its own upload limit), 400 for one that is not a JSON object."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit or len(request.body) > limit:
        return None, json_error(413, "too_large", f"The body is over {limit:,} bytes.", limit=limit)
    try:
        # depth-bounded before json recurses; NaN and Infinity refused (no column stores them)
        data = safejson.loads(request.body or b"null")
    except ValueError as exc:
        return None, json_error(400, "invalid_json", f"The body is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return None, json_error(400, "invalid_json", "The body must be a JSON object.")
    return data, None
