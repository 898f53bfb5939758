"""The contrast check of every page (tests/e2e/test_screenshots_e2e.py, which measures every
visible text's contrast against its effective background in both themes at 1440 and 390 px
as it walks the pages) can fail: it sees faint texts where they are."""

import pytest

from tests.support.contrast import contrast_failures

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_check_sees_a_faint_text(logged_in_page, people):
    """The check can fail: grey on grey, a faded row, and text on a translucent layer
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
