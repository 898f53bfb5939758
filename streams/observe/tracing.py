"""OpenTelemetry traces, optional: one CLIENT span per recorded attempt, built when it has
finished from its Recording (docs/telemetry.md).

On only when the SDK and the OTLP/HTTP exporter import (`pip install streamscope[otel]`) and
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; OTEL_SDK_DISABLED=true
or OTEL_TRACES_EXPORTER=none turns it off. Everything else is the SDK's own environment
(OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*, OTEL_TRACES_SAMPLER, …).

The span is made after the fact with the recorded times (start = the attempt's wall-clock
start, every milestone an event at its receipt time), so nothing runs while the stream does.
It goes to a BatchSpanProcessor, whose thread exports it: the recorder only appends to a
bounded queue. A span that finds the queue full is dropped at once and counted
(`streamscope_otel_spans_dropped_total{reason="queue_full"}`), as are spans the collector
refused (`export_failed`), so a slow or absent collector costs spans, never recording time.
"""

import datetime as dt
import logging
import os
import threading

from streams.observe import telemetry
from streams.store import known_secrets

log = logging.getLogger(__name__)

OPERATION = "chat"  # gen_ai.operation.name of a Responses API call
# The milestones, in the order they happen (Recording.milestones names, docs/measurement.md).
MILESTONES = (
    "connected",
    "request_written",
    "headers",
    "created_event",
    "routing",
    "first_token",
    "first_tool_call",
    "terminal",
    "closed",
)
ERROR_STATUSES = frozenset({"failed", "stalled", "truncated"})
MAX_FINDING_EVENTS = 32  # a stream with thousands of findings still makes a small span
ATTRIBUTE_MAX_CHARS = 500
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

_tracing = None  # None: not decided yet; False: off; else a Tracing
_lock = threading.Lock()


