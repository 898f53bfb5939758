"""The time zone of a page: the one the user chose, else their browser's, else UTC; data stays UTC.

Both live in one cookie, `streamscope_tz`: static/js/timezone.js writes `auto:<zone>` from the
browser's `Intl.DateTimeFormat().resolvedOptions().timeZone` while the cookie is absent or
automatic, and the top bar's selector writes a bare `<zone>` (a choice, which the script then
leaves alone: a choice takes precedence over the browser's). `auto` alone goes back to the
browser's. The page after the one that wrote it uses it.

Django renders every datetime of a template in the active zone (`USE_TZ`), and a form's
datetime field reads naive input in it; the analytics reports get the zone through their scope
(`Scope.tz`: their days and buckets are the user's, streams/stats/sql.py). The JSON API, the
exports, the proxy's `/v1`, `/metrics` and the JSON the pages' scripts read stay UTC whatever
the cookie says (`language.is_data`): a client never gets local time where it parses UTC.
"""

import datetime as dt
import functools
import json
import zoneinfo

from django.http import HttpResponseBadRequest, HttpResponseRedirect
from django.utils import timezone
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from dashboard.language import is_data

COOKIE = "streamscope_tz"
AUTO = "auto:"  # the browser's zone, as the script found it (else: the user's choice)
UTC = "UTC"
COOKIE_AGE_S = 365 * 24 * 3600
# In the selector without scripts (the script adds every zone the browser knows): UTC, the
# zones of the EU GPT's users and a few of the teams they work with.
COMMON = (
    "Europe/Amsterdam",
    "Europe/Brussels",
    "Europe/Berlin",
    "Europe/Paris",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Lisbon",
    "Europe/Helsinki",
    "America/New_York",
    "America/Los_Angeles",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Australia/Sydney",
)


# Files of the zone database that name no zone: Debian's `localtime` is a link to the
# machine's own /etc/localtime (chosen, it would be whatever the server is set to).
NOT_ZONES = frozenset({"localtime", "posixrules"})


@functools.cache
def available():
    """The IANA names this server knows, and "UTC"."""
    return (frozenset(zoneinfo.available_timezones()) - NOT_ZONES) | {UTC}


# Other names of UTC itself (not zones that keep its offset, as GMT or Africa/Abidjan): one
# zone, so one choice, "UTC", however the browser or the selector's list spells it.
UTC_ALIASES = frozenset(
    {"Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Universal", "Zulu"}
)


def valid(name):
    """`name` if it is a zone this server knows ("UTC" for another name of UTC), else None."""
    if not isinstance(name, str) or name not in available():
        return None
    return UTC if name in UTC_ALIASES else name


def current_name():
    """The IANA name of the active zone. (Django's `get_current_timezone_name` gives a zone
    whose offset never changes its abbreviation instead, "-12" for Etc/GMT+12: no zone's
    name, so a report handed it failed to load it.)"""
    zone = timezone.get_current_timezone()
    return getattr(zone, "key", None) or timezone.get_current_timezone_name()


def from_cookie(value):
    """(zone name, "chosen" | "browser" | "default") of the cookie's value: anything not a
    known zone is UTC."""
    value = (value or "").strip()
    if value.startswith(AUTO):
        name = valid(value[len(AUTO) :])
        return (name, "browser") if name else (UTC, "default")
    name = valid(value)
    return (name, "chosen") if name else (UTC, "default")


@require_POST
def set_time_zone(request):
    """The selector's choice into the cookie, then back to the page it was made on (`next`,
    when it is this site's). `tz=auto` goes back to the browser's zone (`browser`: the script
    sends what it found; without it, the next page's script fills it in). An unknown zone is a
    400 and the cookie is left as it was."""
    choice = request.POST.get("tz", "").strip()
    if choice == "auto":
        browser = valid(request.POST.get("browser", "").strip())
        value = AUTO + (browser or "")
    elif valid(choice):
        value = choice
    else:
        message = _("Unknown time zone: “%(zone)s”.") % {"zone": choice[:64]}
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    response = HttpResponseRedirect(target)
    response.set_cookie(
        COOKIE, value, max_age=COOKIE_AGE_S, samesite="Lax", secure=request.is_secure()
    )
    return response


def context_processor(request):
    """The page's zone (`TIME_ZONE`, by its IANA name), the selector's zones besides "auto"
    and UTC (the chosen one first when it is not common), and the page zone's abbreviations
    for the scripts (`abbreviations`)."""
    chosen = getattr(request, "time_zone", UTC)
    source = getattr(request, "time_zone_source", "default")
    extra = (chosen,) if source == "chosen" and chosen != UTC and chosen not in COMMON else ()
    return {
        "TIME_ZONE": current_name(),
        "time_zone_choices": extra + COMMON,
        "time_zone_names": abbreviations(chosen),
    }


@functools.cache
def abbreviations(name, years=(-4, 2)):
    """{UTC offset in seconds: abbreviation} of zone `name` from a few years back to a couple
    ahead, as JSON: {"3600": "CET", "7200": "CEST"}. static/js/time.js names a time's zone by
    its offset from it, as the templates name it (Django's "T": the zone database's
    abbreviation), where Intl's names depend on the language ("GMT+1" in English, "CET" in
    Dutch). Sampled weekly: a zone keeps an offset for months."""
    zone = zoneinfo.ZoneInfo(name)
    start = dt.datetime(dt.datetime.now(dt.UTC).year + years[0], 1, 1, tzinfo=dt.UTC)
    found = {}
    for week in range(52 * (years[1] - years[0])):
        local = (start + dt.timedelta(weeks=week)).astimezone(zone)
        found.setdefault(str(int(local.utcoffset().total_seconds())), local.tzname())
    return json.dumps(found, sort_keys=True)


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
