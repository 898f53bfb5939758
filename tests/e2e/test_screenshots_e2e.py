"""Every page at 1440 and 390 px wide, as PNGs in tests/e2e/screenshots/ (git-ignored), so a
reviewer can look at them after `make test`; and no page scrolls sideways on a phone or
raises a script error. The data is the demo seed (streams of every status over a week) plus
a stream with findings, a proxied one in a session, and a conversation."""

import pytest

from dashboard.models import Conversation, Turn
from streams.ingest.importer import import_capture
from streams.management.commands.seed_demo import seed
from streams.models import Stream
from tests.support.captures import MARKDOWN, text_capture

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": (1440, 900), "phone": (390, 844)}


@pytest.fixture
def site(people):
    seed(120, days=7, seed=5, events_per_stream=12, users=(people.owner.username, "bob"))
    people.staff.is_staff = True
    people.staff.save()
    (stream,) = import_capture(text_capture(MARKDOWN), "answer.sse", user=people.staff)
    Stream.objects.filter(pk=stream.pk).update(tags=["checkout"], session="s-42")
    conversation = Conversation.objects.create(user=people.staff, title="About Utrecht")
    Turn.objects.create(conversation=conversation, position=0, prompt="Markdown?", stream=stream)
    return {
        "streams": "/",
        "timeline": f"/streams/{stream.pk}/",
        "session": "/sessions/s-42/",
        "playground": "/playground/",
        "conversation": f"/playground/{conversation.pk}/",
        "compare": "/playground/compare/",
        "latency": "/latency/",
        "routing": "/routing/",
        "analytics": "/analytics/",
    }


@pytest.mark.parametrize("size", WIDTHS)
def test_every_page_at_desktop_and_phone_width(logged_in_page, people, site, screenshot, size):
    width, height = WIDTHS[size]
    problems = []
    for name, path in site.items():
        page = logged_in_page(people.staff, path=path, width=width, height=height)
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(200)  # charts draw after load
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            problems.append(f"{name} scrolls sideways by {overflow} px at {width} px")
        if page.errors:
            problems.append(f"{name}: {page.errors}")
        if page.csp_violations:
            problems.append(f"{name} broke the Content-Security-Policy: {page.csp_violations}")
        screenshot(page, f"page-{name}-{width}")
        page.context.close()
    anonymous = logged_in_page(None, path="/login/", width=width, height=height)
    screenshot(anonymous, f"page-login-{width}")
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
