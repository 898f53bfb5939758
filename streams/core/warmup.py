"""What the hot path would load at its first use, loaded before it is needed: once per process.

A module imported on the event loop holds the loop for as long as its import takes, and so
does a C extension building its tables on any thread (it keeps the GIL). In a fresh server the
first upstream request imported anyio's asyncio backend (~30 ms), the first stream to finish
imported genai-prices with pydantic (~160 ms, twice that on a busy machine) and the
tokenizer's thread built its vocabulary in Rust (over 100 ms, the GIL held): every live
stream's events waited behind each (docs/performance.md, "Warm-up").

What there is to load: the libraries below (`MODULES`, Django's backends), and what the engine's
own modules load lazily, each added by name with `add` where the app is wired
(`StreamsConfig.ready`, streams/apps.py): the tokenizer, the price list, the sealed keys' cipher.
tests/test_warmup.py records streams in a warmed process and fails on any module imported while
they ran: a new lazy import on the hot path is caught there, by name.

- `now()`: load everything, then `gc.freeze()` what was loaded. A server (dashboard/asgi.py)
  and a worker call it as they start, before they serve: about 0.7 s of start-up, once.
- `in_background()`: the same on a thread, for a process that records without having started
  as a server (the `record` command, tests). `done()` says whether it is over; the recorder
  awaits `wait` on a thread when a stream ends before it is (streams/ingest/recorder.py).
"""

from __future__ import annotations

import gc
import importlib
import logging
import threading

log = logging.getLogger(__name__)

# Imported at their first use by what the hot path calls: httpcore's first request (anyio's
# backend, the idna codec of a URL's host), a request body with a byte-order mark (safejson).
MODULES = ("anyio._backends._asyncio", "encodings.idna", "encodings.utf_8_sig")

_lock = threading.Lock()  # held while loading
_start_lock = threading.Lock()
_done = threading.Event()
_started: list = []  # the thread `in_background` started, once per process


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
        _done.set()


def now() -> None:
    """Load everything before serving, then freeze it out of the collector's sight (see
    streams/run/process.py: what lives as long as the process is not scanned again)."""
    _load()
    gc.freeze()


def in_background() -> None:
    """Load everything on a thread of its own, unless done or under way."""
    if _done.is_set() or _started:
        return
    with _start_lock:
        if _started or _done.is_set():
            return
        thread = threading.Thread(target=_load, name="streamscope-warm-up", daemon=True)
        _started.append(thread)
    thread.start()


def done() -> bool:
    return _done.is_set()


def wait() -> None:
    """Until the warm-up is over (start it here when nobody did)."""
    _load()
