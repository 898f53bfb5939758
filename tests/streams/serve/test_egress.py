"""The egress gate's rules (streams/serve/egress.py), without a server: fragments of known secrets
at every offset and in every encoding, credential shapes, URL credentials, streamed bodies equal
to whole ones, pass-through keys sealed at rest, and the ASGI exits for HTTP and WebSocket."""

import base64
import gzip
import html
import json
import random
import re
import zlib
from urllib.parse import quote, unquote

import pytest

from streams.core import redaction
from streams.models import SealedSecret
from streams.serve import egress
from streams.store import known_secrets, sealed
from tests.support.clients import run_asgi as run
from tests.support.hostile import escaped

KEY = "sk-BAR-CANARY-835431943zq"
FRAGMENT = 8  # the promise: no piece of a known secret this long leaves
RULES = redaction.Rules((KEY,), ("sk-",))


_JSON_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")


def leaks(text, secret=KEY):
    """The fragments of FRAGMENT_MIN or more characters of `secret` in any form a reader may
    decode `text` to (HTML references, URL escapes, JSON escapes behind any backslashes)."""
    forms = set()
    for form in (text, html.unescape(text), unquote(text)):
        for _ in range(3):
            forms.add(form)
            form = _JSON_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), html.unescape(form))
    n = FRAGMENT
    grams = {secret[i : i + n] for i in range(len(secret) - n + 1)}
    return sorted({g for f in forms for g in grams if g in f})


class TestFragments:
    def test_every_cut_of_the_key_into_two_cells_is_redacted(self):
        for cut in range(1, len(KEY)):
            left, right = KEY[:cut], KEY[cut:]
            text = f'<td>{left}</td><td>{right} more</td>{{"delta":"{left}"}},{{"delta":"{right}"}}'
            out = RULES.text(text)
            assert leaks(out) == [], (cut, out)
            # a piece shorter than FRAGMENT_MIN is not a fragment: it stays
            for piece in (left, right):
                if len(piece) < FRAGMENT:
                    assert piece in out

    def test_every_fragment_of_eight_or_more_is_redacted_and_seven_are_not(self):
        for length in range(FRAGMENT - 1, len(KEY) + 1):
            for start in range(len(KEY) - length + 1):
                piece = KEY[start : start + length]
                out = RULES.text(f"a {piece} b")
                if length < FRAGMENT:
                    assert out == f"a {piece} b"
                else:
                    assert out == "a [redacted] b", (piece, out)

    @pytest.mark.parametrize(
        "spell",
        [
            lambda s: escaped(s),
            lambda s: escaped(s, 3, upper=True),
            lambda s: escaped(s).replace("\\u", "\\\\u"),  # inside a JSON document
            lambda s: quote(s, safe=""),
            lambda s: "".join(f"%{ord(c):02X}" for c in s),
            lambda s: "".join(f"&#{ord(c)};" for c in s),
            lambda s: "".join(f"&#x{ord(c):x};" for c in s),
            lambda s: s.replace("_", "&lowbar;"),
            lambda s: html.escape(s),
            # escaped twice, or one escape inside another: a page escaping stored `&#115;`,
            # Markdown turning it back into `s`
            lambda s: html.escape("".join(f"&#{ord(c)};" for c in s)),
            lambda s: html.escape(html.escape("".join(f"&#x{ord(c):x};" for c in s))),
            lambda s: quote(quote(s, safe=""), safe=""),
            lambda s: "".join(f"\\u0026#{ord(c)};" for c in s),
            lambda s: "".join(f"%26%23{ord(c)}%3B" for c in s),
        ],
    )
    def test_fragments_are_redacted_in_every_encoding(self, spell):
        for piece in (KEY, KEY[:12], KEY[5:14], KEY[-9:]):
            text = f"x {spell(piece)} y"
            out = RULES.text(text)
            assert leaks(out) == [], (text, out)
            assert "[redacted]" in out

    def test_redacted_json_stays_json(self):
        data = json.dumps({"m": f"a {KEY[:10]}", "n": f"\n{KEY[3:]}", "e": escaped(KEY)})
        out = RULES.text(data)
        assert json.loads(out) == {"m": "a [redacted]", "n": "\n[redacted]", "e": "[redacted]"}
        # a key beginning with an escape's letter takes the backslash with it, never leaving
        # a dangling escape
        rules = redaction.Rules(("nABCDEFGHIJ123",), ())
        out = rules.text(json.dumps({"m": "x\nABCDEFGHIJ123"}))
        assert json.loads(out) == {"m": "x[redacted]"}

    def test_other_text_is_left_alone(self):
        text = "<p class='stream-detail'>sequence_number output_text response.completed</p>"
        assert RULES.text(text) is text