def wanted(environ):
    """Whether the environment asks for traces (the SDK may still be missing)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure(environ=None):
    """Decide (again) from `environ` (default os.environ): the Tracing, or None when off. The
    previous one is shut down (its queued spans exported first)."""
    global _tracing
    environ = os.environ if environ is None else environ
    with _lock:
        if _tracing:
            _tracing.shutdown()
        _tracing = False
        if wanted(environ):
            try:
                _tracing = Tracing(environ)
            except ImportError as exc:
                log.warning(
                    "OpenTelemetry endpoint set but the SDK is missing (%s): no traces", exc
                )
        return _tracing or None


def reset():
    """Shut the Tracing in use down and decide again at next use (tests)."""
    global _tracing
    configure({})
    _tracing = None


def current():
    """The Tracing in use, deciding from the environment at first use; None when off."""
    return (_tracing if _tracing is not None else configure()) or None


def stream_finished(rec, fields):
    tracing = current()
    if tracing is not None:
        tracing.export(rec, fields)


def _int_env(environ, name, default):
    try:
        return max(1, int(environ.get(name, "")))
    except ValueError:
        return default


class Tracing:
    """A tracer provider of our own (not the process-wide global, which an embedding
    application may own) with a bounded batch processor."""

    def __init__(self, environ, exporter=None):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*
        attributes = {}
        if not environ.get("OTEL_SERVICE_NAME") and "service.name=" not in environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        ):
            attributes["service.name"] = "streamscope"
        self.queue_max = _int_env(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        batch = min(_int_env(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.queue_max)
        self.bounded = _Bounded(self.queue_max)
        self.bounded.inner = BatchSpanProcessor(
            _Counted(exporter, self.bounded),
            max_queue_size=self.queue_max,
            max_export_batch_size=batch,
        )
        self.provider = TracerProvider(resource=Resource.create(attributes))
        self.provider.add_span_processor(self.bounded)
        self.tracer = self.provider.get_tracer("streamscope")

    def shutdown(self):
        self.provider.shutdown()

    def force_flush(self, timeout_millis=10_000):
        return self.provider.force_flush(timeout_millis)

    def export(self, rec, fields):
        from opentelemetry.trace import SpanKind, Status, StatusCode

        if not rec.wall0:
            return
        wall0_ns = (rec.wall0 - _EPOCH) // dt.timedelta(microseconds=1) * 1000

        def at(t_ns):
            return wall0_ns + max(t_ns - rec.t0_ns, 0)

        request_model = _text(rec.request_model)
        closed = rec.milestones.get("closed")
        end = at(closed) if closed is not None else None
        span = self.tracer.start_span(
            f"{OPERATION} {request_model}" if request_model else OPERATION,
            kind=SpanKind.CLIENT,
            start_time=wall0_ns,
            attributes=_attributes(rec, fields),
        )
        for name in MILESTONES:
            t_ns = rec.milestones.get(name)
            if t_ns is not None:
                span.add_event(name, timestamp=at(t_ns))
        violations = rec.checker.violations if rec.checker is not None else ()
        for v in violations[:MAX_FINDING_EVENTS]:
            # a finding has an event index, not a time: it is known by the end
            span.add_event("streamscope.finding", attributes=_finding(v), timestamp=end)
        status = fields["status"]
        if status in ERROR_STATUSES:
            message = _text(fields.get("error_message")) or _text(fields.get("error_code"))
            span.set_status(Status(StatusCode.ERROR, message or status))
        span.end(end_time=end)


def _attributes(rec, fields):
    """The span's attributes: GenAI semantic conventions where they have a name, Streamscope's
    own otherwise; every value from the upstream through `_text`."""
    checker = rec.checker
    attributes = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.request.stream": rec.request_stream,
        "streamscope.stream.id": rec.stream_id or 0,
        "streamscope.source": telemetry.source_of(rec),
        "streamscope.status": fields["status"],
        "streamscope.events": rec.next_index,
        "streamscope.findings": rec.findings,
    }
    optional = {
        "gen_ai.request.model": _text(rec.request_model),
        "gen_ai.response.model": _text(
            fields.get("resolved_model") or (checker.resolved_model if checker else "")
        ),
        "gen_ai.response.id": _text(
            fields.get("upstream_id") or (checker.upstream_id if checker else "")
        ),
        "error.type": _text(fields.get("error_code")),
    }
    attributes.update((name, value) for name, value in optional.items() if value)
    for token_type, n in telemetry.reported_tokens(fields).items():
        attributes[f"gen_ai.usage.{token_type}_tokens"] = n
    if fields.get("ttft_ms") is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = max(fields["ttft_ms"], 0) / 1e3
    return attributes


def _finding(v):
    """A checker finding as a span event's attributes."""
    finding = {"streamscope.finding.code": v.code, "streamscope.finding.severity": v.severity}
    if v.event_index is not None:
        finding["streamscope.finding.event_index"] = v.event_index
    if v.detail:
        finding["streamscope.finding.detail"] = _text(v.detail)
    return finding


def _text(value):
    """An attribute value from the upstream, bounded; spans leave by the OTLP exporter, not an
    ASGI message, so this exit applies the egress gate's rules itself."""
    if not value:
        return ""
    return known_secrets.redact(str(value)[: ATTRIBUTE_MAX_CHARS * 2])[:ATTRIBUTE_MAX_CHARS]


class _Bounded:
    """The span processor in front of the batch processor: admits a span only while fewer than
    `limit` are queued or being exported, so the batch processor's own queue never overflows
    (it would drop silently) and a drop is counted here, without waiting."""

    def __init__(self, limit):
        self.limit = limit
        self.pending = 0
        self.inner = None
        self._lock = threading.Lock()

    def on_start(self, span, parent_context=None):
        pass

    def _on_ending(self, span):
        pass

    def on_end(self, span):
        with self._lock:
            full = self.pending >= self.limit
            if not full:
                self.pending += 1
        if full:
            telemetry.span_dropped("queue_full")
            return
        self.inner.on_end(span)

    def released(self, n):
        with self._lock:
            self.pending -= n

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30_000):
        return self.inner.force_flush(timeout_millis)


class _Counted:
    """The exporter, counting what it could not deliver."""

    def __init__(self, inner, bounded):
        self.inner = inner
        self.bounded = bounded

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.inner.export(spans)
        except Exception:
            log.exception("OpenTelemetry: export failed")
            result = SpanExportResult.FAILURE
        finally:
            self.bounded.released(len(spans))
        if result is not SpanExportResult.SUCCESS:
            telemetry.span_dropped("export_failed", len(spans))
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30_000):
        return self.inner.force_flush(timeout_millis)
