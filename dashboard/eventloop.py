"""The event loop every Streamscope process runs on: uvloop (libuv, in C) unless
STREAMSCOPE_EVENT_LOOP=asyncio says otherwise (or uvloop is not installed, as on Windows).

At normal pacing every upstream event is its own TCP segment and every relayed batch its own
WebSocket frame, so much of the server's time per event is the loop's own: a wake-up, a recv
and a callback per chunk, a write per frame. `bench relay` at 100 paced streams on a 2-core VM
(README, "Benchmarks"): the stdlib loop against uvloop, same run.

`install()` must run before any loop exists. Daphne makes its loop when `daphne.server` is
imported, which its app config does at `django.setup()`: manage.py calls `install()` first
thing, and `python -m dashboard.server` is Daphne's own command line after it.
"""

import asyncio
import os

CHOICES = ("uvloop", "asyncio")


def install():
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
