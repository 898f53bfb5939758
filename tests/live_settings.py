"""Settings for servers started by tests: the project's, plus STREAMSCOPE knobs from
STREAMSCOPE_TEST_OVERRIDES (JSON), so a test can run Daphne with e.g. a tiny relay outbox."""

import json
import os

from dashboard.settings import *  # noqa: F403
from dashboard.settings import STREAMSCOPE

STREAMSCOPE = {**STREAMSCOPE, **json.loads(os.environ.get("STREAMSCOPE_TEST_OVERRIDES", "{}"))}
