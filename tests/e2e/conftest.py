"""Shared fixtures for the Chromium tests (Playwright's sync API, the system Chromium).

- `browser`: one headless Chromium per test module (`/usr/bin/chromium`; never
  `playwright install`).
- `logged_in_page(user, base_url=None, path="/")`: a fresh browser context logged in as `user`
  by its session cookie (no password, no login form: hashing costs ~0.25 s), with a page open
  on `base_url + path` and every page error collected in `page.errors`. `base_url` defaults to
  pytest-django's `live_server`; any server on the test database works
  (tests.conftest.DaphneServer).
- `screenshot(page, name)`: a full-page PNG in tests/e2e/screenshots/ (git-ignored).
- `owner`: tests.conftest's `people.owner` with the password PASSWORD, for tests that log in
  through the login form (tests.support.browser.Playground).

Tests that use a live server need `transactional_db` so that the server sees their rows.
"""

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).parent / "screenshots"
TIMEOUT_MS = 30_000
THEME_KEY = "streamscope-theme"  # static/js/theme.js's localStorage key
PASSWORD = "correct horse battery"  # `owner`'s, for the login form (tests.support.browser)


# Per module, not per session: Playwright's sync API keeps an event loop running in the test
# thread while it is open, and every async test collected after an e2e module would then fail
# with "Runner.run() cannot be called from a running event loop". A launch costs ~0.5 s.
@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in the test's thread while it is open; Django
    # then refuses the test's own (plain, sequential) ORM calls unless told they are safe.
    # Only for these modules: everywhere else the async-safety check stays on.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def session_cookie(user, url):
    """A Playwright cookie that logs `user` in on the server at `url`."""
    from django.conf import settings
    from django.test import Client

    from dashboard.project import SESSION_KEY
    from streams.access.projects import ALL

    client = Client()
    client.force_login(user)
    if user.is_staff:  # staff look at every project at once (the switcher's "All projects")
        session = client.session
        session[SESSION_KEY] = ALL
        session.save()
    value = client.cookies[settings.SESSION_COOKIE_NAME].value
    return {"name": settings.SESSION_COOKIE_NAME, "value": value, "url": url}


@pytest.fixture
def logged_in_page(browser, request):
    """A factory: `logged_in_page(user, base_url=None, path="/", width=1280, height=860,
    color_scheme=None, theme=None)`; without `base_url`, pytest-django's `live_server`. `user`
    None: not logged in. `color_scheme` ("light", "dark"): what the browser says the system
    prefers (Playwright's default: light). `theme` ("light", "dark"): the top bar's remembered
    choice (static/js/theme.js's localStorage key), set before the page loads."""
    contexts = []

    def open_page(
        user, base_url=None, path="/", width=1280, height=860, color_scheme=None, theme=None
    ):
        if base_url is None:
            base_url = request.getfixturevalue("live_server").url
        options = {"color_scheme": color_scheme} if color_scheme else {}
        context = browser.new_context(viewport={"width": width, "height": height}, **options)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        if theme is not None:
            context.add_init_script(f"localStorage.setItem({THEME_KEY!r}, {theme!r})")
        if user is not None:
            context.add_cookies([session_cookie(user, base_url)])
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(e.stack or str(e)))
        # What the Content-Security-Policy refused (Chromium reports each refusal as a
        # console error): a page that needs an inline script or eval is broken under it.
        page.csp_violations = []
        page.on(
            "console",
            lambda m: "Content Security Policy" in m.text and page.csp_violations.append(m.text),
        )
        page.goto(base_url + path)
        return page

    yield open_page
    for context in contexts:
        context.close()


def take_screenshot(page, name):
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def screenshot():
    return take_screenshot


@pytest.fixture
def owner(people):
    """`people.owner` with a password (PASSWORD), for tests that log in through the form."""
    people.owner.set_password(PASSWORD)
    people.owner.save()
    return people.owner


@pytest.fixture
def site(people):
    """Every page, by name: the demo seed (streams of every status over a week) plus a stream
    with Markdown output in a session and a conversation, for `people.staff` (made staff).
    Used by the screenshots and the contrast check."""
    from dashboard.models import Conversation, SavedView, Turn
    from streams.ingest.importer import import_capture
    from streams.management.commands.seed_demo import seed
    from streams.models import Stream
    from tests.support.captures import MARKDOWN, text_capture

    seed(120, days=7, seed=5, events_per_stream=12, users=(people.owner.username, "bob"))
    people.staff.is_staff = True
    people.staff.save()
    (stream,) = import_capture(text_capture(MARKDOWN), "answer.sse", user=people.staff)
    Stream.objects.filter(pk=stream.pk).update(tags=["checkout"], session="s-42")
    conversation = Conversation.objects.create(user=people.staff, title="About Utrecht")
    Turn.objects.create(conversation=conversation, position=0, prompt="Markdown?", stream=stream)
    SavedView.objects.create(owner=people.staff, page="latency", name="Gisteren, auto",
                             query="range=24h&requested=auto", shared=True)  # fmt: skip
    # the Markdown answer against the newest completed demo stream
    other = Stream.objects.filter(status=Stream.Status.COMPLETED).exclude(pk=stream.pk).last()
    pages = {
        "streams": "/",
        "search": "/?q=latency",
        "side-by-side": f"/streams/{stream.pk}/compare/{other.pk}/",
        "compare-with": f"/streams/{stream.pk}/compare/",
        "saved-views": "/views/",
        "timeline": f"/streams/{stream.pk}/",
        "session": "/sessions/s-42/",
        "playground": "/playground/",
        "conversation": f"/playground/{conversation.pk}/",
        "compare": "/playground/compare/",
        "latency": "/latency/",
        "routing": "/routing/",
        "analytics": "/analytics/",
    }
    # the timeline of a stream that did not complete (its error box) and of the one with the
    # most findings
    # share links (streams/access/shares.py): the page that lists them, and what each shows
    from streams.access import shares

    _, stream_secret = shares.create(people.staff, stream=stream.pk)
    _, session_secret = shares.create(people.staff, session="s-42")
    pages["shares"] = "/shares/"
    pages["shared-stream"] = f"/s/{stream_secret}/"
    pages["shared-session"] = f"/s/{session_secret}/"
    # the project's tokens (docs/teams.md): one with limits, so the page has figures to show
    from streams.models import ApiToken

    ApiToken.issue(people.staff, name="nightly evals", requests_per_minute=60,
                   spend_cap_day_nanos=5 * 10**9)  # fmt: skip
    pages["tokens"] = "/tokens/"
    ended = Stream.objects.exclude(status=Stream.Status.COMPLETED).order_by("pk").first()
    if ended is not None:
        pages["timeline-ended"] = f"/streams/{ended.pk}/"
    flagged = Stream.objects.order_by("-error_findings", "-findings_count", "pk").first()
    if flagged is not None and flagged.findings_count:
        pages["timeline-findings"] = f"/streams/{flagged.pk}/"
    return pages
