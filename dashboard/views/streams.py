"""The streams pages: the list (/) with its upload, a stream's timeline (/streams/<id>/) with its
event table, event detail, timing and replay data, the .sse and .json exports, and a proxied
client's session (/sessions/<session>/: its streams in order).
"""

from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import (
    Http404,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard import feedback
from dashboard.forms.streams import (
    CaptureUploadForm,
    CompareWithForm,
    EventWindowForm,
    SessionPageForm,
    StreamFilterForm,
)
from dashboard.project import project_of, require, working
from dashboard.queries.common import is_proxied
from dashboard.queries.sessions import session_page
from dashboard.queries.stream_detail import event_detail, event_window, stream_timeline
from dashboard.queries.stream_list import model_names, ranked_terms, search_page, stream_page
from dashboard.queries.timing import replay_events, timing_series
from dashboard.stats import compare
from streams.access.projects import Action
from streams.access.rules import streams_for
from streams.access.throttle import search_allowed
from streams.ingest import import_jobs
from streams.models import Stream
from streams.serve import export
from streams.store import retention


def get_stream_for_user(request, stream_id, action=Action.READ):
    """The stream, if `request.user` is a member of its project (whichever project the page
    works in) and, for more than reading, their role allows `action` (else 403). A stream of a
    project they are not in is a 404, not a 403, so that ids of other projects' streams do not
    leak; staff see every stream."""
    stream = streams_for(request.user).select_related("project").filter(pk=stream_id).first()
    if stream is None:
        raise Http404("No such stream")
    if action != Action.READ:
        require(request.user, action, stream.project_id)
    return stream


def _show_owner(request):
    """Whose each stream is: a column where they are not all one's own (a shared project;
    staff in every project)."""
    project = project_of(request)
    return request.user.is_staff or (project is not None and project.personal_of_id is None)


def _fragment(request):
    """Which piece of a page a request wants: `?fragment=<id>` (stream_list.js asks so, in the
    URL, instead of posing as htmx), or the id of an htmx request's target."""
    if request.GET.get("fragment"):
        return request.GET["fragment"]
    if request.headers.get("HX-Request") != "true":
        return None
    return request.headers.get("HX-Target") or None


def json_response(data):
    response = JsonResponse(data, json_dumps_params={"separators": (",", ":")})
    response["Cache-Control"] = "private, no-cache"
    return response


def timeline_config(stream, *, ws, urls, **more):
    """What stream_detail.js needs to know, as JSON in the page (json_script escapes it): the
    stream's own timeline's, or a shared stream's (its socket and URLs under the link)."""
    return {
        "id": stream.pk,
        "status": stream.status,
        "active": stream.is_active,
        "requestedModel": stream.requested_model,  # (why a finished stream has no price)
        "proxied": is_proxied(stream),
        "eventCount": stream.event_count,
        "ws": ws,
        "urls": urls,
        **more,
    }


def timeline_context(request, user, stream, config):
    """The timeline page's context for `?at=`/`?after=`/… (a running stream: its newest
    events), with its `page_config`."""
    form = EventWindowForm(request.GET)
    window = form.window() if form.is_valid() else {}
    if stream.is_active and not window:
        window = {"tail": True}  # a live table follows the newest events
    context = stream_timeline(user, stream, window)
    context["page_config"] = config
    context["events_pruned_at"] = retention.pruned_at(stream)
    return context


def _timeline_config(stream):
    pk = stream.pk
    return timeline_config(
        stream,
        ws=f"/ws/streams/{pk}/?format=json",
        urls={
            "page": reverse("stream_detail", args=[pk]),
            "events": reverse("stream_events", args=[pk]),
            "event": reverse("stream_event", args=[pk, 0]).removesuffix("0/"),
            "timing": reverse("stream_timing", args=[pk]),
            "replay": reverse("stream_replay", args=[pk]),
        },
    )


def _download(request, stream, pieces, apieces, content_type, extension):
    # Under ASGI Django would read a sync iterator to the end before sending a byte, and under
    # WSGI an async one: hand each server the kind it streams.
    content = apieces(stream) if isinstance(request, ASGIRequest) else pieces(stream)
    response = StreamingHttpResponse(content, content_type=content_type)
    filename = f"stream-{stream.pk}.{extension}"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
def stream_sse(request, stream_id):
    stream = get_stream_for_user(request, stream_id)
    return _download(
        request,
        stream,
        export.iter_sse,
        export.aiter_sse,
        "text/event-stream; charset=utf-8",
        "sse",
    )


@login_required
@require_GET
def stream_json(request, stream_id):
    stream = get_stream_for_user(request, stream_id)
    return _download(
        request, stream, export.iter_document, export.aiter_document, "application/json", "json"
    )


@login_required
@require_http_methods(["GET", "POST"])
def stream_upload(request):
    project = working(request, Action.RUN)
    if request.method == "POST":
        form = CaptureUploadForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                job = import_jobs.submit(
                    request.user,
                    form.files_to_import(),
                    model=form.cleaned_data["model"],
                    project=project,
                )
            except import_jobs.ImportRefused as exc:
                form.add_error(None, str(exc))
                context = {"form": form, "nav": "streams"}
                response = render(request, "dashboard/stream_upload.html", context, status=429)
                response["Retry-After"] = str(exc.retry_after)
                return response
            return HttpResponseRedirect(reverse("import_job", args=[job.pk]))
        status = 400
    else:
        form, status = CaptureUploadForm(), 200
    context = {"form": form, "nav": "streams"}
    return render(request, "dashboard/stream_upload.html", context, status=status)


@login_required
@require_GET
def import_job(request, job_id):
    """An import's progress; its `progress` fragment is polled while it runs (and a job nobody
    polls is cancelled). One stream imported: its page, as the upload used to lead to."""
    progress = import_jobs.progress(job_id, request.user)
    if progress is None:
        raise Http404("No such import")
    ids = progress["stream_ids"]
    single = not progress["active"] and len(ids) == 1 and len(progress["files"]) == 1
    if _fragment(request) == "import-progress":
        response = render(request, "dashboard/import_job.html#progress", progress)
        if single:
            response["HX-Redirect"] = reverse("stream_detail", args=[ids[0]])
        return response
    if single:
        return HttpResponseRedirect(reverse("stream_detail", args=[ids[0]]))
    return render(request, "dashboard/import_job.html", {**progress, "nav": "streams"})


@login_required
@require_http_methods(["POST"])
def import_cancel(request, job_id):
    if not import_jobs.cancel(job_id, request.user):
        raise Http404("No such import")
    return HttpResponseRedirect(reverse("import_job", args=[job_id]))


@login_required
@require_GET
def stream_list(request):
    form = StreamFilterForm(request.GET)
    if not form.is_valid():
        # A bad value in a hand-edited URL: show the form with its errors and no rows.
        context = {"form": form, "nav": "streams", "page": None, "models": []}
        context["show_owner"] = _show_owner(request)
        return render(request, "dashboard/stream_list.html", context, status=400)
    d = form.cleaned_data
    filters = form.filters()
    project = project_of(request)
    terms = ranked_terms(request.user, filters, project=project)
    if terms:  # words: the best matches first, each with a snippet
        retry = search_allowed(request.user)
        if retry is not None:
            return _too_many_searches(request, form, retry)
        page = search_page(request.user, filters, terms, d["page"] or 1, project=project)
    else:
        page = stream_page(
            request.user, filters, before=d["before"], after=d["after"], project=project
        )
    context = {
        "form": form,
        "page": page,
        "nav": "streams",
        "upload_form": CaptureUploadForm(),
        "query": form.query(),
        "filtered": form.is_filtered(),
        "show_owner": _show_owner(request),
        # the proxy's own delay is a column where every row is proxied
        "show_proxy": d["source"] == Stream.Source.PROXY,
        "compare_pick": True,  # a tick per row: two of them side by side
    }
    fragment = _fragment(request)
    if fragment == "streams":
        return render(request, "dashboard/stream_list.html#rows", context)
    if fragment == "results":
        return render(request, "dashboard/stream_list.html#results", context)
    context["models"] = model_names(request.user, project=project)
    return render(request, "dashboard/stream_list.html", context)


def _too_many_searches(request, form, retry):
    """429 with Retry-After: the page, or (htmx, the live list) the piece it asked for, saying
    when to search the text again (streams/access/throttle.py: `search_allowed`)."""
    context = {
        "form": form,
        "nav": "streams",
        "page": None,
        "models": [],
        "query": form.query(),
        "retry_after": retry,
        "upload_form": CaptureUploadForm(),
    }
    fragment = _fragment(request)
    if fragment == "streams":
        template = "dashboard/stream_list.html#rows"
    elif fragment == "results":
        template = "dashboard/stream_list.html#results"
    else:
        template = "dashboard/stream_list.html"
    response = render(request, template, context, status=429)
    response["Retry-After"] = str(retry)
    return response


@login_required
@require_GET
def stream_detail(request, stream_id):
    stream = get_stream_for_user(request, stream_id)
    context = timeline_context(request, request.user, stream, _timeline_config(stream))
    context["nav"] = "streams"
    context.update(feedback.panel(request.user, stream))
    return render(request, "dashboard/stream_detail.html", context)


def event_window_page(request, stream):
    """A window of the event table (`?after=`, `?before=`, `?type=`, …): the timeline's, and a
    shared stream's (dashboard/views/shares.py)."""
    form = EventWindowForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest("Invalid window")
    events = event_window(stream, **form.window())
    context = {"stream": stream, "events": events}
    return render(request, "dashboard/stream_detail.html#event_window", context)


def event_detail_page(request, stream, index):
    """One event's data, opened in the table (the timeline's, and a shared stream's)."""
    event = event_detail(stream, index)
    if event is None:
        raise Http404("No such event")
    context = {"stream": stream, "event": event}
    return render(request, "dashboard/stream_detail.html#event_detail", context)


@login_required
@require_GET
def stream_events(request, stream_id):
    return event_window_page(request, get_stream_for_user(request, stream_id))


@login_required
@require_GET
def stream_event(request, stream_id, index):
    return event_detail_page(request, get_stream_for_user(request, stream_id), index)


@login_required
@require_GET
def stream_timing(request, stream_id):
    stream = get_stream_for_user(request, stream_id)
    return json_response(timing_series(stream))


@login_required
@require_GET
def stream_replay(request, stream_id):
    stream = get_stream_for_user(request, stream_id)
    return json_response(replay_events(stream))


@login_required
@require_GET
def stream_compare(request, stream_id, other_id):
    """Two streams side by side (dashboard/stats/compare.py); polled while either runs."""
    a = get_stream_for_user(request, stream_id)
    b = get_stream_for_user(request, other_id)
    diff, cut = compare.word_diff(a.output_text, b.output_text)
    context = {
        "a": a,
        "b": b,
        "nav": "streams",
        "figures": compare.figures(a, b),
        "cost_diff": compare.cost_difference(a, b),
        "curves": [
            {**compare.arrivals(a), "label": f"a · #{a.pk}"},
            {**compare.arrivals(b), "label": f"b · #{b.pk}"},
        ],
        "diff": diff,
        "diff_cut": cut,
        "live": a.is_active or b.is_active,
    }
    if _fragment(request) == "compare-body":
        return render(request, "dashboard/stream_compare.html#body", context)
    return render(request, "dashboard/stream_compare.html", context)


@login_required
@require_GET
def stream_compare_with(request, stream_id):
    """Pick the stream to compare `stream_id` with (`?other=<id>` goes there), among the user's
    newest ones."""
    stream = get_stream_for_user(request, stream_id)
    form = CompareWithForm(request.GET)
    if form.is_valid() and form.cleaned_data["other"]:
        other = get_stream_for_user(request, form.cleaned_data["other"])
        return HttpResponseRedirect(reverse("stream_compare", args=[stream.pk, other.pk]))
    # among the streams of its own project: what a comparison is for
    recent = streams_for(request.user, stream.project_id).exclude(pk=stream.pk)
    recent = recent.order_by("-created_at")[:20]
    context = {"stream": stream, "recent": recent, "form": form, "nav": "streams"}
    return render(request, "dashboard/stream_compare_with.html", context)


@login_required
@require_GET
def stream_compare_pick(request):
    """The list's two ticked streams (`?s=<id>&s=<id>`), side by side; anything else says to
    tick two."""
    ids = [int(v) for v in request.GET.getlist("s") if v.isdigit() and len(v) <= 18]
    if len(ids) == 2 and ids[0] != ids[1]:
        return HttpResponseRedirect(reverse("stream_compare", args=ids))
    return render(request, "dashboard/stream_compare_pick.html", {"nav": "streams"}, status=200)


@login_required
@require_GET
def session_detail(request, session):
    form = SessionPageForm(request.GET)
    after = form.cleaned_data["after"] if form.is_valid() else None
    page = session_page(request.user, session, after=after, project=project_of(request))
    if page is None:
        # none of the user's own (staff: nobody's): whether others used the name is not told
        raise Http404("No such session")
    context = {
        "page": page,
        "nav": "streams",
        "show_owner": _show_owner(request),
        "show_proxy": True,
        "in_session": True,
    }
    return render(request, "dashboard/session_detail.html", context)
