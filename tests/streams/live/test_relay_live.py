"""The relay over real Daphne on 127.0.0.1, with real WebSocket clients (`websockets`):
streams are started through the API, recorded in the server process from the simulator
process, and watched through /ws/streams/<id>/."""

import asyncio
import json
import re
import socket

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect

from streams.models import Event, Stream
from tests.conftest import DaphneServer
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.support.recording import finished

pytestmark = pytest.mark.django_db(transaction=True)


async def start_stream(server, user, **metadata):
    scenario = metadata.pop("scenario", "")
    body = {"input": "Tell me about Utrecht", "metadata": metadata}
    if scenario:
        body["scenario"] = scenario
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        r = await client.post(
            "/api/streams/", json=body, headers={"Authorization": f"Bearer {user.token}"}
        )
    assert r.status_code == 201, r.text
    return r.json()


async def open_ws(server, path, user=None, origin=None, **kwargs):
    headers = {"Cookie": user.cookie} if user is not None else {}
    return await connect(
        server.ws_url + path,
        origin=origin or server.origin,
        additional_headers=headers,
        max_size=None,
        open_timeout=10,
        **kwargs,
    )


async def frames_until_close(ws, timeout=30, limit=None):
    """JSON frames until the server closes (or `limit` frames); returns (frames, close code)."""
    frames = []
    try:
        async with asyncio.timeout(timeout):
            async for message in ws:
                frames.append(json.loads(message))
                if limit is not None and len(frames) >= limit:
                    return frames, None
    except websockets.ConnectionClosedError:
        pass
    return frames, ws.close_code


def indexes(frames):
    return [e["index"] for f in frames for e in f.get("events", [])]


async def stored(stream_id):
    return [
        (i, d)
        async for i, d in Event.objects.filter(stream_id=stream_id)
        .order_by("index")
        .values_list("index", "data")
    ]


class TestRelayOverDaphne:
    async def test_a_late_joiner_gets_every_event_once_in_order(self, people, live_server_daphne):
        s = await start_stream(live_server_daphne, people.owner, time_scale=0.2)
        while await Event.objects.filter(stream_id=s["id"]).acount() < 10:
            await asyncio.sleep(0.02)
        ws = await open_ws(live_server_daphne, s["ws"] + "?format=json", people.owner)
        frames, code = await frames_until_close(ws)
        stream = await finished(s["id"])
        assert code == 1000 and frames[-1]["terminal"] and frames[-1]["status"] == "completed"
        assert [(e["index"], e["data"]) for f in frames for e in f["events"]] == await stored(
            stream.pk
        )
        assert frames[0]["events"][0]["index"] == 0  # the stored part came first
        assert stream.status == "completed"

    async def test_a_killed_socket_resumes_with_after(self, people, live_server_daphne):
        s = await start_stream(live_server_daphne, people.owner, time_scale=0.2)
        ws = await open_ws(live_server_daphne, s["ws"] + "?format=json", people.owner)
        seen = []
        while len(seen) < 15:
            seen += indexes([json.loads(await ws.recv())])
        ws.transport.abort()  # the network dies: no close handshake
        await asyncio.sleep(0.3)  # events keep coming meanwhile
        ws = await open_ws(
            live_server_daphne, f"{s['ws']}?format=json&after={seen[-1]}", people.owner
        )
        frames, code = await frames_until_close(ws)
        await finished(s["id"])
        assert code == 1000
        assert seen + indexes(frames) == [i for i, _ in await stored(s["id"])]

    async def test_fifty_viewers_all_receive_every_event(self, people, live_server_daphne):
        s = await start_stream(live_server_daphne, people.owner, time_scale=0.1)
        viewers = await asyncio.gather(
            *(
                open_ws(live_server_daphne, s["ws"] + "?format=json", people.owner)
                for _ in range(50)
            )
        )
        results = await asyncio.gather(*(frames_until_close(ws) for ws in viewers))
        expected = [i for i, _ in await stored(s["id"])]
        assert len(expected) > 50
        for frames, code in results:
            assert code == 1000
            assert indexes(frames) == expected

    async def test_frames_without_a_format_are_json(self, people, live_server_daphne):
        # JSON is the only format: model output travels verbatim in `data`, escaped by pages
        s = await start_stream(live_server_daphne, people.owner, scenario="xss", time_scale=0)
        await finished(s["id"])
        ws = await open_ws(live_server_daphne, s["ws"], people.owner)
        frames = [json.loads(message) async for message in ws]
        assert ws.close_code == 1000
        assert frames[-1] == {"events": [], "status": "completed", "terminal": True}
        assert any("<script>" in e["data"] for f in frames for e in f["events"])

    async def test_the_live_list_over_daphne(self, people, live_server_daphne):
        mine = await open_ws(live_server_daphne, "/ws/streams/?format=json", people.owner)
        theirs = await open_ws(live_server_daphne, "/ws/streams/?format=json", people.stranger)
        assert json.loads(await mine.recv()) == {"streams": []}
        assert json.loads(await theirs.recv()) == {"streams": []}
        s = await start_stream(live_server_daphne, people.owner, time_scale=0.05)
        statuses, fields = [], {}
        async with asyncio.timeout(10):
            while "completed" not in statuses:
                for item in json.loads(await mine.recv())["streams"]:
                    assert item["id"] == s["id"]
                    fields.update(item)
                    if "status" in item:
                        statuses.append(item["status"])
        # changes queued together are merged: the list shows the latest state
        assert statuses[0] == "pending" and statuses[-1] == "completed"
        assert fields["resolved_model"] and fields["ttft_ms"] > 0
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await theirs.recv()
        await mine.close()
        await theirs.close()


