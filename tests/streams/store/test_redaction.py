"""The upstream key never leaves, however a hostile upstream echoes it: raw, in JSON `\\u`
escapes, in error bodies, deltas, tool names, model ids, event types and SSE fields. A raw
HTTP server stands in for the upstream (127.0.0.1 only); the streams it sends are recorded by a
real Daphne and read back through every way out: API, exports, pages, WebSocket frames."""

import asyncio
import base64
import hashlib
import html
import json
import random
import re
import uuid
from urllib.parse import quote

import httpx
import pytest
from websockets.asyncio.client import connect

from streams.core import redaction
from streams.core.redaction import (
    FRAGMENT_MIN,
    HEX_MIN,
    LONG_RUN,
    Rules,
    StreamRedactor,
    private_core,
)
from streams.models import Stream
from streams.shapes import public
from streams.store import known_secrets
from tests.conftest import DaphneServer
from tests.support import paths
from tests.support.hostile import KEY, RawUpstream, copies, escaped, hostile
from tests.support.leaks import base64_pieces
from tests.support.recording import finished


def test_the_search_finds_every_form():
    assert copies(f"a {KEY}") == 1
    assert copies(json.dumps({"d": json.dumps({"m": KEY})})) == 1
    assert copies(escaped(KEY, 3, upper=True)) == 1
    assert copies("\\\\u0073" + KEY[1:]) == 1
    assert copies(html.escape(f"<{KEY}>")) == 1
    assert copies("sk-hostile") == 0


# ---- the redaction itself -----------------------------------------------------------------------


class TestDecodedRedaction:
    @pytest.fixture(autouse=True)
    def key(self, settings):
        settings.UPSTREAM_API_KEY = KEY
        settings.UPSTREAM_BASE_URL = ""

    @pytest.mark.parametrize(
        "text",
        [
            f"raw {KEY}",
            "\\u0073" + KEY[1:],
            escaped(KEY),
            escaped(KEY, 2, upper=True),
            "\\\\u0073" + KEY[1:],  # the same data, inside a JSON document
            json.dumps({"data": json.dumps({"m": escaped(KEY, 3)}, ensure_ascii=False)}),
        ],
    )
    def test_every_spelling_is_redacted_wherever_it_leaves(self, text):
        assert copies(text) == 1
        assert copies(known_secrets.redact(text)) == 0
        assert copies(known_secrets.redact_bytes(text.encode()).decode()) == 0
        assert copies(known_secrets.redact(public.dumps({"data": text}))) == 0
        assert copies(known_secrets.redact(json.dumps([{"x": text}]))) == 0

    def test_redacted_json_stays_json_and_other_escapes_stay(self):
        data = '{"m":"' + escaped(KEY) + ' caf\\u00e9 \\u0073"}'  # real JSON escapes
        assert json.loads(data) == {"m": f"{KEY} café s"}
        out = known_secrets.redact(public.dumps({"data": data}))
        assert json.loads(json.loads(out)["data"]) == {"m": "[redacted] café s"}

    def test_the_key_case_does_not_count(self):
        # S, not s: still the 8 characters of the key's core, a fragment (issue 42)
        assert known_secrets.redact("\\u0053" + KEY[1:19]) == "[redacted]"
        assert known_secrets.redact(KEY[:19].upper()) == "[redacted]"
        # 7 of its core: none
        assert known_secrets.redact("\\u0053" + KEY[1:18]) == "\\u0053" + KEY[1:18]

    def test_without_a_key_nothing_is_searched(self, settings):
        settings.UPSTREAM_API_KEY = ""
        # (credential shapes are searched for always, unless none are configured)
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "REDACT_KEY_PREFIXES": ""}
        text = escaped(KEY)
        assert known_secrets.redact(text) is text and not known_secrets.rules()

    def test_without_a_key_a_credential_shape_is_still_redacted(self, settings):
        # a pass-through client's key, which the server never knew (docs/security.md)
        settings.UPSTREAM_API_KEY = ""
        text = escaped(KEY)
        assert known_secrets.redact(text) == "[redacted]"
        assert "hostile" not in known_secrets.redact(public.dumps([text, f"key {KEY} echoed"]))


