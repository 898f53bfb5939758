"""What each role may do in a project, and which project a request works in: the one rule every
view, API call, socket and management command asks (docs/teams.md).

The roles are ordered, each may do what the one before it may and more:
- viewer: reads everything in the project (streams, timelines, analytics, exports); comments;
- member: also starts streams, uses the playground, makes datasets and runs experiments,
  scores, makes share links, saved views and tokens of their own;
- admin: also manages members, the project's tokens, score types, prices, retention and
  notification channels (the others see the channels' names only);
- owner: also renames or deletes the project (a project always has one).
Staff (instance administrators) may do everything in every project. Someone who is not a member
of a project gets "not found" for its things, never "forbidden", so ids do not leak. A project
being deleted (`Project.deleting_at`, streams/access/members.py) is no one's: no role in it,
on no list, found by no slug.
"""

import datetime as dt
import enum

from django.db.models import Q

from streams.models import Membership, Project

Role = Membership.Role
RANKS = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3, Role.OWNER: 4}


class Action(enum.StrEnum):
    READ = "read"
    COMMENT = "comment"
    RUN = "run"  # start streams, the playground, imports
    EXPERIMENT = "experiment"  # make datasets and experiments, run them
    SCORE = "score"
    EVALUATE = "evaluate"  # make and edit evaluators and online rules, try them on a stream
    SHARE = "share"
    SAVE_VIEW = "save_view"
    OWN_TOKEN = "own_token"
    MANAGE_MEMBERS = "manage_members"
    MANAGE_TOKENS = "manage_tokens"
    MANAGE_SCORE_TYPES = "manage_score_types"
    MANAGE_PRICES = "manage_prices"
    MANAGE_RETENTION = "manage_retention"
    DELETE_STREAMS = "delete_streams"
    AUDIT = "audit"
    MANAGE_ALERTS = "manage_alerts"  # alert rules and silences (streams/alerts/)
    MANAGE_CHANNELS = "manage_channels"  # notification channels: make, change, test, their log
    MANAGE_OWNERS = "manage_owners"  # make, unmake or remove an owner; invite one
    RENAME_PROJECT = "rename_project"
    DELETE_PROJECT = "delete_project"


# The least role that may do each action: the whole policy, in one table.
ACTIONS = {
    Action.READ: Role.VIEWER,
    Action.COMMENT: Role.VIEWER,
    Action.RUN: Role.MEMBER,
    Action.EXPERIMENT: Role.MEMBER,
    Action.SCORE: Role.MEMBER,
    Action.EVALUATE: Role.MEMBER,
    Action.SHARE: Role.MEMBER,
    Action.SAVE_VIEW: Role.MEMBER,
    Action.OWN_TOKEN: Role.MEMBER,
    Action.MANAGE_MEMBERS: Role.ADMIN,
    Action.MANAGE_TOKENS: Role.ADMIN,
    Action.MANAGE_SCORE_TYPES: Role.ADMIN,
    Action.MANAGE_PRICES: Role.ADMIN,
    Action.MANAGE_RETENTION: Role.ADMIN,
    Action.DELETE_STREAMS: Role.ADMIN,
    Action.AUDIT: Role.ADMIN,
    Action.MANAGE_ALERTS: Role.MEMBER,
    Action.MANAGE_CHANNELS: Role.ADMIN,
    Action.MANAGE_OWNERS: Role.OWNER,
    Action.RENAME_PROJECT: Role.OWNER,
    Action.DELETE_PROJECT: Role.OWNER,
}


def signed_in(user):
    return user is not None and user.is_authenticated and user.is_active


def _pk(project):
    return project if project is None or isinstance(project, int) else project.pk


def roles_of(user):
    """{project id: role} of every project `user` is a member of (cached on the user object
    for the request: a page asks many times)."""
    if not signed_in(user):
        return {}
    cached = getattr(user, "_project_roles", None)
    if cached is None:
        mine = Membership.objects.filter(user_id=user.pk, project__deleting_at__isnull=True)
        cached = dict(mine.values_list("project_id", "role"))
        user._project_roles = cached
    return cached


