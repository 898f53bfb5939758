from django.apps import AppConfig


class ForceRollups(AppConfig):
    """Installed by tests/support/walk_settings.py on request: the analytics pages read the
    pre-aggregates (streams/stats/cube.py) instead of the raw rows of a small history."""

    name = "tests.support"
    label = "walk_force_rollups"

    def ready(self):
        from streams.stats import cube

        cube.EXACT_BELOW = 0
