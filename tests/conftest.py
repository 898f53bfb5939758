"""Shared fixtures: real servers on 127.0.0.1 only."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "streams"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout=20.0, proc=None):
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


class SimulatorProcess:
    """The simulator in its own process, so its timing is not disturbed by the code under test."""

    def __init__(self):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.root = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "simulate_upstream", "--port", str(self.port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, proc=self.proc)

    def log(self, response_id):
        r = httpx.get(f"{self.root}/_simulator/responses/{response_id}", timeout=10)
        r.raise_for_status()
        return r.json()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def simulator_process():
    sim = SimulatorProcess()
    yield sim
    sim.stop()


@pytest.fixture
def upstream(simulator_process, settings):
    """Point the pipeline at the simulator process."""
    settings.UPSTREAM_BASE_URL = simulator_process.base_url
    return simulator_process


@pytest.fixture(autouse=True, scope="session")
def _close_writer_connection():
    yield
    from django.db import connections

    from streams.recorder import db_executor

    # The writer thread holds its own connection; PostgreSQL refuses to drop the test
    # database while it is open.
    db_executor().submit(connections.close_all).result(timeout=10)


# --- Relay: people, sessions, tokens, and a real Daphne -----------------------------------


class People:
    """An owner, a stranger and a staff member, each with a session cookie and a token."""

    def __init__(self):
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.test import Client

        from streams.models import ApiToken

        User = get_user_model()
        for name, staff in (("owner", False), ("stranger", False), ("staff", True)):
            user = User.objects.create_user(name, password=f"pw-{name}-123", is_staff=staff)
            client = Client()
            client.force_login(user)
            cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
            user.cookie = f"{settings.SESSION_COOKIE_NAME}={cookie}"
            user.token = ApiToken.issue(user, name="tests")
            setattr(self, name, user)


@pytest.fixture
def people(transactional_db):
    return People()
