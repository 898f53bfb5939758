"""Downloads of the streams list: `/streams.csv` (dashboard/exports.py writes it).

The list's own query string and filtering (`StreamFilterForm`,
`queries.stream_list.filter_streams` over `streams_for`): the current project's streams
(staff in every project at once: everyone's), exactly those the list shows for the same
filters, all of them rather than a page (the list's `before` / `after` cursors are ignored),
up to STREAMSCOPE_CSV_MAX_ROWS.
"""

import datetime as dt

from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET

from dashboard import exports
from dashboard.forms.streams import StreamFilterForm
from dashboard.project import project_of
from dashboard.queries import stream_list
from streams.access.rules import streams_for
from streams.access.throttle import search_allowed
from streams.core import conf


@login_required
@require_GET
def stream_list_csv(request):
    form = StreamFilterForm(request.GET)
    if not form.is_valid():
        errors = "; ".join(f"{name}: {' '.join(e)}" for name, e in form.errors.items())
        response = HttpResponseBadRequest(
            f"Invalid filters: {errors}\n", content_type="text/plain; charset=utf-8"
        )
        response["X-Content-Type-Options"] = "nosniff"
        return response
    project = project_of(request)
    if stream_list.ranked_terms(request.user, form.filters(), project):  # (a search of the text)
        retry = search_allowed(request.user)
        if retry is not None:
            response = HttpResponse(
                gettext("Too many searches: try again in %(n)s s.") % {"n": retry} + "\n",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(retry)
            return response
    streams = stream_list.filter_streams(streams_for(request.user, project), form.filters())
    limit = conf.get().csv_max_rows
    cut = exports.truncated(streams, limit)
    # Under ASGI Django would read a sync iterator to the end before sending a byte: hand each
    # server the kind it streams (as the .sse and .json downloads do).
    if isinstance(request, ASGIRequest):
        content = exports.aiter_csv(streams, limit, cut)
    else:
        content = exports.iter_csv(streams, limit, cut)
    response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="streams-{stamp}.csv"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, no-cache"
    if cut:
        response["X-Streamscope-Truncated"] = str(limit)
    return response
