"""The recording proxy's answers pass the egress gate, which redacts the server's key from
what it forwards even when a hostile upstream splits the key across reads (as written or
JSON-escaped) or compresses its answer though asked not to, without holding back any byte an
event stream's reader is waiting for."""

import gzip
import json
import random
import time

import httpx
import pytest

from streams.core import redaction
from streams.models import ApiToken, Event
from tests.conftest import DaphneServer
from tests.support.hostile import KEY, RawUpstream, copies, escaped, sse
from tests.support.recording import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

RULES = redaction.Rules((KEY,), ())


def redacted(body: bytes) -> bytes:
    return RULES.text(body.decode()).encode()


def split_key_stream():
    """An event stream whose deltas carry the key, the upstream writing it in pieces that
    end inside the key (raw and escaped, mid-escape too), each piece its own TCP write."""
    first = "\\u0073" + KEY[1:]
    events = [
        sse('{"type":"response.created","sequence_number":0,"response":{"id":"resp_1",'
            '"object":"response","model":"m","status":"in_progress"}}'),
        sse('{"type":"response.output_text.delta","sequence_number":1,"output_index":0,'
            f'"item_id":"msg_1","content_index":0,"delta":"raw {KEY} and {escaped(KEY)}"}}'),
        sse('{"type":"response.output_text.delta","sequence_number":2,"output_index":0,'
            f'"item_id":"msg_1","content_index":0,"delta":"escaped {first}."}}'),
        sse('{"type":"response.completed","sequence_number":3,"response":{"id":"resp_1",'
            '"object":"response","model":"m","status":"completed"}}'),
    ]  # fmt: skip
    body = b"".join(events)
    cuts = []
    for needle in (KEY[:7].encode(), b"\\u006", b"\\u0073k-ho"):
        at = body.find(needle)
        cuts.append(at + len(needle))
    cuts = sorted(set(cuts))
    return body, [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


BODY, PIECES = split_key_stream()


def respond(method, path, headers, body):
    def pieces():
        for piece in PIECES:
            yield piece
            time.sleep(0.05)  # (the upstream's own thread) each piece its own read

    return 200, "text/event-stream", pieces()


@pytest.fixture(scope="module")
def splitting_upstream():
    server = RawUpstream(respond)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy_with_key(django_db_setup, splitting_upstream, _relay_db_connections):
    server = DaphneServer(splitting_upstream.base_url, env={"UPSTREAM_API_KEY": KEY})
    yield server
    server.stop()


def test_a_key_split_across_reads_is_redacted(people, proxy_with_key):
    token = ApiToken.issue(people.owner, name="split")
    assert all(copies(p.decode()) == 0 for p in PIECES)  # no piece holds the whole key
    assert copies(BODY.decode()) == 3
    body = {"model": "m", "input": "hi", "stream": True}
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "POST",
            f"{proxy_with_key.url}/v1/responses",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        ) as r:
            assert r.status_code == 200
            stream_id = int(r.headers["x-streamscope-stream"])
            got = b"".join(r.iter_raw())
    assert copies(got.decode()) == 0
    assert got == redacted(BODY)  # the rest as the upstream sent it
    wait_terminal(stream_id)
    stored = "".join(Event.objects.filter(stream_id=stream_id).values_list("data", flat=True))
    assert KEY in stored  # the record stays verbatim


def test_chunk_redactor_equals_whole_body_redaction():
    rng = random.Random(11)
    for trial in range(500):
        key = KEY if trial % 2 else escaped(KEY, every=rng.randint(1, 4), upper=trial % 3 == 0)
        body = f'data: {{"m": "Incorrect key {key}, again {key}"}}\n\n'.encode() * 2
        cuts = sorted(rng.sample(range(1, len(body)), rng.randint(1, 8)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        redactor = redaction.StreamRedactor(RULES)
        out = b"".join(redactor.feed(p) for p in pieces) + redactor.close()
        assert out == redacted(body), (trial, pieces)
        assert copies(out.decode()) == 0


def test_chunk_redactor_holds_back_nothing_of_whole_events():
    redactor = redaction.StreamRedactor(RULES)
    for chunk in (b'data: {"a": "sss"}\n\n', b"event: x\ndata: {}\n\n", b'data: "\\\\"\n\n'):
        assert redactor.feed(chunk) == chunk
    # an unrelated tail is held only while it could still become a fragment of the key
    assert redactor.feed(b"data: s") == b"data: "
    assert redactor.feed(b"ix\n\n") == b"six\n\n"


def gzipping(method, path, headers, body):
    """An upstream that compresses its answer though the proxy asks for identity."""
    if path.endswith("/models"):  # (whatever the client accepts)
        models = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": KEY}]})
        return 200, "application/json", [gzip.compress(models.encode())], [GZIP]
    assert headers.get("accept-encoding") == "identity"
    return 200, "text/event-stream", [gzip.compress(BODY)], [GZIP]


GZIP = ("Content-Encoding", "gzip")


@pytest.fixture(scope="module")
def gzipping_proxy(django_db_setup, _relay_db_connections):
    upstream = RawUpstream(gzipping)
    server = DaphneServer(upstream.base_url, env={"UPSTREAM_API_KEY": KEY})
    yield server
    server.stop()
    upstream.stop()


def test_a_compressed_answer_reaches_the_client_inflated_and_redacted(people, gzipping_proxy):
    token = ApiToken.issue(people.owner, name="gzip")
    body = {"model": "m", "input": "hi", "stream": True}
    with httpx.Client(timeout=30) as client:
        r = client.post(
            f"{gzipping_proxy.url}/v1/responses",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert r.content == redacted(BODY)  # (what httpx would have inflated, the gate did)
    wait_terminal(int(r.headers["x-streamscope-stream"]))


def test_a_compressed_model_list_reaches_the_client_inflated_and_redacted(people, gzipping_proxy):
    token = ApiToken.issue(people.owner, name="gzip models")
    with httpx.Client(timeout=30) as client:
        r = client.get(
            f"{gzipping_proxy.url}/v1/models", headers={"Authorization": f"Bearer {token}"}
        )
    # the body was inflated on its way through: it must not still say it is compressed
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert r.content.startswith(b"{"), (r.headers, r.content[:100])
    assert r.json()["data"] == [{"id": "m", "owned_by": "[redacted]"}]