class TestUrlCredentials:
    def test_upstream_url_loses_its_credentials(self, settings):
        settings.UPSTREAM_API_KEY = ""
        stream = Stream(upstream_url="https://bob:s3cret-pass-99@up.test/v1/responses")
        assert (
            known_secrets.redact(stream.upstream_url) == "https://[redacted]@up.test/v1/responses"
        )
        assert stream.upstream_url.startswith("https://bob:")  # the row keeps what came
        assert known_secrets.redact("https://up.test/v1?a=b@c") == "https://up.test/v1?a=b@c"

    def test_the_base_urls_password_is_a_secret_wherever_it_shows(self, settings):
        settings.UPSTREAM_API_KEY = ""
        settings.UPSTREAM_BASE_URL = "https://bob:s3cret%2Dpass-99@up.test/v1"
        assert known_secrets.redact("echo: s3cret-pass-99") == "echo: [redacted]"
        assert known_secrets.redact(public.dumps({"m": "s3cret%2Dpass-99"})) == '{"m":"[redacted]"}'
        assert "s3cret" not in known_secrets.redact(settings.UPSTREAM_BASE_URL)


# ---- copies: any case, base64, hex, UTF-16 (issue 42) -----------------------------------------

COPIES = Rules((KEY,), ())  # the known key alone: no credential shape helps
SHAPES = Rules((), ("sk-",))
# Keys as they come, and (start, end) of their private cores (docs/security.md): all but the
# leading segments ending in `-` or `_` and the last 4 characters, which anyone may know.
PROJ_KEY = "sk-proj-OhbVrpoiVgRV5IfLBcbfnoGMbJmTPSIAoCLrZ3aWZkSBvrjn"
HEX_KEY = "sk-test-9f8ea32c3bb81e3c29b62179273c8eb5"
ANT_KEY = "sk-ant-api03-xwnQrS7RPeMOkIUpkDyr7OSJoRu1XXdo0cZuzren"
CORES = {
    KEY: (11, 19),  # sk-hostile- | 9f8e7d6c | 5b4a
    PROJ_KEY: (8, len(PROJ_KEY) - 4),
    HEX_KEY: (8, len(HEX_KEY) - 4),
    ANT_KEY: (13, len(ANT_KEY) - 4),
}
BASE62 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _cased(piece):
    rng = random.Random(piece)
    mixed = "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in piece)
    return [piece.upper(), piece.title(), piece.swapcase(), mixed]


def _pieces(text, length):
    return [text[i : i + length] for i in range(len(text) - length + 1)]


def _base64(data, urlsafe):
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()


def _left(out, text, length=FRAGMENT_MIN):
    """The pieces of `text` of `length` characters still in `out`."""
    return [p for p in _pieces(text, length) if p in out]


def _core_chars(key, start, end):
    """How many characters of `key`'s private core `key[start:end]` holds."""
    a, b = CORES[key]
    return max(0, min(end, b) - max(start, a))


def _core(key):
    a, b = CORES[key]
    return key[a:b]


def test_the_public_parts_are_the_prefix_segments_and_the_last_four():
    for key, (a, b) in CORES.items():
        assert private_core(key) == (a, b), key
    # short secrets keep every window: fewer than 8 characters would be left
    for short in ("sk-BAR-CANARY-835431943zq", "s3cret-pass-99", "user:pw-1"):
        assert private_core(short) == (0, len(short))
    # a segment of 13 characters or one that would end after 16 is no prefix
    assert private_core("abcdefghijklm-" + "x" * 20)[0] == 0
    assert private_core("sk-proj-PASSOWNER-5550199xyz0")[0] == 8


