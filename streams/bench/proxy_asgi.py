"""The ASGI application of `bench proxy`'s Daphne: the project's application, plus two floors
served by the same server, so the benchmark can say how far the proxy is above what the fixed
stack costs by itself. Only on the bench's 127.0.0.1 server.

- `GET /_bench/floor`: a trivial raw-ASGI response (Daphne's own round trip);
- `GET /_bench/paced?events=N&gap_ms=G`: N events of an answer written by the application
  itself, one every G ms: what the server costs per paced event with no upstream at all;
- `POST /_bench/relay/v1/responses`: the least a forwarding hop can do on this stack: the body
  is sent to the upstream with httpcore (httpx's transport, one pooled connection per stream in
  flight) and each chunk of the answer is written to the client as it arrives. No
  authentication, no parsing, no recording: what the proxy adds above it is Streamscope's own.
  Its pools are sharded like the proxy's (`upstream.ClientPool`, SHARD streams each): one
  httpcore pool scans all its connections per request, and a burst of 64 through one pool
  took many times as long as through the proxy's sharded pools (docs/performance.md, "Proxy").
- `POST /_bench/relay-lean/v1/responses` and `/_bench/relay-httpcore/v1/responses`: the same
  hop through httpx on the upstream client's two transports (`upstream.ClientPool`: the lean
  one, streams/ingest/transport.py, and httpcore's pool, both over network.py's stamping
  connections), so the bench shows what the transport under the proxy costs by itself.
"""

import asyncio
import os
from urllib.parse import parse_qs

import httpcore
from django.conf import settings
from django.utils.module_loading import import_string

from streams.ingest.upstream import ClientPool

project = import_string(settings.ASGI_APPLICATION)  # (the served application, by its setting)

FLOOR = b'{"ok":true}'
PACED_EVENT = (
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_1",'
    b'"output_index":0,"content_index":0,"delta":" Utrecht"}\n\n'
)
RELAY = "/_bench/relay/v1/"
# the same hop through httpx on each of the upstream client's transports: prefix -> transport
RELAY_HTTPX = {"/_bench/relay-lean/v1/": "lean", "/_bench/relay-httpcore/v1/": "httpcore"}
SHARD = 16
_pools = []  # [pool, streams in flight]
_clients = {}  # transport -> upstream.ClientPool (one event loop: Daphne's)


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/_bench/floor":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": FLOOR})
        return
    if scope["type"] == "http" and scope["path"] == "/_bench/paced":
        return await _paced(scope, send)
    if scope["type"] == "http" and scope["path"].startswith(RELAY):
        return await _relay(scope, receive, send)
    if scope["type"] == "http" and scope["path"].startswith("/_bench/relay-"):
        prefix = next((p for p in RELAY_HTTPX if scope["path"].startswith(p)), None)
        if prefix is not None:
            return await _relay_httpx(RELAY_HTTPX[prefix], prefix, scope, receive, send)
    await project(scope, receive, send)


async def _paced(scope, send):
    query = parse_qs(scope["query_string"].decode())
    events, gap_s = int(query["events"][0]), float(query["gap_ms"][0]) / 1e3
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for _ in range(events):
        await asyncio.sleep(gap_s)
        await send({"type": "http.response.body", "body": PACED_EVENT, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _relay(scope, receive, send):
    shard = next((s for s in _pools if s[1] < SHARD), None)
    if shard is None:
        pool = httpcore.AsyncConnectionPool(max_connections=SHARD, max_keepalive_connections=SHARD)
        shard = [pool, 0]
        _pools.append(shard)
    shard[1] += 1
    try:
        await _forward(shard[0], scope, receive, send)
    finally:
        shard[1] -= 1


async def _forward(pool, scope, receive, send):
    url, content = await _request(RELAY, scope, receive)
    async with pool.stream("POST", url, headers=HEADERS, content=content) as response:
        await send(_start(response.status, response.headers))
        async for chunk in response.aiter_stream():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _relay_httpx(transport, prefix, scope, receive, send):
    client = _clients.get(transport)
    if client is None:
        client = _clients[transport] = ClientPool(shard_streams=SHARD, transport=transport)
    url, content = await _request(prefix, scope, receive)
    async with client.stream("POST", url, headers=HEADERS, content=content) as response:
        await send(_start(response.status_code, response.headers.raw))
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


HEADERS = [(b"content-type", b"application/json"), (b"accept-encoding", b"identity")]


async def _request(prefix, scope, receive):
    """The upstream URL of a relayed request, and its body."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    url = os.environ["UPSTREAM_BASE_URL"].rstrip("/") + "/" + scope["path"][len(prefix) :]
    return url, b"".join(chunks)


def _start(status, headers):
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (k, v)
            for k, v in headers
            if k.lower() not in (b"transfer-encoding", b"connection", b"content-length")
        ],
    }
