"""The user's time zone (dashboard/timezone.py): which one a request gets, that pages show their
times in it and name it, and that the analytics ranges' days and buckets are its days and hours
with counts as exact from the rollups (UTC hours and days) as from the raw rows, across a DST
change (Europe/Amsterdam) and with a half-hour offset (Asia/Kolkata)."""

import datetime as dt
import re
import zoneinfo

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.utils import timezone

from dashboard import timezone as tzmod
from dashboard.forms.analytics import AdminAnalyticsForm, LatencyForm
from dashboard.stats.admin import admin_report
from dashboard.stats.latency import latency_report
from streams.models import Stream
from streams.stats import cube
from streams.stats.exact import ExactSource
from streams.stats.rollup import RollupSource
from streams.stats.sql import Scope, buckets, day_starts
from streams.store import aggregates

AMS, KOL = "Europe/Amsterdam", "Asia/Kolkata"
# Amsterdam's clocks go forward on 2026-03-29 at 01:00 UTC (02:00 CET → 03:00 CEST)
NOW = dt.datetime(2026, 3, 30, 10, 17, 41, tzinfo=dt.UTC)


def z(name):
    return zoneinfo.ZoneInfo(name)


# -- the middleware ---------------------------------------------------------------------------


def _zone_seen(path, cookie=None):
    """(zone active inside the view, request.time_zone_source) for a request to `path`."""
    seen = {}

    def view(request):
        seen["zone"] = timezone.get_current_timezone_name()
        seen["source"] = request.time_zone_source
        return HttpResponse("ok")

    request = RequestFactory().get(path)
    if cookie is not None:
        request.COOKIES[tzmod.COOKIE] = cookie
    tzmod.TimeZoneMiddleware(view)(request)
    return seen["zone"], seen["source"]


@pytest.mark.parametrize(
    "cookie, expected",
    [
        (None, ("UTC", "default")),
        ("auto:Europe/Amsterdam", (AMS, "browser")),  # the script's
        ("Asia/Kolkata", (KOL, "chosen")),  # the selector's
        ("UTC", ("UTC", "chosen")),
        ("auto:UTC", ("UTC", "browser")),
        ("auto:", ("UTC", "default")),
        ("Mars/Olympus_Mons", ("UTC", "default")),
        ("auto:Not/AZone", ("UTC", "default")),
        ("../../etc/passwd", ("UTC", "default")),
        ("Europe/Amsterdam\x00", ("UTC", "default")),
        ("", ("UTC", "default")),
    ],
)
def test_a_page_gets_the_cookies_zone_and_anything_else_is_utc(cookie, expected):
    assert _zone_seen("/latency/", cookie) == expected


def test_a_choice_is_what_the_cookie_holds_and_the_script_leaves_alone():
    """One cookie: a choice (a bare name) replaces the browser's (`auto:`); the script only
    writes while the cookie is absent or automatic, so a choice stays."""
    assert tzmod.from_cookie("auto:Europe/Amsterdam") == (AMS, "browser")
    assert tzmod.from_cookie("America/New_York") == ("America/New_York", "chosen")
    script = settings.BASE_DIR / "static" / "js" / "timezone.js"
    with open(script) as f:
        text = f.read()
    assert "current === null || (current.startsWith(AUTO)" in text


@pytest.mark.parametrize(
    "path",
    [
        "/api/streams/",
        "/api/streams/1/",
        "/v1/chat/completions",
        "/metrics",
        "/streams/1/export.sse",
        "/streams/1/timing.json",
        "/streams/1/replay.json",
        "/latency/export.csv",
    ],
)
def test_data_routes_stay_utc_whatever_the_cookie(path):
    assert _zone_seen(path, KOL) == ("UTC", "default")


def test_the_zone_is_let_go_after_the_response():
    _zone_seen("/latency/", KOL)
    assert timezone.get_current_timezone_name() == "UTC"


# -- pages ------------------------------------------------------------------------------------


@pytest.fixture
def owner_client(db):
    user = get_user_model().objects.create_user("owner")
    client = Client()
    client.force_login(user)
    return user, client


def _stream_at(user, when):
    s = Stream.objects.create(user=user, status="completed", requested_model="m")
    Stream.objects.filter(pk=s.pk).update(created_at=when)
    return s


