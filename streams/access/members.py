"""Who is in a project, and the project itself: making, renaming and deleting one, adding,
re-roling and removing members, leaving (docs/teams.md, "Members").

Every change asks `projects.may` (streams/access/projects.py, the one rule) and answers with
an exception a page, the API or a command turns into its own words:
- `NotFound`: the actor is not a member (a page's 404: whether it exists is not theirs to know);
- `Forbidden`: a member whose role is too low (403);
- `Refused`: a rule of the project itself (409): a project always has an owner; only an owner
  makes, unmakes or removes an owner; a name is taken.

The last-owner rule holds under concurrent changes: each change locks the project's row (on
PostgreSQL; SQLite has one writer at a time), writes, then counts the owners left and rolls
back when there are none, so two owners demoting each other at once leave one.
"""

import datetime as dt
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Case, Count, F, Q, When
from django.utils.text import slugify
from django.utils.translation import gettext_lazy as _

from streams.access import projects
from streams.access.projects import Action, Role
from streams.models import (
    CURRENCIES,
    MAX_PROJECT_NAME_CHARS,
    MAX_RETENTION_DAYS,
    Membership,
    Project,
    Stream,
)
from streams.store import audit, retention

SLUG_CHARS = 50  # of the name's slug; room for a "-2" in the column's 60
STREAMS_PER_BATCH = retention.STREAMS_PER_BATCH  # a deleted project's, per transaction


class Refused(Exception):
    """A change the rules refuse; `status` is how a page answers it. The message is for
    people (translatable)."""

    status = 409

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class NotFound(Refused):
    status = 404


class Forbidden(Refused):
    status = 403


class _Instance:
    """Whoever runs `manage.py`: the instance's administrator, as staff (`projects.may` lets
    staff do everything), with no user of their own."""

    pk = None
    is_authenticated = True
    is_active = True
    is_staff = True

    def __str__(self):
        return "manage.py"


INSTANCE = _Instance()

NO_PROJECT = _("No such project.")
NO_MEMBER = _("That user is not a member of this project.")
LAST_OWNER = _(
    "A project always has an owner: make someone else an owner first, or delete the project."
)
OWNERS_ONLY = _("Only an owner may make, unmake or remove an owner.")


def require(actor, action, project):
    """Nothing if `actor` may do `action` in `project`; else NotFound for whoever may not even
    read it, Forbidden for a member whose role is too low."""
    if projects.may(actor, action, project):
        return
    if projects.may(actor, Action.READ, project):
        raise Forbidden(_("Your role in this project does not allow that."))
    raise NotFound(NO_PROJECT)


def role_of_text(role):
    """The Role `role` names; Refused for none."""
    try:
        return Role(role)
    except ValueError:
        raise Refused(_("Unknown role.")) from None


def require_owner_rights(actor, project, *roles):
    """Nothing, unless one of `roles` is owner and `actor` is no owner (or staff): only an
    owner makes, unmakes, removes or invites an owner."""
    if Role.OWNER in roles and not projects.may(actor, Action.MANAGE_OWNERS, project):
        raise Forbidden(OWNERS_ONLY)


def _forget(*users):
    for user in users:
        if user is not None:
            projects.forget(user)


# ---- the project --------------------------------------------------------------------------------


def clean_name(name):
    name = " ".join((name or "").split())
    if not name:
        raise Refused(_("A project needs a name."))
    if len(name) > MAX_PROJECT_NAME_CHARS:
        raise Refused(
            _("A project's name has at most %(n)d characters.") % {"n": MAX_PROJECT_NAME_CHARS}
        )
    return name


def _name_free(name, project=None):
    taken = Project.objects.filter(name__iexact=name)
    if project is not None:
        taken = taken.exclude(pk=project.pk)
    if taken.exists():
        raise Refused(_("There is a project of that name already."))


def _free_slug(name):
    base = slugify(name)[:SLUG_CHARS].strip("-") or "project"
    taken = set(Project.objects.filter(slug__startswith=base).values_list("slug", flat=True))
    taken |= Project.RESERVED_SLUGS
    n = 1
    while (slug := base if n == 1 else f"{base}-{n}") in taken:
        n += 1
    return slug


def create(actor, name):
    """A new project named `name`, `actor` its owner. Any signed-in user may make one."""
    if not projects.signed_in(actor) or actor.pk is None:
        raise Forbidden(_("Only a signed-in user may make a project."))
    name = clean_name(name)
    for _attempt in range(3):
        _name_free(name)
        try:
            with transaction.atomic():
                project = Project.objects.create(name=name, slug=_free_slug(name))
                Membership.objects.create(project=project, user=actor, role=Role.OWNER)
        except IntegrityError:  # (the same name or slug, made meanwhile)
            continue
        _forget(actor)
        return project
    raise Refused(_("There is a project of that name already."))


def rename(actor, project, name):
    """Renames `project` (owners). Its slug stays: links that name it keep working."""
    require(actor, Action.RENAME_PROJECT, project)
    name = clean_name(name)
    _name_free(name, project)
    try:
        Project.objects.filter(pk=project.pk).update(name=name)
    except IntegrityError:
        raise Refused(_("There is a project of that name already.")) from None
    project.name = name
    return project


