"""No fragment of a secret leaves, on any route: a hostile history is recorded through every
source, then every URL pattern of Django's resolver (admin included), every WebSocket route, the
recording proxy and /metrics are fetched as a staff member and as a plain user, and every status
line, header, body and frame is searched, in every form a reader could decode, for each
substring of 8 or more characters of each secret.

The secrets: the configured UPSTREAM_API_KEY, the credentials in UPSTREAM_BASE_URL (and the
Basic token they become on the wire), and the pass-through keys proxied clients sent. The
hostile upstream (a raw HTTP server on 127.0.0.1) echoes them into every field a stream has:
model ids (10 kB ones too), routing fields, response/item/call ids, tool names and arguments,
deltas (one stream splits each secret at every offset across two consecutive deltas), error
messages, SSE event names, ids and types (1 kB ones too), response headers; plus XSS strings.

Everything is loaded once for the module (one history, one walk; ~25 s on SQLite, ~35-50 s
on PostgreSQL on a busy 2-core machine); the tests read the results. Path parameters are
filled from the history by FILL (by parameter name) and, for the admin, by the ModelAdmin's
model (`History.admin_objects`): a pattern they cannot fill fails
`test_every_route_is_filled_and_walked` with its name, so a route added later is walked or
named. WALK_REPORT=<path> writes the whole walk's leaks and errors as JSON.
"""

import asyncio
import base64
import dataclasses
import datetime as dt
import html
import http.cookiejar
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from urllib.parse import quote, urlencode, urljoin, urlsplit

import httpx
import pytest
from django.conf import settings
from django.test import override_settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from tests.conftest import DaphneServer
from tests.support import provider_urls
from tests.support.hostile import RawUpstream, escaped, sse
from tests.support.leaks import SecretFinder
from tests.support.routes import (
    Unfillable,
    check_resolves,
    django_routes,
    fill,
    websocket_routes,
)

# (the tests read what the module's fixture collected; the mark has the test database made, and
# each test leaves it empty as transactional tests do)
pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-BAR-CANARY-835431943zq"
URL_USER = "user"
URL_PASSWORD = "pw-Secret-77441199"
PASS_KEYS = {  # pass-through keys, by the user whose proxied requests send them
    "walk-owner": "sk-proj-PASSOWNER-5550199xyz0",
    "walk-staff": "sk-PASS-STAFF-88123405abcdQ",
}
METRICS_TOKEN = "walk-metrics-token-0f1e2d3c"
# the secret part of a notification channel's webhook URL (sealed; its pages show it masked)
CHANNEL_TOKEN = "Hk7QwZ93LmN0pXr5TsV1"
BASIC = base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode()
SECRETS = {
    "key": KEY,
    "url_password": URL_PASSWORD,
    "url_userinfo": f"{URL_USER}:{URL_PASSWORD}",
    "url_basic_token": BASIC,
    **{f"pass_{user.removeprefix('walk-')}": key for user, key in PASS_KEYS.items()},
    "channel_token": CHANNEL_TOKEN,
    # the identity provider's client secret (the servers sign in with one: provider_urls)
    "oidc_client_secret": provider_urls.ENV["STREAMSCOPE_OIDC_CLIENT_SECRET"],
}

XSS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')
XSS_MODEL = XSS[0]  # a resolved model id (the mismatch streams'): a filter value
KEY_MODEL = f"m-{KEY}"  # the echo streams' resolved model id: a filter value too
LONG_FILL = 10_000
NAME_FILL = 1_000
LONG_REQUESTED = "req-" + "y" * LONG_FILL  # a proxied request's 10 kB model id
TAGS = f"{XSS[0]},t-{XSS[1]}"
SESSION = f"walk/{XSS[0]}/{XSS[1]}"


def long_model(k):
    return "long-" + "x" * LONG_FILL + "-" + k


# ---- the hostile upstream ----------------------------------------------------------------------


def _forms(k):
    """`k` as an upstream may spell it inside JSON text (escapes are JSON escapes there)."""
    return {
        "raw": k,
        "json_all": escaped(k),
        "json_some": escaped(k, every=3, upper=True),
        "json_first": "\\u0073" + k[1:] if k.startswith("s") else escaped(k, every=5),
        "json_twice": "\\\\u" + f"{ord(k[0]):04x}" + k[1:],  # data in data: a reader decodes 2×
        "url": "".join(f"%{b:02X}" for b in k.encode()),
        "html_dec": "".join(f"&#{ord(c)};" for c in k),
        "html_hex": "".join(f"&#x{ord(c):x};" for c in k),
        # copies the gate reads too (issue 42): any case, base64 at each alignment in both
        # alphabets, hex, UTF-16 (a NUL after or before each character; escaped twice, data in
        # data, as a decoded NUL fails the stream's row on PostgreSQL)
        "upper": k.upper(),
        "title": k.title(),
        **{
            f"{name}_{pad}": encode(b"~" * pad + k.encode()).decode()
            for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode))
            for pad in range(3)
        },
        "hex": k.encode().hex().upper(),
        "utf16le": "".join(f"{c}\\\\u0000" for c in k),
        "utf16be": "".join(f"\\\\u0000{c}" for c in k),
    }


COPIES = ("b64", "hex")  # (forms of `_forms` whose fragments are their own, not the key's)


def _data(obj, subst):
    text = json.dumps(obj, separators=(",", ":"))
    for placeholder, value in subst.items():
        text = text.replace(placeholder, value)
    return text


class Wire:
    """Builds one hostile Responses stream: `add` an event (its data an object whose
    `@@NAME@@` placeholders become raw JSON text), sequence numbers counted."""

    def __init__(self, subst, event="message", id_=None):
        self.subst, self.event, self.id = subst, event, id_
        self.chunks, self.seq = [], 0
        self.texts = []  # the decoded output text deltas, for the .done events

    def add(self, obj, event=None, id_=None, numbered=True):
        if numbered:
            obj = {"type": obj.pop("type"), "sequence_number": self.seq, **obj}
            self.seq += 1
        data = _data(obj, self.subst)
        if obj["type"] == "response.output_text.delta":
            self.texts.append(json.loads(data)["delta"])
        self.chunks.append(sse(data, event=event or self.event, id=id_ or self.id))
        return self

    def raw(self, data, event=None):
        self.chunks.append(sse(data, event=event or self.event))
        self.seq += 1
        return self


def _message_start(s, k, index=1):
    s.add(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {"type": "message", "id": f"msg_{k}", "role": "assistant", "content": []},
        }
    )
    s.add(
        {
            "type": "response.content_part.added",
            "output_index": index,
            "item_id": f"msg_{k}",
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        }
    )


def _delta(s, k, text, index=1):
    s.add(
        {
            "type": "response.output_text.delta",
            "output_index": index,
            "item_id": f"msg_{k}",
            "content_index": 0,
            "delta": text,
        }
    )


def _created(s, k, model):
    s.add(
        {
            "type": "response.created",
            "response": {
                "id": f"resp_{k}",
                "object": "response",
                "created_at": 1764547200000,
                "model": model,
                "status": "in_progress",
                "instructions": XSS[0],
                "metadata": {"echo": k},
            },
        }
    )


def _routing(s, k, model, others):
    s.add(
        {
            "type": "response.routing.completed",
            "model_id": model,
            "category": f"cat-{k}",
            "source": f"src-{k}",
            "reasoning": "routed: @@JSON_ALL@@ @@URL@@ @@HTML_DEC@@ "
            + " ".join(others)
            + f" {XSS[0]} {XSS[1]}",
        }
    )


def _completed(s, k, model, text, **extra):
    s.add(
        {
            "type": "response.completed",
            "response": {
                "id": f"resp_{k}",
                "object": "response",
                "model": model,
                "status": "completed",
                "output_text": text,
                **extra,
            },
        }
    )


def _subst(k):
    return {f"@@{name.upper()}@@": value for name, value in _forms(k).items()}


def echo_stream(k, others, model):
    """Every field of a stream carries `k` (in every spelling), the other secrets in a few."""
    forms = _forms(k)
    s = Wire(_subst(k), id_=f"id-{k}")
    _created(s, k, model)
    _routing(s, k, model, others)
    call = {"type": "function_call", "id": f"fc_{k}", "call_id": f"call_{k}"}
    s.add(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**call, "name": f"tool_{k}", "arguments": ""},
        }
    )
    arguments = json.dumps({"key": k, "xss": XSS[1], "others": others})
    s.add(
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": f"fc_{k}",
            "delta": arguments,
        }
    )
    s.add(
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {
                **call,
                "name": f"tool_{k}",
                "arguments": arguments,
                "output": f"tool failed for {k} {XSS[0]}",
                "status": "failed",
            },
        }
    )
    _message_start(s, k)
    for name in forms:
        _delta(s, k, f"{name}: @@{name.upper()}@@; ")
    for other in others:
        _delta(s, k, f"other: {other}; ")
    _delta(s, k, f"{XSS[0]} {XSS[1]}")
    text = "".join(s.texts)
    _text_done(s, k, text)
    s.add({"type": f"response.{k}", "note": "@@JSON_SOME@@"}, event=f"ev-{k}", id_=f"evid-{k}")
    s.add({"type": "response.citation.added", "url": f"https://x.test/?k={forms['url']}"})
    _completed(
        s,
        k,
        model,
        text,
        tool_calls=[{**call, "name": f"tool_{k}", "arguments": arguments}],
    )
    return s.chunks


def split_stream(k, others, model):
    """Each secret split at every offset across two consecutive deltas."""
    s = Wire(_subst(k))
    _created(s, k, model)
    _message_start(s, k)
    for secret in [k, *others]:
        for i in range(1, len(secret)):
            _delta(s, k, f"<{secret[:i]}")
            _delta(s, k, f"{secret[i:]}> ")
    text = "".join(s.texts)
    _text_done(s, k, text)
    _completed(s, k, model, text)
    return s.chunks


