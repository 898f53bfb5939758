"""Prometheus metrics: every metric object, its name, labels and buckets, here and nowhere else,
and the `/metrics` view (docs/telemetry.md).

The recorder, runner and consumers call the small functions below at points that already exist
(a batch committed, a stream finished, a frame sent); none of them runs per event, so the
pipeline's hot path (`Recording.ingest`, `Writer.put`) is untouched.

Names follow the OpenTelemetry GenAI semantic conventions in Prometheus form (dots become
underscores, the unit `s` becomes a `_seconds` suffix) with the conventions' recommended bucket
boundaries; Streamscope's own figures are `streamscope_*`. Labels never carry anything
unbounded: model ids come from the upstream (which may send anything), so each process keeps
at most METRICS_MAX_MODELS distinct values and folds the rest into "other"; finding codes are
the checker's fixed list; error codes are capped the same way. The per-stream figures carry
the stream's `project` (its slug; "" for a stream of no project): each process labels the
first PROJECTS_MAX projects it sees by their own value and folds the rest into "other". A
series holds the project's id until a scrape, which writes each as its slug (one query: a
stream ends in async code, where the database is not asked; a renamed project's series take
the new slug).

Several processes (Daphne, `stream_worker`): with PROMETHEUS_MULTIPROC_DIR set before start-up,
prometheus_client keeps every value in a per-process file there and `/metrics` sums them
(`prometheus_client.multiprocess`); the directory must be emptied when the deployment starts.
"""

import atexit
import copy
import logging
import os
import re
import time

from django.db import transaction
from django.db.models.signals import post_save
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from streams.core import conf, lifecycle, pricing, usage
from streams.core.checks import CODES
from streams.models import Comment, Project, Rule, Score

log = logging.getLogger(__name__)

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or ""

# The registry the metrics below belong to. In multiprocess mode their values live in files and
# `/metrics` builds a fresh registry that reads them all instead (prometheus_client's rule).
REGISTRY = CollectorRegistry(auto_describe=True)
if not MULTIPROC_DIR:
    # Process figures (CPU, memory, open files, GC) make sense per process only; in
    # multiprocess mode they would be one arbitrary process's.
    for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        REGISTRY.register(_collector)

OTHER = "other"  # what a label value beyond its cap becomes
LABEL_MAX_CHARS = 100  # (Stream.resolved_model's length)
ERROR_CODES_MAX = 50
PROJECTS_MAX = 50
ALERT_RULES_MAX = 2000  # rules exported (three series each)
PROJECT = "project"

# --- OTel GenAI semantic conventions (gen-ai-metrics): names, units, recommended buckets ----
MODEL_LABELS = ("gen_ai_request_model", "gen_ai_response_model", "source", PROJECT)
OPERATION_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
TOKEN_USAGE_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)

TTFT = Histogram(
    "gen_ai_server_time_to_first_token_seconds",
    "Time to first token: first output-bearing delta minus request written (docs/measurement.md).",
    MODEL_LABELS,
    buckets=TTFT_BUCKETS,
    registry=REGISTRY,
)
TIME_PER_OUTPUT_TOKEN = Histogram(
    "gen_ai_server_time_per_output_token_seconds",
    "Mean gap between output deltas after the first, per stream.",
    MODEL_LABELS,
    buckets=TPOT_BUCKETS,
    registry=REGISTRY,
)
OPERATION_DURATION = Histogram(
    "gen_ai_client_operation_duration_seconds",
    "Request written to connection closed, per recorded stream (errors included).",
    MODEL_LABELS,
    buckets=OPERATION_DURATION_BUCKETS,
    registry=REGISTRY,
)
TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "Tokens per stream, as the upstream reported them (the stored usage; estimates left out).",
    (*MODEL_LABELS, "gen_ai_token_type"),
    buckets=TOKEN_USAGE_BUCKETS,
    registry=REGISTRY,
)

