"""A graceful stop (streams/run/shutdown.py), for each documented command that runs streams:
`python -m dashboard.server`, `manage.py serve` and `manage.py stream_worker`. On SIGTERM it
starts no new stream (503), lets a stream that ends within STREAMSCOPE_SHUTDOWN_GRACE_S end,
ends the rest `interrupted` with what arrived (a proxied client gets the end of its response,
not a reset), and exits; nothing is left `streaming`."""

import html
import signal
import subprocess
import threading
import time

import httpx
import pytest

from streams.models import Stream
from tests.conftest import DaphneServer, free_port, wait_for_port
from tests.support.processes import api_create, manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

GRACE_S = 3.0
OVERRIDES = {"SHUTDOWN_GRACE_S": GRACE_S, "MAX_CONCURRENT_PER_USER": 10}
# A stream that stalls for 12 s after its first deltas: longer than the grace
LONG = {"scenario": "stall", "metadata": {"stall_s": 600, "time_scale": 0.02}}
# One that ends on its own within about a second
SHORT = {"scenario": "normal", "metadata": {"time_scale": 0.3}}


def _deltas_stored(stream_id):
    return Stream.objects.get(pk=stream_id).status == "streaming" and (
        Stream.objects.get(pk=stream_id).events.filter(type="response.output_text.delta").exists()
    )


def _proxied(url, token, into):
    """A client reading a long proxied stream to its end; `into` gets (stream id, body, error)."""
    metadata = {"scenario": LONG["scenario"], **LONG["metadata"]}
    body = {"model": "auto", "input": "hi", "stream": True, "metadata": metadata}
    try:
        with httpx.Client(timeout=60) as client:
            with client.stream(
                "POST",
                f"{url}/v1/responses",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            ) as r:
                into["id"] = int(r.headers["x-streamscope-stream"])
                into["body"] = b"".join(r.iter_raw())
    except httpx.HTTPError as exc:  # a reset, an incomplete chunked body
        into["error"] = exc


def _check_stop(url, user, stop, exited):
    """Start a long API stream, a long proxied one and a short one; stop; check the rows."""
    long_id = api_create_ok(url, user, **LONG)
    proxied = {}
    thread = threading.Thread(target=_proxied, args=(url, user.token, proxied))
    thread.start()
    wait_until(lambda: _deltas_stored(long_id), 30, what="the long stream's first deltas")
    wait_until(lambda: "id" in proxied and _deltas_stored(proxied["id"]), 30, what="proxied")
    short_id = api_create_ok(url, user, **SHORT)
    stopped = time.monotonic()
    stop()
    # during the grace period the server still answers, and starts nothing new
    r = httpx.post(
        url + "/api/streams/",
        json={"input": "hi"},
        headers={"Authorization": f"Bearer {user.token}"},
        timeout=10,
    )
    assert (r.status_code, r.json()["error"]["code"]) == (503, "shutting_down")
    exited()
    took = time.monotonic() - stopped
    thread.join(30)
    assert GRACE_S - 0.5 < took < GRACE_S + 15, took
    short, long_, cut = (Stream.objects.get(pk=i) for i in (short_id, long_id, proxied["id"]))
    assert short.status == "completed"  # it ended within the grace
    for stream in (long_, cut):
        assert (stream.status, stream.error_code) == ("interrupted", "shutdown"), stream.pk
        assert stream.output_text and stream.event_count > 0  # what arrived, kept
    # the proxied client got the end of its response, not a reset
    assert "error" not in proxied, proxied.get("error")
    assert b"response.output_text.delta" in proxied["body"]
    assert not Stream.objects.filter(status__in=Stream.ACTIVE_STATUSES).exists()