class TestShapesAndUrls:
    @pytest.mark.parametrize("before", ["", " ", "resp_", "tool_", '"', "="])
    def test_a_credential_shape_is_redacted_behind_any_non_alphanumeric(self, before):
        rules = redaction.Rules((), ("sk-",))
        text = f"{before}sk-proj-AbCdEfGhIjKlMnOpQrStUv123 end"
        assert rules.text(text) == f"{before}[redacted] end"

    def test_a_word_ending_in_the_prefix_is_not_a_shape(self):
        rules = redaction.Rules((), ("sk-",))
        text = "task-1234567890123456789012345"
        assert rules.text(text) == text

    def test_the_base_urls_credentials_are_secrets_as_sent_too(self, settings):
        settings.UPSTREAM_API_KEY = ""
        settings.UPSTREAM_BASE_URL = "http://user:pw-Secret-77441199@127.0.0.1:9/v1"
        known_secrets._known.checked = float("inf")
        try:
            basic = base64.b64encode(b"user:pw-Secret-77441199").decode()
            out = known_secrets.redact(f"Authorization: Basic {basic} / pw-Secret-77441199")
            assert out == "Authorization: Basic [redacted] / [redacted]"
        finally:
            known_secrets._known.checked = float("-inf")

    def test_url_passwords_go_and_urls_stay(self):
        rules = redaction.Rules((), ())
        assert rules.text("see https://bob:pw-9@up.test/v1") == "see https://[redacted]@up.test/v1"
        assert rules.text("mailto:a@b.c and https://up.test/?a=b@c") == (
            "mailto:a@b.c and https://up.test/?a=b@c"
        )


class TestStreamed:
    def test_a_streamed_body_equals_the_whole_body_redacted_however_it_is_cut(self):
        rng = random.Random(7)
        spellings = [
            KEY,
            escaped(KEY, 2),
            quote(KEY, safe=""),
            "".join(f"&#{ord(c)};" for c in KEY),
        ]
        for trial in range(400):
            key = spellings[trial % len(spellings)]
            half = len(key) // 2
            body = (
                f'data: {{"m": "é {key}", "d": "{key[:half]}"}}\n\n'
                f'data: {{"d": "{key[half:]} ünïcode"}}\n\n'
            ).encode() + b"\xff\xfe raw bytes\n\n"
            cuts = sorted(rng.sample(range(1, len(body)), rng.randint(1, 10)))
            pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
            redactor = redaction.StreamRedactor(RULES)
            out = b"".join(redactor.feed(p) for p in pieces) + redactor.close()
            whole = RULES.text(body.decode("utf-8", "surrogateescape"))
            assert out == whole.encode("utf-8", "surrogateescape"), (trial, pieces)
            assert leaks(out.decode("utf-8", "replace")) == []

    def test_whole_events_are_never_held(self):
        redactor = redaction.StreamRedactor(RULES)
        for chunk in (
            b'data: {"a": "sk-BAR"}\n\n',
            b"event: x\ndata: {}\n\n",
            b"data: \xc3\xa9\n\n",
        ):
            assert redactor.feed(chunk) == chunk


class TestSealed:
    pytestmark = pytest.mark.django_db

    @pytest.fixture(autouse=True)
    def clean(self):
        known_secrets.forget_all()
        yield
        known_secrets.forget_all()

    def test_a_pass_through_key_is_sealed_and_known_again_after_a_restart(self, settings):
        client_key = "sk-client-Zq81Lm2093XbVw"
        assert known_secrets.redact(f"echo {client_key[4:]}") == f"echo {client_key[4:]}"
        assert known_secrets.remember(client_key)
        assert known_secrets.redact(f"echo {client_key[4:]}") == "echo [redacted]"
        # at rest: no fragment of it in clear
        row = SealedSecret.objects.values("fingerprint", "sealed").get()
        assert leaks(json.dumps(row), client_key) == []
        known_secrets.forget_all()  # a new process
        assert known_secrets.redact(client_key[2:20]) == client_key[2:20]
        known_secrets.refresh()
        assert known_secrets.redact(client_key[2:20]) == "[redacted]"
        assert not known_secrets.remember(client_key)  # known: nothing written again
        assert SealedSecret.objects.count() == 1

    def test_another_secret_key_cannot_open_them(self, settings):
        known_secrets.remember("sk-client-Zq81Lm2093XbVw")
        known_secrets.forget_all()
        settings.SECRET_KEY = "another-secret-key-entirely-0123456789"
        top, secrets = sealed.load_after(0)
        assert top > 0 and secrets == []


# ---- the ASGI exits --------------------------------------------------------------------------


@pytest.fixture
def key(settings):
    settings.UPSTREAM_API_KEY = KEY
    settings.UPSTREAM_BASE_URL = ""
    known_secrets._known.checked = float("inf")  # no database in these
    yield
    known_secrets._known.checked = float("-inf")


