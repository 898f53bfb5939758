"""Search and side by side, in real Chromium against a real Daphne (and the simulator process):

- typing words into the list's search box finds a stream by its answer, best match first, its
  snippet with the words marked, the list no longer live;
- ticking two rows and "Compare the two ticked" opens them side by side: figures, both arrival
  curves drawn by uPlot, the word diff;
- a comparison with a stream still streaming follows it: its curve grows and the page stops
  polling once it has ended, without a reload.
Screenshots at 1440 and 390 px: tests/e2e/test_screenshots_e2e.py (`site`: "search",
"side-by-side", "compare-with")."""

import pytest

from streams.models import Membership, Project, Stream
from tests.e2e.conftest import take_screenshot
from tests.support.processes import start_stream, wait_until
from tests.support.recording import recorded, text_events

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A page that was not reloaded still has this (set after it loaded).
MARK = "() => { window.__notReloaded = true; }"
NOT_RELOADED = "() => window.__notReloaded === true"


def test_search_finds_an_answer_and_two_ticked_streams_open_side_by_side(
    logged_in_page, people, live_server_daphne
):
    owner = people.owner
    a = recorded(owner, text_events("De Dom is hoog; kortom: een ", "grachtenpand", " ernaast."))
    b = recorded(owner, text_events("De Domtoren is erg hoog, met een grachtenpand."))
    other = recorded(owner, text_events("Iets heel anders."), prompt="grachtenpand als vraag")
    page = logged_in_page(owner, base_url=live_server_daphne.url, path="/")
    page.locator("#f-q").press_sequentially("grachtenpand")  # (the box searches as one types)
    page.wait_for_selector("p.snippet mark")
    rows = page.locator("table.streams tbody tr.stream")
    ids = [int(r.get_attribute("data-id")) for r in rows.all()]
    assert ids[0] == other.pk and sorted(ids) == sorted([a.pk, b.pk, other.pk])  # prompt first
    assert page.locator("p.snippet mark").first.inner_text().lower() == "grachtenpand"
    assert page.get_attribute("#results", "data-live") == "off"
    assert "q=grachtenpand" in page.url  # the search is in the address, to share or reload
    page.check(f"#stream-row-{a.pk} input.pick")
    page.check(f"#stream-row-{b.pk} input.pick")
    page.click("#compare-form button[type=submit]")
    page.wait_for_url("**/compare/*/")
    first, second = (int(part) for part in page.url.rstrip("/").split("/")[-3::2])
    assert {first, second} == {a.pk, b.pk}  # in the list's order
    if first != a.pk:
        page.click("text=Swap them")
        page.wait_for_url(f"**/streams/{a.pk}/compare/{b.pk}/")
    page.wait_for_selector("[data-chart=arrivals] canvas")
    assert page.locator(".word-diff del").first.inner_text() == "Dom"
    assert "Domtoren" in page.locator(".word-diff ins").first.inner_text()
    legend = page.locator("[data-chart=arrivals] .u-legend").inner_text()
    assert f"a · #{a.pk}" in legend and f"b · #{b.pk}" in legend
    assert page.errors == []


def test_a_comparison_follows_a_stream_that_is_still_streaming(
    logged_in_page, people, live_server_daphne
):
    owner = people.owner
    done = recorded(owner, text_events("Een kort antwoord."))
    running = start_stream(live_server_daphne, owner, sentences=12, time_scale=1.5)
    page = logged_in_page(
        owner, base_url=live_server_daphne.url, path=f"/streams/{done.pk}/compare/{running}/"
    )
    page.evaluate(MARK)
    assert page.get_attribute("#compare-body", "data-live") == "on"

    def points():
        # the second curve's points so far, from the chart's own data
        return page.evaluate(
            "() => { const u = document.querySelector('[data-chart=arrivals]')._uplot;"
            " return u ? u.data[2].filter((v) => v != null).length : 0; }"
        )

    wait_until(lambda: points() > 0, 30, what="the running stream's curve")
    first = points()
    wait_until(
        lambda: page.get_attribute("#compare-body", "data-live") == "off", 60, what="the end"
    )
    # it grew while the page polled (the last swap's chart is drawn once htmx settles it)
    wait_until(lambda: points() > first, 10, what="the final curve")
    assert page.evaluate(NOT_RELOADED)
    stream = Stream.objects.get(pk=running)
    assert stream.status == "completed"
    assert page.locator(".word-diff ins").count() > 0  # its answer, word by word
    take_screenshot(page, "compare-live-ended")
    assert page.errors == []


def test_a_view_saved_from_a_filtered_page_opens_for_a_teammate(logged_in_page, people):
    """The streams list filtered through htmx (the address moves, the page does not reload),
    "Save this view…" shared with the project; a teammate in it finds it under "Saved views" and
    opens the same filters on the project's streams, whichever project they were working in."""
    owner, teammate = people.owner, people.stranger
    team = Project.objects.create(name="Team", slug="team")
    for user in (owner, teammate):
        Membership.objects.create(project=team, user=user, role=Membership.Role.MEMBER)
    ours = recorded(owner, text_events("Kortom, de Dom."), status="failed", project=team)
    recorded(teammate, text_events("Kortom, van mij."), status="failed")  # their own project's
    page = logged_in_page(owner, path="/?project=team")
    page.select_option("#filters select[name=status]", "failed")
    page.wait_for_url("**/?*status=failed*")
    page.click("details.save-view summary")
    page.fill("details.save-view input[name=name]", "Mislukt")
    page.check("details.save-view input[name=shared]")
    page.click("details.save-view button[type=submit]")
    page.wait_for_url("**/?status=failed&project=team")
    assert page.errors == []
    other = logged_in_page(teammate, path="/views/?project=team")
    shared = other.locator("table.saved-views").inner_text()
    assert "the project's members (shared by owner)" in shared
    logged_in_page(teammate, path="/")  # (a new context: back in their own project)
    other.click("table.saved-views a:text('Mislukt')")
    other.wait_for_url("**/?status=failed&project=team")
    ids = [int(r.get_attribute("data-id")) for r in other.locator("tr.stream").all()]
    assert ids == [ours.pk]  # the filters, on the project's streams
    assert other.errors == []