class TestTheEchoOracle:
    """A page that shows a person's own text back (a search box, a comment, a saved view's
    name) is redacted where the text holds a fragment: a fragment must not be something one
    guess away from what anyone knows (a key's public prefix, its last 4 characters), or the
    redaction answers whether the guessed character is the key's next one (issue 42)."""

    @staticmethod
    def _guesses(rules, key, alphabet):
        """[(text with the right next character, the gate's answer, with a wrong one, its
        answer)] for every piece of public prefix + k core characters and k core characters +
        last 4, k < FRAGMENT_MIN (the guessed character counted)."""
        a, b = CORES[key]
        out = []
        for k in range(1, FRAGMENT_MIN):
            right = key[a + k - 1]
            wrong = next(c for c in alphabet if c.lower() != right.lower())
            known = key[: a + k - 1]
            pair = [f"q={known}{g}&page=2" for g in (right, wrong)]
            # (as an attacker slides: the last FRAGMENT_MIN - 1 characters known, one guessed)
            window = [f"q={known[1 - FRAGMENT_MIN :]}{g}" for g in (right, wrong)]
            right = key[b - k]
            wrong = next(c for c in alphabet if c.lower() != right.lower())
            known = key[b - k + 1 :]
            pair2 = [f"views: {g}{known}." for g in (right, wrong)]
            for texts in (pair, window, pair2):
                out.append((texts[0], rules.text(texts[0]), texts[1], rules.text(texts[1])))
        return out

    @pytest.mark.parametrize(
        ("key", "alphabet"),
        [(PROJ_KEY, BASE62), (HEX_KEY, "0123456789abcdef"), (ANT_KEY, BASE62)],
        ids=["sk-proj", "hex", "sk-ant"],
    )
    def test_a_right_and_a_wrong_next_character_get_the_same_answer(self, key, alphabet):
        rules = Rules((key, KEY), ("sk-",))
        for right, right_out, wrong, wrong_out in self._guesses(rules, key, alphabet):
            # the same answer: the text as it came, whatever the guess
            assert (right_out, wrong_out) == (right, wrong), (right, right_out)

    def test_the_check_can_fail(self, monkeypatch):
        # every window of a secret a fragment, as before: the right guess is redacted, the
        # wrong one is not
        monkeypatch.setattr(redaction, "private_core", lambda secret: (0, len(secret)))
        answers = self._guesses(Rules((PROJ_KEY,), ()), PROJ_KEY, BASE62)
        assert any(r_out != r and w_out == w for r, r_out, w, w_out in answers)

    @pytest.mark.parametrize("key", [PROJ_KEY, HEX_KEY, ANT_KEY])
    def test_a_piece_with_8_core_characters_goes_whole_with_its_public_neighbours(self, key):
        rules = Rules((key,), ())
        a, b = CORES[key]
        assert rules.text(f"key={key}.") == "key=[redacted]."
        assert rules.text(f"key={key.upper()}.") == "key=[redacted]."
        assert rules.text(f"<{key[: a + 8]}>") == "<[redacted]>"
        assert rules.text(f"<{key[b - 8 :]}>") == "<[redacted]>"
        for cut in range(1, len(key)):
            left, right = key[:cut], key[cut:]
            expect = [
                "[redacted]" if _core_chars(key, *span) >= FRAGMENT_MIN else key[slice(*span)]
                for span in ((0, cut), (cut, len(key)))
            ]
            assert rules.text(f"{left} | {right}") == " | ".join(expect), cut


KEYS = pytest.mark.parametrize("key", [KEY, PROJ_KEY, HEX_KEY], ids=["hostile", "proj", "hex"])


