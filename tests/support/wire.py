"""Ground truth for timing tests: a loopback packet capture (tcpdump), read back here.

The kernel stamps each packet as it crosses `lo`, whatever our event loop or the simulator's is
doing, so the time between the request's last packet and the packet that completed the first
output delta is the TTFT the wire saw. Nothing here depends on either process being on time.

`Capture` runs `tcpdump -i lo -U -w FILE --time-stamp-precision=nano "tcp port P"`; `read_pcap`
is a minimal reader of that file (pcap, nanosecond magic, Ethernet link type on `lo`, IPv4/IPv6,
TCP); `exchanges` reassembles each connection and splits it into request/response exchanges,
with the wire time of every SSE event of every response; `judge_ttft` compares recorded TTFTs
with it, and `record_50_on_the_wire` is the shared timing test
(tests/streams/ingest/test_recorder.py on a quiet machine, tests/streams/ingest/test_wire_truth.py
with a CPU hog beside it, in the test's
process and through a fresh `manage.py record`).
"""

import bisect
import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

PCAP_MAGIC_NS = 0xA1B23C4D
PCAP_MAGIC_US = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1


def capture_unavailable():
    """Why a capture cannot run here (None: it can)."""
    if shutil.which("tcpdump") is None:
        return "tcpdump is not installed (.ci/apt-deps installs it)"
    if os.geteuid() != 0:
        return "capturing on lo needs root"
    return None


class Capture:
    """tcpdump on lo for one TCP port, from `start()` (returns once it is listening) to
    `stop()` (returns the packets)."""

    def __init__(self, port):
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="wire-")
        self.path = os.path.join(self.dir, "cap.pcap")
        self.proc = None
        self.stats = ""

    def start(self):
        self.proc = subprocess.Popen(
            # Not --immediate-mode: a wake-up per packet let a starved tcpdump fall behind (555
            # packets dropped beside a CPU hog); the kernel hands it whole blocks instead, the
            # last one at most a second late (stop() waits for it).
            ["tcpdump", "-i", "lo", "-U", "-n", "-B", "65536", "-s", "0"]
            + ["--time-stamp-precision=nano", "-w", self.path, f"tcp port {self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # tcpdump says "listening on lo" once its filter is attached: packets from then on are in
        line = self.proc.stderr.readline().decode(errors="replace")
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"tcpdump did not start: {line!r}")
        return self

    def stop(self):
        """Stop capturing; the packets, and the `dropped` count tcpdump reports (must be 0)."""
        # The kernel hands tcpdump a partly filled block after its timeout (tcpdump's 1 s): by
        # then every packet so far is written.
        time.sleep(1.5)
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        self.stats = err.decode(errors="replace")
        try:
            with open(self.path, "rb") as f:
                packets = read_pcap(f.read())
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        return packets

    @property
    def dropped(self):
        for line in self.stats.splitlines():
            if "dropped by kernel" in line:
                return int(line.split()[0])
        return None


@dataclass
class Packet:
    t_ns: int  # the kernel's capture time, CLOCK_REALTIME ns
    src: tuple  # (address, port)
    dst: tuple
    seq: int
    flags: int
    payload: bytes


def read_pcap(data):
    """The TCP packets of a pcap file (Ethernet link type; IPv4 and IPv6)."""
    (magic,) = struct.unpack_from("<I", data)
    if magic in (PCAP_MAGIC_NS, PCAP_MAGIC_US):
        order = "<"
    else:
        order = ">"
        (magic,) = struct.unpack_from(">I", data)
    if magic not in (PCAP_MAGIC_NS, PCAP_MAGIC_US):
        raise ValueError(f"not a pcap file (magic {magic:#x})")
    frac_ns = 1 if magic == PCAP_MAGIC_NS else 1000
    _, _, _, _, _, linktype = struct.unpack_from(order + "HHiIII", data, 4)
    if linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"link type {linktype}, expected Ethernet (lo)")
    record = struct.Struct(order + "IIII")
    packets = []
    offset = 24
    while offset + record.size <= len(data):
        sec, frac, caplen, _ = record.unpack_from(data, offset)
        offset += record.size
        frame = data[offset : offset + caplen]
        offset += caplen
        packet = _tcp(frame, sec * 1_000_000_000 + frac * frac_ns)
        if packet is not None:
            packets.append(packet)
    return packets


