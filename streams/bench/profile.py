"""Where a server's CPU goes, by stage: py-spy samples of its threads (C frames included,
`--native`), each sample put in the stage of its innermost frame that names one.

`Sampler(pid)` attaches to a running process until `stop()`, which returns `{stage: samples}`;
`shares(counts)` turns them into percentages. The stages:

- per event: read (the upstream's bytes: httpx, httpcore, h11, our network stream, SSE
  decoding), check (the protocol checker, every format's), record (numbering, milestones, the
  writer's queue), commit (the batch's SQL and the database driver), publish (after the
  commit, to the channel layer or the in-process fan-out), frame (the consumer's frames,
  Daphne's and autobahn's WebSocket), to client (the proxy's bytes to its client through
  Daphne's HTTP), sockets out (Twisted's socket writes, to clients and viewers);
- per request: auth (token and session), row (the stream's row made), finish (the row
  finished: figures, usage, cost), rollups (the aggregates), page (views and templates);
- threads (handing work to a thread: sync_to_async, run_in_executor) and loop (the event loop
  and what it reads, not attributable to one stage).

Samples of a thread waiting (IDLE) are left out. py-spy (`pip install py-spy`, the `bench`
extra) must be able to ptrace the process (root, or `kernel.yama.ptrace_scope` 0). Sampling
with C frames pauses the process at every sample, so benches profile a round of their own and
never their measured ones.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# (stage, a piece of the frame's file path, the functions of that file it covers or None: all).
# CONTEXTS first: a sample with such a frame anywhere in its stack is that per-request stage's
# (the SQL under `finished` is finishing). Then STAGES, tried in order on each frame from the
# innermost out; the first match names the sample's stage.
CONTEXTS = [
    ("auth", "streams/serve/proxy.py", {"_admit", "_authenticate", "_user_for", "_remember"}),
    ("auth", "django/contrib/auth/", None),
    ("auth", "django/contrib/sessions/", None),
    ("row", "streams/store/rows.py", {"new_row", "build_request_body"}),
    ("row", "streams/run/services.py", None),
    ("finish", "streams/store/rows.py", {"finished", "usage_fields", "reprice"}),
    ("finish", "streams/core/usage.py", None),
    ("finish", "streams/core/pricing.py", None),
    ("finish", "streams/store/prices.py", None),
    ("finish", "streams/ingest/recorder.py", {"_finish"}),
    ("rollups", "streams/store/aggregates.py", None),
]
STAGES = [
    ("check", "streams/core/checks.py", None),
    ("check", "streams/core/formats/", None),  # (the Chat and Messages checkers)
    ("record", "streams/ingest/recorder.py", None),
    ("commit", "streams/store/rows.py", None),
    ("commit", "streams/ingest/writer.py", {"_commit", "_stream_changes", "_sort_batch"}),
    ("commit", "django/db/", None),
    ("commit", "psycopg", None),
    ("commit", "sqlite3", None),
    ("record", "streams/ingest/writer.py", None),
    ("publish", "streams/live/relay.py", None),
    ("publish", "channels/layers.py", None),
    ("publish", "channels_redis/", None),
    ("frame", "streams/live/", None),
    ("frame", "daphne/ws_protocol.py", None),
    ("frame", "autobahn/", None),
    ("to client", "streams/serve/proxy.py", None),
    ("to client", "streams/serve/egress.py", None),
    ("to client", "daphne/", None),
    ("sockets out", "twisted/internet/tcp.py", {"writeSomeData", "doWrite"}),
    ("sockets out", "twisted/python/util.py", {"untilConcludes"}),
    ("threads", "concurrent/futures/thread.py", {"submit"}),
    ("threads", "asgiref/sync.py", None),
    ("read", "streams/ingest/upstream.py", None),
    ("read", "streams/ingest/network.py", None),
    ("read", "httpx_sse/", None),
    ("read", "httpcore/", None),
    ("read", "h11/", None),
    ("read", "httpx/", None),
    ("page", "dashboard/", None),
    ("page", "django/template/", None),
    ("loop", "asyncio/", None),
    ("loop", "uvloop", None),
    ("loop", "twisted/", None),
    ("loop", "selectors.py", None),
]
PER_REQUEST = ("auth", "row", "finish", "rollups", "page")
# Samples per second. Each pauses the process to read its C stacks: at 200 a server with 100
# viewers was held up long enough for WebSocket handshakes to fail.
RATE = 50
FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>[^()]+?)(?::\d+)?\)$")
# A thread waiting, not working (py-spy's own idle test misses waits in C): one of these among
# a sample's innermost frames makes it "idle", left out of the shares.
IDLE = (
    "epoll_wait",
    "epoll_pwait",
    "_queue_SimpleQueue_get",
    "pthread_cond_timedwait",
    "pthread_cond_wait",
    "sem_timedwait",
    "PyThread_acquire_lock_timed",
    "select (",
    "poll (",
    "nanosleep",  # (SQLite's busy handler waiting for the write lock, among others)
)


def stage_of(stack):
    """The stage of one sample (`stack`: its frames, outermost first, as py-spy writes them)."""
    if any(marker in frame for frame in stack[-4:] for marker in IDLE):
        return "idle"
    frames = [(m["function"], m["file"]) for m in map(FRAME.match, reversed(stack)) if m]
    for rules in (CONTEXTS, None):
        for function, file in frames:
            for stage, piece, functions in rules or STAGES:
                if piece in file and (functions is None or function in functions):
                    return stage
    return "other"


def count(raw_lines):
    """{stage: samples} of py-spy's raw output (a line per stack: frames;…;frames COUNT)."""
    out = {}
    for line in raw_lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        stage = stage_of(stack.split(";"))
        out[stage] = out.get(stage, 0) + int(n)
    return out


