"""Bad input gets a clear 4xx and nothing is stored half-way: API bodies (depth, size, NaN,
wrong types, the simulator's caps), uploads (HAR fields, depth, numbers, event counts) and
upstream events nested too deep (stored verbatim as `invalid_json`; the stream still ends)."""

import json

import pytest
from asgiref.sync import sync_to_async
from django import forms
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import get_resolver

from dashboard import saved_views
from dashboard import timezone as tzmod
from dashboard.forms.ranges import InstantField
from streams.core import checks
from streams.core.capture import parse_sse_bytes
from streams.core.checks import Checker, parse_json
from streams.core.safejson import too_deep
from streams.ingest.importer import MAX_EVENTS_PER_UPLOAD, CaptureError, read_capture
from streams.models import Event, Finding, Stream
from streams.run import runner
from streams.simulator.scenarios import METADATA_CAPS, RequestError, SimRequest
from streams.store import rows
from tests.conftest import log_in_people
from tests.support.captures import har, har_entry, small_stream, sse
from tests.support.clients import bearer
from tests.support.hostile import RawUpstream
from tests.support.recording import wait_finished

DEEP = 100_000


def nested(n, inner="1"):
    return "[" * n + inner + "]" * n


# ---- API ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
class TestApi:
    async def post_raw(self, people, raw):
        client = bearer(people.owner)
        return await client.post("/api/streams/", raw, content_type="application/json")

    @pytest.mark.parametrize(
        "raw,says",
        [
            ('{"input": ' + nested(DEEP) + "}", "nested deeper than 64"),
            ('{"input": "hi", "metadata": {"a": ' + nested(DEEP) + "}}", "nested deeper than 64"),
            ('{"input": "hi", "metadata": {"time_scale": NaN}}', "NaN"),
            ('{"input": "hi", "metadata": {"time_scale": Infinity}}', "Infinity"),
            ('{"input": "hi", "metadata": {"time_scale": -Infinity}}', "-Infinity"),
            ('{"input": "hi", "temperature": 1e400}', "out of range"),
            ('{"input": "x\\ud800"}', "lone surrogate (\\ud800)"),
            ('{"input": "hi", "metadata": {"\\udc00": "v"}}', "lone surrogate (\\udc00)"),
        ],
    )
    async def test_bodies_json_cannot_hold_are_400(self, people, raw, says):
        r = await self.post_raw(people, raw)
        assert r.status_code == 400, r.content
        error = r.json()["error"]
        assert error["code"] == "invalid_json" and says in error["message"]
        assert await Stream.objects.acount() == 0

    @pytest.mark.parametrize(
        "data,says",
        [
            ({"input": "hi", "instructions": ["a"]}, "instructions: A string, not list."),
            ({"input": "hi", "model": 5}, "model: A string, not int."),
            (
                {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
                "input[0].content[0].text is not a string",
            ),
            ({"input": [{"role": "user", "content": 5}]}, "input[0].content is a string or"),
            ({"input": "hi", "metadata": {"n": 2**64}}, "values finite numbers"),
        ],
    )
    async def test_wrong_types_are_400_naming_the_field(self, people, data, says):
        r = await self.post_raw(people, json.dumps(data))
        assert r.status_code == 400, r.content
        assert says in r.json()["error"]["message"]
        assert await Stream.objects.acount() == 0

    @pytest.mark.parametrize(
        "name,value",
        [("events", 10**9), ("huge_bytes", 10**8), ("sentences", 10**7), ("stall_s", 1e6)]
        + [("header_delay_s", "9999"), ("batch", 10**6), ("time_scale", 1e5)],
    )
    async def test_simulator_parameters_over_their_cap_are_400(self, people, name, value):
        r = await self.post_raw(people, json.dumps({"input": "hi", "metadata": {name: value}}))
        assert r.status_code == 400, r.content
        message = r.json()["error"]["message"]
        assert f"metadata.{name}" in message and f"at most {METADATA_CAPS[name]:g}" in message
        assert await Stream.objects.acount() == 0

    async def test_a_speed_below_the_slowest_is_400(self, people):
        r = await self.post_raw(people, json.dumps({"input": "hi", "metadata": {"speed": 1e-9}}))
        assert r.status_code == 400 and "metadata.speed" in r.json()["error"]["message"]

    async def test_a_body_over_the_limit_is_413(self, people, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "MAX_INPUT_CHARS": 100}
        r = await self.post_raw(people, json.dumps({"input": "x" * 2_000_000}))
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

    async def test_values_at_the_caps_still_start_a_stream(self, people, upstream):
        metadata = {"time_scale": 0, "sentences": METADATA_CAPS["sentences"], "stall_s": 600}
        r = await self.post_raw(people, json.dumps({"input": "hi", "metadata": metadata}))
        assert r.status_code == 201, r.content
        assert (await wait_finished(r.json()["id"], timeout=60)).status == "completed"


class TestSimulatorCaps:
    def test_the_simulator_refuses_over_cap_and_non_finite_values(self):
        body = {"model": "auto", "input": "hi"}
        for metadata in ({"huge_bytes": 1e8}, {"events": "1e9"}, {"stall_s": float("nan")}):
            with pytest.raises(RequestError) as caught:
                SimRequest.from_body({**body, "metadata": metadata})
            assert caught.value.status == 400 and caught.value.code == "invalid_metadata"
        ok = SimRequest.from_body({**body, "metadata": {"huge_bytes": 1000, "speed": 2}})
        assert ok.meta_int("huge_bytes", 0) == 1000 and ok.time_scale == 0.5
        inf = SimRequest.from_body({**body, "max_output_tokens": float("inf")})
        assert inf.max_output_tokens is None


# ---- uploads ------------------------------------------------------------------------------------


def _har_with(change):
    entry = har_entry(sse(*small_stream("Hoi")))
    change(entry)
    return har(entry)


HAR_BAD = {
    "request is a string": (lambda e: e.update(request="POST /v1"), "request is a str"),
    "content is a string": (
        lambda e: e["response"].update(content="data: x"),
        "response.content is a str",
    ),
    "timings is a list": (lambda e: e.update(timings=[1, 2]), "timings is a list"),
    "numeric postData.text": (
        lambda e: e["request"]["postData"].update(text=5),
        "postData.text is 5, not a string",
    ),
    "timings of 1e308": (lambda e: e["timings"].update(wait=1e308), "timings.wait is 1e+308 ms"),
    "time of 1e300": (lambda e: e.update(time=1e300), "time is 1e+300 ms"),
}


@pytest.mark.django_db
class TestUpload:
    url = "/streams/upload/"

    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)

    def post(self, content, name):
        # an upload is an import job (streams/ingest/import_jobs.py): its page says how the file
        # went
        upload = SimpleUploadedFile(name, content, content_type="application/octet-stream")
        return self.owner_client.post(self.url, {"file": upload}, follow=True)

    @staticmethod
    def failed(r):
        return r.status_code == 200 and b"<td>Failed" in r.content

    @pytest.mark.parametrize("case", sorted(HAR_BAD))
    def test_a_har_with_a_field_of_the_wrong_kind_is_400_saying_which(self, case):
        change, says = HAR_BAD[case]
        r = self.post(_har_with(change), "session.har")
        assert self.failed(r)
        assert says in r.content.decode()
        assert Stream.objects.count() == 0

    def test_a_har_nested_too_deep_is_400(self):
        content = b'{"log": {"entries": [], "x": ' + nested(DEEP).encode() + b"}}"
        r = self.post(content, "deep.har")
        assert self.failed(r) and b"nested deeper than 256" in r.content

    def test_a_har_with_nan_is_400(self):
        content = _har_with(lambda e: None).replace(b'"time": 812.5', b'"time": NaN')
        r = self.post(content, "nan.har")
        assert self.failed(r) and b"NaN is not a number JSON allows" in r.content

    def test_sse_data_nested_too_deep_is_stored_verbatim_as_invalid_json(self):
        deep = nested(DEEP)
        content = sse(*small_stream("Hoi"))
        content = content.replace(b"\n\n", b"\n\ndata: " + deep.encode() + b"\n\n", 1)
        r = self.post(content, "deep.sse")
        assert r.redirect_chain[-1][0].startswith("/streams/")
        stream = Stream.objects.get()
        event = Event.objects.get(stream=stream, index=1)
        assert event.data == deep and not event.is_json
        finding = Finding.objects.get(stream=stream, code="invalid_json")
        assert finding.event_index == 1 and "nested deeper than 128" in finding.detail

    def test_millions_of_empty_events_are_refused_before_they_are_built(self):
        content = b"data: {}\n\n" * 1_900_000  # 19 MB
        r = self.post(content, "flood.sse")
        assert self.failed(r)
        shown = f"{MAX_EVENTS_PER_UPLOAD:,}".replace(",", "\u202f")  # (the page groups figures so)
        assert f"more than {shown} events".encode() in r.content
        assert Stream.objects.count() == 0

    def test_the_event_cap_counts_every_response_of_a_har(self, monkeypatch):
        monkeypatch.setattr("streams.ingest.importer.MAX_EVENTS_PER_UPLOAD", 10)
        one = sse(*small_stream("Hoi"))  # 6 events
        assert len(read_capture(har(har_entry(one)), "a.har")) == 1
        with pytest.raises(CaptureError, match="more than 10 events"):
            read_capture(har(har_entry(one), har_entry(one)), "b.har")

    def test_the_findings_cap_refuses_a_file_of_findings(self, monkeypatch):
        monkeypatch.setattr("streams.ingest.importer.MAX_FINDINGS_PER_UPLOAD", 50)
        with pytest.raises(CaptureError, match="at most 50"):
            read_capture(b"data: {}\n\n" * 60, "f.sse")


