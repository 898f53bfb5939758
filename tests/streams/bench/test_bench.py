"""The benchmarks cannot rot: each `manage.py bench …` runs once, at the smallest size that still
goes through each of its stages (its servers, every pattern or arrival mode, the checks after
the run), through its real command line with --json, and must lose nothing.

What is asserted is that the figures exist and make sense (every line parses, the counts equal
what was sent, rates and ratios are positive and finite, nothing lost, duplicated, refused or
unrecorded), never how fast anything was: CI machines are too noisy for timings, and the
benchmarks print those for people.

Every bench runs in an environment whose load limits (streams.bench.LOAD_LIMITS) are far below
its load: a bench that did not size the servers it starts for its own load would lose events or
have requests refused, and exit non-zero. Tier 1 runs the SQLite / in-memory modes; tier 2
(`scale`) the PostgreSQL and Redis modes, which would rot unseen otherwise.
"""

import contextlib
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from streams.bench import (
    LOAD_LIMITS,
    MIGRATED_POSTGRES,
    MIGRATED_SQLITE,
    NOT_LOAD_LIMITS,
    migrate,
    server_limits,
)
from streams.core import conf
from tests.conftest import REPO

ON_SCALE_STACK = os.environ.get("DATABASE_URL", "").startswith("postgres") and bool(
    os.environ.get("REDIS_URL")
)
TIER_1 = pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith("postgres") or bool(os.environ.get("REDIS_URL")),
    reason="the SQLite and in-memory modes, once (tier 1); tier 2 runs the PostgreSQL and Redis "
    "ones",
)


def tier_2(test):
    return pytest.mark.scale(
        pytest.mark.skipif(not ON_SCALE_STACK, reason="needs PostgreSQL and Redis (CI tier 2)")(
            test
        )
    )


# Each load limit below what any bench here puts on its servers (3 viewers of one user, 2 clients
# of one token, …): the benches must raise them, or lose work and fail.
TIGHT = {f"STREAMSCOPE_{name}": "1" for name in LOAD_LIMITS}
TIGHT["STREAMSCOPE_MAX_SOCKETS_PER_USER"] = "2"


@pytest.fixture(scope="session")
def migrated(tmp_path_factory):
    """Where the first bench keeps its freshly migrated SQLite database for the others to copy
    (streams.bench.migrate): a fresh migrate costs ~20 CPU-seconds, more than most tiny runs."""
    return tmp_path_factory.mktemp("migrated") / "migrated.sqlite3"


@pytest.fixture
def bench(tmp_path, migrated):
    """`bench(*args)`: `manage.py bench *args --json` in a subprocess with TIGHT limits; its
    JSON lines. Fails the test when it exits non-zero or prints anything else on stdout. (Its
    temporary folders, databases and server logs, go to `tmp_path`; a fresh SQLite database is
    a copy of the first bench's, kept at `migrated`.)"""

    def run(*args):
        environment = {
            **os.environ,
            "TMPDIR": str(tmp_path),
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(40),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            MIGRATED_SQLITE: str(migrated),
            **TIGHT,
        }
        # In a session of its own: a bench that overruns is stopped with every server it
        # started (Daphne, the simulator, nginx, …), which would otherwise run on beside the
        # rest of the suite.
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "bench", *args, "--json"],
            cwd=REPO,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # (whatever it left behind)
        assert proc.returncode == 0, f"bench {' '.join(args)}:\n{stderr[-5000:]}"
        lines = [line for line in stdout.splitlines() if line.strip()]
        assert lines, f"bench {args[0]} printed nothing"
        return [json.loads(line) for line in lines]

    return run


def _stage_names():
    from streams.bench.profile import CONTEXTS, STAGES

    return {stage for stage, _, _ in CONTEXTS + STAGES} | {"other"}  # ("idle" is left out)


STAGE_NAMES = _stage_names()


def check_profile(line):
    """A tiny run's profile: sampled, its stages known, its shares of the working samples
    whole (there may be none at work)."""
    profile = line["profile"]
    assert line["profile_samples"] > 0, line
    assert set(profile) <= STAGE_NAMES, profile
    assert not profile or 99 <= sum(row["pct"] for row in profile.values()) <= 101, profile


def positive(value):
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def finite(value):
    return isinstance(value, int | float) and math.isfinite(value)