# --- Streamscope's own ------------------------------------------------------------------------
STREAMS = Counter(
    "streamscope_streams",
    "Streams recorded to their end, by final status and error code.",
    ("status", "error_code", "source", PROJECT),
    registry=REGISTRY,
)
FINDINGS = Counter(
    "streamscope_findings",
    "Checker findings, by code and severity.",
    ("code", "severity", "source"),
    registry=REGISTRY,
)
STALLS = Counter(
    "streamscope_stalls",
    "Silences longer than the stall threshold (the checker's stall finding).",
    MODEL_LABELS,
    registry=REGISTRY,
)
BUFFERED_DELIVERIES = Counter(
    "streamscope_buffered_deliveries",
    "Bursts after a long silence: something between us and the model buffers.",
    MODEL_LABELS,
    registry=REGISTRY,
)
RETRIES = Counter(
    "streamscope_retries",
    "New attempts: `stall` (a new linked stream) or `connect` (same stream, before any event).",
    ("reason",),
    registry=REGISTRY,
)
EVENTS_RECORDED = Counter(
    "streamscope_events_recorded",
    "Events committed to the database.",
    ("source",),
    registry=REGISTRY,
)
EVENTS_LOST = Counter(
    "streamscope_events_lost",
    "Received events the database refused for longer than STORAGE_RETRY_S.",
    ("source",),
    registry=REGISTRY,
)
BATCH_COMMIT = Histogram(
    "streamscope_batch_commit_duration_seconds",
    "One writer batch: insert, stream updates, findings, commit (retries included).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
# Per process, the worst live one: the alert asks whether any writer is near its capacity.
WRITER_QUEUE = Gauge(
    "streamscope_writer_queue_events",
    "Events waiting behind the batch being committed.",
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
WRITER_QUEUE_CAPACITY = Gauge(
    "streamscope_writer_queue_capacity_events",
    "QUEUE_MAX_EVENTS: readers pause when the writer's queue holds this many.",
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
# Packing finished streams (streams/store/compact.py): the backlog the last sweep saw (every
# process sweeps the same database: the worst one's), and what was packed.
COMPACT_BACKLOG = Gauge(
    "streamscope_compact_backlog_streams",
    "Ended streams past their grace whose events are still rows, as the last sweep saw them.",
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
COMPACTED_STREAMS = Counter(
    "streamscope_compacted_streams",
    "Streams whose events were packed into blocks.",
    registry=REGISTRY,
)
COMPACTED_EVENTS = Counter(
    "streamscope_compacted_events",
    "Events packed into blocks (their rows deleted).",
    registry=REGISTRY,
)
LIVE_VIEWERS = Gauge(
    "streamscope_live_viewers",
    "Open WebSocket connections of the live relay.",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
FRAMES_SENT = Counter(
    "streamscope_frames_sent",
    "WebSocket frames sent to viewers.",
    registry=REGISTRY,
)
SLOW_VIEWER_CLOSES = Counter(
    "streamscope_slow_viewer_closes",
    "Viewers closed with 4008 for reading slower than the stream.",
    registry=REGISTRY,
)
PROXY_SOCKET_FRAMES_UNRECORDED = Counter(
    "streamscope_proxy_socket_frames_unrecorded",
    "Frames the proxy's WebSocket relayed while no response was open: part of no stream.",
    registry=REGISTRY,
)
PROXY_ADDED = Histogram(
    "streamscope_proxy_added_latency_seconds",
    "Proxied streams: per forwarded chunk, receipt from the upstream to the client's socket.",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
    registry=REGISTRY,
)
# Spend: a finished stream's stored cost (its usage at its price), in units of its currency, as
# a float. Requested and resolved model as the GenAI metrics label them (bounded the same way);
# `estimated` says whether the usage it is from was counted by us, not reported.
COST = Counter(
    "streamscope_cost",
    "Cost of finished streams (usage at the price in effect), in units of `currency`.",
    ("currency", "gen_ai_request_model", "gen_ai_response_model", "estimated", PROJECT),
    registry=REGISTRY,
)
# Judgements: a score type is defined by staff (a bounded set); `kind` and `source` are fixed
# lists; `positive` says whether the value was above the middle of the type's range.
SCORES = Counter(
    "streamscope_scores",
    "Scores given to streams (a score replaced counts again).",
    ("score_type", "kind", "source", "positive"),
    registry=REGISTRY,
)
COMMENTS = Counter("streamscope_comments", "Comments on streams.", ("source",), registry=REGISTRY)
SPANS_DROPPED = Counter(
    "streamscope_otel_spans_dropped",
    "Stream spans not exported: `queue_full` (never waited for) or `export_failed`.",
    ("reason",),
    registry=REGISTRY,
)
# Notifications (streams/notify/deliver.py): each delivery attempt by the channel's kind (a
# fixed list) and its result: `sent`, `failed` (tried again later) or `given_up`.
NOTIFICATIONS = Counter(
    "streamscope_notification_deliveries",
    "Notification delivery attempts, by the channel's kind and the attempt's result.",
    ("kind", "result"),
    registry=REGISTRY,
)
NOTIFY_KINDS = ("email", "webhook", "slack", "apprise")
NOTIFY_RESULTS = ("sent", "failed", "given_up")
SOURCES = ("live", "proxy")
# Every series whose label values are known is exported from the start at 0: `increase()` and
# `rate()` miss the first increment of a series that appears with it (the alert on lost events
# would never fire for the first loss).
for _source in SOURCES:
    EVENTS_RECORDED.labels(_source)
    EVENTS_LOST.labels(_source)
    for _code, (_severity, _) in CODES.items():
        FINDINGS.labels(_code, _severity, _source)
_RECORDED = {source: EVENTS_RECORDED.labels(source) for source in SOURCES}  # (per batch)
for _reason in ("stall", "connect"):
    RETRIES.labels(_reason)
for _reason in ("queue_full", "export_failed"):
    SPANS_DROPPED.labels(_reason)
for _source in ("person", "api"):
    COMMENTS.labels(_source)
for _kind in NOTIFY_KINDS:
    for _result in NOTIFY_RESULTS:
        NOTIFICATIONS.labels(_kind, _result)


# ---------------------------------------------------------------------------------------------
# Label values


class LabelFold:
    """Label values from outside, bounded: cut to LABEL_MAX_CHARS, and once `limit` distinct
    values were seen by this process, any new one is OTHER (secrets in them are taken out by
    the egress gate when /metrics is served)."""

    def __init__(self, limit):
        self.limit = limit  # an int, or a callable giving it (a setting)
        self.seen = set()

    def __call__(self, value):
        value = "" if value is None else str(value)
        if not value or value in self.seen:  # (what was admitted is cut already)
            return value
        value = value[:LABEL_MAX_CHARS]
        if value in self.seen:
            return value
        if len(self.seen) >= (self.limit() if callable(self.limit) else self.limit):
            return OTHER
        self.seen.add(value)
        return value


model_label = LabelFold(lambda: conf.get().metrics_max_models)
error_code_label = LabelFold(ERROR_CODES_MAX)
project_label = LabelFold(PROJECTS_MAX)  # of ids, as text: their slugs at the scrape


def _finding_code(code):
    return code if code in CODES else OTHER


def source_of(rec):
    return "proxy" if rec.proxied else "live"


def enabled():
    return conf.get().metrics


# ---------------------------------------------------------------------------------------------
# Hooks (each one call at a point the code already has)


def stream_finished(rec, fields, outcome=None):
    """All per-stream figures, once, from the finished Recording and the fields of its last
    write (`Recording.final_fields`, with the final status and error code). Never raises: a
    figure is not worth a recording."""
    try:
        # (an attempt whose connection error is retried on the same row is not its end)
        retried = outcome is not None and outcome.retryable and rec.connect_retry_follows
        if enabled() and not retried:
            _observe(rec, fields)
    except Exception:
        log.exception("telemetry: stream %s not observed", rec.stream_id)


def _observe(rec, fields):
    checker = rec.checker
    source = source_of(rec)
    resolved = fields.get("resolved_model") or (checker.resolved_model if checker else "")
    project = project_label(rec.project_id)
    labels = (
        model_label(requested_label(rec.request_model, resolved)),
        model_label(resolved),
        source,
        project,
    )
    STREAMS.labels(
        fields["status"], error_code_label(fields.get("error_code")), source, project
    ).inc()
    ttft_ms = fields.get("ttft_ms")
    if ttft_ms is not None:
        TTFT.labels(*labels).observe(max(ttft_ms, 0) / 1e3)
    if fields.get("inter_token_ms") is not None:
        TIME_PER_OUTPUT_TOKEN.labels(*labels).observe(fields["inter_token_ms"] / 1e3)
    if fields.get("duration_ms") is not None:
        OPERATION_DURATION.labels(*labels).observe(max(fields["duration_ms"], 0) / 1e3)
    for token_type, tokens in reported_tokens(fields).items():
        TOKEN_USAGE.labels(*labels, token_type).observe(tokens)
    nanos = fields.get("cost_nanos")
    if nanos is not None:  # (None: no price; never counted as 0)
        currency = fields.get("cost_currency")
        estimated = "true" if fields.get("usage_source") == usage.ESTIMATED else "false"
        COST.labels(
            currency if currency in pricing.CURRENCIES else OTHER, *labels[:2], estimated, project
        ).inc(max(nanos, 0) / pricing.NANO)
    for v in checker.violations if checker is not None else ():
        FINDINGS.labels(_finding_code(v.code), v.severity, source).inc()
        if v.code == "stall":
            STALLS.labels(*labels).inc()
        elif v.code == "buffered_delivery":
            BUFFERED_DELIVERIES.labels(*labels).inc()
    for delay_us, _events in rec.proxy_delays:
        PROXY_ADDED.observe(max(delay_us, 0) / 1e6)


def requested_label(requested, resolved):
    """The requested model as a label value: a client chooses it, so it counts only when the
    upstream answered it with a model (a stream it served). Any other requested id (a 404 for
    `junk-model-N`, a request that never got an answer) is OTHER: a client cannot use up the
    label values, and so cannot push another user's real model into OTHER."""
    return requested if resolved and requested else OTHER


def reported_tokens(fields):
    """{"input": n, "output": n} of a finished stream's stored usage when its upstream reported
    it (`usage_source` "reported"), only the counts it gave. An estimate is left out: OTel's
    `gen_ai.client.token.usage` is what the provider reported (the estimate's share of spend
    is `streamscope_cost_total{estimated="true"}`)."""
    if fields.get("usage_source") != usage.REPORTED:
        return {}
    out = {}
    for token_type in ("input", "output"):
        n = fields.get(f"{token_type}_tokens")
        if type(n) is int and n >= 0:
            out[token_type] = n
    return out


def batch_started(queued, capacity):
    """The writer took a batch (`queued` events wait behind it); returns its start time."""
    if enabled():
        WRITER_QUEUE.set(queued)
        WRITER_QUEUE_CAPACITY.set(capacity)
    return time.perf_counter()


def batch_committed(live_events, proxied_events, started):
    if not enabled():
        return
    BATCH_COMMIT.observe(time.perf_counter() - started)
    if live_events:
        _RECORDED["live"].inc(live_events)
    if proxied_events:
        _RECORDED["proxy"].inc(proxied_events)


def events_lost(rec, n):
    if enabled():
        EVENTS_LOST.labels(source_of(rec)).inc(n)


def retried(reason):
    if enabled():
        RETRIES.labels(reason).inc()


def compacted(streams, events, backlog):
    """A packing sweep ran: `streams` and `events` packed, `backlog` streams left due."""
    COMPACT_BACKLOG.set(backlog)  # (always: the alert reads it whether or not it moved)
    if enabled() and streams:
        COMPACTED_STREAMS.inc(streams)
        COMPACTED_EVENTS.inc(events)


def viewer_joined():
    LIVE_VIEWERS.inc()  # (always: a gauge counted only while enabled would drift)


def viewer_left():
    LIVE_VIEWERS.dec()


def frame_sent():
    if enabled():
        FRAMES_SENT.inc()


def proxy_socket_frames_unrecorded(n):
    if enabled():
        PROXY_SOCKET_FRAMES_UNRECORDED.inc(n)


def slow_viewer_closed():
    if enabled():
        SLOW_VIEWER_CLOSES.inc()


score_type_label = LabelFold(ERROR_CODES_MAX)


def scored(sender, instance, **kwargs):
    """post_save of a Score (given, or replaced): counted once its transaction commits."""
    kind = instance.score_type
    labels = (
        score_type_label(kind.name),
        kind.kind,
        instance.source,
        str(kind.is_positive(instance.value)).lower(),
    )
    if enabled():
        transaction.on_commit(lambda: SCORES.labels(*labels).inc())


def commented(sender, instance, created, **kwargs):
    if enabled() and created:
        transaction.on_commit(lambda: COMMENTS.labels(instance.source).inc())


# (every way a score or comment is written counts: scores.give, the admin)
post_save.connect(scored, sender=Score, dispatch_uid="streams.observe.telemetry.scored")
post_save.connect(commented, sender=Comment, dispatch_uid="streams.observe.telemetry.commented")


def span_dropped(reason, n=1):
    SPANS_DROPPED.labels(reason).inc(n)


# ---------------------------------------------------------------------------------------------
# Exposition


if MULTIPROC_DIR:
    # A process that ends cleanly takes its live gauges with it; one that was killed is reaped
    # at the next scrape (`_reap_dead`).
    atexit.register(multiprocess.mark_process_dead, os.getpid(), MULTIPROC_DIR)

_LIVE_FILE = re.compile(r"^gauge_live\w*?_(\d+)\.db$")


def _reap_dead(path):
    """Forget the live gauges of processes that died without saying so (SIGKILL, OOM): the
    directory is per host, so a pid that is gone here is gone."""
    pids = set()
    for name in os.listdir(path):
        match = _LIVE_FILE.match(name)
        if match:
            pids.add(int(match.group(1)))
    for pid in pids:
        if not lifecycle.pid_alive(pid):
            multiprocess.mark_process_dead(pid, path)


def registry_for_scrape(path=None):
    """What `/metrics` serves: this process's registry, or with a multiprocess directory
    (`path`, default PROMETHEUS_MULTIPROC_DIR) every process's values, summed."""
    path = path or MULTIPROC_DIR
    if not path:
        return REGISTRY
    _reap_dead(path)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    return registry


def exposition(accept="", path=None):
    """(body, content type) in the text format, or OpenMetrics if `accept` asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(_BySlug(registry_for_scrape(path))), content_type


class _BySlug:
    """A registry's families with each `project` label's id written as its project's slug
    (read in one query; an id whose project is gone reads as OTHER: its figures stay counted,
    under no project's name, added to OTHER's)."""

    def __init__(self, registry):
        self.registry = registry

    def collect(self):
        families = [*self.registry.collect(), alert_states()]
        ids = {
            s.labels[PROJECT]
            for f in families
            for s in f.samples
            if s.labels.get(PROJECT, "").isdigit()
        }
        slugs = dict(
            (str(pk), slug)
            for pk, slug in Project.objects.filter(pk__in=[int(i) for i in ids]).values_list(
                "pk", "slug"
            )
        )
        for family in families:
            if any(PROJECT in s.labels for s in family.samples):
                family = copy.copy(family)
                family.samples = _merged(_slugged(s, slugs) for s in family.samples)
            yield family


ALERT_STATES = ("ok", "pending", "firing")


def alert_states():
    """`streamscope_alert_state`: per enabled rule, 1 for the state it is in and 0 for the
    others, read from the rules' state rows at the scrape (the processes that evaluate them
    keep nothing of their own, so every server's scrape says the same)."""
    family = GaugeMetricFamily(
        "streamscope_alert_state",
        "Each enabled alert rule's state (1 for the one it is in): ok, pending or firing.",
        labels=(PROJECT, "rule", "rule_name", "state"),
    )
    rows = (
        Rule.objects.filter(enabled=True)
        .order_by("pk")
        .values_list("pk", "project_id", "name", "state__state")
    )
    for pk, project_id, name, state in rows[:ALERT_RULES_MAX]:
        for each in ALERT_STATES:
            labels = (str(project_id), str(pk), name[:LABEL_MAX_CHARS], each)
            family.add_metric(labels, 1.0 if (state or "ok") == each else 0.0)
    return family


def _merged(samples):
    """Samples of one family with the same name and labels added up: the series of a deleted
    project join OTHER's (every family with a project label is a counter or a histogram,
    whose samples add)."""
    out = {}
    for sample in samples:
        key = (sample.name, frozenset(sample.labels.items()))
        have = out.get(key)
        out[key] = sample if have is None else have._replace(value=have.value + sample.value)
    return list(out.values())


def _slugged(sample, slugs):
    value = sample.labels.get(PROJECT)
    if value is None or not value.isdigit():
        return sample
    return sample._replace(labels={**sample.labels, PROJECT: slugs.get(value, OTHER)})


def notification_delivered(kind, result):
    if enabled():
        NOTIFICATIONS.labels(kind if kind in NOTIFY_KINDS else OTHER, result).inc()