def test_a_page_shows_its_times_in_the_chosen_zone_and_names_it(owner_client):
    user, client = owner_client
    s = _stream_at(user, dt.datetime(2026, 7, 1, 10, 5, 9, tzinfo=dt.UTC))
    client.cookies[tzmod.COOKIE] = AMS
    html = client.get(f"/streams/{s.pk}/").content.decode()
    assert f'data-time-zone="{AMS}"' in html
    # summer: CEST, two hours ahead
    assert "2026-07-01 12:05:09 CEST" in html
    assert "10:05:09" not in html.split("<main", 1)[1].split("<script", 1)[0]
    # the top bar names it, and offers UTC
    assert f'<option value="{AMS}" selected>{AMS}</option>' in html
    assert '<option value="UTC">UTC</option>' in html
    abbr = timezone.now().astimezone(z(AMS)).tzname()  # (now's: CET in winter)
    assert f'id="time-zone-abbr" title="{AMS} ' in html and f">{abbr}</abbr>" in html

    client.cookies[tzmod.COOKIE] = "UTC"
    html = client.get(f"/streams/{s.pk}/").content.decode()
    assert 'data-time-zone="UTC"' in html and "2026-07-01 10:05:09 UTC" in html


def test_a_choice_is_posted_remembered_and_sent_back_to_its_page(owner_client):
    """The selector is a form: it works without scripts (a button in <noscript>, common zones
    listed by the server), and the server is what remembers a choice."""
    user, client = owner_client
    html = client.get("/latency/").content.decode()
    form = html.split('<form class="tz"', 1)[1].split("</form>", 1)[0]
    assert 'method="post" action="/i18n/time-zone/"' in form and "csrfmiddlewaretoken" in form
    assert 'name="next" value="/latency/"' in form and "<noscript><button" in form
    assert f'<option value="{AMS}">{AMS}</option>' in form

    response = client.post("/i18n/time-zone/", {"tz": KOL, "next": "/latency/?days=7"})
    assert (response.status_code, response["Location"]) == (302, "/latency/?days=7")
    cookie = response.cookies[tzmod.COOKIE]
    assert cookie.value == KOL and cookie["samesite"] == "Lax" and cookie["max-age"] > 3e7
    html = client.get("/latency/").content.decode()
    assert f'data-time-zone="{KOL}"' in html
    # a chosen zone outside the common ones is listed (first) and selected
    assert html.count(f'<option value="{KOL}" selected>{KOL}</option>') == 1

    # back to the browser's: the script sends the zone it found; without it, the next page's
    # script fills it in (UTC until then)
    response = client.post("/i18n/time-zone/", {"tz": "auto", "browser": AMS, "next": "/"})
    assert response.cookies[tzmod.COOKIE].value == f"auto:{AMS}"
    response = client.post("/i18n/time-zone/", {"tz": "auto", "browser": "Nowhere/Else"})
    assert response.cookies[tzmod.COOKIE].value == "auto:"
    assert tzmod.from_cookie("auto:") == ("UTC", "default")


@pytest.mark.parametrize(
    "cookie", [None, "UTC", "auto:UTC", "Etc/UTC", "auto:Etc/UTC", "Zulu", "auto:Europe/Amsterdam"]
)
def test_the_selector_lists_utc_once_and_names_it_once(owner_client, cookie):
    """UTC is one choice: not again as the browser's zone, as an alias (Etc/UTC, Zulu: the
    same zone) or beside the selector as its abbreviation."""
    user, client = owner_client
    if cookie is not None:
        client.cookies[tzmod.COOKIE] = cookie
    html = client.get("/latency/").content.decode()
    form = html.split('<form class="tz"', 1)[1].split("</form>", 1)[0]
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', form)
    assert [text for value, text in options].count("UTC") == 1, options
    assert not {"Etc/UTC", "Zulu"} & {value for value, text in options}, options
    shown = re.sub(r"<[^>]+>", " ", form.split("</select>", 1)[1])
    assert "UTC" not in shown.split() or "Amsterdam" in (cookie or "")  # (its abbr.: CET)
    if cookie and "UTC" in cookie and cookie.startswith("auto:"):
        assert ("auto", "Your browser's zone (UTC)") in options


