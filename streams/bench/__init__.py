"""Benchmarks (`python manage.py bench <what>`): one module each, plus what they share."""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]


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
    `drop`): a fresh SQLite database there (migrated), quiet logs."""
    import os
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
    }
    manage(env, "migrate", "-v0")
    return tmp, env


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