def shares(counts):
    """{stage: % of the samples at work (idle ones left out)}, largest first."""
    busy = {stage: n for stage, n in counts.items() if stage != "idle"}
    total = sum(busy.values()) or 1
    ranked = sorted(busy.items(), key=lambda kv: -kv[1])
    return {stage: round(100 * n / total, 1) for stage, n in ranked}


def by_stage(counts, cpu_us_per_event, events, requests):
    """A profiled run's samples by stage: each stage's share, and that share of the CPU per
    event measured without the profiler (per-request stages: also per request)."""
    out = {}
    for stage, pct in shares(counts).items():
        row = {"pct": pct, "us_per_event": round(cpu_us_per_event * pct / 100, 2)}
        if stage in PER_REQUEST and requests:
            row["us_per_request"] = round(row["us_per_event"] * events / requests, 1)
        out[stage] = row
    return out


def stages_text(profile):
    """`by_stage`'s figures on one line, for people."""
    return "CPU by stage (% of samples, µs per event): " + ", ".join(
        f"{stage} {row['pct']} % {row['us_per_event']}"
        + (f" ({row['us_per_request']} µs per request)" if "us_per_request" in row else "")
        for stage, row in profile.items()
    )


def py_spy():
    """py-spy's executable: beside this Python's (its virtualenv), else on the PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Sampler:
    """py-spy recording `pid` (every thread, C frames) until `stop()`."""

    def __init__(self, pid, rate=RATE):
        executable = py_spy()
        if executable is None:
            raise SystemExit("--profile needs py-spy: pip install py-spy (the `bench` extra)")
        self.dir = Path(tempfile.mkdtemp(prefix="streamscope-profile-"))
        self.output = self.dir / "samples.txt"
        self.proc = subprocess.Popen(
            [executable, "record", "--pid", str(pid), "--rate", str(rate)]
            # (--idle: waiting samples too, which `stage_of` sorts out itself: a run short
            # enough to be all waiting still has samples)
            + ["--native", "--threads", "--idle", "--format", "raw", "--output", str(self.output)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self):
        """{stage: samples} of what was recorded."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=60)
        if not self.output.exists():
            raise SystemExit(f"py-spy wrote no samples: {err[-2000:]}")
        with self.output.open() as f:
            counts = count(f)
        if keep := os.environ.get("STREAMSCOPE_PROFILE_KEEP"):
            shutil.copy(self.output, keep)  # the raw stacks, for flamegraph.pl or a closer look
        shutil.rmtree(self.dir, ignore_errors=True)
        return counts
