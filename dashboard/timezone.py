"""The time zone of a page: the one the user chose, else their browser's, else UTC; data stays UTC.

Both live in one cookie, `streamscope_tz`: static/js/timezone.js writes `auto:<zone>` from the
browser's `Intl.DateTimeFormat().resolvedOptions().timeZone` while the cookie is absent or
automatic, and the top bar's selector writes a bare `<zone>` (a choice, which the script then
leaves alone: a choice takes precedence over the browser's). `auto` alone goes back to the
browser's. The page after the one that wrote it uses it.

Django renders every datetime of a template in the active zone (`USE_TZ`), and a form's
datetime field reads naive input in it; the analytics reports get the zone through their scope
(`Scope.tz`: their days and buckets are the user's, dashboard/stats/sql.py). The JSON API, the
exports, the proxy's `/v1`, `/metrics` and the JSON the pages' scripts read stay UTC whatever
the cookie says (`language.is_data`): a client never gets local time where it parses UTC.
"""

import functools
import zoneinfo

from django.utils import timezone
from django.utils.deprecation import MiddlewareMixin

from dashboard.language import is_data

COOKIE = "streamscope_tz"
AUTO = "auto:"  # the browser's zone, as the script found it (else: the user's choice)
UTC = "UTC"


@functools.cache
def available():
    """The IANA names this server knows, and "UTC"."""
    return frozenset(zoneinfo.available_timezones()) | {UTC}


def valid(name):
    """`name` if it is a zone this server knows, else None."""
    if not isinstance(name, str) or name not in available():
        return None
    return name


def from_cookie(value):
    """(zone name, "chosen" | "browser" | "default") of the cookie's value: anything not a
    known zone is UTC."""
    value = (value or "").strip()
    if value.startswith(AUTO):
        name = valid(value[len(AUTO) :])
        return (name, "browser") if name else (UTC, "default")
    name = valid(value)
    return (name, "chosen") if name else (UTC, "default")


class TimeZoneMiddleware(MiddlewareMixin):
    """Activates the request's zone for pages; UTC for data routes. (MiddlewareMixin: sync and
    async alike, so the async views are not adapted through a thread for this.)"""

    def process_request(self, request):
        if is_data(request.path):
            name, source = UTC, "default"
        else:
            name, source = from_cookie(request.COOKIES.get(COOKIE))
        request.time_zone, request.time_zone_source = name, source
        timezone.activate(zoneinfo.ZoneInfo(name))

    def process_response(self, request, response):
        timezone.deactivate()
        return response
