"""A forwarded request starts its stream the one way (services -> runner -> recorder) and the
recorder writes to its output port only (issue 45): the simulator over real HTTP on 127.0.0.1,
a port that only records what it was given."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from streams.ingest.recorder import Forwarded
from streams.models import Event, Stream
from streams.run import runner, services
from tests.support.recording import body

pytestmark = pytest.mark.django_db(transaction=True)


class Port:
    """start, chunk, finish, as the recorder calls them, and nothing else: a recorder that
    reached for anything more (the row, the task, the live list) fails on an AttributeError."""

    def __init__(self, on_chunk=None):
        self.calls = []
        self.on_chunk = on_chunk
        self.running_when_started = None

    async def start(self, response, stream_id):
        self.running_when_started = set(runner.running_here())
        self.calls.append(("start", response.status_code, stream_id))

    async def chunk(self, data):
        self.calls.append(("chunk", data))
        if self.on_chunk is not None:
            await self.on_chunk(self)
        return None

    async def finish(self, outcome):
        self.calls.append(("finish", outcome))


def forward(b, port):
    content = json.dumps(b).encode()
    headers = [(b"content-type", b"application/json"), (b"accept-encoding", b"identity")]
    return Forwarded(content, headers, port, wants_json=b.get("stream") is not True)


def start(b, port, url):
    return services.start_proxied(None, b, url + "/responses", forward(b, port))


async def test_the_runner_records_it_and_the_port_gets_head_bytes_and_end_in_order(upstream):
    port = Port()
    running = start(body(), port, upstream.base_url)
    outcome = await running.task
    kinds = [call[0] for call in port.calls]
    assert kinds[0] == "start" and kinds[-1] == "finish"
    assert set(kinds[1:-1]) == {"chunk"} and kinds.count("finish") == 1
    _, status, stream_id = port.calls[0]
    assert status == 200
    stream = await Stream.objects.aget(pk=stream_id)
    # the row is the runner's: made for the proxy, recorded and ended here
    assert stream.source == Stream.Source.PROXY and stream.status == "completed"
    assert port.running_when_started >= {stream_id}  # adopted before its head went out
    assert port.calls[-1][1] is outcome and outcome.status == "completed"
    # what the client got is what was recorded, event by event
    sent = b"".join(call[1] for call in port.calls if call[0] == "chunk").decode()
    data = [e.data async for e in Event.objects.filter(stream=stream).order_by("index")]
    assert data == [_data(block) for block in sent.split("\n\n") if block.strip()]
    assert stream.event_count == len(data) > 3


def _data(block):
    return "\n".join(ln[6:] for ln in block.splitlines() if ln.startswith("data: "))


async def test_a_cancel_from_a_page_reaches_it_and_the_port_hears_how_it_ended(upstream):
    async def cancel_once_running(port):
        stream_id = port.calls[0][2]
        if len(port.calls) == 3:  # (start, two chunks)
            stream = await Stream.objects.aget(pk=stream_id)
            assert await sync_to_async(services.cancel)(stream) == services.CANCELLING

    port = Port(on_chunk=cancel_once_running)
    running = start(body(time_scale=1.0), port, upstream.base_url)
    with pytest.raises(asyncio.CancelledError):
        await running.task
    ended = port.calls[-1]
    assert ended[0] == "finish" and ended[1].status == "cancelled"
    stream = await Stream.objects.aget(pk=port.calls[0][2])
    assert stream.status == "cancelled"
    assert stream.pk not in runner.running_here()


async def test_the_proxys_own_cancel_says_why(upstream):
    port = Port()
    running = start(body(time_scale=1.0), port, upstream.base_url)
    while len(port.calls) < 2:
        await asyncio.sleep(0.01)
    running.cancel("client_disconnected")
    with pytest.raises(asyncio.CancelledError):
        await running.task
    stream = await Stream.objects.aget(pk=port.calls[0][2])
    assert (stream.status, stream.error_code) == ("cancelled", "client_disconnected")
    assert port.calls[-1][1].error_code == "client_disconnected"


async def test_a_row_that_cannot_be_made_ends_the_port_without_an_outcome(upstream):
    """The proxy's client then gets the proxy's 502 (or a reset), never a clean end."""

    async def no_row():
        raise RuntimeError("the database refused the row")

    port = Port()
    b = body()
    url = upstream.base_url + "/responses"
    running = runner.start_proxied(no_row, b, url, forward(b, port))
    with pytest.raises(RuntimeError):
        await running.task
    assert port.calls == [("finish", None)]  # no head went out without its stream's id