@pytest.mark.parametrize("zone", ["", "Mars/Olympus_Mons", "../../etc/passwd", "auto:UTC"])
def test_an_unknown_zone_is_a_400_and_the_cookie_stays(owner_client, zone):
    user, client = owner_client
    client.cookies[tzmod.COOKIE] = AMS
    response = client.post("/i18n/time-zone/", {"tz": zone, "next": "/"})
    assert response.status_code == 400 and tzmod.COOKIE not in response.cookies
    assert "Unknown time zone" in response.content.decode()


@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/x", "", "javascript:x"]
)
def test_a_choice_goes_back_to_this_site_only(owner_client, target):
    user, client = owner_client
    response = client.post("/i18n/time-zone/", {"tz": "UTC", "next": target})
    assert (response.status_code, response["Location"]) == (302, "/")


def test_the_browsers_zone_is_named_as_the_browsers(owner_client):
    user, client = owner_client
    s = _stream_at(user, dt.datetime(2026, 1, 15, 23, 30, tzinfo=dt.UTC))
    client.cookies[tzmod.COOKIE] = "auto:" + KOL
    html = client.get(f"/streams/{s.pk}/").content.decode()
    assert f'data-time-zone="{KOL}"' in html
    assert "2026-01-16 05:00:00 IST" in html
    assert f'<option value="auto" selected>Your browser\'s zone ({KOL})</option>' in html


def test_the_streams_list_shows_local_time(owner_client):
    user, client = owner_client
    _stream_at(user, dt.datetime(2026, 1, 15, 23, 30, tzinfo=dt.UTC))
    client.cookies[tzmod.COOKIE] = KOL
    html = client.get("/").content.decode()
    assert "Jan 16 05:00:00" in html and "Asia/Kolkata" in html


def test_a_custom_range_is_read_in_the_pages_zone():
    with timezone.override(z(AMS)):
        form = LatencyForm(
            {"range": "custom", "start": "2026-03-29T00:00", "end": "2026-03-30T00:00"}
        )
        assert form.is_valid(), form.errors
        scope = form.scope(type("U", (), {"is_staff": True, "pk": 1})(), None, NOW)
    # a local day of 23 hours: midnight CET to midnight CEST
    assert scope.start == dt.datetime(2026, 3, 28, 23, tzinfo=dt.UTC)
    assert scope.end == dt.datetime(2026, 3, 29, 22, tzinfo=dt.UTC)
    assert scope.tz == AMS
    form = AdminAnalyticsForm({"range": "7d"}, tz=KOL)
    assert form.is_valid() and form.window(NOW) == (NOW - dt.timedelta(days=7), NOW)


# -- day and bucket edges ---------------------------------------------------------------------


def test_local_days_are_23_or_25_hours_over_a_dst_change():
    days = day_starts(dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC), NOW, tz=AMS)
    assert [d.date().isoformat() for d in days] == ["2026-03-28", "2026-03-29", "2026-03-30"]
    assert [d.astimezone(dt.UTC).hour for d in days] == [23, 23, 22]  # (the day before's UTC)
    autumn = day_starts(
        dt.datetime(2026, 10, 24, 12, tzinfo=dt.UTC),
        dt.datetime(2026, 10, 27, tzinfo=dt.UTC),
        tz=AMS,
    )
    ts = [d.timestamp() for d in autumn]
    assert [(b - a) / 3600 for a, b in zip(ts, ts[1:], strict=False)] == [24, 25, 24]
    kolkata = day_starts(dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC), NOW, tz=KOL)
    assert {(d.astimezone(dt.UTC).hour, d.astimezone(dt.UTC).minute) for d in kolkata} == {(18, 30)}


def test_hour_buckets_follow_the_local_clock():
    start, end = (
        dt.datetime(2026, 3, 28, 20, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 30, 3, tzinfo=dt.UTC),
    )
    step, windows = buckets(start, end, tz=AMS)
    assert step == 3600
    local = [lo.astimezone(z(AMS)) for lo, _ in windows]
    assert all(t.minute == 0 for t in local)
    assert not any(t.hour == 2 and t.day == 29 for t in local)  # the hour the clock skips
    step, windows = buckets(start, end, tz=KOL)
    assert all(lo.minute == 30 for lo, _ in windows)  # local hours: half past, UTC
    step, windows = buckets(start, start + dt.timedelta(days=40), tz=AMS)
    assert step == 86400
    assert all(lo.astimezone(z(AMS)).hour == 0 for lo, _ in windows)