def _text_done(s, k, text):
    s.add(
        {
            "type": "response.output_text.done",
            "output_index": 1,
            "item_id": f"msg_{k}",
            "content_index": 0,
            "text": text,
        }
    )


def mismatch_stream(k, others, model):
    """Findings whose snippets cut a secret mid-way: a .done text that differs inside the key
    (±20 characters shown), a final text that differs, data that is not JSON (200 shown)."""
    s = Wire(_subst(k))
    _created(s, k, model)
    _message_start(s, k)
    text = f"Answer {k} and " + " ".join(others) + "." + " pad" * 60 + f" {k}"
    _delta(s, k, text)
    s.raw("{not json " + "." * 186 + k)
    done = text.replace(k, k[:12] + "#" + k[13:], 1)
    _text_done(s, k, done)
    _completed(s, k, model, text[:-9] + "~" + text[-8:])
    return s.chunks


def long_stream(k, others, model):
    """A 10 kB model id, 1 kB SSE event names and ids, 1 kB event types."""
    s = Wire(_subst(k), event="ev-" + "n" * NAME_FILL + k, id_="id-" + "i" * NAME_FILL + k)
    _created(s, k, model)
    _routing(s, k, model, others)
    _message_start(s, k)
    _delta(s, k, f"long {k}")
    s.add({"type": "response." + "t" * NAME_FILL + k})
    s.add({"type": "response.x" + "u" * NAME_FILL + "-" + k, "note": k})
    text = "".join(s.texts)
    _text_done(s, k, text)
    _completed(s, k, model, text)
    return s.chunks


MODES = {
    # mode: (stream builder, resolved model id for the primary secret k)
    "echo": (echo_stream, lambda k: f"m-{k}"),
    "split": (split_stream, lambda k: f"m-split-{k}"),
    "mismatch": (mismatch_stream, lambda k: XSS_MODEL),
    "long": (long_stream, long_model),
}


class HostileUpstream(RawUpstream):
    """Echoes the secrets it knows: what came in `Authorization` (a Bearer key, or the URL's
    credentials as Basic), the pass-through key of the user named in `X-Walk-Echo` (the proxy
    forwards that header; see `known`), and the server's key."""

    def __init__(self):
        super().__init__(self.answer)

    def secrets_of(self, headers):
        """(primary secret, the others) this request lets the upstream echo."""
        found = []
        user = headers.get("x-walk-echo")
        if user in PASS_KEYS:
            found.append(PASS_KEYS[user])
        # With credentials in UPSTREAM_BASE_URL httpx sends them (Basic) instead of the
        # Bearer key: a leaked key is what a hostile upstream may know anyway.
        found.append(KEY)
        if headers.get("x-api-key"):  # (Anthropic's clients: the proxy's /v1/messages)
            found.append(headers["x-api-key"])
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            found.append(value)
        elif scheme.lower() == "basic":
            found.append(value)
            userinfo = base64.b64decode(value).decode("utf-8", "replace")
            found += [userinfo, userinfo.partition(":")[2]]
        found = [s for i, s in enumerate(found) if s and s not in found[:i]]
        return found[0], found[1:]

    def answer(self, method, path, headers, body):
        k, others = self.secrets_of(headers)
        echo = [
            ("X-Echo", f"Bearer {k}"),
            ("X-Echo-Auth", headers.get("authorization", "")),
            ("X-Echo-Escaped", escaped(k)),
            ("X-Request-Id", f"req_{k}"),
            ("X-Xss", XSS[1]),
        ]
        if method == "GET" and path.endswith("/models"):
            ids = [f"m-{s}" for s in (k, *others)] + [escaped(f"m-{k}"), *XSS, long_model(k)]
            models = [{"id": i, "object": "model", "owned_by": f"org-{k}"} for i in ids]
            return 200, "application/json", [json.dumps({"data": models}).encode()], echo
        request = json.loads(body or b"{}")
        mode = (request.get("metadata") or {}).get("hostile", "echo")
        if mode == "401":
            message = f"Incorrect API key provided: {k} ({escaped(k)}) {' '.join(others)} {XSS[0]}"
            error = {"error": {"code": "invalid_api_key", "message": message, "param": k}}
            return 401, "application/json", [json.dumps(error).encode()], echo
        if request.get("stream") is False:  # a proxied `stream: false`: the final response
            model = f"m-json-{k}"
            answer = {
                "id": f"resp_{k}",
                "object": "response",
                "model": model,
                "status": "completed",
                "output_text": f"json {k} {' '.join(others)} {XSS[0]}",
                "output": [{"type": "function_call", "name": f"tool_{k}", "call_id": f"c_{k}"}],
            }
            return 200, "application/json", [json.dumps(answer).encode()], echo
        if mode == "error_event":
            s = Wire(_subst(k))
            _created(s, k, XSS[1] + k)
            message = f"Bad key {escaped(k, 2)} {k} {' '.join(others)}"
            s.add({"type": "error", "code": "invalid_api_key", "message": message, "param": k})
            return 200, "text/event-stream", s.chunks, echo
        build, model = MODES[mode]
        return 200, "text/event-stream", build(k, others, model(k)), echo


# ---- people and their identities ---------------------------------------------------------------


class NoJar(http.cookiejar.CookieJar):
    """Keeps no cookie: every request says who it is in its own headers."""

    def extract_cookies(self, response, request):
        pass


@dataclasses.dataclass
class Person:
    name: str
    user: object
    cookie: str  # "sessionid=…"
    token: str  # ss_…


