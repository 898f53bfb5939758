"""Projects and their members from the command line, for administrators and scripts:

    manage.py project create NAME --owner USER
    manage.py project add-member PROJECT USER --role viewer|member|admin|owner
    manage.py project remove-member PROJECT USER
    manage.py project list

PROJECT is a project's name or slug. Whoever runs manage.py acts as the instance's
administrator (`members.INSTANCE`); the project's own rules still hold (a project always has
an owner). add-member on a member changes their role.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Q

from streams.access import members
from streams.access.projects import Role
from streams.models import Membership, Project


class Command(BaseCommand):
    help = "Make projects and manage their members: create, add-member, remove-member, list."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = sub.add_parser("create", help="make a project, USER its owner")
        create.add_argument("name")
        create.add_argument("--owner", required=True, help="the owner's username")
        add = sub.add_parser("add-member", help="add USER in a role (a member: change the role)")
        add.add_argument("project", help="the project's name or slug")
        add.add_argument("user")
        add.add_argument("--role", required=True, choices=[r.value for r in Role])
        remove = sub.add_parser("remove-member", help="take USER out of the project")
        remove.add_argument("project", help="the project's name or slug")
        remove.add_argument("user")
        sub.add_parser("list", help="every project: slug, name, members, owners")

    def handle(self, *args, **opts):
        action = opts["action"].replace("-", "_")
        try:
            getattr(self, action)(opts)
        except members.Refused as exc:
            raise CommandError(str(exc.message)) from exc

    def create(self, opts):
        owner = _user(opts["owner"])
        project = members.create(owner, opts["name"])
        self.stdout.write(f"created {project.slug} ({project.name}), owner {owner}")

    def add_member(self, opts):
        project, user = _project(opts["project"]), _user(opts["user"])
        role = opts["role"]
        if Membership.objects.filter(project=project, user=user).exists():
            members.change_role(members.INSTANCE, project, user, role)
            self.stdout.write(f"{user} is now {role} in {project.slug}")
        else:
            members.add(members.INSTANCE, project, user, role)
            self.stdout.write(f"added {user} to {project.slug} as {role}")

    def remove_member(self, opts):
        project, user = _project(opts["project"]), _user(opts["user"])
        members.remove(members.INSTANCE, project, user)
        self.stdout.write(f"removed {user} from {project.slug}")

    def list(self, opts):
        found = (
            Project.objects.filter(deleting_at__isnull=True)
            .annotate(
                n_members=Count("memberships"),
                n_owners=Count("memberships", filter=Q(memberships__role=Role.OWNER)),
            )
            .order_by("name")
        )
        self.stdout.write("slug\tname\tmembers\towners")
        for p in found.iterator():
            self.stdout.write(f"{p.slug}\t{p.name}\t{p.n_members}\t{p.n_owners}")


def _user(name):
    User = get_user_model()
    user = User.objects.filter(**{User.USERNAME_FIELD: name}).first()
    if user is None:
        raise CommandError(f"no user {name!r}")
    if not user.is_active:
        raise CommandError(f"user {name!r} is inactive")
    return user


def _project(text):
    live = Project.objects.filter(deleting_at__isnull=True)  # (one being deleted: no one's)
    project = live.filter(slug=text).first() or live.filter(name=text).first()
    if project is None:
        raise CommandError(f"no project {text!r} (give its name or slug; `project list`)")
    return project
