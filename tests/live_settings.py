"""Settings for servers started by tests: the project's, plus STREAMSCOPE knobs from
STREAMSCOPE_TEST_OVERRIDES (JSON), so a test can run Daphne with e.g. a tiny relay outbox."""

import json
import os

from dashboard.settings import *  # noqa: F403
from dashboard.settings import STREAMSCOPE

# Test servers pack no stream in the background (a test's backdated streams would turn into
# blocks under it); tests/streams/run/test_compaction.py runs the sweep itself. They run their
# heavy jobs in their own process, not a child apart (streams/run/apart.py): a child is a second
# Django start per server, ~1.5 s of CPU each over the hundreds of servers a CI run starts. The
# tests of the child (tests/streams/run/test_apart.py) and the alerts' done-when test, which runs
# as production does, turn it back on.
STREAMSCOPE = {
    **STREAMSCOPE,
    "COMPACT_STREAMS_PER_RUN": 0,
    "JOBS_APART": False,
    **json.loads(os.environ.get("STREAMSCOPE_TEST_OVERRIDES", "{}")),
}
