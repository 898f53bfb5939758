"""Prometheus metrics (streams/observe/telemetry.py): the figures agree with the database, labels
stay bounded, /metrics lets in only whom it should, and several processes add up."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from streams.core.checks import CODES
from streams.models import Event, Finding, Project, Stream
from streams.observe import telemetry
from streams.run import runner
from streams.store import known_secrets, rows
from tests.conftest import REPO, DaphneServer, database_url, free_port
from tests.support.clients import session, ws
from tests.support.recording import body

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_disconnect_communicators"),  # tests/conftest.py: `ws`'s cleanup
]

TOKEN = "metrics-test-token"


def parse(text):
    """{(sample name, frozenset of labels): value}"""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def total(samples, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def by(samples, name, *keys, **labels):
    """Sample values of `name` summed per tuple of the `keys` labels (zeros left out)."""
    want = set(labels.items())
    out = Counter()
    for (n, ls), v in samples.items():
        if n == name and want <= ls and v:
            d = dict(ls)
            out[tuple(d.get(k, "") for k in keys)] += v
    return out


def delta(before, after):
    out = after.copy()
    out.subtract(before)
    return +out  # (drops zeros)


async def scrape(token=TOKEN):
    response = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    return parse(response.content.decode())


@pytest.fixture
def metrics_token(settings):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS_TOKEN": TOKEN}


async def record(b, **kwargs):
    stream = await sync_to_async(rows.new_row)(None, b)
    last, _ = await runner.run_stream(stream, **kwargs)
    return stream.pk, last.pk


def terminal_usage(events):
    """The output/input tokens of the terminal event's usage among stored `events` (data)."""
    for data in events:
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        response = obj.get("response") if isinstance(obj, dict) else None
        if isinstance(response, dict) and isinstance(response.get("usage"), dict):
            return response["usage"]
    return None


class TestTheFiguresAgreeWithTheDatabase:
    async def test_deltas_between_two_scrapes_are_what_was_stored(
        self, upstream, settings, metrics_token
    ):
        settings.STREAMSCOPE = {
            **settings.STREAMSCOPE,
            "STALL_TIMEOUT_S": 0.4,
            "STALL_MAX_ATTEMPTS": 2,
            "CONNECT_MAX_ATTEMPTS": 2,
            "CONNECT_BACKOFF_S": 0.01,
        }
        before = await scrape()
        first_pk = (await Stream.objects.order_by("-pk").values_list("pk", flat=True).afirst()) or 0
        plan = [
            body("normal"),
            body("normal", model="gpt-oss-20b"),
            body("tools", model="mistral-small-3.2"),
            body("error"),
            body("http_500"),
            body("gap"),
            body("malformed_json"),
            body("missing_terminal"),
            body("reset"),
            body("unknown_event"),
            body("stall", stall_s=5),
        ]
        await asyncio.gather(*(record(b) for b in plan))
        # nothing listens there: a connection error, retried once on the same row
        await record(body("normal"), base_url=f"http://127.0.0.1:{free_port()}/v1")
        after = await scrape()

        streams = [s async for s in Stream.objects.filter(pk__gt=first_pk)]
        ids = [s.pk for s in streams]
        # (a stall's retry is a row of its own; on a busy machine another paced stream may stall)
        assert len(streams) >= len(plan) + 2

        got = delta(
            by(before, "streamscope_streams_total", "status", "error_code", source="live"),
            by(after, "streamscope_streams_total", "status", "error_code", source="live"),
        )
        assert got == Counter((s.status, s.error_code) for s in streams)
        assert ("failed", "connect_error") in got and ("stalled", "stall") in got

        findings = [f async for f in Finding.objects.filter(stream_id__in=ids)]
        got = delta(
            by(before, "streamscope_findings_total", "code", "severity"),
            by(after, "streamscope_findings_total", "code", "severity"),
        )
        assert got == Counter((f.code, f.severity) for f in findings)
        assert {"sequence_gap", "invalid_json", "stall", "missing_terminal"} <= {
            code for code, _ in got
        }

        def moved(name, **labels):
            return total(after, name, **labels) - total(before, name, **labels)

        events = await Event.objects.filter(stream_id__in=ids).acount()
        assert moved("streamscope_events_recorded_total", source="live") == events > 0
        assert moved("streamscope_stalls_total") == sum(f.code == "stall" for f in findings)
        assert moved("streamscope_retries_total", reason="stall") == sum(
            s.attempt > 1 for s in streams
        )
        assert moved("streamscope_retries_total", reason="connect") == 1
        assert moved("streamscope_events_lost_total") == 0

        # TTFT, per (requested, resolved) model, count and sum
        measured = [s for s in streams if s.ttft_ms is not None]
        got = delta(
            by(before, "gen_ai_server_time_to_first_token_seconds_count", *MODELS),
            by(after, "gen_ai_server_time_to_first_token_seconds_count", *MODELS),
        )
        assert got == Counter((s.requested_model, s.resolved_model) for s in measured)
        ttft_sum = moved("gen_ai_server_time_to_first_token_seconds_sum")
        assert ttft_sum == pytest.approx(sum(s.ttft_ms for s in measured) / 1e3, abs=1e-6)
        # a TTFT of 20 ms lands in the bucket whose upper bound is the next boundary
        assert moved("gen_ai_server_time_to_first_token_seconds_bucket", le="+Inf") == len(measured)

        durations = [s.duration_ms for s in streams if s.duration_ms is not None]
        assert moved("gen_ai_client_operation_duration_seconds_count") == len(durations)
        assert moved("gen_ai_client_operation_duration_seconds_sum") == pytest.approx(
            sum(durations) / 1e3, abs=1e-6
        )
        gaps = [s.inter_token_ms for s in streams if s.inter_token_ms is not None]
        assert moved("gen_ai_server_time_per_output_token_seconds_count") == len(gaps) > 0

        usages = []
        for s in streams:
            data = [d async for d in Event.objects.filter(stream=s).values_list("data", flat=True)]
            usage = terminal_usage(data)
            if usage is not None:
                usages.append(usage)
        assert usages
        for kind in ("input", "output"):
            name = "gen_ai_client_token_usage"
            assert moved(f"{name}_count", gen_ai_token_type=kind) == len(usages)
            assert moved(f"{name}_sum", gen_ai_token_type=kind) == sum(
                u[f"{kind}_tokens"] for u in usages
            )

        assert total(after, "streamscope_writer_queue_capacity_events") == 20000
        assert moved("streamscope_batch_commit_duration_seconds_count") > 0

    async def test_nothing_is_counted_while_metrics_are_off(
        self, upstream, settings, metrics_token
    ):
        before = await scrape()
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS": False}
        await record(body("gap"))
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS": True}
        after = await scrape()
        for name in ("streamscope_streams_total", "streamscope_events_recorded_total"):
            assert total(after, name) == total(before, name)


