"""Finished streams packed in the background (streams/store/compact.py): every process sweeps,
a bounded number of streams a run; packing a stream locks its row, so two processes sweeping at
once pack it once."""

from streams.core import conf
from streams.observe import telemetry
from streams.run import periodic
from streams.store import compact, partitions

EVERY_S = 60.0
PARTITIONS_EVERY_S = 3600.0  # days are made `partitions.AHEAD_DAYS` ahead: an hour is early


# (apart: packing is Python over every event of a stream, the GIL held while the relay waits)
@periodic.job("compact", EVERY_S, where=periodic.APART)
def sweep():
    limit = conf.get().compact_streams_per_run
    if not limit:
        return
    done = compact.sweep(limit=limit)
    telemetry.compacted(done["streams"], done["events"], compact.progress["backlog"])


@periodic.job("event block partitions", PARTITIONS_EVERY_S)
def make_partitions():
    partitions.ensure_ahead()