def configure(actor, project, *, currency, retain_streams_days, retain_events_days, language=None):
    """Sets `project`'s currency (its prices' and spend caps', admins: MANAGE_PRICES), its
    own retention in days, None for the instance's (admins: MANAGE_RETENTION), and the language
    of its notices ("" for the instance's; None: as it is). The audit log records the change
    (Project is watched); retention applies at its next run."""
    require(actor, Action.MANAGE_PRICES, project)
    require(actor, Action.MANAGE_RETENTION, project)
    if currency not in {code for code, _label in CURRENCIES}:
        raise Refused(_("Unknown currency."))
    if language is not None and language not in {"", *(c for c, _n in settings.LANGUAGES)}:
        raise Refused(_("Unknown language."))
    days = {"retain_streams_days": retain_streams_days, "retain_events_days": retain_events_days}
    for value in days.values():
        if value is not None and not 1 <= value <= MAX_RETENTION_DAYS:
            raise Refused(
                _("A retention is from 1 to %(n)d days, or empty for the instance's.")
                % {"n": MAX_RETENTION_DAYS}
            )
    changed = {"currency": currency, **days}
    if language is not None:
        changed["language"] = language
    Project.objects.filter(pk=project.pk).update(**changed)
    for name, value in changed.items():
        setattr(project, name, value)
    return project


def stream_count(project):
    """What deleting `project` deletes with it, for the confirmation."""
    return Stream.objects.filter(project=project).count()


def delete(actor, project, now=None):
    """Deletes `project` (owners) and everything in it: its streams with their events, its
    tokens, share links, conversations, saved views, memberships and invitations. Refused
    while one of its streams is still running (its recorder would write into nothing).

    Not in the request: the project is marked (`deleting_at`), which takes it off every list,
    switcher and rule at once (streams/access/projects.py reads no project being deleted), and
    the periodic job deletes its streams in batches, then it (`delete_marked`). A personal
    project stops being its user's (they get a new one when they need it). Returns how many
    streams are to go."""
    require(actor, Action.DELETE_PROJECT, project)
    running = Stream.objects.filter(project=project, status__in=Stream.ACTIVE_STATUSES)
    if running.exists():
        raise Refused(
            _("Streams of this project are still running: cancel them or let them end first.")
        )
    n = stream_count(project)
    Project.objects.filter(pk=project.pk, deleting_at__isnull=True).update(
        deleting_at=now or dt.datetime.now(dt.UTC), personal_of=None
    )
    _forget(actor)
    return n


CLAIM_S = 60.0  # a process deleting a project holds it this long (another takes over after)
DELETE_BUDGET_S = 20.0  # of batches in one run of the job, well within the claim


def delete_marked(now=None, budget_s=None, batch=None):
    """The periodic job's work (streams/run/deletions.py): for each project being deleted that
    no other process holds, claims it (a conditional UPDATE), deletes its streams in batches,
    one short transaction each (the recorder's writer waits for one batch at most), newest
    first (a retry goes before its first attempt, so no batch's cascade reaches a stream of a
    later batch), for `budget_s` at most, then, once none is left, the project. Returns
    {project id: streams deleted in this run}."""
    clock = time.monotonic()
    batch = batch or STREAMS_PER_BATCH
    budget_s = DELETE_BUDGET_S if budget_s is None else budget_s
    done = {}
    for pk in Project.objects.filter(deleting_at__isnull=False).values_list("pk", flat=True):
        if done and time.monotonic() - clock > budget_s:
            break  # (the others at the next run: one batch a run at least)
        at = now or dt.datetime.now(dt.UTC)
        claimed = (
            Project.objects.filter(pk=pk, deleting_at__isnull=False)
            .filter(Q(deletion_claimed_until__isnull=True) | Q(deletion_claimed_until__lt=at))
            .update(deletion_claimed_until=at + dt.timedelta(seconds=CLAIM_S))
        )
        if not claimed:
            continue  # (another process has it)
        done[pk] = _delete_claimed(pk, clock, budget_s, batch)
    return done


def _delete_claimed(pk, clock, budget_s, batch):
    n = 0
    streams = Stream.objects.filter(project_id=pk).order_by("-pk").values_list("pk", flat=True)
    while True:
        with transaction.atomic():
            ids = list(streams[:batch])
            if not ids:
                # the last batch gone: the project, with what is left in it (its tokens,
                # links, conversations, members, its own audit entries); its deletion's entry
                # is the instance's and says how many streams went
                with audit.acting(audit.asked_by(pk, "deleting_at") or audit.current_actor()):
                    Project.objects.filter(pk=pk).delete()
                return n
            retention.delete_streams(ids, keep_aggregates=False)
            Project.objects.filter(pk=pk).update(deleted_streams=F("deleted_streams") + len(ids))
        n += len(ids)
        if time.monotonic() - clock > budget_s:
            # the rest at the next run (the claim lapses, so any process may take it)
            Project.objects.filter(pk=pk).update(deletion_claimed_until=None)
            return n


