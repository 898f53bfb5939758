"""`python -m dashboard.server [daphne options] dashboard.asgi:application`: Daphne's own
command line, on the event loop `dashboard.eventloop` picks (Daphne creates its loop when its
server module is imported, so the plain `daphne` command cannot be told afterwards)."""

from dashboard import eventloop

eventloop.install()

from daphne.cli import CommandLineInterface  # noqa: E402

if __name__ == "__main__":
    CommandLineInterface.entrypoint()
