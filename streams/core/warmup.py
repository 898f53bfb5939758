"""What the hot path would load at its first use, loaded before the first stream: once per process.

A module imported on the event loop holds the loop for as long as its import takes, and so
does a C extension building its tables on any thread (it keeps the GIL). In a fresh server the
first upstream request imported anyio's asyncio backend (~30 ms), the first stream to finish
imported genai-prices with pydantic (~160 ms, twice that on a busy machine) and the
tokenizer's thread built its vocabulary in Rust (over 100 ms, the GIL held): every live
stream's events waited behind each (docs/performance.md, "Warm-up"). Loaded on a thread beside
streams that had started (`manage.py record`, issue 42), it held the GIL just as their first
deltas arrived: their reads came late, merged with later deltas, and took those deltas' kernel
stamps (up to 46 of 50 streams' TTFT late, by up to 148 ms; docs/measurement.md, "Warm-up
before the first stream").

What there is to load: the libraries below (`MODULES`, Django's backends), and what the engine's
own modules load lazily, each added by name with `add` where the app is wired
(`StreamsConfig.ready`, streams/apps.py): the tokenizer, the price list, the sealed keys' cipher.

The rule, held in one place: no stream starts before the warm-up is over. Every recording,
whoever starts it (a page, the API, the proxy, a worker, `manage.py record`, a benchmark),
goes through `recorder.record_attempt`, which awaits `ready()` before its request: the first
streams of a process wait for the load (off the loop, which goes on serving meanwhile), and
nothing is loaded while any stream runs. tests/streams/run/test_warmup.py watches fresh processes
record and fails on a module imported, or a warm-up not done, once the first stream's connection is
made.

- `start()`: load on a thread of its own (once per process): a server starts it as its
  application is built (dashboard/asgi.py), so it answers requests while loading.
- `ready()`: await the end of the load from a coroutine (starting it when nobody did).
- `now()`: load here, before going on: a process with nothing to answer meanwhile (a worker).
Each ends with `gc.freeze()` of what was loaded (streams/run/process.py: what lives as long as
the process is not scanned again), before anyone waiting is woken.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import threading

log = logging.getLogger(__name__)

# Imported at their first use by what the hot path calls: httpcore's first request (anyio's
# backend, the idna codec of a URL's host), a request body with a byte-order mark (safejson).
MODULES = ("anyio._backends._asyncio", "encodings.idna", "encodings.utf_8_sig")

_lock = threading.Lock()  # held while loading
_state_lock = threading.Lock()  # `_started`, `_waiters` and setting `_done`
_done = threading.Event()
_started: list = []  # the thread `start` started, once per process
_waiters: list = []  # (loop, future) of each coroutine awaiting `ready`
_loaded: list = []  # the names of the steps run so far


def _django_backends() -> None:
    """The cache's and the sessions' backends, imported by name from settings at first use."""
    from django.conf import settings
    from django.core.cache import caches
    from django.utils.module_loading import import_string

    caches["default"]  # (its backend's module; the connection itself is per thread)
    importlib.import_module(settings.SESSION_ENGINE)
    import_string(settings.SESSION_SERIALIZER)


_steps = [
    ("libraries", lambda: [importlib.import_module(name) for name in MODULES]),
    ("Django's cache and session backends", _django_backends),
]


def add(what: str, load) -> None:
    """One more thing to load (`load()`, idempotent), named `what` in a log line if it fails."""
    if all(step[0] != what for step in _steps):
        _steps.append((what, load))


def _load() -> None:
    with _lock:
        if _done.is_set():
            return
        for name, step in _steps:
            try:
                step()
            except Exception:  # a step that fails is loaded at its first use, as before
                log.exception("warm-up: %s could not be loaded ahead", name)
            _loaded.append(name)
        gc.freeze()
        with _state_lock:
            _done.set()
            waiters = _waiters[:]
            _waiters.clear()
    for loop, future in waiters:
        try:
            loop.call_soon_threadsafe(_wake, future)
        except RuntimeError:  # its loop was closed meanwhile: nobody is waiting there
            pass


def _wake(future) -> None:
    if not future.done():  # (a waiter cancelled meanwhile)
        future.set_result(None)


def now() -> None:
    """Load everything here and now."""
    _load()


def start() -> None:
    """Load everything on a thread of its own, unless done or under way."""
    with _state_lock:
        if _done.is_set() or _started:
            return
        thread = threading.Thread(target=_load, name="streamscope-warm-up", daemon=True)
        _started.append(thread)
    thread.start()


async def ready() -> None:
    """Return once everything is loaded. The load runs on its thread (started here when nobody
    started it), so the event loop serves everything else meanwhile; the waiting costs no
    thread, however many streams wait."""
    if _done.is_set():
        return
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    with _state_lock:
        if _done.is_set():
            return
        _waiters.append((loop, future))
    start()
    await future


def done() -> bool:
    return _done.is_set()


def pending() -> list[str]:
    """What is still to load, by name (nothing once `done()`)."""
    return [name for name, _ in _steps if name not in _loaded]
