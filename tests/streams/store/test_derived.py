"""What is built from stored text besides the search index (tests/streams/store/test_search.py has
that) gives no secret back, not even a yes or no about its next character (docs/security.md,
"Derived data"): the admin's changelists filter by their own filters only, label lists are ordered
by their redacted texts, prices' globs match redacted model ids."""

import datetime as dt
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from streams.core import usage
from streams.core.pricing import Rate
from streams.models import Comment, Event, Stream
from streams.store import known_secrets, prices

pytestmark = pytest.mark.django_db

KEY = "sk-DERIVED-" + "5b6c7d8e9f0a1b2c"
MESSAGE = f"Incorrect API key provided: {KEY}"


@pytest.fixture
def staff(settings):
    settings.UPSTREAM_API_KEY = KEY
    user = get_user_model().objects.create_superuser("root", "", None)
    client = Client()
    client.force_login(user)
    return client


def rows(client, url):
    r = client.get(url)
    return r.status_code, r.content.count(b'name="_selected_action"')


def test_the_admin_filters_by_its_own_filters_and_nothing_else(staff):
    stream = Stream.objects.create(error_message=MESSAGE, resolved_model=f"m-{KEY}")
    Event.objects.create(stream=stream, index=0, data=MESSAGE, type="error")
    Comment.objects.create(stream=stream, text=MESSAGE)
    right, wrong = KEY[:14], KEY[:13] + "0"
    for url in (
        "/admin/streams/stream/?error_message__startswith=Incorrect API key provided: {}",
        "/admin/streams/stream/?error_message__gt=Incorrect API key provided: {}",
        "/admin/streams/stream/?resolved_model__startswith=m-{}",  # (a list filter's field)
        "/admin/streams/stream/?output_text__icontains={}",
        "/admin/streams/event/?data__contains={}",
        "/admin/streams/comment/?text__regex={}",
    ):
        # refused alike, right guess or wrong: nothing told
        assert rows(staff, url.format(right)) == rows(staff, url.format(wrong)) == (400, 0), url
    # what the filters themselves offer still works
    assert rows(staff, "/admin/streams/stream/?status__exact=pending") == (200, 1)
    assert rows(staff, f"/admin/streams/stream/?resolved_model__exact=m-{KEY}") == (200, 1)
    assert rows(staff, "/admin/streams/stream/?resolved_model__exact=m-x") == (200, 0)
    assert rows(staff, "/admin/streams/event/?type=error") == (200, 1)
    assert rows(staff, "/admin/streams/score/?score_type__id__exact=1") == (200, 0)
    assert rows(staff, "/admin/streams/stream/?q=nothing")[0] == 200  # (its exact id search)


def test_a_filter_of_its_own_is_asked_by_its_own_parameter_only():
    from django.contrib import admin

    from streams.admin import FiltersOnly

    class Failed(admin.SimpleListFilter):
        title, parameter_name = "failed", "failed"

        def lookups(self, request, model_admin):
            return [("1", "yes")]

        def queryset(self, request, queryset):
            return queryset

    class Probe(FiltersOnly, admin.ModelAdmin):
        list_filter = (Failed, "status")

    probe = Probe(Stream, admin.site)
    assert probe.lookup_allowed("failed", "1") and probe.lookup_allowed("status__exact", "x")
    assert not probe.lookup_allowed("failed__startswith", "1")
    assert not probe.lookup_allowed("status__gt", "x")
    assert not probe.lookup_allowed("error_message__startswith", "x")


def test_label_lists_are_in_the_order_of_their_redacted_texts(settings):
    settings.UPSTREAM_API_KEY = KEY
    # someone's imported model ids, guessing the key's next character, beside the key's own
    key_model = f"m-{KEY}"
    for c in "0123456789abcdef":
        guess = f"m-{KEY[:12]}{c}-mine"
        order = known_secrets.label_order([guess, key_model, "m-a", "m-z"])
        # where the key lands says nothing of its characters: every guess sorts alike
        assert order.index(key_model) == known_secrets.label_order(
            [f"m-{KEY[:12]}{'0' if c != '0' else '1'}-mine", key_model, "m-a", "m-z"]
        ).index(key_model)
    labels = ["b", "a", "c"]
    assert known_secrets.label_order(labels) == ["a", "b", "c"]  # (plain labels as before)


def test_label_lists_on_the_pages_use_that_order(settings):
    from dashboard.queries import stream_list

    settings.UPSTREAM_API_KEY = KEY
    user = get_user_model().objects.create_user("u", is_staff=True)
    for model in (f"m-{KEY}", f"m-{KEY[:12]}9-mine", f"m-{KEY[:12]}0-mine", "auto"):
        Stream.objects.create(user=user, requested_model="auto", resolved_model=model)
    names = stream_list.model_names(user)
    assert names == known_secrets.label_order(names) and names[0] == "auto"


def test_a_price_glob_matches_the_redacted_model_id(settings):
    settings.UPSTREAM_API_KEY = KEY
    at = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    since = at - dt.timedelta(days=1)
    used = usage.Usage(1000, 1000)

    def priced(pattern):
        prices.install([Rate(pattern, since, "EUR", Decimal(1), Decimal(2), ref="t")])
        try:
            return prices.cost_fields(used, f"m-{KEY}", at)["cost_nanos"]
        finally:
            prices.forget()

    assert priced(f"m-{KEY[:14]}*") is None and priced(f"m-{KEY[:13]}0*") is None
    assert priced("m-*") is not None  # (the glob itself still matches what it should)
