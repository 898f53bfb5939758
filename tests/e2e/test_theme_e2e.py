"""The light and dark themes in Chromium (static/js/theme.js, app.css's two colour sets):
the system's preference applies without scripts; the top bar's choice (light / dark / system)
is remembered in localStorage, applied before the first paint, and redraws the charts; the
dark palette of model colours is app.css's, and reads on the dark card."""

import pytest

from tests.e2e.conftest import THEME_KEY, session_cookie

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LIGHT_BG = "rgb(246, 247, 249)"  # --bg
DARK_BG = "rgb(15, 20, 27)"
BODY_BG = "() => getComputedStyle(document.body).backgroundColor"
# the theme on <html> when <body> was first parsed: before anything is painted
AT_FIRST_PAINT = """new MutationObserver((_, seen) => {
  if (!document.body) return;
  window.themeAtBody = document.documentElement.getAttribute("data-theme");
  seen.disconnect();
}).observe(document, { childList: true, subtree: true });"""


def test_the_system_preference_applies_without_scripts(browser, live_server, people):
    context = browser.new_context(java_script_enabled=False, color_scheme="dark")
    context.add_cookies([session_cookie(people.owner, live_server.url)])
    page = context.new_page()
    page.goto(live_server.url + "/")
    # no scripts: read through a locator (page.evaluate needs them)
    body = page.locator("body")
    assert body.evaluate("(b) => getComputedStyle(b).backgroundColor") == DARK_BG
    # the toggle needs the script: without it, it is not offered
    assert not page.locator("label.theme").is_visible()
    context.close()


def test_the_toggle_remembers_and_redraws(logged_in_page, people, site):
    page = logged_in_page(people.staff, path=site["routing"], color_scheme="light")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(BODY_BG) == LIGHT_BG
    toggle = page.locator("#theme-choice")
    assert toggle.is_visible() and toggle.input_value() == "system"
    mark = "() => document.querySelectorAll('[data-chart]').forEach((c) => { c._uplot.old = 1; })"
    redrawn = (
        "() => [...document.querySelectorAll('[data-chart]')]"
        ".map((c) => !!c._uplot && !c._uplot.old)"
    )
    page.evaluate(mark)

    toggle.select_option("dark")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.evaluate(BODY_BG) == DARK_BG
    assert page.evaluate(f"localStorage.getItem({THEME_KEY!r})") == "dark"
    assert page.evaluate(redrawn) and all(page.evaluate(redrawn))

    # remembered: the next page is dark from its first paint, and says so in the toggle
    page.context.add_init_script(AT_FIRST_PAINT)
    page.goto(page.url.split("/routing/")[0] + "/")
    assert page.evaluate("window.themeAtBody") == "dark"
    assert page.locator("#theme-choice").input_value() == "dark"

    # "system" forgets the choice and follows the system, as it changes
    page.goto(page.url.rstrip("/") + site["routing"])
    page.wait_for_load_state("networkidle")
    page.locator("#theme-choice").select_option("system")
    assert page.evaluate("document.documentElement.hasAttribute('data-theme')") is False
    assert page.evaluate(f"localStorage.getItem({THEME_KEY!r})") is None
    assert page.evaluate(BODY_BG) == LIGHT_BG
    page.evaluate(mark)
    page.emulate_media(color_scheme="dark")
    page.wait_for_function(f"() => getComputedStyle(document.body).backgroundColor === {DARK_BG!r}")
    page.wait_for_function(f"() => ({redrawn})().every(Boolean)")

    # light wins over a dark system
    page.locator("#theme-choice").select_option("light")
    assert page.evaluate(BODY_BG) == LIGHT_BG
    assert page.errors == [] and page.csp_violations == []


PALETTES = """async () => {
  const { PALETTE, PALETTE_DARK, colorFor } = await import("/static/js/palette.js");
  const root = getComputedStyle(document.documentElement);
  const css = PALETTE.map((_, i) => root.getPropertyValue(`--model-${i}`).trim().toUpperCase());
  return { PALETTE, PALETTE_DARK, css, card: root.getPropertyValue("--card").trim(),
           auto: colorFor("auto") };
}"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_model_palette_is_the_css_one(logged_in_page, people, theme):
    page = logged_in_page(people.owner, path="/", color_scheme="light", theme=theme)
    found = page.evaluate(PALETTES)
    palette = found["PALETTE_DARK" if theme == "dark" else "PALETTE"]
    assert found["css"] == palette  # app.css's --model-N are palette.js's, in both themes
    assert found["auto"] in palette
    assert len(set(palette)) == len(palette) == 10


def test_the_dark_palette_reads_on_the_dark_card(logged_in_page, people):
    """Each model colour at least 3:1 (WCAG's non-text contrast) on the dark card, as the
    light ones are, but for two of Okabe & Ito's own (orange, sky blue), on white."""
    from tests.support.contrast import COLOUR_JS

    page = logged_in_page(people.owner, path="/", theme="dark")
    ratios = page.evaluate(
        "async () => {"
        + COLOUR_JS
        + """
      const { PALETTE_DARK } = await import("/static/js/palette.js");
      const card = getComputedStyle(document.documentElement).getPropertyValue("--card").trim();
      const rgb = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
      return PALETTE_DARK.map((c) => [c, ratio(rgb(c), rgb(card))]);
    }"""
    )
    assert all(r >= 3 for _, r in ratios), ratios


# every custom property app.css sets on :root, as computed now
PROPERTIES = """() => {
  const names = new Set();
  const walk = (rules) => { for (const r of rules) {
    if (r.cssRules) walk(r.cssRules);
    if (r.style) for (const p of r.style) if (p.startsWith("--")) names.add(p);
  } };
  for (const sheet of document.styleSheets) walk(sheet.cssRules);
  const root = getComputedStyle(document.documentElement);
  return Object.fromEntries([...names].sort().map((n) => [n, root.getPropertyValue(n).trim()]));
}"""


def test_both_ways_to_dark_give_the_same_colours(logged_in_page, people):
    """app.css has the dark set twice (the system's preference, the toggle's choice)."""
    by_system = logged_in_page(people.owner, path="/", color_scheme="dark").evaluate(PROPERTIES)
    by_choice = logged_in_page(people.owner, path="/", theme="dark").evaluate(PROPERTIES)
    light = logged_in_page(people.owner, path="/", color_scheme="light").evaluate(PROPERTIES)
    assert by_system == by_choice
    assert by_system["--bg"] != light["--bg"] and len(by_system) > 60
