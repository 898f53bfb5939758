"""Test-only routes of the test provider (it listens on 127.0.0.1 for one test run): the tests
register the client, make and change users, and expire the codes handed out so far."""

import datetime as dt
import json

from django.contrib.auth.models import Group, User
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.models import Application, Grant


def _body(request):
    return json.loads(request.body or b"{}")


@csrf_exempt
@require_POST
def client(request):
    body = _body(request)
    Application.objects.filter(client_id=body["client_id"]).delete()
    Application.objects.create(
        name="Streamscope",
        client_id=body["client_id"],
        client_secret=body["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(body["redirect_uris"]),
        post_logout_redirect_uris=" ".join(body.get("post_logout_redirect_uris", [])),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=False,  # the consent form is posted too
    )
    return JsonResponse({"ok": True})


@csrf_exempt
@require_POST
def user(request):
    """Makes the user or changes them: password, address, groups (all of them, replaced)."""
    body = _body(request)
    person, _ = User.objects.get_or_create(username=body["username"])
    person.email = body.get("email", "")
    person.set_password(body["password"])
    person.save()
    person.groups.set([Group.objects.get_or_create(name=g)[0] for g in body.get("groups", [])])
    return JsonResponse({"sub": str(person.pk)})


@csrf_exempt
@require_POST
def expire_codes(request):
    past = timezone.now() - dt.timedelta(seconds=1)
    return JsonResponse({"expired": Grant.objects.update(expires=past)})
