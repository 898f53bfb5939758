"""`manage.py serve` and `manage.py check` on a fresh checkout: quiet about a STATIC_ROOT that
`collectstatic` has not made (dashboard/static_files.py), while the finders serve the files."""

import signal
import subprocess
import sys

import httpx
import pytest
from django.conf import settings

from tests.conftest import REPO, free_port, wait_for_port
from tests.support.processes import command_env, manage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fresh_checkout():
    if settings.STATIC_ROOT.exists():  # (collectstatic was run here: nothing to prove)
        pytest.skip(f"{settings.STATIC_ROOT} exists")


def test_check_says_nothing_about_static_files(fresh_checkout):
    out = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO, env=command_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "No directory at" not in out.stdout + out.stderr


def test_serve_starts_quietly_and_serves_static_files(fresh_checkout):
    port = free_port()
    proc = manage("serve", f"127.0.0.1:{port}")
    try:
        wait_for_port(port, proc=proc, timeout=60)
        r = httpx.get(f"http://127.0.0.1:{port}/static/js/dom.js", timeout=10)
        assert r.status_code == 200 and "serverFragment" in r.text
        assert httpx.get(f"http://127.0.0.1:{port}/login/", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    assert f"dashboard: http://127.0.0.1:{port}/" in stdout
    assert "No directory at" not in stdout + stderr, stderr[-2000:]
