"""The built-in upstream simulator: a stand-in for ``POST /v1/responses`` over real HTTP.

Public API::

    from streams.simulator import SimulatorServer, start_in_thread, SCENARIOS, docs

See :mod:`streams.simulator.scenarios` for the scenarios and :mod:`streams.simulator.server` for
the endpoints and the log format.
"""

from .models import MODELS, ModelProfile
from .router import RoutingDecision, route
from .scenarios import SCENARIOS, docs
from .server import (
    ResponseLog,
    SimulatorHandle,
    SimulatorServer,
    shared_simulator,
    start_in_thread,
)


def scenarios_of(format):
    """{name: what it does} of the scenarios the simulator answers a request of `format` with
    (streams/core/formats/): the Responses scenarios, or the Chat or Messages faults."""
    from streams.core import formats

    from . import chat, messages

    return {formats.CHAT: chat.FAULTS, formats.MESSAGES: messages.FAULTS}.get(format, SCENARIOS)


def built_in_upstream():
    """Whether this instance's upstream is the built-in simulator: no UPSTREAM_BASE_URL (the
    runner starts it in-process the first time a stream needs it)."""
    from django.conf import settings

    return not settings.UPSTREAM_BASE_URL


__all__ = [
    "MODELS",
    "ModelProfile",
    "ResponseLog",
    "RoutingDecision",
    "SCENARIOS",
    "SimulatorHandle",
    "SimulatorServer",
    "built_in_upstream",
    "docs",
    "route",
    "scenarios_of",
    "shared_simulator",
    "start_in_thread",
]
