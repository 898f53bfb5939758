"""Commands that stop cleanly: Ctrl-C (SIGINT), SIGTERM, or a reader that went away (`| head`).

A command stopped this way tidies up what it owns (`record` marks its unfinished streams
`cancelled`, so no row is left "streaming · live" for good), writes one line on stderr and exits
with the shell's code for the cause: 130 (SIGINT), 143 (SIGTERM), 141 (SIGPIPE). No traceback:
being stopped is not a bug.
"""

import contextlib
import os
import signal
import sys

SIGINT_EXIT, SIGTERM_EXIT, SIGPIPE_EXIT = 130, 143, 141


class Stopped(Exception):
    """The command was asked to stop (`code`: its exit status)."""

    def __init__(self, code, reason):
        super().__init__(reason)
        self.code, self.reason = code, reason


INTERRUPTED = (SIGINT_EXIT, "interrupted")
TERMINATED = (SIGTERM_EXIT, "terminated")
BROKEN_PIPE = (SIGPIPE_EXIT, "output closed (broken pipe)")
# The signals a command handles itself, and what each one means.
SIGNALS = ((signal.SIGINT, INTERRUPTED), (signal.SIGTERM, TERMINATED))


def _terminate(signum, frame):
    raise Stopped(*TERMINATED)


def silence_stdout():
    """After a broken pipe: stdout goes to /dev/null, so that nothing written later (and not
    the interpreter's last flush at exit) fails again with another traceback."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


@contextlib.contextmanager
def stoppable(command, name, cleanup=None):
    """Run a command's work: when it is stopped (SIGINT, SIGTERM, a broken pipe on stdout,
    or `Stopped` raised inside), call `cleanup()` (its return value, if a string, ends the
    message), write one line on `command.stderr` and exit with the cause's status."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except Stopped as exc:
        stop = exc
    except KeyboardInterrupt:
        stop = Stopped(*INTERRUPTED)
    except BrokenPipeError:
        stop = Stopped(*BROKEN_PIPE)
    else:
        return
    finally:
        signal.signal(signal.SIGTERM, previous)
    if stop.code == SIGPIPE_EXIT:
        silence_stdout()
    # Tidying up must not be cut short by a second Ctrl-C.
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig, _ in SIGNALS}
    try:
        note = cleanup() if cleanup is not None else None
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    message = f"{name}: {stop.reason}" + (f"; {note}" if note else "")
    with contextlib.suppress(OSError, ValueError):
        command.stderr.write(message)
        command.stderr.flush()
    sys.exit(stop.code)
