"""Usage and cost as stored: a recorded stream's reported usage priced at the team's entry or
the maintained list, an imported one's estimate, no price as None (never 0), the rollups'
sums, and a price edit applied by `reprice`."""

import datetime as dt
import io
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from streams.core import pricing, usage
from streams.ingest.importer import import_capture
from streams.models import Price, Stream, UsageRollup
from streams.store import aggregates, prices
from tests.support import paths
from tests.support.recording import body, record

CAPTURES = paths.CAPTURES
JAN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _fresh_prices():
    prices.forget()
    yield
    prices.forget()


def _price(pattern="*", **kw):
    values = dict(
        effective_from=JAN,
        currency="EUR",
        input_per_million=Decimal("2"),
        output_per_million=Decimal("8"),
    )
    values.update(kw)
    return Price.objects.create(model_pattern=pattern, **values)


def _usage(stream):
    return usage.Usage(
        stream.input_tokens,
        stream.output_tokens,
        stream.total_tokens,
        stream.cached_input_tokens,
        stream.reasoning_tokens,
        stream.usage_source,
    )


@pytest.mark.django_db(transaction=True)
async def test_a_recorded_stream_keeps_its_reported_usage_and_the_teams_price(upstream):
    price = await sync_to_async(_price)("gpt-oss-*")
    stream, _ = await record(body(model="gpt-oss-20b"))
    assert stream.status == "completed" and stream.usage_source == "reported"
    assert stream.output_tokens == stream.output_deltas > 0  # (the simulator: a token a delta)
    assert (
        stream.input_tokens > 0
        and stream.total_tokens == stream.input_tokens + stream.output_tokens
    )
    expected = pricing.cost(price.rate(), _usage(stream))
    assert (stream.cost_nanos, stream.cost_currency) == (expected, "EUR") and expected > 0
    assert stream.price_ref == price.ref
    # the rollups sum them (every stream: its tag "" rows)
    rows = [
        r
        async for r in UsageRollup.objects.filter(
            span=3600, tag="", project_key=aggregates.EVERY_PROJECT
        )
    ]
    assert sum(r.cost_eur_nanos for r in rows) == expected
    assert sum(r.output_tokens for r in rows) == stream.output_tokens
    assert sum(r.priced_n for r in rows) == 1 and sum(r.usage_n for r in rows) == 1


@pytest.mark.django_db(transaction=True)
async def test_without_a_team_price_the_maintained_list_prices_it_in_usd(upstream):
    stream, _ = await record(body(model="gpt-oss-120b"))
    assert stream.cost_currency == "USD" and stream.cost_nanos > 0
    assert stream.price_ref.startswith("genai-prices ") and "gpt-oss-120b" in stream.price_ref


@pytest.mark.django_db(transaction=True)
async def test_a_model_nobody_prices_has_no_cost_not_zero(upstream):
    stream, _ = await record(body(model="eu-reasoner"))
    assert stream.usage_source == "reported" and stream.output_tokens > 0
    assert (stream.cost_nanos, stream.cost_currency, stream.price_ref) == (None, "", "")
    rows = [
        r
        async for r in UsageRollup.objects.filter(
            span=3600, tag="", project_key=aggregates.EVERY_PROJECT
        )
    ]
    assert sum(r.priced_n for r in rows) == 0 and sum(r.n for r in rows) == 1


@pytest.mark.django_db
def test_an_imported_capture_is_priced_as_of_the_list_and_its_usage_kept():
    (stream,) = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "basic.sse")
    assert stream.usage_source == "reported" and stream.resolved_model.startswith("gpt-4o-mini")
    # gpt-4o-mini: $0.15 per million input tokens, $0.60 output (cached: $0.075)
    u = _usage(stream)
    cached = u.cached_input_tokens or 0
    dollars = (
        (u.input_tokens - cached) * Decimal("0.15")
        + cached * Decimal("0.075")
        + u.output_tokens * Decimal("0.6")
    ) / 1_000_000
    assert pricing.decimal(stream.cost_nanos) == dollars and stream.cost_currency == "USD"


