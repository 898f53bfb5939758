"""A graceful stop: SIGTERM (or SIGINT) lets running streams end, then ends the rest
`interrupted` with what arrived, then exits.

    lifecycle.stopping  # set once a stop began: no new stream starts (services refuse with 503)
    await drain(s)    # wait up to `s` for this process's streams, then interrupt the rest
    install_for_daphne()   # the servers: SIGTERM/SIGINT drain, then stop Daphne's reactor

A stream cut short by a stop ends `interrupted` (`shutdown`), with its output, tokens and
bytes as the recorder finishes any stream; a proxied client gets the end of its response
rather than a reset. A second signal stops at once (its rows are then swept as a dead
process's: `interrupted`, rebuilt from what was stored).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from streams.core import conf, lifecycle

log = logging.getLogger(__name__)


async def drain(grace_s=None):
    """Stop taking streams; wait up to `grace_s` (STREAMSCOPE_SHUTDOWN_GRACE_S) for this
    process's to end; interrupt the rest; wait (bounded) for their final writes."""
    from streams.run import runner

    lifecycle.stopping = True
    grace_s = conf.get().shutdown_grace_s if grace_s is None else grace_s
    loop = asyncio.get_running_loop()
    running = runner.running_here()
    if running:
        log.info("stopping: waiting up to %.0f s for %d stream(s)", grace_s, len(running))
    deadline = loop.time() + grace_s
    while runner.running_here() and loop.time() < deadline:
        await asyncio.sleep(0.1)
    left = list(runner.running_here())
    for stream_id in left:
        runner.cancel(stream_id)  # (recorded `interrupted`: `stopping` is set)
    # their final writes go through the writer, which must still run: bounded, so a database
    # that does not answer cannot keep the process from exiting (the rows are swept then)
    deadline = loop.time() + conf.get().storage_retry_s + 5.0
    while runner.running_here() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    if left:
        log.info("stopping: %d stream(s) interrupted", len(left))


def install_for_daphne():
    """On SIGTERM/SIGINT, drain, then stop Daphne's reactor (call before the server runs)."""
    from daphne.server import Server  # noqa: F401  (installs Daphne's asyncio reactor first)
    from twisted.internet import reactor

    def on_signal():
        if lifecycle.stopping:  # the second signal: now
            reactor.stop()
            return
        task = asyncio.ensure_future(drain())
        task.add_done_callback(lambda _: reactor.callLater(0, reactor.stop))

    def install():
        loop = asyncio.get_event_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)  # (replaces Twisted's: stop at once)

    reactor.callWhenRunning(install)
