"""The analytics pages: latency (/latency/), routing (/routing/), usage and cost (/usage/, its
per-model table as CSV at /usage/export.csv), admin analytics (/analytics/).

Each view checks access, parses the query string with a form, makes one call into
`dashboard.stats` (one report module per page) and renders. The pages poll themselves (htmx,
every 10 s while visible) with the version of the data they show; an unchanged version answers
204 and htmx keeps the page.
"""

import datetime as dt
import functools

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone as django_timezone
from django.views.decorators.http import require_GET

from dashboard import exports, timezone
from dashboard.forms.analytics import AdminAnalyticsForm, LatencyForm, RoutingForm
from dashboard.project import project_of
from dashboard.stats.admin import admin_report
from dashboard.stats.latency import PHASES, latency_report
from dashboard.stats.routing import routing_report
from dashboard.stats.usage import CSV_COLUMNS, export_rows, usage_report
from streams.access.rules import score_types_for
from streams.simulator import built_in_upstream


def _render(request, template, context, form):
    """The whole page, or only its content region for htmx polls; 400 for invalid input."""
    status = 400 if form.is_bound and form.errors else 200
    query = request.GET.copy()
    query.pop("v", None)
    context["poll_url"] = f"{request.path}?{query.urlencode()}" if query else request.path
    if request.headers.get("HX-Request") and status == 200:
        template += "#content"
    return render(request, template, context, status=status)


def _staff_only(view):
    """Logged-in staff only: anonymous users go to the login page, others get a 403."""

    @login_required
    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise PermissionDenied("Staff only")
        return view(request, *args, **kwargs)

    return wrapper


def _known_version(request):
    # only a poll may be answered with "nothing changed"
    return request.GET.get("v") if request.headers.get("HX-Request") else None


def _report_page(request, form, report, template, **context):
    """The three pages' common shape: a form over the query string, one report, render; a
    poll whose data has not changed gets 204 (htmx keeps the page)."""
    now = dt.datetime.now(dt.UTC)
    data = None
    if not form.is_bound or form.is_valid():
        scope = form.scope(request.user, project_of(request), now)
        data = report(scope, known_version=_known_version(request), now=now)
        if data is None:
            return HttpResponse(status=204)
    return _render(request, template, {"form": form, "report": data, **context}, form)


@login_required
@require_GET
def latency(request):
    form = LatencyForm(request.GET)
    # the types this project's pages offer (an evaluator's is its project's own)
    form.fields["score"].queryset = score_types_for(request.user, project_of(request))

    def report(scope, **kwargs):
        return latency_report(
            scope,
            compare_with=form.comparison(request.user, project_of(request), kwargs["now"]),
            score_type=form.score_type(),
            **kwargs,
        )

    return _report_page(
        request, form, report, "dashboard/latency.html", nav="latency", phase_labels=PHASES
    )


@login_required
@require_GET
def routing(request):
    return _report_page(
        request, RoutingForm(request.GET), routing_report, "dashboard/routing.html",
        nav="routing",
    )  # fmt: skip


@login_required
@require_GET
def usage(request):
    # the latency page's filters (its comparison fields are not offered here)
    form = LatencyForm(request.GET)
    # the CSV of the same filters, its custom bounds read in this page's zone (usage_export)
    query = request.GET.copy()
    query.pop("v", None)
    query["tz"] = form.tz
    return _report_page(
        request, form, usage_report, "dashboard/usage.html", nav="usage",
        export_query=query.urlencode(), example_prices=built_in_upstream(),
    )  # fmt: skip


@login_required
@require_GET
def usage_export(request):
    """The usage page's per-model table as CSV, for the same filters: data (English, UTC,
    plain numbers; dashboard/language.py), so its custom bounds are read in the zone the page
    showed them in (`tz`, which the page's link carries), else UTC."""
    tz = timezone.valid(request.GET.get("tz")) or timezone.UTC
    form = LatencyForm(request.GET, tz=tz)
    with django_timezone.override(tz):  # (a DateTimeField reads naive input in the active zone)
        invalid = form.is_bound and not form.is_valid()
    if invalid:
        return HttpResponseBadRequest(form.errors.as_text(), content_type="text/plain")
    now = dt.datetime.now(dt.UTC)
    rows = [CSV_COLUMNS, *export_rows(form.scope(request.user, project_of(request), now), now)]

    async def alines():
        for line in exports.lines(rows):
            yield line

    # Under ASGI Django would read a sync iterator to the end before sending a byte, and
    # under WSGI an async one: each server gets the kind it streams (as the .sse exports)
    content = alines() if isinstance(request, ASGIRequest) else exports.lines(rows)
    response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@_staff_only
@require_GET
def admin_analytics(request):
    return _report_page(
        request, AdminAnalyticsForm(request.GET), admin_report,
        "dashboard/admin_analytics.html", nav="admin",
    )  # fmt: skip
