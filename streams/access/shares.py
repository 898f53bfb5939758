"""Share links: a read-only link to one stream or to one session (docs/sharing.md).

- A link is a secret (`sl_` + 32 random bytes, URL-safe) of which only the SHA-256 is stored
  (`ShareLink.digest`): the database never holds a link that opens anything. Its full URL is
  shown once, when it is made.
- It shows what its owner may see of its target, now: a stream link that stream; a session link
  the owner's streams of that session (staff: everyone's, as their session page shows). Rights
  that shrink shrink the link with them, and a deactivated owner's links open nothing.
- It opens for any signed-in user until it expires (at most MAX_EXPIRY; there is no "never")
  or is revoked; for anyone with the link only when it was made so *and* the instance allows
  it (STREAMSCOPE_PUBLIC_SHARE_LINKS) at the moment it is opened.
- Wrong, expired and revoked secrets count as wrong bearer tokens of the client's IP
  (`access.throttled_check`: one policy for every secret a client may guess) and look alike
  to whoever presents them.

Plain Python; the views, the consumer and the relay call it. Revocation also closes the link's
open sockets: streams/live/shared.py's `revoke`, the one way to revoke.
"""

import dataclasses
import datetime as dt
import secrets

from django.db.models import Exists, F, OuterRef

from streams.access.rules import streams_for
from streams.access.throttle import throttled_check
from streams.core import conf
from streams.models import ShareLink, Stream

PREFIX = "sl_"
SECRET_BYTES = 32
MAX_SECRET_CHARS = 100  # longer is no secret of ours: not hashed, not looked up
MIN_EXPIRY = dt.timedelta(hours=1)
MAX_EXPIRY = dt.timedelta(days=30)
DEFAULT_EXPIRY = dt.timedelta(days=7)
ACTIVE, EXPIRED, REVOKED = "active", "expired", "revoked"


class Refused(Exception):
    """The user may not share this target (it is not theirs, or there is nothing in it)."""


@dataclasses.dataclass(frozen=True)
class Opening:
    """What presenting a secret gives: the link, or why not. `retry_after`: the IP sent too
    many wrong secrets lately (seconds to wait); `sign_in`: a valid link that opens only for
    signed-in users, presented by someone who is not."""

    link: ShareLink | None = None
    retry_after: int | None = None
    sign_in: bool = False


def _now():
    return dt.datetime.now(dt.UTC)


def public_allowed():
    """Whether links for anyone with the link may be made and opened on this instance."""
    return conf.get().public_share_links


def new_secret(prefix=PREFIX):
    """A fresh secret (a share link's, or with another `prefix` an invitation's). None
    containing a credential shape the egress gate redacts (an `sk-` in the random part): its
    URL must reach the browser intact."""
    prefixes = [p for p in conf.get().redact_key_prefixes.split(",") if p.strip()]
    while True:
        secret = prefix + secrets.token_urlsafe(SECRET_BYTES)
        if not any(p.strip() in secret for p in prefixes):
            return secret


def target_streams(user, *, stream=None, session=""):
    """The streams `user` may see of a target (a stream, or a session's name)."""
    visible = streams_for(user)
    if stream is not None:
        return visible.filter(pk=stream.pk if isinstance(stream, Stream) else stream)
    return visible.filter(session=session) if session else visible.none()


def may_share(user, *, stream=None, session=""):
    """The stream's owner or staff; a session: who sees a stream of it (staff: any session
    with streams)."""
    return target_streams(user, stream=stream, session=session).exists()


def create(owner, *, stream=None, session="", expires_in=DEFAULT_EXPIRY, anyone=False):
    """(the new link, its secret): the secret is not kept, so this is the one time it exists in
    full. Raises Refused when `owner` may not share the target, ValueError on a bad expiry or
    target."""
    if (stream is None) == (not session):
        raise ValueError("a share link has one target: a stream or a session")
    if not MIN_EXPIRY <= expires_in <= MAX_EXPIRY:
        raise ValueError(f"a share link expires in {MIN_EXPIRY} to {MAX_EXPIRY}")
    if not may_share(owner, stream=stream, session=session):
        raise Refused("no such stream or session")
    secret = new_secret()
    link = ShareLink.objects.create(
        owner=owner,
        stream_id=(stream.pk if isinstance(stream, Stream) else stream) if stream else None,
        session=session,
        digest=ShareLink.hash(secret),
        anyone=bool(anyone),
        expires_at=_now() + expires_in,
    )
    return link, secret


