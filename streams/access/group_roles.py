"""Project roles from the identity provider's groups, applied at every sign-in.

STREAMSCOPE_OIDC_GROUPS maps a group to a role in a project:

    eng-admins=payments:admin,eng=payments:member,pm=payments:viewer

A user signing in gets, in each project the mapping names, the highest role any of their groups
gives there. Those memberships are the provider's (`source` "idp"): each sign-in adds, changes and
removes them to match the groups of that moment. A membership given by hand (an invitation, an
admin, a command) is left alone, whatever the groups say: the provider manages only what it gave.

`parse` reads the mapping, `wanted` the roles a user's groups give, `plan` the changes from what
the user has to that; `apply` (database) carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass

# lowest first: a user in two groups gets the higher role
ROLES = ("viewer", "member", "admin", "owner")
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
        if role not in ROLES:
            raise ValueError(f"{piece!r}: the role {role!r} is not one of {', '.join(ROLES)}")
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
            if held is None or ROLES.index(grant.role) > ROLES.index(held):
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