# ---- event data ---------------------------------------------------------------------------------


class TestEventDepth:
    @pytest.mark.parametrize(
        "text",
        [
            nested(DEEP),  # orjson refuses it; json would recurse
            nested(1000),  # orjson takes it; the checker's consumers would recurse
            '{"a": 1.5, "b": ' + nested(1000) + "}",  # a float sends it to json
            '{"a": NaN, "b": ' + nested(DEEP) + "}",
        ],
    )
    def test_data_nested_too_deep_is_a_value_error(self, text):
        with pytest.raises(ValueError, match="nested deeper than 128"):
            parse_json(text)

    def test_data_up_to_the_bound_parses_and_brackets_in_strings_do_not_count(self):
        assert parse_json(nested(checks.EVENT_MAX_DEPTH - 1)) == json.loads(
            nested(checks.EVENT_MAX_DEPTH - 1)
        )
        text = json.dumps({"type": "x", "s": "[" * 5000, "n": [[1.5]]})
        assert parse_json(text) == json.loads(text)
        assert too_deep(nested(65), 64) and not too_deep(nested(64), 64)
        assert not too_deep('"' + "[" * 100 + '\\"' + "[" * 100 + '"', 64)

    def test_the_checker_reports_it_and_goes_on(self):
        c = Checker()
        events = parse_sse_bytes(sse(*small_stream("Hoi")))
        c.feed(0, "message", events[0].data)
        result = c.feed(1, "message", nested(DEEP))
        assert [v.code for v in result.violations] == ["invalid_json"]
        for i, ev in enumerate(events[1:], 2):
            c.feed(i, "message", ev.data)


