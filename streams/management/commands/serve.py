"""One command from a fresh checkout to a running dashboard."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from streams.run import runner, shutdown


class Command(BaseCommand):
    help = (
        "Apply migrations, make sure an admin login exists (printed), mark streams of dead "
        "processes interrupted (now and periodically), then serve HTTP and WebSockets (Daphne)."
    )

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args, **opts):
        call_command("migrate", interactive=False, verbosity=0)
        self.ensure_admin()
        swept = runner.sweep_orphans()
        if swept:
            self.stdout.write(f"{swept} stream(s) left running by a dead process: interrupted")
        upstream = runner.upstream_base_url()
        self.stdout.write(f"upstream: {upstream}")
        self.stdout.write(f"dashboard: http://{opts['addrport']}/")
        runner.sweep_when_served()  # and every SWEEP_INTERVAL_S from now on
        shutdown.install_for_daphne()  # SIGTERM/SIGINT let running streams end first
        call_command("runserver", opts["addrport"], use_reloader=False)

    def ensure_admin(self):
        User = get_user_model()
        username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "admin")
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        email = os.environ.get("DJANGO_SUPERUSER_EMAIL", "")
        user = User.objects.filter(username=username).first()
        if user is None:
            shown = password or secrets.token_urlsafe(12)
            User.objects.create_superuser(username, email, shown)
            self.stdout.write(f"admin login created: {username} / {shown}")
        elif password:
            if not user.check_password(password):
                user.set_password(password)
                user.save(update_fields=["password"])
            self.stdout.write(f"admin login: {username} (password from DJANGO_SUPERUSER_PASSWORD)")
        else:
            self.stdout.write(
                f"admin login: {username} (existing; reset with "
                f"`python manage.py changepassword {username}`)"
            )