def _tcp(frame, t_ns):
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    ip = frame[14:]
    if ethertype == 0x0800:
        header = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            return None
        (total,) = struct.unpack_from("!H", ip, 2)
        src, dst = ip[12:16], ip[16:20]
        segment = ip[header:total]
    elif ethertype == 0x86DD:
        if ip[6] != 6:  # (no extension headers on loopback TCP)
            return None
        (length,) = struct.unpack_from("!H", ip, 4)
        src, dst = ip[8:24], ip[24:40]
        segment = ip[40 : 40 + length]
    else:
        return None
    sport, dport, seq, _, offset_flags = struct.unpack_from("!HHIIH", segment)
    payload = segment[(offset_flags >> 12) * 4 :]
    return Packet(t_ns, (src, sport), (dst, dport), seq, offset_flags & 0x3F, payload)


@dataclass
class WireEvent:
    type: str
    data: str
    t_ns: int  # capture time of the packet that carried the end of the event


@dataclass
class Exchange:
    """One request and its response on one connection, as the wire saw them."""

    request_last_ns: int  # capture time of the request's last packet
    response_first_ns: int
    status: int = 0
    events: list = field(default_factory=list)

    @property
    def response_id(self):
        for event in self.events:
            if event.type == "response.created":
                return json.loads(event.data)["response"]["id"]
        return None

    def first(self, predicate):
        return next((e for e in self.events if predicate(e)), None)


def _stream(packets):
    """Reassemble one direction of a connection: (bytes, [(end offset, capture time)])."""
    base = None
    pieces = {}
    for p in packets:
        if not p.payload:
            continue
        if base is None:
            base = p.seq
        start = (p.seq - base) % (1 << 32)
        pieces.setdefault(start, p)  # a retransmission keeps the first copy's time
    data = bytearray()
    ends = []
    for start in sorted(pieces):
        p = pieces[start]
        if start < len(data):  # overlap (a retransmission with more): keep the new bytes only
            payload = p.payload[len(data) - start :]
        else:
            payload = p.payload
        if not payload:
            continue
        data += payload
        ends.append((len(data), p.t_ns))
    return bytes(data), ends


def _time_at(ends, offset):
    """Capture time of the packet carrying byte `offset`."""
    return ends[bisect.bisect_right([e for e, _ in ends], offset)][1]


def exchanges(packets, server_port):
    """Every request/response exchange in the capture, over all connections to `server_port`."""
    connections = {}
    for p in packets:
        client = p.src if p.dst[1] == server_port else p.dst
        connections.setdefault(client, []).append(p)
    out = []
    for client, conn in connections.items():
        up = [p for p in conn if p.src == client]
        down = [p for p in conn if p.src != client]
        sent, up_ends = _stream(up)
        body, down_ends = _stream(down)
        out.extend(_responses(body, down_ends, up_ends, sent))
    return out


def _responses(data, ends, up_ends, sent=b""):
    """Split a server→client byte stream into HTTP/1.1 responses (chunked or with a length),
    each with its SSE events and the time of the request's last packet before it; a 101 turns
    the rest of the connection into WebSocket frames (`_socket_exchanges`)."""
    out = []
    pos = 0
    while pos < len(data):
        head_end = data.find(b"\r\n\r\n", pos)
        if head_end < 0:
            break
        head = data[pos:head_end].decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        first_ns = _time_at(ends, pos)
        before = [t for _, t in up_ends if t <= first_ns]
        exchange = Exchange(
            request_last_ns=before[-1] if before else None, response_first_ns=first_ns
        )
        exchange.status = status
        pos = head_end + 4
        if status == 101:
            out.extend(_socket_exchanges(data, pos, ends, sent, up_ends))
            break
        body = []  # (body bytes, wire offset of each piece's first byte)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                line_end = data.find(b"\r\n", pos)
                if line_end < 0:
                    pos = len(data)
                    break
                size = int(data[pos:line_end].split(b";")[0], 16)
                pos = line_end + 2
                if size == 0:
                    pos = data.find(b"\r\n", pos) + 2  # (no trailers from the simulator)
                    break
                body.append((data[pos : pos + size], pos))
                pos += size + 2
        else:
            length = int(headers.get("content-length", len(data) - pos))
            body.append((data[pos : pos + length], pos))
            pos += length
        if "text/event-stream" in headers.get("content-type", ""):
            exchange.events = _events(body, ends)
        out.append(exchange)
        if status and headers.get("connection", "").lower() == "close":
            break
    return out


