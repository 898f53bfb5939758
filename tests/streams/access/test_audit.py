"""Who makes a request's changes (streams/access/audit.py): the signed-in user and the client's
address, through Django's test client and through the ASGI application (the middleware on the
event loop, the view in a thread); after the request, changes are no one's again."""

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse

from streams.models import AuditEntry, Price, ShareLink, Stream


def one(action, **filters):
    found = list(AuditEntry.objects.filter(action=action, **filters))
    assert len(found) == 1, (action, list(AuditEntry.objects.values_list("action", flat=True)))
    return found[0]


@pytest.mark.django_db
def test_a_request_is_its_user_and_address(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    stream = Stream.objects.create(user=alice, status=Stream.Status.COMPLETED)
    client = Client(REMOTE_ADDR="192.0.2.7")
    client.force_login(alice)
    r = client.post(reverse("share_create"), {"stream": stream.pk, "expires": "1d"})
    assert r.status_code == 200
    made = one("share_link.created")
    assert (made.actor_id, made.actor_name, made.address) == (alice.pk, "alice", "192.0.2.7")
    link = ShareLink.objects.get()
    assert client.post(reverse("share_revoke", args=[link.pk])).status_code == 302
    assert one("share_link.revoked").address == "192.0.2.7"
    # after the request, changes are no one's again
    Price.objects.create(
        model_pattern="m", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        input_per_million=1, output_per_million=1,
    )  # fmt: skip
    assert one("price.created").actor_name == "system"


@pytest.mark.django_db(transaction=True)
async def test_a_request_through_the_asgi_app_is_its_user_and_address(people):
    # the middleware runs on the event loop, the view in a thread: who is asking crosses over
    from asgiref.sync import sync_to_async

    from tests.support.clients import session

    stream = await sync_to_async(Stream.objects.create)(
        user=people.owner, status=Stream.Status.COMPLETED
    )
    client = session(people.owner)
    r = await client.post(reverse("share_create"), {"stream": stream.pk, "expires": "1d"})
    assert r.status_code == 200
    made = await sync_to_async(one)("share_link.created")
    assert (made.actor_id, made.actor_name, made.address) == (people.owner.pk, "owner", "127.0.0.1")


@pytest.mark.django_db
def test_the_user_is_read_when_the_change_is_recorded(django_user_model):
    # the API's bearer token sets request.user after the middleware ran (streams/serve/http.py)
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpResponse
    from django.test import RequestFactory

    from streams.access.audit import AuditMiddleware

    bot = django_user_model.objects.create_user("bot")
    request = RequestFactory().post("/api/x", REMOTE_ADDR="192.0.2.44")
    request.user = AnonymousUser()

    def view(request):
        request.user = bot  # as api_view does with a valid token
        Price.objects.create(
            model_pattern="api*", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            input_per_million=1, output_per_million=1,
        )  # fmt: skip
        return HttpResponse()

    AuditMiddleware(view)(request)
    made = one("price.created")
    assert (made.actor_id, made.actor_name, made.address) == (bot.pk, "bot", "192.0.2.44")
