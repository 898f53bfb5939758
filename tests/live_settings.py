"""Settings for servers started by tests: the project's, plus STREAMSCOPE knobs from
STREAMSCOPE_TEST_OVERRIDES (JSON), so a test can run Daphne with e.g. a tiny relay outbox."""

import json
import os

from dashboard.settings import *  # noqa: F403
from dashboard.settings import STREAMSCOPE

# Test servers pack no stream in the background (a test's backdated streams would turn into
# blocks under it); tests/streams/run/test_compaction.py runs the sweep itself.
STREAMSCOPE = {
    **STREAMSCOPE,
    "COMPACT_STREAMS_PER_RUN": 0,
    **json.loads(os.environ.get("STREAMSCOPE_TEST_OVERRIDES", "{}")),
}