def _people():
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from dashboard import project
    from streams.access import projects
    from streams.models import ApiToken

    out = {}
    for name, staff in (("walk-owner", False), ("walk-staff", True)):
        user = get_user_model().objects.create_user(name, is_staff=staff, is_superuser=staff)
        client = Client()
        client.force_login(user)
        if staff:  # staff's pages show every project at once (dashboard/project.py)
            session = client.session
            session[project.SESSION_KEY] = projects.ALL
            session.save()
        cookie = (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
        out[name] = Person(name, user, cookie, ApiToken.issue(user, name=f"walk {XSS[0]}"))
    return out


# ---- fetching ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Fetched:
    route: str  # the pattern's name (or text), or what else was fetched
    kind: str  # http / websocket / proxy / history
    who: str
    method: str
    url: str
    status: int | None
    head: str  # status line and headers, as text
    body: str
    content_type: str = ""
    note: str = ""
    elapsed: float = 0.0

    @property
    def label(self):
        return f"{self.method} {self.url} as {self.who}"


def _head(status, reason, headers):
    return f"HTTP/1.1 {status} {reason}\n" + "".join(f"{k}: {v}\n" for k, v in headers)


def client(server):
    c = httpx.AsyncClient(base_url=server.url, timeout=60, follow_redirects=False)
    c.cookies = httpx.Cookies(NoJar())
    return c


async def request(c, route, kind, who, method, url, headers=None, **kwargs):
    t = time.monotonic()
    try:
        r = await c.request(method, url, headers=headers or {}, **kwargs)
    except httpx.HTTPError as exc:
        return Fetched(route, kind, who, method, url, None, "", "", note=repr(exc))
    return Fetched(
        route,
        kind,
        who,
        method,
        url,
        r.status_code,
        _head(r.status_code, r.reason_phrase, r.headers.multi_items()),
        r.content.decode("utf-8", "replace"),
        r.headers.get("content-type", ""),
        elapsed=time.monotonic() - t,
    )


async def ws_frames(server, route, who, path, headers, seconds):
    """Frames of a WebSocket (until it closes, at most `seconds`), with its handshake."""
    frames, head, note = [], "", ""
    try:
        async with connect(
            server.ws_url + path,
            origin=server.origin,
            additional_headers=headers,
            max_size=None,
            open_timeout=10,
        ) as ws:
            head = _head(ws.response.status_code, "", ws.response.headers.raw_items())
            try:
                async with asyncio.timeout(seconds):
                    async for message in ws:
                        frames.append(message if isinstance(message, str) else message.decode())
            except TimeoutError:
                note = "open at the deadline"
            except ConnectionClosedError:
                # (a busy server's socket ending without its close frame: what came before
                # is walked like any other frames)
                note = "closed without a close frame"
            note = note or f"closed {ws.close_code}"
    except InvalidStatus as exc:
        r = exc.response
        head = _head(r.status_code, r.reason_phrase, r.headers.raw_items())
        frames.append(r.body.decode("utf-8", "replace") if r.body else "")
        note = f"refused {r.status_code}"
    except (OSError, TimeoutError) as exc:
        note = repr(exc)
    status = int(head.split(" ", 2)[1]) if head else None
    return Fetched(route, "websocket", who, "WS", path, status, head, "\n".join(frames), "", note)


# ---- recording the hostile history -------------------------------------------------------------


def _csrf(fetched):
    m = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', fetched.body)
    cookie = re.search(r"csrftoken=([^;]+)", fetched.head)
    assert m and cookie, fetched.label
    return m.group(1), cookie.group(1)


async def record(server, people, results):
    """Start the hostile streams through every source (the long ones come after)."""
    owner, staff = people["walk-owner"], people["walk-staff"]
    ids = defaultdict(list)  # source -> stream ids
    async with client(server) as c:

        async def api(person, mode):
            r = await request(
                c,
                "api_streams",
                "history",
                person.name,
                "POST",
                "/api/streams/",
                {"Authorization": f"Bearer {person.token}"},
                json={"input": f"hi {XSS[0]}", "model": "auto", "metadata": {"hostile": mode}},
            )
            results.append(r)
            assert r.status == 201, r.body
            ids["api"].append(json.loads(r.body)["id"])

        async def proxied(
            person, mode, passthrough, stream=True, model="auto", path="/v1/responses"
        ):
            # (Anthropic's clients send their key as x-api-key: the proxy's /v1/messages)
            key_header = "x-api-key" if path == "/v1/messages" else "Authorization"
            scheme = "" if path == "/v1/messages" else "Bearer "
            if passthrough:
                headers = {
                    key_header: f"{scheme}{PASS_KEYS[person.name]}",
                    "X-Streamscope-Token": person.token,
                    "X-Walk-Echo": person.name,
                }
            else:
                headers = {key_header: f"{scheme}{person.token}"}
            headers |= {"X-Streamscope-Tags": TAGS, "X-Streamscope-Session": SESSION}
            body = {"model": model, "input": "hi", "stream": stream, "metadata": {"hostile": mode}}
            how = "passthrough" if passthrough else "server-key"
            r = await request(
                c, f"proxy:{path}", "proxy", f"{person.name} ({how})", "POST",
                path, headers, json=body,
            )  # fmt: skip
            results.append(r)
            sid = re.search(r"x-streamscope-stream: (\d+)", r.head)
            if sid:
                ids[f"proxy-{how}"].append(int(sid.group(1)))
            return r

        jobs = [api(owner, mode) for mode in ("echo", "split", "mismatch", "401", "error_event")]
        jobs += [api(staff, "echo")]
        for mode in ("echo", "split", "mismatch"):
            jobs.append(proxied(owner, mode, passthrough=False))
            jobs.append(proxied(owner, mode, passthrough=True))
        jobs += [proxied(owner, "echo", passthrough=False, stream=False)]
        jobs += [proxied(owner, "echo", passthrough=True, stream=False)]
        jobs += [proxied(staff, mode, passthrough=True) for mode in ("echo", "split")]
        # the other formats' routes (streams/core/formats/): the same gate, whatever comes back
        for path in ("/v1/chat/completions", "/v1/messages"):
            jobs.append(proxied(owner, "echo", passthrough=False, path=path))
            jobs.append(proxied(owner, "split", passthrough=True, path=path))
        await asyncio.gather(*jobs)

        # an upload of captures holding the secrets (two files: the job page lists both)
        page = await request(c, "stream_upload", "history", owner.name, "GET", "/streams/upload/",
                             {"Cookie": owner.cookie})  # fmt: skip
        token, cookie = _csrf(page)
        files = [
            ("file", (f"{XSS[0]}.sse", b"".join(echo_stream(KEY, [URL_PASSWORD], KEY_MODEL)))),
            ("file", ("split.sse", b"".join(split_stream(PASS_KEYS[owner.name], [KEY], "m-up")))),
        ]
        r = await request(
            c, "stream_upload", "history", owner.name, "POST", "/streams/upload/",
            {"Cookie": f"{owner.cookie}; csrftoken={cookie}", "X-CSRFToken": token},
            data={"model": XSS[1], "csrfmiddlewaretoken": token}, files=files,
        )  # fmt: skip
        results.append(r)
        assert r.status == 302, (r.status, r.body[:2000])
        job_path = re.search(r"location: (\S+)", r.head).group(1)
        for _ in range(200):  # poll it (a job nobody polls is cancelled)
            poll = job_path + "?fragment=import-progress"
            cookie = {"Cookie": owner.cookie}
            r = await request(c, "import_job", "history", owner.name, "GET", poll, cookie)
            if "hx-trigger" not in r.body:
                break
            await asyncio.sleep(0.05)
        ids["import"].append(job_path)

        # a playground conversation (its answer: the echo stream)
        page = await request(c, "playground", "history", owner.name, "GET", "/playground/",
                             {"Cookie": owner.cookie})  # fmt: skip
        token, cookie = _csrf(page)
        r = await request(
            c, "playground_send", "history", owner.name, "POST", "/playground/send/",
            {"Cookie": f"{owner.cookie}; csrftoken={cookie}", "X-CSRFToken": token,
             "Accept": "application/json"},
            data={"input": f"hello {XSS[0]}", "model": "auto", "instructions": XSS[1]},
        )  # fmt: skip
        results.append(r)
        assert r.status == 201, (r.status, r.body[:2000])
        ids["playground"].append(json.loads(r.body)["turn"])
    return ids


async def record_long(server, people, results):
    """The long strings, last: on a database that refuses them they may hold the writer up."""
    owner = people["walk-owner"]
    ids = []
    async with client(server) as c:
        r = await request(
            c, "api_streams", "history", owner.name, "POST", "/api/streams/",
            {"Authorization": f"Bearer {owner.token}"},
            json={"input": "long", "model": "auto", "metadata": {"hostile": "long"}},
        )  # fmt: skip
        results.append(r)
        assert r.status == 201, r.body
        ids.append(json.loads(r.body)["id"])
        r = await request(
            c, "proxy:/v1/responses", "proxy", f"{owner.name} (server-key)", "POST",
            "/v1/responses", {"Authorization": f"Bearer {owner.token}"},
            json={"model": LONG_REQUESTED, "input": "long", "stream": True,
                  "metadata": {"hostile": "long"}},
        )  # fmt: skip
        results.append(r)
        sid = re.search(r"x-streamscope-stream: (\d+)", r.head)
        ids.append(int(sid.group(1)) if sid else None)
    return ids


def wait_finished(timeout=60):
    from streams.models import Stream as Row

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Row.objects.filter(status__in=("pending", "streaming")).exists():
            return
        time.sleep(0.05)
    active = list(Row.objects.filter(status__in=("pending", "streaming")).values("id", "status"))
    raise AssertionError(f"streams still running: {active}")


# ---- what fills each route's parameters --------------------------------------------------------


def _sample(items, n):
    """At most n of `items`, spread over them, first and last included."""
    items = list(items)
    if len(items) <= n:
        return items
    step = (len(items) - 1) / (n - 1)
    return sorted({items[round(i * step)] for i in range(n)})


@dataclasses.dataclass
class History:
    stream_ids: list
    event_indexes: dict  # stream id -> the indexes walked
    job_ids: list
    sessions: list
    conversations: dict  # conversation id -> turn ids
    app_labels: list
    content_types: list  # ids of the content types `r/<ct>/<id>/` is walked for
    admin_objects: dict  # model -> pks
    view_ids: list  # saved views, shared, named and filtered with the hostile strings
    score_ids: dict  # stream id -> its scores' ids
    # share links: secret -> the ids of the streams it shows (stream and session links of
    # both people, to hostile streams and sessions), and the links' ids
    share_secrets: dict = dataclasses.field(default_factory=dict)
    link_ids: list = dataclasses.field(default_factory=list)
    token_ids: list = dataclasses.field(default_factory=list)
    # datasets, experiments and runs made of the hostile streams (each pair of runs compared)
    dataset_ids: list = dataclasses.field(default_factory=list)
    experiment_ids: list = dataclasses.field(default_factory=list)
    run_pairs: list = dataclasses.field(default_factory=list)  # [(run id, earlier run id)]
    # projects (a hostile name), their members, invitations and the invitations' secrets
    project_slugs: list = dataclasses.field(default_factory=list)
    member_ids: list = dataclasses.field(default_factory=list)
    invitation_ids: list = dataclasses.field(default_factory=list)
    invitation_keys: list = dataclasses.field(default_factory=list)
    # the projects' own score types and prices (hostile names and notes)
    score_type_ids: list = dataclasses.field(default_factory=list)
    price_ids: list = dataclasses.field(default_factory=list)
    # alert rules named with the hostile strings and the upstream's key, and their silences
    rule_ids: list = dataclasses.field(default_factory=list)
    silence_ids: list = dataclasses.field(default_factory=list)
    channel_ids: list = dataclasses.field(default_factory=list)  # notification channels
    # evaluators (hostile configs) and online rules (hostile names), with evaluations whose
    # reasons hold the upstream's key
    evaluator_ids: list = dataclasses.field(default_factory=list)
    online_rule_ids: list = dataclasses.field(default_factory=list)


def load_history(people):
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog
    from django.contrib import admin
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.contrib.contenttypes.models import ContentType

    from dashboard.models import Conversation, Turn
    from streams.models import ApiToken, AuditEntry, Event, Finding, ImportFile, ImportJob, Price
    from streams.models import Stream as Row

    # a token named with the upstream's key and a pass-through key: the audit log's entry of
    # it (its target, its changes) is derived text, on the audit page and in the admin
    owner = next(iter(people.values())).user
    if not ApiToken.objects.filter(name__startswith="echo ").exists():
        ApiToken.issue(owner, name=f"echo {KEY} {PASS_KEYS['walk-owner']}")

    if not Price.objects.exists():  # (a team's price, named with the hostile model's name)
        Price.objects.create(
            model_pattern=XSS_MODEL[:99] + "*", currency="EUR", input_per_million=1,
            output_per_million=4, note=XSS[0][:200],
            effective_from=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        )  # fmt: skip

    from dashboard.models import SavedView

    for person in people.values():  # (a view each, shared: everyone's list shows them all)
        SavedView.objects.get_or_create(
            owner=person.user, page="stream_list", name=XSS[0][:100],
            defaults={"query": urlencode({"q": XSS_MODEL[:200]}), "shared": True},
        )  # fmt: skip
    # scores and comments on a few of each person's streams: hostile categories, keys and
    # texts, and comments with the upstream's key pasted in, whole and escaped
    from streams.models import Comment, Invitation, Score, ScoreType, ShareLink
    from streams.store import scores as scoring

    ScoreType.objects.get_or_create(
        name="walk-verdict", defaults={
            "kind": "categorical", "minimum": 0, "maximum": 1, "description": XSS[1],
            "categories": [{"label": XSS[0], "value": 0}, {"label": XSS[1], "value": 1}],
        },
    )  # fmt: skip
    for person in people.values():
        for pk in Row.objects.filter(user=person.user).order_by("pk").values_list("pk")[:3]:
            pk = pk[0]
            scoring.give(
                pk, author=person.user, name="thumbs", value=1, source="person",
                comment=f"{XSS[0]} {KEY}",
            )  # fmt: skip
            scoring.give(
                pk, author=person.user, name="walk-verdict", label=XSS[1], source="api",
                key=XSS[0], comment=f"{XSS[1]} {escaped(KEY)}",
            )  # fmt: skip
            if not Comment.objects.filter(stream_id=pk, author=person.user).exists():
                scoring.comment(
                    pk, author=person.user, text=f"{XSS[1]} {KEY} {XSS[0]}", source="api"
                )
    score_ids = defaultdict(list)
    for stream_id, score_id in Score.objects.values_list("stream_id", "pk"):
        score_ids[stream_id].append(score_id)
    streams = list(Row.objects.order_by("pk").values_list("pk", "event_count"))
    indexes = {}
    for pk, _ in streams:
        all_indexes = list(
            Event.objects.filter(stream_id=pk).order_by("index").values_list("index", flat=True)
        )
        indexes[pk] = _sample(all_indexes, 5)
    conversations = defaultdict(list)
    for conversation, turn in Turn.objects.values_list("conversation_id", "pk"):
        conversations[conversation].append(turn)
    for conversation in Conversation.objects.values_list("pk", flat=True):
        conversations.setdefault(conversation, [])
    hostile_events = (
        Event.objects.filter(stream_id__in=[pk for pk, _ in streams]).order_by("pk")
    ).values_list("pk", flat=True)
    objects = {
        Row: _sample([pk for pk, _ in streams], 10),
        Event: _sample(hostile_events, 16),
        Finding: _sample(Finding.objects.order_by("pk").values_list("pk", flat=True), 16),
        ImportJob: list(ImportJob.objects.values_list("pk", flat=True)),
        ImportFile: list(ImportFile.objects.values_list("pk", flat=True)),
        ApiToken: list(ApiToken.objects.values_list("pk", flat=True)),
        AuditEntry: list(
            AuditEntry.objects.filter(action="token.created").values_list("pk", flat=True)
        )[-3:],
        Price: list(Price.objects.values_list("pk", flat=True)),
        ScoreType: list(ScoreType.objects.values_list("pk", flat=True)),
        Score: _sample(Score.objects.order_by("pk").values_list("pk", flat=True), 8),
        Comment: _sample(Comment.objects.order_by("pk").values_list("pk", flat=True), 8),
        get_user_model(): [p.user.pk for p in people.values()],
        Group: list(Group.objects.values_list("pk", flat=True)),
        AccessAttempt: list(AccessAttempt.objects.values_list("pk", flat=True)),
        AccessLog: list(AccessLog.objects.values_list("pk", flat=True)),
        AccessFailureLog: list(AccessFailureLog.objects.values_list("pk", flat=True)),
    }
    share_secrets, link_ids = _share_links(people)
    objects[ShareLink] = link_ids  # (the admin's pages of them)
    made = _projects(people)
    objects[Invitation] = made["invitation_ids"]  # (the admin's read-only pages of them)
    return History(
        **made,
        **_alerts(people),
        **_experiments(people),
        **_evaluators(people),
        channel_ids=_channels(people),
        share_secrets=share_secrets,
        link_ids=link_ids,
        token_ids=objects[ApiToken],
        stream_ids=[pk for pk, _ in streams],
        event_indexes=indexes,
        job_ids=list(ImportJob.objects.values_list("pk", flat=True)),
        sessions=sorted(set(Row.objects.exclude(session="").values_list("session", flat=True))),
        conversations=dict(conversations),
        app_labels=sorted({m._meta.app_label for m in admin.site._registry}),
        content_types=[ContentType.objects.get_for_model(m).pk for m in (Row, get_user_model())],
        admin_objects=objects,
        view_ids=list(SavedView.objects.values_list("pk", flat=True)),
        score_ids=dict(score_ids),
    )


def _evaluators(people):
    """An evaluator with the upstream's key and markup in its config, an online rule with a
    hostile name, and an evaluation whose reason holds the key, in each person's project."""
    from streams import evaluate
    from streams.evaluate import online
    from streams.models import Evaluation, Evaluator, OnlineRule, Project
    from streams.models import Stream as Row

    for person in people.values():
        project = Project.personal(person.user)
        if Evaluator.objects.filter(project=project).exists():
            continue
        made = evaluate.save(
            project, name="walk-contains", kind="contains",
            config={"text": f"{XSS[0]} {KEY} {XSS[1]}"}, user=person.user,
        )  # fmt: skip
        online.create(project, user=person.user, name=f"{XSS[0]} {KEY}", evaluators=[made])
        stream = Row.objects.filter(user=person.user).order_by("pk").first()
        if stream is not None:
            Evaluation.objects.create(
                project=project, evaluator=made, version=1, stream=stream, outcome="no_score",
                reason=f"{XSS[1]} {KEY} {escaped(KEY)}",
            )  # fmt: skip
    return {
        "evaluator_ids": list(Evaluator.objects.values_list("pk", flat=True)),
        "online_rule_ids": list(OnlineRule.objects.values_list("pk", flat=True)),
    }


def _share_links(people):
    """A stream link to a few of each person's streams and a link to each of their sessions
    (the hostile session names): {secret: the ids of the streams it shows}, and the ids."""
    from streams.access import shares
    from streams.models import Stream as Row

    secrets, ids = {}, []
    for person in people.values():
        mine = Row.objects.filter(user=person.user).order_by("pk")
        targets = [{"stream": pk} for pk in _sample(list(mine.values_list("pk", flat=True)), 3)]
        sessions = sorted(set(mine.exclude(session="").values_list("session", flat=True)))
        targets += [{"session": name} for name in sessions[:2]]
        for target in targets:
            link, secret = shares.create(person.user, **target, anyone=True)
            shown = list(shares.streams_of(link).order_by("pk").values_list("pk", flat=True))
            secrets[secret] = _sample(shown, 3)
            ids.append(link.pk)
    return secrets, ids


def _channels(people):
    """A notification channel of each person's, named with the hostile strings and the key,
    its webhook URL holding CHANNEL_TOKEN, with a notification sent to it that quotes the key
    (the delivery log's subject): the ids."""
    from streams.models import Project
    from streams.notify import Message, channels, deliver

    ids = []
    allowed = {**settings.STREAMSCOPE, "ALERT_ALLOWED_HOSTS": "127.0.0.1"}
    for person in people.values():
        project = Project.personal(person.user)
        with override_settings(STREAMSCOPE=allowed):
            channel, _ = channels.create(
                project, f"{XSS[0]} {KEY}"[:100], "webhook",
                f"http://127.0.0.1:9/hooks/{CHANNEL_TOKEN}?echo={XSS[1]}",
            )  # fmt: skip
        deliver.send([channel], Message(f"{XSS[1]} {KEY}", lines=[KEY]), "walk")
        ids.append(channel.pk)
    return ids


def _experiments(people):
    """Per person: a dataset of a few of their hostile streams, an experiment of two variants
    and two finished runs whose item streams are those streams (in turned orders, so the
    comparison finds every answer changed): History's fields of them."""
    from streams.experiments import datasets, experiments, runs
    from streams.models import Run, RunItem
    from streams.models import Stream as Row

    found = {"dataset_ids": [], "experiment_ids": [], "run_pairs": []}
    for person in people.values():
        mine = list(Row.objects.filter(user=person.user).order_by("pk")[:4])
        project = mine[0].project
        dataset = datasets.create(project, f"{XSS[0]} {person.name}", user=person.user)
        datasets.add_streams(dataset, Row.objects.filter(pk__in=[s.pk for s in mine]))
        experiment = experiments.create(
            project,
            name=f"{XSS[0]} {person.name}",
            version=datasets.latest(dataset),
            variants=[{"model": "a", "name": XSS[0]}, {"model": "b"}],
            user=person.user,
        )
        pair = []
        for turn in (0, 1):
            run = runs.start(experiment, person.user)
            for n, item in enumerate(RunItem.objects.filter(run=run).order_by("pk")):
                stream = mine[(n + turn) % len(mine)]
                RunItem.objects.filter(pk=item.pk).update(done=True, evaluated=True)
                if not RunItem.objects.filter(stream=stream).exists():
                    RunItem.objects.filter(pk=item.pk).update(stream=stream)
            Run.objects.filter(pk=run.pk).update(state=Run.State.FINISHED)
            pair.append(run.pk)
        found["dataset_ids"].append(dataset.pk)
        found["experiment_ids"].append(experiment.pk)
        found["run_pairs"].append((pair[1], pair[0]))
    return found


def _projects(people):
    """A project with a hostile name each person owns, with the other a member, and an open
    invitation to it: History's fields of them."""
    from streams.access import invitations, members
    from streams.models import Invitation, Price, Project, ScoreType

    slugs, keys, types, prices = [], [], [], []
    for person in people.values():
        project = Project.objects.filter(memberships__user=person.user, personal_of=None).first()
        if project is None:
            project = members.create(person.user, f"{XSS[0]} {person.name}")
            for other in people.values():
                if other is not person:
                    members.add(person.user, project, other.user, "viewer")
        slugs.append(project.slug)
        keys.append(invitations.invite(person.user, project, "walk@example.com", "member")[1])
        made, _ = ScoreType.objects.get_or_create(
            project=project,
            name=f"walk-{project.pk}",
            defaults={
                "kind": "categorical",
                "categories": [{"label": XSS[0][:50], "value": 0}, {"label": "ok", "value": 1}],
                "description": XSS[0][:300],
            },
        )
        types.append(made.pk)
        price, _ = Price.objects.get_or_create(
            project=project,
            model_pattern=XSS[0][:100],
            effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            defaults={"input_per_million": 1, "output_per_million": 2, "note": XSS[0][:200]},
        )
        prices.append(price.pk)
    return {
        "score_type_ids": types,
        "price_ids": prices,
        "project_slugs": slugs,
        "member_ids": [p.user.pk for p in people.values()],
        "invitation_ids": list(Invitation.objects.values_list("pk", flat=True)),
        "invitation_keys": keys,
    }


def _alerts(people):
    """A firing, muted alert rule of each person in their project, named with a hostile string
    and the upstream's key, scoped to the hostile model (History's fields of them)."""
    from streams.models import Project, Rule, Silence
    from tests.support.alerts import walk_objects

    found = {"rule_ids": [], "silence_ids": []}
    for person in people.values():
        project = Project.objects.filter(memberships__user=person.user, personal_of=None).first()
        mine = Rule.objects.filter(project=project, created_by=person.user)
        if mine.exists():
            found["rule_ids"] += list(mine.values_list("pk", flat=True))
            found["silence_ids"] += list(
                Silence.objects.filter(rule__in=mine).values_list("pk", flat=True)
            )
            continue
        made = walk_objects(
            person.user, project, name=f"{XSS[0]} {KEY}"[:100], reason=f"{XSS[1]} {KEY}"[:200]
        )
        for key, ids in made.items():
            found[key] += ids
    return found


# The fill table, by parameter name: (history, route, the parameters bound so far) -> values.
FILL = {
    # (through a share link: the streams it shows)
    "stream_id": lambda h, route, bound: (
        h.share_secrets[bound["secret"]] if "secret" in bound else h.stream_ids
    ),
    # a stream compared with another: each with the next (the hostile ones against each other)
    "other_id": lambda h, route, bound: [pk for pk in h.stream_ids if pk != bound["stream_id"]][:2],
    "index": lambda h, route, bound: h.event_indexes.get(bound["stream_id"], []),
    "job_id": lambda h, route, bound: h.job_ids,
    "session": lambda h, route, bound: h.sessions,
    "conversation_id": lambda h, route, bound: list(h.conversations),
    "view_id": lambda h, route, bound: h.view_ids,
    "score_id": lambda h, route, bound: h.score_ids.get(bound["stream_id"], []),
    "turn_id": lambda h, route, bound: h.conversations[bound["conversation_id"]],
    "secret": lambda h, route, bound: list(h.share_secrets),  # share links
    "link_id": lambda h, route, bound: h.link_ids,
    "token_id": lambda h, route, bound: h.token_ids,
    "channel_id": lambda h, route, bound: h.channel_ids,
    "project_slug": lambda h, route, bound: h.project_slugs,
    "user_id": lambda h, route, bound: h.member_ids,
    "invitation_id": lambda h, route, bound: h.invitation_ids,
    "score_type_id": lambda h, route, bound: h.score_type_ids,
    "price_id": lambda h, route, bound: h.price_ids,
    "key": lambda h, route, bound: h.invitation_keys,  # an invitation's link
    "dataset_id": lambda h, route, bound: h.dataset_ids,
    "experiment_id": lambda h, route, bound: h.experiment_ids,
    "run_id": lambda h, route, bound: [pk for pair in h.run_pairs for pk in pair],
    "other_run_id": lambda h, route, bound: [
        other for run, other in h.run_pairs if run == bound["run_id"]
    ],
    "rule_id": lambda h, route, bound: h.rule_ids,
    "silence_id": lambda h, route, bound: h.silence_ids,
    "evaluator_id": lambda h, route, bound: h.evaluator_ids,
    "online_rule_id": lambda h, route, bound: h.online_rule_ids,
    # admin
    "app_label": lambda h, route, bound: h.app_labels,
    "content_type_id": lambda h, route, bound: h.content_types,
    "url": lambda h, route, bound: ["no-such-page/", f"{XSS[0]}/"],  # admin's catch-all
}
# Admin object ids (`object_id`, UserAdmin's `id`), by the model of the ModelAdmin.
ADMIN_PARAMS = ("object_id", "id")


def fill_param(history):
    def one(route, name, bound):
        if name in ADMIN_PARAMS and route.model is not None:
            return history.admin_objects.get(route.model)  # None: a model the table lacks
        if name == "object_id" and "content_type_id" in bound:  # admin's view_on_site
            from django.contrib.contenttypes.models import ContentType

            model = ContentType.objects.get_for_id(int(bound["content_type_id"])).model_class()
            return history.admin_objects.get(model, [])[:3]
        maker = FILL.get(name)
        return None if maker is None else maker(history, route, bound)

    return one


# Query strings: for pages without parameters (lists, analytics, …), ones that select the
# hostile data and put the hostile names on the page; more for routes that take their own.
def generic_queries(who):
    q = [
        {},
        {"range": "all"},
        {"model": XSS_MODEL, "resolved": XSS_MODEL, "q": XSS_MODEL},
        {"model": KEY_MODEL, "resolved": KEY_MODEL, "requested": "auto"},
        {"source": "proxy", "tag": XSS[0], "session": SESSION},
        {"compare": "models", "a": KEY_MODEL, "b": XSS_MODEL},
        {"status": "failed", "findings": "errors"},
    ]
    if who == "walk-staff":
        q.append({"user": "walk-owner"})
    return [urlencode(x) for x in q]


QUERIES = {
    "stream_list": ["fragment=streams&range=all", "fragment=results&range=all"],
    "import_job": ["fragment=import-progress"],
    "stream_detail": ["tail=1", "type=response.output_text.delta"],
    "stream_events": ["after=-1", "at=0"],
    "api_streams": ["limit=100"],
    "api_stream_events": ["after=-1&limit=1000"],
}
ADMIN_CHANGELIST_QUERIES = ["", f"q={quote(XSS[0])}"]
MORE_FILLS = 4  # fills of a route that also get its own query strings (and the API a token)


def plan(routes, history, people):
    """[(route, who, url, headers)] to fetch, and the routes the table could not fill."""
    todo, unfilled, unresolved = [], [], []
    filler = fill_param(history)
    for route in routes:
        try:
            paths = fill(route, filler)
        except Unfillable as exc:
            unfilled.append(str(exc))
            continue
        for path in paths:
            if route.kind == "http" and not check_resolves(route, path):
                unresolved.append(f"{route}: {path!r} resolves elsewhere")
        for person in people.values():
            headers = {"Cookie": person.cookie}
            queries = [""]
            if not route.params and route.kind == "http" and not route.name.startswith("admin:"):
                queries = generic_queries(person.name)
            elif route.name.endswith("_changelist"):
                queries = ADMIN_CHANGELIST_QUERIES
            for n, path in enumerate(paths):
                # a route's own query strings and the API's token: on its first few fills
                more = QUERIES.get(route.name, []) if n < MORE_FILLS else []
                for query in queries + more:
                    url = f"{quote(path, safe='/:@!$&()*+,;=~-._')}" + (
                        f"?{query}" if query else ""
                    )
                    todo.append((route, person.name, url, headers))
                    if path.startswith("/api/") and not query and n < MORE_FILLS:
                        token = {"Authorization": f"Bearer {person.token}"}
                        todo.append((route, f"{person.name} (token)", url, token))
    return todo, unfilled, unresolved


_HX_GET = re.compile(r'hx-get="([^"]*)"')
_HX_TARGET = re.compile(r'hx-target="#([^"]+)"')


def htmx_follow_ups(fetched, headers):
    """The htmx requests a page would make: itself as a partial, and each `hx-get` URL with
    the targets the page names."""
    targets = sorted(set(_HX_TARGET.findall(fetched.body))) or [None]
    out = [(fetched.url, {**headers, "HX-Request": "true"})]
    for raw in sorted(set(_HX_GET.findall(fetched.body))):
        url = urljoin(fetched.url, html.unescape(raw))
        if urlsplit(url).netloc:
            continue
        for target in targets:
            hx = {**headers, "HX-Request": "true"} | ({"HX-Target": target} if target else {})
            out.append((url, hx))
    return out


async def walk(server, todo, results, concurrency=8, hx_per_route=3):
    sem = asyncio.Semaphore(concurrency)
    hx_done = Counter()
    seen = set()
    async with client(server) as c:

        async def one(route_name, kind, who, url, headers, follow=True):
            if (url, who, tuple(sorted(headers.items()))) in seen:
                return
            seen.add((url, who, tuple(sorted(headers.items()))))
            async with sem:
                r = await request(c, route_name, kind, who, "GET", url, headers)
            results.append(r)
            if (
                follow
                and r.status == 200
                and r.content_type.startswith("text/html")
                and not route_name.startswith("admin:")
                and hx_done[(route_name, who)] < hx_per_route
            ):
                hx_done[(route_name, who)] += 1
                await asyncio.gather(
                    *(
                        one(route_name, "htmx", who, u, h, follow=False)
                        for u, h in htmx_follow_ups(r, headers)
                    )
                )

        await asyncio.gather(
            *(one(route.name, route.kind, who, url, headers) for route, who, url, headers in todo)
        )


async def walk_both(server, rollups, todo, ws, history, people, results):
    """Both servers at once: the pages that may read the rollups (ROLLUP_PAGES) on each, every
    other fetch on one of the two (they serve the same), the sockets and what is not a Django
    route on the first."""
    on_both = [x for x in todo if x[0].name in ROLLUP_PAGES]
    shared = [x for x in todo if x[0].name not in ROLLUP_PAGES]
    rollup_results = []
    await asyncio.gather(
        walk(server, on_both + shared[0::2], results),
        walk(rollups, on_both + shared[1::2], rollup_results),
        walk_sockets(server, ws, history, people, results),
        walk_outside_django(server, people, results),
    )
    for r in rollup_results:
        if r.route in ROLLUP_PAGES:
            r.route = f"{r.route} [rollups]"
    results += rollup_results


async def walk_sockets(server, routes, history, people, results, concurrency=8):
    sem = asyncio.Semaphore(concurrency)
    filler = fill_param(history)

    async def one(route, person, path):
        seconds = 1.0 if not route.params else 10.0  # the live list never ends
        async with sem:
            results.append(
                await ws_frames(
                    server, route.name, person.name, path, {"Cookie": person.cookie}, seconds
                )  # fmt: skip
            )

    jobs = []
    for route in routes:
        paths = fill(route, filler)
        jobs += [one(route, p, path) for p in people.values() for path in paths]
    await asyncio.gather(*jobs)


async def walk_outside_django(server, people, results):
    """The proxy's routes and /metrics with its token: not Django URL patterns."""
    owner, staff = people["walk-owner"], people["walk-staff"]
    async with client(server) as c:
        gets = [
            ("/v1/models", owner.name, {"Authorization": f"Bearer {owner.token}"}),
            ("/v1/models", f"{owner.name} (passthrough)",
             {"Authorization": f"Bearer {PASS_KEYS[owner.name]}",
              "X-Streamscope-Token": owner.token, "X-Walk-Echo": owner.name}),
            ("/v1/models", f"{staff.name} (passthrough)",
             {"Authorization": f"Bearer {PASS_KEYS[staff.name]}",
              "X-Streamscope-Token": staff.token, "X-Walk-Echo": staff.name}),
            ("/v1/responses", owner.name, {"Authorization": f"Bearer {owner.token}"}),
            ("/v1/nothing", owner.name, {"Authorization": f"Bearer {owner.token}"}),
            ("/metrics", "metrics token", {"Authorization": f"Bearer {METRICS_TOKEN}"}),
        ]  # fmt: skip
        for path, who, headers in gets:
            kind = "proxy" if path.startswith("/v1") else "http"
            route = f"proxy:{path}" if kind == "proxy" else "metrics (token)"
            results.append(await request(c, route, kind, who, "GET", path, headers))


# ---- the prefix walk: what the derived indexes answer about a secret ---------------------------
#
# The issue's attack: an upstream echoed the key into an error, every page showed `[redacted]`,
# and `?q=incorrect 406b*` found the stream when the guess was right and not when it was wrong,
# a character at a time. Each index built from stored text is asked a right and a wrong guess
# of each planted secret the same way; whatever a guess's answer shows of the index (the rows
# found, their count and order, their snippets, the status) must be the same for both.

WALKED_SECRETS = {
    "key": KEY,
    **{f"pass_{user.removeprefix('walk-')}": key for user, key in PASS_KEYS.items()},
}
CONTEXT = "incorrect"  # beside the key in the upstream's 401 ("Incorrect API key provided: …")


def _other(c):
    """A character of the same kind that is not `c` (a wrong guess)."""
    if c.isdigit():
        return str((int(c) + 1) % 10)
    if c.isalpha():
        return "b" if c.lower() == "a" else "a"
    return "x"


def word_guesses(secret):
    """[(right, wrong)] searches of a walk over `secret`'s random word (its longest word):
    prefixes of a few lengths, alone and beside a word of the error that echoed it, and the
    whole word."""
    word = max(re.findall(r"[^\W_]+", secret), key=len).lower()
    pairs = []
    for n in (2, 4, 6, len(word) - 1):
        right, wrong = word[:n], word[: n - 1] + _other(word[n - 1])
        pairs += [(f"{right}*", f"{wrong}*"), (f"{CONTEXT} {right}*", f"{CONTEXT} {wrong}*")]
    return [*pairs, (word, word[:-1] + _other(word[-1]))]


def text_guesses(secret):
    """[(right, wrong)] beginnings of `secret` as a text (for a filter that compares texts),
    past its public prefix."""
    return [
        (secret[:n], secret[: n - 1] + _other(secret[n - 1]))
        for n in (len(secret) // 2, len(secret) - 4, len(secret) - 1)
    ]


_ROW = re.compile(r'id="stream-row-(\d+)"')
_SNIPPET = re.compile(r'<p class="snippet[^"]*">(.*?)</p>', re.S)
_ADMIN_ROW = re.compile(r'name="_selected_action" value="(\d+)"')


def observed(kind, status, body):
    """What an answer shows of the index it asked: its status, the rows in order, their
    snippets (the page's, the API's), the next page. The query the page echoes back is left
    out (docs/security.md, "Left open")."""
    if kind == "api":
        try:
            data = json.loads(body)
        except ValueError:
            return (status, body)
        streams = data.get("streams") or []
        ids = [s["id"] for s in streams]
        return (status, ids, [s.get("snippet") for s in streams], data.get("next_page"))
    if kind == "admin":
        return (status, _ADMIN_ROW.findall(body))
    return (status, _ROW.findall(body), _SNIPPET.findall(body))


def index_walks():
    """{index: (kind, [(secret label, right url, wrong url)])}: every index over stored text
    a person can ask, and a walk over each planted secret through it."""
    walks = {"search page": ("page", []), "search API": ("api", [])}
    walks |= {"resolved model filter": ("page", []), "admin lookups": ("admin", [])}
    for label, secret in WALKED_SECRETS.items():
        for right, wrong in word_guesses(secret):
            for index, path in (("search page", "/"), ("search API", "/api/streams/")):
                urls = [f"{path}?{urlencode({'q': q})}" for q in (right, wrong)]
                walks[index][1].append((label, *urls))
        for right, wrong in text_guesses(secret):
            urls = [f"/?{urlencode({'resolved': f'm-{g}'})}" for g in (right, wrong)]
            walks["resolved model filter"][1].append((label, *urls))
            for lookup in ("error_message__startswith", "output_text__gt"):
                admin = "/admin/streams/stream/?"
                urls = [
                    admin + urlencode({lookup: f"Incorrect API key provided: {g}"})
                    for g in (right, wrong)
                ]
                walks["admin lookups"][1].append((label, *urls))
    return walks


# Searches whose answers show that the walk asked a live index of the hostile history.
SANITY = {"search page": "/?q=incorrect", "search API": "/api/streams/?q=redacted"}


async def prefix_walk(server, people, results, concurrency=8):
    """{url: observation} of every walk of `index_walks` (and SANITY), as staff in every project
    at once (who sees every stream), over HTTP; the answers join `results` (searched for leaks
    too)."""
    staff = people["walk-staff"]
    walks = index_walks()
    kinds = {url: kind for kind, guesses in walks.values() for _, *urls in guesses for url in urls}
    kinds |= {url: walks[index][0] for index, url in SANITY.items()}
    sem = asyncio.Semaphore(concurrency)
    async with client(server) as c:

        async def one(url, kind):
            # (the API too with staff's session: a token works in one project, the session
            # in every project at once)
            headers, who = {"Cookie": staff.cookie}, staff.name
            route = {"api": "api_streams", "admin": "admin:streams_stream_changelist"}
            async with sem:
                r = await request(c, route.get(kind, "stream_list"), "prefix", who, "GET", url,
                                  headers)  # fmt: skip
            results.append(r)
            return url, observed(kind, r.status, r.body)

        return dict(await asyncio.gather(*(one(url, kind) for url, kind in kinds.items())))


def prefix_differences(observations):
    """[(index, secret, right url, wrong url, what each showed)] where a right guess was told
    from a wrong one."""
    return prefix_differences_of(observations, index_walks())


def prefix_differences_of(observations, indexes):
    out = []
    for index, (_, guesses) in index_walks().items():
        if index not in indexes:
            continue
        for label, right, wrong in guesses:
            if observations[right] != observations[wrong]:
                out.append((index, label, right, wrong, observations[right], observations[wrong]))
    return out


# ---- the module's one history and walk ---------------------------------------------------------


def _tracebacks(log):
    """Each traceback of a server log, with the line that logged it."""
    out, lines = [], log.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last)"):
            continue
        j = i + 1
        while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
            j += 1
        out.append("\n".join(lines[max(0, i - 1) : j + 1]))
    return out


def _server_log(server):
    with open(server.log.name, errors="replace") as f:
        return f.read()


@dataclasses.dataclass
class Walk:
    results: list
    unfilled: list
    unresolved: list
    routes: list
    history: History
    ids: dict
    long_ids: list
    upstream_auth: list
    logs: dict
    db: dict
    timings: dict
    prefix: dict = dataclasses.field(default_factory=dict)  # `prefix_walk`'s observations


def _db_facts(long_ids):
    """What the database holds (checked by the tests after the servers are gone)."""
    from streams.models import Capture, Event
    from streams.models import Stream as Row

    facts = {"streams": {}, "long": []}
    for row in Row.objects.all():
        data = "".join(Event.objects.filter(stream_id=row.pk).values_list("data", flat=True))
        facts["streams"][row.pk] = {
            "source": row.source,
            "status": row.status,
            "user": row.user.username if row.user else "",
            "fields": " ".join(
                str(getattr(row, f))
                for f in (
                    "resolved_model",
                    "output_text",
                    "error_message",
                    "upstream_id",
                    "routing_category",
                    "routing_reasoning",
                )
            ),
            "events": data,
        }
    facts["captures"] = b"".join(Capture.objects.values_list("content", flat=True)).decode(
        "utf-8", "replace"
    )
    for sid in long_ids:
        row = Row.objects.filter(pk=sid).first() if sid else None
        if row is None:
            facts["long"].append(None)
            continue
        events = list(Event.objects.filter(stream_id=sid).order_by("index"))
        data = "\n".join(e.data for e in events)
        facts["long"].append(
            {
                "id": sid,
                "status": row.status,
                "error": f"{row.error_code}: {row.error_message[:500]}",
                "resolved_model": row.resolved_model,
                "requested_model": row.requested_model,
                "event_count": row.event_count,
                "events": len(events),
                # the 10 kB model id and the 1 kB types as they came, in the verbatim data
                "data_verbatim": long_model(KEY) in data
                and "response." + "t" * NAME_FILL + KEY in data,
                "event_names": sorted({e.event_name for e in events}),
                "sse_ids": sorted({e.sse_id for e in events}),
                "types": sorted({e.type for e in events}),
            }
        )
    return facts


@pytest.fixture(scope="module")
def walked(django_db_setup, django_db_blocker, _relay_db_connections):
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    started = time.monotonic()
    timings = {}
    upstream = HostileUpstream()
    host = urlsplit(upstream.base_url).netloc
    base_url = f"http://{URL_USER}:{URL_PASSWORD}@{host}/v1"
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.support.walk_settings",
        "UPSTREAM_API_KEY": KEY,
        "STREAMSCOPE_METRICS_TOKEN": METRICS_TOKEN,
        "STREAMSCOPE_MAX_CONCURRENT_PER_USER": "100",
        # (the walk searches more than a person would: the throttle has tests of its own)
        "STREAMSCOPE_SEARCH_MAX_PER_MINUTE": "100000",
        "STREAMSCOPE_STORAGE_RETRY_S": "2",
        **provider_urls.ENV,
    }
    servers, walk = [], None
    try:
        with django_db_blocker.unblock():
            people = _people()
            Group.objects.create(name=f"{XSS[0]} {XSS[1]}")
            _axes_rows()
            server = DaphneServer(base_url, env=env)
            servers.append(server)
            # the analytics pages of a history this small read the raw rows; this server's
            # pages read the rollups (tests/support/apps.py)
            rollups = DaphneServer(base_url, env={**env, "WALK_FORCE_ROLLUPS": "1"})
            servers.append(rollups)
            timings["servers"] = time.monotonic() - started

            results = []
            ids = asyncio.run(record(server, people, results))
            wait_finished()
            long_ids = asyncio.run(record_long(server, people, results))
            wait_finished()
            into_the_rollups()
            timings["history"] = time.monotonic() - started

            history = load_history(people)
            # the servers' routes: the identity provider's included
            with override_settings(ROOT_URLCONF="tests.support.provider_urls"):
                routes = django_routes()
                todo, unfilled, unresolved = plan(routes, history, people)
            t = time.monotonic()
            ws = websocket_routes()
            asyncio.run(walk_both(server, rollups, todo, ws, history, people, results))
            timings["walk"] = time.monotonic() - t
            routes += ws
            t = time.monotonic()
            prefix = asyncio.run(prefix_walk(server, people, results))
            timings["prefix walk"] = time.monotonic() - t

            logs = {"main": _server_log(server), "rollups": _server_log(rollups)}
            db = _db_facts(long_ids)
        auth = [h.get("authorization", "") for _, _, h, _ in upstream.requests]
        walk = Walk(
            results, unfilled, unresolved, routes, history, dict(ids), long_ids, auth, logs,
            db, timings, prefix,
        )  # fmt: skip
    except BaseException:
        for server in servers:  # (its log is gone once it stops)
            print(f"--- {server.url} log ---\n{_server_log(server)[-20000:]}", file=sys.stderr)
        raise
    finally:
        for server in servers:
            server.stop()
        upstream.stop()
        if walk is None:  # (a history half recorded is not left to the next module)
            with django_db_blocker.unblock():
                call_command("flush", verbosity=0, interactive=False)
    yield walk
    with django_db_blocker.unblock():
        call_command("flush", verbosity=0, interactive=False)


