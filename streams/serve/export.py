"""Stored streams out: the `.sse` body and the `.json` document (issue 4).

- `.sse`: an imported stream gives back its `Capture` bytes, byte for byte. A recorded stream is
  re-serialised from its rows so that importing the result yields the same events (name, id,
  data, sequence numbers) and the same findings, except the timing-only ones (stall,
  buffered_delivery), which need receipt times a file cannot carry. Data that was not valid UTF-8
  is written from `Event.raw`, so it survives the round trip. What came between events and is
  none of theirs (SSE comments such as `: OPENROUTER PROCESSING`, `retry:` blocks) is written
  back from `Event.preamble` where it came: a recorded stream's export is the upstream's bytes
  (line ends as `\n`; a comment inside an event's block comes back before the block).
- `.json`: the stream, its findings and (optionally) its events, in the shapes of
  `streams.shapes.public`. Never the upstream API key nor request headers: the stored request body
  has no key, and a key an upstream echoed back (an error message, an event) is redacted from both
  formats, the capture bytes of an import included, by the egress gate as they leave.

Big streams are written in chunks read with `.iterator()`, so a 100k-event export never builds
one giant string. Each format has a sync generator (commands, WSGI) and an async one (the ASGI
server, where Django would otherwise buffer a sync iterator whole before sending it); the async
one drives the sync generator on the thread Django's ORM uses, so there is one formatter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from asgiref.sync import sync_to_async

from streams.core import formats
from streams.core.capture import SSEEncoder
from streams.models import Capture, Stream
from streams.shapes import public
from streams.store import events as stored_events

EVENTS_PER_PIECE = 500  # events joined into one piece handed to the response
CAPTURE_PIECE = 256 * 1024  # bytes per piece of a stored capture


# ---- .sse ------------------------------------------------------------------------------------


def iter_sse(stream: Stream) -> Iterator[bytes]:
    """The SSE body in pieces: the capture bytes of an import, or the re-serialised events."""
    content = _capture_content(stream)
    if content is not None:
        for i in range(0, len(content), CAPTURE_PIECE):
            yield content[i : i + CAPTURE_PIECE]
        return
    rows = stored_events.read(stream.pk, ("event_name", "sse_id", "data", "raw", "preamble"))
    encoder = SSEEncoder(formats.IMPLIED_EVENT_NAME.get(stream.format, ""))
    piece = []
    for row in rows:
        piece.append(encoder.event(*row))
        if len(piece) >= EVENTS_PER_PIECE:
            yield b"".join(piece)
            piece = []
    if piece:
        yield b"".join(piece)


async def aiter_sse(stream: Stream) -> AsyncIterator[bytes]:
    async for piece in drive(iter_sse, stream):
        yield piece


# ---- .json -----------------------------------------------------------------------------------


def iter_document(stream: Stream, events: bool = True) -> Iterator[str]:
    """The `.json` export as pieces of one JSON object, `events` last."""
    dumps, export_event = public.dumps, public.export_event
    head = dumps(public.stream(stream))
    if not events:
        yield head
        return
    yield head[:-1] + ',"events":['
    rows = stored_events.read(stream.pk, public.EXPORT_EVENT_FIELDS)
    piece = []
    first = True
    for row in rows:
        text = dumps(export_event(row))
        piece.append(text if first else "," + text)
        first = False
        if len(piece) >= EVENTS_PER_PIECE:
            yield "".join(piece)
            piece = []
    piece.append("]}")
    yield "".join(piece)


async def aiter_document(stream: Stream, events: bool = True) -> AsyncIterator[str]:
    async for piece in drive(iter_document, stream, events=events):
        yield piece


# ---- shared ----------------------------------------------------------------------------------


def _capture_content(stream: Stream) -> bytes | None:
    if stream.source != Stream.Source.IMPORT:
        return None
    content = Capture.objects.filter(stream_id=stream.pk).values_list("content", flat=True).first()
    return None if content is None else bytes(content)  # PostgreSQL gives a memoryview


_END = object()


async def drive(generator: Callable[..., Iterator], *args, **kwargs) -> AsyncIterator:
    """Run a sync generator of database reads piece by piece on the ORM's thread (as Django's
    own `QuerySet.aiterator` does), so the event loop is never blocked and nothing is buffered."""
    gen = generator(*args, **kwargs)  # runs nothing until the first next()
    step = sync_to_async(next)
    try:
        while True:
            piece = await step(gen, _END)
            if piece is _END:
                return
            yield piece
    finally:
        await sync_to_async(gen.close)()
