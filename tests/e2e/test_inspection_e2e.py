"""The stream inspection pages in real Chromium against a real Daphne (and the simulator
process): the timeline grows while the stream runs, a late joiner gets the whole text, a stall
shows its status and links the retry, model output stays inert (live and in a replay), a
100 000-event stream opens fast and scrolls, and the list takes new streams live.

Logged in through the login form. Screenshots go to tests/e2e/screenshots/ (git-ignored)."""

import re
import time

import pytest
from django.template.defaultfilters import floatformat
from playwright.sync_api import expect

from dashboard.templatetags.inspection import count, duration
from streams.models import Stream
from tests.conftest import DaphneServer
from tests.support.processes import start_stream, wait_for
from tests.support.recording import seed_big_stream

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery"
WAIT_MS = 20_000  # for what a stream does: it takes seconds, and the machine is shared
STALL_TIMEOUT_S = 1.5
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def server(django_db_setup, simulator_process, _relay_db_connections):
    """Daphne with a short stall timeout and one stall retry, so a stall takes seconds."""
    server = DaphneServer(
        simulator_process.base_url,
        overrides={"STALL_TIMEOUT_S": STALL_TIMEOUT_S, "STALL_MAX_ATTEMPTS": 2},
    )
    yield server
    server.stop()


@pytest.fixture
def owner(people):
    people.owner.set_password(PASSWORD)
    people.owner.save()
    return people.owner


class Browser:
    """A page logged in through the login form, with the dialogs and errors it saw."""

    def __init__(self, browser, server, user, path="/", width=1400, height=900):
        self.server = server
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.context.set_default_timeout(30_000)
        self.page = self.context.new_page()
        self.dialogs = []
        self.errors = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(e.stack or str(e)))
        self.page.goto(f"{server.url}/login/?next={path}")
        self.page.fill("#id_username", user.username)
        self.page.fill("#id_password", PASSWORD)
        self.page.click("main button[type=submit]")  # (the top bar has buttons too)
        self.page.wait_for_url(f"**{path}")

    def open(self, path):
        self.page.goto(self.server.url + path)

    def close(self):
        self.context.close()


@pytest.fixture
def chromium(browser, server, owner):
    opened = []

    def open_browser(path="/", **kwargs):
        b = Browser(browser, server, owner, path, **kwargs)
        opened.append(b)
        return b

    yield open_browser
    for b in opened:
        assert b.errors == [], b.errors
        b.close()


def output_text(page):
    return page.evaluate(
        "[...document.querySelectorAll('#output-items .part-output_text > .text')]"
        ".map((e) => e.textContent).join('')"
    )


def status(page):
    return page.get_attribute("#stream-status", "data-status")


