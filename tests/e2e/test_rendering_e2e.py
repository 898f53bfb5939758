"""Rendering that keeps up, and Markdown that executes nothing (issue 19), in real Chromium.

- Keeping up: the simulator's `huge_delta` (one 1 MB delta) and `fast` (10,000 events as fast
  as it can) through the playground. The page must show "completed" within 1 s of the
  server's terminal event, and no task may hold the main thread over 100 ms
  (PerformanceObserver "longtask", from the send on; the bound grows with the machine's load
  per core when its cores are oversubscribed, see long_task_bound_ms).
  Clocks: the server stamps the terminal event's `received_at` from the wall clock when its
  bytes arrive; the page records `performance.timeOrigin + performance.now()` (the same wall
  clock, on the same machine) when the status badge first reads "completed". The difference
  is the real delay a person sees: commit, relay, parsing and rendering.
- Markdown: message text renders as Markdown on the timeline and in the playground, with a
  "Raw" toggle; a payload set (`javascript:` and `data:` links, `<img onerror>`, raw
  `<script>`, autolinks) yields no element that could run anything, no dialog, no error.
"""

import os

import pytest
from playwright.sync_api import expect

from dashboard.models import Conversation, Turn
from streams.ingest.importer import import_capture
from streams.models import Event, Stream
from tests.support.browser import LAST, Playground
from tests.support.captures import MARKDOWN, text_capture
from tests.support.recording import seed_big_stream

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

KEEP_UP_MS = 1000
LONG_TASK_MS = 100

# Installed before any page script: long tasks and the moment the last answer reads
# "completed", both on the page's own clock turned into wall-clock epoch milliseconds.
PROBE = """
window.__longTasks = [];
window.__completedAt = null;
window.__since = Infinity;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]);
}).observe({ type: "longtask", buffered: true });
new MutationObserver(() => {
  if (window.__completedAt !== null) return;
  const badge = document.querySelector(".pg-turn:last-child .pg-status");
  if (badge && badge.textContent.trim() === "completed") {
    window.__completedAt = performance.timeOrigin + performance.now();
  }
}).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
"""


@pytest.fixture
def probed(browser, live_server_daphne, owner):
    pages = []

    def open_page(**kwargs):
        pg = Playground(browser, live_server_daphne, owner, **kwargs)
        pg.page.add_init_script(PROBE)
        pg.page.reload()
        pages.append(pg)
        return pg

    yield open_page
    for pg in pages:
        pg.close()


