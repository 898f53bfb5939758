"""Every text on every page is legible in both themes, in real Chromium: WCAG AA contrast
(4.5:1; 3:1 for text of 24 px, or 18.66 px bold) of each visible text's colour against its
effective background (tests.support.contrast.TEXTS), at 1440 and 390 px wide. The pages are
tests/e2e/conftest.py's `site`, the dark theme the system's preference; each run writes what
it measured to tests/e2e/screenshots/contrast-THEME.json (git-ignored), lowest first."""

import json

import pytest

from tests.e2e.conftest import SCREENSHOTS
from tests.support.contrast import contrast_failures

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTHS = (1440, 390)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_has_aa_contrast(logged_in_page, people, site, theme):
    report = {}
    pages = [(name, people.staff, path) for name, path in site.items()]
    pages.append(("login", None, "/login/"))
    for width in WIDTHS:
        for name, user, path in pages:
            page = logged_in_page(user, path=path, width=width, height=900, color_scheme=theme)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(200)  # charts and Markdown render after load
            found = contrast_failures(page)
            assert found["checked"] > 5, (name, found)  # the check saw the page's texts
            # a timeline's other states: the waterfall zoomed to the first token, an event open
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
            report[f"{name}@{width}"] = found
            page.context.close()
    SCREENSHOTS.mkdir(exist_ok=True)
    (SCREENSHOTS / f"contrast-{theme}.json").write_text(json.dumps(report, indent=1))
    failures = [
        f"{where}: {f['ratio']} < {f['need']} {f['color']} on {f['background']} "
        f"{f['where']} {f['text']!r}"
        for where, found in report.items()
        for f in found["failures"]
    ]
    assert failures == []


def test_the_check_sees_a_faint_text(logged_in_page, people, site):
    """The check above can fail: grey on grey, a faded row, and text on a translucent layer
    over a dark card are each measured against what is behind them."""
    page = logged_in_page(people.staff, path="/", width=1440, height=900)
    page.wait_for_load_state("networkidle")
    page.evaluate(
        """() => {
        const add = (html) => { const d = document.createElement("div");
          d.innerHTML = html; document.getElementById("main").prepend(d); };
        add('<p id="grey" style="color: #999; background: #eee">grey on grey</p>');
        add('<div style="opacity: .3"><p id="faded">faded</p></div>');
        add('<div style="background: #222"><div style="background: rgba(255,255,255,.05)">'
          + '<p id="dark-ok" style="color: #eee">light on dark</p>'
          + '<p id="dark-bad" style="color: #555">dim on dark</p></div></div>');
        add('<p id="big" style="color: #888; background: #fff; font-size: 26px">large grey</p>');
        }"""
    )
    found = contrast_failures(page)
    failed = {f["where"].split(" > ")[-1] for f in found["failures"]}
    assert {"p#grey", "p#faded", "p#dark-bad"} <= failed, found["failures"][:5]
    assert not failed & {"p#dark-ok", "p#big"}  # 26 px: 3:1 is enough (#888 on white: 3.5)
