"""This process's life, as every stage sees it: who it is, whether it is stopping, and whether
another process still lives.

    RUNNER_ID       # on the rows this process runs (host:pid:nonce); a dead one's are swept
    stopping        # set once a stop began (streams/run/shutdown.py): nothing new starts, and
                    # what the stop cuts short ends `interrupted` (SHUTDOWN_CODE)
    pid_alive(pid)  # whether a process of this host exists
"""

import os
import socket
import uuid

RUNNER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

stopping = False
SHUTDOWN_CODE = "shutdown"
SHUTDOWN_REASON = "the server stopped before the stream ended; what arrived is kept"


def pid_alive(pid):
    """Whether a process `pid` exists on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
