"""Benchmarks (`python manage.py bench <what>`): one module each, plus what they share."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.management.base import CommandError

BASE_DIR = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# The limits of the servers a bench starts
#
# A bench puts one user's, one token's and one client address's worth of load on the servers it
# starts, far above what one person does, and Streamscope's limits (streams/core/conf.py) are sized
# for people. Each STREAMSCOPE_* setting is either a limit that load could hit, raised to what
# the bench is about to do (LOAD_LIMITS, applied by `server_limits`), or says here why no bench can
# hit it (NOT_LOAD_LIMITS). tests/streams/bench/test_bench.py fails when conf.py has a setting that
# is in neither, so a new limit is weighed against the benchmarks when it is added; one that slips
# through anyway shows as lost events or refused viewers, and a bench with either exits non-zero
# (`fail_if`).

# conf name -> the load figure that sizes it (the keyword of `server_limits`)
LOAD_LIMITS = {
    # WebSockets the bench holds open at once, all of one user
    "MAX_SOCKETS_PER_USER": "sockets",
    # streams running at once, all of one user (not checked on the benches' paths today: their
    # rows are made by rows.new_row / create_proxied, but they are one user's streams)
    "MAX_CONCURRENT_PER_USER": "streams",
    # streams one worker runs at once (bench relay --runner worker: all of them, as inprocess)
    "WORKER_CONCURRENCY": "streams",
    # proxied requests in flight at once, all with one token
    "PROXY_MAX_CONCURRENT": "requests",
    # events one viewer may be behind by before it is closed: at most its whole stream
    "RELAY_OUTBOX_MAX_EVENTS": "viewer_events",
    # how long a viewer may read slowly before it is closed: as long as the bench's client waits
    "RELAY_SLOW_CLIENT_TIMEOUT_S": "patience_s",
    # searches of one user in a minute (bench pages: each search page, warmed up and timed)
    "SEARCH_MAX_PER_MINUTE": "searches",
}

NOT_LOAD_LIMITS = {
    # sign-in and teams: how people sign in and join, which no benchmark does
    "BREAK_GLASS_USERS": "who may sign in with a password when it is off: sign-in, not load",
    "PASSWORD_LOGIN": "whether passwords sign in: the benches' users are made, not signed in",
    "INVITATION_EXPIRY_DAYS": "how long an invitation link works: no bench invites",
    "ALERT_TICK_S": "how often rules are due: `bench alerts` evaluates every rule at once",
    "JOBS_APART": "where the heavy jobs run, not a limit: `bench alerts --where` measures both",
    "PUBLIC_URL": "where the links of a notification point: an address, not a limit",
    "ALERT_ALLOWED_HOSTS": "which receivers a channel may reach: an address list, not a load",
    "NOTIFY_TIMEOUT_S": "a delivery's time limit: no bench delivers notifications",
    "NOTIFY_BACKOFF_S": "a failed delivery's wait: no bench delivers notifications",
    "NOTIFY_MAX_ATTEMPTS": "a delivery's attempts: no bench delivers notifications",
    **{
        f"OIDC_{name}": "the identity provider's configuration: no bench signs in through one"
        for name in (
            "AUTHORIZATION_ENDPOINT",
            "CLIENT_ID",
            "CLIENT_SECRET",
            "END_SESSION_ENDPOINT",
            "GROUPS",
            "GROUPS_CLAIM",
            "ISSUER",
            "JWKS_ENDPOINT",
            "PROVIDER_NAME",
            "SCOPES",
            "SIGN_ALGO",
            "TIMEOUT_S",
            "TOKEN_ENDPOINT",
            "USERINFO_ENDPOINT",
        )
    },  # fmt: skip
    "BATCH_MAX_EVENTS": "batching, part of what is measured",
    "BATCH_MAX_AGE_MS": "batching, part of what is measured",
    "COUNT_WRITE_INTERVAL_MS": "how often a count is rewritten, part of what is measured",
    "QUEUE_MAX_EVENTS": "backpressure: readers wait while it is full, nothing is dropped",
    "STORAGE_RETRY_S": "a database that refuses batches fails streams: reported as lost events",
    "RECEIPT_CLOCK": "which clock stamps receipts, not a limit",
    "UPSTREAM_TRANSPORT": "which upstream client is measured, not a limit",
    "UPSTREAM_MAX_EVENT_BYTES": "the simulator's events are a few KiB, far under it",
    "STALL_TIMEOUT_S": "the simulator never pauses that long; a stalled stream fails the bench",
    "STALL_MAX_ATTEMPTS": "retries after a stall, which fails the bench anyway",
    "CONNECT_MAX_ATTEMPTS": "retries of connection errors to the local simulator",
    "CONNECT_BACKOFF_S": "retries of connection errors to the local simulator",
    "CONNECT_TIMEOUT_S": "connecting to the local simulator; a failed stream fails the bench",
    "HEARTBEAT_S": "liveness of running rows, not a limit",
    "HEARTBEAT_STALE_S": "only a blocked process misses it; its streams fail the bench",
    "SWEEP_INTERVAL_S": "how often dead processes' rows are looked for, not a limit",
    "RUNNER": "bench relay sets it from --runner; the other benches do not start streams by it",
    "RETRY_INTERRUPTED": "no bench process dies mid-run",
    "WORKER_POLL_S": "a fallback poll beside wake-ups, not a limit",
    "RETAIN_EVENTS_DAYS": "the benches' streams are minutes old; bench pages never prunes",
    "COMPACT_AFTER_S": "the benches' servers pack nothing (migrated_env); bench ingest packs "
    "its streams itself",
    "COMPACT_STREAMS_PER_RUN": "how many streams a sweep packs, not how many it serves; 0 in "
    "the benches' servers (migrated_env)",
    "RETAIN_STREAMS_DAYS": "the benches' streams are minutes old; bench pages never prunes",
    "MAX_INPUT_CHARS": "the benches' inputs are one short sentence",
    "UPLOAD_MAX_BYTES": "no bench uploads",
    "RELAY_INLINE_MAX_BYTES": "larger events are read from the database, nothing is dropped",
    "RELAY_SEND_HIGH_WATER_BYTES": "above it batches wait in the outbox (RELAY_OUTBOX_MAX_EVENTS)",
    "RELAY_IDLE_CHECK_S": "a quiet viewer reads the database once, nothing is dropped",
    "RELAY_LOCAL_FANOUT": "bench relay sets it per pattern (batched-layer)",
    "PROXY_ON_DISCONNECT": "the bench's proxied clients read every stream to its end",
    "PROXY_MAX_BODY_BYTES": "the benches' request bodies are a few hundred bytes",
    "PROXY_TOKEN_CACHE_S": "how long a checked token is trusted, not a limit",
    "PROXY_CLIENT_BUFFER_BYTES": "backpressure: the proxy waits for its client, nothing is dropped",
    "PROXY_SLOW_CLIENT_TIMEOUT_S": "the bench's clients read as fast as they can; one that stops "
    "for this long fails the bench anyway",
    "METRICS": "bench ingest --metrics sets it",
    "METRICS_TOKEN": "no bench scrapes /metrics",
    "METRICS_MAX_MODELS": "folds label values, drops no data; the simulator has a few models",
    "CSV_MAX_ROWS": "no bench downloads the streams list as CSV",
    "PLAYGROUND_PREVIOUS_RESPONSE_ID": "no bench uses the playground",
    "SECURE": "deployment, not load (the benches' servers are plain HTTP on 127.0.0.1)",
    "SSL_REDIRECT": "deployment, not load",
    "HSTS_SECONDS": "deployment, not load",
    "HSTS_INCLUDE_SUBDOMAINS": "deployment, not load",
    "HSTS_PRELOAD": "deployment, not load",
    "LOGIN_FAILURE_LIMIT": "no bench logs in with a password (bench pages: force_login)",
    "LOGIN_COOLOFF_S": "no bench logs in with a password",
    "TOKEN_FAILURE_LIMIT": "the benches present only valid tokens, which are never counted",
    "TOKEN_FAILURE_WINDOW_S": "the benches present only valid tokens, which are never counted",
    "IMPORT_MAX_PER_MINUTE": "no bench imports",
    "IMPORT_MAX_CONCURRENT": "no bench imports",
    "IMPORT_ABANDON_S": "no bench imports",
    "REQUEST_BODY_TIMEOUT_S": "the benches' request bodies are small and sent at once",
    "SHUTDOWN_GRACE_S": "how long a stopping server waits for its streams; benches stop theirs "
    "after every stream ended",
    "REDACT_KEY_PREFIXES": "what is redacted, not a limit",
    "PUBLIC_SHARE_LINKS": "who may open a share link, not a limit; no bench opens one",
}


def server_limits(
    env, *, streams=0, sockets=0, requests=0, viewer_events=0, patience_s=0, searches=0
):
    """The STREAMSCOPE_* variables that size a bench server's limits for the load the bench is
    about to put on it, to be merged into `env` (the server's environment otherwise). Each
    LOAD_LIMITS setting is raised to its load figure where `env` (or conf.py's default) has it
    lower, never lowered: a caller who set one higher keeps it.

    - streams: streams running at once (one user);
    - sockets: WebSockets open at once (one user);
    - requests: proxied requests in flight at once (one token);
    - viewer_events: events one viewer may fall behind by;
    - patience_s: how long the bench's clients wait through silence before giving up;
    - searches: searches of the text one user makes within a minute."""
    from streams.core import conf

    need = {
        "streams": streams,
        "sockets": sockets,
        "requests": requests,
        "viewer_events": viewer_events,
        "patience_s": patience_s,
        "searches": searches,
    }
    current = conf.build(conf.from_environ(env))
    out = {}
    for name, load in LOAD_LIMITS.items():
        have = getattr(current, name.lower())
        value = max(have, type(have)(need[load]))
        out[f"STREAMSCOPE_{name}"] = str(value)
    return out


def limits_of(variables):
    """{conf name: value} of `server_limits`' variables, for a bench's output."""
    return {
        name.removeprefix("STREAMSCOPE_"): float(v) if "." in v else int(v)
        for name, v in variables.items()
    }


def fail_if(problems, what):
    """Exit non-zero (after the figures were printed) when a bench lost or refused anything:
    its figures would describe less work than it claims."""
    if problems:
        raise CommandError(
            f"bench {what}: " + "; ".join(problems) + " — the figures above are not valid"
        )


def process_cpu_s(pid):
    """CPU seconds (user + system) the process `pid` has used so far, from /proc, with its
    children's, live and ended: a server's writer process (streams/ingest/writer_process.py) is
    the server's CPU."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, and the ended children's
    total = ticks / os.sysconf("SC_CLK_TCK")
    for child in _children(pid):
        try:
            total += process_cpu_s(child)
        except (FileNotFoundError, ProcessLookupError):
            pass  # (ended meanwhile: counted by its parent once waited for)
    return total


def _children(pid):
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            found += map(int, (task / "children").read_text().split())
        except FileNotFoundError:
            pass
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc=None, timeout=30):
    """Until something listens on 127.0.0.1:`port` (or `proc` exits, or time runs out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


def migrated_env(name, drop=()):
    """A temporary folder and the environment of the bench's processes (this one's, without
    `drop`): a fresh SQLite database there (migrated), quiet logs, and no streams packed in
    the background: a run longer than COMPACT_AFTER_S (a 20-round `bench proxy`, 20 minutes)
    had its first rounds' events packed by the server's sweep while it measured, which cost the
    server CPU in the middle of a round and took those events out of the table the bench counts
    them in (2,000 events a format "lost" on 2026-12-06). `bench ingest` packs its own."""
    import secrets
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f"streamscope-bench-{name}-"))
    env = {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(40),
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        "STREAMSCOPE_COMPACT_STREAMS_PER_RUN": "0",
    }
    migrate(env)
    return tmp, env


# Where a migrated SQLite database is kept for the next bench to copy instead of migrating anew
# (only tests/streams/bench/ sets it: a fresh migrate renders every migration's models, ~20
# CPU-seconds, the most a tiny run costs; the first bench of a test session migrates, the others
# copy its database).
MIGRATED_SQLITE = "BENCH_MIGRATED_SQLITE"
# On PostgreSQL: a database migrated as above, the template of the database `bench pages`
# creates; set, it also says that every PostgreSQL database a bench is given is a copy of it
# (the tests make theirs so), so none is migrated again.
MIGRATED_POSTGRES = "BENCH_MIGRATED_POSTGRES"


def migrate(env):
    """`manage.py migrate` on the database of `env`. With $BENCH_MIGRATED_SQLITE set, a fresh
    SQLite file is a copy of the database there (as `migrate` made it: the same tables, rows and
    triggers), or, when there is none yet, is migrated and then copied there; with
    $BENCH_MIGRATED_POSTGRES set, a PostgreSQL database is a copy already."""
    template = env.get(MIGRATED_SQLITE)
    parts = urlsplit(env["DATABASE_URL"])
    if env.get(MIGRATED_POSTGRES) and parts.scheme.startswith("postgres"):
        return  # (a copy of a migrated database: `migrate` would find nothing to do)
    path = Path(unquote(parts.path[1:]))
    path = path if path.is_absolute() else BASE_DIR / path
    fresh = template and parts.scheme == "sqlite" and not path.exists()
    if fresh and os.path.exists(template):
        shutil.copyfile(template, path)
        return
    manage(env, "migrate", "-v0")
    if fresh and not os.path.exists(f"{path}-wal"):  # (whole in its file: the migrate ended)
        shutil.copyfile(path, f"{template}.{os.getpid()}")
        os.replace(f"{template}.{os.getpid()}", template)


def manage(env, *args):
    """`manage.py *args` in a fresh process with `env`; its stdout. Exits the bench if it fails."""
    proc = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"manage.py {args[0]} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_child(bench, spec, env):
    """`manage.py bench <bench> --child <spec as JSON>` (one configuration in a process of its
    own, its database in `env`); the JSON lines it printed."""
    out = manage(env, "bench", bench, "--child", json.dumps(spec))
    return [json.loads(line) for line in out.splitlines() if line.strip()]
