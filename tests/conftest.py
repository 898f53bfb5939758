"""Shared fixtures: real servers on 127.0.0.1 only."""

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from streams.bench import free_port, wait_for_port  # noqa: F401  (tests import them from here)
from streams.run import process

# The loop production runs on (manage.py and dashboard.server install it), before pytest-django's
# django.setup() makes Daphne's loop; and the same process tuning (streams/run/process.py).
process.install_event_loop()
process.tune()

REPO = Path(__file__).resolve().parents[1]
# Real captures, inside the repository (see their SOURCES.md): a fresh clone tests on its own.
FIXTURES = REPO / "tests" / "fixtures" / "streams"


@pytest.fixture(autouse=True, scope="session")
def _flush_tried_again_after_a_deadlock():
    """A transactional test ends by TRUNCATE-ing every table, while a live server may still be
    at work in its own transaction (finishing a stream the test has seen end, an alert tick).
    PostgreSQL breaks such a deadlock by failing one side, at times the TRUNCATE (CI: "Database
    test_streamscope couldn't be flushed", and the next test's users already existed): the
    flush is tried again, as the server's side would be."""
    import time

    from django.core.management.base import CommandError
    from django.test import TransactionTestCase

    teardown = TransactionTestCase._fixture_teardown

    def tried_again(self):
        for attempt in range(3):
            try:
                return teardown(self)
            except CommandError as exc:
                if attempt == 2 or "deadlock detected" not in str(exc.__cause__):
                    raise
                time.sleep(0.5)

    TransactionTestCase._fixture_teardown = tried_again
    yield
    TransactionTestCase._fixture_teardown = teardown


def pytest_addoption(parser):
    parser.addoption(
        "--server-tests-only",
        action="store_true",
        help="run only the tests a database or channel-layer server can change (CI's tier 2)",
    )