def _deep_upstream(method, path, headers, body):
    events = [
        b'event: message\ndata: {"type":"response.created","sequence_number":0,'
        b'"response":{"id":"resp_deep","model":"m","status":"in_progress"}}\n\n',
        b"event: message\ndata: " + nested(DEEP).encode() + b"\n\n",
        b'event: message\ndata: {"type":"response.completed","sequence_number":1,'
        b'"response":{"id":"resp_deep","model":"m","status":"completed","output":[]}}\n\n',
    ]
    return 200, "text/event-stream", events


@pytest.mark.django_db(transaction=True)
async def test_a_runner_that_meets_an_event_nested_100k_deep_ends_the_stream():
    server = RawUpstream(_deep_upstream)
    try:
        body = rows.build_request_body("hi", "auto")
        stream = await sync_to_async(rows.new_row)(None, body)
        last, _ = await runner.run_stream(stream, base_url=server.base_url)
    finally:
        server.stop()
    stream = await Stream.objects.aget(pk=last.pk)
    assert stream.status == "completed" and stream.event_count == 3
    events = [e async for e in Event.objects.filter(stream=stream).order_by("index")]
    assert events[1].data == nested(DEEP) and not events[1].is_json
    codes = [f.code async for f in Finding.objects.filter(stream=stream)]
    assert "invalid_json" in codes


