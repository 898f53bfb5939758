"""The ASGI application of `bench relay`'s Daphne: the project's application plus bench-only
pieces — never routed in production.

- `/_bench/prepare`, `/_bench/start`, `/_bench/streams`: create pending streams, start them
  all at once (so viewers can subscribe first: the stock pattern has no catch-up), read their
  outcome. Plain ASGI, JSON in and out, only on the bench's 127.0.0.1 server.
- `/ws/bench/stock/<id>/`: the stock consumer (the Channels tutorial pattern).
- STREAMSCOPE_BENCH_PATTERN=stock: `relay.publish` becomes the stock publisher, one
  `group_send` per event; =batched-layer: ours through the in-memory channel layer instead of
  the in-process fan-out; =batched (default): ours as configured.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from streams.bench import relay as bench  # noqa: E402
from streams.core import warmup  # noqa: E402
from streams.live.sockets import websocket_urlpatterns  # noqa: E402

bench.apply_pattern(os.environ.get("STREAMSCOPE_BENCH_PATTERN", "batched"))
warmup.now()  # (as dashboard/asgi.py does)


async def http(scope, receive, send):
    if scope["path"].startswith("/_bench/"):
        await bench.control(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(
                URLRouter(
                    [
                        path("ws/bench/stock/<int:stream_id>/", bench.StockConsumer.as_asgi()),
                        *websocket_urlpatterns,
                    ]
                )
            )
        ),
    }
)