# ---------------------------------------------------------------------------------------------
# Every setting is weighed against the benchmarks


def test_every_benchmark_is_run_here():
    """CI runs each benchmark once, tiny, so that none can rot: a benchmark `manage.py bench`
    knows and no test of this module runs (`bench("<name>", …)`) fails here, by name."""
    import re

    from streams.management.commands.bench import BENCHMARKS

    run_here = set(re.findall(r'\bbench\(\s*"(\w+)"', Path(__file__).read_text()))
    assert not set(BENCHMARKS) - run_here, sorted(set(BENCHMARKS) - run_here)


def test_every_setting_of_conf_is_a_load_limit_or_says_why_not():
    names = set(conf.NAMES)
    load, other = set(LOAD_LIMITS), set(NOT_LOAD_LIMITS)
    assert not load & other, f"both a load limit and not: {sorted(load & other)}"
    missing = sorted(names - load - other)
    assert not missing, (
        f"streams/core/conf.py has {missing}: add each to streams/bench/__init__.py, to "
        "LOAD_LIMITS "
        "if a benchmark's load (one user, one token, one address, thousands of events) could "
        "hit it, so the benchmarks size their servers for it, or to NOT_LOAD_LIMITS with the "
        "reason none can"
    )
    # (server_limits reads each load limit; a stale reason elsewhere is only untidy)
    assert not load - names, f"no longer in conf.py: {sorted(load - names)}"
    assert all(reason for reason in NOT_LOAD_LIMITS.values())


def test_server_limits_raise_a_limit_to_the_load_and_never_lower_one():
    tight = server_limits({"STREAMSCOPE_MAX_SOCKETS_PER_USER": "2"}, sockets=6, patience_s=120)
    assert tight["STREAMSCOPE_MAX_SOCKETS_PER_USER"] == "6"
    assert float(tight["STREAMSCOPE_RELAY_SLOW_CLIENT_TIMEOUT_S"]) == 120
    assert set(tight) == {f"STREAMSCOPE_{name}" for name in LOAD_LIMITS}
    # a caller's higher setting stays; below the load, conf.py's default stays
    roomy = server_limits({"STREAMSCOPE_MAX_SOCKETS_PER_USER": "1000"}, sockets=6, streams=3)
    assert roomy["STREAMSCOPE_MAX_SOCKETS_PER_USER"] == "1000"
    assert roomy["STREAMSCOPE_WORKER_CONCURRENCY"] == str(conf.Settings().worker_concurrency)


# ---------------------------------------------------------------------------------------------
# Tier 1: SQLite, the in-memory channel layer


def check_ingest(lines, database, streams, events):
    assert [line["streams"] for line in lines] == streams
    for line in lines:
        assert line["database"] == database
        assert line["events"] == line["streams"] * events
        assert line["lost_events"] == line["bare_lost_events"] == line["failed_streams"] == 0
        assert positive(line["bare_events_per_s"]) and positive(line["pipeline_events_per_s"])
        assert positive(line["ratio"])
        assert line["ratio"] == pytest.approx(
            line["pipeline_events_per_s"] / line["bare_events_per_s"], rel=0.01
        )
        assert line["stored_events"] >= line["events"]
        assert positive(line["bytes_per_event"]) and positive(line["peak_rss_mb"])
        # every stream packed afterwards: every stored event, in less room
        assert line["packed_events"] == line["stored_events"]
        assert 0 < line["packed_bytes_per_event"] < line["bytes_per_event"]


@TIER_1
def test_ingest(bench):
    """2 concurrent streams, Prometheus figures kept and not (both in each round)."""
    lines = bench(
        "ingest", "--streams", "2", "--events", "50", "--repeat", "1",
        "--metrics", "on,off",
    )  # fmt: skip
    check_ingest(lines, "sqlite", [2], 50)
    for line in lines:
        assert line["layer"] == "memory"
        for mode in ("on", "off"):
            assert positive(line[f"metrics_{mode}_events_per_s"])
            assert positive(line[f"metrics_{mode}_cpu_us_per_event"])
            assert len(line[f"metrics_{mode}_runs"]) == 1
        assert finite(line["metrics_cost_pct"]) and finite(line["metrics_cpu_cost_pct"])


STORAGE_SCENARIOS = ["normal", "tools", "huge_delta"]


