"""Bearer tokens (`ss_…`, only the SHA-256 digest stored in `ApiToken`) and what they stand
for: a user, in the token's project, with the token's scopes. Bearer requests are exempt from
CSRF: a browser never attaches that header on its own, so a forged cross-site request cannot
carry it.

A token works in its own project only, as its user with their role there (one rule:
streams/access/projects.py), and only for what its scopes name (`ApiToken.Scope`): `proxy`
(the recording proxy), `read` (the API's reads and the WebSockets), `write` (the API's writes:
scores, comments, starting and cancelling streams). A token that is unknown, revoked, expired,
or whose user is inactive or no longer a member of its project stands for nobody (401, with
the reason when the token is real: whoever holds it may know why it stopped working)."""

import dataclasses
import datetime as dt

from django.contrib.auth import get_user_model

from streams.access import projects
from streams.models import ApiToken, Project

TOKEN_PREFIX = "ss_"
Scope = ApiToken.Scope
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


@dataclasses.dataclass(frozen=True)
class Invalid:
    """Why a token stands for nobody: `code` (the API's error code) and `message`. False in a
    test, like no token at all (streams/access/throttle.py counts it as a wrong one)."""

    code: str
    message: str

    def __bool__(self):
        return False


UNKNOWN = Invalid("invalid_token", "Unknown, revoked or malformed token.")


@dataclasses.dataclass(frozen=True)
class Bearer:
    """A valid token: its user, its project and its row (scopes, expiry, limits)."""

    user: object
    project: Project
    token: ApiToken

    def lacks(self, scope):
        """Whether the token's scopes leave out `scope`."""
        return Scope(scope) not in self.token.scopes

    def expired(self, now=None):
        """Whether the token has expired (by `now`): a token is cached for a few seconds by
        the proxy, and must not outlive its expiry there."""
        expires_at = self.token.expires_at
        return expires_at is not None and (now or dt.datetime.now(dt.UTC)) >= expires_at

    def may(self, action):
        """Whether the token's user may do `action` in the token's project (their roles were
        read when the token was, so this asks no database)."""
        return projects.may(self.user, action, self.project)


def expired_message(expires_at):
    return f"This token expired at {expires_at:%Y-%m-%d %H:%M} UTC."


def resolve(token, now=None):
    """What `token` stands for: a `Bearer`, or `Invalid` with the reason (sync)."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return UNKNOWN
    row = (
        ApiToken.objects.select_related("user", "project")
        .filter(digest=ApiToken.hash(token))
        .first()
    )
    if row is None or not row.user.is_active:
        return UNKNOWN
    if row.revoked:
        return Invalid("token_revoked", "This token was revoked.")
    now = now or dt.datetime.now(dt.UTC)
    if row.expires_at is not None and now >= row.expires_at:
        return Invalid("token_expired", expired_message(row.expires_at))
    project = row.project or Project.personal(row.user)
    projects.roles_of(row.user)  # (read now, on this thread: `Bearer.may` asks no database)
    if not projects.may(row.user, projects.Action.READ, project):
        return Invalid("not_a_member", "This token's user is no longer a member of its project.")
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_PRECISION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return Bearer(row.user, project, row)


def revoked_tokens(digests):
    """Of these token digests, the ones no longer valid (revoked, expired, deleted, user
    inactive)."""
    now = dt.datetime.now(dt.UTC)
    valid = set(
        ApiToken.objects.filter(digest__in=digests, revoked=False, user__is_active=True)
        .exclude(expires_at__lte=now)
        .values_list("digest", flat=True)
    )
    return set(digests) - valid


# ---- the token page (dashboard/views/tokens.py) ---------------------------------------------


class Refused(Exception):
    """A token change `user` may not make (the page answers 403, or 404 for a token they may
    not see)."""


def visible(user, project):
    """The tokens of `project` `user` may see on its token page: every one for whoever may
    manage the project's tokens (admins), their own for whoever may have tokens (members),
    none for anyone else; live ones first, newest first. `project` None: every token, for
    staff (who chose every project at once)."""
    rows = ApiToken.objects.all() if project is None else ApiToken.objects.filter(project=project)
    rows = rows.select_related("user", "created_by", "project")
    if projects.may(user, projects.Action.MANAGE_TOKENS, project):
        pass
    elif projects.may(user, projects.Action.OWN_TOKEN, project):
        rows = rows.filter(user_id=user.pk)
    else:
        rows = rows.none()
    return rows.order_by("revoked", "-created_at")


def owners(user, project):
    """Whom `user` may make a token for in `project`: any member who may have tokens, for an
    admin; themselves, for a member; nobody, for anyone else."""
    if projects.may(user, projects.Action.MANAGE_TOKENS, project):
        rank = projects.RANKS[projects.ACTIONS[projects.Action.OWN_TOKEN]]
        roles = [role for role, n in projects.RANKS.items() if n >= rank]
        return (
            get_user_model()
            .objects.filter(
                memberships__project=project, memberships__role__in=roles, is_active=True
            )
            .order_by("username")
        )
    if projects.may(user, projects.Action.OWN_TOKEN, project):
        return get_user_model().objects.filter(pk=user.pk)
    return get_user_model().objects.none()


def issue(actor, project, owner=None, **fields):
    """A new token of `owner` (by default `actor`) in `project`, made by `actor`: returned
    once, only its digest kept. `fields`: name, scopes, expires_at and limits. Refused when
    `actor` may not make it."""
    owner = owner or actor
    if not owners(actor, project).filter(pk=owner.pk).exists():
        raise Refused(owner.pk)
    return ApiToken.issue(owner, project=project, created_by=actor, **fields)


def revoke(user, token_id):
    """Revoke the token `token_id` if `user` sees it on its project's page (theirs, or any of
    the project's for an admin); the row, or None when they do not (404)."""
    row = ApiToken.objects.filter(pk=token_id).select_related("project").first()
    if row is None or not visible(user, row.project).filter(pk=row.pk).exists():
        return None
    if not row.revoked:
        ApiToken.objects.filter(pk=row.pk).update(revoked=True)
        row.revoked = True
    return row
