"""A stream recorded by the proxy, in real Chromium against a real Daphne and the simulator: an
app calls /v1/responses with its labels, and its timeline, open while the stream runs, shows
the proxy's own delay (live in the chart, then in the figures, the chart's series and the event
table's column), the client's tags and session (as text), and links the session page."""

import re
import threading
import time

import httpx
import pytest
from playwright.sync_api import expect

from streams.models import ApiToken, Stream

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WAIT_MS = 20_000
XSS = "<img src=x onerror=alert(1)>"
SESSION = "e2e/checkout 1"


def proxied_request(server, token, done):
    """POST /v1/responses as an app would, with its labels; the body is read to the end."""
    headers = {
        "Authorization": f"Bearer {token}",
        "X-Streamscope-Tags": f"checkout, {XSS}",
        "X-Streamscope-Session": SESSION,
    }
    # paced (a few seconds in all) so the page is open while it streams
    body = {"model": "auto", "input": "Tell me about Utrecht", "stream": True,
            "metadata": {"seed": "7", "time_scale": "3", "sentences": "6"}}  # fmt: skip
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{server.url}/v1/responses", json=body, headers=headers) as r:
            done["status"] = r.status_code
            done["bytes"] = b"".join(r.iter_raw())


def test_a_proxied_streams_timeline_shows_the_proxys_delay_and_the_clients_labels(
    live_server_daphne, people, logged_in_page, screenshot
):
    token = ApiToken.issue(people.owner, name="e2e")
    done = {}
    app = threading.Thread(target=proxied_request, args=(live_server_daphne, token, done))
    app.start()
    deadline = time.monotonic() + 10
    while not (stream := Stream.objects.filter(source="proxy").first()):
        assert time.monotonic() < deadline, "the proxy made no stream"
        time.sleep(0.02)
    page = logged_in_page(people.owner, live_server_daphne.url, f"/streams/{stream.pk}/")
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    # live: the frames carry sent_us, so the chart has the proxy's delay before the end
    caption = page.locator("#timing-caption")
    expect(caption).to_contain_text("The proxy held an event at most", timeout=WAIT_MS)
    expect(page.locator("#timing-chart .u-legend")).to_contain_text("proxy added")
    app.join(30)
    assert done["status"] == 200 and b"response.completed" in done["bytes"]

    expect(page.locator("#stream-status")).to_have_attribute("data-status", "completed")
    stream.refresh_from_db()
    assert stream.proxy_added_p50_ms is not None
    # the server's figures once it ended, and the stored series in the chart
    figure = page.locator("#proxy-added .value")
    expect(figure).to_contain_text(re.compile(r"^\d+(\.\d+)? / \d+(\.\d+)? ms$"), timeout=WAIT_MS)
    expect(caption).to_contain_text("Orange: the proxy's own delay per event", timeout=WAIT_MS)
    expect(page.locator("#timing-chart .u-legend")).to_contain_text("proxy added")

    # the event table's column: one value per event, in ms
    expect(page.locator("#events-scroll thead")).to_contain_text("proxy +ms")
    cells = page.locator("#events-body td.proxy-ms")
    expect(cells).to_have_count(min(stream.event_count, 200), timeout=WAIT_MS)
    assert all(re.fullmatch(r"\d+\.\d+", t) for t in cells.all_inner_texts())

    # the client's labels, as text
    expect(page.locator("#stream-tags")).to_contain_text(XSS)
    expect(page.locator("#stream-tags")).to_contain_text("checkout")
    assert page.locator("#stream-tags img").count() == 0
    session = page.locator("#stream-session a")
    expect(session).to_have_text(SESSION)
    screenshot(page, "proxy-timeline")

    session.click()
    page.wait_for_url("**/sessions/**")
    expect(page.locator("#session-name")).to_have_text(SESSION)
    expect(page.locator(f"#stream-row-{stream.pk}")).to_be_visible()
    screenshot(page, "proxy-session")

    # the list, filtered by one of its tags: the row shows the labels and the proxy's delay
    page.goto(f"{live_server_daphne.url}/?source=proxy&tag=checkout")
    row = page.locator(f"#stream-row-{stream.pk}")
    expect(row.locator(".labels")).to_contain_text(XSS)
    expect(row.locator(".session-link")).to_have_text(SESSION)
    expect(row.locator(".proxy-added")).to_have_text(re.compile(r"^\d+\.\d+ / \d+\.\d+$"))
    screenshot(page, "proxy-list")
    assert dialogs == [] and page.errors == []
