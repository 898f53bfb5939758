"""Throttling: wrong secrets (bearer tokens, share links) per client IP, searches per user,
requests per token.

- Wrong tokens are throttled per client IP (`token_user`, for the API, the proxy and the
  WebSockets): a sliding window of failures in Django's cache (Redis at scale, so every process
  counts the same); valid tokens are never counted. Passwords are django-axes' (settings.py).
- Searches of the text are throttled per user (`search_allowed`), in the same kind of window:
  a search is a question about stored text, and many quick ones are how an index is walked.
- A token with a limit of requests per minute (`ApiToken.requests_per_minute`) is held to it
  (`token_request_allowed`, for the API and the proxy), in the same kind of window.
"""

import math
import time

from django.core.cache import cache

from streams.access import tokens
from streams.core import conf
from streams.models import ApiToken

# A sliding-window counter (two fixed windows, the previous one weighted by how much of it still
# overlaps the sliding window): two cache keys per counted thing, an atomic `incr` per count, one
# read per check, and the same numbers in every process when the cache is Redis.

_FAIL_KEY = "streamscope:tokfail:{}:{}"  # wrong bearer tokens, per client IP
_SEARCH_KEY = "streamscope:search:{}:{}"  # searches, per user
_TOKEN_KEY = "streamscope:tokreq:{}:{}"  # requests, per token (with a limit)
_SEEN_KEY = "streamscope:tokok:{}"
SEEN_VALID_S = 3600
SEARCH_WINDOW_S = 60.0
TOKEN_WINDOW_S = 60.0


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


def token_request_allowed(token_id, limit):
    """None, and the request counted — or the seconds until token `token_id` may send another,
    after `limit` requests in the sliding minute (sync). A refused request is not counted."""
    now = time.time()
    _, retry = _estimate(_TOKEN_KEY, token_id, limit, TOKEN_WINDOW_S, now)
    if retry is None:
        _count(_TOKEN_KEY, token_id, TOKEN_WINDOW_S, now)
    return retry


def token_requests(token_id):
    """The estimated requests of token `token_id` in the sliding minute (the token page)."""
    estimate, _ = _estimate(_TOKEN_KEY, token_id, math.inf, TOKEN_WINDOW_S, time.time())
    return round(estimate)


def token_user(token, ip):
    """(what the token stands for: a `tokens.Bearer`, else `tokens.Invalid` with the reason;
    None) — or (`tokens.UNKNOWN`, seconds to wait) when `ip` sent too many wrong tokens lately
    (sync). Revoked and expired tokens count as wrong ones."""
    found, retry = throttled_check(token, ip, tokens.resolve)
    return (tokens.UNKNOWN if found is None else found), retry


def throttled_check(token, ip, check):
    """(check(token), None) — or (None, seconds to wait) when `ip` sent too many wrong bearer
    tokens lately, to any endpoint (sync). `check` returns what the token stands for, or None
    (or something false: `tokens.Invalid`) for a wrong one. Valid tokens are never counted;
    once an IP is throttled, only tokens that were valid from it lately still pass (a user
    behind the attacker's NAT keeps working, a new guess is not even looked up)."""
    estimate, retry = _failures(ip, time.time())
    digest = ApiToken.hash(token) if token else ""
    if retry is not None and not cache.get(_SEEN_KEY.format(digest)):
        return None, retry
    found = check(token)
    if not found:
        note_token_failure(ip)
    elif estimate > 0:
        # Only while this IP has failures on record: no cache write on the usual path.
        cache.set(_SEEN_KEY.format(digest), 1, timeout=SEEN_VALID_S)
    return found, None
