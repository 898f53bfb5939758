"""Who makes a request's changes, for the audit log (streams/store/audit.py): the signed-in user
(or the API's bearer token's, set later by the API's own check: read when a change is recorded)
and the client's address, for every request, the admin's included."""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from streams.access.projects import signed_in
from streams.store import audit


def actor_of(request):
    # REMOTE_ADDR is the ASGI scope's client, as streams.access.throttle.client_ip reads it
    # (behind nginx, Daphne's --proxy-headers puts the forwarded address there)
    address = request.META.get("REMOTE_ADDR") or "-"
    user = getattr(request, "user", None)
    if signed_in(user):
        return audit.Actor(user.pk, user.get_username(), address)
    return audit.Actor(None, audit.ANONYMOUS, address)


class AuditMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        with audit.acting(lambda: actor_of(request)):
            return self.get_response(request)

    async def _acall(self, request):
        with audit.acting(lambda: actor_of(request)):
            return await self.get_response(request)
