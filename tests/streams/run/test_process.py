"""Process tuning (streams.run.process): the event loop every process runs on, uvloop, installed
before Daphne makes its loop, in each entry point; the collector and switch interval."""

import asyncio
import os
import subprocess
import sys

import pytest

from streams.run import process
from tests.conftest import REPO

# Daphne creates its loop when daphne.server is imported: this prints that loop's class.
DAPHNE_LOOP = "import daphne.server as s; print(type(s.twisted_loop).__module__.split('.')[0])"


def run(argv, **env):
    out = subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "dashboard.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


class TestInstall:
    @pytest.mark.parametrize("choice, want", [(None, "uvloop"), ("asyncio", "asyncio")])
    def test_the_chosen_loop_makes_new_loops(self, monkeypatch, choice, want):
        if choice is None:
            monkeypatch.delenv("STREAMSCOPE_EVENT_LOOP", raising=False)
        else:
            monkeypatch.setenv("STREAMSCOPE_EVENT_LOOP", choice)
        before = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(None)
        try:
            assert process.install_event_loop() == want
            loop = asyncio.new_event_loop()
            assert type(loop).__module__.startswith(want)
            loop.close()
        finally:
            asyncio.set_event_loop_policy(before)

    def test_unknown_value_is_a_clear_error(self, monkeypatch):
        monkeypatch.setenv("STREAMSCOPE_EVENT_LOOP", "trio")
        with pytest.raises(SystemExit, match="STREAMSCOPE_EVENT_LOOP: 'trio' is not one of"):
            process.install_event_loop()


class TestEntryPoints:
    """Each way a server starts puts Daphne (and everything else) on the chosen loop."""

    def test_manage_py(self):
        assert run([sys.executable, "manage.py", "shell", "-c", DAPHNE_LOOP]) == "uvloop"

    def test_manage_py_stdlib_loop(self):
        argv = [sys.executable, "manage.py", "shell", "-c", DAPHNE_LOOP]
        assert run(argv, STREAMSCOPE_EVENT_LOOP="asyncio") == "asyncio"

    def test_dashboard_server_module(self):
        # what `python -m dashboard.server` runs before Daphne's command line
        code = "import dashboard.server; " + DAPHNE_LOOP
        assert run([sys.executable, "-c", code]) == "uvloop"

    def test_plain_daphne_import_would_not(self):
        # why dashboard.server exists: Daphne's loop is made at import, before any app code
        assert run([sys.executable, "-c", DAPHNE_LOOP]) == "asyncio"


class TestTuning:
    """What `process.tune()` sets, each entry point applies at start-up (the writer no longer
    changes it as a side effect)."""

    TUNED = "import gc, sys; print(sys.getswitchinterval(), gc.get_freeze_count() > 0)"

    def test_manage_py(self):
        out = run([sys.executable, "manage.py", "shell", "-c", self.TUNED])
        assert out == f"{process.SWITCH_INTERVAL_S} True"

    def test_dashboard_server_module(self):
        out = run([sys.executable, "-c", "import dashboard.server; " + self.TUNED])
        assert out == f"{process.SWITCH_INTERVAL_S} True"

    def test_a_bare_interpreter_is_untouched(self):
        assert run([sys.executable, "-c", self.TUNED]) == "0.005 False"

    def test_sqlite_binds_none_bool_and_bytes_as_before(self):
        """tune()'s sqlite3 adapters (a shorter way through sqlite3's binding) bind the values
        sqlite3 bound without them: NULL, 0 and 1, the bytes as a blob."""
        import sqlite3

        for kind in (type(None), bool, bytes):
            assert (kind, sqlite3.PrepareProtocol) in sqlite3.adapters, kind
        db = sqlite3.connect(":memory:")
        got = db.execute(
            "SELECT ?, typeof(?), ?, ?, typeof(?), ?, typeof(?)",
            (None, None, True, False, True, b"\x00\xff", b"\x00\xff"),
        ).fetchone()
        assert got == (None, "null", 1, 0, "integer", b"\x00\xff", "blob")
