from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.forms import CaptureUploadForm
from streams import export, importer
from streams.auth import streams_for


def _get_stream_for_user(request, stream_id):
    """The stream, if `request.user` may see it. Someone else's stream is a 404, not a 403, so
    that ids of other users' streams do not leak; staff see every stream."""
    stream = streams_for(request.user).filter(pk=stream_id).first()
    if stream is None:
        raise Http404("No such stream")
    return stream


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
    stream = _get_stream_for_user(request, stream_id)
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
    stream = _get_stream_for_user(request, stream_id)
    return _download(
        request, stream, export.iter_document, export.aiter_document, "application/json", "json"
    )


@login_required
@require_http_methods(["GET", "POST"])
def stream_upload(request):
    if request.method == "POST":
        form = CaptureUploadForm(request.POST, request.FILES)
        if form.is_valid():
            streams = importer.store_captures(
                form.cleaned_data["captures"],
                user=request.user,
                model=form.cleaned_data["model"],
            )
            return HttpResponseRedirect(f"/streams/{streams[0].pk}/")
        status = 400
    else:
        form, status = CaptureUploadForm(), 200
    context = {"form": form, "nav": "streams"}
    return render(request, "dashboard/stream_upload.html", context, status=status)