# ---- analytics ranges ---------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        "range=custom&start=0001-01-01T00:00&compare=previous",
        "range=custom&start=0001-01-01T00:00",
        "range=custom&start=2020-01-01T00:00&end=9999-12-31T23:59",
        "range=custom&start=9999-12-31T23:59",
    ],
)
def test_dates_at_the_calendars_ends_are_a_400_saying_which(admin_client, query):
    for page in ("/latency/", "/routing/", "/analytics/"):
        r = admin_client.get(f"{page}?{query}")
        assert r.status_code == 400, (page, query)
        assert "Choose a date between 1970 and 2999" in r.content.decode()


# Moments at the calendar's ends, in the zones where they overflow once turned into UTC (a
# year 10000 or 0) and in UTC itself.
CALENDAR_ENDS = [
    ("America/New_York", "9999-12-31T23:59"),
    ("Etc/GMT-14", "0001-01-01T00:00"),
    ("Etc/GMT-14", "0001-01-01"),
    ("Etc/GMT+12", "9999-12-31 23:59"),
    ("UTC", "9999-12-31T23:59"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("zone, moment", CALENDAR_ENDS)
def test_list_dates_at_the_calendars_ends_are_a_400_in_any_zone(admin_client, zone, moment):
    admin_client.cookies[tzmod.COOKIE] = zone
    for name in ("since", "until"):
        for path in ("/", "/streams.csv"):
            r = admin_client.get(path, {name: moment})
            assert r.status_code == 400, (path, name)
            assert "Choose a date between 1970 and 2999" in r.content.decode()
    r = admin_client.get("/usage/export.csv", {"range": "custom", "start": moment, "tz": zone})
    assert r.status_code == 400 and "Choose a date between 1970 and 2999" in r.content.decode()


@pytest.mark.django_db
def test_a_saved_view_with_dates_at_the_calendars_ends_opens_as_a_400(admin_client):
    user = admin_client.get("/").wsgi_request.user
    admin_client.cookies[tzmod.COOKIE] = "America/New_York"
    for page, query in (
        ("stream_list", "until=9999-12-31T23:59"),
        ("latency", "range=custom&start=2020-01-01T00:00&end=9999-12-31T23:59"),
        ("usage", "range=custom&start=0001-01-01T00:00"),
    ):
        view = saved_views.save(user, page, f"ends {page}", query, shared=False)
        r = admin_client.get(saved_views.url(view))
        assert r.status_code == 400, page
        assert "Choose a date between 1970 and 2999" in r.content.decode()


def test_every_date_filter_of_every_form_is_bounded():
    """A moment any form reads is an InstantField (dashboard/forms/ranges.py), so it cannot
    reach the database outside the years a datetime holds in every zone."""
    assert get_resolver().url_patterns  # (every view imported: every form defined)
    seen, unbounded, todo = 0, [], [forms.BaseForm]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not cls.__module__.startswith(("dashboard.", "streams.")):
            continue
        for name, field in getattr(cls, "base_fields", {}).items():
            if isinstance(field, forms.DateField | forms.DateTimeField | forms.SplitDateTimeField):
                seen += 1
                if not isinstance(field, InstantField):
                    unbounded.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert seen >= 4 and not unbounded, unbounded


# ---- NUL anywhere a request is read ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path,cookie,where",
    [
        ("/?q=a%00b", None, "query"),
        ("/?tag=%00", None, "query"),
        ("/api/streams/?model=x%00", None, "query"),
        ("/analytics/latency/?a%00=1", None, "query"),
        ("/streams/%00/", None, "path"),
        ("/", '"abcdefgh\\000ijk"', "cookies"),
    ],
)
def test_a_nul_anywhere_is_a_400_before_anything_reads_it(client, path, cookie, where):
    """PostgreSQL refuses NUL in a query parameter: before this, a filter or a session cookie
    holding one was a 500 there (SQLite matched nothing and hid it)."""
    if cookie:
        client.cookies["sessionid"] = "x"
        client.cookies["sessionid"].set("sessionid", cookie, cookie)
    r = client.get(path)
    assert r.status_code == 400, (path, r.status_code)
    assert r.content.decode() == f"NUL characters are not allowed in a request's {where}."
