
websocket_urlpatterns = [
    # filled in by the relay (consumers.py)
]
