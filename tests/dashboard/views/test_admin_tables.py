"""The admin's big tables (streams/admin.py) count what they show (CappedCountPaginator): the
real number while it is cheap, an estimate labelled as one beyond, never a made-up number; a
search or a filter counts its own hits. Their searches and filters read indexes, not every row
(timed at a million events: `manage.py bench pages`, docs/performance.md)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from streams import admin as streams_admin
from streams.models import Event, Stream

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root"))
    return client


def _streams(n, **fields):
    Stream.objects.bulk_create([Stream(status="completed", **fields) for _ in range(n)])


def _paginator(html):
    """The paginator's text: the page numbers it offers, then the count."""
    inner = html.split('<p class="paginator">', 1)[1].split("</p>", 1)[0]
    return " ".join(re.sub(r"<[^>]+>", " ", inner).split())


def test_thirty_streams_are_thirty_on_one_page(admin):
    _streams(30)
    html = admin.get("/admin/streams/stream/").content.decode()
    assert _paginator(html) == "30 streams"
    assert "1000000" not in html and "1,000,000" not in html


def test_a_search_or_filter_counts_its_own_hits(admin):
    _streams(30, upstream_id="resp_a")
    _streams(3, upstream_id="resp_b", source="proxy")
    html = admin.get("/admin/streams/stream/", {"q": "resp_none"}).content.decode()
    assert _paginator(html) == "0 streams" and "0 results" in html
    html = admin.get("/admin/streams/stream/", {"q": "resp_b"}).content.decode()
    assert _paginator(html) == "3 streams" and "3 results" in html
    html = admin.get("/admin/streams/stream/", {"source__exact": "proxy"}).content.decode()
    assert _paginator(html) == "3 streams"
    html = admin.get("/admin/streams/event/").content.decode()
    assert _paginator(html) == "0 events"


def test_beyond_the_cap_an_estimate_says_so_and_a_filter_says_more_than(admin, monkeypatch):
    monkeypatch.setattr(streams_admin, "COUNT_CAP", 100)
    _streams(120)
    _streams(130, source="proxy")
    middle = Stream.objects.order_by("pk").values_list("pk", flat=True)[50:60]
    Stream.objects.filter(pk__in=list(middle)).delete()
    html = admin.get("/admin/streams/stream/").content.decode()
    # the ids span 250 rows, 240 are left: an upper bound, said to be an estimate
    assert _paginator(html).startswith("1 2 3 4 5 about 250 (estimate) streams")
    html = admin.get("/admin/streams/stream/", {"source__exact": "proxy"}).content.decode()
    assert _paginator(html).startswith("1 2 3 more than 100 streams")
    assert "Select all 1" not in html and "question" not in html  # (no action over every row)
    html = admin.get("/admin/streams/stream/", {"source__exact": "proxy", "p": "3"})
    assert html.status_code == 200
    html = admin.get("/admin/streams/stream/", {"status__exact": "failed"}).content.decode()
    assert _paginator(html) == "0 streams"


def test_in_dutch(admin, monkeypatch):
    monkeypatch.setattr(streams_admin, "COUNT_CAP", 10)
    _streams(25)
    html = admin.get("/admin/streams/stream/", HTTP_ACCEPT_LANGUAGE="nl").content.decode()
    assert "ongeveer 25 (schatting)" in _paginator(html)


def test_the_cap_is_the_most_a_count_reads(admin, monkeypatch):
    """The count reads at most COUNT_CAP + 1 rows: its SQL is limited."""
    monkeypatch.setattr(streams_admin, "COUNT_CAP", 10)
    _streams(25)
    Event.objects.bulk_create(
        [Event(stream=Stream.objects.first(), index=i, type="t", t_us=i) for i in range(30)]
    )
    with CaptureQueriesContext(connection) as queries:
        admin.get("/admin/streams/event/")
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 11" in sql for sql in counts), counts


def test_events_by_stream_id_and_type_without_reading_every_row(admin):
    a, b = Stream.objects.create(status="completed"), Stream.objects.create(status="completed")
    types = ("response.created", "response.output_text.delta", "response.completed")
    Event.objects.bulk_create(
        [Event(stream=s, index=i, type=t, t_us=i) for s in (a, b) for i, t in enumerate(types)]
    )
    with CaptureQueriesContext(connection) as queries:
        html = admin.get("/admin/streams/event/", {"q": str(b.pk)}).content.decode()
    assert _paginator(html) == "3 events"
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    # the id as a number (the constraint's index), not as text; no DISTINCT over every type
    assert f'"stream_id" = {b.pk}' in sql and "CAST" not in sql and "DISTINCT" not in sql
    for term in ("abc", "9" * 30, "#"):
        html = admin.get("/admin/streams/event/", {"q": term}).content.decode()
        assert _paginator(html) == ("6 events" if term == "#" else "0 events"), term
    html = admin.get("/admin/streams/event/", {"type": "response.completed"}).content.decode()
    assert _paginator(html) == "2 events"
    assert 'href="?type=response.output_text.delta"' in html  # (the protocol's types listed)