def check_storage(lines, database):
    """A line per scenario, then every one's together: every stored event packed, in less
    room than as rows (a scenario's few blocks may fit the pages an empty table has: 0 bytes
    added); the total is the scenarios' sum."""
    assert [line["scenario"] for line in lines] == [*STORAGE_SCENARIOS, "(every one)"]
    for line in lines:
        assert line["database"] == database and line["unstored_streams"] == 0
        assert line["events"] > 0 and line["streams"] > 0
        assert positive(line["rows_bytes_per_event"]) and finite(line["packed_bytes_per_event"])
        assert 0 <= line["packed_bytes"] < line["rows_bytes"]
    assert lines[-1]["packed_bytes"] > 0
    for line in lines[:-1]:
        assert line["packed_events"] == line["events"]
    assert lines[-1]["events"] == sum(line["events"] for line in lines[:-1])
    assert lines[-1]["packed_bytes"] == sum(line["packed_bytes"] for line in lines[:-1])


@TIER_1
def test_storage(bench):
    """Bytes per event at rest, rows and packed, each scenario apart (4 streams of each)."""
    lines = bench(
        "storage", "--streams", "4", "--scenarios", ",".join(STORAGE_SCENARIOS)
    )  # fmt: skip
    check_storage(lines, "sqlite")