MODELS = ("gen_ai_request_model", "gen_ai_response_model")


class TestLabels:
    def test_a_thousand_junk_model_names_leave_a_real_models_series_intact(self, monkeypatch):
        # a client chooses the requested model: 404s for junk-model-N must not use up the
        # label values that alice's qwen3-coder needs (the attack, 60 were enough)
        monkeypatch.setattr(telemetry, "model_label", telemetry.LabelFold(50))
        monkeypatch.setattr(telemetry, "enabled", lambda: True)

        def observe(requested, resolved, status):
            rec = SimpleNamespace(
                checker=None, proxied=True, request_model=requested, proxy_delays=(),
                stream_id=None, project_id=None,
            )  # fmt: skip
            fields = {"status": status, "resolved_model": resolved, "ttft_ms": 12.0}
            telemetry._observe(rec, fields)

        for i in range(1000):
            observe(f"junk-model-{i}", "", "failed")
        observe("qwen3-coder", "qwen3-coder-2025", "completed")
        text, _ = telemetry.exposition("")
        series = [line for line in text.decode().splitlines() if "qwen3-coder" in line]
        assert any('gen_ai_request_model="qwen3-coder"' in line for line in series)
        assert any('gen_ai_response_model="qwen3-coder-2025"' in line for line in series)
        assert "junk-model" not in text.decode()
        assert len(telemetry.model_label.seen) <= 3  # other, "", the real ones

    def test_model_ids_beyond_the_cap_are_other(self):
        fold = telemetry.LabelFold(3)
        assert [fold(m) for m in ("a", "b", "a", "c", "d", "e", "b")] == [
            "a", "b", "a", "c", "other", "other", "b",
        ]  # fmt: skip

    def test_the_cap_is_a_setting(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS_MAX_MODELS": 1}
        fold = telemetry.LabelFold(lambda: telemetry.conf.get().metrics_max_models)
        assert (fold("gpt-oss-20b"), fold("mistral-small-3.2")) == ("gpt-oss-20b", "other")

    def test_a_model_id_is_cut_and_leaves_redacted(self, settings):
        settings.UPSTREAM_API_KEY = "sk-test-secret-key-123456"
        fold = telemetry.LabelFold(10)
        label = fold("model-sk-test-secret-key-123456")
        assert known_secrets.redact(label) == "model-[redacted]"  # /metrics leaves through the gate
        assert len(fold("x" * 5000)) == telemetry.LABEL_MAX_CHARS
        assert fold(None) == fold("") == ""

    async def test_a_streams_figures_carry_its_projects_slug_and_a_rename(
        self, upstream, metrics_token
    ):
        """A stream recorded in a project is counted under its slug (the series holds the id
        until the scrape); renaming the project renames its series."""
        team = await Project.objects.acreate(name="Team A", slug="team-a")
        before = await scrape()
        stream = await sync_to_async(rows.new_row)(None, body("normal"), project=team)
        await runner.run_stream(stream)
        after = await scrape()
        for name in (
            "streamscope_streams_total",
            "gen_ai_server_time_to_first_token_seconds_count",
        ):
            got = delta(by(before, name, "project"), by(after, name, "project"))
            assert got == Counter({("team-a",): 1}), name
        team.slug = "team-b"
        await team.asave()
        renamed = await scrape()
        assert total(renamed, "streamscope_streams_total", project="team-b") == 1
        assert total(renamed, "streamscope_streams_total", project="team-a") == 0
        assert not any(dict(ls).get("project", "").isdigit() for _, ls in renamed)

    def test_projects_beyond_the_cap_are_other_and_a_deleted_one_too(self, monkeypatch):
        monkeypatch.setattr(telemetry, "project_label", telemetry.LabelFold(2))
        monkeypatch.setattr(telemetry, "enabled", lambda: True)
        made = [Project.objects.create(name=f"P{i}", slug=f"p-{i}") for i in range(4)]

        def observe(project_id):
            rec = SimpleNamespace(
                checker=None, proxied=False, request_model="m", proxy_delays=(), stream_id=None,
                project_id=project_id,
            )  # fmt: skip
            telemetry._observe(rec, {"status": "completed", "resolved_model": "m-1"})

        def counts():
            text, _ = telemetry.exposition("")
            return by(parse(text.decode()), "streamscope_streams_total", "project")

        before = counts()
        for p in made:
            observe(p.pk)
        observe(None)  # a stream of no project: "", beyond the cap or not
        got = delta(before, counts())
        assert got == Counter({("p-0",): 1, ("p-1",): 1, ("other",): 2, ("",): 1})
        made[0].delete()
        assert delta(before, counts())[("other",)] == 3

    def test_finding_codes_outside_the_checkers_list_are_other(self):
        assert telemetry._finding_code("sequence_gap") == "sequence_gap"
        assert telemetry._finding_code("<script>") == "other"
        assert set(CODES) >= {"stall", "buffered_delivery"}

    async def test_a_hostile_upstream_cannot_grow_the_series(self, upstream, metrics_token):
        # the stream's own labels: a model id of the upstream's choosing, thousands of them
        seen_before = len(telemetry.model_label.seen)
        for i in range(telemetry.conf.get().metrics_max_models + 20):
            telemetry.model_label(f"hostile-model-{i}")
        assert len(telemetry.model_label.seen) <= max(
            seen_before, telemetry.conf.get().metrics_max_models
        )
        assert telemetry.model_label("yet-another") == "other"


class TestCost:
    """`streamscope_cost_total`: a finished stream's stored cost, once; nothing without a price."""

    @pytest.fixture(autouse=True)
    def _team_price_only(self, monkeypatch):
        from streams.store import prices

        # only the team's table prices here: the maintained list would know some simulator ids
        monkeypatch.setattr(prices, "maintained_rate", lambda *args: None)
        monkeypatch.setattr(telemetry, "model_label", telemetry.LabelFold(50))  # (room for ours)
        prices.forget()
        yield
        prices.forget()

    async def test_it_moves_by_the_stored_cost_and_not_without_a_price(
        self, upstream, metrics_token
    ):
        import datetime as dt
        from decimal import Decimal

        from streams.models import Price

        await Price.objects.acreate(
            model_pattern="gpt-oss-*", currency="EUR", input_per_million=Decimal("2"),
            output_per_million=Decimal("8"), effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        )  # fmt: skip
        name = "streamscope_cost_total"
        before = await scrape()
        _, priced = await record(body("normal", model="gpt-oss-20b"))
        _, unpriced = await record(body("normal", model="mistral-small-3.2"))
        after = await scrape()

        priced = await Stream.objects.aget(pk=priced)
        unpriced = await Stream.objects.aget(pk=unpriced)
        assert priced.cost_nanos > 0 and priced.usage_source == "reported"
        assert unpriced.cost_nanos is None and unpriced.usage_source == "reported"
        model = priced.resolved_model
        labels = dict(currency="EUR", gen_ai_response_model=model, estimated="false")
        moved = total(after, name, **labels) - total(before, name, **labels)
        assert moved == pytest.approx(priced.cost_nanos / 1e9, rel=1e-9)
        assert total(after, name) - total(before, name) == pytest.approx(moved, rel=1e-9)
        # the unpriced model's series never moved (an earlier test in this process may have
        # priced it: the counters are the process's)
        key = (unpriced.resolved_model,)
        assert (
            by(after, name, "gen_ai_response_model")[key]
            == by(before, name, "gen_ai_response_model")[key]
        )

    def test_an_estimate_is_labelled_and_a_missing_price_is_never_zero(self, monkeypatch):
        monkeypatch.setattr(telemetry, "enabled", lambda: True)
        rec = SimpleNamespace(
            checker=None, proxied=False, request_model="cost-model", proxy_delays=(),
            stream_id=None, project_id=None,
        )  # fmt: skip

        def cost(**labels):
            text, _ = telemetry.exposition("")
            return total(parse(text.decode()), "streamscope_cost_total", **labels)

        base = {"status": "completed", "resolved_model": "cost-model-1"}
        labels = dict(gen_ai_request_model="cost-model", gen_ai_response_model="cost-model-1")
        before = (
            cost(**labels, estimated="true", currency="USD"),
            cost(**labels, estimated="false", currency="EUR"),
        )
        telemetry._observe(
            rec, {**base, "cost_nanos": 1_500_000_000, "cost_currency": "USD",
                  "usage_source": "estimated", "input_tokens": 10, "output_tokens": 5},
        )  # fmt: skip
        telemetry._observe(rec, {**base, "cost_nanos": None, "usage_source": "reported"})
        telemetry._observe(rec, {**base, "cost_nanos": 250_000_000, "cost_currency": "EUR",
                                 "usage_source": "reported"})  # fmt: skip
        assert cost(**labels, estimated="true", currency="USD") - before[0] == 1.5
        assert cost(**labels, estimated="false", currency="EUR") - before[1] == 0.25

    def test_token_usage_is_the_stored_reported_usage_only(self):
        fields = {"usage_source": "reported", "input_tokens": 12, "output_tokens": None}
        assert telemetry.reported_tokens(fields) == {"input": 12}
        fields = {"usage_source": "estimated", "input_tokens": 12, "output_tokens": 30}
        assert telemetry.reported_tokens(fields) == {}
        assert telemetry.reported_tokens({"usage_source": ""}) == {}


class TestMetricsAccess:
    async def test_it_refuses_anonymous_scrapes_with_401(self, metrics_token):
        response = await AsyncClient().get("/metrics")
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")

    async def test_it_refuses_a_wrong_token_with_401(self, metrics_token):
        response = await AsyncClient().get("/metrics", headers={"Authorization": "Bearer nope"})
        assert response.status_code == 401

    async def test_token_guesses_are_throttled_like_the_apis(
        self, settings, metrics_token, throttle_clock
    ):
        from django.core.cache import cache

        cache.clear()
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "TOKEN_FAILURE_LIMIT": 3}
        statuses = []
        for guess in range(5):
            response = await AsyncClient().get(
                "/metrics", headers={"Authorization": f"Bearer guess-{guess}"}
            )
            statuses.append(response.status_code)
        assert statuses == [401, 401, 401, 429, 429]
        assert int(response["Retry-After"]) >= 1
        # the scraper's own token, never seen valid from here, waits too (no guess is compared)
        response = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 429
        cache.clear()

    async def test_it_refuses_any_token_when_none_is_configured(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS_TOKEN": ""}
        response = await AsyncClient().get("/metrics", headers={"Authorization": "Bearer "})
        assert response.status_code == 401

    async def test_it_returns_403_for_users_who_are_not_staff(self, people, metrics_token):
        response = await session(people.owner).get("/metrics")
        assert response.status_code == 403

    async def test_staff_and_the_token_get_the_text_format(self, people, metrics_token):
        for response in (
            await session(people.staff).get("/metrics"),
            await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}),
        ):
            assert response.status_code == 200
            assert response["Content-Type"].startswith("text/plain; version=")
            assert b"# TYPE gen_ai_server_time_to_first_token_seconds histogram" in (
                response.content
            )

    async def test_it_speaks_openmetrics_when_asked(self, metrics_token):
        response = await AsyncClient().get(
            "/metrics",
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Accept": "application/openmetrics-text; version=1.0.0",
            },
        )
        assert response["Content-Type"].startswith("application/openmetrics-text")
        assert response.content.rstrip().endswith(b"# EOF")


