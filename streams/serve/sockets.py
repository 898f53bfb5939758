"""Every WebSocket route the server has: the live pages' (streams/live/sockets.py) and the
recording proxy's (streams/serve/proxy_socket.py). dashboard/asgi.py serves each behind its
own checks; the route walkers walk this list, so a route added to either is walked."""

from streams.live.sockets import websocket_urlpatterns as live_urlpatterns
from streams.serve.proxy_socket import websocket_urlpatterns as proxy_urlpatterns

websocket_urlpatterns = [*live_urlpatterns, *proxy_urlpatterns]