@TIER_1
@pytest.mark.e2e
def test_timeline(bench):
    """A packed stream's timeline in Chromium: both streams' rows and chart timed, each load."""
    lines = bench("timeline", "--events", "1500", "--baseline-events", "100", "--loads", "1")
    assert [line["bench"] for line in lines] == ["timeline", "timeline"]
    base, big = lines
    assert abs(big["events"] - 1500) <= 375 and abs(base["events"] - 100) <= 25
    assert big["blocks"] == -(-big["events"] // 1000)
    for line in lines:
        assert line["problems"] == []
        for name in ("rows", "chart"):
            assert 0 < line[f"{name}_min_ms"] <= line[f"{name}_p50_ms"] <= line[f"{name}_max_ms"]
        assert positive(line["server_cpu_ms_per_load"])
    assert positive(big["rows_over_baseline"]) and positive(big["chart_over_baseline"])


@TIER_1
def test_simulator(bench):
    """Fresh and aged windows of a simulator driven by 2 clients: every response complete, the
    log's size reported, both CPU figures measured."""
    (line,) = bench(
        "simulator", "--clients", "2", "--responses", "100", "--window", "0.5",
        "--sentences", "1",
    )  # fmt: skip
    assert line["incomplete"] == 0
    assert line["aged"]["responses_before"] >= 100
    for window in (line["fresh"], line["aged"]):
        assert window["events"] > 0 and positive(window["cpu_us_per_event"]), window
        assert window["log_responses"] > 0 and window["rss_mb"] > 0
    assert positive(line["cpu_ratio"]) and positive(line["rate_ratio"])


@TIER_1
def test_capacity(bench):
    """Two steps of 2 and 3 proxied streams, each watched by a viewer, at a twentieth of a real
    model's pacing and no limit to pass: every event reaches its client, its viewer and the
    record, and the capacity is the last step. On a loaded machine every viewer of a step may
    join after its stream's last live event and read them all from the database: that step's
    viewer figure is then unmeasured, and the bench (rightly) claims no capacity for it and stops
    there; nothing may be lost either way."""
    *steps, summary = bench(
        "capacity", "--steps", "3,2", "--time-scale", "0.05", "--sentences", "2",
        "--limit-ms", "1e9",
    )  # fmt: skip
    unmeasured = [s["streams"] for s in steps if s["viewer_added_p99_ms"] is None]
    assert [step["streams"] for step in steps] == [2, 3][: len(steps)] and steps
    for step in steps:
        assert step["lost_events"] == 0
        assert step["within"] == (step["streams"] not in unmeasured), step
        if step["streams"] in unmeasured:
            assert step["viewer_live_events"] == 0, step
        assert step["events"] > 0 and step["viewer_live_events"] >= 0
        for name, value in step.items():
            if name.endswith("_ms") or name.endswith("_per_event"):
                unmeasured_viewer = name.startswith("viewer_") and step["streams"] in unmeasured
                assert finite(value) or (unmeasured_viewer and value is None), (name, value)
        assert positive(step["cpu_us_per_event"])
    measured = [s["streams"] for s in steps if s["within"]]
    assert summary["capacity"] == (measured[-1] if measured else 0)
    assert len(steps) == 2 or steps[-1]["streams"] in unmeasured
    assert summary["server_limits"]["MAX_SOCKETS_PER_USER"] >= 6


@TIER_1
def test_experiment(bench):
    """6 items × 2 variants at 3 at a time, as an experiment and started directly: nothing lost,
    both timed; the run page of 50 items rendered."""
    (line,) = bench(
        "experiment", "--items", "6", "--variants", "2", "--concurrency", "3",
        "--time-scale", "0.02", "--sentences", "1", "--page-items", "50", "--page-repeat", "2",
    )  # fmt: skip
    assert (line["streams"], line["lost"]) == (12, 0)
    assert positive(line["direct_s"]) and positive(line["experiment_s"])
    assert positive(line["ratio"]) and positive(line["page_p50_ms"])
    assert line["page_max_ms"] >= line["page_p50_ms"]
    (round_,) = line["rounds"]  # (each phase's time, CPU and load)
    assert round_["direct_s"] == line["direct_s"] and positive(round_["experiment_cpu_s"])
    assert positive(round_["direct_cpu_s"]) and round_["direct_load"] >= 0
    # (someone watched the pages while it ran)
    assert line["pages_asked"] >= 1 and line["pages_p99_ms"] >= line["pages_p50_ms"] > 0


@TIER_1
def test_usage(bench):
    """Usage and cost per finished stream, four kinds: each priced or not as it should be."""
    lines = bench("usage", "--streams", "5", "--events", "20")
    assert [(line["kind"], line["priced"]) for line in lines] == [
        ("reported, team price", True),
        ("estimated, genai-prices", True),
        ("estimated, simulator example price", True),
        ("estimated, no price", False),
    ]
    for line in lines:
        assert positive(line["finished_us"]) and positive(line["usage_and_cost_us"])
        assert positive(line["tokenizer_load_ms"])


@TIER_1
def test_alerts(bench):
    """One tick of rules over a seeded history, in a process apart and in a thread: every rule
    evaluated each time, its time and the event loop's lateness meanwhile measured."""
    lines = bench(
        "alerts", "--streams", "200", "--days", "2", "--rules", "20",
        "--baseline-s", "0.2", "--where", "both",
    )  # fmt: skip
    assert [line["where"] for line in lines] == ["apart", "thread"]
    for line in lines:
        assert (line["rules"], line["streams"], line["database"]) == (20, 200, "sqlite")
        assert positive(line["tick_ms"]) and positive(line["per_rule_ms"])
        assert line["ticks"] == 1  # (20 rules: well within a tick)
        assert finite(line["idle_tick_ms"]) and line["idle_tick_ms"] < line["tick_ms"]
        for name in (
            "lag_p99_ms", "lag_p99_tick_ms", "lag_p99_added_ms", "control_p99_ms",
            "control_p99_tick_ms",
        ):  # fmt: skip
            assert finite(line[name]) and line[name] >= 0


def check_relay(lines, streams, fast_events, patterns):
    assert [line["pattern"] for line in lines] == patterns
    for line in lines:
        assert line["streams"] == streams
        assert line["failed_streams"] == 0, line
        assert line["fast_events"] == streams * fast_events
        assert line["paced_events"] > 0
        assert positive(line["events_per_s"])
        for name in ("added_latency", "recorder_latency"):
            assert finite(line[f"{name}_p50_ms"]) and finite(line[f"{name}_p99_ms"])
        assert line["added_latency_p50_ms"] > 0
        assert positive(line["cpu_us_per_event"])  # the server's, over the paced run
        # the fixed stack's floors at the paced run's pace: httpx-sse reading, Daphne framing
        assert positive(line["alone_read_cpu_us_per_event"])
        assert line["alone_frame_cpu_us_per_frame"] >= 0
        if line["pattern"] != "stock":  # the stock pattern is there to show what it loses
            assert line["lost_events"] == line["duplicated_events"] == 0, line
            assert line["viewers_closed"] == {}, line
        # sized for this load above the environment's MAX_SOCKETS_PER_USER=2 and the rest at 1
        limits = line["server_limits"]
        assert limits["MAX_SOCKETS_PER_USER"] >= streams
        assert limits["MAX_CONCURRENT_PER_USER"] >= streams
        assert limits["WORKER_CONCURRENCY"] >= streams
        assert limits["RELAY_OUTBOX_MAX_EVENTS"] >= fast_events


@TIER_1
def test_relay_loses_nothing_with_more_viewers_than_the_environment_allows_one_user(bench):
    """3 viewers of one user against STREAMSCOPE_MAX_SOCKETS_PER_USER=2 in the bench's
    environment: the bench sizes its Daphne for its own viewers, so every event arrives. (Before
    it did, the third viewer was closed with 4029 and its events counted as lost, with exit
    status 0: `bench relay --streams 100` lost half its events to the cap of 50.)"""
    lines = bench("relay", "--streams", "3", "--fast-events", "20", "--sentences", "1")
    check_relay(lines, 3, 20, ["stock", "batched-layer", "batched"])


@TIER_1
def test_pages(bench):
    from streams.bench.pages import PAGES

    lines = bench("pages", "--sizes", "200", "--repeat", "1")
    assert [line["page"] for line in lines] == [name for name, _ in PAGES]
    for line in lines:
        assert line["database"] == "sqlite" and line["streams"] == 200 and line["as"] == "staff"
        assert positive(line["server_ms_p50"]) and line["server_ms_max"] >= line["server_ms_p50"]
        assert positive(line["cpu_ms_p50"])  # (the process's CPU time: SQLite is in it)
        assert isinstance(line["queries"], int) and line["queries"] > 0


@TIER_1
def test_pages_over_projects(bench):
    """`--projects`: the streams spread over team projects, each page timed as staff (every
    project) and as a member working in one; the staff-only pages as staff alone."""
    from streams.bench.pages import PAGES

    lines = bench("pages", "--sizes", "200", "--repeat", "1", "--projects", "3",
                  "--pages", "30d")  # fmt: skip
    named = [n for n, _ in PAGES if "30d" in n]
    assert [(line["as"], line["page"]) for line in lines] == [
        *(("staff", n) for n in named),
        *(("member", n) for n, url in PAGES if "30d" in n and not url.startswith("/analytics/")),
    ]
    for line in lines:
        assert positive(line["server_ms_p50"]) and line["queries"] > 0


@TIER_1
def test_pages_on_a_standing_database(bench, migrated, tmp_path):
    """`--database-url` times a database seeded once, as often as asked (its staff user kept
    from the run before), and leaves it as it was; `--pages` keeps to the pages named."""
    from streams.bench.pages import PAGES

    url = f"sqlite:///{tmp_path}/standing.sqlite3"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SECRET_KEY": secrets.token_urlsafe(40)}
    migrate({**env, MIGRATED_SQLITE: str(migrated)})  # (a copy, after another bench)
    manage = [sys.executable, "manage.py", "seed_demo", "--streams", "60", "--users", "alice,bob"]
    subprocess.run(manage, cwd=REPO, env=env, check=True, capture_output=True, timeout=120)
    for _ in range(2):
        lines = bench("pages", "--database-url", url, "--pages", "search", "--repeat=1")
        assert [line["page"] for line in lines] == [n for n, _ in PAGES if "search" in n]
        assert {(line["database"], line["streams"]) for line in lines} == {("sqlite", 60)}
    assert os.path.exists(f"{tmp_path}/standing.sqlite3")


@TIER_1
def test_egress(bench):
    lines = bench("egress", "--events", "50", "--repeat", "1")
    pages = {line["page"]: line for line in lines if line["what"] == "page"}
    frames = [line for line in lines if line["what"] == "frame"]
    assert set(pages) >= {"timeline", "export .json", "export .sse", "latency"}
    assert [f["events"] for f in frames] == [10, 1]
    for line in (*pages.values(), *frames):
        for key in ("page_ms", "gate_ms", "encode_us", "gate_us"):
            if key in line:
                assert math.isfinite(line[key]) and line[key] > 0, line
    assert not [line for line in lines if line["what"] == "check"]


@TIER_1
def test_proxy(bench):
    """2 clients of one token against STREAMSCOPE_PROXY_MAX_CONCURRENT=1 in the environment,
    both arrival patterns, at a twentieth of a real model's pacing."""
    lines = bench(
        "proxy", "--concurrency", "2", "--rounds", "1", "--time-scale", "0.05",
        "--sentences", "2", "--profile",
    )  # fmt: skip
    assert [(line["arrivals"], line["concurrency"]) for line in lines] == [
        ("steady", 2),
        ("burst", 2),
    ]
    from streams.bench.proxy import STEADY_STREAMS

    for line in lines:
        assert line["lost_events"] == 0
        assert line["events"] > 0
        # steady: every client's streams but its first of the round; burst: one each
        per_client = STEADY_STREAMS - 1 if line["arrivals"] == "steady" else 1
        assert line["samples"] == 2 * per_client
        for name, value in line.items():
            if name.endswith("_ms") or name.endswith("_per_event"):
                assert finite(value), (name, value)
        assert positive(line["daphne_floor_p50_ms"])
        assert line["cpu_us_per_event"] >= 0 and line["relay_cpu_us_per_event"] >= 0
        assert line["alone_cpu_us_per_event"] >= 0  # the server's own, no upstream
        assert line["server_limits"]["PROXY_MAX_CONCURRENT"] >= 2
        # the compiled floor, measured in the same rounds (Debian's nginx)
        assert finite(line["nginx_ttft_p50_ms"]) and line["nginx_cpu_us_per_event"] >= 0
        assert finite(line["relay_over_nginx_ttft_p50_ms"])
        # recording's own minimum in the same run, at the batch size the proxy committed
        assert positive(line["events_per_commit"])
        assert positive(line["recording_sql_us_per_event"])
        assert positive(line["recording_written_us_per_event"])
        # the server's CPU by stage, from py-spy's samples of a round of its own (this short,
        # nearly all of them waiting)
        check_profile(line)


@TIER_1
def test_proxy_measures_the_formats_in_the_same_rounds(bench):
    """`--format responses,chat,messages`: one line per format, in that order, each from the
    same interleaved rounds (so as many samples each), nothing lost, every figure finite."""
    lines = bench(
        "proxy", "--format", "responses,chat,messages", "--concurrency", "1",
        "--rounds", "2", "--arrivals", "steady", "--time-scale", "0.05", "--sentences", "2",
        "--against", "none",
    )  # fmt: skip
    assert [line["format"] for line in lines] == ["responses", "chat", "messages"]
    from streams.bench.proxy import STEADY_STREAMS

    for line in lines:
        assert line["lost_events"] == 0 and line["events"] > 0, line
        assert line["samples"] == 2 * (STEADY_STREAMS - 1), line
        assert line["cpu_us_per_event"] > 0 and finite(line["added_ttft_p50_ms"]), line
        # (events that came in one read of the client: a read's CPU is its events')
        assert line["events_per_read"] >= 1, line
        per_read = line["cpu_us_per_event"] * line["events_per_read"]
        assert line["cpu_us_per_read"] == pytest.approx(per_read, rel=0.01, abs=0.2), line
        assert line["formats_apart"] is None, line  # (2 rounds: too few to resample)


@TIER_1
def test_formats_own_work_per_event(bench):
    """`bench formats`: each format's answers fed to the recorder's per-event code, every
    figure finite and above 0, the first format the baseline of the others."""
    lines = bench("formats", "--streams", "2", "--repeat", "1", "--sentences", "1")
    assert [line["format"] for line in lines] == ["responses", "chat", "messages"]
    for line in lines:
        assert line["streams"] == 2 and line["events_per_stream"] > 5, line
        assert line["bytes_per_event"] > 50, line
        for key in ("sse_us_per_event", "check_us_per_event", "all_us_per_event"):
            assert finite(line[key]) and line[key] > 0, line
    assert lines[0]["all_vs_first"] == 1.0
    ratio = lines[1]["all_us_per_event"] / lines[0]["all_us_per_event"]
    assert lines[1]["all_vs_first"] == pytest.approx(ratio, abs=0.001)


def test_how_far_apart_the_formats_are_over_resampled_rounds():
    """The formats line's spread and its 95 % interval (`_apart_over_rounds`): the point figures
    are of all rounds (CPU summed over them, the TTFT p50 of all their streams), each draw
    resamples the same rounds for every format, and rounds that agree give a tight interval
    around the point while rounds that disagree give a wide one."""
    from streams.bench.proxy import _apart_over_rounds, _Measured

    def measured(cpu_us, ttft_ms):
        """A format's rounds: round r has 100 events at cpu_us[r] µs each and 4 streams with
        an added TTFT of ttft_ms[r]."""
        m = _Measured({"direct": None, "proxy": None})
        m.rounds["proxy"] = [(us * 100 / 1e6, 100) for us in cpu_us]
        for r, ms in enumerate(ttft_ms):
            for i in range(4):
                m.ttft["direct"][r * 1000 + i] = 1_000_000
                m.ttft["proxy"][r * 1000 + i] = 1_000_000 + int(ms * 1e6)
        return m

    steady = [measured([500] * 6, [1.0] * 6), measured([540] * 6, [1.2] * 6)]
    apart = _apart_over_rounds(steady)
    assert apart["rounds"] == 6
    assert apart["cpu_us_per_event_pct"] == 8.0 and apart["cpu_us_per_event_95"] == [8.0, 8.0]
    assert apart["added_ttft_p50_ms_pct"] == 20.0
    assert apart["added_ttft_p50_ms_95"] == [20.0, 20.0]

    # One round where the second format cost twice as much: the point moves, the interval
    # spans from the rounds without it to the draws that took it several times.
    noisy = [measured([500] * 6, [1.0] * 6), measured([500] * 5 + [1000], [1.0] * 6)]
    apart = _apart_over_rounds(noisy)
    assert apart["cpu_us_per_event_pct"] == pytest.approx(100 * (3500 / 3000 - 1), abs=0.1)
    low, high = apart["cpu_us_per_event_95"]
    assert low == 0.0 and high > apart["cpu_us_per_event_pct"]
    assert _apart_over_rounds(noisy) == apart  # (seeded)

    assert _apart_over_rounds([measured([500] * 2, [1.0] * 2)] * 2) is None
    # a format without a measured stream: its TTFT spread is none, its CPU spread stands
    quiet = measured([500] * 4, [])
    apart = _apart_over_rounds([measured([500] * 4, [1.0] * 4), quiet])
    assert apart["added_ttft_p50_ms_pct"] is None and apart["added_ttft_p50_ms_95"] is None
    assert apart["cpu_us_per_event_pct"] == 0.0


# ---------------------------------------------------------------------------------------------
# Tier 2: PostgreSQL and Redis


def _postgres(database):
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def migrated_postgres():
    """A database `migrate` made on the tier's PostgreSQL server, the template of the benches'
    (a fresh migrate costs ~20 CPU-seconds; a copy, none), dropped at the end."""
    import psycopg

    name = f"bench_migrated_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_postgres("postgres"), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": _postgres(name)}
    manage = [sys.executable, "manage.py", "migrate", "-v0"]
    subprocess.run(manage, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    yield name
    with psycopg.connect(_postgres("postgres"), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def scratch_postgres(migrated_postgres, monkeypatch):
    """A database on the tier's PostgreSQL server as `migrate` makes it (a copy of
    `migrated_postgres`, which the bench is told: it migrates none), dropped afterwards (the
    bench fills the database it is given)."""
    import psycopg

    monkeypatch.setenv(MIGRATED_POSTGRES, migrated_postgres)

    name = f"bench_ingest_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_postgres("postgres"), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE "{migrated_postgres}"')
    yield _postgres(name)
    with psycopg.connect(_postgres("postgres"), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def check_recording(lines, database):
    assert [(line["database"], line["batch"], line["events"]) for line in lines] == [
        (database, 1, 40),
        (database, 8, 40),
    ]
    for line in lines:
        for name in ("sql_us_per_event", "written_us_per_event"):
            assert positive(line[name]), (name, line)
        # (each printed rounded, a commit's to 0.1 µs and an event's to 0.01: CI saw 289.7
        # against 289.75 × 1, which rounds to 289.8)
        product = line["sql_us_per_event"] * line["batch"]
        assert abs(line["sql_us_per_commit"] - product) <= 0.05 + 0.005 * line["batch"] + 1e-9


@TIER_1
def test_recording(bench):
    """The SQL alone of storing event rows, 1 and 8 per commit, on a fresh SQLite database."""
    check_recording(bench("recording", "--batch", "1,8", "--events", "40"), "sqlite")


@tier_2
def test_recording_on_postgres(scratch_postgres, bench):
    lines = bench(
        "recording", "--batch", "1,8", "--events", "40",
        "--database-url", scratch_postgres,
    )  # fmt: skip
    check_recording(lines, "postgresql")


@tier_2
def test_ingest_on_postgres(scratch_postgres, bench):
    lines = bench(
        "ingest", "--database", "postgres", "--postgres-url", scratch_postgres,
        "--streams", "2", "--events", "50", "--repeat", "1",
    )  # fmt: skip
    check_ingest(lines, "postgres", [2], 50)
    assert lines[0]["layer"] == "redis"


@tier_2
def test_storage_on_postgres(scratch_postgres, bench):
    lines = bench(
        "storage", "--database", "postgres", "--postgres-url", scratch_postgres,
        "--streams", "4", "--scenarios", ",".join(STORAGE_SCENARIOS),
    )  # fmt: skip
    check_storage(lines, "postgres")


@tier_2
def test_pages_on_postgres(bench, migrated_postgres, monkeypatch):
    from streams.bench.pages import PAGES

    # (the database the bench creates is a copy of it, not migrated again)
    monkeypatch.setenv(MIGRATED_POSTGRES, migrated_postgres)

    lines = bench(
        "pages", "--database", "postgres", "--postgres-url", os.environ["DATABASE_URL"],
        "--sizes", "200", "--repeat", "1",
    )  # fmt: skip
    assert [line["page"] for line in lines] == [name for name, _ in PAGES]
    for line in lines:
        assert line["database"] == "postgres" and line["streams"] == 200
        assert positive(line["server_ms_p50"]) and line["queries"] > 0


@tier_2
def test_relay_on_redis_with_a_worker(bench):
    """Recording in a `stream_worker`, relaying through Redis, with one worker stream at a time
    and 2 sockets per user in the environment. The bench's Redis database is one of its own:
    its socket leases and throttles must not meet the tests' (database 0)."""
    import redis

    url = urlunsplit(urlsplit(os.environ["REDIS_URL"])._replace(path="/9"))
    try:
        lines = bench(
            "relay", "--layer", "redis", "--redis-url", url, "--runner", "worker",
            "--streams", "3", "--fast-events", "20", "--sentences", "1", "--patterns", "batched",
            "--profile",
        )  # fmt: skip
    finally:
        redis.Redis.from_url(url).flushdb()
    check_relay(lines, 3, 20, ["batched"])
    # the relaying Daphne's CPU by stage (py-spy), in a paced run of its own
    (line,) = lines
    check_profile(line)
    assert all(line["layer"] == "redis" and line["runner"] == "worker" for line in lines)


def test_a_sample_is_put_in_the_stage_of_its_innermost_frame_that_names_one():
    """streams/bench/profile.py's stages, on stacks as py-spy writes them (outermost first)."""
    from streams.bench.profile import count, shares, stage_of

    loop = ["<module> (manage.py:22)", "Loop__run (loop.c:20313)", "Handle__run (loop.c:70959)"]
    commit = [
        *loop,
        "Writer._commit (streams/ingest/writer.py:170)",
        "write_batch (streams/store/rows.py:700)",
        "execute (django/db/backends/utils.py:100)",
        "pysqlite_cursor_execute (cursor.c:800)",
    ]
    finish = [*loop, "finished (streams/store/rows.py:400)", "execute (django/db/utils.py:1)"]
    ingest = "Recording.ingest (streams/ingest/recorder.py:170)"
    checked = [*loop, ingest, "Checker.feed (streams/core/checks.py:600)", "loads (json/x.py:3)"]
    chat = "ChatChecker.feed (streams/core/formats/chat.py:200)"
    chat_checked = [*loop, ingest, chat, "loads (json/x.py:3)"]  # (every format's checker)
    waiting = [*loop, "epoll_pwait (libc.so.6)"]
    unknown = ["0x7fee (libc.so.6)", "main (python3.11:1)"]
    assert [stage_of(s) for s in (commit, finish, checked, chat_checked, waiting, unknown)] == [
        "commit", "finish", "check", "check", "idle", "other",
    ]  # fmt: skip
    raw = [";".join(commit) + " 30", ";".join(waiting) + " 50", ";".join(checked) + " 10", ""]
    counts = count(raw)
    assert counts == {"commit": 30, "idle": 50, "check": 10}
    assert shares(counts) == {"commit": 75.0, "check": 25.0}  # idle left out
