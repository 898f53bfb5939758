"""A hostile upstream for redaction tests: a raw HTTP/1.1 server (127.0.0.1 only) whose answers
are chosen by the test, the Responses stream pieces to build them, and a search for a secret in
every form a reader may see: `KEY`, the key the redaction tests configure, and `copies`, the
most times it appears in any one of those forms (moved here from
tests/streams/store/test_redaction.py to be shared)."""

import asyncio
import contextlib
import html
import json
import re
import threading

# ---- a hostile upstream ------------------------------------------------------------------------


class RawUpstream:
    """A raw HTTP/1.1 server on 127.0.0.1 in a thread of its own (servers in other processes
    reach it too). `respond(method, path, headers, body)` returns `(status, content_type,
    chunks)`, or `(status, content_type, chunks, [(name, value), …])` with more response
    headers; each chunk is written and drained in turn, then the connection closes."""

    def __init__(self, respond):
        self.respond = respond
        self.requests = []
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        assert started.wait(10)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _run(self, started):
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        started.set()
        self._loop.run_forever()

    async def _handle(self, reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length") or 0))
            self.requests.append((method, path, headers, body))
            status, content_type, chunks, *extra = self.respond(method, path, headers, body)
            head = "".join(f"{name}: {value}\r\n" for name, value in (extra[0] if extra else ()))
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{head}"
                "Connection: close\r\n\r\n".encode("latin-1")
            )
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self):
        def close():
            self._server.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(close)
        self._thread.join(10)


@contextlib.contextmanager
def answering(settings, chunks, content_type="text/event-stream"):
    """A RawUpstream answering every request with `chunks`, the configured upstream while
    the block runs."""
    server = RawUpstream(lambda *a: (200, content_type, chunks))
    settings.UPSTREAM_BASE_URL = server.base_url
    try:
        yield server
    finally:
        server.stop()


class Endless:
    """An upstream's answer that never ends its last event (`tail` repeated after `head`), up
    to `cap` bytes, then the connection closes: `sent` counts the bytes the server wrote (each
    piece once the socket took the one before it). For RawUpstream's `respond`: `answer`."""

    def __init__(self, head, tail, cap, content_type="text/event-stream"):
        self.head, self.tail, self.cap = head, tail, cap
        self.content_type = content_type
        self.sent = 0

    def chunks(self):
        yield self.head
        self.sent += len(self.head)
        while self.sent < self.cap:
            yield self.tail
            self.sent += len(self.tail)

    def answer(self, *request):
        return 200, self.content_type, self.chunks()


# An event stream's first two events, then an event that never ends, three ways.
ENDLESS_HEAD = (
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_big",'
    b'"object":"response","model":"m","status":"in_progress"}}\n\n'
    b'data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_big",'
    b'"object":"response","model":"m","status":"in_progress"}}\n\n'
)
ENDLESS = {
    "an endless line": (b"data: ", b"x" * 4096),
    "an endless block of data lines": (b"", b"data: " + b"y" * 4089 + b"\n"),
    "endless comments": (b"", b": " + b"z" * 4093 + b"\n"),
}


def holding(reader):
    """What an event reader (streams/ingest/upstream.py) holds of the bytes since its last
    event, counted from its state (not from its own count): the unterminated line, the open
    block's data lines and the comments waiting for the next event."""
    lines = [*reader._decoder._data, *reader._preamble]
    carried = len(reader._line) + sum(map(len, reader._more))
    return carried + sum(len(line) + 1 for line in lines)