class TestCopies:
    @KEYS
    def test_every_piece_with_8_core_characters_in_any_case_is_redacted_whole(self, key):
        rules = Rules((key,), ())
        for length in range(FRAGMENT_MIN, len(key) + 1):
            for at in range(len(key) - length + 1):
                piece = key[at : at + length]
                whole = _core_chars(key, at, at + length) >= FRAGMENT_MIN
                for cased in _cased(piece):
                    expect = "a [redacted] b" if whole else f"a {cased} b"
                    assert rules.text(f"a {cased} b") == expect, cased

    @KEYS
    def test_seven_characters_in_any_case_are_not_a_fragment(self, key):
        rules = Rules((key,), ())
        for piece in _pieces(key, FRAGMENT_MIN - 1):
            for cased in _cased(piece):
                assert rules.text(f"a {cased} b") == f"a {cased} b"

    def test_the_issues_upper_cased_key_leaves_nothing(self):
        out = COPIES.text(f'{{"m": "{KEY.upper()}"}}')
        assert out == '{"m": "[redacted]"}'
        assert not _left(out.lower(), KEY.lower())

    @pytest.mark.parametrize("prefix", ["sk-", "SK-", "Sk-", "sK-"])
    def test_a_credential_shape_counts_in_any_case(self, prefix):
        text = f"{prefix}proj-AbCdEfGhIjKlMnOpQrStUv123 end"
        assert SHAPES.text(text) == "[redacted] end"
        assert SHAPES.text(f"TASK-{text[3:]}") == f"TASK-{text[3:]}"  # not a key

    @pytest.mark.parametrize("urlsafe", [False, True], ids=["base64", "base64url"])
    @pytest.mark.parametrize("pad", [0, 1, 2])
    def test_a_base64_copy_is_redacted_at_every_alignment(self, pad, urlsafe):
        for key in (KEY, KEY.upper()):  # (its bytes are read in any case too)
            cores = base64_pieces(key)
            for before in (b"", b"user:", b'{"key": "', b"\xff\xfe"):
                before = (before + b"~~")[: len(before) + (pad - len(before)) % 3]
                blob = _base64(before + key.encode() + b'", "more": 1}', urlsafe)
                for text in (f"Basic {blob}", f"data:application/json;base64,{blob}"):
                    out = COPIES.text(text)
                    assert "[redacted]" in out
                    assert not [p for core in cores for p in _left(out, core)], out
                    assert out.startswith(text[: text.index(blob)])  # only the copy goes

    @pytest.mark.parametrize("urlsafe", [False, True], ids=["base64", "base64url"])
    def test_every_piece_of_a_base64_copy_of_its_core_of_long_run_characters_is_redacted(
        self, urlsafe
    ):
        # (any 16 characters of it spell 10 whole bytes of the core or more)
        rng = random.Random(42)
        for core in base64_pieces(_core(PROJ_KEY)):
            rules = Rules((PROJ_KEY,), ())
            for piece in _pieces(core, LONG_RUN):
                noise = _base64(rng.randbytes(12), urlsafe)
                for text in (f"x {noise}{piece}{noise[::-1]} y", f"x {piece} y"):
                    out = rules.text(text)
                    assert "[redacted]" in out and not _left(out, piece), (piece, out)

    @pytest.mark.parametrize("other", [" abcdefgh", "user pw-Secret-77441199", "a:b c:d e:f"])
    def test_a_secret_holding_a_space_leaves_base64_copies_found(self, other):
        # (a pass-through `Authorization: Basic …` is kept whole, space and all: one client's
        # header made every run take in the spaces around a copy, and the decoder skipped them)
        rules = Rules((KEY, other), ())
        blob = _base64(KEY.encode(), False)
        for text in (f"x {blob} y", f"Basic {blob}", f"a: {blob}, b"):
            out = rules.text(text)
            assert "[redacted]" in out and not _left(out, blob[2:-4], LONG_RUN), out

    def test_base64_of_a_utf16_copy_is_redacted(self):
        # (how PowerShell takes a command: -EncodedCommand)
        blob = _base64(f"echo {KEY}".encode("utf-16-le"), False)
        out = COPIES.text(f"powershell -e {blob}")
        assert "[redacted]" in out and blob[:12] in out  # (`echo ` stays)
        assert not _left(out, blob[14:-4], LONG_RUN)  # (the characters that spell the key)

    def test_a_base64_piece_standing_alone_shorter_than_long_run_is_left(self):
        # (docs/security.md says so: 11 bytes' worth at most)
        for core in base64_pieces(KEY):
            for piece in _pieces(core, LONG_RUN - 1):
                assert COPIES.text(f"a {piece} b") == f"a {piece} b"

    @KEYS
    def test_a_hex_copy_is_redacted_in_either_case(self, key):
        rules = Rules((key,), ())
        digits = key.encode().hex()
        for text in (digits, digits.upper()):
            assert rules.text(f"id {text}.") == "id [redacted]."
            for length in (HEX_MIN, HEX_MIN + 1, HEX_MIN + 9):
                for at, piece in enumerate(_pieces(text, length)):
                    out = rules.text(f"id {piece}.")
                    # (the whole bytes it spells: 8 of the key's core, or it stays; a digit
                    # of half a byte at an end may stay)
                    if _core_chars(key, (at + 1) // 2, (at + length) // 2) >= FRAGMENT_MIN:
                        assert re.fullmatch(r"id \w?\[redacted\]\w?\.", out), (piece, out)
                    else:
                        assert out == f"id {piece}."
            for piece in _pieces(text, HEX_MIN - 1):
                assert rules.text(f"id {piece}.") == f"id {piece}."

    @pytest.mark.parametrize("order", ["utf-16-le", "utf-16-be"])
    def test_a_utf16_copy_in_bytes_is_redacted_and_stays_utf16(self, order):
        core = _core(PROJ_KEY)
        rules = Rules((PROJ_KEY,), ())
        for piece in [PROJ_KEY, *_pieces(core, FRAGMENT_MIN), PROJ_KEY[:16], PROJ_KEY.upper()]:
            body = f"before {piece} after".encode(order)
            assert rules.bytes(body).decode(order) == "before [redacted] after", piece
        for seven in (core[:7], PROJ_KEY[:15], PROJ_KEY[-11:]):
            body = f"before {seven} after".encode(order)
            assert rules.bytes(body) == body

    def test_a_utf16_copy_in_text_is_redacted_as_nul_characters_and_as_json_escapes(self):
        spread = "".join(c + "\x00" for c in KEY)
        # (NULs between the characters of `[redacted]` too: the text stays in step)
        assert (
            COPIES.text(f"a {spread} b") == "a " + "[redacted]".encode("utf-16-le").decode() + " b"
        )
        assert COPIES.text(f"a \x00{spread[:-1]} b").replace("\x00", "") == "a [redacted] b"
        as_json = json.dumps({"m": f"a {spread} b"})  # what a JSON page carries: \u0000
        out = COPIES.text(as_json)
        assert json.loads(out) == {"m": "a [redacted]\x00 b"}
        assert COPIES.text(as_json.replace("\\", "\\\\")) != as_json  # data inside data

    @pytest.mark.parametrize(
        "form",
        [
            lambda k: k.upper().encode(),
            lambda k: _base64(b"ab" + k.encode(), False).encode(),
            lambda k: _base64(b"a" + k.encode(), True).encode(),
            lambda k: k.encode().hex().upper().encode(),
            lambda k: k.encode("utf-16-le"),
            lambda k: k.encode("utf-16-be"),
            lambda k: "".join(f"{c}\\u0000" for c in k).encode(),
            lambda k: quote(_base64(k.encode(), False), safe="").encode(),
        ],
        ids=["upper", "base64", "base64url", "hex", "utf-16-le", "utf-16-be", "json-nul", "url"],
    )
    # (the `sk-ant-api03-` key: a hit in a later chunk extends back over a prefix of 13)
    @pytest.mark.parametrize("key", [KEY, ANT_KEY], ids=["hostile", "sk-ant"])
    def test_a_copy_cut_anywhere_across_chunks_leaves_as_the_whole_body_would(self, form, key):
        copy = form(key)
        rules = Rules((key,), ())
        body = (
            b'data: {"d": "x ' + copy + b' y"}\n\ndata: {"e": "' + copy[:20] + b'"}\n\n'
            # (a piece at the end of a long run: held back whole, it must still be a long run)
            b'data: {"f": "Zm9vYmFyYmF6cXV4' + copy[:12] + b'"}\n\n'
            # (a run that ends in the prefix and 7 characters of the core, then the rest)
            b'data: {"g": "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4' + copy + b'"}\n\n'
        )
        whole = rules.bytes(body)
        assert copy not in whole and whole.count(b"[redacted]") + whole.count(b"[\x00r") >= 1
        rng = random.Random(7)
        cuts = [[c] for c in range(1, len(body))]
        cuts += [sorted(rng.sample(range(1, len(body)), 6)) for _ in range(100)]
        for points in cuts:
            pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
            redactor = StreamRedactor(rules)
            out = b"".join(redactor.feed(p) for p in pieces) + redactor.close()
            assert out == whole, points

    def test_ordinary_text_is_left_alone(self):
        rng = random.Random(1)
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        keys = [KEY, "sk-proj-" + "".join(rng.choice(alphabet) for _ in range(48))]
        rules = Rules(keys, ("sk-",))
        root = paths.REPO
        prose = "\n".join(p.read_text() for p in sorted((root / "docs").glob("*.md")))
        records = [
            {"id": str(uuid.UUID(int=rng.getrandbits(128))), "n": i, "type": "response.done"}
            for i in range(2000)
        ]
        texts = {
            "prose": prose,
            "json": json.dumps(records),
            "hex ids": " ".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(5000)),
            "uuids": " ".join(r["id"] for r in records),
            "base64": _base64(rng.randbytes(1 << 20), False),
            "base64url": _base64(rng.randbytes(1 << 20), True),
        }
        for name, text in texts.items():
            assert rules.text(text) is text, name