class TestViewers:
    async def test_a_viewer_is_counted_while_connected_and_gets_frames(self, people, metrics_token):
        before = await scrape()
        comm = ws("/ws/streams/?format=json", people.owner)
        connected, _ = await comm.connect()
        assert connected
        await comm.receive_from(timeout=10)  # the list's first frame
        during = await scrape()
        await comm.disconnect()
        after = await scrape()
        viewers = "streamscope_live_viewers"
        assert total(during, viewers) == total(before, viewers) + 1
        assert total(after, viewers) == total(before, viewers)
        sent = total(during, "streamscope_frames_sent_total") - total(
            before, "streamscope_frames_sent_total"
        )
        assert sent >= 1


# ---------------------------------------------------------------------------------------------
# Several processes


def _records(upstream, multiproc_dir, scenario, count):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir),
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "record", "--prompt", "Hi", "--count", str(count)]
        + ["--scenario", scenario, "--upstream", upstream.base_url, "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class TestSeveralProcesses:
    def test_the_counts_of_processes_sharing_a_directory_add_up_in_one_scrape(
        self, upstream, tmp_path
    ):
        multiproc = tmp_path / "prom"
        multiproc.mkdir()
        server = DaphneServer(
            upstream.base_url,
            overrides={"METRICS_TOKEN": TOKEN},
            env={"PROMETHEUS_MULTIPROC_DIR": str(multiproc)},
        )
        try:
            recorders = [
                _records(upstream, multiproc, "normal", 2),
                _records(upstream, multiproc, "gap", 3),
            ]
            ids = []
            for proc in recorders:
                out, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                ids += [json.loads(line)["id"] for line in out.splitlines() if line.strip()]
            assert len(ids) == 5
            response = httpx.get(
                f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
            )
            assert response.status_code == 200, response.text
            samples = parse(response.text)
            # the recorders ended cleanly: their live gauges went with them (their counters
            # stay); the server's are there
            live = [p for p in os.listdir(multiproc) if p.startswith("gauge_live")]
            assert any(p.endswith(f"_{server.proc.pid}.db") for p in live), live
            assert not [p for p in live for r in recorders if p.endswith(f"_{r.pid}.db")]
        finally:
            server.stop()
        streams = list(Stream.objects.filter(pk__in=ids))
        got = by(samples, "streamscope_streams_total", "status", "error_code")
        assert got == Counter((s.status, s.error_code) for s in streams)
        events = Event.objects.filter(stream_id__in=ids).count()
        assert total(samples, "streamscope_events_recorded_total") == events
        gaps = Finding.objects.filter(stream_id__in=ids, code="sequence_gap").count()
        assert total(samples, "streamscope_findings_total", code="sequence_gap") == gaps == 3
        assert total(samples, "gen_ai_server_time_to_first_token_seconds_count") == 5

    def test_a_killed_process_leaves_no_viewers_behind(self, tmp_path):
        multiproc = tmp_path / "prom"
        multiproc.mkdir()
        code = (
            "import os, sys, django\n"
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'dashboard.settings')\n"
            "django.setup()\n"
            "from streams.observe import telemetry\n"
            "telemetry.viewer_joined(); telemetry.viewer_joined()\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n"
        )
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout.readline().strip() == "ready"
            body, _ = telemetry.exposition(path=str(multiproc))
            assert total(parse(body.decode()), "streamscope_live_viewers") == 2
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
        body, _ = telemetry.exposition(path=str(multiproc))
        assert total(parse(body.decode()), "streamscope_live_viewers") == 0
        assert not [p for p in os.listdir(multiproc) if p.startswith("gauge_live")]