ROLLUP_PAGES = {
    "latency", "routing", "usage", "usage_export", "admin_analytics", "stream_list", "playground",
    "metrics",
}  # fmt: skip


def into_the_rollups(hours=3):
    """Move the history `hours` back and rebuild the pre-aggregates: the analytics pages read
    whole past hours from the rollup tables (the current partial hour from the raw rows), so
    the hostile model names and routing fields are in what they read."""
    from django.db import transaction
    from django.db.models import F

    from streams.models import Stream as Row
    from streams.store import aggregates

    shift = dt.timedelta(hours=hours)
    with transaction.atomic():
        Row.objects.update(
            created_at=F("created_at") - shift,
            started_at=F("started_at") - shift,
            finished_at=F("finished_at") - shift,
        )
        assert aggregates.rebuild() == Row.objects.count()


def _axes_rows():
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog

    common = {
        "user_agent": XSS[1],
        "ip_address": "127.0.0.1",
        "username": XSS[0],
        "http_accept": XSS[1],
        "path_info": f"/login/{XSS[0]}",
    }
    AccessAttempt.objects.create(
        **common, get_data=XSS[0], post_data=XSS[1], failures_since_start=1
    )
    AccessLog.objects.create(**common)
    AccessFailureLog.objects.create(**common)


# ---- the tests ---------------------------------------------------------------------------------