# ---- end to end: a real Daphne recording the hostile upstream ----------------------------------


@pytest.fixture(scope="module")
def hostile_upstream():
    server = RawUpstream(hostile)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def daphne_with_key(django_db_setup, hostile_upstream, _relay_db_connections):
    server = DaphneServer(hostile_upstream.base_url, env={"UPSTREAM_API_KEY": KEY})
    yield server
    server.stop()


async def _frames(server, path, user, timeout=20):
    frames = []
    async with connect(
        server.ws_url + path,
        origin=server.origin,
        additional_headers={"Cookie": user.cookie},
        max_size=None,
        open_timeout=10,
    ) as ws:
        try:
            async with asyncio.timeout(timeout):
                async for message in ws:
                    frames.append(message)
                    if path == "/ws/streams/":  # the live list never ends: its first frame
                        break
        except TimeoutError:
            pass
    return frames


@pytest.mark.django_db(transaction=True)
class TestHostileUpstream:
    async def test_no_copy_of_the_key_leaves_in_any_form(self, people, daphne_with_key):
        server, owner = daphne_with_key, people.owner
        bearer = {"Authorization": f"Bearer {owner.token}"}
        async with httpx.AsyncClient(base_url=server.url, timeout=15) as client:
            ids = []
            for mode in ("stream", "401", "error_event"):
                r = await client.post(
                    "/api/streams/",
                    json={"input": "hi", "metadata": {"hostile": mode}},
                    headers=bearer,
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
            streams = [await finished(i) for i in ids]
            # the upstream really echoed it, and the database keeps what came, verbatim
            assert streams[0].status == "completed" and streams[1].status == "failed"
            assert KEY in streams[0].resolved_model + streams[0].output_text
            assert KEY in streams[1].error_message

            fetched = {}
            page = {"Cookie": owner.cookie}
            for sid in ids:
                for path in (f"/api/streams/{sid}/", f"/api/streams/{sid}/events/"):
                    fetched[path] = await client.get(path, headers=bearer)
                events = fetched[f"/api/streams/{sid}/events/"].json()["events"]
                for path in (
                    f"/streams/{sid}.sse",
                    f"/streams/{sid}.json",
                    f"/streams/{sid}/",
                    f"/streams/{sid}/events/",
                    *(f"/streams/{sid}/events/{e['index']}/" for e in events),
                ):
                    fetched[path] = await client.get(path, headers=page)
            fetched["/api/streams/"] = await client.get("/api/streams/", headers=bearer)
            fetched["/"] = await client.get("/", headers=page)
        for path, r in fetched.items():
            assert r.status_code == 200, (path, r.status_code)
        frames = {}
        for sid in ids:
            frames[sid] = await _frames(server, f"/ws/streams/{sid}/", owner)
            assert frames[sid], sid
        frames["list"] = await _frames(server, "/ws/streams/", owner)

        leaks = {path: copies(r.text) for path, r in fetched.items() if copies(r.text)}
        leaks |= {f"ws {k}": n for k, fs in frames.items() if (n := sum(map(copies, fs)))}
        assert leaks == {}
        # …and the redaction shows where the key was, not an empty page
        summary = fetched[f"/api/streams/{ids[0]}/"].json()
        assert "[redacted]" in summary["resolved_model"]
        assert "[redacted]" in fetched[f"/api/streams/{ids[1]}/"].json()["error"]["message"]
        assert "[redacted]" in fetched[f"/streams/{ids[0]}.sse"].text