@pytest.mark.django_db
def test_a_stream_without_usage_gets_an_estimate_that_says_so():
    data = (CAPTURES / "openai_text_basic.sse").read_text()
    without = "\n".join(line.replace('"usage":', '"_usage":') for line in data.splitlines()) + "\n"
    (stream,) = import_capture(without.encode(), "no-usage.sse")
    assert stream.usage_source == "estimated"
    assert stream.output_tokens == usage.estimate_output(stream.parts, stream.output_text) > 0
    # an SSE file holds no request: input unknown, so no cost (never a partial one)
    assert stream.input_tokens is None and stream.cost_nanos is None


@pytest.mark.django_db
def test_reprice_applies_a_price_edit_to_stored_streams_and_their_rollups():
    from django.core.management import call_command

    (stream,) = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "basic.sse")
    assert stream.cost_currency == "USD"
    before = stream.cost_nanos
    # a team price for it, from before it ran: the stored cost changes only when repriced
    price = _price("gpt-4o-mini*", effective_from=JAN - dt.timedelta(days=3650))
    stream.refresh_from_db()
    assert stream.cost_nanos == before
    call_command("reprice", "--model", "gpt-4o-mini*", stdout=io.StringIO())
    stream.refresh_from_db()
    assert stream.cost_currency == "EUR" and stream.price_ref == price.ref
    assert stream.cost_nanos == pricing.cost(price.rate(), _usage(stream)) != before
    rows = UsageRollup.objects.filter(span=3600, tag="", project_key=aggregates.EVERY_PROJECT)
    assert sum(r.cost_eur_nanos for r in rows) == stream.cost_nanos
    assert sum(r.cost_usd_nanos for r in rows) == 0 and sum(r.priced_n for r in rows) == 1


@pytest.mark.django_db
def test_reprice_gives_rows_stored_before_usage_their_usage():
    (stream,) = import_capture((CAPTURES / "openai_text_basic.sse").read_bytes(), "basic.sse")
    kept = {name: getattr(stream, name) for name in ("input_tokens", "output_tokens", "cost_nanos")}
    # as a row from before migration 0012 looks
    Stream.objects.filter(pk=stream.pk).update(
        usage_source="", input_tokens=None, output_tokens=None, total_tokens=None,
        cached_input_tokens=None, reasoning_tokens=None, cost_nanos=None, cost_currency="",
        price_ref="",
    )  # fmt: skip
    from streams.store import rows as stream_rows

    done = stream_rows.reprice(Stream.objects.all())
    stream.refresh_from_db()
    assert done == {"streams": 1, "changed": 1, "unpriced": 0}
    assert stream.usage_source == "reported"
    assert {name: getattr(stream, name) for name in kept} == kept


# ---- the built-in simulator's example prices --------------------------------------------------


def test_every_simulator_model_has_an_example_price():
    from streams.simulator.models import MODELS

    for model in MODELS:
        rate = prices.example_rate(model)
        assert rate.input > 0 and rate.output > rate.input and rate.currency == "EUR", model
        assert pricing.example_model(rate.ref) == model
    assert prices.example_rate("gpt-4o") is None


@pytest.mark.django_db(transaction=True)
async def test_the_built_in_simulators_answers_cost_their_example_price(settings):
    """A fresh install (no UPSTREAM_BASE_URL): whichever model the router picks, the stream
    has a cost, at the example price, said to be one."""
    settings.UPSTREAM_BASE_URL = ""
    for model in ("auto", "eu-reasoner"):
        stream, _ = await record(body(model=model))
        assert stream.status == "completed" and stream.usage_source == "reported"
        rate = prices.example_rate(stream.resolved_model)
        assert stream.price_ref == f"simulator example price: {stream.resolved_model}"
        assert stream.cost_currency == "EUR"
        assert stream.cost_nanos == pricing.cost(rate, _usage(stream)) > 0