def _finder():
    return SecretFinder(SECRETS)


def leaks_of(results):
    finder = _finder()
    found = {}  # text -> its fragments (many answers are the same text: searched once)
    out = []
    for r in results:
        for where, text in (("head", r.head), ("body", r.body)):
            if text not in found:
                found[text] = finder.find(text)
            for label, fragment, context, how in found[text]:
                out.append((r, f"{where}, {how}", label, fragment, context))
    return out


def test_the_search_finds_every_fragment_in_every_form():
    finder = _finder()

    def found(text):
        return {(label, fragment) for label, fragment, _, _ in finder.find(text)}

    assert found(f"<{KEY[:9]}> and <{KEY[9:]}>") == {("key", KEY[:9]), ("key", KEY[9:])}
    assert found(f"{KEY[:7]} {KEY[-7:]}") == set()  # 7 characters are not a fragment
    for name, spelling in _forms(KEY).items():  # (the whole key, besides any unescaped part)
        for text in (
            json.dumps({"d": json.dumps({"x": spelling})}),
            html.escape(f"<p>{spelling}</p>"),
        ):
            got = found(text)
            if name.startswith(COPIES):  # (a copy's fragment is as long as the whole key's copy)
                assert {label for label, _ in got} == {"key"}, (name, got)
                assert max(len(fragment) for _, fragment in got) >= len(KEY), (name, got)
            else:
                assert ("key", KEY) in got, (name, got)
    assert ("url_password", URL_PASSWORD) in found(quote(f"x={URL_PASSWORD}", safe=""))
    # what the gate leaves on purpose (docs/security.md) is not a leak: a piece of a base64
    # copy shorter than 16 characters, hex digits that spell fewer than 8 whole bytes
    b64, digits = base64.b64encode(KEY.encode()).decode(), KEY.encode().hex()
    assert found(f"{b64[:15]} {digits[:15]} {digits[1:17]}") == set()
    assert found(f"{b64[:16]} {digits[2:18]}") == {("key", b64[:16]), ("key", digits[2:18])}


