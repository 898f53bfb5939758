"""The scripts in Dutch, in real Chromium against a real Daphne: a browser whose language is
Dutch (Playwright's `locale="nl-NL"`, so its Accept-Language) gets pages in Dutch, and what the
scripts write (static/js/i18n.js: Django's JavaScript catalog, numbers in the page's language)
is Dutch too: the timing chart's caption with decimal commas, the replay's progress, the live
list's status words and the playground's figures and buttons. Data stays as it came (event
types, model ids, the model's text). No page logs a JavaScript error on the way.
"""

import datetime as dt
import re
import zoneinfo

import pytest
from django.utils import translation
from playwright.sync_api import expect

from dashboard import dates
from tests.e2e.conftest import TIMEOUT_MS, session_cookie
from tests.support.i18n import (
    OTHER_DATE_FORM,
    UTC_TIME,
    english_kept,
    english_left,
    english_words,
    is_recorded,
    misgrouped,
    recorded_data,
)
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


WRITTEN = """async (ts) => {
  const { fmtTime, zoneTicks } = await import("/static/js/time.js");
  return ts.map((t) => [
    fmtTime(t), fmtTime(t, { seconds: true }), zoneTicks(null, [t], 0, 0, 86400)[0],
  ]);
}"""


@pytest.mark.parametrize("language", ["en", "nl"])
def test_the_scripts_write_a_moment_as_the_server_does(
    browser, live_server_daphne, people, language
):
    """time.js (chart ticks and legends) and the templates (dashboard/dates.py) write the same
    moment alike, in the page's language and zone: one set of forms, two writers."""
    moments = [
        dt.datetime(2026, 3, 29, 0, 59, 59, tzinfo=dt.UTC),  # the last second of CET
        dt.datetime(2026, 3, 29, 1, 0, 0, tzinfo=dt.UTC),  # the first of CEST
        dt.datetime(2026, 12, 5, 6, 7, 8, tzinfo=dt.UTC),
        dt.datetime(2027, 1, 9, 23, 30, tzinfo=dt.UTC),
    ]
    context = browser.new_context(locale="nl-NL" if language == "nl" else "en-US")
    url = live_server_daphne.url
    zone = {"name": "streamscope_tz", "value": ZONE, "url": url}
    context.add_cookies([session_cookie(people.owner, url), zone])
    page = context.new_page()
    page.goto(url + "/views/")
    written = page.evaluate(WRITTEN, [int(m.timestamp()) for m in moments])
    context.close()
    with translation.override(language):
        expected = [
            [
                dates.write(local, "minute"),
                dates.write(local, "second"),
                dates.write(local, "axis_day"),
            ]
            for local in (m.astimezone(zoneinfo.ZoneInfo(ZONE)) for m in moments)
        ]
    assert written == expected
    assert ("5 dec" if language == "nl" else "Dec 5") in written[2][2]


# Every text a reader sees once the scripts ran: text nodes (outside scripts, styles and
# code), the attributes a browser shows, and what uPlot draws on its canvas (each axis's name
# and tick labels, each series' name), which no text node holds.
SEEN = """() => {
  const skip = "script, style, template, textarea, pre, code, noscript";
  const texts = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.replace(/\\s+/g, " ").trim();
    if (text && !n.parentElement.closest(skip)) texts.push(text);
  }
  for (const el of document.querySelectorAll("[title], [placeholder], [aria-label], [alt]")) {
    for (const name of ["title", "placeholder", "aria-label", "alt"]) {
      const value = (el.getAttribute(name) || "").trim();
      if (value) texts.push(value);
    }
  }
  const charts = [];
  for (const el of document.querySelectorAll("[data-chart]")) {
    const u = el._uplot;
    if (!u) continue;
    for (const axis of u.axes) {
      if (axis.label) charts.push(axis.label);
      for (const v of axis._values || []) if (v) charts.push(...String(v).split("\\n"));
    }
    for (const s of u.series) if (s.label) charts.push(s.label);
  }
  return { texts, charts };
}"""
ZONE = "Europe/Amsterdam"


def test_every_page_in_dutch_in_the_browser(browser, live_server_daphne, people, site):
    """Every page of the site (the contrast check's list) in a Dutch and an English browser in
    Amsterdam, once the scripts ran: the Dutch page is in Dutch, charts included (the axes'
    names and ticks, the series' names: the i18n walk of tests/dashboard/test_i18n.py cannot see
    what the scripts draw), its dates in Dutch forms and figures grouped by the one rule, no time
    named UTC, and no JavaScript error (a catalog string with a wrong placeholder, a number
    formatter given a string) while its scripts render."""
    problems, drawn, pages = [], 0, {}
    for name, path in site.items():
        seen = pages[name] = {}
        for language, locale in (("en", "en-US"), ("nl", "nl-NL")):
            context = browser.new_context(
                locale=locale, timezone_id=ZONE, viewport={"width": 1280, "height": 860}
            )
            context.set_default_timeout(TIMEOUT_MS)
            url = live_server_daphne.url
            zone = {"name": "streamscope_tz", "value": ZONE, "url": url}
            context.add_cookies([session_cookie(people.staff, url), zone])
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda e, errors=errors: errors.append(e.stack or str(e)))
            page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
            page.goto(url + path)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)  # uPlot draws in a microtask after construction
            assert page.locator("html").get_attribute("lang") == language, name
            found = page.evaluate(SEEN)
            drawn += len(found["charts"])
            seen[language] = found["texts"] + found["charts"]
            if errors:
                problems.append(f"{name} ({language}): {errors}")
            context.close()
    data = recorded_data()  # (after the walk: the pages made what they make on first sight)
    for name, seen in pages.items():
        problems += _problems(name, seen, data)
    assert drawn > 50, drawn  # the walk saw the charts' labels
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(sorted(set(problems)))


def _problems(name, seen, data):
    """What a page shows wrong in either language (`seen`: its texts in each)."""
    problems = []
    same, words = set(seen["en"]), english_words(seen["en"])
    for language in ("en", "nl"):
        for text in seen[language]:
            if is_recorded(text, data):
                continue
            if language == "nl":
                left = english_left(text, data) if text in same else []
                if left := left or english_kept(text, words, data):
                    problems.append(f"{name}: English left: {text!r} ({', '.join(left)})")
            if OTHER_DATE_FORM[language].search(text):
                problems.append(f"{name} ({language}): a date in the other form: {text!r}")
            if bad := misgrouped(text, language):
                problems.append(f"{name} ({language}): figures {bad} in {text!r}")
            if UTC_TIME.search(text):
                problems.append(f"{name} ({language}): a time in UTC: {text!r}")
    return problems
