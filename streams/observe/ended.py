"""A stream ended: what every instrument learns of it, once, in one call for every way a stream
ends (the recorder's `finish`, after its last write): its Prometheus figures
(streams/observe/telemetry.py) and its OpenTelemetry span (streams/observe/tracing.py, when
configured). Never raises: a figure is not worth a recording."""

import logging

from streams.observe import telemetry, tracing

log = logging.getLogger(__name__)


def stream_ended(rec, fields, outcome=None):
    """`rec`: the finished Recording; `fields`: its last write (final status, error code);
    `outcome`: the attempt's, when a connection error may be retried on the same row."""
    try:
        tracing.stream_finished(rec, fields)
    except Exception:
        log.exception("tracing: stream %s not traced", rec.stream_id)
    telemetry.stream_finished(rec, fields, outcome)