def sse(data, event="message", id=None):
    head = f"event: {event}\n" + (f"id: {id}\n" if id is not None else "")
    return (head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n").encode()


def escaped(text, every=1, upper=False):
    """`text` with every `every`-th character as a JSON `\\uXXXX` escape."""
    out = []
    for i, ch in enumerate(text):
        if i % every == 0:
            code = f"{ord(ch):04x}"
            out.append("\\u" + (code.upper() if upper else code))
        else:
            out.append(ch)
    return "".join(out)


def echoing_stream(key):
    """A Responses stream that carries `key` in every field a stream has."""
    e1 = escaped(key)  # every character escaped
    e2 = escaped(key, every=3, upper=True)  # some, in upper-case hex
    first = "\\u0073" + key[1:]  # the issue's `\u0073k-…`
    events = [
        sse(
            f'{{"type":"response.created","sequence_number":0,"response":{{"id":"resp_{e2}",'
            f'"object":"response","model":"m-{first}","status":"in_progress"}}}}',
            id=key,
        ),
        sse(
            '{"type":"response.output_item.added","sequence_number":1,"output_index":0,'
            f'"item":{{"type":"function_call","id":"fc_1","call_id":"call_{key}",'
            f'"name":"{e1}","arguments":""}}}}'
        ),
        sse(
            '{"type":"response.function_call_arguments.delta","sequence_number":2,'
            f'"output_index":0,"item_id":"fc_1","delta":"{{\\"k\\":\\"{first}\\"}}"}}'
        ),
        sse(
            '{"type":"response.output_item.done","sequence_number":3,"output_index":0,'
            f'"item":{{"type":"function_call","id":"fc_1","call_id":"call_{key}",'
            f'"name":"{e1}","arguments":"{{\\"k\\":\\"{first}\\"}}","status":"completed"}}}}'
        ),
        sse(
            '{"type":"response.output_item.added","sequence_number":4,"output_index":1,'
            '"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}'
        ),
        sse(
            '{"type":"response.content_part.added","sequence_number":5,"output_index":1,'
            '"item_id":"msg_1","content_index":0,"part":{"type":"output_text","text":""}}'
        ),
        sse(
            '{"type":"response.output_text.delta","sequence_number":6,"output_index":1,'
            f'"item_id":"msg_1","content_index":0,"delta":"raw {key}, "}}'
        ),
        sse(
            '{"type":"response.output_text.delta","sequence_number":7,"output_index":1,'
            f'"item_id":"msg_1","content_index":0,"delta":"escaped {first}, {e1}, {e2}."}}'
        ),
        sse(f'{{"type":"response.{key}","sequence_number":8}}', event=key),
        sse(f'{{"type":"response.{e2}","sequence_number":9,"note":"{e1}"}}'),
        sse(
            f'{{"type":"response.completed","sequence_number":10,"response":{{'
            f'"id":"resp_{e2}","object":"response","model":"m-{first}","status":"completed",'
            f'"output_text":"raw {key}, escaped {e1}"}}}}'
        ),
    ]
    return events


def hostile(method, path, headers, body):
    """Echoes the bearer key it was sent: in its model list, a 401 body, or a stream (chosen by
    `metadata.hostile`)."""
    key = headers.get("authorization", "").removeprefix("Bearer ")
    if method == "GET" and path.endswith("/models"):
        models = [{"id": f"m-{key}", "object": "model"}, {"id": f"m-{escaped(key)}"}]
        return 200, "application/json", [json.dumps({"data": models}).encode()]
    mode = (json.loads(body or b"{}").get("metadata") or {}).get("hostile", "stream")
    if mode == "401":
        message = f"Incorrect API key provided: {key} ({escaped(key)})"
        error = {"error": {"code": "invalid_api_key", "message": message}}
        return 401, "application/json", [json.dumps(error).encode()]
    if mode == "error_event":
        created = echoing_stream(key)[0]
        error = sse(
            f'{{"type":"error","code":"invalid_api_key","message":"Bad key {escaped(key, 2)}"}}'
        )
        return 200, "text/event-stream", [created, error]
    return 200, "text/event-stream", echoing_stream(key)


# ---- finding the key in any form ----------------------------------------------------------------

_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")


def forms_of(text):
    """`text` as a reader may see it: as sent, HTML-unescaped, and with JSON escapes decoded
    (once, twice: data inside a JSON document is escaped twice)."""
    seen = [text, html.unescape(text)]
    for _ in range(3):
        seen.append(_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), seen[-1]))
    return seen


KEY = "sk-hostile-9f8e7d6c5b4a"


def copies(text, key=KEY):
    return max(form.count(key) for form in forms_of(text))
