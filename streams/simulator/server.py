"""A raw asyncio HTTP/1.1 server that imitates ``POST /v1/responses`` of the EU GPT API.

It is deliberately built on ``asyncio.start_server`` rather than a framework so that the bytes
written and their timing are under exact control: one HTTP chunk per ``write()``, bursts of many
events in one write, a multi-byte character split across two writes, headers sent late, and a
TCP RST (``SO_LINGER`` 0 + ``transport.abort()``) mid-stream.

Endpoints:

* ``POST /v1/responses`` — see :mod:`streams.simulator.scenarios` for the scenarios.
* ``GET /v1/responses`` upgraded to a WebSocket — the Responses API's WebSocket mode
  (:mod:`streams.simulator.websocket`): each ``response.create`` frame answered with its
  events as frames.
* ``POST /v1/chat/completions`` and ``POST /v1/messages`` — Chat Completions and Anthropic
  Messages, with their own faults (:mod:`streams.simulator.chat`, `...messages`).
* ``GET /v1/models`` — the concrete models (``auto`` is a routing alias, not listed); in
  Anthropic's shape for a request with an ``anthropic-version`` header.
* ``GET /_simulator/responses/`` — ids of the last 1000 logged responses (newest last).
* ``GET /_simulator/responses/<id>[?wait=S]`` — the log of one response; with ``wait`` the server
  first waits up to S seconds for the response to finish.
* ``GET /_simulator/scenarios`` — ``{name: description}``.
* ``GET /_simulator`` — ``{"ok", "base_url", "scenarios", "log": {"responses", "bytes",
  "max_bytes"}}``: the log's size by its budget's measure (MAX_LOG_BYTES).

Log entry (also ``handle.log.get(id)`` in-process)::

    {"id", "scenario", "model", "resolved_model", "routing", "seed", "status",
     "request_received_ns" (monotonic), "request_received_at_ms" (wall clock),
     "events": [{"index", "type", "sequence_number", "data", "sent_us"}],
     "event_count", "events_truncated", "writes", "faults", "closed_us", "outcome"}

``sent_us`` is monotonic microseconds from the moment the request body was fully read to the
moment the write holding the end of that event was handed to the transport (after ``drain()``).
``outcome`` is one of ``in_progress``, ``complete``, ``error``, ``missing_terminal``, ``reset``,
``client_disconnected``, ``http_429``, ``http_500``, ``wrong_content_type``, ``server_stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from . import chat, messages, websocket
from .models import MODELS
from .scenarios import SCENARIOS, Plan, RequestError, SimRequest, build_plan

logger = logging.getLogger("streams.simulator")

MAX_LOGGED_RESPONSES = 10_000
MAX_LOGGED_EVENTS = 200_000  # per response; beyond it only the count is kept
# The log's memory, across responses (the oldest finished ones are evicted): each logged event
# costs its data's length plus EVENT_COST_BYTES, what one costs beyond its text (its tuple, list
# slot and numbers, and the text's own header: tests/streams/simulator/test_simulator.py measures
# it). A budget in events alone let the log of a long-running simulator reach 0.8 GB.
MAX_LOG_BYTES = 128 * 1024 * 1024
EVENT_COST_BYTES = 256
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
# The other formats' paths and what plans their answers (streams/simulator/chat.py, messages.py).
FORMAT_PATHS = {"/v1/chat/completions": chat.build, "/v1/messages": messages.build}

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


# --------------------------------------------------------------------------- log
@dataclass
class LogEntry:
    id: str
    scenario: str
    model: str
    resolved_model: str
    routing: dict | None
    seed: int
    status: int
    request_received_ns: int
    request_received_at_ms: int
    faults: list[dict]
    # (index, sent_us, type, sequence_number, data, event name, id) per logged event: a tuple
    # of atoms, which the garbage collector stops tracking, and no dict per event (the dicts
    # of `as_dict` are made when the log is read)
    events: list[tuple] = field(default_factory=list)
    bytes: int = 0  # what its logged events cost the log (MAX_LOG_BYTES)
    evicted: bool = False  # dropped from the log while still being sent: logs no more
    event_count: int = 0
    events_truncated: bool = False
    writes: int = 0
    closed_us: int | None = None
    outcome: str = "in_progress"

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "scenario": self.scenario,
            "model": self.model,
            "resolved_model": self.resolved_model,
            "routing": self.routing,
            "seed": self.seed,
            "status": self.status,
            "request_received_ns": self.request_received_ns,
            "request_received_at_ms": self.request_received_at_ms,
            "events": [_logged(*e) for e in self.events],
            "event_count": self.event_count,
            "events_truncated": self.events_truncated,
            "writes": self.writes,
            "faults": self.faults,
            "closed_us": self.closed_us,
            "outcome": self.outcome,
        }


def _logged(index, sent_us, type_, sequence_number, data, event_name, sse_id) -> dict:
    logged = {
        "index": index,
        "type": type_,
        "sequence_number": sequence_number,
        "data": data,
        "sent_us": sent_us,
    }
    # (the `event:` name when not "message", and the `id:`, only when sent)
    if event_name is not None:
        logged["event"] = event_name
    if sse_id is not None:
        logged["id"] = sse_id
    return logged


class ResponseLog:
    """In-memory, bounded, thread-safe log of the responses a simulator sent: at most
    `max_responses`, `max_events` logged per response, and `max_bytes` for all (module
    constants above)."""

    def __init__(
        self,
        max_responses: int = MAX_LOGGED_RESPONSES,
        max_events: int = MAX_LOGGED_EVENTS,
        max_bytes: int = MAX_LOG_BYTES,
    ):
        self.max_responses = max_responses
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, LogEntry] = OrderedDict()
        self._cond = threading.Condition()
        self._bytes = 0

    def open(self, plan: Plan, seed: int, received_ns: int) -> LogEntry:
        entry = LogEntry(
            id=plan.response_id,
            scenario=plan.scenario,
            model=plan.model,
            resolved_model=plan.resolved_model,
            routing=plan.routing,
            seed=seed,
            status=plan.status,
            request_received_ns=received_ns,
            request_received_at_ms=int(time.time() * 1000),
            faults=plan.faults,
        )
        with self._cond:
            self._drop(entry.id)
            self._entries[entry.id] = entry
            while len(self._entries) > self.max_responses:
                self._drop(next(iter(self._entries)))
        return entry

    def _drop(self, response_id: str) -> None:
        old = self._entries.pop(response_id, None)
        if old is not None:
            self._bytes -= old.bytes
            old.evicted = True

    def _evict(self, keep: LogEntry) -> None:
        """Drop the oldest responses (never ``keep``) until the log is within its budget."""
        with self._cond:
            entries = self._entries
            while self._bytes > self.max_bytes and len(entries) > 1:
                oldest = next(iter(entries))
                if entries[oldest] is keep:
                    entries.move_to_end(oldest)
                    continue
                self._drop(oldest)

    def add_event(self, entry: LogEntry, index: int, ev, sent_us: int) -> None:
        entry.event_count += 1
        if entry.evicted:
            return
        if len(entry.events) < self.max_events:
            entry.events.append(
                (index, sent_us, ev.type, ev.sequence_number, ev.data, ev.event_name, ev.sse_id)
            )
            cost = len(ev.data) + EVENT_COST_BYTES
            entry.bytes += cost
            self._bytes += cost
            if self._bytes > self.max_bytes:
                self._evict(entry)
        else:
            entry.events_truncated = True

    @property
    def bytes(self) -> int:
        """What the logged events cost, by the budget's measure."""
        return self._bytes

    def close(self, entry: LogEntry, outcome: str, closed_us: int) -> None:
        with self._cond:
            if entry.closed_us is None:
                entry.closed_us = closed_us
                entry.outcome = outcome
            self._cond.notify_all()

    def get(self, response_id: str) -> dict | None:
        with self._cond:
            entry = self._entries.get(response_id)
        return entry.as_dict() if entry else None

    def is_closed(self, response_id: str) -> bool:
        with self._cond:
            entry = self._entries.get(response_id)
            return bool(entry and entry.closed_us is not None)

    def wait(self, response_id: str, timeout: float = 5.0) -> dict | None:
        """Block (in a thread other than the server's) until the response is closed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                entry = self._entries.get(response_id)
                if entry and entry.closed_us is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        return self.get(response_id)

    def ids(self, limit: int = 1000) -> list[str]:
        with self._cond:
            keys = list(self._entries.keys())
        return keys[-limit:]

    def latest(self) -> dict | None:
        ids = self.ids(1)
        return self.get(ids[0]) if ids else None

    def clear(self) -> None:
        with self._cond:
            for response_id in list(self._entries):
                self._drop(response_id)

    def __len__(self) -> int:
        return len(self._entries)


# --------------------------------------------------------------------------- HTTP plumbing
@dataclass
class HttpRequest:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes
    path: str = ""
    query: dict[str, list[str]] = field(default_factory=dict)

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


async def _read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """The next request on the connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise _BadRequest(431, "Request headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise _BadRequest(400, "Malformed request line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await _read_body(reader, headers)
    split = urlsplit(target)
    return HttpRequest(
        method=method.upper(),
        target=target,
        version=version.strip(),
        headers=headers,
        body=body,
        path=split.path,
        query=parse_qs(split.query),
    )


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The request's body: chunked, of its Content-Length, or none."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _read_chunked(reader)
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise _BadRequest(400, "Bad Content-Length") from None
        if length > MAX_BODY_BYTES:
            raise _BadRequest(413, "Request body too large")
        return await reader.readexactly(length)
    return b""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, its trailers skipped."""
    parts = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            # trailers until an empty line
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            break
        total += size
        if total > MAX_BODY_BYTES:
            raise _BadRequest(413, "Request body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    return b"".join(parts)


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _error_body(code: str, message: str, type_: str = "invalid_request_error") -> dict:
    return {"error": {"code": code, "message": message, "type": type_}}


# --------------------------------------------------------------------------- server
class _TimedReader(asyncio.StreamReader):
    """A StreamReader that remembers the monotonic time of the latest bytes fed to it."""

    last_data_ns = 0

    def feed_data(self, data):
        self.last_data_ns = time.monotonic_ns()
        super().feed_data(data)


class SimulatorServer:
    """The simulated upstream. ``await start()``, then point an OpenAI client at ``base_url``."""

    def __init__(
        self,
        *,
        seed: int | str = 0,
        time_scale: float = 1.0,
        api_key: str | None = None,
        log: ResponseLog | None = None,
    ):
        self.seed = seed
        self.time_scale = time_scale
        self._api_key = api_key
        self.log = log or ResponseLog()
        self.host = "127.0.0.1"
        self.port: int | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[asyncio.Task, asyncio.StreamWriter] = {}

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._plan_lock = asyncio.Lock()

        def protocol():
            reader = _TimedReader(limit=MAX_HEADER_BYTES, loop=loop)
            return asyncio.StreamReaderProtocol(reader, self._handle, loop=loop)

        # asyncio.start_server, with a reader that notes when bytes arrive (see _TimedReader)
        self._server = await loop.create_server(protocol, host, port, reuse_address=True)
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("simulator listening on %s", self.base_url)
        return self.port

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task, writer in list(self._conns.items()):
            with contextlib.suppress(Exception):
                writer.transport.abort()
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)
        self._server = None

    # -- connection loop
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        try:
            while True:
                try:
                    req = await _read_request(reader)
                except _BadRequest as exc:
                    await self._send_json(
                        writer, exc.status, _error_body("bad_request", exc.message), False
                    )
                    break
                if req is None:
                    break
                keep = await self._dispatch(req, reader, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # pragma: no cover - a bug; keep serving other connections
            logger.exception("simulator connection handler failed")
        finally:
            self._conns.pop(task, None)
            if not writer.transport.is_closing():
                with contextlib.suppress(Exception):
                    writer.close()

    async def _send_json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        obj,
        keep_alive: bool,
        extra: list[tuple[str, str]] | None = None,
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> None:
        body = raw if raw is not None else json.dumps(obj, ensure_ascii=False).encode()
        headers = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Server", "streamscope-simulator"),
            ("Connection", "keep-alive" if keep_alive else "close"),
        ]
        headers += extra or []
        writer.write(_head(status, headers) + body)
        await writer.drain()

    def _authorized(self, req: HttpRequest) -> bool:
        key = self._api_key if self._api_key is not None else os.environ.get("SIMULATOR_API_KEY")
        if not key:
            return True
        if "x-api-key" in req.headers:  # (Anthropic's clients)
            return secrets.compare_digest(req.headers["x-api-key"], key)
        return secrets.compare_digest(req.headers.get("authorization", ""), f"Bearer {key}")

    async def _dispatch(
        self, req: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        # When the request's last bytes came off the socket, not when this task got to them:
        # under a burst of requests the last ones would be stamped late (docs/performance.md).
        received_ns = getattr(reader, "last_data_ns", 0) or time.monotonic_ns()
        keep = req.keep_alive
        path = req.path.rstrip("/") or "/"
        if path.startswith("/v1/") and not self._authorized(req):
            await self._send_json(
                writer,
                401,
                _error_body("invalid_api_key", "Incorrect or missing API key"),
                keep,
                extra=[("WWW-Authenticate", "Bearer")],
            )
            return keep
        if path in FORMAT_PATHS:
            if req.method != "POST":
                await self._send_json(
                    writer, 405, _error_body("method_not_allowed", "Use POST"), keep
                )
                return keep
            return await self._responses(req, reader, writer, received_ns, FORMAT_PATHS[path])
        if path == "/v1/responses":
            if req.method == "GET" and websocket.is_upgrade(req.headers):
                return await websocket.serve(self, req, reader, writer, received_ns)
            if req.method != "POST":
                await self._send_json(
                    writer, 405, _error_body("method_not_allowed", "Use POST"), keep
                )
                return keep
            return await self._responses(req, reader, writer, received_ns)
        if req.method != "GET":
            await self._send_json(writer, 405, _error_body("method_not_allowed", "Use GET"), keep)
            return keep
        await self._get(req, path, writer, keep)
        return keep

    async def _get(
        self, req: HttpRequest, path: str, writer: asyncio.StreamWriter, keep: bool
    ) -> None:
        """A GET: the models, the response log, the scenarios, or the server's own page."""
        if path == "/v1/models" and "anthropic-version" in req.headers:
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in MODELS
            ]
            page = {"data": data, "has_more": False, "first_id": data[0]["id"]}
            await self._send_json(writer, 200, {**page, "last_id": data[-1]["id"]}, keep)
        elif path == "/v1/models":
            data = [
                {"id": m, "object": "model", "owned_by": "streamscope-simulator"} for m in MODELS
            ]
            await self._send_json(writer, 200, {"object": "list", "data": data}, keep)
        elif path == "/_simulator/responses":
            ids = self.log.ids(1000)
            await self._send_json(writer, 200, {"object": "list", "data": ids}, keep)
        elif path.startswith("/_simulator/responses/"):
            await self._logged_response(req, path, writer, keep)
        elif path == "/_simulator/scenarios":
            await self._send_json(writer, 200, SCENARIOS, keep)
        elif path in ("/", "/_simulator", "/healthz"):
            await self._send_json(
                writer,
                200,
                {
                    "ok": True,
                    "base_url": self.base_url,
                    "scenarios": list(SCENARIOS),
                    "log": {
                        "responses": len(self.log),
                        "bytes": self.log.bytes,
                        "max_bytes": self.log.max_bytes,
                    },
                },
                keep,
            )
        else:
            await self._send_json(writer, 404, _error_body("not_found", f"No route {path}"), keep)

    async def _logged_response(
        self, req: HttpRequest, path: str, writer: asyncio.StreamWriter, keep: bool
    ) -> None:
        """``GET /_simulator/responses/<id>[?wait=S]``: the log of one response, once it has
        finished or S seconds (at most 60) have passed."""
        rid = path.rsplit("/", 1)[-1]
        wait = float((req.query.get("wait") or ["0"])[0] or 0)
        deadline = time.monotonic() + min(wait, 60.0)
        while not self.log.is_closed(rid) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        entry = self.log.get(rid)
        if entry is None:
            await self._send_json(
                writer, 404, _error_body("not_found", f"No logged response {rid}"), keep
            )
        else:
            await self._send_json(writer, 200, entry, keep)

    # -- POST /v1/responses
    async def _responses(
        self,
        req: HttpRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        received_ns: int,
        build=None,
    ) -> bool:
        """A POST of any format: `build` makes another format's plan (chat.build,
        messages.build); None, a Responses one."""
        keep = req.keep_alive
        try:
            try:
                body = json.loads(req.body.decode("utf-8") or "null")
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise RequestError(
                    400, "invalid_json", f"Request body is not valid JSON: {exc}"
                ) from None
            if build is not None:
                async with self._plan_lock:
                    plan, seed = build(
                        body,
                        header_scenario=req.headers.get("x-simulator-scenario"),
                        server_seed=self.seed,
                        default_time_scale=self.time_scale,
                        response_id=f"resp_{secrets.token_hex(16)}",
                        created_s=int(time.time()),
                    )
                return await self._send_plan(plan, seed, reader, writer, received_ns, keep)
            sim_req = SimRequest.from_body(
                body,
                header_scenario=req.headers.get("x-simulator-scenario"),
                server_seed=self.seed,
                default_time_scale=self.time_scale,
            )
        except RequestError as exc:
            await self._send_json(writer, exc.status, exc.body(), keep)
            return keep
        # Building a plan costs real CPU. One at a time, each in a loop iteration of its own
        # (a lock's next waiter wakes in the next iteration, after the loop has polled the
        # sockets): a burst of requests planned back to back kept the loop from reading other
        # requests, and late reads made late receipt stamps (docs/performance.md, "Simulator").
        async with self._plan_lock:
            plan = build_plan(
                sim_req,
                response_id=f"resp_{secrets.token_hex(16)}",
                created_at_ms=int(time.time() * 1000),
            )
        return await self._send_plan(plan, sim_req.seed, reader, writer, received_ns, keep)

    async def _send_plan(self, plan, seed, reader, writer, received_ns, keep) -> bool:
        entry = self.log.open(plan, seed, received_ns)
        outcome = "client_disconnected"
        try:
            outcome, keep = await self._serve_plan(plan, reader, writer, received_ns, entry, keep)
            return keep
        except (ConnectionError, OSError):
            outcome = "client_disconnected"
            return False
        except asyncio.CancelledError:
            outcome = "server_stopped"
            raise
        finally:
            self.log.close(entry, outcome, (time.monotonic_ns() - received_ns) // 1000)

    async def _wait_until(
        self, target: float, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Sleep until monotonic ``target``; False as soon as the client has gone away."""
        while True:
            if reader.at_eof() or writer.transport.is_closing():
                return False
            remaining = target - time.monotonic()
            if remaining <= 0:
                return True
            await asyncio.sleep(min(remaining, 0.05))

    async def _serve_plan(
        self,
        plan: Plan,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        received_ns: int,
        entry: LogEntry,
        keep: bool,
    ) -> tuple[str, bool]:
        """Send ``plan`` on its schedule: (the outcome, whether the connection stays open)."""
        t0 = received_ns / 1e9
        if plan.header_delay > 0 and not await self._wait_until(
            t0 + plan.header_delay, reader, writer
        ):
            return "client_disconnected", False
        rid_header = ("X-Simulator-Response-Id", plan.response_id)
        if plan.body is not None:
            await self._send_json(
                writer,
                plan.status,
                None,
                keep,
                extra=[rid_header, *plan.headers],
                raw=plan.body,
                content_type=plan.content_type,
            )
            entry.writes += 1
            outcome = (
                plan.end
                if plan.end in ("http_429", "http_500", "wrong_content_type")
                else "complete"
            )
            return outcome, keep
        headers = [
            ("Content-Type", plan.content_type),
            ("Cache-Control", "no-cache"),
            ("X-Accel-Buffering", "no"),
            ("Transfer-Encoding", "chunked"),
            ("Server", "streamscope-simulator"),
            ("Connection", "keep-alive" if keep else "close"),
            rid_header,
            *plan.headers,
        ]
        writer.write(_head(plan.status, headers))
        await writer.drain()
        if not await self._send_writes(plan, reader, writer, received_ns, entry):
            return "client_disconnected", False
        return await self._end_stream(plan, writer, keep)

    async def _send_writes(
        self,
        plan: Plan,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        received_ns: int,
        entry: LogEntry,
    ) -> bool:
        """Each of the plan's writes as one HTTP chunk at its time, its events logged as sent;
        False as soon as the client has gone away."""
        scale = plan.time_scale
        base = received_ns / 1e9 + plan.header_delay
        last_write = time.monotonic()
        for w in plan.writes:
            target = max(base + w.at * scale + w.offset, last_write + w.pause_before)
            if not await self._wait_until(target, reader, writer):
                return False
            writer.write(b"%x\r\n%b\r\n" % (len(w.data), w.data))
            await writer.drain()
            now_ns = time.monotonic_ns()
            last_write = now_ns / 1e9
            entry.writes += 1
            sent_us = (now_ns - received_ns) // 1000
            for idx in w.events:
                self.log.add_event(entry, idx, plan.events[idx], sent_us)
            if target <= time.monotonic():
                await asyncio.sleep(0)  # let other connections run between back-to-back writes
        return True

    async def _end_stream(
        self, plan: Plan, writer: asyncio.StreamWriter, keep: bool
    ) -> tuple[str, bool]:
        """The stream's end: a TCP RST (reset), or the final chunk."""
        if plan.end == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return "reset", False
        if plan.linger:
            await asyncio.sleep(plan.linger)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        outcome = {"error": "error", "missing_terminal": "missing_terminal"}.get(
            plan.end, "complete"
        )
        return outcome, keep


# --------------------------------------------------------------------------- thread runner
class SimulatorHandle:
    """A :class:`SimulatorServer` running on its own event loop in a daemon thread."""

    def __init__(self, server: SimulatorServer, loop: asyncio.AbstractEventLoop, thread):
        self.server = server
        self._loop = loop
        self._thread = thread

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def root_url(self) -> str:
        return self.server.root_url

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    @property
    def log(self) -> ResponseLog:
        return self.server.log

    def stop(self, timeout: float = 5.0) -> None:
        if not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop)
        with contextlib.suppress(Exception):
            fut.result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)

    def __enter__(self) -> SimulatorHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_in_thread(host: str = "127.0.0.1", port: int = 0, **server_kwargs) -> SimulatorHandle:
    """Start a simulator in a daemon thread; returns once it is listening.

    ``server_kwargs`` go to :class:`SimulatorServer` (``seed``, ``time_scale``, ``api_key``)."""
    server = SimulatorServer(**server_kwargs)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    error: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start(host, port))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            error.append(exc)
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=run, name="streamscope-simulator", daemon=True)
    thread.start()
    ready.wait(10)
    if error:
        raise error[0]
    return SimulatorHandle(server, loop, thread)


_shared: SimulatorHandle | None = None
_shared_lock = threading.Lock()


def shared_simulator() -> SimulatorHandle:
    """One process-wide simulator on a free 127.0.0.1 port, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared._thread.is_alive():
            _shared = start_in_thread()
        return _shared
