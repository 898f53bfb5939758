"""The ASGI application of `bench proxy`'s Daphne: the project's application, plus
`GET /_bench/floor`, a trivial raw-ASGI response from the same server, so the benchmark can say
how far the proxy is above Daphne's own floor. Only on the bench's 127.0.0.1 server."""

from dashboard.asgi import application as project

FLOOR = b'{"ok":true}'


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
    await project(scope, receive, send)
