"""What the upstream offers: its models (`GET /v1/models`) and whether it is our simulator.

The list is asked for at most every CACHE_S per process (every FAILURE_CACHE_S after a failure,
so a restarted upstream is noticed soon without a page render waiting on a dead one each time).
When the upstream does not answer, `settings.UPSTREAM_MODELS` is the list. The built-in
simulator is not asked at all: its catalogue is known in this process, and asking would start
it just to render a page.

`simulated` is True for the built-in simulator and for a `simulate_upstream` process (its
models are `owned_by: "streamscope-simulator"`): both understand `metadata.scenario` and
`metadata.time_scale`, so pages may offer those.
"""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from streams.ingest.upstream import UpstreamError, list_models
from streams.run import runner

log = logging.getLogger(__name__)

AUTO = "auto"
SIMULATOR_OWNER = "streamscope-simulator"
CACHE_S = 300
FAILURE_CACHE_S = 15


@dataclass(frozen=True)
class Catalog:
    models: tuple[str, ...]  # concrete model ids; `auto` (the router) is not among them
    source: str  # "upstream" | "simulator" | "settings" (the upstream did not answer)
    simulated: bool
    error: str = ""  # why the upstream's own list is not used

    @property
    def choices(self):
        return (AUTO, *self.models)


def get_catalog():
    """The current catalogue (sync: may ask the upstream, for up to a few seconds)."""
    if runner.uses_simulator():
        from streams.simulator.models import MODELS

        return Catalog(tuple(MODELS), "simulator", simulated=True)
    base_url = settings.UPSTREAM_BASE_URL
    key = f"streamscope:catalog:{base_url}"
    found = cache.get(key)
    if found is None:
        found = _ask(base_url)
        cache.set(key, found, FAILURE_CACHE_S if found.error else CACHE_S)
    return found


def forget():
    """Ask again on next use (tests; after changing the upstream)."""
    cache.delete(f"streamscope:catalog:{settings.UPSTREAM_BASE_URL}")


def _ask(base_url):
    try:
        listed = list_models(base_url, settings.UPSTREAM_API_KEY)
    except UpstreamError as exc:
        error = exc.message  # (shown and logged through the egress gate)
        log.warning("GET %s/models failed (%s); using UPSTREAM_MODELS", base_url, error)
        fallback = tuple(_unique(m.strip() for m in settings.UPSTREAM_MODELS))
        return Catalog(fallback, "settings", simulated=False, error=error)
    ids = tuple(_unique(m["id"] for m in listed))
    simulated = bool(listed) and all(m.get("owned_by") == SIMULATOR_OWNER for m in listed)
    return Catalog(ids, "upstream", simulated=simulated)


def _unique(ids):
    seen = {AUTO}
    for model_id in ids:
        if model_id and model_id not in seen:
            seen.add(model_id)
            yield model_id
