"""The client's connection beneath an ASGI `send`, for what ASGI cannot say: how much of what
was sent still waits in the server for the client (a slow reader), and resetting a connection.

Daphne hands the application `partial(server.handle_reply, protocol)` and writes every message
into Twisted's unbounded buffer at once, so a send never waits for a slow client; measuring that
buffer is the only way to notice one. Above Daphne's `send` sit the egress gate's exits
(`__wrapped__`) and Channels' session wrapper (`__self__.real_send`).
"""

import asyncio
import functools
import time


def server_send(send):
    """Daphne's own `send` beneath the gate's and Channels' wrappers (or `send` elsewhere)."""
    for _ in range(16):
        inner = getattr(send, "__wrapped__", None)
        if inner is None:
            inner = getattr(getattr(send, "__self__", None), "real_send", None)
        if inner is None:
            return send
        send = inner
    return send


def connection(send):
    """The Twisted transport of the client's connection behind `send`, or None under another
    server: a WebSocket protocol's own, an HTTP request's channel's."""
    send = server_send(send)
    if not isinstance(send, functools.partial):
        return None
    for arg in send.args:
        transport = getattr(arg, "transport", None)
        if transport is None:
            transport = getattr(getattr(arg, "channel", None), "transport", None)
        if transport is not None and hasattr(transport, "dataBuffer"):
            return transport
    return None


def buffered_bytes(transport):
    """Bytes written for the client still in the server's buffer, not yet in its socket."""
    try:
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    except AttributeError:
        return 0


async def wait_drained(conn, high, timeout_s, gone=lambda: False):
    """Wait while more than `high` bytes written for the client wait unread in the server
    (`conn`, None: nothing to measure); False when that lasted `timeout_s` (a client too slow),
    True otherwise (drained, or `gone()`: nobody left to wait for). Polled: Twisted says nothing
    when its buffer drains."""
    if conn is None or buffered_bytes(conn) <= high:
        return True
    give_up = time.monotonic() + timeout_s
    while buffered_bytes(conn) > high:
        if gone():
            return True
        if time.monotonic() > give_up:
            return False
        await asyncio.sleep(0.01)
    return True


def abort(send):
    """Reset the client's connection (ASGI has no message for it); False where it cannot."""
    transport = connection(send)
    if transport is not None and hasattr(transport, "abortConnection"):
        transport.abortConnection()
        return True
    return False
