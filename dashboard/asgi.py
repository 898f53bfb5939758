import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
# Django must be set up before anything imports models (consumers do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from streams.core import warmup  # noqa: E402
from streams.live.sockets import websocket_urlpatterns  # noqa: E402
from streams.serve import edge, proxy, proxy_socket  # noqa: E402
from streams.serve.egress import EgressGate  # noqa: E402

# Whatever serves this application reads request bodies through the edge (streams/serve/edge.py):
# a body that stalls is cut off with a 408 where Daphne reads it.
edge.install()

# What the hot path would load at its first use (the price list, the tokenizer, backends),
# loaded on a thread from now on: the server answers meanwhile, and its first streams start
# once the load is over, so their events never wait behind it (streams/core/warmup.py).
warmup.start()

# Everything that leaves, HTTP and WebSocket, passes the egress gate (streams/serve/egress.py).
application = EgressGate(
    ProtocolTypeRouter(
        {
            # /v1/… is the recording proxy, an ASGI app in front of Django (streams/serve/proxy.py)
            "http": proxy.route(django_asgi_app),
            # /v1/responses is the proxy's WebSocket (streams/serve/proxy_socket.py): a token,
            # not a cookie or an origin, says who is asking
            "websocket": proxy_socket.route(
                AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
            ),
        }
    )
)
