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

import sys  # noqa: E402

from daphne.cli import CommandLineInterface  # noqa: E402

from streams.core import conf  # noqa: E402
from streams.run import runner, shutdown  # noqa: E402

# Daphne takes a WebSocket message of at most 1 MiB and drops a larger one with the connection,
# before any consumer sees it: the recording proxy's socket (`response.create`, up to the
# proxy's body limit like a POST) would lose a client silently instead of closing with its 4009.
# Messages (and frames) up to the limit and a little over reach the consumers, which bound what
# they read; only an accepted socket sends any, and every consumer accepts only a signed-in user
# or a token.
WEBSOCKET_MESSAGE_BYTES = conf.get().proxy_max_body_bytes + 64 * 1024

if __name__ == "__main__":
    # Rows of processes that died end `interrupted` while this server runs, not only when some
    # process next starts (see runner.sweep_when_served).
    runner.sweep_when_served()
    # SIGTERM/SIGINT let running streams end first (streams/run/shutdown.py)
    shutdown.install_for_daphne()
    for option in ("--websocket-max-message-size", "--websocket-max-frame-size"):
        if not any(a.startswith(option) for a in sys.argv):
            sys.argv[1:1] = [option, str(WEBSOCKET_MESSAGE_BYTES)]
    CommandLineInterface.entrypoint()