def long_task_bound_ms(bound_ms=LONG_TASK_MS):
    """`bound_ms` (a long task's 100 ms) on a machine with a core to spare; scaled by how
    oversubscribed its cores are (the 1-minute load average per core) when they are not: wall
    time in Chromium grows with the run queue, and the test must measure the page, not the
    neighbours."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return bound_ms * max(1.0, load)


def terminal_received_ms(stream_id):
    event = (
        Event.objects.filter(stream_id=stream_id, type="response.completed")
        .order_by("-index")
        .first()
    )
    assert event is not None and event.received_at is not None
    return event.received_at.timestamp() * 1000


@pytest.mark.parametrize("scenario", ["huge_delta", "fast"])
def test_a_huge_or_fast_answer_keeps_up(probed, scenario):
    pg = probed()
    page = pg.page
    page.evaluate("window.__since = performance.now()")
    stream_id = pg.send("Tell me about Utrecht", scenario=scenario, speed="0")
    assert pg.wait_ended() == "completed"
    stream = Stream.objects.get(pk=stream_id)
    assert stream.status == "completed"
    if scenario == "fast":
        assert stream.event_count >= 10_000

    completed_at = page.evaluate("window.__completedAt")
    assert completed_at is not None
    delay_ms = completed_at - terminal_received_ms(stream_id)
    # shown after the server had it, soon after (CI runs these beside the PostgreSQL tier)
    keep_up_ms = long_task_bound_ms(KEEP_UP_MS)
    assert -50 < delay_ms < keep_up_ms, (delay_ms, keep_up_ms)

    assert page.evaluate("PerformanceObserver.supportedEntryTypes.includes('longtask')")
    tasks = page.evaluate("window.__longTasks.filter(([start]) => start >= window.__since)")
    bound = long_task_bound_ms()
    assert [d for _, d in tasks if d > bound] == [], (bound, tasks)

    # A long answer is collapsed as on the timeline: its head laid out, the rest one click away.
    if scenario == "huge_delta":
        assert page.locator(f"{LAST} button.show-rest").count() == 1
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height < 20_000, height
    pg.shot(f"playground-{scenario}")


# ---- Markdown ----------------------------------------------------------------------------------

PAYLOADS = (
    "\n\n[x](javascript:alert(1)) [y](JaVaScRiPt:alert(2))"
    " [z](data:text/html,<script>alert(3)</script>)"
    "\n\n![i](data:image/png;base64,iVBORw0KGgo=) ![j](https://example.org/pixel.png)"
    "\n\n<img src=x onerror=alert(4)> <script>alert(5)</script>"
    ' <a href="javascript:alert(6)">a</a>'
    "\n\n<javascript:alert(7)> [m](mailto:someone@example.org)"
    '\n\n<svg onload=alert(8)></svg> <iframe src="javascript:alert(9)"></iframe>\n'
)


# Elements and attributes in `root` that could run or fetch anything.
DANGER = """(root) => {
  const URLS = ["href", "src", "action", "formaction", "xlink:href"];
  const TAGS = ["SCRIPT", "IMG", "IFRAME", "SVG", "OBJECT", "EMBED", "STYLE"];
  const found = [];
  for (const node of root.querySelectorAll("*")) {
    for (const attr of node.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith("on")) found.push(`${node.tagName} ${name}`);
      const safe = /^(https?:|mailto:)/i.test(attr.value.trim());
      if (URLS.includes(name) && !safe) found.push(`${node.tagName} ${name}=${attr.value}`);
    }
    if (TAGS.includes(node.tagName.toUpperCase())) found.push(node.tagName);
  }
  return found;
}"""


def check_markdown(page, root):
    body = page.locator(f"{root} .part-output_text .md-body")
    expect(body.locator("h1")).to_have_text("Heading")
    expect(body.locator("strong").first).to_have_text("bold")
    expect(body.locator("li")).to_have_count(2)
    expect(body.locator("table td")).to_have_count(2)
    expect(body.locator("pre code")).to_contain_text("print('hi')")
    hrefs = body.locator("a").evaluate_all("(links) => links.map((a) => a.getAttribute('href'))")
    assert hrefs == [
        "https://example.org/docs",
        "https://example.org/auto",
        "https://example.org/bare",
        "https://example.org/pixel.png",  # images are off: an http(s) image is a plain link
        "mailto:someone@example.org",
    ], hrefs
    rels = body.locator("a").evaluate_all("(links) => links.map((a) => a.rel)")
    assert set(rels) == {"noopener noreferrer nofollow"}
    assert body.evaluate(DANGER) == []
    # what was not made a link or an element is there as text
    text = body.inner_text()
    assert "<img src=x onerror=alert(4)>" in text and "<script>alert(5)</script>" in text
    assert "[x](javascript:alert(1))" in text

    # "Raw" shows the text exactly as sent; "Formatted" goes back
    toggle = page.locator(f"{root} .part-output_text .md-toggle")
    toggle.click()
    raw = page.locator(f"{root} .part-output_text > .text")
    expect(raw).to_be_visible()
    assert raw.inner_text().startswith("# Heading")
    expect(body).to_be_hidden()
    toggle.click()
    expect(body).to_be_visible()


def test_the_timeline_renders_markdown_and_runs_nothing(logged_in_page, people, screenshot):
    (stream,) = import_capture(text_capture(MARKDOWN + PAYLOADS), "markdown.sse", user=people.owner)
    dialogs = []
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    check_markdown(page, "#output-items")
    page.wait_for_timeout(300)  # an onerror or onload would have fired by now
    assert dialogs == [] and page.errors == []
    screenshot(page, "timeline_markdown")


def test_the_playground_renders_markdown_and_runs_nothing(browser, live_server_daphne, owner):
    (stream,) = import_capture(text_capture(MARKDOWN + PAYLOADS), "markdown.sse", user=owner)
    conversation = Conversation.objects.create(user=owner, title="Markdown")
    Turn.objects.create(conversation=conversation, position=0, prompt="Markdown", stream=stream)
    pg = Playground(browser, live_server_daphne, owner)
    pg.page.goto(f"{live_server_daphne.url}/playground/{conversation.pk}/")
    check_markdown(pg.page, LAST)
    pg.page.wait_for_timeout(300)
    assert pg.dialogs == []
    pg.close()


def test_a_live_answer_renders_markdown_as_it_streams(probed):
    pg = probed()
    page = pg.page
    pg.send("Show me some markup", scenario="xss", speed="1")
    page.wait_for_selector(f"{LAST}[data-active] .md-body p")
    assert page.locator(f"{LAST} .pg-answer").evaluate(DANGER) == []
    assert pg.wait_ended() == "completed"
    assert page.locator(f"{LAST} .md-body").count() == 1  # the server's rendering, enhanced
    assert page.locator(f"{LAST} .pg-answer").evaluate(DANGER) == []
    assert pg.dialogs == []


# ---- the inter-event chart's "0" lane ------------------------------------------------------------


def test_zero_gaps_get_their_own_lane_on_the_timing_chart(logged_in_page, people, screenshot):
    # A fast stream: most events arrive in the same read as the one before (0 µs apart).
    gaps_us = [0 if i % 10 else 1500 for i in range(5000)]
    stream = seed_big_stream(people.owner, n=len(gaps_us) + 1, gaps_us=gaps_us)
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    page.wait_for_selector("#timing-chart canvas")
    scale = page.evaluate(
        """async () => {
            const { gapScale } = await import("/static/js/stream_detail/timing_chart.js");
            return [gapScale([[0, 0.5, 20]]), gapScale([[0.5, 20]]), gapScale([[]])];
        }"""
    )
    with_zero, without, empty = scale
    # the lane sits a decade under the smallest gap above zero; the axis stops there
    assert with_zero["lane"] == 0.01 and with_zero["splits"] == [0.01, 0.1, 1, 10, 100]
    assert without["lane"] is None and without["splits"] == [0.1, 1, 10, 100]
    assert empty["splits"] == [1, 10]
    page.wait_for_timeout(300)  # uPlot draws in a microtask after construction
    assert page.errors == []
    screenshot(page, "timeline_zero_gaps")


# ---- compare mode ------------------------------------------------------------------------------


def test_compare_streams_two_models_side_by_side(browser, live_server_daphne, owner):
    pg = Playground(browser, live_server_daphne, owner, width=1440)
    page = pg.page
    page.goto(f"{live_server_daphne.url}/playground/compare/")
    page.uncheck("input[name=models][value=auto]")
    page.check("input[name=models][value=gpt-oss-20b]")
    page.check("input[name=models][value=gpt-oss-120b]")
    page.select_option("#cmp-speed", "0.25")
    page.fill("#cmp-input", "Tell me about Utrecht")
    page.click("#cmp-send")
    columns = page.locator(".cmp-col")
    expect(columns).to_have_count(2)
    expect(page.locator("#cmp-summary-text")).to_contain_text("Fastest to the end", timeout=30_000)
    ids = [int(c.get_attribute("data-stream")) for c in columns.all()]
    streams = {s.pk: s for s in Stream.objects.filter(pk__in=ids)}
    assert sorted(streams[i].requested_model for i in ids) == ["gpt-oss-120b", "gpt-oss-20b"]
    assert all(s.status == "completed" for s in streams.values())
    for column, pk in zip(columns.all(), ids, strict=True):
        stream = streams[pk]
        assert column.locator('dd[data-f="event_count"]').inner_text() == str(stream.event_count)
        assert column.locator(".md-body").inner_text().strip() != ""
        assert column.locator("a.pg-timeline").get_attribute("href") == f"/streams/{pk}/"
    fastest = min(streams.values(), key=lambda s: s.ttft_ms)
    summary = page.inner_text("#cmp-summary-text")
    assert f"Fastest to the first token: {fastest.requested_model}" in summary
    pg.shot("compare")
    pg.close()
