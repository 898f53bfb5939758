"""`manage.py project …` (streams/management/commands/project.py): create, add-member,
remove-member, list, with clear errors for unknown users and projects and the last-owner rule."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from streams.models import Membership, Project

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("project", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def users():
    make = get_user_model().objects.create_user
    return make("alice"), make("bob")


def roles(project_name):
    return dict(
        Membership.objects.filter(project__name=project_name).values_list("user__username", "role")
    )


def test_create_add_change_remove_and_list(users):
    assert "created search-team (Search team), owner alice" in run(
        "create", "Search team", "--owner", "alice"
    )
    assert roles("Search team") == {"alice": "owner"}
    assert "added bob to search-team as viewer" in run(
        "add-member", "Search team", "bob", "--role", "viewer"
    )
    assert "bob is now admin" in run("add-member", "search-team", "bob", "--role", "admin")
    assert roles("Search team") == {"alice": "owner", "bob": "admin"}
    listing = run("list").splitlines()
    assert listing[0] == "slug\tname\tmembers\towners"
    assert "search-team\tSearch team\t2\t1" in listing
    assert "removed bob from search-team" in run("remove-member", "search-team", "bob")
    assert roles("Search team") == {"alice": "owner"}


@pytest.mark.parametrize(
    "args, said",
    [
        (("create", "X", "--owner", "nobody"), "no user 'nobody'"),
        (("add-member", "no-such", "bob", "--role", "viewer"), "no project 'no-such'"),
        (("add-member", "team", "nobody", "--role", "viewer"), "no user 'nobody'"),
        (("remove-member", "team", "bob"), "not a member"),
        (("remove-member", "team", "alice"), "always has an owner"),
        (("add-member", "team", "alice", "--role", "admin"), "always has an owner"),
        (("create", "TEAM", "--owner", "bob"), "of that name already"),
    ],
)
def test_errors_are_clear(users, args, said):
    run("create", "team", "--owner", "alice")
    with pytest.raises(CommandError) as exc:
        run(*args)
    assert said in str(exc.value)
    assert roles("team") == {"alice": "owner"}  # nothing changed


def test_an_unknown_role_and_a_missing_owner_are_argparse_errors(users):
    run("create", "team", "--owner", "alice")
    with pytest.raises(CommandError, match="invalid choice"):
        run("add-member", "team", "bob", "--role", "superuser")
    with pytest.raises(CommandError, match="--owner"):
        run("create", "other")
    assert not Project.objects.filter(name="other").exists()


def test_a_project_being_deleted_is_neither_listed_nor_found(db):
    from streams.access import members

    owner = get_user_model().objects.create_user("leaver")
    project = members.create(owner, "Going away")
    members.delete(owner, project)
    out = StringIO()
    call_command("project", "list", stdout=out)
    assert "going-away" not in out.getvalue()
    with pytest.raises(CommandError, match="no project"):
        call_command("project", "add-member", "going-away", "leaver", "--role", "viewer")
