"""Usage and cost, live, in real Chromium against a real Daphne (and the simulator process,
which reports usage): an answer sent on the playground, followed meanwhile on its timeline and
in the streams list, shows its tokens and its cost at the team's price on all three once it
finishes, without a reload; "—" on the timeline while it runs.

The playground's fetch of the server's rendering of the ended turn is refused here, so what it
shows is what playground.js made of the frame that finished the stream (stream_detail/format.js);
the timeline shows the same at once, then the server's rendering; the list's row is the
server's (stream_list.js fetches it)."""

import datetime as dt
from decimal import Decimal

import pytest

from dashboard.templatetags.inspection import count, money
from streams.models import Price, Stream
from streams.store import prices
from tests.conftest import DaphneServer
from tests.e2e.conftest import take_screenshot
from tests.support.browser import LAST, Playground

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A page that was not reloaded still has this (set after it loaded).
MARK = "() => { window.__notReloaded = true; }"
NOT_RELOADED = "() => window.__notReloaded === true"


@pytest.fixture
def priced_server(transactional_db, simulator_process, _relay_db_connections):
    """A team price for every model, then a Daphne of its own (in another process: it reads
    the price table at its first price, so this one is there before it starts)."""
    price = Price.objects.create(
        model_pattern="*",
        effective_from=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        currency="EUR",
        # a cent a token in, two out: every cost a whole number of cents, which the server's
        # and the scripts' `money` write alike (a half-way amount they round apart: the report)
        input_per_million=Decimal("10000"),
        output_per_million=Decimal("20000"),
    )
    prices.forget()  # (this process's snapshot: the server's own reads the table anew)
    server = DaphneServer(simulator_process.base_url)
    yield server, price
    server.stop()
    prices.forget()


def open_tab(pg, url):
    page = pg.context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(e.stack or str(e)))
    page.goto(url)
    page.evaluate(MARK)
    return page


def test_a_live_answer_shows_its_tokens_and_cost_when_it_ends(browser, priced_server, owner):
    server, price = priced_server
    pg = Playground(browser, server, owner)
    try:
        page = pg.page
        page.evaluate(MARK)
        listing = open_tab(pg, server.url + "/")
        # the ended turn stays as the script rendered it (the server's rendering is refused)
        page.route("**/playground/*/turns/*/", lambda route: route.abort())
        stream_id = pg.send("Tell me about Utrecht", speed="1", model="gpt-oss-120b")

        timeline = open_tab(pg, f"{server.url}/streams/{stream_id}/")
        config = timeline.evaluate(
            "() => JSON.parse(document.getElementById('timeline-config').textContent)"
        )
        assert config["active"], "the answer ended before its timeline opened"
        for figure in ("usage-input", "usage-output", "usage-cost"):
            assert timeline.inner_text(f"#{figure}") == "—"  # nothing yet, not "no price"

        assert pg.wait_ended() == "completed"
        stream = Stream.objects.get(pk=stream_id)
        assert stream.usage_source == "reported" and stream.cost_currency == "EUR"
        assert stream.price_ref == price.ref
        tokens = f"{count(stream.input_tokens)} → {count(stream.output_tokens)}"
        assert stream.cost_nanos == (stream.input_tokens + 2 * stream.output_tokens) * 10**7
        cost = money(stream.cost_nanos, "EUR")

        # the playground: from the frame that finished the stream
        assert page.inner_text(f"{LAST} .pg-tokens b") == tokens
        assert page.is_visible(f"{LAST} .pg-tokens") and page.is_visible(f"{LAST} .pg-cost")
        assert "(reported by the upstream)" in page.get_attribute(f"{LAST} .pg-tokens", "title")
        assert page.inner_text(f"{LAST} .pg-cost b") == cost
        assert page.get_attribute(f"{LAST} .pg-cost", "title") == f"price: {price.ref}"
        assert page.evaluate(NOT_RELOADED)

        # the timeline, followed live
        timeline.wait_for_function(
            "() => document.getElementById('usage-cost').textContent !== '—'"
        )
        assert timeline.inner_text("#usage-input") == count(stream.input_tokens)
        assert timeline.inner_text("#usage-output") == count(stream.output_tokens)
        assert timeline.inner_text("#usage-cost") == cost
        assert timeline.inner_text("#usage-cost-note") == f"price: {price.ref}"
        timeline.wait_for_selector("#live-state[data-state=off]", state="attached")
        timeline.wait_for_load_state("networkidle")  # (the server's rendering, fetched)
        assert timeline.inner_text("#usage-cost") == cost  # the server's rendering says the same
        assert timeline.evaluate(NOT_RELOADED) and timeline.errors == []
        take_screenshot(timeline, "cost-timeline")

        # the streams list: the row, fetched again when the stream finished
        cell = f"#stream-row-{stream_id} [data-f=cost]"
        listing.wait_for_function(
            f"() => document.querySelector('{cell}')?.textContent.includes('€')"
        )
        assert listing.inner_text(cell) == cost
        assert listing.get_attribute(cell, "title") == f"price: {price.ref}"
        assert listing.inner_text(f"#stream-row-{stream_id} [data-f=tokens]") == tokens
        assert listing.evaluate(NOT_RELOADED) and listing.errors == []
    finally:
        pg.close()


def test_the_server_and_the_scripts_write_a_half_way_amount_alike(logged_in_page, people):
    """Both round the exact amount half to even: a live figure does not change its last digit
    when the server renders it (before: the server rounded a binary float, the scripts half-up)."""
    page = logged_in_page(people.owner)
    for nanos in (732_500, 1_235_000, 1_005_000_000, 1_015_000_000, 150, 2_500_000_000):
        script = page.evaluate(
            f"async () => (await import('/static/js/i18n.js')).money({nanos}, 'EUR')"
        )
        assert script == money(nanos, "EUR"), nanos


@pytest.fixture
def fresh_install(transactional_db, _relay_db_connections):
    """A Daphne as `make run` starts one: no UPSTREAM_BASE_URL (the built-in simulator, in the
    server's process), no team price."""
    prices.forget()
    server = DaphneServer("")
    yield server
    server.stop()


def test_a_fresh_install_prices_the_simulators_answers_as_examples(browser, fresh_install, owner):
    pg = Playground(browser, fresh_install, owner)
    try:
        page = pg.page
        page.route("**/playground/*/turns/*/", lambda route: route.abort())  # (the script's)
        stream_id = pg.send("Tell me about Utrecht", speed="1")  # (routed: mistral-small-3.2)
        assert pg.wait_ended() == "completed"
        stream = Stream.objects.get(pk=stream_id)
        model = stream.resolved_model
        assert stream.price_ref == f"simulator example price: {model}" and stream.cost_nanos
        cost = money(stream.cost_nanos, stream.cost_currency)
        assert page.inner_text(f"{LAST} .pg-cost b") == f"{cost} (example)"
        note = f"price: an example price of the built-in simulator for {model}, not a real one"
        assert page.get_attribute(f"{LAST} .pg-cost", "title") == note
        timeline = open_tab(pg, f"{fresh_install.url}/streams/{stream_id}/")
        assert timeline.inner_text("#usage-cost") == f"{cost} (example)"
        assert timeline.inner_text("#usage-cost-note") == note and timeline.errors == []
    finally:
        pg.close()
