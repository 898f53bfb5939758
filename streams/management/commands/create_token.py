"""Issue an API token for a user in a project; only its SHA-256 digest is stored, so it is shown
once."""

import datetime as dt

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from streams.access import projects
from streams.models import ApiToken, Project


class Command(BaseCommand):
    help = (
        "Print a new bearer token for USER (send it as 'Authorization: Bearer <token>'), in "
        "PROJECT (by default their personal project). Revoke it on the project's token page "
        "or in the admin (API tokens)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label, to tell tokens apart")
        parser.add_argument(
            "--project", default="", help="the project's name or slug (USER must be a member)"
        )
        parser.add_argument(
            "--scope",
            action="append",
            choices=ApiToken.Scope.values,
            help="what the token may do (repeat for several; default: every scope)",
        )
        parser.add_argument(
            "--expires", type=int, metavar="DAYS", help="expire after DAYS days (default: never)"
        )

    def handle(self, *args, **opts):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: opts["username"]})
        except User.DoesNotExist as exc:
            raise CommandError(f"no user {opts['username']!r}") from exc
        if not user.is_active:
            raise CommandError(f"user {opts['username']!r} is inactive")
        project = None
        if opts["project"]:
            project = (
                Project.objects.filter(name=opts["project"]).first()
                or Project.objects.filter(slug=opts["project"]).first()
            )
            if project is None:
                raise CommandError(f"no project {opts['project']!r}")
            if not projects.may(user, projects.Action.OWN_TOKEN, project):
                raise CommandError(
                    f"{opts['username']!r} may not have tokens in {project.name!r} "
                    f"(role: {projects.role_of(user, project) or 'none'})"
                )
        fields = {"scopes": sorted(set(opts["scope"] or ApiToken.Scope.values))}
        if opts["expires"] is not None:
            if opts["expires"] < 1:
                raise CommandError("--expires takes a number of days, at least 1")
            fields["expires_at"] = dt.datetime.now(dt.UTC) + dt.timedelta(days=opts["expires"])
        token = ApiToken.issue(user, name=opts["name"], project=project, **fields)  # (bounded)
        self.stdout.write(token)