def test_the_walk_finds_a_planted_copy_in_every_form():
    """The walk's own search (`leaks_of`) fails on each form of `_forms` left in an answer."""
    for name, spelling in _forms(KEY).items():
        planted = Fetched("planted", "http", "nobody", "GET", "/", 200, "HTTP/1.1 200 OK\n", "")
        planted.body = json.dumps({"output_text": f"see {spelling}."})
        assert {label for _, _, label, _, _ in leaks_of([planted])} == {"key"}, name
        planted.body = "see [redacted]."
        assert leaks_of([planted]) == []


def test_a_route_the_table_cannot_fill_is_named():
    """A route added later with a parameter FILL does not know, or an admin model missing from
    ADMIN_OBJECTS, is reported by its name (test_every_route_is_filled then fails)."""
    from django.contrib import admin
    from django.urls import URLResolver, path
    from django.urls.resolvers import RegexPattern

    from dashboard.models import Conversation

    site = admin.AdminSite(name="walk_probe")
    site.register(Conversation)
    resolver = URLResolver(
        RegexPattern(r"^/"),
        [
            path("probe/<int:nope>/", lambda request, nope: None, name="probe"),
            path("probe-admin/", site.urls),
        ],
    )
    history = History([1], {}, [], [], {}, ["dashboard"], [], {}, [], {})
    _, unfilled, _ = plan(django_routes(resolver), history, {})
    names = " ".join(unfilled)
    assert "probe (probe/<int:nope>/)" in names and "'nope'" in names
    assert "walk_probe:dashboard_conversation_change" in names


