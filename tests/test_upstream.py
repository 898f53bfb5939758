"""streams.upstream.EventReader, the live reader: chunk boundaries anywhere must give the same
events as the whole-body parser of imports (streams.capture), WHATWG rules included. Pure."""

import pytest

from streams.capture import parse_sse_bytes
from streams.upstream import EventReader

BODIES = {
    "plain": b'event: message\ndata: {"a":1}\n\nevent: message\ndata: {"b":2}\n\n',
    "comments and retry-only blocks": b": hi\n\nretry: 10\n\n: x\ndata: 1\n\n",
    "a lone event: line is no event": b"event: ping\n\ndata: 2\n\n",
    "empty data line": b"data:\n\ndata\n\n",
    "multi-line data": b"data: a\ndata:  b\ndata:c\n\n",
    "ids persist, NUL ids ignored": b"id: 7\ndata: x\n\ndata: y\n\nid: a\x00b\ndata: z\n\n",
    "CRLF and CR": b"data: one\r\n\r\ndata: two\r\rdata: three\n\r\n",
    "not UTF-8": b"data: caf\xe9\ndata: ok\n\ndata: \xff\xfe\n\n",
    "unknown fields": b"foo: bar\ndata: 3\nbaz\n\n",
}


def live(body, size):
    reader = EventReader()
    out = []
    for start in range(0, len(body), size):
        out.extend(reader.feed(body[start : start + size], start))
    reader.close(len(body))
    return [(e.event_name, e.sse_id, e.data, e.raw) for e in out]


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
def test_any_chunking_reads_like_the_import_parser(name, size):
    body = BODIES[name]
    want = [(e.event_name or "message", e.sse_id, e.data, e.raw) for e in parse_sse_bytes(body)]
    assert want  # every body has events
    assert live(body, size) == want


def test_an_unterminated_last_block_is_not_dispatched():
    assert live(b"data: 1\n\ndata: 2\n", 4) == [("message", "", "1", None)]


def test_receipt_time_is_that_of_the_chunk_completing_the_event():
    reader = EventReader()
    assert reader.feed(b"data: a", 10) == []
    (event,) = reader.feed(b"bc\n\n", 20)
    assert (event.data, event.t_ns) == ("abc", 20)


# Lines of every kind the WHATWG rules treat differently, for random bodies.
LINES = [
    b"data: x",
    b"data:  two spaces",
    b"data:no space",
    b"data:",
    b"data",
    b'data: {"type":"response.output_text.delta","delta":"h\\u00e9"}',
    b"event: message",
    b"event: ping",
    b"event:",
    b"event:nospace",
    b"id: 42",
    b"id: a\x00b",
    b"id:",
    b"retry: 100",
    b"retry: x",
    b": comment",
    b":",
    b"foo: bar",
    b"data: caf\xc3\xa9",
    b"data: \xff",
    b"",
    b"",
    b"",
]


@pytest.mark.parametrize("seed", range(40))
def test_random_bodies_read_like_the_import_parser(seed):
    """The reader's fast path (data:/event: lines applied to the decoder's state directly)
    against the independent whole-body parser, on random mixes of every kind of line and
    random chunk sizes."""
    import random

    rng = random.Random(seed)
    body = b"\n".join(rng.choice(LINES) for _ in range(rng.randint(1, 200))) + b"\n\n"
    want = [(e.event_name or "message", e.sse_id, e.data, e.raw) for e in parse_sse_bytes(body)]
    for size in (1, rng.randint(2, 40), rng.randint(41, 5000), 1 << 20):
        assert live(body, size) == want, size


async def test_a_read_reports_when_its_bytes_arrived_not_when_it_ran():
    """Receipt times are stamped in the protocol callback: a reader that gets to the bytes
    late (a busy loop) still reports when they arrived, for every part of a split read."""
    import time

    from streams.upstream import Phases, _Protocol, _Stream

    class Transport:
        def pause_reading(self):
            pass

        def resume_reading(self):
            pass

    protocol = _Protocol()
    protocol.connection_made(Transport())
    stream = _Stream(Transport(), protocol)
    phases = Phases()
    phases.activate()
    protocol.data_received(b"ab")
    first = time.monotonic_ns()
    time.sleep(0.02)
    protocol.data_received(b"cd")
    second = time.monotonic_ns()
    time.sleep(0.03)  # the loop was busy: the reader runs 30 ms after the last arrival
    assert await stream.read(1) == b"a"
    assert first - 5_000_000 < phases.last_read_ns <= first
    assert await stream.read(1) == b"b"  # the rest of the same arrival
    assert first - 5_000_000 < phases.last_read_ns <= first
    assert await stream.read(1024) == b"cd"
    assert first < phases.last_read_ns <= second
    assert time.monotonic_ns() - phases.last_read_ns >= 30_000_000
