"""`python -m dashboard.server [daphne options] dashboard.asgi:application`: Daphne's own
command line, on the event loop and process tuning of `streams.process` (Daphne creates its
loop when its server module is imported, so the plain `daphne` command cannot be told
afterwards)."""

import os

from streams import process

process.install_event_loop()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django  # noqa: E402

django.setup()
process.tune()

from daphne.cli import CommandLineInterface  # noqa: E402

if __name__ == "__main__":
    CommandLineInterface.entrypoint()