class TestTimelineLive:
    def test_the_text_grows_before_the_terminal_event(self, chromium, server, owner, screenshot):
        b = chromium()
        # long enough (≈ 10 s) that the page sees it grow even when the machine is busy
        stream_id = start_stream(server, owner, time_scale=3, sentences=10)
        b.open(f"/streams/{stream_id}/")
        page = b.page
        samples = []  # (text length, page status, terminal reached in the database)
        while True:
            text = output_text(page)
            terminal = Stream.objects.filter(pk=stream_id, terminal_us__isnull=False).exists()
            samples.append((len(text), status(page), terminal))
            if samples[-1][1] == "streaming" and len({s[0] for s in samples if s[0]}) == 3:
                screenshot(page, "timeline_live")
            if samples[-1][1] == "completed":
                break
            assert len(samples) < 600, samples[-5:]
            time.sleep(0.05)
        growing = [n for n, s, terminal in samples if n and s == "streaming" and not terminal]
        assert len(set(growing)) >= 3, samples  # several intermediate states, before the end
        assert growing == sorted(growing)
        stream = Stream.objects.get(pk=stream_id)
        expect(page.locator("#output .part-output_text .text")).to_have_text(
            stream.output_text, timeout=WAIT_MS
        )
        # the summary is the server's once it ended; the table followed the events
        expect(page.locator("[data-field=event_count]").first).to_have_text(str(stream.event_count))
        expect(page.locator(f"#ev-{stream.event_count - 1}")).to_be_attached()
        expect(page.locator(".wf-bar.wf-terminal").first).to_be_attached()
        expect(page.locator("#timing-caption")).to_contain_text(
            "Time since the previous event", timeout=WAIT_MS
        )
        screenshot(page, "timeline_completed")

    def test_a_late_joiner_gets_the_whole_text(self, chromium, server, owner):
        b = chromium()
        stream_id = start_stream(server, owner, time_scale=1.5)
        wait_for(lambda: Stream.objects.filter(pk=stream_id, event_count__gte=15).exists())
        b.open(f"/streams/{stream_id}/")
        expect(b.page.locator("#stream-status")).to_have_attribute(
            "data-status", "completed", timeout=WAIT_MS
        )
        stream = Stream.objects.get(pk=stream_id)
        assert stream.event_count >= 15
        expect(b.page.locator("#output .part-output_text .text")).to_have_text(
            stream.output_text, timeout=WAIT_MS
        )

    def test_a_stall_shows_its_status_and_links_the_retry(
        self, chromium, server, owner, screenshot
    ):
        b = chromium()
        stream_id = start_stream(server, owner, "stall", time_scale=0.5, stall_s=30)
        b.open(f"/streams/{stream_id}/")
        page = b.page
        expect(page.locator("#stream-status")).to_have_attribute(
            "data-status", "stalled", timeout=WAIT_MS
        )
        expect(page.locator(".error-box")).to_contain_text(f"no event for {STALL_TIMEOUT_S:g} s")
        retry = page.locator("a.retry-next")
        expect(retry).to_be_visible(timeout=WAIT_MS)
        retry_id = Stream.objects.get(first_attempt_id=stream_id).pk
        assert retry.get_attribute("href") == f"/streams/{retry_id}/"
        screenshot(page, "timeline_stalled")
        retry.click()
        page.wait_for_url(f"**/streams/{retry_id}/")
        expect(page.locator(f'ol.attempts a[href="/streams/{stream_id}/"]')).to_be_visible()
        expect(page.locator("#stream-status")).to_have_attribute(
            "data-status", "stalled", timeout=WAIT_MS
        )

    def test_model_output_stays_inert_live_and_in_a_replay(self, chromium, server, owner):
        b = chromium()
        stream_id = start_stream(server, owner, "xss", time_scale=0.5)
        b.open(f"/streams/{stream_id}/")
        page = b.page
        expect(page.locator("#output-items")).to_contain_text(XSS, timeout=WAIT_MS)
        expect(page.locator("#stream-status")).to_have_attribute(
            "data-status", "completed", timeout=WAIT_MS
        )
        expect(page.locator("#output-items")).to_contain_text("<script>alert(1)</script>")
        # a replay rebuilds the text with the same renderer
        page.select_option("#replay-speed", "0")
        page.click("#replay-btn")
        expect(page.locator("#replay-state")).to_contain_text("replay finished", timeout=WAIT_MS)
        # the raw data of the event that carried it
        index = page.evaluate(
            "[...document.querySelectorAll('#events-body tr.event')]"
            ".find((r) => r.textContent.includes('onerror')).dataset.index"
        )
        page.click(f"#ev-{index} .ev-open")
        expect(page.locator(f"#evd-{index} pre.verbatim")).to_contain_text(XSS)
        assert page.locator("#output img, #output script, #events-body img").count() == 0
        page.wait_for_timeout(300)
        assert b.dialogs == []