def api_create_ok(url, user, **body):
    class Server:
        pass

    server = Server()
    server.url = url
    r = api_create(server, user, **body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_dashboard_server_stops_gracefully(people, simulator_process):
    server = DaphneServer(simulator_process.base_url, overrides=OVERRIDES)
    try:
        _check_stop(
            server.url,
            people.owner,
            stop=lambda: server.proc.send_signal(signal.SIGTERM),
            exited=lambda: server.proc.wait(GRACE_S + 20),
        )
        assert server.proc.returncode is not None
    finally:
        server.stop()


def test_manage_py_serve_stops_gracefully(people, simulator_process):
    port = free_port()
    proc = manage(
        "serve",
        f"127.0.0.1:{port}",
        overrides=OVERRIDES,
        stdout=subprocess.DEVNULL,
        UPSTREAM_BASE_URL=simulator_process.base_url,
    )
    try:
        wait_for_port(port, proc=proc, timeout=60)
        _check_stop(
            f"http://127.0.0.1:{port}",
            people.owner,
            stop=lambda: proc.send_signal(signal.SIGTERM),
            exited=lambda: proc.wait(GRACE_S + 20),
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_stream_worker_stops_gracefully(people, simulator_process):
    worker_env = {"STREAMSCOPE_RUNNER": "worker", "UPSTREAM_BASE_URL": simulator_process.base_url}
    server = DaphneServer(
        simulator_process.base_url, overrides=OVERRIDES, env={"STREAMSCOPE_RUNNER": "worker"}
    )
    worker = manage("stream_worker", overrides=OVERRIDES, **worker_env)
    try:
        assert "ready" in worker.stdout.readline()
        long_id = api_create_ok(server.url, people.owner, **LONG)
        wait_until(lambda: _deltas_stored(long_id), 30, what="the long stream's first deltas")
        short_id = api_create_ok(server.url, people.owner, **SHORT)
        wait_until(
            lambda: Stream.objects.get(pk=short_id).status == "streaming", 30, what="short started"
        )
        stopped = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.wait(GRACE_S + 20)
        assert GRACE_S - 0.5 < time.monotonic() - stopped < GRACE_S + 15
        short, long_ = (Stream.objects.get(pk=i) for i in (short_id, long_id))
        assert short.status == "completed"
        assert (long_.status, long_.error_code) == ("interrupted", "shutdown")
        assert long_.output_text and long_.event_count > 0
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
        server.stop()


# --- kill -9: after the restart, every page shows what was stored --------------------------------


def _stored_text(stream_id):
    """The output the stored events spell: their deltas, in order."""
    import json as _json

    from streams.models import Event

    deltas = Event.objects.filter(stream_id=stream_id, type="response.output_text.delta")
    return "".join(
        _json.loads(d)["delta"] for d in deltas.order_by("index").values_list("data", flat=True)
    )


def _playground_stream(url, user):
    """A playground answer that stalls (the simulator's `stall`, real pacing): its stream id."""
    with httpx.Client(base_url=url, timeout=30, headers={"Cookie": user.cookie}) as client:
        page = client.get("/playground/")
        assert page.status_code == 200
        csrf = client.cookies.get("csrftoken") or page.cookies["csrftoken"]
        r = client.post(
            "/playground/send/",
            data={"input": "Tell me about Utrecht", "model": "auto", "scenario": "stall",
                  "speed": "1", "csrfmiddlewaretoken": csrf},
            headers={"Accept": "application/json", "X-CSRFToken": csrf, "Origin": url,
                     "Referer": f"{url}/playground/",
                     "Cookie": f"{user.cookie}; csrftoken={csrf}"},
        )  # fmt: skip
        assert r.status_code == 201, r.text[:300]
        return r.json()["turn"]["stream"], r.json()["conversation"]["url"]


@pytest.mark.parametrize("command", ["dashboard.server", "serve"])
def test_after_kill_9_every_page_shows_what_was_stored(people, simulator_process, command):
    user = people.owner
    if command == "dashboard.server":
        first = DaphneServer(simulator_process.base_url, overrides=OVERRIDES)
        url, proc = first.url, first.proc
    else:
        port = free_port()
        env = {"UPSTREAM_BASE_URL": simulator_process.base_url}
        proc = manage(
            "serve", f"127.0.0.1:{port}", overrides=OVERRIDES, stdout=subprocess.DEVNULL, **env
        )
        wait_for_port(port, proc=proc, timeout=60)
        url = f"http://127.0.0.1:{port}"
    proxied = {}
    try:
        api_id = api_create_ok(url, user, **LONG)
        thread = threading.Thread(target=_proxied, args=(url, user.token, proxied), daemon=True)
        thread.start()
        playground_id, conversation_url = _playground_stream(url, user)
        wait_until(
            lambda: (
                "id" in proxied and all(map(_deltas_stored, (api_id, proxied["id"], playground_id)))
            ),
            30,
            what="deltas of every stream",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    thread.join(10)
    ids = {"api": api_id, "proxied": proxied["id"], "playground": playground_id}
    assert set(Stream.objects.filter(pk__in=ids.values()).values_list("status", flat=True)) == {
        "streaming"
    }
    server = DaphneServer(simulator_process.base_url, overrides=OVERRIDES)  # the restart
    try:
        wait_until(
            lambda: not Stream.objects.filter(status__in=Stream.ACTIVE_STATUSES).exists(),
            30, what="the restart's sweep",
        )  # fmt: skip
        bearer = {"Authorization": f"Bearer {user.token}"}
        page = {"Cookie": user.cookie}
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for source, stream_id in ids.items():
                text = _stored_text(stream_id)
                assert text, source
                stream = Stream.objects.get(pk=stream_id)
                assert stream.status == "interrupted" and stream.output_text == text, source
                api = client.get(f"/api/streams/{stream_id}/", headers=bearer).json()
                assert api["output_text"] == text and api["status"] == "interrupted", source
                assert api["bytes_received"] > 0 and api["event_count"] > 0, source
                timeline = client.get(f"/streams/{stream_id}/", headers=page).text
                assert "No output." not in timeline, source
                assert html.escape(text.split()[0]) in timeline, source
                replay = client.get(f"/streams/{stream_id}/replay.json", headers=page).json()
                assert replay["events"], source
            conversation = client.get(conversation_url, headers=page).text
            assert html.escape(_stored_text(playground_id).split()[0]) in conversation
    finally:
        server.stop()