def pytest_collection_modifyitems(config, items):
    """CI's tier 2 runs the suite again on PostgreSQL and Redis. A test that neither reaches the
    database (pytest-django's `django_db_setup` under its fixtures, which every server fixture
    and `db`/`transactional_db` depend on, or the `django_db` mark) nor is marked `scale` runs the
    same code against the same nothing there: with --server-tests-only it is left to tier 1.
    By fixture, not by list: a new test that touches the database is in both tiers."""
    if not config.getoption("--server-tests-only"):
        return
    keep, left = [], []
    for item in items:
        reaches = "django_db_setup" in getattr(item, "fixturenames", ())
        marked = item.get_closest_marker("django_db") or item.get_closest_marker("scale")
        (keep if reaches or marked else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = keep


@pytest.fixture(autouse=True)
def _searches_counted_per_test(monkeypatch):
    """Searches are throttled per user id (streams/access/throttle.py), and the ids of users come
    again from test to test: each test counts its own, in keys of its own."""
    from streams.access import throttle

    monkeypatch.setattr(throttle, "_SEARCH_KEY", f"{throttle._SEARCH_KEY}:{os.urandom(6).hex()}")


@pytest.fixture
def throttle_clock(monkeypatch):
    """The throttles' clock (streams/access/throttle.py), stopped at the test's start; move it
    with `throttle_clock.now += seconds`. A burst the test sends then counts in one window:
    with the real clock a burst that straddles a window's turn counts as a little less than it
    was (the previous window is weighed by how much of it still overlaps), and a test that
    counts to the limit fails once in a while (CI: the metrics token's 6th request, 200)."""
    import types

    from streams.access import throttle

    clock = types.SimpleNamespace(now=throttle.time.time())
    clock.time = lambda: clock.now
    monkeypatch.setattr(throttle, "time", clock)
    return clock


def log_in_people(target):
    """An owner, a stranger and a staff member on `target` (a view test), each with a
    logged-in Django test client as `<name>_client` (healthchecks' shared test base)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    for name, staff in (("owner", False), ("stranger", False), ("staff", True)):
        # no password: hashing one costs ~0.25 s, and force_login needs none
        user = get_user_model().objects.create_user(name, is_staff=staff)
        client = Client()
        client.force_login(user)
        setattr(target, name, user)
        setattr(target, f"{name}_client", client)


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


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Close the connections of the writer thread and asgiref's thread before the test database
    is dropped (PostgreSQL refuses to drop a database that has sessions)."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from streams.ingest.writer import db_executor

    db_executor().submit(connections.close_all).result(timeout=10)
    executor = getattr(SyncToAsync, "single_thread_executor", None)
    if executor is not None:
        executor.submit(connections.close_all).result(timeout=10)


# --- Relay: people with sessions and tokens, and a real Daphne -----------------------------


class People:
    """An owner, a stranger and a staff member, each with a session cookie and a token."""

    def __init__(self):
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.test import Client

        from streams.models import ApiToken

        User = get_user_model()
        for name, staff in (("owner", False), ("stranger", False), ("staff", True)):
            # no password: hashing one costs ~0.25 s, and force_login needs none
            user = User.objects.create_user(name, is_staff=staff)
            client = Client()
            client.force_login(user)
            cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
            user.cookie = f"{settings.SESSION_COOKIE_NAME}={cookie}"
            user.token = ApiToken.issue(user, name="tests")
            setattr(self, name, user)


@pytest.fixture(scope="session")
def _relay_db_connections(django_db_setup):
    """Torn down before the test database is dropped: close the relay's reader threads'
    connections (PostgreSQL refuses to drop a database that has sessions)."""
    yield
    from streams.live.consumers import close_db_connections

    close_db_connections()


@pytest.fixture
def people(transactional_db, _relay_db_connections):
    return People()


@pytest.fixture
async def _disconnect_communicators():
    """Disconnects the WebSocket communicators of tests.support.clients.ws after the test (named
    in the `pytestmark` of the modules that use `ws`)."""
    # A failed test leaves its consumers running; with the Redis layer their tasks would then
    # keep the event loop from closing.
    from tests.support.clients import disconnect_communicators

    yield
    await disconnect_communicators()


def database_url():
    """The URL of the database this test session uses (pytest-django's test database), for
    servers started in other processes."""
    from urllib.parse import quote

    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///" + str(s["NAME"])  # an absolute path: sqlite:////abs/path
    auth = quote(s["USER"] or "")
    if s["PASSWORD"]:
        auth += ":" + quote(s["PASSWORD"])
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class DaphneServer:
    """`python -m dashboard.server dashboard.asgi:application` (Daphne) on 127.0.0.1 in its own
    process, on the test database and the simulator process. `overrides` are STREAMSCOPE knobs
    (tests/live_settings), `env` extra environment (e.g. CHANNEL_CAPACITY)."""

    def __init__(self, upstream_url, overrides=None, env=None, port=None):
        import json
        import tempfile

        from django.conf import settings

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.origin = self.url
        self.log = tempfile.NamedTemporaryFile(prefix="daphne-", suffix=".log", delete=False)
        environment = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "tests.live_settings",
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,  # the sessions the test creates
            "DATABASE_URL": database_url(),
            "UPSTREAM_BASE_URL": upstream_url,
            "STREAMSCOPE_TEST_OVERRIDES": json.dumps(overrides or {}),
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dashboard.server", "-b", "127.0.0.1", "-p", str(self.port)]
            + ["dashboard.asgi:application"],
            cwd=REPO,
            env=environment,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(self.port, timeout=30, proc=self.proc)
        except Exception:
            said = self.output()  # before `stop` removes the log
            self.stop()
            raise RuntimeError(f"daphne did not start:\n{said}") from None

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-5000:]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()
        os.unlink(self.log.name)


@pytest.fixture(scope="module")
def live_server_daphne(django_db_setup, simulator_process, _relay_db_connections):
    """A real Daphne (HTTP + WebSockets) for the tests of one module. Tests that use it need
    `transactional_db` (or `people`) so that what they create is committed and visible to it."""
    server = DaphneServer(simulator_process.base_url)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _language_let_go():
    """A test's language ends with it: Django's LocaleMiddleware activates a request's language
    in the thread that served it and leaves it there, so a test client's Dutch request made
    every later test in that thread Dutch."""
    yield
    from django.utils import translation

    translation.deactivate()


@pytest.fixture(autouse=True)
def _imports_inline(monkeypatch):
    """Uploads are read by a thread pool (streams/ingest/import_jobs.py) that cannot see a
    test's open transaction: read them in the request's thread (tests/streams/ingest/test_imports.py
    covers the pool)."""
    from streams.ingest import import_jobs

    monkeypatch.setattr(import_jobs, "RUN_INLINE", True)


@pytest.fixture(autouse=True, scope="session")
def _test_client_through_the_gate():
    """Django's test client calls the views without the ASGI application, so without the egress
    gate (streams/serve/egress.py) that every response leaves through. Its responses get the gate's
    rules the way the gate's HTTP exit applies them (headers; a whole body, or a streamed one
    with carry-over), so what a test reads is what a browser would. The ASGI exit itself is
    tested in tests/streams/serve/test_egress.py, and every route through a real Daphne in
    tests/streams/serve/test_egress_walk.py."""
    from django.test import client as test_client

    from streams.core import redaction
    from streams.store import known_secrets

    def through_gate(response):
        rules = known_secrets.rules()
        if not rules:
            return response
        for name, value in list(response.items()):
            response[name] = rules.text(value)
        if not getattr(response, "streaming", False):
            response.content = known_secrets.redact_bytes(response.content)
            return response
        pieces = response.streaming_content
        if not response.is_async:  # the gate's rules for a body in pieces, as the export command's
            response.streaming_content = known_secrets.redact_pieces(
                p if isinstance(p, bytes) else p.encode() for p in pieces
            )
            return response
        redactor = redaction.StreamRedactor(rules)

        async def redacted():
            async for piece in pieces:
                if out := redactor.feed(piece if isinstance(piece, bytes) else piece.encode()):
                    yield out
            if tail := redactor.close():
                yield tail

        response.streaming_content = redacted()
        return response

    original = test_client.ClientHandler.__call__
    original_async = test_client.AsyncClientHandler.__call__

    def call(self, environ):
        return through_gate(original(self, environ))

    async def acall(self, scope):
        return through_gate(await original_async(self, scope))

    test_client.ClientHandler.__call__ = call
    test_client.AsyncClientHandler.__call__ = acall
    yield
    test_client.ClientHandler.__call__ = original
    test_client.AsyncClientHandler.__call__ = original_async
