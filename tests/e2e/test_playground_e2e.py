"""The playground in real Chromium against a real Daphne (and the simulator process): an answer
grows before it ends, tool calls become cards, Stop keeps what arrived, a reload mid-answer
reattaches, model output stays inert, the per-user limit is said plainly, and it all fits a
phone. Screenshots go to tests/e2e/screenshots/ (git-ignored).

Chromium is tests/e2e/conftest.py's `browser`; these tests log in through the login form, as
a person would."""

import time

import pytest
from playwright.sync_api import expect

from dashboard.models import Conversation
from streams.core import conf
from streams.models import Score, Stream
from tests.conftest import DaphneServer
from tests.support.browser import LAST, Playground

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def playground(browser, live_server_daphne, owner):
    pages = []

    def open_page(**kwargs):
        pages.append(Playground(browser, live_server_daphne, owner, **kwargs))
        return pages[-1]

    yield open_page
    for p in pages:
        p.close()


def samples_until_end(page, interval_s=0.05, timeout_s=30):
    """(status, answer text length) of the last turn, sampled until it ends."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, length, active = page.evaluate(
            """() => { const t = document.querySelector('.pg-turn:last-child');
                       return [t.dataset.status, t.querySelector('.pg-answer').innerText.length,
                               t.dataset.active === 'true']; }"""
        )
        seen.append((status, length))
        if not active:
            return seen
        time.sleep(interval_s)
    raise AssertionError(f"the answer did not end: {seen[-5:]}")


def test_an_answer_grows_live_then_stays_after_a_reload(playground):
    pg = playground()
    page = pg.page
    page.fill("#pg-input", "first line")
    page.press("#pg-input", "Shift+Enter")  # a new line, not a send
    page.type("#pg-input", "Tell me about Utrecht")
    assert page.input_value("#pg-input") == "first line\nTell me about Utrecht"
    assert page.locator(".pg-turn").count() == 0
    stream_id = pg.send(page.input_value("#pg-input"), speed="1", model="gpt-oss-120b")
    expect(page.locator("#pg-stop")).to_be_visible()
    assert page.input_value("#pg-input") == ""
    samples = samples_until_end(page)
    growing = [n for status, n in samples if status == "streaming" and n > 0]
    assert len(set(growing)) >= 3, samples  # seen at three lengths at least while streaming
    assert growing == sorted(growing)
    assert samples[-1][0] == "completed" and samples[-1][1] >= max(growing) > min(growing)

    stream = Stream.objects.get(pk=stream_id)
    assert stream.status == "completed"
    text = pg.answer_text()
    assert text.strip() == stream.final_text.strip()
    assert page.inner_text(f"{LAST} .pg-user .pg-text") == "first line\nTell me about Utrecht"
    assert abs(int(page.inner_text(f"{LAST} .pg-ttft b")) - stream.ttft_ms) <= 1
    assert page.inner_text(f"{LAST} .pg-route-model") == "gpt-oss-120b"
    assert page.get_attribute(f"{LAST} .pg-timeline", "href") == f"/streams/{stream_id}/"
    expect(page.locator("#pg-send")).to_be_visible()
    conversation = Conversation.objects.get()
    assert page.url.endswith(f"/playground/{conversation.pk}/")
    assert page.inner_text("#pg-conversations a[aria-current]").startswith("first line")

    page.reload()
    assert pg.answer_text() == text  # rendered by the server from the stored stream
    assert page.get_attribute(LAST, "data-active") is None


def test_tool_calls_show_as_cards(playground):
    pg = playground()
    page = pg.page
    pg.send("What's the weather in Utrecht?", scenario="tools")
    # The output as the timeline shows it (templates/dashboard/output.html, live: output.js).
    card = page.locator(f"{LAST} .pg-answer .item.tool")
    expect(card).to_have_count(1)  # while streaming: the card is there before the text
    assert pg.wait_ended() == "completed"
    expect(card.locator(".tool-name")).to_have_text("get_weather")
    expect(card.locator(".tool-status")).to_have_text("completed")
    assert '"location": "Utrecht"' in card.locator(".args").inner_text()
    assert "temp_c" in card.locator(".tool-output").inner_text()
    assert "I called get_weather" in page.inner_text(f"{LAST} .pg-answer .part-output_text .text")

    pg.send("And several at once?", scenario="parallel_tools")
    assert pg.wait_ended() == "completed"
    statuses = page.locator(f"{LAST} .tool-status").all_inner_texts()
    assert statuses == ["completed", "failed", "completed"]
    expect(page.locator(".pg-turn")).to_have_count(2)
    pg.shot("playground-desktop")


def test_stop_keeps_the_partial_answer(playground):
    pg = playground()
    page = pg.page
    stream_id = pg.send("Tell me about Utrecht", speed="2", model="gpt-oss-120b")
    page.wait_for_function(
        "() => document.querySelector('.pg-turn:last-child .pg-answer').innerText.length > 20"
    )
    pg.shot("playground-streaming")
    expect(page.locator(f"{LAST} .pg-status")).to_have_text("streaming")
    page.keyboard.press("Escape")  # the keyboard stops
    assert pg.wait_ended() == "cancelled"
    partial = pg.answer_text()
    stream = Stream.objects.get(pk=stream_id)
    assert stream.status == "cancelled"
    assert len(partial) > 20 and partial.strip() == stream.output_text.strip()
    expect(page.locator(f"{LAST} .pg-notice-text")).to_contain_text("Stopped.")
    expect(page.locator(f"{LAST} .pg-status")).to_have_text("cancelled")
    expect(page.locator(f"{LAST} .pg-retry button")).to_be_visible()
    page.reload()
    assert pg.answer_text() == partial


def test_a_reload_mid_answer_reattaches_and_completes(playground):
    pg = playground()
    page = pg.page
    stream_id = pg.send("Tell me about Utrecht", speed="2", model="gpt-oss-120b")
    page.wait_for_function(
        "() => document.querySelector('.pg-turn:last-child .pg-answer').innerText.length > 10"
    )
    page.reload()
    assert page.get_attribute(LAST, "data-active") == "true"
    expect(page.locator("#pg-stop")).to_be_visible()
    samples = samples_until_end(page)
    assert any(status == "streaming" for status, _ in samples)  # followed live after the reload
    assert samples[-1][0] == "completed"
    stream = Stream.objects.get(pk=stream_id)
    assert pg.answer_text().strip() == stream.final_text.strip()


def test_model_output_is_inert(playground):
    pg = playground()
    page = pg.page
    pg.send("Show me some markup", scenario="xss")
    page.wait_for_function(
        "() => document.querySelector('.pg-turn:last-child .pg-answer').innerText.includes('<img')"
    )
    live = page.locator(f"{LAST} .pg-answer img, {LAST} .pg-answer script").count()
    assert pg.wait_ended() == "completed"
    text = pg.answer_text()
    assert "<img src=x onerror=alert(1)>" in text and "<script>alert(1)</script>" in text
    page.reload()
    assert pg.answer_text() == text
    time.sleep(0.3)  # an onerror handler would have fired by now
    assert live == 0
    assert page.locator(".pg-answer img, .pg-answer script").count() == 0
    assert pg.dialogs == []


def test_errors_are_inline_with_a_retry(playground):
    pg = playground()
    page = pg.page
    first = pg.send("Tell me about Utrecht", scenario="error", speed="0")
    assert pg.wait_ended() == "failed"
    expect(page.locator(f"{LAST} .pg-notice-text")).to_contain_text("internal_error")
    page.click(f"{LAST} .pg-retry button")
    page.wait_for_function(
        f"() => document.querySelector('.pg-turn:last-child').dataset.stream !== '{first}'"
    )
    assert pg.wait_ended() == "failed"  # the same request, so the same scenario
    expect(page.locator(".pg-turn")).to_have_count(1)


def test_validation_and_the_limit_are_said_plainly(playground, owner, settings):
    pg = playground()
    page = pg.page
    page.click("#pg-send")
    expect(page.locator("#pg-errors")).to_have_text("Message: The input is empty.")
    page.click("#pg-options summary")
    page.fill("#pg-temperature", "3")
    page.fill("#pg-input", "Hi")
    page.press("#pg-input", "Enter")
    expect(page.locator("#pg-errors")).to_have_text(
        "Temperature: Ensure this value is less than or equal to 2."
    )
    assert page.get_attribute("#pg-temperature", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "pg-temperature"
    page.fill("#pg-temperature", "")

    limit = conf.get().max_concurrent_per_user
    for _ in range(limit):
        Stream.objects.create(user=owner, status=Stream.Status.STREAMING)
    page.fill("#pg-input", "Hi")
    page.press("#pg-input", "Enter")
    expect(page.locator("#pg-errors")).to_have_text(
        f"You have {limit} streams running; at most {limit} at a time. "
        "Wait for one to finish or cancel one."
    )
    assert page.locator(".pg-turn").count() == 0
    assert page.input_value("#pg-input") == "Hi"  # nothing typed is lost


def test_it_fits_a_narrow_screen(playground):
    pg = playground(width=390, height=844)
    page = pg.page
    pg.send("What's the weather in Utrecht?", scenario="tools")
    assert pg.wait_ended() == "completed"
    pg.send("Tell me about Utrecht", scenario="rewrite")
    assert pg.wait_ended() == "completed"
    expect(page.locator(f"{LAST} .pg-rewrite")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0  # no sideways scrolling
    pg.shot("playground-narrow")


@pytest.fixture
def impatient_server(simulator_process, _relay_db_connections):
    """A Daphne that calls a stream stalled after 1 s without an event, and tries twice."""
    server = DaphneServer(
        simulator_process.base_url, overrides={"STALL_TIMEOUT_S": 1.0, "STALL_MAX_ATTEMPTS": 2}
    )
    yield server
    server.stop()


def test_a_stall_is_retried_and_then_offered_for_a_retry(browser, impatient_server, owner):
    pg = Playground(browser, impatient_server, owner)
    page = pg.page
    first = pg.send("Tell me about Utrecht", scenario="stall", speed="0")
    # the server retries the stalled request as a new stream; the page follows it
    page.wait_for_function(
        f"() => document.querySelector('.pg-turn:last-child').dataset.stream !== '{first}'"
    )
    assert pg.wait_ended() == "stalled"
    second = Stream.objects.get(first_attempt_id=first)
    assert second.attempt == 2 and second.status == "stalled"
    assert page.get_attribute(LAST, "data-stream") == str(second.pk)
    expect(page.locator(f"{LAST} .pg-notice-text")).to_contain_text("2 times: gave up")
    expect(page.locator(f"{LAST} .pg-retry button")).to_be_visible()
    assert len(pg.answer_text()) > 0  # what the last attempt received before it stalled
    pg.close()


def test_thumbs_beside_an_answer_stay_on_the_page(playground):
    """A thumb pressed on an answer that just streamed in (its turn inserted by the script)
    and on a reloaded conversation: the conversation stays, the thumb is pressed, and the
    "Score…" form stays folded (it opens for a typed score, not a thumb)."""
    pg = playground()
    page = pg.page
    stream_id = pg.send("Tell me about Utrecht", speed="0")
    assert pg.wait_ended() == "completed"
    url = page.url
    page.evaluate("() => { window.__notReloaded = true; }")
    page.locator(f"{LAST} .thumb.up").click()
    page.wait_for_selector(f'{LAST} .thumbs[data-mine="up"]')
    assert page.url == url and page.evaluate("() => window.__notReloaded === true")
    assert Score.objects.get(stream_id=stream_id).label == "up"
    assert page.locator(f"{LAST} details.score-more").get_attribute("open") is None
    assert page.locator(f"{LAST} .pg-user .pg-text").inner_text() == "Tell me about Utrecht"

    page.reload()
    page.locator(f"{LAST} .thumb.down").click()
    page.wait_for_selector(f'{LAST} .thumbs[data-mine="down"]')
    assert page.url == url
    assert page.locator(f"{LAST} details.score-more").get_attribute("open") is None
    assert Score.objects.get(stream_id=stream_id).label == "down"
    # a typed score still opens it, to say what was saved
    page.locator(f"{LAST} details.score-more summary").click()
    page.locator(f"{LAST} .score-pop input[name=value]").fill("up")
    page.locator(f"{LAST} .score-pop button.primary").click()
    page.wait_for_selector(f"{LAST} details.score-more[open] p.saved")