class TestTimingChart:
    @pytest.mark.parametrize(
        "gaps_ms",
        [
            # CI's late joiner: a 0.0952 ms axis floor made uPlot's log splits loop
            [0.952, 216.016, 3.1, 4.2, 5.3, 6.4, 7.5, 8.6, 9.7],
            [0.0829, 0.5, 2160.16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            [0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001],
            [10.0, 100.0, 1000.0, 0.01, 0.1, 1.0, 99999.0, 0.37, 42.0],
        ],
    )
    def test_any_gap_range_draws_without_errors(self, chromium, owner, gaps_ms):
        gaps_us = [round(g * 1000) for g in gaps_ms]
        stream = seed_big_stream(owner, n=len(gaps_us) + 1, gaps_us=gaps_us)
        b = chromium()
        b.open(f"/streams/{stream.pk}/")
        b.page.wait_for_selector("#timing-chart canvas")
        b.page.wait_for_timeout(300)  # uPlot draws in a microtask after construction
        assert b.errors == []


class TestBigStream:
    def test_100k_events_open_and_scroll(self, chromium, owner, screenshot):
        """How long it takes is `bench timeline`'s to say (a busy CI machine made 2.23 s of a
        page that opens in ~1 s): here, that it opens whole, draws from the outline, and
        scrolls with a bounded DOM; the page's reads are bounded in
        tests/streams/store/test_outline.py (only the blocks a window needs are decoded)."""
        stream = seed_big_stream(owner)
        b = chromium()
        page = b.page
        started = time.perf_counter()
        b.open(f"/streams/{stream.pk}/")
        page.wait_for_selector("#events-body tr.event")
        page.wait_for_selector("#timing-chart canvas")
        expect(page.locator("#timing-caption")).to_contain_text("100 000 events")
        elapsed = time.perf_counter() - started
        print(f"100k-event timeline ready in {elapsed:.2f} s")
        expect(page.locator("#timing-caption")).to_contain_text("1 stall")
        # drawn from the stream's outline (one event a dot-sized cell), and the caption says so
        expect(page.locator("#timing-caption")).to_contain_text("read from a histogram")
        screenshot(page, "timeline_100k")

        # scrolling the table loads the next windows and keeps the DOM bounded
        box = page.locator("#events-scroll")
        last_index = (
            "Math.max(...[...document.querySelectorAll('#events-body tr.event')]"
            ".map((r) => +r.dataset.index))"
        )
        deadline = time.monotonic() + 15
        while page.evaluate(last_index) < 999:
            assert time.monotonic() < deadline, page.evaluate(last_index)
            box.evaluate("(e) => { e.scrollTop = e.scrollHeight; }")
            page.wait_for_timeout(100)
        assert page.locator("#events-body tr.event").count() <= 1000

        # a finding jumps to its event: the window around it, highlighted
        page.click(f'a[data-jump="{stream.event_count // 2}"]')
        row = page.locator(f"#ev-{stream.event_count // 2}")
        expect(row).to_have_class(re.compile(r"\btarget\b"))
        expect(row).to_be_in_viewport()
        # and the rows open to their data
        row.locator(".ev-open").click()
        expect(page.locator(f"#evd-{stream.event_count // 2} pre.json")).to_contain_text(
            '"sequence_number": 50000'
        )


class TestStreamList:
    def test_new_streams_appear_and_update_live(self, chromium, server, owner, screenshot):
        old = Stream.objects.create(user=owner, status="failed", prompt="an old failure")
        b = chromium()
        page = b.page
        expect(page.locator(f"#stream-row-{old.pk}")).to_be_visible()
        expect(page.locator("#list-live")).to_have_attribute("data-state", "live")
        stream_id = start_stream(server, owner, time_scale=1)
        row = page.locator(f"#stream-row-{stream_id}")
        expect(row).to_be_visible(timeout=WAIT_MS)
        expect(row.locator("[data-f=status]")).to_have_text("completed", timeout=WAIT_MS)
        expect(row.locator("[data-f=ttft_ms]")).not_to_have_text("—")
        # the figures are the server's rendering of the row (fetched again as it changed)
        stream = Stream.objects.get(pk=stream_id)
        expect(row.locator("[data-f=event_count]")).to_have_text(count(stream.event_count))
        expect(row.locator("[data-f=ttft_ms]")).to_have_text(floatformat(stream.ttft_ms, 0))
        expect(row.locator("[data-f=duration_ms]")).to_have_text(duration(stream.duration_ms))
        screenshot(page, "stream_list")

        # filters swap the results and keep the URL
        page.select_option("select[name=status]", "failed")
        expect(page.locator(f"#stream-row-{stream_id}")).to_have_count(0)
        expect(page.locator(f"#stream-row-{old.pk}")).to_be_visible()
        assert "status=failed" in page.url
        # the row is a link to its timeline
        page.locator(f"#stream-row-{old.pk} td.model").click()
        page.wait_for_url(f"**/streams/{old.pk}/")
