"""Who is asking, and what they may see: one room for the API, the proxy, the pages and the
WebSocket consumers, between what is stored (`streams.store`) and what shows it.

- `tokens`: bearer tokens and the users they stand for; `throttle`: wrong secrets per client IP
  and searches per user; `sockets`: the open WebSockets of a user; `rules`: which streams a user
  may see; `shares`: share links, and whether a secret opens one. The HTTP shape of a refusal
  (401, 403, 429) is the exits': streams/serve/http.py.

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
