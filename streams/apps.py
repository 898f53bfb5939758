from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # the rollups' delete receiver and the price table's change receiver (each connected
        # where it is defined)
        from streams.store import aggregates, prices  # noqa: F401