def _open_links(now=None):
    return ShareLink.objects.filter(
        revoked_at__isnull=True, expires_at__gt=now or _now(), owner__is_active=True
    )


def find(secret):
    """The open link of `secret` (not expired, not revoked, its owner active), or None."""
    if not secret or not secret.startswith(PREFIX) or len(secret) > MAX_SECRET_CHARS:
        return None
    return _open_links().select_related("owner").filter(digest=ShareLink.hash(secret)).first()


def open(secret, user, ip, *, count=False):
    """An `Opening` for `secret` presented by `user` (None or anonymous: signed out) from `ip`.
    With `count`, an opening that shows the link is counted (`opened`, `last_opened_at`): the
    link's own page does, the requests its page makes afterwards do not."""
    link, retry = throttled_check(secret, ip, find)
    if retry is not None:
        return Opening(retry_after=retry)
    if link is None:
        return Opening()
    signed_in = user is not None and user.is_authenticated
    if not signed_in and not (link.anyone and public_allowed()):
        return Opening(sign_in=True)
    if count:
        now = _now()
        ShareLink.objects.filter(pk=link.pk).update(opened=F("opened") + 1, last_opened_at=now)
        link.opened += 1
        link.last_opened_at = now
    return Opening(link=link)


def streams_of(link):
    """The streams `link` shows (see the module's docstring)."""
    return target_streams(link.owner, stream=link.stream_id, session=link.session)


def stream_of(link, stream_id):
    """The stream `stream_id` if `link` shows it, else None."""
    return streams_of(link).filter(pk=stream_id).first()


def stream_source(link, stream_id):
    """The stream's `source` if `link` shows it, else None (the live socket's check)."""
    return streams_of(link).filter(pk=stream_id).values_list("source", flat=True).first()


def closed_links(link_ids):
    """Of these link ids, the ones that no longer open: revoked, expired, deleted, or their
    owner deactivated (the sockets' periodic check: one query for all of a process's)."""
    still = set(_open_links().filter(pk__in=link_ids).values_list("pk", flat=True))
    return set(link_ids) - still


def status(link, now=None):
    if link.revoked_at is not None:
        return REVOKED
    return EXPIRED if link.expires_at <= (now or _now()) else ACTIVE


LISTED = 200  # links on the owner's page


def links_of(user, limit=LISTED):
    """(`user`'s links, each with its `status`: the ones that still open first, then the
    closed ones, newest first within each, at most `limit`; how many more there are)."""
    now = _now()
    mine = ShareLink.objects.filter(owner=user)
    open_ids = _open_links(now).filter(owner=user).values("pk")
    links = list(
        mine.select_related("stream")
        .annotate(closed=~Exists(open_ids.filter(pk=OuterRef("pk"))))
        .order_by("closed", "-created_at", "-pk")[:limit]
    )
    for link in links:
        link.status = status(link, now)
    more = mine.count() - len(links) if len(links) == limit else 0
    return links, more


def active_count(user, *, stream=None, session=""):
    """How many of `user`'s links to this target still open."""
    links = _open_links().filter(owner=user)
    if stream is not None:
        return links.filter(stream=stream).count()
    return links.filter(session=session, stream__isnull=True).count()


def revoke(user, link_id):
    """Revoke the link `link_id` if `user` owns it (staff: any link): the link, or None when
    there is no such link for them. Revoking twice keeps the first time. Only the row: the
    sockets are closed by streams/live/shared.py's `revoke`, which calls this."""
    links = ShareLink.objects.all() if user.is_staff else ShareLink.objects.filter(owner=user)
    link = links.filter(pk=link_id).first()
    if link is None:
        return None
    if link.revoked_at is None:
        link.revoked_at = _now()
        ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(
            revoked_at=link.revoked_at
        )
    return link
