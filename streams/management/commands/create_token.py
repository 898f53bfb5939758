"""Issue an API token for a user; only its SHA-256 digest is stored, so it is shown once."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from streams.models import ApiToken


class Command(BaseCommand):
    help = (
        "Print a new bearer token for USER (send it as 'Authorization: Bearer <token>'). "
        "Revoke it in the admin (API tokens)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label, to tell tokens apart in admin")

    def handle(self, *args, **opts):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: opts["username"]})
        except User.DoesNotExist as exc:
            raise CommandError(f"no user {opts['username']!r}") from exc
        if not user.is_active:
            raise CommandError(f"user {opts['username']!r} is inactive")
        token = ApiToken.issue(user, name=opts["name"])  # (the field bounds it)
        self.stdout.write(token)