def test_http_headers_and_a_whole_body_leave_redacted_with_their_length(key):
    body = f"<p>{KEY[:12]}</p><p>{KEY[12:]}</p>".encode()

    async def app(scope, receive, send):
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"x-echo", f"Bearer {KEY}".encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:]})

    sent = run(egress.EgressGate(app), {"type": "http", "path": "/x"})
    start, last = sent[0], sent[-1]
    out = b"".join(m.get("body", b"") for m in sent[1:])
    headers = dict(start["headers"])
    assert headers[b"x-echo"] == b"Bearer [redacted]"
    assert int(headers[b"content-length"]) == len(out)
    assert out == b"<p>[redacted]</p><p>[redacted]</p>" and not last.get("more_body")


def test_a_streamed_body_leaves_redacted_without_a_length(key):
    pieces = [b"data: a ", KEY[:6].encode(), KEY[6:].encode() + b"\n\n", b"data: end\n\n"]

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for p in pieces:
            await send({"type": "http.response.body", "body": p, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    sent = run(egress.EgressGate(app), {"type": "http", "path": "/x"})
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"data: a [redacted]\n\ndata: end\n\n"


def test_websocket_frames_and_close_reasons_leave_redacted(key):
    async def app(scope, receive, send):
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps({"d": KEY[:9]})})
        await send({"type": "websocket.send", "bytes": KEY[5:].encode()})
        await send({"type": "websocket.close", "code": 4000, "reason": KEY})

    sent = run(egress.EgressGate(app), {"type": "websocket", "path": "/ws/x"})
    assert sent[1]["text"] == '{"d": "[redacted]"}'
    assert sent[2]["bytes"] == b"[redacted]"
    assert sent[3]["reason"] == "[redacted]"


def test_our_static_files_pass_untouched(key, settings):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": KEY.encode()})

    sent = run(egress.EgressGate(app), {"type": "http", "path": "/static/app.js"})
    assert sent[1]["body"] == KEY.encode()


def _compressed_app(body, coding, chunks=3):
    async def app(scope, receive, send):
        headers = [(b"content-encoding", coding), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        step = -(-len(body) // chunks)
        for i in range(0, len(body), step):
            more = i + step < len(body)
            await send(
                {"type": "http.response.body", "body": body[i : i + step], "more_body": more}
            )

    return app


@pytest.mark.parametrize(
    "coding, compress",
    [(b"gzip", gzip.compress), (b"x-gzip", gzip.compress), (b"deflate", zlib.compress)],
)
def test_a_compressed_body_leaves_inflated_and_redacted(key, coding, compress):
    # (the proxy asks for identity; a hostile upstream may compress anyway, and a client
    # inflates what the gate could not read)
    plain = f'data: {{"delta": "{KEY}"}}\n\n'.encode() * 50
    sent = run(
        egress.EgressGate(_compressed_app(compress(plain), coding)),
        {"type": "http", "path": "/v1/x"},
    )
    headers = dict(sent[0]["headers"])
    assert b"content-encoding" not in headers and b"content-length" not in headers
    out = b"".join(m.get("body", b"") for m in sent[1:])
    assert out == b'data: {"delta": "[redacted]"}\n\n' * 50
    assert not sent[-1].get("more_body")


def test_a_body_in_a_coding_the_gate_cannot_read_is_not_sent(key):
    app = _compressed_app(f"{KEY} as it came".encode(), b"br")
    sent = run(egress.EgressGate(app), {"type": "http", "path": "/v1/x"})
    assert sent[0]["status"] == 502 and len(sent) == 2
    assert json.loads(sent[1]["body"])["error"]["message"] == (
        "The upstream answered in a content coding (br) the server cannot read."
    )


def test_a_compressed_body_inflates_a_step_at_a_time_and_ends_where_it_stops_inflating(key):
    bomb = gzip.compress(b"0" * (8 * egress.INFLATE_STEP))  # ~8 kB that inflate to 8 MiB
    sent = run(egress.EgressGate(_compressed_app(bomb, b"gzip", 1)), {"type": "http", "path": "/x"})
    assert max(len(m.get("body", b"")) for m in sent[1:]) <= egress.INFLATE_STEP
    assert sum(len(m.get("body", b"")) for m in sent[1:]) == 8 * egress.INFLATE_STEP
    broken = gzip.compress(f"{KEY} ".encode() * 100)[:-40] + b"not gzip" * 10
    sent = run(egress.EgressGate(_compressed_app(broken, b"gzip")), {"type": "http", "path": "/x"})
    out = b"".join(m.get("body", b"") for m in sent[1:])
    assert KEY.encode() not in out and not sent[-1].get("more_body")
