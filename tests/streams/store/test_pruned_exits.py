"""Every exit tells a stream whose events retention deleted, on both databases
(streams/store/retention.py, `pruned_at`): the stream's page, its share page, the API, the
`.json` export and the admin. SQLite's batches mark the stream's row; PostgreSQL drops the
day's partition of blocks and records the day, marking no row (tier 2, DATABASE_URL); the
answers are the same."""

import datetime as dt
import json
import re

import pytest
from django.test import Client
from django.utils import formats, timezone

from streams.access import shares
from streams.ingest.importer import import_capture
from streams.models import ApiToken, PrunedDay, Stream
from streams.store import compact, partitions, retention
from tests.support.paths import CAPTURES

pytestmark = pytest.mark.django_db

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


@pytest.fixture(autouse=True)
def fresh_partitions(monkeypatch):
    # (each test's transaction rolls back the partitions it made: forget them with it)
    monkeypatch.setattr(partitions, "_made", set())


def recorded(owner, days_ago):
    name = "openai_text_long_722ev.sse"
    [stream] = import_capture((CAPTURES / name).read_bytes(), name, user=owner)
    Stream.objects.filter(pk=stream.pk).update(created_at=NOW - dt.timedelta(days=days_ago))
    return Stream.objects.get(pk=stream.pk)


def what_exits_say(owner, stream):
    """The pruned time each exit gives (None: it says nothing was deleted)."""
    client = Client()
    client.force_login(owner)
    page = client.get(f"/streams/{stream.pk}/").content.decode()
    _link, secret = shares.create(owner, stream=stream)
    shared = client.get(f"/s/{secret}/streams/{stream.pk}/").content.decode()
    token = ApiToken.issue(owner)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get(f"/api/streams/{stream.pk}/").json()
    head = b"".join(client.get(f"/streams/{stream.pk}.json").streaming_content).split(b"\n")[0]
    admin = client.get(f"/admin/streams/stream/{stream.pk}/change/").content.decode()
    [admin_says] = re.findall(
        r'field-events_pruned(?:_at)?\b.*?class="readonly">(.*?)</div>', admin, re.S
    )
    return {
        "page": 'id="events-pruned"' in page,
        "share page": 'id="events-pruned"' in shared,
        "api": api["events_pruned_at"],
        "export": json.loads(head)["events_pruned_at"],
        "admin": admin_says,
    }


def test_every_exit_tells_a_stream_whose_events_retention_deleted(settings, django_user_model):
    owner = django_user_model.objects.create_user("owner", is_staff=True, is_superuser=True)
    gone, young = recorded(owner, days_ago=40), recorded(owner, days_ago=10)
    compact.sweep(limit=None, grace_s=-3600)
    settings.STREAMSCOPE = {"RETAIN_EVENTS_DAYS": 30}

    assert retention.prune(now=NOW) == {"streams": 0, "events": 722, "event_streams": 1}

    marked = Stream.objects.get(pk=gone.pk).events_pruned_at
    if partitions.partitioned():  # the day was dropped and recorded: no row touched
        assert marked is None
        assert list(PrunedDay.objects.values_list("at", flat=True)) == [NOW]
    else:
        assert marked == NOW
    assert retention.pruned_at(Stream.objects.get(pk=gone.pk)) == NOW
    said = what_exits_say(owner, Stream.objects.get(pk=gone.pk))
    assert said == {
        "page": True,
        "share page": True,
        "api": NOW.isoformat(),
        "export": NOW.isoformat(),
        "admin": formats.localize(timezone.template_localtime(NOW)),
    }
    kept = what_exits_say(owner, Stream.objects.get(pk=young.pk))
    assert kept == {"page": False, "share page": False, "api": None, "export": None, "admin": "-"}
    assert retention.prune(now=NOW) == {"streams": 0, "events": 0, "event_streams": 0}