def _events(body, ends):
    """SSE events of a body given as (bytes, wire offset) pieces; each event's time is that of
    the packet carrying the last byte of its terminating blank line."""
    text = b"".join(piece for piece, _ in body)
    wire = []  # body offset → wire offset, per piece
    at = 0
    for piece, offset in body:
        wire.append((at, offset))
        at += len(piece)
    events = []
    start = 0
    while True:  # (LF line ends, as the simulator sends them)
        end = text.find(b"\n\n", start)
        if end < 0:
            break
        block = text[start:end].decode("utf-8", errors="replace")
        last = end + 1  # the second LF completes the event
        piece_start, piece_wire = max((w for w in wire if w[0] <= last), key=lambda w: w[0])
        t_ns = _time_at(ends, piece_wire + (last - piece_start))
        data = "\n".join(
            line[6:] if line.startswith("data: ") else line[5:]
            for line in block.split("\n")
            if line.startswith("data:")
        )
        type_ = ""
        try:
            obj = json.loads(data)
            if isinstance(obj, dict):
                type_ = str(obj.get("type", ""))
        except ValueError:
            pass
        events.append(WireEvent(type_, data, t_ns))
        start = end + 2
    return events


# --- WebSocket (the Responses API's WebSocket mode) ----------------------------------------


def ws_frames(data, pos):
    """The WebSocket frames of `data` from `pos` (RFC 6455; a client's are masked, a server's
    not): (final?, opcode, payload, offset just past the frame's last byte), up to the last
    whole frame. Where a frame was split across TCP segments does not matter here: the stream
    is reassembled first, and a frame's time is that of the packet carrying its last byte."""
    out = []
    while pos + 2 <= len(data):
        b0, b1 = data[pos], data[pos + 1]
        n, at = b1 & 0x7F, pos + 2
        if n == 126:
            if at + 2 > len(data):
                break
            (n,) = struct.unpack_from("!H", data, at)
            at += 2
        elif n == 127:
            if at + 8 > len(data):
                break
            (n,) = struct.unpack_from("!Q", data, at)
            at += 8
        mask = None
        if b1 & 0x80:
            mask, at = data[at : at + 4], at + 4
        if at + n > len(data):
            break
        payload = data[at : at + n]
        if mask is not None:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        out.append((bool(b0 & 0x80), b0 & 0x0F, payload, at + n))
        pos = at + n
    return out


def ws_messages(data, pos, ends):
    """The text/binary messages of one direction from `pos` (fragments joined, control frames
    left out): (payload, capture time of the packet carrying the message's last byte)."""
    out, parts = [], []
    for fin, opcode, payload, end in ws_frames(data, pos):
        if opcode >= 0x8:  # close, ping, pong
            continue
        parts.append(payload)
        if fin:
            out.append((b"".join(parts), _time_at(ends, end - 1)))
            parts = []
    return out


def _socket_exchanges(data, pos, ends, sent, up_ends):
    """One Exchange per response over a WebSocket: the server's messages from a
    `response.created` to the next, each a WireEvent at its capture time, and the time of the
    last packet of the client's `response.create` before it (its request)."""
    head_end = sent.find(b"\r\n\r\n")
    creates = [
        t_ns
        for payload, t_ns in ws_messages(sent, head_end + 4, up_ends)
        if b'"response.create"' in payload
    ]
    out = []
    for payload, t_ns in ws_messages(data, pos, ends):
        text = payload.decode("utf-8", errors="replace")
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        type_ = str(obj.get("type", "")) if isinstance(obj, dict) else ""
        if type_ == "response.created" or not out:
            before = [c for c in creates if c <= t_ns]
            out.append(
                Exchange(request_last_ns=before[-1] if before else None, response_first_ns=t_ns)
            )
            out[-1].status = 101
        out[-1].events.append(WireEvent(type_, text, t_ns))
    return out


def judge_frames(streams, events_of, packets, port):
    """Every stored frame's receipt time against the capture: (stream id, index, stored ms,
    wire ms), both from the request written. A read's stamp is that of its newest bytes, so a
    frame read together with later ones is judged against the newest of its read (as
    `judge_ttft` does for the first delta)."""
    by_id = {x.response_id: x for x in exchanges(packets, port) if x.events}
    out = []
    for stream in streams:
        exchange, stored = by_id[stream.upstream_id], events_of[stream.pk]
        assert [e.data for e in stored] == [e.data for e in exchange.events], stream.pk
        for i, event in enumerate(stored):
            last = i
            while last + 1 < len(stored) and stored[last + 1].t_us == event.t_us:
                last += 1
            wire_ms = (exchange.events[last].t_ns - exchange.request_last_ns) / 1e6
            out.append((stream.pk, i, (event.t_us - stream.request_written_us) / 1000, wire_ms))
    return out


@contextlib.contextmanager
def capturing(port):
    """A running `Capture` of `port`, or a skip where none can run (a failure where `CI` is set:
    there .ci/apt-deps installed tcpdump, and the suite runs as root)."""
    import pytest

    reason = capture_unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"no loopback capture in CI: {reason}")
        pytest.skip(reason)
    capture = Capture(port).start()
    try:
        yield capture
    finally:
        if capture.proc.poll() is None:
            capture.proc.kill()
            capture.proc.wait()


