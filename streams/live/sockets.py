from django.urls import path

from streams.live import consumers, shared

websocket_urlpatterns = [
    path("ws/streams/", consumers.StreamListConsumer.as_asgi(), name="ws_streams"),
    path("ws/streams/<int:stream_id>/", consumers.StreamConsumer.as_asgi(), name="ws_stream"),
    # a stream through a share link, read-only (streams/live/shared.py, docs/sharing.md)
    path(
        "ws/shared/<str:secret>/<int:stream_id>/",
        shared.SharedStreamConsumer.as_asgi(),
        name="ws_shared_stream",
    ),
]
