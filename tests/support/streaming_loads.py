"""What a process loads while it streams, seen from inside it: ground truth that a busy machine
cannot skew (it counts loads, it times nothing), for tests/streams/run/test_warmup.py.

`watch(upstream_port)` installs an audit hook (`sys.addaudithook`: the interpreter's own events,
on every thread). The watch begins at the process's first connection to the upstream (its
first stream's request: no stream reads anything before it) and notes, from then on:
- `warm_up_pending`: what the warm-up had not loaded at that first connection
  (streams/core/warmup.py), by name;
- `imported`: every module imported (the interpreter's "import" event fires only for a module
  not yet in `sys.modules`: a cached import is free and unseen; a vocabulary built at first use
  comes with the import of its library, tiktoken);
- `compiled`: every regular expression `re` compiled (its cache missed), as (length, start).
`stop()` ends the watch and returns what it saw.

`python -m tests.support.streaming_loads OUT PORT ARG…` runs `manage.py ARG…` as a user runs it
(`python manage.py ARG…`), watched, and writes what it saw to OUT (JSON) when the command returns.
"""

import json
import re
import runpy
import sys

_seen = None  # what the watch saw; None before the first connection
_port = None
_watching = False


def _note_import(name):
    if name not in _seen["imported"]:
        _seen["imported"].append(name)


def _hook(event, args):
    global _seen
    if not _watching:
        return
    if event == "socket.connect":
        address = args[1]
        if _seen is None and isinstance(address, tuple) and address[1:2] == (_port,):
            warmup = sys.modules.get("streams.core.warmup")
            pending = warmup.pending() if warmup else ["(streams.core.warmup not imported)"]
            _seen = {"warm_up_pending": pending, "imported": [], "compiled": []}
    elif event == "import" and _seen is not None:
        _note_import(args[0])


def watch(upstream_port):
    """Start watching (once per process: an audit hook cannot be removed)."""
    global _port, _watching
    _port, _watching = upstream_port, True
    sys.addaudithook(_hook)
    compile_ = re._compiler.compile  # (what `re` calls when its cache misses)

    def compiling(pattern, flags):
        if _watching and _seen is not None:
            _seen["compiled"].append((len(pattern), str(pattern)[:60]))
        return compile_(pattern, flags)

    re._compiler.compile = compiling


def stop():
    """End the watch: what it saw (None: the process never connected to the upstream)."""
    global _watching
    _watching = False
    return _seen


if __name__ == "__main__":
    out, port, *args = sys.argv[1:]
    watch(int(port))
    sys.argv = ["manage.py", *args]
    try:
        runpy.run_path("manage.py", run_name="__main__")
    finally:
        with open(out, "w") as f:
            json.dump(stop(), f)
