"""The rules of a project's members (streams/access/members.py): who may make, rename and
delete a project, add, re-role and remove members; the role ladder (only an owner makes,
unmakes or removes an owner); a project always has an owner; a non-member is told nothing."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model

from streams.access import members, projects
from streams.access.members import Forbidden, NotFound, Refused
from streams.models import Finding, Membership, Project, Stream
from streams.store import aggregates

pytestmark = pytest.mark.django_db


def _user(name, **kwargs):
    return get_user_model().objects.create_user(name, **kwargs)


@pytest.fixture
def team():
    """A project with one of each role, a stranger (a member of another project) and staff."""
    people = {n: _user(n) for n in ("owner", "admin", "member", "viewer", "stranger")}
    people["staff"] = _user("staff", is_staff=True)
    project = members.create(people["owner"], "Search team")
    for role in ("admin", "member", "viewer"):
        Membership.objects.create(project=project, user=people[role], role=role)
    members.create(people["stranger"], "Elsewhere")
    return project, people


def role(project, user):
    return (
        Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    )


def test_it_makes_a_project_with_its_maker_as_owner():
    alice = _user("alice")
    project = members.create(alice, "  Search   team ")
    assert (project.name, project.slug) == ("Search team", "search-team")
    assert role(project, alice) == "owner"
    assert projects.role_of(alice, project) == "owner"  # (the cache was forgotten)
    second = members.create(_user("bob"), "search-team!")
    assert second.slug == "search-team-2"
    assert members.create(alice, "All").slug == "all-2"  # (the switcher's "all": staff's every)


def test_it_refuses_a_taken_name_an_empty_one_and_a_long_one():
    alice = _user("alice")
    members.create(alice, "Search")
    for name, word in (("search", "already"), ("   ", "needs a name"), ("x" * 101, "at most")):
        with pytest.raises(Refused) as exc:
            members.create(alice, name)
        assert word in str(exc.value.message)
    assert Project.objects.filter(personal_of=None).count() == 1


def test_only_owners_rename_and_the_slug_stays(team):
    project, p = team
    for who in ("admin", "member", "viewer"):
        with pytest.raises(Forbidden):
            members.rename(p[who], project, "Renamed")
    with pytest.raises(NotFound):
        members.rename(p["stranger"], project, "Renamed")
    members.rename(p["owner"], project, "Renamed")
    project.refresh_from_db()
    assert (project.name, project.slug) == ("Renamed", "search-team")
    with pytest.raises(Refused):
        members.rename(p["owner"], project, "elsewhere")  # another project's name


def test_only_owners_delete_and_its_streams_go_with_it(team):
    project, p = team
    Stream.objects.create(user=p["member"], project=project, status="completed")
    Stream.objects.create(user=p["member"], project=project, status="completed")
    kept = Stream.objects.create(user=p["member"], status="completed")  # the personal project's
    for who in ("admin", "member", "viewer"):
        with pytest.raises(Forbidden):
            members.delete(p[who], project)
    with pytest.raises(NotFound):
        members.delete(p["stranger"], project)
    assert members.stream_count(project) == 2
    assert members.delete(p["owner"], project) == 2
    # marked: no one's from now on, on no list; its streams go in the background
    for who in ("owner", "admin", "viewer"):
        projects.forget(p[who])
        assert projects.role_of(p[who], project.pk) is None, who
        assert projects.by_slug(p[who], project.slug) is None, who
        assert project not in projects.projects_for(p[who]), who
    assert Project.objects.filter(pk=project.pk).exists()
    assert members.delete_marked() == {project.pk: 2}
    assert not Project.objects.filter(pk=project.pk).exists()
    assert list(Stream.objects.values_list("pk", flat=True)) == [kept.pk]
    assert members.delete_marked() == {}


def test_it_refuses_to_delete_a_project_with_a_running_stream(team):
    project, p = team
    Stream.objects.create(user=p["member"], project=project, status="streaming")
    with pytest.raises(Refused) as exc:
        members.delete(p["owner"], project)
    assert exc.value.status == 409 and Project.objects.filter(pk=project.pk).exists()


def test_admins_add_members_and_only_owners_add_owners(team):
    project, p = team
    newcomer = _user("newcomer")
    for who in ("member", "viewer"):
        with pytest.raises(Forbidden):
            members.add(p[who], project, newcomer, "viewer")
    with pytest.raises(NotFound):
        members.add(p["stranger"], project, newcomer, "viewer")
    with pytest.raises(Forbidden):
        members.add(p["admin"], project, newcomer, "owner")
    members.add(p["admin"], project, newcomer, "admin")  # an admin's own rank: allowed
    assert role(project, newcomer) == "admin"
    with pytest.raises(Refused):
        members.add(p["admin"], project, newcomer, "viewer")  # a member already
    with pytest.raises(Refused):
        members.add(p["admin"], project, _user("ghost", is_active=False), "viewer")
    with pytest.raises(Refused):
        members.add(p["admin"], project, _user("x"), "superuser")
    members.add(p["owner"], project, _user("co-owner"), "owner")
    members.add(p["staff"], project, _user("by-staff"), "owner")  # staff may everything


def test_the_role_ladder(team):
    project, p = team
    members.change_role(p["admin"], project, p["viewer"], "member")
    assert role(project, p["viewer"]) == "member"
    with pytest.raises(Forbidden):
        members.change_role(p["admin"], project, p["viewer"], "owner")  # making an owner
    with pytest.raises(Forbidden):
        members.change_role(p["admin"], project, p["owner"], "admin")  # unmaking one
    with pytest.raises(Forbidden):
        members.change_role(p["member"], project, p["viewer"], "viewer")
    with pytest.raises(NotFound):
        members.change_role(p["stranger"], project, p["viewer"], "viewer")
    with pytest.raises(Refused):
        members.change_role(p["admin"], project, p["stranger"], "viewer")  # not a member
    members.change_role(p["owner"], project, p["admin"], "owner")
    members.change_role(p["admin"], project, p["owner"], "viewer")  # an owner now: may
    assert (role(project, p["admin"]), role(project, p["owner"])) == ("owner", "viewer")
    assert not projects.may(p["owner"], "rename_project", project)  # (forgotten: no stale role)


def test_the_last_owner_cannot_be_demoted_removed_or_leave(team):
    project, p = team
    owner = p["owner"]
    for attempt in (
        lambda: members.change_role(owner, project, owner, "admin"),
        lambda: members.remove(owner, project, owner),
        lambda: members.leave(owner, project),
        lambda: members.change_role(p["staff"], project, owner, "admin"),
        lambda: members.remove(p["staff"], project, owner),
    ):
        with pytest.raises(Refused) as exc:
            attempt()
        assert type(exc.value) is Refused and "always has an owner" in str(exc.value.message)
        assert role(project, owner) == "owner"
    members.change_role(owner, project, p["admin"], "owner")
    members.leave(owner, project)  # another owner now: allowed
    assert role(project, owner) is None and projects.role_of(owner, project) is None


def test_admins_remove_members_but_not_owners(team):
    project, p = team
    with pytest.raises(Forbidden):
        members.remove(p["member"], project, p["viewer"])
    with pytest.raises(Forbidden):
        members.remove(p["admin"], project, p["owner"])
    members.remove(p["admin"], project, p["viewer"])
    assert role(project, p["viewer"]) is None
    with pytest.raises(Refused):
        members.remove(p["admin"], project, p["viewer"])  # not a member any more


def test_anyone_leaves_and_a_non_member_is_told_nothing(team):
    project, p = team
    members.leave(p["viewer"], project)
    assert role(project, p["viewer"]) is None
    for who in ("viewer", "stranger", "staff"):  # staff may do all, but is no member to leave
        with pytest.raises(NotFound):
            members.leave(p[who], project)


def test_a_personal_project_left_to_others_is_no_longer_its_makers():
    alice, bob = _user("alice"), _user("bob")
    mine = Project.personal(alice)
    members.add(alice, mine, bob, "owner")
    members.leave(alice, mine)
    mine.refresh_from_db()
    assert mine.personal_of is None
    projects.forget(alice)
    fresh = Project.personal(alice)
    assert fresh.pk != mine.pk and role(fresh, alice) == "owner"


def test_a_deleted_projects_streams_leave_its_analytics_in_batches(team, monkeypatch):
    """Deleting a project subtracts its streams from the rollups (a rebuild from the rows left
    gives the same), a batch per transaction, retries before their first attempts."""
    project, p = team
    monkeypatch.setattr(members, "STREAMS_PER_BATCH", 3)
    other = Project.personal(p["member"])
    t0 = dt.datetime(2026, 11, 1, 9, tzinfo=dt.UTC)
    for k in range(8):
        for where in (project, other):
            first = Stream.objects.create(
                user=p["member"], project=where, status=("completed", "failed")[k % 2],
                requested_model=f"m-{k % 3}", resolved_model=f"m-{k % 3}", ttft_ms=100 + k,
                duration_ms=900 + k, output_tokens=10 * k, created_at=t0 + dt.timedelta(hours=k),
            )  # fmt: skip
            Finding.objects.create(stream=first, code="stall", severity="warning")
            if k % 3 == 0:  # a retry of it, in the same project
                Stream.objects.create(
                    user=p["member"], project=where, status="completed", first_attempt=first,
                    requested_model="m-r", resolved_model="m-r", ttft_ms=50,
                    created_at=t0 + dt.timedelta(hours=k, minutes=5),
                )  # fmt: skip
    aggregates.rebuild()
    before = aggregates.stored()
    assert members.delete(p["owner"], project) == 11
    assert members.delete_marked() == {project.pk: 11}
    after = aggregates.stored()
    assert after != before
    aggregates.rebuild()
    assert aggregates.stored() == after
    assert Stream.objects.filter(project=other).count() == 11


def test_the_members_list_puts_owners_first_and_is_bounded(team, monkeypatch):
    project, p = team
    listed, after, n = members.members(project)
    assert [(m.user.username, m.role) for m in listed] == [
        ("owner", "owner"), ("admin", "admin"), ("member", "member"), ("viewer", "viewer"),
    ]  # fmt: skip
    assert (after, n) == (None, 4)
    monkeypatch.setattr(members, "MEMBERS_PAGE", 3)
    listed, after, n = members.members(project)
    assert len(listed) == 3 and after == p["member"].pk and n == 4
    rest, after, n = members.members(project, after=after)
    assert [m.user.username for m in rest] == ["viewer"] and after is None


def test_the_members_list_pages_through_every_member_once(team, monkeypatch):
    """Cursor pages (the list was cut at 1,000 before): every member once, in order, across
    pages whose edges fall inside a role and between roles."""
    project, p = team
    make = get_user_model().objects.create_user
    Membership.objects.bulk_create(
        Membership(project=project, user=make(f"u{n:03d}"), role=("admin", "viewer")[n % 2])
        for n in range(23)
    )
    monkeypatch.setattr(members, "MEMBERS_PAGE", 5)
    seen, after, pages = [], None, 0
    while True:
        page, after, n = members.members(project, after=after)
        seen += [(m.role, m.user.username) for m in page]
        pages += 1
        if after is None:
            break
    assert n == 27 and pages == 6
    rank = {"owner": 0, "admin": 1, "member": 2, "viewer": 3}
    assert seen == sorted(seen, key=lambda pair: (rank[pair[0]], pair[1]))
    assert len(seen) == len(set(seen)) == 27
