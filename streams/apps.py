from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # the rollups' delete receiver (connected where it is defined)
        from streams.store import aggregates  # noqa: F401
