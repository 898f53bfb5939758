"""Bearer tokens (`ss_…`, only the SHA-256 digest stored in `ApiToken`) and the users they
stand for. Bearer requests are exempt from CSRF: a browser never attaches that header on its
own, so a forged cross-site request cannot carry it."""

import datetime as dt

from streams.models import ApiToken

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


def revoked_tokens(digests):
    """Of these token digests, the ones no longer valid (revoked, deleted, user inactive)."""
    valid = set(
        ApiToken.objects.filter(
            digest__in=digests, revoked=False, user__is_active=True
        ).values_list("digest", flat=True)
    )
    return set(digests) - valid
