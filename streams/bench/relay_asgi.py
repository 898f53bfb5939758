"""The ASGI application of `bench relay`'s Daphne: the project's application plus bench-only
pieces — never routed in production.

- `/_bench/prepare`, `/_bench/start`, `/_bench/streams`: create pending streams, start them
  all at once (so viewers can subscribe first: the stock pattern has no catch-up), read their
  outcome. Plain ASGI, JSON in and out, only on the bench's 127.0.0.1 server.
- `/ws/bench/stock/<id>/`: the stock consumer (the Channels tutorial pattern).
- `/ws/bench/paced/?frames=N&gap_ms=G`: N frames shaped like the relay's, one every G ms, sent by
  a raw ASGI application with nothing upstream: what the server costs per frame by itself.
- STREAMSCOPE_BENCH_PATTERN=stock: `relay.publish` becomes the stock publisher, one
  `group_send` per event; =batched-layer: ours through the in-memory channel layer instead of
  the in-process fan-out; =batched (default): ours as configured.
"""

import asyncio
import json
import os
from urllib.parse import parse_qs

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
# Loaded before this server listens, not beside it as dashboard/asgi.py does: no stream starts
# before the load is over (streams/core/warmup.py), and the bench's streams start at the pace
# the bench sets, not all together as a load ends.
warmup.now()


async def http(scope, receive, send):
    if scope["path"].startswith("/_bench/"):
        await bench.control(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


# one relay frame of a paced stream: one delta event
PACED_FRAME = json.dumps(
    {
        "events": [
            {
                "index": 12,
                "type": "response.output_text.delta",
                "seq": 12,
                "t_us": 812345,
                "data": '{"type":"response.output_text.delta","sequence_number":12,'
                '"item_id":"msg_1","output_index":0,"content_index":0,"delta":" Utrecht"}',
            }
        ]
    }
)


async def paced_frames(scope, receive, send):
    query = parse_qs(scope["query_string"].decode())
    frames, gap_s = int(query["frames"][0]), float(query["gap_ms"][0]) / 1e3
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    for _ in range(frames):
        await asyncio.sleep(gap_s)
        await send({"type": "websocket.send", "text": PACED_FRAME})
    await send({"type": "websocket.close", "code": 1000})


def websocket(inner):
    async def app(scope, receive, send):
        if scope["path"] == "/ws/bench/paced/":
            return await paced_frames(scope, receive, send)
        return await inner(scope, receive, send)

    return app


application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": websocket(
            AllowedHostsOriginValidator(
                AuthMiddlewareStack(
                    URLRouter(
                        [
                            path("ws/bench/stock/<int:stream_id>/", bench.StockConsumer.as_asgi()),
                            *websocket_urlpatterns,
                        ]
                    )
                )
            )
        ),
    }
)
