"""A real HTTP receiver on 127.0.0.1 for tests that deliver notifications (webhooks, Slack),
which can also be hostile: answer 500, hang, answer 10 MB, trickle, redirect.

    with receiver() as r:                 # r.url: "http://127.0.0.1:<port>/hook"
        ...
        method, path, headers, body = r.requests[0]
    with receiver(behaviour="hang") as r: ...
"""

import contextlib
import http.server
import threading
import time

from streams.bench import free_port

BEHAVIOURS = ("ok", "500", "hang", "huge", "trickle", "redirect", "404")
HUGE_BYTES = 10 * 1024 * 1024


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        owner = self.server.owner
        owner.requests.append(("POST", self.path, dict(self.headers.items()), body))
        getattr(self, "_" + owner.behaviour)()

    def _answer(self, status, body=b"ok", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _ok(self):
        self._answer(200)

    def _500(self):
        self._answer(500, self.server.owner.answer)

    def _404(self):
        self._answer(404, b"no such hook")

    def _redirect(self):
        self._answer(302, b"", [("location", self.server.owner.location)])

    def _hang(self):
        self.server.owner.stop.wait(60)

    def _huge(self):
        self.send_response(200)
        self.send_header("content-length", str(HUGE_BYTES))
        self.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(HUGE_BYTES // len(chunk)):
                self.wfile.write(chunk)
                self.server.owner.written += len(chunk)
        except OSError:  # the client stopped reading: what it should do
            pass

    def _trickle(self):
        # one byte a tenth of a second, each well within any read time limit: only a limit
        # on the whole attempt ends it
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.wfile.flush()
            while not self.server.owner.stop.is_set():
                self.wfile.write(b"X-Slow: ")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass


class Receiver:
    def __init__(self, behaviour):
        assert behaviour in BEHAVIOURS
        self.behaviour = behaviour
        self.requests = []
        self.answer = b"receiver broke"  # what a 500 says
        self.written = 0  # bytes of a huge answer the client took
        self.location = "http://127.0.0.1:1/elsewhere"  # where a redirect sends
        self.stop = threading.Event()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        self.server.daemon_threads = True
        self.server.owner = self


@contextlib.contextmanager
def receiver(behaviour="ok"):
    r = Receiver(behaviour)
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.stop.set()
        r.server.shutdown()
        r.server.server_close()
