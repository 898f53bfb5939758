"""Every page at 1440 and 390 px wide, in the light and the dark theme, as PNGs in
tests/e2e/screenshots/ (git-ignored: page-NAME-WIDTH.png, page-NAME-WIDTH-dark.png), so a
reviewer can look at them after `make test`; and no page scrolls sideways on a phone or
raises a script error. The pages are tests/e2e/conftest.py's `site`: the demo seed (streams
of every status over a week) plus a stream with Markdown output in a session, and a
conversation. The dark theme is the system's preference (prefers-color-scheme: dark)."""

import pytest

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
    for name, path in site.items():
        page = logged_in_page(
            people.staff, path=path, width=width, height=height, color_scheme=theme
        )
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(200)  # charts draw after load
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            problems.append(f"{name} scrolls sideways by {overflow} px at {width} px")
        if page.errors:
            problems.append(f"{name}: {page.errors}")
        if page.csp_violations:
            problems.append(f"{name} broke the Content-Security-Policy: {page.csp_violations}")
        screenshot(page, f"page-{name}-{width}{suffix}")
        page.context.close()
    anonymous = logged_in_page(None, path="/login/", width=width, height=height, color_scheme=theme)
    screenshot(anonymous, f"page-login-{width}{suffix}")
    assert problems == []


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
