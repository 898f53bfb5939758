"""The analytics pages in real Chromium on seeded history: every chart draws (a uPlot canvas
with painted pixels), its table view opens, no script errors, and untrusted names stay text.
Screenshots go to tests/e2e/screenshots/ (git-ignored)."""

import datetime as dt
import time

import pytest
from django.contrib.auth import get_user_model

from streams.management.commands.seed_demo import seed

pytestmark = [pytest.mark.e2e]

PAINTED = """(el) => {
  const canvas = el.querySelector("canvas");
  if (!canvas || canvas.width === 0 || canvas.height === 0) return 0;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) painted++;
  return painted;
}"""


@pytest.fixture
def staff(transactional_db):
    seed(300, days=7, seed=3, events_per_stream=10, users=("alice", "bob"))
    return get_user_model().objects.create_user("boss", is_staff=True)


def wait_until(page, expression, timeout_s):
    """Poll `expression` from here: Playwright's wait_for_function compiles its predicate with
    eval inside the page, which the pages' CSP (no 'unsafe-eval') refuses after a swap."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {expression}"
        time.sleep(0.05)


def charts_drawn(page, count):
    wait_until(page, f"document.querySelectorAll('[data-chart] canvas').length >= {count}", 15)
    charts = page.query_selector_all("[data-chart]")
    assert len(charts) == count
    for chart in charts:
        assert chart.evaluate(PAINTED) > 500, chart.get_attribute("data-chart")


def test_latency_page_draws_its_charts(live_server, logged_in_page, staff, screenshot):
    page = logged_in_page(staff, path="/latency/?range=7d")
    charts_drawn(page, 2)  # histogram, TTFT over time
    assert page.locator("#resolved-h").is_visible()
    assert page.locator("table").first.locator("tbody tr").count() >= 5
    page.click("#hist-table summary")
    assert page.locator("#hist-table table").is_visible()
    screenshot(page, "latency")
    # a filter narrows the page and keeps the charts
    page.select_option("select[name=model]", "eu-reasoner")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**model=eu-reasoner**")
    charts_drawn(page, 2)
    assert page.errors == []


def test_routing_page_draws_its_charts_and_refreshes(
    live_server, logged_in_page, staff, screenshot
):
    from streams.models import Stream

    page = logged_in_page(staff, live_server.url, "/routing/?range=7d")
    charts_drawn(page, 2)  # share, share over time
    assert page.locator("#matrix-h").is_visible()
    screenshot(page, "routing")
    total = int(page.locator(".figure .value").first.inner_text())
    page.click("#trend-table summary")
    # a stream finishes: the next poll (every 10 s) brings it, redraws the charts and keeps the
    # table view the user opened
    Stream.objects.create(
        requested_model="auto", resolved_model="qwen3-coder", status="completed", ttft_ms=300.0,
        routing_us=30_000, routing_category="code", routing_source="rules",
    )  # fmt: skip
    wait_until(
        page, f"parseInt(document.querySelector('.figure .value').textContent) === {total + 1}", 25
    )
    charts_drawn(page, 2)
    assert page.locator("#trend-table").get_attribute("open") is not None
    assert page.errors == []


def test_usage_page_draws_its_spend_chart(live_server, logged_in_page, staff, screenshot):
    """The seeded history's gpt-oss streams are priced by the maintained list (USD): one
    line of spend over time."""
    page = logged_in_page(staff, live_server.url, "/usage/?range=7d")
    charts_drawn(page, 1)
    assert page.locator("#method").is_visible()
    screenshot(page, "usage")
    assert page.errors == []


def test_admin_analytics_and_a_phone(live_server, logged_in_page, staff, screenshot):
    page = logged_in_page(staff, live_server.url, "/analytics/")
    charts_drawn(page, 1)
    screenshot(page, "admin_analytics")
    phone = logged_in_page(staff, live_server.url, "/latency/", width=390, height=844)
    charts_drawn(phone, 2)
    # the charts fit the screen; wide tables scroll inside their card
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 400, width
    screenshot(phone, "latency_phone")
    assert page.errors == [] and phone.errors == []


def test_a_model_name_stays_text(live_server, logged_in_page, staff):
    from streams.models import Stream

    evil = "<img src=x onerror=window.pwned=1>"
    Stream.objects.filter(pk=Stream.objects.filter(ttft_ms__isnull=False).first().pk).update(
        resolved_model=evil, created_at=dt.datetime.now(dt.UTC)
    )
    page = logged_in_page(staff, live_server.url, "/latency/")
    charts_drawn(page, 2)
    assert page.evaluate("window.pwned") is None
    assert page.get_by_text(evil).count() >= 1


def test_latency_page_draws_the_scores_chart(live_server, logged_in_page, staff, screenshot):
    """Thumbs on most of the seeded streams: the "Scores by model" table and its chart (mean
    score per model over time) beside the TTFT charts."""
    import random

    from django.db import transaction

    from streams.models import Score, ScoreType, Stream
    from streams.store import aggregates

    rng = random.Random(35)
    # (transactional_db empties the tables: the migration's thumbs type is made again)
    thumbs, _ = ScoreType.objects.get_or_create(
        name="thumbs", defaults={"kind": "thumbs", "minimum": 0, "maximum": 1}
    )
    Score.objects.bulk_create(
        Score(stream=s, score_type=thumbs, value=rng.choice([0, 1, 1]), source="api")
        for s in Stream.objects.exclude(resolved_model="")
        if rng.random() < 0.6
    )
    with transaction.atomic():
        aggregates.rebuild()
    page = logged_in_page(staff, live_server.url, "/latency/?range=7d&score=thumbs")
    charts_drawn(page, 3)  # histogram, TTFT over time, mean score over time
    assert page.locator("#scores-h").is_visible()
    assert page.locator("#scores table tbody tr").count() >= 3
    page.click("#scores-table summary")
    assert page.locator("#scores-table table").is_visible()
    screenshot(page, "latency_scores")
    assert page.errors == []
    # the section's texts are legible in both themes (tests/support/contrast.py)
    from tests.support.contrast import contrast_failures

    for theme in ("light", "dark"):
        themed = logged_in_page(staff, live_server.url, "/latency/?range=7d", color_scheme=theme)
        charts_drawn(themed, 3)
        found = contrast_failures(themed)
        assert found["checked"] > 5 and found["failures"] == [], (theme, found["failures"][:5])