def forget(user):
    """Drop what `roles_of` remembered (after a change of `user`'s memberships)."""
    for name in ("_project_roles", "_personal_project"):
        try:  # (`del`, not `__dict__`: request.user is a lazy object, whose own dict it is not)
            delattr(user, name)
        except AttributeError:
            pass


def role_of(user, project):
    """`user`'s role in `project` (a Project or its id), or None."""
    if project is None:
        return None
    return roles_of(user).get(_pk(project))


def may(user, action, project):
    """Whether `user` may do `action` in `project` (a Project or its id; None: the things
    that belong to no project, which only staff reach)."""
    if not signed_in(user):
        return False
    if user.is_staff:
        return True
    role = role_of(user, project)
    return role is not None and RANKS[role] >= RANKS[ACTIONS[Action(action)]]


def visible_project_ids(user):
    """The ids of the projects `user` may read; None for staff (every project, and the rows
    of no project)."""
    if not signed_in(user):
        return frozenset()
    if user.is_staff:
        return None
    return frozenset(roles_of(user))


def projects_for(user):
    """The projects `user` may work in (staff: all), by name."""
    ids = visible_project_ids(user)
    projects = Project.objects.filter(deleting_at__isnull=True)  # (one being deleted: nobody's)
    return projects if ids is None else projects.filter(pk__in=ids)


def in_project(queryset, user, project=None, field="project"):
    """`queryset` narrowed to what `user` may read: of `project` (a Project or id) if given,
    else of every project they belong to. Staff: everything, or `project`'s."""
    if not signed_in(user):
        return queryset.none()
    pk = _pk(project)
    if user.is_staff:
        return queryset if pk is None else queryset.filter(**{f"{field}_id": pk})
    if pk is not None:
        if role_of(user, pk) is None:
            return queryset.none()
        return queryset.filter(**{f"{field}_id": pk})
    return queryset.filter(Q(**{f"{field}_id__in": list(roles_of(user))}))


def home(user):
    """The project a new session of `user` starts in: the one they last worked in, else
    their personal project (made when first needed)."""
    if not signed_in(user):
        return None
    last = (
        Membership.objects.filter(
            user_id=user.pk, last_used_at__isnull=False, project__deleting_at__isnull=True
        )
        .select_related("project")
        .order_by("-last_used_at")
        .first()
    )
    return last.project if last is not None else Project.personal(user)


def remember(user, project):
    """Note that `user` works in `project` now (their next session starts there)."""
    Membership.objects.filter(user_id=user.pk, project_id=_pk(project)).update(
        last_used_at=dt.datetime.now(dt.UTC)
    )


def by_slug(user, slug):
    """The project of `slug` if `user` may read it, else None."""
    if not slug or len(slug) > 60:
        return None
    project = Project.objects.filter(slug=slug, deleting_at__isnull=True).first()
    if project is None or not may(user, Action.READ, project):
        return None
    return project


ALL = 0  # a staff member's choice of every project at once (remembered as this id)


def current(user, slug="", remembered=None):
    """The project a request of `user` works in, and the id to remember for their next
    request: the project of `slug` (a link's `?project=`) if given, else the remembered one
    while they may still read it, else `home`. Staff may also work in every project at once
    (`remembered` ALL): the project is then None. Raises LookupError for a `slug` they may
    not read (a page answers 404: whether it exists is not theirs to know)."""
    if not signed_in(user):
        return None, None
    if slug:
        project = by_slug(user, slug)
        if project is None:
            raise LookupError(slug)
        return project, project.pk
    if remembered == ALL and user.is_staff:
        return None, ALL
    if isinstance(remembered, int) and may(user, Action.READ, remembered):
        project = Project.objects.filter(pk=remembered, deleting_at__isnull=True).first()
        if project is not None:
            return project, project.pk
    project = home(user)
    return project, project.pk