# ---- its members --------------------------------------------------------------------------------


MEMBERS_PAGE = 100  # on a members page; the next by a cursor (`members`)


def members(project, after=None):
    """A page of `project`'s memberships, owners first, then by username, with their users:
    (at most MEMBERS_PAGE of them, after the member whose user id is `after` if given; the
    cursor of the next page, None at the last; how many members there are). A cursor whose
    member left starts again at the first page (a keyset needs its row)."""
    rank = Case(*(When(role=role, then=-n) for role, n in projects.RANKS.items()))
    every = Membership.objects.filter(project=project).annotate(rank=rank)
    page = every
    if after is not None:
        mark = every.filter(user_id=after).values_list("rank", "user__username").first()
        if mark is not None:
            page = every.filter(Q(rank__gt=mark[0]) | Q(rank=mark[0], user__username__gt=mark[1]))
    found = list(page.select_related("user").order_by("rank", "user__username")[: MEMBERS_PAGE + 1])
    cursor = found[MEMBERS_PAGE - 1].user_id if len(found) > MEMBERS_PAGE else None
    return found[:MEMBERS_PAGE], cursor, every.count()


def _locked(project):
    """`project`'s row, locked for the transaction (the last-owner rule: see the docstring)."""
    locked = Project.objects.select_for_update().filter(pk=project.pk).first()
    if locked is None:
        raise NotFound(NO_PROJECT)
    return locked


def _owner_left(project):
    if not Membership.objects.filter(project=project, role=Role.OWNER).exists():
        raise Refused(LAST_OWNER)


def add(actor, project, user, role):
    """Adds the existing `user` to `project` in `role` (admins; an owner only by an owner)."""
    role = role_of_text(role)
    require(actor, Action.MANAGE_MEMBERS, project)
    require_owner_rights(actor, project, role)
    if not user.is_active:
        raise Refused(_("That user's account is inactive."))
    try:
        with transaction.atomic():
            membership = Membership.objects.create(project=project, user=user, role=role)
    except IntegrityError:
        raise Refused(_("That user is a member already.")) from None
    _forget(actor, user)
    return membership


def change_role(actor, project, user, role):
    """`user`'s role in `project` becomes `role` (admins; to or from owner only by an owner;
    the last owner stays one)."""
    role = role_of_text(role)
    require(actor, Action.MANAGE_MEMBERS, project)
    with transaction.atomic():
        _locked(project)
        membership = Membership.objects.filter(project=project, user=user).first()
        if membership is None:
            raise Refused(NO_MEMBER)
        require_owner_rights(actor, project, role, membership.role)
        Membership.objects.filter(pk=membership.pk).update(role=role)
        _owner_left(project)
    membership.role = role
    _forget(actor, user)
    return membership


def remove(actor, project, user):
    """Takes `user` out of `project` (admins; an owner only by an owner; never the last)."""
    require(actor, Action.MANAGE_MEMBERS, project)
    _leave(project, user, lambda membership: require_owner_rights(actor, project, membership.role))
    _forget(actor, user)


def leave(user, project):
    """`user` leaves `project` (any member; never its last owner)."""
    if projects.role_of(user, project) is None:
        raise NotFound(NO_PROJECT)
    _leave(project, user)
    _forget(user)


def _leave(project, user, check=None):
    with transaction.atomic():
        _locked(project)
        membership = Membership.objects.filter(project=project, user=user).first()
        if membership is None:
            raise Refused(NO_MEMBER)
        if check is not None:
            check(membership)
        membership.delete()
        _owner_left(project)
    if project.personal_of_id == user.pk:
        # a personal project left to others stays theirs; its maker gets a new one when needed
        Project.objects.filter(pk=project.pk).update(personal_of=None)
        user.__dict__.pop("_personal_project", None)


def user_named(text):
    """The active user whose username (or e-mail address, when one user has it) is `text`,
    or None."""
    User = get_user_model()
    text = (text or "").strip()
    if not text or len(text) > 254:
        return None
    user = User.objects.filter(**{User.USERNAME_FIELD: text}, is_active=True).first()
    if user is None and "@" in text:
        found = list(User.objects.filter(email__iexact=text, is_active=True)[:2])
        user = found[0] if len(found) == 1 else None
    return user


LISTED = 500  # projects on one person's list (staff see every project: bounded)


def listed(user):
    """(the projects `user` may work in with their role and number of members, by name, at
    most LISTED; how many more there are)."""
    found = list(
        projects.projects_for(user)
        .annotate(n_members=Count("memberships"))
        .order_by("name")[: LISTED + 1]
    )
    roles = projects.roles_of(user)
    for project in found:
        role = roles.get(project.pk)
        project.my_role = Role(role) if role else None  # (staff: None where not a member)
    more = 0
    if len(found) > LISTED:
        more = projects.projects_for(user).count() - LISTED
    return found[:LISTED], more
