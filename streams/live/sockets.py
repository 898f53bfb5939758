from django.urls import path

from streams.live import consumers

websocket_urlpatterns = [
    path("ws/streams/", consumers.StreamListConsumer.as_asgi(), name="ws_streams"),
    path("ws/streams/<int:stream_id>/", consumers.StreamConsumer.as_asgi(), name="ws_stream"),
]