class TestRefusals:
    @pytest.mark.parametrize("who", ["anonymous", "stranger", "foreign_origin", "no_origin"])
    async def test_it_refuses_the_handshake(self, people, live_server_daphne, who):
        stream = await Stream.objects.acreate(user=people.owner, status="completed")
        path = f"/ws/streams/{stream.pk}/?format=json"
        user = {"anonymous": None, "stranger": people.stranger}.get(who, people.owner)
        kwargs = {"origin": "http://evil.example"} if who == "foreign_origin" else {}
        if who == "no_origin":
            # no Origin header at all
            kwargs = {"origin": None}
            url = live_server_daphne.ws_url + path
            with pytest.raises(websockets.InvalidStatus) as refused:
                await connect(url, additional_headers={"Cookie": user.cookie})
        else:
            with pytest.raises(websockets.InvalidStatus) as refused:
                await open_ws(live_server_daphne, path, user, **kwargs)
        assert refused.value.response.status_code == 403
        # the same request as the owner, from the right origin, is accepted
        ws = await open_ws(live_server_daphne, path, people.owner)
        await frames_until_close(ws)
        assert ws.close_code == 1000


class TestSlowViewer:
    PATIENCE_S = 10.0

    async def test_a_viewer_that_stops_reading_delays_nothing_and_resumes(
        self, people, simulator_process
    ):
        # Let go by time (its buffer full for PATIENCE_S), not by outbox size: on two shared
        # cores the client that keeps up also falls thousands of events behind in a burst.
        server = DaphneServer(
            simulator_process.base_url,
            overrides={
                "RELAY_OUTBOX_MAX_EVENTS": 1_000_000,
                "RELAY_SEND_HIGH_WATER_BYTES": 64 * 1024,
                "RELAY_SLOW_CLIENT_TIMEOUT_S": self.PATIENCE_S,
                "METRICS_TOKEN": METRICS_TOKEN,
            },
        )
        try:
            await self.check(server, people)
        finally:
            server.stop()

    async def check(self, server, people):
        # More than the stuck client's socket buffers hold (the kernel grows them to MBs)
        # plus its outbox, so it overflows whatever the timing.
        n = 60_000
        s = await start_stream(server, people.owner, scenario="fast", events=n, batch=100)
        # A client that reads the first frame and then nothing: a small receive buffer and a
        # one-frame client queue, so the server's own buffer fills quickly.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        stuck = await open_ws(
            server, s["ws"] + "?format=json", people.owner, sock=sock, max_queue=1
        )
        good = await open_ws(server, s["ws"] + "?format=json", people.owner)
        first = json.loads(await stuck.recv())
        frames, code = await frames_until_close(good, timeout=60)
        stream = await finished(s["id"])
        # The recording ended, and the viewer who kept up got everything, while the stuck one
        # was still held: nothing waited for it (an order of events, not a duration a busy
        # machine could stretch; a recorder that waited on it could only finish after the
        # server let it go).
        assert stream.status == "completed" and stream.event_count == n
        assert code == 1000 and indexes(frames) == list(range(n))
        assert await slow_viewer_closes(server) == 0
        # The stuck one is let go once its buffer has stayed full for PATIENCE_S (4008, or
        # abnormal if its close handshake timed out); what it had received plus a resume
        # from its last index is exactly everything.
        async with asyncio.timeout(self.PATIENCE_S + 30):
            while await slow_viewer_closes(server) < 1:
                await asyncio.sleep(0.2)
        seen, stuck_code = await frames_until_close(stuck, timeout=20)
        seen = indexes([first, *seen])
        assert stuck_code in (4008, 1006), stuck_code
        assert len(seen) < n
        assert seen == list(range(len(seen)))
        after = seen[-1] if seen else -1  # (its first frame may have held no event yet)
        resumed = await open_ws(server, f"{s['ws']}?format=json&after={after}", people.owner)
        rest, code = await frames_until_close(resumed)
        assert code == 1000 and seen + indexes(rest) == list(range(n))


