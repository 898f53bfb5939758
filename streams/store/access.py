"""Who is asking, and what they may see: one place for the API and the WebSocket consumers.

- Browsers use the session (and CSRF on unsafe methods); scripts send `Authorization: Bearer
  ss_…`, a per-user token of which only the SHA-256 digest is stored (`ApiToken`). Bearer
  requests are exempt from CSRF: a browser never attaches that header on its own, so a forged
  cross-site request cannot carry it.
- A user sees their own streams; staff see every stream. A stream someone may not see is
  reported as not found, so ids of other users' streams do not leak.
- Wrong tokens are throttled per client IP (`token_user`, for the API, the proxy and the
  WebSockets): a sliding window of failures in Django's cache (Redis at scale, so every process
  counts the same); valid tokens are never counted. Passwords are django-axes' (settings.py).
- Searches of the text are throttled per user (`search_allowed`), in the same kind of window:
  a search is a question about stored text, and many quick ones are how an index is walked.
"""

import datetime as dt
import functools
import math
import time

from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.http import JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from streams.core import conf
from streams.models import ApiToken, Stream

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


# ---- throttling -----------------------------------------------------------------------------
#
# A sliding-window counter (two fixed windows, the previous one weighted by how much of it still
# overlaps the sliding window): two cache keys per counted thing, an atomic `incr` per count, one
# read per check, and the same numbers in every process when the cache is Redis.

_FAIL_KEY = "streamscope:tokfail:{}:{}"  # wrong bearer tokens, per client IP
_SEARCH_KEY = "streamscope:search:{}:{}"  # searches, per user
_SEEN_KEY = "streamscope:tokok:{}"
SEEN_VALID_S = 3600
SEARCH_WINDOW_S = 60.0


def client_ip(scope):
    """The client's address of an ASGI scope (behind nginx, Daphne's --proxy-headers puts the
    forwarded one there, as it does into a request's REMOTE_ADDR)."""
    client = scope.get("client")
    return str(client[0]) if client else "-"


def _estimate(key, who, limit, window, now):
    """(estimated counts of `who` in the sliding window, seconds until it is under `limit`, or
    None when it is)."""
    n = int(now // window)
    keys = [key.format(who, n), key.format(who, n - 1)]
    got = cache.get_many(keys)
    cur, prev = got.get(keys[0], 0), got.get(keys[1], 0)
    elapsed = now - n * window
    estimate = prev * (1 - elapsed / window) + cur
    if estimate < limit:
        return estimate, None
    if cur < limit:  # the previous window's weight has to shrink
        wait = window * (1 - (limit - cur) / prev) - elapsed
    else:  # into the next window, where this one is the previous
        wait = (window - elapsed) + window * (1 - limit / cur)
    return estimate, max(1, math.ceil(wait))


def _count(key, who, window, now):
    key = key.format(who, int(now // window))
    cache.add(key, 0, timeout=math.ceil(2 * window) + 1)
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=math.ceil(2 * window) + 1)


def _failures(ip, now):
    s = conf.get()
    return _estimate(_FAIL_KEY, ip, s.token_failure_limit, s.token_failure_window_s, now)


def note_token_failure(ip):
    _count(_FAIL_KEY, ip, conf.get().token_failure_window_s, time.time())


def search_allowed(user):
    """None, and the search counted — or the seconds until `user` may search again, after
    STREAMSCOPE_SEARCH_MAX_PER_MINUTE searches in the sliding minute (sync). Per user, staff
    included, whatever the address: a search walks what the user may see, and staff see
    everyone's. A refused search is not counted (waiting out Retry-After is enough)."""
    limit = conf.get().search_max_per_minute
    now = time.time()
    _, retry = _estimate(_SEARCH_KEY, user.pk, limit, SEARCH_WINDOW_S, now)
    if retry is None:
        _count(_SEARCH_KEY, user.pk, SEARCH_WINDOW_S, now)
    return retry


def token_user(token, ip):
    """(the token's user or None, None) — or (None, seconds to wait) when `ip` sent too many
    wrong tokens lately (sync)."""
    return throttled_check(token, ip, user_for_token)


def throttled_check(token, ip, check):
    """(check(token), None) — or (None, seconds to wait) when `ip` sent too many wrong bearer
    tokens lately, to any endpoint (sync). `check` returns what the token stands for, or None
    for a wrong one. Valid tokens are never counted; once an IP is throttled, only tokens that
    were valid from it lately still pass (a user behind the attacker's NAT keeps working, a
    new guess is not even looked up)."""
    estimate, retry = _failures(ip, time.time())
    digest = ApiToken.hash(token) if token else ""
    if retry is not None and not cache.get(_SEEN_KEY.format(digest)):
        return None, retry
    found = check(token)
    if found is None:
        note_token_failure(ip)
    elif estimate > 0:
        # Only while this IP has failures on record: no cache write on the usual path.
        cache.set(_SEEN_KEY.format(digest), 1, timeout=SEEN_VALID_S)
    return found, None


# ---- open WebSockets per user ---------------------------------------------------------------
#
# A user has MAX_SOCKETS_PER_USER numbered slots in the cache; a socket holds one as a lease
# that its process renews (renew_socket_slots, every SOCKET_RENEW_S) while it is open. A process
# that dies uncleanly stops renewing, and its slots come free after SOCKET_LEASE_S.

_SLOT_KEY = "streamscope:ws:{}:{}"
SOCKET_LEASE_S = 30
SOCKET_RENEW_S = 10


def take_socket_slot(user_id, owner):
    """The cache key of a free slot now held by `owner` (a unique string), or None (sync)."""
    cap = conf.get().max_sockets_per_user
    keys = [_SLOT_KEY.format(user_id, i) for i in range(cap)]
    held = cache.get_many(keys)
    for key in keys:
        # `add` is atomic (SET NX in Redis): two processes cannot take one slot
        if key not in held and cache.add(key, owner, timeout=SOCKET_LEASE_S):
            return key
    return None


def renew_socket_slots(slots):
    """Renew leases: `slots` maps cache key -> owner."""
    if slots:
        cache.set_many(slots, timeout=SOCKET_LEASE_S)


def free_socket_slot(key, owner):
    if cache.get(key) == owner:  # not a slot whose lease ran out and went to someone else
        cache.delete(key)


def revoked_tokens(digests):
    """Of these token digests, the ones no longer valid (revoked, deleted, user inactive)."""
    valid = set(
        ApiToken.objects.filter(
            digest__in=digests, revoked=False, user__is_active=True
        ).values_list("digest", flat=True)
    )
    return set(digests) - valid


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
            ip = request.META.get("REMOTE_ADDR") or "-"
            user, retry = await sync_to_async(token_user)(token, ip)
            if retry is not None:
                response = json_error(
                    429, "too_many_attempts", f"Too many wrong tokens: retry in {retry} s."
                )
                response["Retry-After"] = str(retry)
                return response
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
