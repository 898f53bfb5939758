"""Figures that agree, in real Chromium against a real Daphne (issue 16): while a stream runs, the
timeline's event count in the header, in the event table's heading, in the chart's caption and
the number of rows in the table are one number, the database's; and after the stream ended
too. A stalled attempt's chart caption counts its stall.

The live check runs during a pause the simulator makes (the `stall` scenario's silence, shorter
than the stall timeout): nothing arrives then, so every figure has settled and must equal the
stored events. Judged against the database, never against wall-clock speed."""

import re

import pytest
from playwright.sync_api import expect

from streams.models import Event, Finding, Stream
from tests.conftest import DaphneServer
from tests.support.processes import start_stream, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

STALL_TIMEOUT_S = 6
PAUSE_S = 4  # the live stream's silence: below the stall timeout, so it is not aborted
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def server(django_db_setup, simulator_process, _relay_db_connections):
    server = DaphneServer(
        simulator_process.base_url,
        overrides={"STALL_TIMEOUT_S": STALL_TIMEOUT_S, "STALL_MAX_ATTEMPTS": 1},
    )
    yield server
    server.stop()


@pytest.fixture
def page(logged_in_page, server, people):
    opened = []

    def open_page(path):
        p = logged_in_page(people.owner, server.url, path)
        opened.append(p)
        return p

    yield open_page
    for p in opened:
        assert p.errors == [], p.errors


FIGURES_JS = """() => {
  const num = (text) => (text || "").replace(/[^0-9]/g, "");
  const caption = document.getElementById("timing-caption").textContent;
  const m = caption.match(/([0-9][0-9,]*) events/);
  return {
    header: num(document.querySelector(".figures [data-field=event_count]").textContent),
    heading: num(document.querySelector("#events-title [data-field=event_count]").textContent),
    caption: m ? num(m[1]) : null,
    rows: String(document.querySelectorAll("#events-body tr.event").length),
    status: document.getElementById("stream-status").dataset.status,
  };
}"""


def figures(p):
    return p.evaluate(FIGURES_JS)


def agree(p, stream_id):
    """The page's figures when they all equal the stored events (None until then)."""
    shown = figures(p)
    stored = str(Event.objects.filter(stream_id=stream_id).count())
    values = {shown[k] for k in ("header", "heading", "caption", "rows")}
    return shown if values == {stored} else None


def test_live_and_final_counts_are_the_databases(page, server, people):
    stream_id = start_stream(server, people.owner, "stall", time_scale=0.3, stall_s=PAUSE_S)
    p = page(f"/streams/{stream_id}/")
    # the pause: the events before it are stored and no more come for PAUSE_S seconds
    wait_for(lambda: Event.objects.filter(stream_id=stream_id).count() >= 5, timeout=20)
    live = wait_for(lambda: agree(p, stream_id), timeout=PAUSE_S)
    assert live["status"] == "streaming"
    assert Stream.objects.get(pk=stream_id).status == "streaming"  # it was live, not after

    expect(p.locator("#stream-status")).to_have_attribute(
        "data-status", "completed", timeout=WAIT_MS
    )
    expect(p.locator("#timing-caption")).to_contain_text("Time since the previous event")
    final = wait_for(lambda: agree(p, stream_id), timeout=10)
    stream = Stream.objects.get(pk=stream_id)
    assert int(final["header"]) == stream.event_count > int(live["header"])


def test_a_stalled_attempts_caption_counts_its_stall(page, server, people):
    stream_id = start_stream(server, people.owner, "stall", time_scale=0.3, stall_s=60)
    p = page(f"/streams/{stream_id}/")
    expect(p.locator("#stream-status")).to_have_attribute("data-status", "stalled", timeout=WAIT_MS)
    stalls = Finding.objects.filter(stream_id=stream_id, code="stall").count()
    assert stalls == 1
    caption = p.locator("#timing-caption")
    expect(caption).to_contain_text("Marked: 1 stall", timeout=WAIT_MS)
    assert "No stall or buffered burst was flagged" not in caption.text_content()
    assert re.search(r"\b\d+ events\b", caption.text_content())
    wait_for(lambda: agree(p, stream_id), timeout=10)
