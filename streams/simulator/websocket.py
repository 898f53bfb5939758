"""The Responses API over a WebSocket (`GET /v1/responses` upgraded), as the `openai` SDK's
`client.responses.connect()` speaks it: the client sends `{"type": "response.create", …the
body's fields}` as a text frame, the server answers with the same events a streamed POST
would, one JSON text frame per event, on the same schedule (`scenarios.build_plan`), and the
connection stays open for the next `response.create` (one response at a time; a create sent
while one runs waits its turn). A frame that is not a JSON object with a known `type` gets an
`error` event; a binary frame, a close with code 1003.

Written by hand, like the rest of the simulator, so its bytes and their timing are exact: no
compression is negotiated, and each frame is one write.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import struct
import time

from .scenarios import RequestError, SimRequest, build_plan

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def is_upgrade(headers: dict[str, str]) -> bool:
    return "websocket" in headers.get("upgrade", "").lower()


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """A server's frame (unmasked, final)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes]:
    """(final?, opcode, unmasked payload) of the client's next frame."""
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", await reader.readexactly(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", await reader.readexactly(8))
    if n > MAX_MESSAGE_BYTES:
        raise ValueError("frame too large")
    mask = await reader.readexactly(4) if b1 & 0x80 else b"\0\0\0\0"
    data = await reader.readexactly(n)
    if b1 & 0x80:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return bool(b0 & 0x80), b0 & 0x0F, data


async def read_message(reader, writer) -> tuple[int, bytes] | None:
    """The client's next message (opcode, payload), answering pings; None once it closed."""
    parts, opcode = [], None
    while True:
        fin, op, data = await read_frame(reader)
        if op == CLOSE:
            writer.write(frame(CLOSE, data[:2]))
            await writer.drain()
            return None
        if op == PING:
            writer.write(frame(PONG, data))
            await writer.drain()
            continue
        if op == PONG:
            continue
        if op != CONTINUATION:
            opcode = op
        parts.append(data)
        if fin:
            return opcode, b"".join(parts)


async def serve(server, req, reader, writer, received_ns) -> bool:
    """Upgrade `req` and serve the socket until it closes. Returns False (the connection is
    not reused for HTTP)."""
    key = req.headers.get("sec-websocket-key", "")
    head = (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\nServer: streamscope-simulator\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    inbox: asyncio.Queue = asyncio.Queue()

    async def receive():
        try:
            while (message := await read_message(reader, writer)) is not None:
                inbox.put_nowait((message, getattr(reader, "last_data_ns", 0)))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        inbox.put_nowait(None)

    receiving = asyncio.ensure_future(receive())
    try:
        while (item := await inbox.get()) is not None:
            (opcode, payload), received_ns = item
            received_ns = received_ns or time.monotonic_ns()
            if opcode != TEXT:
                writer.write(frame(CLOSE, struct.pack("!H", 1003) + b"text frames only"))
                await writer.drain()
                break
            await _turn(server, payload, writer, received_ns, receiving)
    except (ConnectionError, OSError):
        pass
    finally:
        receiving.cancel()
    return False


def _error(code: str, message: str, param=None) -> bytes:
    event = {"type": "error", "code": code, "message": message, "param": param}
    return frame(TEXT, json.dumps({**event, "sequence_number": 0}).encode())


async def _turn(server, payload, writer, received_ns, receiving):
    """One client message: a `response.create` served as a plan, anything else an error."""
    try:
        body = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        writer.write(_error("invalid_json", f"The message is not JSON: {exc}"))
        return await writer.drain()
    if not isinstance(body, dict) or body.get("type") != "response.create":
        kind = body.get("type") if isinstance(body, dict) else None
        writer.write(_error("unknown_event_type", f"Unknown event type {kind!r}.", "type"))
        return await writer.drain()
    body = {k: v for k, v in body.items() if k != "type"}
    body["stream"] = True
    try:
        sim_req = SimRequest.from_body(
            body, server_seed=server.seed, default_time_scale=server.time_scale
        )
    except RequestError as exc:
        error = exc.body()["error"]
        writer.write(_error(error.get("code") or "invalid_request", error["message"]))
        return await writer.drain()
    async with server._plan_lock:
        plan = build_plan(
            sim_req,
            response_id=f"resp_{secrets.token_hex(16)}",
            created_at_ms=int(time.time() * 1000),
        )
    entry = server.log.open(plan, sim_req.seed, received_ns)
    outcome = "client_disconnected"
    try:
        outcome = await _send_events(server, plan, writer, received_ns, entry, receiving)
    finally:
        server.log.close(entry, outcome, (time.monotonic_ns() - received_ns) // 1000)


async def _send_events(server, plan, writer, received_ns, entry, receiving):
    """The plan's events, one text frame each, at the times its writes would go."""
    if plan.body is not None:  # (an HTTP error scenario: its error as an event)
        writer.write(_error(plan.end, plan.body.decode("utf-8", "replace")))
        await writer.drain()
        return plan.end
    base = received_ns / 1e9 + plan.header_delay
    scale = plan.time_scale
    for w in plan.writes:
        if not w.events:
            continue  # (comments, retry blocks: SSE's own, not events)
        target = base + w.at * scale + w.offset
        while (remaining := target - time.monotonic()) > 0:
            if receiving.done():
                return "client_disconnected"
            await asyncio.sleep(min(remaining, 0.05))
        if writer.transport.is_closing():
            return "client_disconnected"
        writer.write(b"".join(frame(TEXT, plan.events[i].data.encode()) for i in w.events))
        await writer.drain()
        sent_us = (time.monotonic_ns() - received_ns) // 1000
        for i in w.events:
            server.log.add_event(entry, i, plan.events[i], sent_us)
        await asyncio.sleep(0)
    if plan.end == "reset":
        writer.transport.abort()
        return "reset"
    return {"error": "error", "missing_terminal": "missing_terminal"}.get(plan.end, "complete")
