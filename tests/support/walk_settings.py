"""Settings of the servers tests/streams/serve/test_egress_walk.py starts: tests/live_settings, plus
request errors (Django's and Daphne's) with their tracebacks in the server's log, and, with
WALK_FORCE_ROLLUPS=1, analytics pages that read the pre-aggregates however small the history
is (tests/support/apps.py)."""

import os

from dashboard.settings import LOGGING as _LOGGING
from tests.live_settings import *  # noqa: F403
from tests.live_settings import INSTALLED_APPS

LOGGING = {
    **_LOGGING,
    "loggers": {
        **_LOGGING["loggers"],
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        "daphne": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

if os.environ.get("WALK_FORCE_ROLLUPS") == "1":
    INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.apps.ForceRollups"]