def test_a_local_day_is_read_from_hour_rows_and_a_half_hour_offset_from_raw_edges():
    ams = day_starts(dt.datetime(2026, 3, 29, 12, tzinfo=dt.UTC), NOW, tz=AMS)[:2]
    g = cube.grid(86400, [d.timestamp() for d in ams])
    assert isinstance(g, cube.Grid)
    ws = cube.grid_windows(ams[0], ams[1], g)
    assert {w[0] for w in ws} <= {aggregates.HOUR, aggregates.THREE_HOURS}  # no raw, no day rows
    assert sum(w[2] - w[1] for w in ws) == 23 * 3600
    kol = day_starts(dt.datetime(2026, 3, 29, 12, tzinfo=dt.UTC), NOW, tz=KOL)[:2]
    ws = cube.grid_windows(kol[0], kol[1], cube.grid(86400, [d.timestamp() for d in kol]))
    raw = [(w[1], w[2]) for w in ws if w[0] == "raw"]
    assert [hi - lo for lo, hi in raw] == [1800, 1800]
    # UTC days are the rollups' own: the epoch-aligned step, day rows
    utc = day_starts(dt.datetime(2026, 3, 20, tzinfo=dt.UTC), NOW)
    assert cube.grid(86400, [d.timestamp() for d in utc]) == 86400


# -- exact counts from the rollups, in a zone ------------------------------------------------


@pytest.fixture(scope="module")
def _history(django_db_setup, django_db_blocker):
    """A seeded history over Amsterdam's DST change, in a transaction rolled back at the
    module's end (each case's own transaction is a savepoint inside it)."""
    from streams.management.commands.seed_demo import seed

    with django_db_blocker.unblock():
        assert not connection.in_atomic_block
        outer = transaction.atomic()
        outer.__enter__()
        try:
            seed(900, days=4, seed=5, events_per_stream=3, users=("alice", "bob"), now=NOW)
            yield
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def history(_history, db):
    assert Stream.objects.count() > 500


def _local_counts(tz, start, end):
    """{local date: streams} counted in Python from the rows."""
    out = {}
    qs = Stream.objects.filter(created_at__lt=end)
    if start is not None:
        qs = qs.filter(created_at__gte=start)
    for created in qs.values_list("created_at", flat=True):
        day = created.astimezone(z(tz)).date()
        out[day] = out.get(day, 0) + 1
    return out


LOCAL_DAY = {  # [midnight, midnight) of 2026-03-29, the day of the change, in each zone
    AMS: (dt.datetime(2026, 3, 28, 23, tzinfo=dt.UTC), dt.datetime(2026, 3, 29, 22, tzinfo=dt.UTC)),
    KOL: (
        dt.datetime(2026, 3, 28, 18, 30, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 29, 18, 30, tzinfo=dt.UTC),
    ),
}


def _ranges(tz):
    return [
        (NOW - dt.timedelta(hours=24), NOW),
        (NOW - dt.timedelta(days=3), NOW),
        (None, NOW),
        LOCAL_DAY[tz],
        (LOCAL_DAY[tz][0] - dt.timedelta(days=1), LOCAL_DAY[tz][1]),  # two local days
    ]


@pytest.mark.parametrize("tz", [AMS, KOL])
def test_the_days_and_series_of_a_zone_from_rollups_equal_the_exact_ones(history, tz):
    for start, end in _ranges(tz):
        scope = Scope(project_id=None, start=start, end=end, tz=tz)
        exact, rollup = ExactSource(scope, NOW), RollupSource(scope, NOW)
        days = exact.days()
        assert days == rollup.days(), (start, end)
        # the local days, counted in Python from the rows
        counted = _local_counts(tz, start, end)
        assert {d["day"]: d["streams"] for d in days if d["streams"]} == counted, (start, end)
        assert sum(counted.values()) > 0
        models = sorted({r for r, _ in exact.aggregates() if r})
        for qs in ((500, 950), ()):
            a, b = exact.series(models, qs), rollup.series(models, qs)
            assert (a is None) == (b is None)
            if a is None:
                continue
            assert (a["step"], a["t"]) == (b["step"], b["t"]), (start, end, qs)
            assert [s["n"] for s in a["series"]] == [s["n"] for s in b["series"]], (start, end)
            if a["step"] >= 3600:  # the buckets start on the local clock's hours or midnights
                local = [dt.datetime.fromtimestamp(t, z(tz)) for t in a["t"][1:]]
                assert all(x.minute == 0 and x.second == 0 for x in local)
                if a["step"] >= 86400:
                    assert all(x.hour == 0 for x in local)