@pytest.mark.django_db
def test_an_example_price_is_only_for_the_built_in_simulators_answers(settings):
    used = usage.Usage(1000, 500, 1500, None, None, "reported")
    settings.UPSTREAM_BASE_URL = ""
    fields = prices.cost_fields(used, "qwen3-coder", JAN)
    assert fields["price_ref"] == "simulator example price: qwen3-coder"
    # an imported capture was answered elsewhere
    assert prices.cost_fields(used, "qwen3-coder", JAN, imported=True)["cost_nanos"] is None
    # a team price wins
    price = _price("qwen3-*")
    assert prices.cost_fields(used, "qwen3-coder", JAN)["price_ref"] == price.ref
    price.delete()
    # a real upstream: never an example price (gpt-oss-20b: the maintained list's)
    settings.UPSTREAM_BASE_URL = "http://127.0.0.1:9/v1"
    assert prices.cost_fields(used, "qwen3-coder", JAN)["cost_nanos"] is None
    assert prices.cost_fields(used, "gpt-oss-20b", JAN)["price_ref"].startswith("genai-prices")


@pytest.mark.django_db
def test_the_pages_say_an_example_price_is_one(settings):
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.UPSTREAM_BASE_URL = ""
    user = get_user_model().objects.create_user("u")
    stream = Stream.objects.create(
        user=user, status="completed", resolved_model="qwen3-coder", usage_source="reported",
        input_tokens=1000, output_tokens=500, cost_nanos=660_000, cost_currency="EUR",
        price_ref="simulator example price: qwen3-coder",
    )  # fmt: skip
    client = Client()
    client.force_login(user)
    html = client.get(f"/streams/{stream.pk}/").content.decode()
    assert '<span class="example-price">(example)</span>' in html
    assert "an example price of the built-in simulator for qwen3-coder, not a real one" in html
    html = client.get(f"/streams/{stream.pk}/", HTTP_ACCEPT_LANGUAGE="nl").content.decode()
    assert "(voorbeeld)" in html and "een voorbeeldprijs van de ingebouwde simulator" in html
    assert 'id="example-prices"' in client.get("/usage/").content.decode()
    settings.UPSTREAM_BASE_URL = "http://127.0.0.1:9/v1"
    assert 'id="example-prices"' not in client.get("/usage/").content.decode()


@pytest.mark.django_db
def test_a_projects_own_price_prices_its_streams_and_no_other_projects():
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from streams.ingest.importer import read_capture, store_captures
    from streams.models import Membership, Project

    old = JAN - dt.timedelta(days=3650)
    instance = _price("gpt-4o-mini*", effective_from=old)
    mine, theirs = (Project.objects.create(name=n, slug=n) for n in ("mine", "theirs"))
    own = _price("gpt-4o-mini*", effective_from=old, project=mine, input_per_million=Decimal(5))
    ann = get_user_model().objects.create_user("ann")
    for project in (mine, theirs):
        Membership.objects.create(project=project, user=ann, role="member")
    capture = (CAPTURES / "openai_text_basic.sse").read_bytes()

    def imported(project):
        captures = read_capture(capture, "basic.sse", "")
        (stream,) = store_captures(captures, user=ann, project=project)
        return stream

    a, b = imported(mine), imported(theirs)
    assert a.price_ref == own.ref and a.cost_nanos == pricing.cost(own.rate(), _usage(a))
    assert b.price_ref == instance.ref and b.cost_nanos == pricing.cost(instance.rate(), _usage(b))
    # the user's personal project has no price of its own: the instance's
    assert imported(None).price_ref == instance.ref
    # repricing keeps each stream at its own project's price
    Stream.objects.filter(pk__in=[a.pk, b.pk]).update(cost_nanos=None, price_ref="")
    call_command("reprice", "--model", "gpt-4o-mini*", stdout=io.StringIO())
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.price_ref, b.price_ref) == (own.ref, instance.ref)
