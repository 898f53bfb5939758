"""The README's nginx block, run as written (on a free port, plain HTTP, its upstream pointed at
a real Daphne): a browser's login form and an upload post pass Django's CSRF check, a live
stream reaches the WebSocket, and a proxied stream comes through `/v1`, all through nginx.

nginx comes with Debian's `nginx` package (.ci/apt-deps installs it). Without it these tests
skip, except in CI (`CI` set), where a missing nginx is a failure."""

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import httpx
import pytest
from django.contrib.auth import get_user_model
from websockets.asyncio.client import connect

from streams.models import ApiToken, Stream
from tests.conftest import REPO, free_port, wait_for_port
from tests.support.recording import finished

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "nginx-test-password-1"


def readme_block():
    """The README's nginx configuration: the ```nginx block that defines `upstream streamscope`."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```nginx\n(.*?)```", text, re.S)
    [block] = [b for b in blocks if "upstream streamscope" in b]
    return block


def runnable(block, port, daphne_port):
    """The block with what a test machine must change, and nothing else: where it listens
    (plain HTTP on a free port), where the app and the static files are."""
    block, n = re.subn(r"listen 443 ssl;[^\n]*", f"listen 127.0.0.1:{port};", block)
    assert n == 1
    block, n = re.subn(
        r"upstream streamscope \{[^}]*\}",
        f"upstream streamscope {{ server 127.0.0.1:{daphne_port}; }}",
        block,
    )
    assert n == 1
    block = block.replace("/srv/streamscope/staticfiles/", f"{REPO}/static/")
    return block


@pytest.fixture(scope="module")
def nginx_binary():
    path = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is missing in CI (.ci/apt-deps installs Debian's nginx)")
        pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
    return path


@contextlib.contextmanager
def running_nginx(binary, block, daphne_port):
    """nginx in the foreground from a temporary prefix, serving `block` (made runnable) on a
    free port: yields its `host:port`."""
    prefix = tempfile.mkdtemp(prefix="streamscope-nginx-")
    port = free_port()
    temps = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    with open(f"{prefix}/nginx.conf", "w") as f:
        f.write(
            f"worker_processes 1; daemon off; pid {prefix}/nginx.pid;\n"
            f"error_log {prefix}/error.log warn;\nevents {{ worker_connections 256; }}\n"
            "http { access_log off; "
            + " ".join(f"{kind}_temp_path {prefix}/{kind};" for kind in temps)
            + "\n"
            + runnable(block, port, daphne_port)
            + "\n}\n"
        )
    proc = subprocess.Popen(
        [binary, "-c", f"{prefix}/nginx.conf", "-p", prefix],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, timeout=15, proc=proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(prefix, ignore_errors=True)


@pytest.fixture(scope="module")
def nginx(nginx_binary, live_server_daphne):
    with running_nginx(nginx_binary, readme_block(), live_server_daphne.port) as address:
        yield address


def log_in(client, origin, username):
    """As a browser does: the form, its CSRF token and cookie, a POST with an Origin."""
    page = client.get("/login/")
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
    r = client.post(
        "/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Origin": origin, "Referer": f"{origin}/login/"},
    )
    return r


def sse_body(text):
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r1"}},
        {"type": "response.output_text.delta", "sequence_number": 1, "delta": text},
        {"type": "response.completed", "sequence_number": 2, "response": {"id": "r1"}},
    ]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_login_a_form_a_live_stream_and_v1_all_through_nginx(nginx):
    user = get_user_model().objects.create_user("nginx-user", password=PASSWORD)
    token = ApiToken.issue(user, name="nginx")
    origin = f"http://{nginx}"
    with httpx.Client(base_url=origin, timeout=30) as client:
        r = log_in(client, origin, "nginx-user")
        assert r.status_code == 302, (r.status_code, r.text[:300])  # 403: the CSRF check failed
        assert client.get("/").status_code == 200

        # a form with a file: the upload, answered with its progress page
        form = client.get("/")
        csrf = client.cookies["csrftoken"]
        r = client.post(
            "/streams/upload/",
            data={"csrfmiddlewaretoken": csrf},
            files={"file": ("through-nginx.sse", sse_body("Hallo via nginx"), "text/event-stream")},
            headers={"Origin": origin, "Referer": f"{origin}/"},
        )
        assert form.status_code == 200 and r.status_code == 302, (r.status_code, r.text[:300])
        assert r.headers["location"].startswith("/imports/")

        # a stream started through nginx, watched live over the WebSocket through nginx
        r = client.post(
            "/api/streams/",
            json={"input": "Hallo", "metadata": {"time_scale": 0.2}},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 201, r.text
        stream_id = r.json()["id"]
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        frames = asyncio.run(_watch(f"ws://{nginx}/ws/streams/{stream_id}/", origin, cookie))
        assert frames[-1].get("terminal") is True
        streamed = [e for f in frames for e in f.get("events", ())]
        assert [e["index"] for e in streamed] == list(range(len(streamed))) and streamed

        # the recording proxy, streamed through nginx unbuffered
        body = {"model": "auto", "input": "Hallo", "stream": True}
        with client.stream(
            "POST", "/v1/responses", json=body, headers={"Authorization": f"Bearer {token}"}
        ) as r:
            assert r.status_code == 200
            proxied_id = int(r.headers["x-streamscope-stream"])
            text = b"".join(r.iter_raw()).decode()
        assert "response.completed" in text
    assert asyncio.run(finished(stream_id)).status == "completed"
    assert asyncio.run(finished(proxied_id)).status == "completed"
    assert Stream.objects.filter(source="import", user=user).exists()


async def _watch(url, origin, cookie):
    frames = []
    async with connect(url, origin=origin, additional_headers={"Cookie": cookie}) as ws:
        async with asyncio.timeout(30):
            async for message in ws:
                frames.append(json.loads(message))
                if frames[-1].get("terminal"):
                    break
    return frames


def test_with_host_instead_of_http_host_the_login_would_fail(nginx_binary, live_server_daphne):
    """Why the block says `$http_host`: the same block with `$host` (which drops the port)
    fails the login form's CSRF check. If this passes, the README's warning is stale."""
    block = readme_block().replace("Host $http_host;", "Host $host;")
    assert "Host $host;" in block
    get_user_model().objects.create_user("host-user", password=PASSWORD)
    with running_nginx(nginx_binary, block, live_server_daphne.port) as address:
        origin = f"http://{address}"
        with httpx.Client(base_url=origin, timeout=30) as client:
            assert log_in(client, origin, "host-user").status_code == 403
