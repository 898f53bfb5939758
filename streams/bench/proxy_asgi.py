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
"""

import asyncio
import os
from urllib.parse import parse_qs

import httpcore
from django.conf import settings
from django.utils.module_loading import import_string

project = import_string(settings.ASGI_APPLICATION)  # (the served application, by its setting)

FLOOR = b'{"ok":true}'
PACED_EVENT = (
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_1",'
    b'"output_index":0,"content_index":0,"delta":" Utrecht"}\n\n'
)
RELAY = "/_bench/relay/v1/"
SHARD = 16
_pools = []  # [pool, streams in flight]


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
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    url = os.environ["UPSTREAM_BASE_URL"].rstrip("/") + "/" + scope["path"][len(RELAY) :]
    headers = [(b"content-type", b"application/json"), (b"accept-encoding", b"identity")]
    async with pool.stream("POST", url, headers=headers, content=b"".join(chunks)) as response:
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [
                    (k, v)
                    for k, v in response.headers
                    if k.lower() not in (b"transfer-encoding", b"connection", b"content-length")
                ],
            }
        )
        async for chunk in response.aiter_stream():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
