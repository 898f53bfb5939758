"""The scripts in Dutch, in real Chromium against a real Daphne: a browser whose language is
Dutch (Playwright's `locale="nl-NL"`, so its Accept-Language) gets pages in Dutch, and what the
scripts write (static/js/i18n.js: Django's JavaScript catalog, numbers in the page's language)
is Dutch too: the timing chart's caption with decimal commas, the replay's progress, the live
list's status words and the playground's figures and buttons. Data stays as it came (event
types, model ids, the model's text). No page logs a JavaScript error on the way.
"""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import TIMEOUT_MS, session_cookie
from tests.support.processes import start_stream
from tests.support.recording import seed_big_stream

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DECIMAL_COMMA = re.compile(r"\d,\d")

# What the playground's scripts wrote while an answer streamed (the server's rendering of the
# ended turn replaces it): every text of the rate figure and of the status badge.
PROBE = """
window.__seen = { rate: [], status: [] };
new MutationObserver(() => {
  const turn = document.querySelector(".pg-turn:last-child");
  if (!turn || !turn.dataset.active) return;
  const rate = turn.querySelector(".pg-rate b");
  const status = turn.querySelector(".pg-status");
  if (rate && rate.textContent) window.__seen.rate.push(rate.textContent);
  if (status && status.textContent) window.__seen.status.push(status.textContent);
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


@pytest.fixture
def dutch_page(browser, live_server_daphne):
    """A factory: a page of a Dutch browser logged in as `user`, open on `path`; its JavaScript
    errors (uncaught, and console errors) in `page.errors`."""
    contexts = []

    def open_page(user, path, init_script=None):
        context = browser.new_context(locale="nl-NL", viewport={"width": 1280, "height": 860})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        context.add_cookies([session_cookie(user, live_server_daphne.url)])
        page = context.new_page()
        if init_script:
            page.add_init_script(init_script)
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(e.stack or str(e)))
        page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
        page.goto(live_server_daphne.url + path)
        return page

    yield open_page
    for context in contexts:
        context.close()


def test_the_timeline_of_a_finished_stream_in_dutch(dutch_page, people):
    # 1.5 ms between events, one pause of 12.345 ms: the median and the longest have decimals
    gaps_us = [1500] * 300
    gaps_us[150] = 12_345
    stream = seed_big_stream(people.owner, n=len(gaps_us) + 1, gaps_us=gaps_us)
    page = dutch_page(people.owner, f"/streams/{stream.pk}/")
    assert page.evaluate("document.documentElement.lang") == "nl"
    page.wait_for_selector("#timing-chart canvas")
    caption = page.locator("#timing-caption")
    expect(caption).to_contain_text("Tijd sinds het vorige event: mediaan 1,50 ms")
    expect(caption).to_contain_text("langste 12,3 ms")
    expect(caption).to_contain_text("Sleep om in te zoomen")
    text = caption.text_content()
    assert "301 events in" in text, text
    assert DECIMAL_COMMA.search(text), text
    assert "Time since" not in text and "median" not in text, text
    # the event table's range, from the script (more rows than one window)
    expect(page.locator("#events-range")).to_contain_text("scrol voor meer")
    # the Markdown toggle, made by output.js
    expect(page.locator("#output-items .md-toggle").first).to_have_text("Ruw")
    # the replay: its button and progress, written by replay.js
    page.select_option("#replay-speed", "0")
    page.click("#replay-btn")
    expect(page.locator("#replay-state")).to_contain_text("afspelen", timeout=10_000)
    expect(page.locator("#replay-btn")).to_have_text("▶ Afspelen", timeout=10_000)
    # data stays data: the model's words as they came
    expect(page.locator("#output-items")).to_contain_text("w0 w1 w2")
    page.wait_for_timeout(300)  # uPlot draws in a microtask after construction
    assert page.errors == [], page.errors


def test_the_live_list_in_dutch(dutch_page, live_server_daphne, people):
    page = dutch_page(people.owner, "/")
    expect(page.locator("#list-live")).to_have_attribute("data-state", "live")
    # the catalog the scripts read is the page's language
    words = page.evaluate(
        """async () => {
            const { t, num } = await import("/static/js/i18n.js");
            const { statusWord } = await import("/static/js/vocabulary.js");
            return [t("reconnecting…"), num(1234.5, 1), statusWord("completed")];
        }"""
    )
    assert words == ["opnieuw verbinden…", "1\u202f234,5", "voltooid"], words
    stream_id = start_stream(live_server_daphne, people.owner, time_scale=0.3)
    badge = page.locator(f"#stream-row-{stream_id} [data-f=status]")
    expect(badge).to_have_text("voltooid", timeout=30_000)
    expect(badge).to_have_class(re.compile(r"\bcompleted\b"))  # the value stays the class
    assert page.errors == [], page.errors


def test_the_playground_in_dutch(dutch_page, people):
    page = dutch_page(people.owner, "/playground/", init_script=PROBE)
    page.select_option("#pg-scenario", "")
    page.select_option("#pg-speed", "1")
    page.fill("#pg-input", "Vertel me over Utrecht")
    page.press("#pg-input", "Enter")
    page.wait_for_selector(".pg-turn:last-child[data-status]:not([data-active])")
    assert page.get_attribute(".pg-turn:last-child", "data-status") == "completed"
    seen = page.evaluate("window.__seen")
    assert "streamt" in seen["status"] or "voltooid" in seen["status"], seen
    assert "streaming" not in seen["status"] and "completed" not in seen["status"], seen
    assert any(DECIMAL_COMMA.search(r) for r in seen["rate"]), seen
    assert not any("." in r for r in seen["rate"]), seen
    # the stop button's text is the script's
    assert page.locator("#pg-stop").text_content() == "Stoppen"
    assert page.errors == [], page.errors


def test_no_page_raises_a_script_error_in_dutch(dutch_page, people, site):
    """Every page of the site (the contrast check's list) in a Dutch browser: in Dutch, and no
    JavaScript error (a catalog string with a wrong placeholder, a number formatter given a
    string: a format error) while its scripts render, charts included."""
    failed = {}
    for name, path in site.items():
        page = dutch_page(people.staff, path)
        page.wait_for_load_state("networkidle")
        assert page.locator("html").get_attribute("lang") == "nl", name
        if page.errors:
            failed[name] = page.errors
    assert not failed, failed
