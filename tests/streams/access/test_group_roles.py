"""Project roles from the identity provider's groups (streams/access/group_roles.py): the
mapping's grammar, the highest role a user's groups give, and applying it at a sign-in, where only
the provider's own memberships change and a project keeps its last owner."""

import pytest
from django.contrib.auth import get_user_model

from streams.access import group_roles
from streams.access.group_roles import Change, Grant
from streams.models import Membership, Project

IDP, HAND = Membership.Origin.IDP, Membership.Origin.HAND


def test_the_mapping_reads_as_written():
    assert group_roles.parse(" eng-admins=payments:admin, /team/eng=payments:member,,") == (
        Grant("eng-admins", "payments", "admin"),
        Grant("/team/eng", "payments", "member"),
    )
    assert group_roles.parse("") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("eng", "is not group=project:role"),
        ("eng=payments", "is not group=project:role"),
        ("=payments:admin", "is not group=project:role"),
        ("eng=:admin", "is not group=project:role"),
        ("eng=payments:boss", "the role 'boss' is not one of viewer, member, admin, owner"),
    ],
)
def test_a_wrong_mapping_says_which_piece(text, says):
    with pytest.raises(ValueError, match=says):
        group_roles.parse(text)


def test_the_highest_role_of_ones_groups_wins():
    grants = group_roles.parse("pm=pay:viewer,eng=pay:member,boss=pay:owner,pm=search:viewer")
    assert group_roles.wanted(grants, {"pm", "eng"}) == {"pay": "member", "search": "viewer"}
    assert group_roles.wanted(grants, {"boss", "pm"}) == {"pay": "owner", "search": "viewer"}
    assert group_roles.wanted(grants, {"other"}) == {}


def test_the_groups_claim_is_read_bounded():
    assert group_roles.groups_of({"groups": ["a", "b", 3, "x" * 256]}, "groups") == {"a", "b"}
    assert group_roles.groups_of({"groups": "a"}, "groups") == {"a"}
    assert group_roles.groups_of({"groups": {"a": 1}}, "groups") == frozenset()
    many = [f"g{i}" for i in range(5000)]
    assert len(group_roles.groups_of({"roles": many}, "roles")) == group_roles.MAX_GROUPS


def test_the_plan_changes_only_the_providers_memberships():
    held = {
        "a": ("viewer", True),
        "b": ("admin", True),
        "c": ("owner", False),
        "d": ("member", False),
    }
    want = {"a": "member", "c": "viewer", "e": "viewer"}
    assert group_roles.plan(held, want) == [
        Change("a", "member", "viewer"),
        Change("e", "viewer", None),
        Change("b", None, "admin"),
    ]


@pytest.mark.django_db
def test_applying_adds_changes_and_removes_the_providers_memberships_only():
    user = get_user_model().objects.create_user("ann")
    pay, search, other = (
        Project.objects.create(name=n, slug=n) for n in ("pay", "search", "other")
    )
    Membership.objects.create(project=other, user=user, role="viewer", origin=HAND)
    grants = group_roles.parse("eng=pay:member,eng=other:admin,pm=search:viewer,x=gone:admin")

    group_roles.apply(user, {"eng", "pm", "x"}, grants)
    got = {m.project.slug: (m.role, m.origin) for m in user.memberships.select_related("project")}
    # the project "gone" does not exist: skipped; "other" was given by hand: left as it was
    assert got == {"pay": ("member", IDP), "search": ("viewer", IDP), "other": ("viewer", HAND)}

    group_roles.apply(user, {"eng"}, grants)
    got = {m.project.slug: (m.role, m.origin) for m in user.memberships.select_related("project")}
    assert got == {"pay": ("member", IDP), "other": ("viewer", HAND)}


@pytest.mark.django_db
def test_the_provider_does_not_take_away_a_projects_last_owner():
    ann, bob = (get_user_model().objects.create_user(n) for n in ("ann", "bob"))
    pay = Project.objects.create(name="pay", slug="pay")
    grants = group_roles.parse("boss=pay:owner")
    group_roles.apply(ann, {"boss"}, grants)
    assert group_roles.apply(ann, set(), grants) == []  # the last owner stays
    assert Membership.objects.get(project=pay, user=ann).role == "owner"

    group_roles.apply(bob, {"boss"}, grants)
    assert [c.role for c in group_roles.apply(ann, set(), grants)] == [None]
    assert list(pay.memberships.values_list("user__username", flat=True)) == ["bob"]
