"""OpenTelemetry traces (streams/observe/tracing.py) against a real OTLP/HTTP receiver on 127.0.0.1
that decodes what arrives with the protocol's own protobuf messages (opentelemetry-proto)."""

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asgiref.sync import sync_to_async
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from streams.ingest.recorder import Recording
from streams.models import Event, Finding, Stream
from streams.observe import telemetry, tracing
from streams.run import runner
from streams.store import rows
from tests.support.recording import body

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf in and out. With `hold` set,
    each request waits until `release()` (a collector that does not answer)."""

    def __init__(self, hold=False):
        self.requests = []
        self.arrived = threading.Event()
        self.held = threading.Event()
        if not hold:
            self.held.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    data = gzip.decompress(data)
                request = ExportTraceServiceRequest()
                request.ParseFromString(data)
                receiver.requests.append((self.path, self.headers.get("Content-Type"), request))
                receiver.arrived.set()
                receiver.held.wait(30)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def release(self):
        self.held.set()

    def spans(self):
        """[(resource attributes, span)] of everything received."""
        out = []
        for _path, _type, request in self.requests:
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    out += [(resource, span) for span in ss.spans]
        return out

    def stop(self):
        self.release()
        self.server.shutdown()
        self.server.server_close()


def attributes(kvs):
    out = {}
    for kv in kvs:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


@pytest.fixture
def traced(monkeypatch):
    """Tracing on, to a receiver of its own; off again afterwards."""
    receivers = []

    def start(hold=False, **env):
        receiver = Receiver(hold=hold)
        receivers.append(receiver)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert tracing.configure() is not None
        return receiver

    yield start
    for receiver in receivers:
        receiver.release()
    tracing.reset()
    for receiver in receivers:
        receiver.stop()


async def record(b):
    stream = await sync_to_async(rows.new_row)(None, b)
    last, _ = await runner.run_stream(stream)
    return await Stream.objects.aget(pk=last.pk)


def by_stream(receiver):
    return {
        attributes(span.attributes)["streamscope.stream.id"]: span for _, span in receiver.spans()
    }


def dropped(reason):
    return telemetry.REGISTRY.get_sample_value(
        "streamscope_otel_spans_dropped_total", {"reason": reason}
    )


class TestSpans:
    async def test_one_client_span_per_stream_with_the_genai_attributes_and_milestones(
        self, upstream, traced
    ):
        receiver = traced()
        stream = await record(body("normal"))
        assert tracing.current().force_flush()
        [(path, content_type, _)] = receiver.requests
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        [(resource, span)] = receiver.spans()
        assert resource["service.name"] == "streamscope"
        assert span.name == "chat auto"
        assert span.kind == Span.SPAN_KIND_CLIENT
        attrs = attributes(span.attributes)
        last = [
            json.loads(d)
            async for d in Event.objects.filter(stream=stream)
            .order_by("-index")
            .values_list("data", flat=True)[:1]
        ][0]
        usage = last["response"]["usage"]
        assert attrs == {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "auto",
            "gen_ai.response.model": stream.resolved_model,
            "gen_ai.response.id": stream.upstream_id,
            "gen_ai.request.stream": True,
            "gen_ai.usage.input_tokens": usage["input_tokens"],
            "gen_ai.usage.output_tokens": usage["output_tokens"],
            "gen_ai.response.time_to_first_chunk": pytest.approx(stream.ttft_ms / 1e3),
            "streamscope.stream.id": stream.pk,
            "streamscope.source": "live",
            "streamscope.status": "completed",
            "streamscope.events": stream.event_count,
            "streamscope.findings": 0,
        }
        assert span.status.code == Status.STATUS_CODE_UNSET
        # start: the attempt's wall-clock start as stored; each milestone at its stored offset
        started_ns = int(stream.started_at.timestamp() * 1e6) * 1000
        assert abs(span.start_time_unix_nano - started_ns) < 1000
        events = [(e.name, e.time_unix_nano - span.start_time_unix_nano) for e in span.events]
        names = [name for name, _ in events]
        assert names == [n for n in tracing.MILESTONES if getattr(stream, f"{n}_us") is not None]
        assert {"request_written", "first_token", "terminal", "closed"} <= set(names)
        for name, offset_ns in events:
            stored_us = getattr(stream, f"{name}_us")
            assert stored_us * 1000 <= offset_ns < stored_us * 1000 + 1000, name
        assert span.end_time_unix_nano - span.start_time_unix_nano == events[-1][1]

    async def test_failures_are_error_spans_and_findings_are_events(self, upstream, traced):
        receiver = traced()
        failed = await record(body("http_500"))
        gap = await record(body("gap", model="gpt-oss-20b"))
        assert tracing.current().force_flush()
        spans = by_stream(receiver)
        span = spans[failed.pk]
        assert span.status.code == Status.STATUS_CODE_ERROR
        assert attributes(span.attributes)["error.type"] == failed.error_code != ""
        assert span.status.message
        span = spans[gap.pk]
        assert span.name == "chat gpt-oss-20b"
        [finding] = [e for e in span.events if e.name == "streamscope.finding"]
        [stored] = [f async for f in Finding.objects.filter(stream=gap)]
        got = attributes(finding.attributes)
        assert got == {
            "streamscope.finding.code": "sequence_gap",
            "streamscope.finding.severity": "error",
            "streamscope.finding.event_index": stored.event_index,
            **({"streamscope.finding.detail": stored.detail} if stored.detail else {}),
        }
        # a finding is known by the end of the stream: stamped at the span's end
        assert finding.time_unix_nano == span.end_time_unix_nano

    async def test_the_upstream_key_never_leaves_in_a_span(self, upstream, traced, settings):
        settings.UPSTREAM_API_KEY = "sk-tracing-secret-0123456789"
        receiver = traced()
        rec = finished_recording(request_model="model-sk-tracing-secret-0123456789")
        tracing.stream_finished(rec, {"status": "failed", "error_code": "x", "error_message":
                                      "key sk-tracing-secret-0123456789 echoed"})  # fmt: skip
        assert tracing.current().force_flush()
        [(_, span)] = receiver.spans()
        assert b"sk-tracing-secret" not in span.SerializeToString()


def finished_recording(stream_id=1, request_model="auto"):
    rec = Recording(stream_id, None, pinned_model=False)
    rec.start(time.monotonic_ns(), 60)
    rec.request_model = request_model
    rec.mark("closed", time.monotonic_ns())
    return rec


class TestNeverBlocking:
    def test_a_collector_that_does_not_answer_costs_spans_not_time(self, traced):
        receiver = traced(
            hold=True, OTEL_BSP_MAX_QUEUE_SIZE="2", OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1"
        )
        before = dropped("queue_full")
        for i in range(10):
            tracing.stream_finished(finished_recording(i + 1), {"status": "completed"})
        # all ten returned while the collector still holds the first export: two were queued
        # (one of them being exported), eight dropped and counted
        assert not receiver.held.is_set()
        assert dropped("queue_full") - before == 8
        receiver.release()
        assert tracing.current().force_flush()
        assert sorted(
            attributes(s.attributes)["streamscope.stream.id"] for _, s in receiver.spans()
        ) == [1, 2]


class TestSwitch:
    def test_off_without_an_endpoint(self, monkeypatch):
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        try:
            assert tracing.configure() is None
            assert tracing.current() is None
        finally:
            tracing.reset()

    @pytest.mark.parametrize(
        "env", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}]
    )
    def test_the_sdks_own_off_switches_are_obeyed(self, env):
        assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", **env})
        assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"})
