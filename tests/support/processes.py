"""Servers and commands in processes of their own, and waiting on what they do.

- `manage(*args)`: `manage.py <args>` as a process on the test database, interruptible by
  SIGINT as from a terminal; `command_env`: its environment (from
  tests/streams/run/test_lifecycle.py).
- `api_create` / `start_stream`: a stream started through a server's API over HTTP (from
  tests/streams/run/test_lifecycle.py and tests/e2e/test_inspection_e2e.py).
- `wait_until` / `wait_for`: poll a predicate until it holds (from
tests/streams/run/test_lifecycle.py and
  tests/e2e/test_inspection_e2e.py).
- `output` / `last_json`: a process that must succeed, its stdout; a JSON last line of it.
"""

import json
import os
import signal
import subprocess
import sys
import time

import httpx

from tests.conftest import REPO, database_url

# ---- commands -----------------------------------------------------------------------------


def output(argv, env, timeout=300):
    """`argv`'s stdout, run from the repository with `env`; its stderr's end when it fails."""
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def command_env(overrides=None, **extra):
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.live_settings",
        "DATABASE_URL": database_url(),
        "STREAMSCOPE_TEST_OVERRIDES": json.dumps(overrides or {}),
        **extra,
    }


def _interruptible():
    # A command started from a shell's background job (`… &`, as a CI script may run the
    # suite) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
    # the command is started as from a terminal, where Ctrl-C reaches it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def manage(*args, overrides=None, stdout=subprocess.PIPE, **env):
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        preexec_fn=_interruptible,
        env=command_env(overrides, **env),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


# ---- streams through a server's API ----------------------------------------------------------


def api_create(server, user, **body):
    body = {"input": "Tell me about Utrecht", "model": "gpt-oss-20b", **body}
    r = httpx.post(
        server.url + "/api/streams/",
        json=body,
        headers={"Authorization": f"Bearer {user.token}"},
        timeout=30,
    )
    return r


def start_stream(server, user, scenario="", **metadata):
    body = {"input": "Tell me about Utrecht", "metadata": metadata}
    if scenario:
        body["scenario"] = scenario
    r = httpx.post(
        f"{server.url}/api/streams/",
        json=body,
        headers={"Authorization": f"Bearer {user.token}"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


# ---- waiting ----------------------------------------------------------------------------------


def wait_until(predicate, timeout, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s")


def wait_for(predicate, timeout=30, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("timed out")