def test_the_history_was_recorded_through_every_source(walked):
    db = walked.db["streams"]
    sources = Counter(s["source"] for s in db.values())
    assert sources["live"] >= 7 and sources["proxy"] >= 11 and sources["import"] == 2, sources
    assert walked.ids["playground"] and walked.ids["import"]
    owners = Counter(s["user"] for s in db.values())
    assert owners["walk-owner"] and owners["walk-staff"], owners
    # what the upstream was sent: the URL's credentials as Basic (httpx puts a URL's userinfo
    # in place of the Bearer key), or the key itself
    assert walked.upstream_auth, "the upstream was never asked"
    assert all(a.startswith(("Basic ", "Bearer ")) for a in walked.upstream_auth)


def test_the_database_keeps_everything_verbatim(walked):
    db = walked.db["streams"]
    stored = "".join(s["fields"] + s["events"] for s in db.values())
    for label in ("key", "pass_owner", "pass_staff"):
        assert SECRETS[label] in stored, label
    echo = [s for s in db.values() if s["source"] == "live" and KEY_MODEL in s["fields"]]
    assert echo and all(KEY in s["events"] for s in echo)
    assert KEY in walked.db["captures"]


def test_long_strings_are_recorded_completely(walked):
    """10 kB model ids, 1 kB SSE event names, ids and types: the streams complete and every
    event is stored with its data verbatim (on PostgreSQL too, whose varchar columns refuse
    what does not fit); a column that keeps less keeps the start of what came."""
    expected = len(long_stream(KEY, [], "m"))
    rows = dict(zip(("api", "proxy"), walked.db["long"], strict=True))
    brief = {
        which: row and {k: v for k, v in row.items() if k in ("id", "status", "error", "events")}
        for which, row in rows.items()
    }
    problems = {
        which: brief[which]
        for which, row in rows.items()
        if row is None
        or row["status"] != "completed"
        or row["events"] != expected
        or row["event_count"] != expected
        or not row["data_verbatim"]
    }
    assert not problems, f"expected {expected} events each: {problems}"
    name, sse_id = "ev-" + "n" * NAME_FILL + KEY, "id-" + "i" * NAME_FILL + KEY
    for row in rows.values():
        assert long_model(KEY).startswith(row["resolved_model"])
        assert all(name.startswith(n) for n in row["event_names"]), row["event_names"]
        assert all(sse_id.startswith(i) for i in row["sse_ids"]), row["sse_ids"]
    assert LONG_REQUESTED.startswith(rows["proxy"]["requested_model"])


