"""Log lines are an exit: a real server (`python -m dashboard.server`, Daphne's command line,
as the suite's live servers run) is asked for URLs holding secrets, whole and in pieces, and
made to log them; its access log and everything its loggers wrote (the captured stdout and
stderr) hold no fragment of them, in any form a reader could decode. And the same in-process:
a record of any logger, its traceback included, is redacted as it is made."""

import logging
import time
from urllib.parse import quote

import httpx
import pytest

from streams.store import known_secrets
from tests.conftest import DaphneServer
from tests.support.leaks import SecretFinder

KEY = "sk-LOGS-CANARY-7c1d9e2f4a6b"  # (its private core: `7c1d9e2f`, docs/security.md)
PASS_KEY = "pk-pass-LOGS-Z9y8X7w6V5u4"  # a pass-through key: sealed, no `sk-` shape
SECRETS = {"key": KEY, "pass": PASS_KEY}


@pytest.fixture
def server(people, simulator_process):
    server = DaphneServer(simulator_process.base_url, env={"UPSTREAM_API_KEY": KEY})
    yield server
    server.stop()


def _log(server):
    with open(server.log.name, errors="replace") as f:
        return f.read()


def test_a_real_servers_access_log_and_loggers_hold_no_secret(server, people):
    known_secrets.remember(PASS_KEY)  # sealed: every process knows it a second later at most
    time.sleep(known_secrets.REFRESH_S + 0.2)
    token = people.owner.token
    urls = [
        f"/?q={KEY}",  # the key searched for whole
        f"/?q=incorrect+{KEY[5:24]}*",  # a walker's guess: a piece of it
        "/?q=" + quote(KEY[3:25], safe=""),  # percent-encoded
        "/?q=" + "".join(f"%{b:02X}" for b in KEY[2:23].encode()),  # every byte encoded
        f"/?q={PASS_KEY}&page=1",
        f"/streams.csv?q={KEY[4:24]}",
        f"/no-such-page/{KEY}/",  # a 404: Django logs its path
        f"/streams/999999/?tail={PASS_KEY}",
    ]
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for url in urls:
                assert client.get(url, headers={"Cookie": people.owner.cookie}).status_code in (
                    200,
                    400,
                    404,
                )
            auth = {"Authorization": f"Bearer {token}"}
            assert client.get(f"/api/streams/?q={KEY[3:23]}", headers=auth).status_code == 200
            bad = {"Authorization": f"Bearer ss_{KEY}"}  # a wrong token with the key in it
            assert client.get("/api/streams/", headers=bad).status_code == 401
    finally:
        known_secrets.forget_all()
    server.proc.terminate()  # (its log is complete once it exited)
    server.proc.wait(10)
    log = _log(server)
    leaks = SecretFinder(SECRETS).find(log)
    assert not leaks, "\n".join(f"{label} {frag!r} in …{ctx!r}…" for label, frag, ctx, _ in leaks)
    # not a log that said nothing: the access lines and the 404's warning are there, redacted
    assert '"GET /?q=[redacted]"' in log and '"GET /?q=incorrect+[redacted]' in log
    assert "Not Found: /no-such-page/[redacted]/" in log
    assert '"GET /?q=[redacted]&page=1"' in log  # (the pass-through key)
    assert log.count('"GET /') >= len(urls)


def test_every_record_of_any_logger_is_redacted_as_it_is_made(settings, caplog):
    settings.UPSTREAM_API_KEY = KEY
    caplog.set_level(logging.INFO)
    try:
        raise ValueError(f"Incorrect API key provided: {KEY}")
    except ValueError:
        logging.getLogger("daphne.http_protocol").exception("failed for %s", KEY[2:24])
    logging.getLogger("some.library").warning("GET /?q=%s", quote(KEY, safe=""))
    assert KEY[2:10] not in caplog.text
    assert caplog.text.count("[redacted]") >= 3  # the message, the traceback, the URL


def test_share_links_and_tokens_are_credentials_in_a_log_line(caplog):
    from streams.access import shares, tokens

    assert {shares.PREFIX, tokens.TOKEN_PREFIX} <= set(known_secrets.OWN_CREDENTIAL_PREFIXES)
    link = "sl_" + "Q" * 43
    token = "ss_" + "w" * 43
    caplog.set_level(logging.INFO)
    logging.getLogger("daphne.access").info('"GET /s/%s/streams/7/ HTTP/1.1" 200', link)
    logging.getLogger("some.library").warning("Authorization: Bearer %s", token)
    assert "Q" * 8 not in caplog.text and "w" * 8 not in caplog.text
    assert "GET /s/sl_[redacted]/streams/7/" in caplog.text
    assert "Bearer ss_[redacted]" in caplog.text


def test_an_invitations_link_is_a_credential_in_a_log_line(caplog):
    """An access log's line of an invitation's link would let its reader join the project."""
    from streams.access import invitations

    assert invitations.PREFIX in known_secrets.OWN_CREDENTIAL_PREFIXES
    secret = invitations.PREFIX + "K" * 43
    caplog.set_level(logging.INFO)
    logging.getLogger("daphne.access").info('"POST /invitations/%s/accept/ HTTP/1.1" 302', secret)
    assert "K" * 8 not in caplog.text
    assert "POST /invitations/inv_[redacted]/accept/" in caplog.text


UNCAUGHT = """
import django, sys, threading
django.setup()
def fail():
    raise RuntimeError("upstream said: Incorrect API key provided: " + sys.argv[1])
thread = threading.Thread(target=fail, name="echo")
thread.start()
thread.join()
raise ValueError(sys.argv[1])
"""


def test_an_exception_nobody_caught_is_printed_redacted():
    import os
    import subprocess
    import sys

    from tests.support.paths import REPO

    env = {**os.environ, "UPSTREAM_API_KEY": KEY, "DJANGO_SETTINGS_MODULE": "dashboard.settings"}
    done = subprocess.run(
        [sys.executable, "-c", UNCAUGHT, KEY],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1  # (the main thread's exception still ends it)
    out = done.stdout + done.stderr
    assert "uncaught exception in thread echo" in out and "RuntimeError" in out
    assert "ValueError" in out and out.count("[redacted]") >= 2
    assert not SecretFinder({"key": KEY}).find(out), out