METRICS_TOKEN = "relay-test-metrics"


async def slow_viewer_closes(server):
    """The server's count of viewers it let go for not reading (its /metrics)."""
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        r = await client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert r.status_code == 200, r.text
    found = re.search(r"^streamscope_slow_viewer_closes_total ([0-9.e+]+)$", r.text, re.M)
    return float(found.group(1)) if found else 0.0


FOLLOW = """
async ([path, after]) => {
  const { connectStream } = await import("/static/js/streamclient.js");
  return await new Promise((resolve) => {
    const got = [], statuses = [], closes = [];
    let dropped = false;
    const conn = connectStream(path, {
      after, baseDelayMs: 50,
      onFrame(frame, c) {
        for (const e of frame.events) got.push(e.index);
        // the network drops once, mid-stream: the client must resume by itself
        if (!dropped && got.length >= 10) { dropped = true; c.socket.close(4000); }
      },
      onStatus(s) { statuses.push(s); },
      onClose(info) { closes.push(info.code); },
      onEnd(info) { resolve({got, statuses, closes, reason: info.reason, last: conn.lastIndex}); },
    });
  });
}
"""


@pytest.mark.e2e
class TestBrowserClient:
    async def test_streamclient_resumes_after_a_drop_and_stops_at_the_end(
        self, people, live_server_daphne
    ):
        from playwright.async_api import async_playwright

        server = live_server_daphne
        async with async_playwright() as p:
            browser = await p.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            try:
                context = await browser.new_context()
                name, value = people.owner.cookie.split("=", 1)
                await context.add_cookies([{"name": name, "value": value, "url": server.url}])
                page = await context.new_page()
                await page.goto(server.url + "/static/js/streamclient.js")
                s = await start_stream(server, people.owner, time_scale=0.5)
                result = await page.evaluate(FOLLOW, [s["ws"] + "?format=json", None])
                resumed = await page.evaluate(FOLLOW, [s["ws"] + "?format=json", 20])
            finally:
                await browser.close()
        stream = await finished(s["id"])
        assert result["reason"] == "terminal" and result["statuses"][-1] == "completed"
        # (a browser reports the code the server answered its close with: 1000 both times)
        assert result["closes"][-1] == 1000
        assert result["got"] == list(range(stream.event_count))  # once each, in order
        assert len(result["closes"]) == 2  # the drop (then a resume) and the end
        assert result["last"] == stream.event_count - 1
        assert resumed["got"] == list(range(21, stream.event_count))