def test_every_route_is_filled_and_walked(walked):
    assert walked.unfilled == [], "\n".join(walked.unfilled)
    assert walked.unresolved == [], "\n".join(walked.unresolved)
    fetched = Counter(r.route.removesuffix(" [rollups]") for r in walked.results)
    missing = [str(route) for route in walked.routes if not fetched[route.name]]
    assert missing == [], missing
    assert {"oidc_authentication_init", "oidc_authentication_callback", "oidc_logout"} <= {
        route.name for route in walked.routes
    }
    assert len(walked.routes) >= 90
    assert len(walked.results) >= 1000
    answered = [r for r in walked.results if r.status is not None]
    assert len(answered) == len(walked.results), [
        (r.label, r.note) for r in walked.results if r.status is None
    ][:20]
    # the hostile content is there, in redacted form: not a walk of empty pages
    echo_ids = [
        sid
        for sid, s in walked.db["streams"].items()
        if s["source"] == "live" and KEY_MODEL in s["fields"] and s["user"] == "walk-owner"
    ]
    page = next(
        r
        for r in walked.results
        if r.route == "stream_detail" and r.url == f"/streams/{echo_ids[0]}/" and r.status == 200
    )
    assert "[redacted]" in page.body
    assert html.escape(XSS[0]) in page.body or "&lt;script&gt;" in page.body
    # the analytics pages show the hostile model names: from the raw rows on the main
    # server, from the rollup tables on the other
    for route in ("latency", "routing", "latency [rollups]", "routing [rollups]"):
        pages = [r for r in walked.results if r.route == route and r.status == 200]
        assert any("&lt;script&gt;" in r.body for r in pages), route
        aggregated = [r for r in pages if "From the hourly and daily pre-aggregates" in r.body]
        assert bool(aggregated) == route.endswith("[rollups]"), route
    frames = [r for r in walked.results if r.kind == "websocket" and r.body]
    assert len(frames) >= len(walked.history.stream_ids)


def test_no_5xx_anywhere(walked):
    errors = [r for r in walked.results if r.status is not None and r.status >= 500]
    by_route = Counter(r.route for r in errors)
    tracebacks = [t for log in walked.logs.values() for t in _tracebacks(log)]
    unique = list(dict.fromkeys(tracebacks))
    assert not errors, (
        f"{len(errors)} answers ≥ 500: {dict(by_route)}\n"
        + "\n".join(f"{r.status} {r.label}" for r in errors[:30])
        + "\n\n--- server tracebacks ---\n"
        + "\n\n".join(t[-3000:] for t in unique[:10])
    )


def leak_report(leaks, answers, examples=2):
    """The leaks as a table (answers per route and secret) and a few examples of each."""
    per = defaultdict(set)
    for r, _, label, _, _ in leaks:
        per[(r.route, label)].add((r.url, r.who))
    secrets = sorted({label for _, label in per})
    routes = sorted(
        {route for route, _ in per}, key=lambda x: -sum(len(per[(x, s)]) for s in secrets)
    )
    width = max([len(r) for r in routes] + [5])
    lines = [
        f"{len(leaks)} fragments in {len({(r.url, r.who, r.kind) for r, *_ in leaks})} of "
        f"{answers} answers; answers with a leak, per route and secret:",
        f"{'route':<{width}} " + " ".join(f"{label:>15}" for label in secrets),
    ]
    for route in routes:
        lines.append(
            f"{route:<{width}} " + " ".join(f"{len(per[(route, s)]):>15}" for s in secrets)
        )
    how = Counter((label, where.split(", ", 1)[1]) for _, where, label, _, _ in leaks)
    lines.append(
        "fragments by secret and the decoding that shows them: "
        + ", ".join(f"{label} {way}: {n}" for (label, way), n in sorted(how.items()))
    )
    shown = Counter()
    for r, where, label, fragment, context in leaks:
        if shown[(r.route, label)] < examples:
            shown[(r.route, label)] += 1
            lines.append(f"  {r.label} [{where}] {label} {fragment!r} in …{context!r}…")
    return "\n".join(lines)


def _dump(walked, leaks):
    """With WALK_REPORT=<path>, the whole walk's leaks and errors as JSON, for a closer look."""
    path = os.environ.get("WALK_REPORT")
    if not path:
        return
    with open(path, "w") as f:
        json.dump(
            {
                "timings": walked.timings,
                "leaks": [
                    [r.kind, r.route, r.who, r.method, r.url, where, label, fragment, context]
                    for r, where, label, fragment, context in leaks
                ],
                "errors": [
                    [r.route, r.who, r.url, r.status, r.note]
                    for r in walked.results
                    if r.status is None or r.status >= 500
                ],
                "statuses": Counter(f"{r.route} {r.status}" for r in walked.results),
                "seconds": {
                    route: round(sum(r.elapsed for r in walked.results if r.route == route), 2)
                    for route in {r.route for r in walked.results}
                },
                "long": walked.db["long"],
                "streams": {
                    sid: [row["source"], row["status"], row["user"]]
                    for sid, row in walked.db["streams"].items()
                },
                "upstream_auth": walked.upstream_auth,
                "tracebacks": [t for log in walked.logs.values() for t in _tracebacks(log)],
            },
            f,
            indent=1,
        )


def test_no_fragment_of_a_secret_leaves(walked):
    leaks = leaks_of(walked.results)
    _dump(walked, leaks)
    assert not leaks, leak_report(leaks, len(walked.results))


def test_a_prefix_walk_tells_a_right_guess_from_a_wrong_one_through_no_index(walked):
    """The issue's walk, over every planted secret (the configured key and the pass-through
    keys), through every index a person can ask: the search page and API (words and prefixes,
    alone and beside the error's words), the list's model filter, the admin's lookups."""
    seen = walked.prefix
    differences = prefix_differences(seen)
    assert not differences, f"{len(differences)} guesses told apart:\n" + "\n".join(
        f"{index} / {label}: {right} -> {repr(a)[:300]}\n  vs {wrong} -> {repr(b)[:300]}"
        for index, label, right, wrong, a, b in differences[:12]
    )
    # not a walk of nothing: the index holds the hostile history (redacted) and answers
    assert seen[SANITY["search page"]][1], seen[SANITY["search page"]]  # (the 401's stream)
    assert len(seen[SANITY["search API"]][1]) >= 5, seen[SANITY["search API"]]
    for index, (_, guesses) in index_walks().items():
        statuses = {seen[url][0] for _, *urls in guesses for url in urls}
        assert statuses == ({400} if index == "admin lookups" else {200}), (index, statuses)


def test_no_fragment_of_a_secret_is_in_the_servers_logs(walked):
    """The servers' stdout and stderr: Daphne's access log (every URL walked, the prefix
    walk's guesses among them) and every logger's lines."""
    finder = _finder()
    leaks = [
        (name, label, fragment, context)
        for name, log in walked.logs.items()
        for label, fragment, context, _ in finder.find(log)
    ]
    assert not leaks, "\n".join(f"{n}: {lb} {f!r} in …{c!r}…" for n, lb, f, c in leaks[:20])
    assert "GET /?q=" in walked.logs["main"]  # (the access log was there to be searched)


def test_the_prefix_walks_check_fails_on_an_index_built_without_redaction(settings, monkeypatch):
    """The check above can fail: a history holding the planted secrets as the hostile upstream
    echoes them, searched in-process the same way; with the index's one redaction
    (`search.redacted`) made the identity, the walk tells right guesses from wrong ones."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from streams.models import ApiToken
    from streams.models import Stream as Row
    from streams.store import known_secrets, rows, search

    settings.UPSTREAM_API_KEY = KEY
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "SEARCH_MAX_PER_MINUTE": 100_000}
    staff = get_user_model().objects.create_user("plant-staff", is_staff=True)
    client = Client()
    client.force_login(staff)
    token = ApiToken.issue(staff)
    searched = {"search page", "search API"}
    try:
        for key in PASS_KEYS.values():
            known_secrets.remember(key)
        for secret in WALKED_SECRETS.values():
            row = rows.create(rows.build_request_body("hi"), user=staff)
            rec = type("Rec", (), {"stream_id": row.pk})()
            rows.update_streams(
                {rec: {"output_text": f"raw {secret}", "error_message": f"Incorrect API key "
                       f"provided: {secret}", "resolved_model": f"m-{secret}"}}
            )  # fmt: skip

        def walk():
            seen = {}
            for index, (kind, guesses) in index_walks().items():
                for _, *urls in guesses if index in searched else ():
                    for url in urls:
                        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if kind == "api" else {}
                        r = client.get(url, **headers)
                        seen[url] = observed(kind, r.status_code, r.content.decode())
            return prefix_differences_of(seen, searched)

        assert walk() == []  # the index as built: redacted
        monkeypatch.setattr(search, "redacted", lambda text: text)
        search.rederive(Row)  # the index built again, without redaction
        found = walk()
        assert {(index, label) for index, label, *_ in found} == {
            (index, label) for index in searched for label in WALKED_SECRETS
        }
    finally:
        known_secrets.forget_all()
