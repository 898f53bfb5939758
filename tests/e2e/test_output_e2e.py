"""One live output renderer: the playground and the timeline both build a stream's output from
its WebSocket frames with static/js/output.js, and a tool call comes out the same on both.

Both pages follow the same real stream (the simulator's `tools` scenario) through the real
server; Playwright sits in the middle of each page's WebSocket and holds back only the end (the
terminal frame's `status` and `terminal`, and the close), so neither page swaps in the server's
rendering of the ended stream and what is compared is what the module built from live frames."""

import json
import re
import time

import pytest
from playwright.sync_api import expect

from streams.models import Stream
from tests.e2e.conftest import TIMEOUT_MS, session_cookie

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WAIT_MS = 20_000
OUTPUT_MODULE = "/static/js/output.js"


def hold_the_end(message):
    """A frame as the server sent it, but never the last: the page stays live."""
    frame = json.loads(message)
    if frame.pop("terminal", False):
        frame.pop("status", None)
    return json.dumps(frame)


def live_page(browser, server, user, path, width=1280):
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.add_cookies([session_cookie(user, server.url)])

    def relay(ws):
        upstream = ws.connect_to_server()
        upstream.on_message(lambda message: ws.send(hold_the_end(message)))
        upstream.on_close(lambda code, reason: None)  # the page's socket stays open

    context.route_web_socket(re.compile(r"/ws/streams/\d+/"), relay)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(e.stack or str(e)))
    page.goto(server.url + path)
    return context, page


def loaded_modules(page):
    return page.evaluate(
        "performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)"
        ".filter((p) => p.startsWith('/static/js/'))"
    )


TOOL = ".item.tool"


def test_the_playground_and_the_timeline_render_a_tool_call_alike(
    browser, live_server_daphne, people
):
    server = live_server_daphne
    owner = people.owner
    contexts = []
    try:
        context, playground = live_page(browser, server, owner, "/playground/")
        contexts.append(context)
        playground.select_option("#pg-scenario", "tools")
        playground.select_option("#pg-speed", "1")  # real pace: the timeline opens mid-stream
        playground.fill("#pg-input", "What's the weather in Utrecht?")
        playground.press("#pg-input", "Enter")
        turn = playground.locator(".pg-turn").last
        expect(turn).to_have_attribute("data-active", "true")
        stream_id = int(turn.get_attribute("data-stream"))

        context, timeline = live_page(browser, server, owner, f"/streams/{stream_id}/")
        contexts.append(context)
        # Opened while the stream runs: the timeline follows it live (it did not render it whole).
        expect(timeline.locator("#live-state")).to_have_attribute("data-state", "live")
        outputs = {
            "playground": (playground, f"#turn-{turn.get_attribute('data-turn')} .pg-answer"),
            "timeline": (timeline, "#output-items"),
        }
        # The live renderer's own elements, marked: the server's rendering of the ended stream
        # would come as new ones.
        for page, output in outputs.values():
            page.locator(output).evaluate("(e) => { e.heldLive = true; }")

        deadline = time.monotonic() + WAIT_MS / 1000
        while Stream.objects.get(pk=stream_id).status == "streaming":
            assert time.monotonic() < deadline, "the stream did not end"
            time.sleep(0.1)
        assert Stream.objects.get(pk=stream_id).status == "completed"

        cards = {}
        for name, (page, output) in outputs.items():
            assert OUTPUT_MODULE in loaded_modules(page), name
            card = page.locator(f"{output} {TOOL}")
            expect(card).to_have_count(1)
            expect(card.locator(".tool-status")).to_have_text("completed", timeout=WAIT_MS)
            # Still the live rendering: the end was held back, the server's never came.
            assert page.locator(output).evaluate("(e) => e.heldLive === true"), name
            cards[name] = card.evaluate("(e) => e.outerHTML")
            assert page.errors == [], page.errors

        assert cards["playground"] == cards["timeline"]
        card = timeline.locator(f"#output-items {TOOL}")
        expect(card.locator(".tool-name")).to_have_text("get_weather")
        assert '"location": "Utrecht"' in card.locator(".args").inner_text()
        assert "temp_c" in card.locator(".tool-output").inner_text()
    finally:
        for context in contexts:
            context.close()
