"""Project roles from the identity provider's groups, applied at every sign-in.

STREAMSCOPE_OIDC_GROUPS maps a group to a role in a project:

    eng-admins=payments:admin,eng=payments:member,pm=payments:viewer

A user signing in gets, in each project the mapping names, the highest role any of their groups
gives there. Those memberships are the provider's (`Membership.origin` "idp"): each sign-in adds,
changes and removes them to match the groups of that moment. A membership given by hand (an
invitation, an admin, a command) is left alone, whatever the groups say: the provider manages only
what it gave. A project the mapping names that does not exist is skipped (and logged): projects
are made by people, with an owner. The provider does not take away a project's last owner.

`parse` reads the mapping, `wanted` the roles a user's groups give, `plan` the changes from what
the user has to that; `apply` carries them out in the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from streams.access import projects
from streams.models import Membership, Project

log = logging.getLogger(__name__)

Role = Membership.Role
# What one group claim may bring at most: a provider that sends thousands is answered with the
# first ones, not with unbounded work per sign-in.
MAX_GROUPS = 1000
GROUP_MAX_CHARS = 255


@dataclass(frozen=True)
class Grant:
    group: str
    project: str  # the project's slug
    role: str


@dataclass(frozen=True)
class Change:
    project: str
    role: str | None  # None: the membership ends
    was: str | None  # None: a new membership


def parse(text):
    """The grants of a mapping's text; ValueError naming the piece that is wrong."""
    grants = []
    for piece in (p.strip() for p in (text or "").split(",")):
        if not piece:
            continue
        group, eq, target = piece.rpartition("=")
        project, colon, role = target.rpartition(":")
        group, project, role = group.strip(), project.strip(), role.strip()
        if not eq or not colon or not group or not project:
            raise ValueError(f"{piece!r} is not group=project:role")
        if role not in Role.values:
            raise ValueError(f"{piece!r}: the role {role!r} is not one of {', '.join(Role.values)}")
        grants.append(Grant(group, project, role))
    return tuple(grants)


def groups_of(claims, claim):
    """The group names in `claims[claim]`: a list of strings (or one string), bounded; anything
    else is no groups."""
    value = claims.get(claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return frozenset()
    return frozenset(
        g for g in value[:MAX_GROUPS] if isinstance(g, str) and len(g) <= GROUP_MAX_CHARS
    )


def wanted(grants, groups):
    """{project: role}: the highest role each project's grants give to `groups`."""
    roles = {}
    for grant in grants:
        if grant.group in groups:
            held = roles.get(grant.project)
            if held is None or projects.RANKS[grant.role] > projects.RANKS[held]:
                roles[grant.project] = grant.role
    return roles


def plan(held, want):
    """The changes that make the provider's memberships `want` ({project: role}), from `held`
    ({project: (role, from_provider)}): memberships not from the provider are never changed."""
    changes = []
    for project, role in sorted(want.items()):
        current = held.get(project)
        if current is None:
            changes.append(Change(project, role, None))
        elif current[1] and current[0] != role:
            changes.append(Change(project, role, current[0]))
    for project, (role, from_provider) in sorted(held.items()):
        if from_provider and project not in want:
            changes.append(Change(project, None, role))
    return changes


def apply(user, groups, grants):
    """Makes `user`'s provider-given memberships what `groups` give under `grants`; the changes
    made."""
    want = wanted(grants, groups)
    with transaction.atomic():
        found = {p.slug: p for p in Project.objects.filter(slug__in=want)}
        for slug in sorted(set(want) - set(found)):
            log.warning("STREAMSCOPE_OIDC_GROUPS names the project %r, which does not exist", slug)
        want = {slug: role for slug, role in want.items() if slug in found}
        memberships = {
            m.project.slug: m
            for m in Membership.objects.select_for_update()
            .filter(user=user)
            .select_related("project")
        }
        held = {
            slug: (m.role, m.origin == Membership.Origin.IDP) for slug, m in memberships.items()
        }
        done = []
        for change in plan(held, want):
            membership = memberships.get(change.project)
            if change.was is None:
                Membership.objects.create(
                    project=found[change.project],
                    user=user,
                    role=change.role,
                    origin=Membership.Origin.IDP,
                )
            elif change.was == Role.OWNER and not _another_owner(membership):
                log.warning(
                    "the identity provider's groups would leave the project %r without an "
                    "owner: %s stays its owner",
                    change.project,
                    user.get_username(),
                )
                continue
            elif change.role is None:
                membership.delete()
            else:
                membership.role = change.role
                membership.save(update_fields=["role"])
            done.append(change)
    projects.forget(user)
    return done


def _another_owner(membership):
    return (
        Membership.objects.filter(project_id=membership.project_id, role=Role.OWNER)
        .exclude(pk=membership.pk)
        .exists()
    )
