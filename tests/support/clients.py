"""In-process clients of the ASGI application: HTTP (`session`: a user's session cookie;
`bearer`: a user's API token; from tests/streams/serve/test_api.py) and WebSocket (`ws`: a
communicator through the real ASGI stack, from tests/streams/live/test_consumers.py). The
communicators `ws` opened are disconnected after each test by tests/conftest.py's
`_disconnect_communicators`, which the modules that use `ws` name in their `pytestmark`."""

import asyncio

from channels.testing import WebsocketCommunicator
from django.test import AsyncClient

from dashboard.asgi import application

# ---- HTTP -------------------------------------------------------------------------------------


class HeaderClient(AsyncClient):
    """AsyncClient drops constructor headers (they land in the scope, not its headers)."""

    def __init__(self, headers, **kwargs):
        super().__init__(**kwargs)
        self.extra_headers = headers

    def generic(self, *args, headers=None, **kwargs):
        return super().generic(*args, headers={**self.extra_headers, **(headers or {})}, **kwargs)


def bearer(user, **kwargs):
    return HeaderClient({"authorization": f"Bearer {user.token}"}, **kwargs)


def session(user, **kwargs):
    client = AsyncClient(**kwargs)
    client.cookies[user.cookie.split("=")[0]] = user.cookie.split("=", 1)[1]
    return client


# ---- WebSocket --------------------------------------------------------------------------------


ORIGIN = "http://127.0.0.1:8000"


_open = []  # communicators of the running test, disconnected after it


def ws(path, user=None, origin=ORIGIN, token=None):
    # the server's own origin is scheme + Host: what a browser on ORIGIN's page sends
    headers = [(b"host", b"127.0.0.1:8000")]
    if origin:
        headers.append((b"origin", origin.encode()))
    if user is not None:
        headers.append((b"cookie", user.cookie.encode()))
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    comm = WebsocketCommunicator(application, path, headers=headers)
    _open.append(comm)
    return comm


async def disconnect_communicators():
    """Disconnect every communicator `ws` opened (tests/conftest.py's fixture, after a test)."""
    while _open:
        comm = _open.pop()
        try:
            await comm.disconnect(timeout=1)
        except Exception:
            pass


# ---- one ASGI application, called bare ---------------------------------------------------------


def run_asgi(app, scope, messages=()):
    """The ASGI messages `app` sends for `scope`, given `messages` (then a disconnect)."""
    sent = []
    incoming = list(messages)

    async def receive():
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent
