"""The user's time zone in real Chromium: a browser in Amsterdam (Playwright's
`timezone_id="Europe/Amsterdam"`) tells the server its zone once (static/js/timezone.js, the
`streamscope_tz` cookie), and from the next page on the server's times and the charts' (time.js)
are Amsterdam's, the zone named; the top bar's selector switches to UTC, a choice the script
then leaves alone."""

import datetime as dt
import time
import zoneinfo

import pytest
from django.contrib.auth import get_user_model

from streams.models import Stream
from tests.e2e.conftest import TIMEOUT_MS, session_cookie, take_screenshot

pytestmark = [pytest.mark.e2e]

AMS = "Europe/Amsterdam"
COOKIE = "streamscope_tz"


def _cookie(context):
    return next((c["value"] for c in context.cookies() if c["name"] == COOKIE), None)


def _until(check, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def test_the_browsers_zone_is_picked_up_shown_and_utc_can_be_chosen(
    live_server, browser, transactional_db
):
    staff = get_user_model().objects.create_user("boss", is_staff=True)
    when = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(microsecond=0)
    stream = Stream.objects.create(user=staff, status="completed", requested_model="m-a")
    Stream.objects.filter(pk=stream.pk).update(created_at=when, resolved_model="m-a")
    local = when.astimezone(zoneinfo.ZoneInfo(AMS))
    shown_local = local.strftime("%Y-%m-%d %H:%M:%S ") + local.tzname()
    shown_utc = when.strftime("%Y-%m-%d %H:%M:%S UTC")

    context = browser.new_context(timezone_id=AMS, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(TIMEOUT_MS)
    context.add_cookies([session_cookie(staff, live_server.url)])
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(e.stack or str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        url = f"{live_server.url}/streams/{stream.pk}/"
        page.goto(url)
        # the first page: UTC (the server had no zone yet), which it says
        assert page.get_attribute("html", "data-time-zone") == "UTC"
        _until(lambda: _cookie(context) == f"auto:{AMS}")

        page.reload()
        assert page.get_attribute("html", "data-time-zone") == AMS
        assert shown_local in page.locator("main").inner_text()
        assert page.locator("#time-zone-select").input_value() == "auto"
        assert AMS in page.locator("#time-zone").inner_text()
        assert page.locator("#time-zone-abbr").inner_text() in ("CET", "CEST")
        # the selector offers every zone the browser knows
        assert page.locator("#time-zone-select option").count() > 300
        take_screenshot(page, "time_zone")

        # a chart's times: the zone named on its time axis (the legend's x series)
        page.goto(f"{live_server.url}/analytics/?range=7d")
        page.locator("[data-chart] .u-legend").first.wait_for()
        assert AMS in page.locator("[data-chart] .u-legend").first.inner_text()

        # UTC, chosen: the page reloads in UTC, and the script does not undo the choice
        page.goto(url)
        with page.expect_navigation():
            page.select_option("#time-zone-select", "UTC")
        assert page.get_attribute("html", "data-time-zone") == "UTC"
        assert shown_utc in page.locator("main").inner_text()
        assert _cookie(context) == "UTC"
        page.reload()
        assert page.get_attribute("html", "data-time-zone") == "UTC"
        assert _cookie(context) == "UTC"
        assert not errors, errors
    finally:
        context.close()
