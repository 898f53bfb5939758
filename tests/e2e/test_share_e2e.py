"""Share links in real Chromium against a real Daphne (and the simulator process): the owner
makes a link on a running stream's page; a teammate opens it in a second browser context and
sees the events arrive live over the link's socket; the owner revokes it on /shares/, and the
teammate's socket is closed within seconds (the page says so), a reload showing the link gone.
Screenshots of /shares/ and a shared stream: tests/e2e/test_screenshots_e2e.py (`site`)."""

import re
import time
from urllib.parse import urlsplit

import httpx
import pytest

from streams.models import ShareLink, Stream
from tests.e2e.conftest import take_screenshot
from tests.support.processes import start_stream, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def shown_events(page):
    text = page.locator("#events-title [data-field=event_count]").inner_text()
    return int(re.sub(r"\D", "", text) or 0)


def test_a_link_follows_a_running_stream_in_another_browser_until_it_is_revoked(
    logged_in_page, people, live_server_daphne
):
    server = live_server_daphne
    owner, teammate = people.owner, people.stranger
    running = start_stream(server, owner, sentences=60, time_scale=3)
    try:
        page = logged_in_page(owner, base_url=server.url, path=f"/streams/{running}/")
        page.click("#share summary")
        page.select_option("#share-expires", "1h")
        page.click("#share button[type=submit]")
        page.wait_for_url("**/shares/new/")
        url = page.input_value("#share-url")
        assert re.fullmatch(re.escape(server.url) + r"/s/sl_[\w-]{43}/", url), url
        page.click("#share-copy")  # (headless: the clipboard may refuse; it is selected then)
        page.wait_for_function("document.getElementById('share-copied').textContent !== ''")
        assert page.errors == []

        # a teammate, in a browser context of their own
        viewer = logged_in_page(teammate, base_url=server.url, path="/shares/")
        sockets, closed = [], []

        def on_socket(socket):
            sockets.append(socket.url)
            socket.on("close", lambda _: closed.append(time.monotonic()))

        viewer.on("websocket", on_socket)
        viewer.goto(url)
        assert viewer.locator("h1").first.inner_text().startswith(f"Stream #{running}")
        wait_until(
            lambda: viewer.get_attribute("#live-state", "data-state") == "live", 30, what="live"
        )
        assert sockets == [
            f"{server.ws_url}/ws/shared/{urlsplit(url).path[3:-1]}/{running}/?after=-1"
        ]
        first = shown_events(viewer)
        wait_until(lambda: shown_events(viewer) > first + 3, 30, what="events arriving live")
        assert viewer.locator("#output-items").inner_text().strip()  # the answer, as it comes
        assert Stream.objects.get(pk=running).is_active
        # nothing of the owner's but this stream, and no way to the rest of the site's data
        assert viewer.locator("main a[href^='/streams/'], main a[href^='/sessions/']").count() == 0
        take_screenshot(viewer, "shared-stream-live")
        assert viewer.errors == [] and viewer.csp_violations == []

        # the owner revokes it
        page.goto(f"{server.url}/shares/")
        link = ShareLink.objects.get(owner=owner)
        row = page.locator(f"#share-{link.pk}")
        assert row.get_attribute("data-status") == "active"
        assert row.locator("td.num").inner_text() == "1"  # opened once
        revoked_at = time.monotonic()
        row.locator("button.revoke").click()
        page.wait_for_selector(f"#share-{link.pk}[data-status=revoked]")
        wait_until(lambda: closed, 5, what="the teammate's socket closed")
        assert closed[0] - revoked_at < 5
        wait_until(
            lambda: "revoked" in viewer.locator("#live-state").inner_text(), 5, what="said so"
        )
        assert len(sockets) == 1  # not reopened
        response = viewer.reload()
        assert response.status == 404
        assert viewer.locator("h1").inner_text() == "This link does not open"
        assert f"Stream #{running}" not in viewer.content()
    finally:
        httpx.post(
            f"{server.url}/api/streams/{running}/cancel/",
            headers={"Authorization": f"Bearer {owner.token}"},
            timeout=10,
        )