def test_streams_by_upstream_id_through_its_index(admin):
    _streams(2, upstream_id="resp_A")
    with CaptureQueriesContext(connection) as queries:
        html = admin.get("/admin/streams/stream/", {"q": "resp_A"}).content.decode()
    assert _paginator(html) == "2 streams"
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "\"upstream_id\" = 'resp_A'" in sql and "LIKE" not in sql


def test_the_model_filters_list_the_models_without_reading_every_stream(admin):
    _streams(3, requested_model="auto", resolved_model="gpt-oss-20b")
    _streams(2, requested_model="qwen3-coder", resolved_model="qwen3-coder")
    with CaptureQueriesContext(connection) as queries:
        html = admin.get("/admin/streams/stream/").content.decode()
    assert "DISTINCT" not in " ".join(q["sql"] for q in queries.captured_queries)
    for model in ("auto", "gpt-oss-20b", "qwen3-coder"):
        assert f"{model}</a>" in html, model
    html = admin.get("/admin/streams/stream/", {"resolved_model__exact": "gpt-oss-20b"})
    assert _paginator(html.content.decode()) == "3 streams"
    html = admin.get("/admin/streams/stream/", {"requested_model__exact": "qwen3-coder"})
    assert _paginator(html.content.decode()) == "2 streams"


def _plan(sql):
    """The query plan of `sql` as one string (PostgreSQL: as it would read a large table)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql)
            return " ".join(r[0] for r in cursor.fetchall())
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return " ".join(r[-1] for r in cursor.fetchall())


def test_the_events_of_a_rare_type_are_read_through_their_index(admin):
    """At 11.5M events, the events of a rare type (`error`) were found by walking every event
    newest first and counted by reading them all: 1.8 s. The page and its count now read the
    partial index of every type but the output deltas (event_sparse_type); the deltas, most
    of a stream's events, are not in it and are listed as before."""
    s = Stream.objects.create(status="failed")
    types = ["response.created"] + ["response.output_text.delta"] * 5 + ["error"]
    Event.objects.bulk_create([Event(stream=s, index=i, type=t) for i, t in enumerate(types)])
    with CaptureQueriesContext(connection) as queries:
        html = admin.get("/admin/streams/event/", {"type": "error"}).content.decode()
    assert _paginator(html) == "1 event"
    reads = [q["sql"] for q in queries.captured_queries if '"streams_event"' in q["sql"]]
    assert len(reads) == 2  # the count and the page
    for sql in reads:
        assert "event_sparse_type" in _plan(sql), sql
    html = admin.get("/admin/streams/event/", {"type": "response.output_text.delta"})
    assert _paginator(html.content.decode()) == "5 events"


@pytest.mark.parametrize("language", ["en", "nl"])
def test_a_rows_checkbox_is_djangos_markup_written_at_once(language):
    """BigTableAdmin.action_checkbox writes the markup Django's widget renders (three
    templates a row: a third of a 50-row changelist's time), label and escaping included."""
    from django.contrib.admin import ModelAdmin, site
    from django.utils import translation

    stream = Stream.objects.create(status="completed")
    event = Event.objects.create(stream=stream, index=0, type='<b>"&')
    with translation.override(language):
        for obj in (stream, event):
            model_admin = site._registry[type(obj)]
            ours = model_admin.action_checkbox(obj)
            assert ours == ModelAdmin.action_checkbox(model_admin, obj)
            assert f'value="{obj.pk}"' in ours


def _packed_rows(html):
    table = html.split('<table id="packed-events">', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [re.findall(r"<td>([^<]*)</td>", row) for row in body.split("<tr>")[1:]]


def test_a_packed_streams_events_are_listed_through_the_event_reader(admin):
    import datetime as dt

    from streams.ingest.importer import import_capture
    from streams.store import compact
    from tests.support.paths import CAPTURES

    name = "openai_text_long_722ev.sse"
    [stream] = import_capture((CAPTURES / name).read_bytes(), name)
    last = Event.objects.filter(stream=stream, type="response.completed").get()
    assert last.t_us is None  # (an imported file has no receipt times: shown as "-")
    compact.pack(stream.pk, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    assert not Event.objects.filter(stream=stream).exists()

    html = admin.get("/admin/streams/event/", {"q": str(stream.pk)}).content.decode()
    assert f"Stream #{stream.pk} is packed: its 722 events are stored in blocks" in html
    rows = _packed_rows(html)
    assert [int(r[0]) for r in rows] == list(range(50))
    assert "after=49" in html
    html = admin.get("/admin/streams/event/", {"q": str(stream.pk), "after": "49"}).content
    assert [int(r[0]) for r in _packed_rows(html.decode())] == list(range(50, 100))
    typed = {"q": str(stream.pk), "type": "response.completed"}
    rows = _packed_rows(admin.get("/admin/streams/event/", typed).content.decode())
    assert rows == [[str(last.index), "-", "response.completed", str(last.sequence_number)]]
    for bad in ("-1", "x", "9" * 40):  # (a bad `after` is ignored: the first page)
        html = admin.get("/admin/streams/event/", {"q": str(stream.pk), "after": bad}).content
        assert [int(r[0]) for r in _packed_rows(html.decode())][:1] == [0]
