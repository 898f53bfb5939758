"""Every page at 1440 and 390 px wide, in the light and the dark theme, in one walk (each page
loads once per width and theme; a walk per check cost CI 85 s more):

- a screenshot in tests/e2e/screenshots/ (git-ignored: page-NAME-WIDTH.png,
  page-NAME-WIDTH-dark.png), so a reviewer can look at them after `make test`;
- no page scrolls sideways on a phone, raises a script error or breaks the
  Content-Security-Policy;
- every text is legible: WCAG AA contrast (4.5:1; 3:1 for text of 24 px, or 18.66 px bold) of
  each visible text's colour against its effective background (tests.support.contrast.TEXTS),
  with every <details> open, and on a timeline also with the waterfall zoomed and an event
  open. What it measured goes to tests/e2e/screenshots/contrast-THEME-WIDTH.json, lowest first.

The pages are tests/e2e/conftest.py's `site`: the demo seed (streams of every status over a
week) plus a stream with Markdown output in a session, and a conversation; and the login page.
The dark theme is the system's preference (prefers-color-scheme: dark). That the contrast
check can fail: tests/e2e/test_contrast_e2e.py."""

import json

import pytest

from tests.e2e.conftest import SCREENSHOTS, session_cookie
from tests.support.contrast import contrast_failures

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": (1440, 900), "phone": (390, 844)}


THEMES = {"light": "", "dark": "-dark"}  # the screenshots' name suffix


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("size", WIDTHS)
def test_every_page_at_desktop_and_phone_width(
    logged_in_page, people, site, screenshot, size, theme
):
    width, height = WIDTHS[size]
    suffix = THEMES[theme]
    problems = []
    report = {}
    pages = [(name, people.staff, path) for name, path in site.items()]
    pages.append(("login", None, "/login/"))
    for name, user, path in pages:
        page = logged_in_page(user, path=path, width=width, height=height, color_scheme=theme)
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(200)  # charts and Markdown render after load
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            problems.append(f"{name} scrolls sideways by {overflow} px at {width} px")
        if page.errors:
            problems.append(f"{name}: {page.errors}")
        if page.csp_violations:
            problems.append(f"{name} broke the Content-Security-Policy: {page.csp_violations}")
        screenshot(page, f"page-{name}-{width}{suffix}")
        report[name] = _contrast(page, name)
        page.context.close()
    SCREENSHOTS.mkdir(exist_ok=True)
    (SCREENSHOTS / f"contrast-{theme}-{width}.json").write_text(json.dumps(report, indent=1))
    problems += [
        f"{name}: contrast {f['ratio']} < {f['need']} {f['color']} on {f['background']} "
        f"{f['where']} {f['text']!r}"
        for name, found in report.items()
        for f in found["failures"]
    ]
    assert problems == []


def _contrast(page, name):
    """The page's texts' contrast (every <details> open); on a timeline also with the waterfall
    zoomed to the first token and an event open."""
    found = contrast_failures(page)
    assert found["checked"] > 5, (name, found)  # the check saw the page's texts
    if page.locator("#wf-start").count():
        page.locator("label[for=wf-start]").click()
        opened = page.locator("table.events .ev-open").first
        if opened.count():
            opened.click()
            page.wait_for_selector("tr.event-detail")
        more = contrast_failures(page)
        found["failures"] += more["failures"]
        if more["lowest"] and more["lowest"]["ratio"] < found["lowest"]["ratio"]:
            found["lowest"] = more["lowest"]
    return found


def test_the_csp_check_sees_a_refused_inline_script(logged_in_page, people, site):
    """The check above can fail: an inline script on a page is refused and reported, and the
    page's polling (htmx, no eval) still runs under the policy."""
    page = logged_in_page(people.staff, path=site["latency"])
    page.wait_for_load_state("networkidle")
    assert page.csp_violations == []
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.ran = true'; document.body.append(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("() => window.ran === undefined")
    assert any("script-src" in v for v in page.csp_violations), page.csp_violations


LIST_LAYOUT = """() => {
  const wrap = document.querySelector("#results .scroll-x");
  const picks = [...document.querySelectorAll("#streams .pick")];
  return {
    hidden: wrap.scrollWidth - wrap.clientWidth,
    lefts: [...new Set(picks.map((p) => Math.round(p.getBoundingClientRect().left)))],
    rows: picks.length,
  };
}"""


@pytest.mark.parametrize("locale", ["en-US", "nl-NL"])
def test_the_list_shows_every_column_at_1440_px_and_its_checkboxes_line_up(
    browser, live_server, people, site, locale
):
    """At 1440 px the streams list needs no sideways scroll to its last column (the prompt),
    in English and in Dutch (longer words), and the compare checkboxes sit in one column
    whatever the row (an id of more digits, a retry's row)."""
    context = browser.new_context(locale=locale, viewport={"width": 1440, "height": 900})
    context.add_cookies([session_cookie(people.staff, live_server.url)])
    page = context.new_page()
    page.goto(live_server.url + site["streams"])
    page.wait_for_load_state("networkidle")
    layout = page.evaluate(LIST_LAYOUT)
    context.close()
    assert layout["rows"] > 20
    assert layout["hidden"] <= 0, layout
    assert len(layout["lefts"]) == 1, layout


# The table cells of a page whose time ("5-12-2026 07:06 CET") or model name
# ("mistral-small-3.2") is laid out on more than one line.
BROKEN = """() => {
  const moment = /^\\d{1,4}-\\d{1,2}-\\d{1,4}( \\d{2}:\\d{2}(:\\d{2})?( \\S+)?)?$/;
  const model = /^(?=.*-)[a-z0-9][a-z0-9._-]*$/i;
  const broken = [];
  for (const cell of document.querySelectorAll("main table td, main table th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const text = n.textContent.trim();
      if (!moment.test(text) && !model.test(text)) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) broken.push(text);
    }
  }
  return broken;
}"""


@pytest.mark.parametrize("locale", ["en-US", "nl-NL"])
def test_analytics_tables_keep_times_and_model_names_on_one_line(
    browser, live_server, people, site, locale
):
    """A time or a model name in an analytics table reads on one line at 1440 px, not a word
    (or a part of a name) per line."""
    context = browser.new_context(locale=locale, viewport={"width": 1440, "height": 900})
    context.add_cookies([session_cookie(people.staff, live_server.url)])
    broken, checked = {}, 0
    for name in ("latency", "routing", "analytics", "usage"):
        page = context.new_page()
        page.goto(live_server.url + site.get(name, f"/{name}/"))
        page.wait_for_load_state("networkidle")
        page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        found = page.evaluate(BROKEN)
        checked += page.locator("main table").count()
        if found:
            broken[name] = found[:5]
        page.close()
    context.close()
    assert checked > 5
    assert not broken, broken