def test_the_local_day_of_a_dst_change_from_rollups_reads_hour_rows(history, monkeypatch):
    """Counted from the rollups alone (the partial hours' raw reads counted), the 23-hour day
    needs no raw row."""
    start, end = LOCAL_DAY[AMS]
    scope = Scope(project_id=None, start=start, end=end, tz=AMS)
    reads = []
    real = aggregates.read_streams

    def counting(sql, params, **kw):
        rows = real(sql, params, **kw)
        reads.append(len(rows))
        return rows

    monkeypatch.setattr(aggregates, "read_streams", counting)
    days = RollupSource(scope, NOW).days()
    assert [d["day"] for d in days] == [dt.date(2026, 3, 29)]
    assert (
        days[0]["streams"]
        == Stream.objects.filter(created_at__gte=start, created_at__lt=end).count()
    )
    # one read: the active streams (none raw: every hour of the day is an hour row)
    assert len(reads) == 1


@pytest.mark.parametrize("tz", [AMS, KOL])
def test_the_admin_page_of_a_zone_from_either_source(history, monkeypatch, tz):
    scope = Scope(project_id=None, start=NOW - dt.timedelta(days=3), end=NOW, tz=tz)
    monkeypatch.setattr(cube, "EXACT_BELOW", 10**9)
    exact = admin_report(scope, now=NOW)
    monkeypatch.setattr(cube, "EXACT_BELOW", 0)
    fast = admin_report(scope, now=NOW)
    assert (exact.method, fast.method) == (cube.EXACT, cube.AGGREGATED)
    assert exact.days == fast.days and exact.totals == fast.totals
    assert exact.daily_chart == fast.daily_chart
    for t in fast.daily_chart["t"]:
        local = dt.datetime.fromtimestamp(t, z(tz))
        assert (local.hour, local.minute) == (0, 0)


def test_the_latency_tables_bucket_times_are_local(history):
    scope = Scope(project_id=None, start=NOW - dt.timedelta(days=3), end=NOW, tz=KOL)
    report = latency_report(scope, now=NOW)
    assert report.series_rows
    first = report.series["t"][0]
    assert report.series_rows[0]["t"] == dt.datetime.fromtimestamp(first, z(KOL)).strftime(
        "%Y-%m-%d %H:%M"
    )


# -- how a moment is written (dashboard/dates.py) ----------------------------------------------


@pytest.mark.parametrize("language", ["en", "nl"])
def test_a_moment_is_written_in_its_languages_forms_as_django_writes_them(language):
    """dates.write (the templates' `moment`, the report rows) writes each form of the language's
    format module exactly as Django's dateformat does, the zone named after a time of day."""
    from django.utils import dateformat, translation

    from dashboard import dates

    instants = [
        dt.datetime(2026, 3, 29, 0, 59, 59, tzinfo=dt.UTC),  # CET's last second, and
        dt.datetime(2026, 3, 29, 1, 0, 0, tzinfo=dt.UTC),  # CEST's first
        dt.datetime(2026, 1, 1, 0, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 5, 7, 6, 12, tzinfo=dt.UTC),
    ]
    with translation.override(language):
        for name in dates.FORMS:
            for when in instants:
                local = when.astimezone(z(AMS))
                expected = dateformat.format(local, dates.form(name))
                if name in dates.ZONED:
                    expected += f" {local.tzname()}"
                assert dates.write(local, name) == expected, (name, when)


def test_dutch_puts_the_day_first_and_english_keeps_iso():
    from django.utils import translation

    from dashboard import dates

    local = dt.datetime(2026, 12, 5, 7, 6, 12, tzinfo=dt.UTC).astimezone(z(AMS))
    written = {}
    for language in ("en", "nl"):
        with translation.override(language):
            written[language] = [dates.write(local, n) for n in ("second", "recent", "day")]
    assert written["en"] == ["2026-12-05 08:06:12 CET", "Dec 5 08:06:12", "2026-12-05"]
    assert written["nl"] == ["5-12-2026 08:06:12 CET", "5 dec 08:06:12", "5-12-2026"]