@contextlib.contextmanager
def cpu_hog(cpu=None):
    """A process busy-looping on one core (`cpu`, default the first this process may use)
    beside the test, as a neighbour on a shared machine would be."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        if cpu is None:
            cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(proc.pid, {cpu})
        yield proc
    finally:
        proc.kill()
        proc.wait()


@dataclass
class TtftJudgement:
    """One stream's TTFT against the wire.

    `read_ms` is what a receipt stamp can promise: the events of one read carry the kernel's
    time of its newest bytes, so the first delta's receipt time is that of the newest event in
    the read that delivered it (the first delta itself, unless we read late enough to find more
    queued: the kernel merges what waits in a socket, and only one stamp survives). `wire_ms`
    is the TTFT the wire saw (request's last packet → the first delta's packet)."""

    stream_id: int
    stored_ms: float
    read_ms: float
    wire_ms: float
    shared_read: bool  # the first delta's read also held later events
    # around the first delta (i), for a failure's message: (i, type, stored ms, wire ms), both
    # from the request written
    around: list = field(default_factory=list, repr=False)

    def __str__(self):
        rows = ", ".join(
            f"{i} {t.rsplit('.', 1)[-1]} {a:.3f}/{b:.3f}" for i, t, a, b in self.around
        )
        return (
            f"stream {self.stream_id}: {self.error_ms:+.3f} ms of its read, "
            f"{self.wire_error_ms:+.3f} ms of the wire (events stored/wire ms: {rows})"
        )

    @property
    def error_ms(self):
        return self.stored_ms - self.read_ms

    @property
    def wire_error_ms(self):
        return self.stored_ms - self.wire_ms


def _json(event):
    try:
        obj = json.loads(event.data)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _chat_output(event):
    deltas = [c.get("delta") or {} for c in _json(event).get("choices") or ()]
    return any(d.get("content") or d.get("tool_calls") or d.get("refusal") for d in deltas)


def _messages_output(event):
    delta = _json(event).get("delta") or {}
    return event.type == "content_block_delta" and delta.get("type") in (
        "text_delta",
        "input_json_delta",
    )


# Per format (streams/core/formats/): the wire event that is its first output (where TTFT
# ends, as docs/protocol.md says for each), and the response id its first event carries.
OUTPUT_DELTA = {"chat": _chat_output, "messages": _messages_output}
RESPONSE_ID = {
    "responses": lambda x: x.response_id,
    "chat": lambda x: _json(x.events[0]).get("id"),
    "messages": lambda x: (_json(x.events[0]).get("message") or {}).get("id"),
}


def judge_ttft(streams, events_of, packets, port, format="responses"):
    """A TtftJudgement per stream. `events_of[stream.pk]`: its stored events, in order (the
    simulator's normal scenario: stored event i is the i-th event on the wire); `format`: the
    API they speak."""
    from streams.core.checks import OUTPUT_DELTAS

    is_output_delta = OUTPUT_DELTA.get(format, lambda event: event.type in OUTPUT_DELTAS)
    by_id = {RESPONSE_ID[format](x): x for x in exchanges(packets, port) if x.events}
    out = []
    for stream in streams:
        exchange = by_id[stream.upstream_id]
        stored = events_of[stream.pk]
        got, sent = [e.data for e in stored], [e.data for e in exchange.events]
        assert got == sent, f"stream {stream.pk}: {len(got)} events stored, {len(sent)} on the wire"
        first = next(i for i, e in enumerate(exchange.events) if is_output_delta(e))
        assert stored[first].t_us == stream.first_token_us
        # the read that delivered the first delta: the events stamped with its time after it
        last = first
        while last + 1 < len(stored) and stored[last + 1].t_us == stored[first].t_us:
            last += 1
        request_ns = exchange.request_last_ns
        around = [
            (
                i,
                exchange.events[i].type,
                (stored[i].t_us - stream.request_written_us) / 1000,
                (exchange.events[i].t_ns - request_ns) / 1e6,
            )
            for i in range(max(0, first - 3), min(len(stored), last + 3))
        ]
        out.append(
            TtftJudgement(
                stream.pk,
                stream.ttft_ms,
                (exchange.events[last].t_ns - request_ns) / 1e6,
                (exchange.events[first].t_ns - request_ns) / 1e6,
                last > first,
                around,
            )
        )
    return out


def summary(judgements, tolerance_ms=1.0):
    """The figures docs/measurement.md quotes: stored TTFT − the wire's (median, max)."""
    import statistics

    wire = [j.wire_error_ms for j in judgements]
    read = [j.error_ms for j in judgements]
    return (
        f"{len(judgements)} streams: TTFT − wire median {statistics.median(wire):+.3f} ms, "
        f"max |{max(map(abs, wire)):.3f}| ms, {sum(abs(e) > tolerance_ms for e in wire)} beyond "
        f"±{tolerance_ms:g} ms ({sum(j.shared_read for j in judgements)} first deltas read "
        f"together with later events); against the delivering read: median "
        f"{statistics.median(read):+.3f} ms, max |{max(map(abs, read)):.3f}| ms"
    )


# --- Recording under a capture -------------------------------------------------------------

TOLERANCE_MS = 1.0


async def record_concurrently(n, model="auto", time_scale=1.0, stagger_s=0.01, client=None):
    """`n` streams through the real recorder at once (starting `stagger_s` apart: each lasts
    seconds, so all overlap); their stored rows. The rows are made first: made one by one in
    the ORM's one thread between starts, on a loaded machine the last ones started after the
    first had ended."""
    import asyncio

    from asgiref.sync import sync_to_async

    from streams.models import Stream
    from streams.run import runner
    from streams.store import rows

    def made():
        return [
            rows.new_row(
                None, rows.build_request_body(f"q{i}", model, metadata={"time_scale": time_scale})
            )
            for i in range(n)
        ]

    async def one(i, stream):
        await asyncio.sleep(i * stagger_s)
        last, _ = await runner.run_stream(stream, client=client)
        return await Stream.objects.aget(pk=last.pk)

    streams = await sync_to_async(made)()
    return await asyncio.gather(*(one(i, s) for i, s in enumerate(streams)))


async def _events_of(streams):
    from streams.models import Event

    events_of = {}
    async for event in Event.objects.filter(stream__in=streams).order_by("stream_id", "index"):
        events_of.setdefault(event.stream_id, []).append(event)
    return events_of


async def judged(streams, packets, port, format="responses"):
    return judge_ttft(streams, await _events_of(streams), packets, port, format)


async def record_50_on_the_wire(
    upstream,
    hog=False,
    record=None,
    by="this process",
    n=50,
    format="responses",
    frames=None,
    overlapping=True,
):
    """`n` concurrent streams of `format` recorded under a capture (with a CPU hog beside
    them, or not), by `await record()`, which returns their stored rows (default: this
    process's recorder, `record_concurrently(n)`; `by` names the recorder in the printed
    summary): (streams, judgements). `frames`, a list: every frame's `judge_frames` go in it
    (the Responses API over a WebSocket). `overlapping`: every stream began before any ended
    (what a recorder's own concurrency is tested by; a proxy's streams start as its clients'
    requests reach it, which a busy machine may spread out)."""
    import asyncio

    record = record or (lambda: record_concurrently(n))
    with capturing(upstream.port) as capture:
        with cpu_hog() if hog else contextlib.nullcontext():
            streams = await record()
        packets = await asyncio.to_thread(capture.stop)
    assert capture.dropped == 0, capture.stats
    assert [s.status for s in streams] == ["completed"] * n
    if overlapping:
        assert max(s.started_at for s in streams) < min(s.finished_at for s in streams)
    judgements = await judged(streams, packets, upstream.port, format)
    if frames is not None:
        frames.extend(judge_frames(streams, await _events_of(streams), packets, upstream.port))
    # (the figures docs/measurement.md quotes; with STREAMSCOPE_RECEIPT_CLOCK=loop, the "before")
    load = "cpu hog" if hog else "quiet"
    print(f"\n[{load}, {streams[0].receipt_clock} clock, {by}, {format}] {summary(judgements)}")
    return streams, judgements


def assert_ttft_within_tolerance(streams, judgements, against="read"):
    """Every stream's TTFT within ±TOLERANCE_MS of the read that delivered its first delta
    (`against="read"`: what a receipt stamp can promise, however late the read), or of the
    wire's own (`against="wire"`: also that no first delta was read late enough to share its
    stamp with later deltas, e.g. behind a lazy load holding the GIL)."""
    assert {s.receipt_clock for s in streams} == {"kernel"}
    error = {"read": lambda j: j.error_ms, "wire": lambda j: j.wire_error_ms}[against]
    late = [str(j) for j in judgements if abs(error(j)) > TOLERANCE_MS]
    assert not late, (
        f"{summary(judgements)}; beyond ±{TOLERANCE_MS} ms of the {against}'s: " + "; ".join(late)
    )
