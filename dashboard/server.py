"""`python -m dashboard.server [daphne options] dashboard.asgi:application`: Daphne's own
command line, on the event loop and process tuning of `streams.run.process` (Daphne creates its
loop when its server module is imported, so the plain `daphne` command cannot be told
afterwards); and the periodic sweep for streams of dead processes, which the plain
`daphne` command would not run."""

import os

from streams.run import process

process.install_event_loop()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

import django  # noqa: E402

django.setup()
process.tune()

from daphne.cli import CommandLineInterface  # noqa: E402

from streams.run import runner, shutdown  # noqa: E402

if __name__ == "__main__":
    # Rows of processes that died end `interrupted` while this server runs, not only when some
    # process next starts (see runner.sweep_when_served).
    runner.sweep_when_served()
    # SIGTERM/SIGINT let running streams end first (streams/run/shutdown.py)
    shutdown.install_for_daphne()
    CommandLineInterface.entrypoint()
