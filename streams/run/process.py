"""Process-wide tuning, in one visible place: the event loop, the garbage collector and the
interpreter's switch interval. Every entry point calls it at start-up — `manage.py` (serve,
stream_worker, record, bench, …), `python -m dashboard.server` (Daphne's command line) and the
test suite — and nothing else changes these for the whole process.

The event loop: uvloop (libuv, in C) unless STREAMSCOPE_EVENT_LOOP=asyncio says otherwise (or
uvloop is not installed, as on Windows). At normal pacing every upstream event is its own TCP
segment and every relayed batch its own WebSocket frame, so much of the server's time per event
is the loop's own: a wake-up, a recv and a callback per chunk, a write per frame (README,
"Benchmarks": the stdlib loop against uvloop, same run). `install_event_loop()` must run before
any loop exists: Daphne makes its loop when `daphne.server` is imported, which its app config
does at `django.setup()`.

`tune()` runs once Django is set up:
- `gc.freeze()`: everything allocated so far (Django, drivers, modules) lives as long as the
  process; out of the collector's sight, a full collection no longer pauses the loop just as
  many concurrent streams' first tokens arrive (every receipt stamp in such a pause was late).
- `sys.setswitchinterval(0.0005)`: the recorder's writer thread needs the GIL for a moment per
  statement; with the default 5 ms a busy event loop kept it waiting at every hand-over, and
  relayed events fell far behind (docs/performance.md, "Process").
- sqlite3 binds None, bool and bytes through adapters that return them as they are: without
  one, sqlite3 looked each such parameter up twice as an attribute that is never there
  (`__adapt__`, `__conform__`), ~150 ns a parameter, and an event's row has several
  (docs/performance.md, "Process"). The values bound are the same.
"""

import asyncio
import gc
import os
import sqlite3
import sys

CHOICES = ("uvloop", "asyncio")
SWITCH_INTERVAL_S = 0.0005


def install_event_loop():
    """Make new event loops uvloop's; return the name of the loop in use."""
    choice = os.environ.get("STREAMSCOPE_EVENT_LOOP", "uvloop").strip().lower() or "uvloop"
    if choice not in CHOICES:
        raise SystemExit(f"STREAMSCOPE_EVENT_LOOP: {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def tune():
    """Freeze what start-up allocated, shorten the switch interval and give sqlite3 its
    adapters (see the module's docstring). Idempotent; call after `django.setup()`."""
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    for kind, as_itself in ((type(None), _none), (bool, int), (bytes, _same)):
        sqlite3.register_adapter(kind, as_itself)


def _none(value):
    return None


def _same(value):
    return value
