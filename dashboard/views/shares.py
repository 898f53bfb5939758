"""Share links (streams/access/shares.py, docs/sharing.md): making one (from a timeline or a
session page), the page that lists and revokes them (/shares/), and the link itself (/s/<secret>/):
a stream read-only, or a session's streams, each through the link.

What a link shows is the stream's own content only: no link to the list, other streams,
sessions, users, compare, the playground, exports or actions, and nothing of its owner. Its
pages are answered like any other page, through the egress gate. A secret that opens nothing
(unknown, expired, revoked) gets one and the same 404 page, so a link's existence is not told;
a signed-out visitor of a link for signed-in users goes to the login page, which says why, and
back.
"""

import functools

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.shares import ShareLinkForm
from dashboard.forms.streams import SessionPageForm
from dashboard.project import project_of, writing_project
from dashboard.queries.sessions import session_page
from dashboard.queries.timing import replay_events, timing_series
from dashboard.views.streams import (
    event_detail_page,
    event_window_page,
    json_response,
    timeline_config,
    timeline_context,
)
from streams.access import shares
from streams.live import shared as live_shared

SIGN_IN_FIRST = _(
    "This link is shared with the people who can log in here, not with anyone who has it: "
    "log in to open it."
)


def private(response):
    # The URL is the credential: no cache keeps the page, no search engine lists it.
    response["Cache-Control"] = "private, no-store"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response


def gone(request, retry_after=None, invitation=False):
    """The one answer for a secret that opens nothing (unknown, expired, revoked: 404) or for
    an address that tried too many (429 after `retry_after` seconds): a share link's, or an
    invitation's (`invitation`, dashboard/views/projects.py)."""
    context = {"retry_after": retry_after, "invitation": invitation}
    status = 404 if retry_after is None else 429
    response = render(request, "dashboard/link_gone.html", context, status=status)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return private(response)


def link_view(count=False):
    """Open the link of the URL's `secret` for the request (throttled like a token), then call
    the view with it; `count`: this view is the link's own page (counted as an opening)."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(request, secret, *args, **kwargs):
            ip = request.META.get("REMOTE_ADDR") or "-"
            opening = shares.open(secret, request.user, ip, count=count)
            if opening.retry_after is not None:
                return gone(request, retry_after=opening.retry_after)
            if opening.sign_in:
                # said on the login page, so the visitor knows why they are asked to log in
                messages.info(request, SIGN_IN_FIRST)
                return redirect_to_login(request.get_full_path())
            if opening.link is None:
                return gone(request)
            response = view(request, opening.link, secret, *args, **kwargs)
            return private(response)

        return wrapper

    return decorate


def _stream_in(link, stream_id):
    stream = shares.stream_of(link, stream_id)
    if stream is None:
        raise Http404("No such stream")
    return stream


def _timeline_config(secret, stream):
    """What static/js/stream_detail/main.js needs (as the stream page's), every URL under the
    link's prefix; no probe of the API's session (a signed-out viewer is no signed-out user)."""
    pk = stream.pk

    def url(name, *args):
        return reverse(name, args=[secret, pk, *args])

    return timeline_config(
        stream,
        ws=f"/ws/shared/{secret}/{pk}/",
        probeUrl=None,
        urls={
            "page": url("shared_stream"),
            "events": url("shared_stream_events"),
            "event": url("shared_stream_event", 0).removesuffix("0/"),
            "timing": url("shared_stream_timing"),
            "replay": url("shared_stream_replay"),
        },
    )


def _stream_page(request, link, secret, stream):
    # (user None: no attempts of its own)
    context = timeline_context(request, None, stream, _timeline_config(secret, stream))
    context.update(
        link=link,
        secret=secret,
        session_url=reverse("shared", args=[secret]) if link.session else None,
        nav="shared",
    )
    return render(request, "dashboard/shared_stream.html", context)


# ---- making, listing, revoking ------------------------------------------------------------------


@login_required
@require_POST
def share_create(request):
    """From a timeline's or a session page's "Share…": the new link, shown this once."""
    form = ShareLinkForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(
            " ".join(e for errors in form.errors.values() for e in errors)
        )
    target = form.target()
    if target.get("session"):  # the session's streams in the page's project
        target["project"] = writing_project(request)
    try:
        link, secret = shares.create(request.user, **target)
    except shares.Refused:
        raise Http404("No such stream or session") from None
    except shares.Forbidden as exc:
        raise PermissionDenied(str(exc)) from None
    context = {
        "link": link,
        "url": request.build_absolute_uri(reverse("shared", args=[secret])),
        "target_url": _target_url(link),
        "nav": "shares",
    }
    return private(render(request, "dashboard/share_created.html", context))


def _target_url(link):
    if link.stream_id:
        return reverse("stream_detail", args=[link.stream_id])
    url = reverse("session_detail", args=[link.session])  # (in the link's project)
    return f"{url}?project={link.project.slug}" if link.project_id else url


@login_required
@require_GET
def share_list(request):
    found, more = shares.links_of(request.user, project=project_of(request))
    links = [(link, _target_url(link)) for link in found]
    context = {"links": links, "more": more, "nav": "shares"}
    return render(request, "dashboard/share_list.html", context)


@login_required
@require_POST
def share_revoke(request, link_id):
    if live_shared.revoke(request.user, link_id) is None:
        raise Http404("No such link")
    return HttpResponseRedirect(reverse("share_list"))


# ---- the link --------------------------------------------------------------------------------


@require_GET
@link_view(count=True)
def shared(request, link, secret):
    """The link's own page: its stream, or its session's streams."""
    if link.stream_id:
        return _stream_page(request, link, secret, _stream_in(link, link.stream_id))
    form = SessionPageForm(request.GET)
    after = form.cleaned_data["after"] if form.is_valid() else None
    page = session_page(link.owner, link.session, after=after, project=link.project_id)
    if page is None:  # its streams are gone (deleted, retention)
        return gone(request)
    context = {"link": link, "secret": secret, "page": page, "nav": "shared"}
    return render(request, "dashboard/shared_session.html", context)


@require_GET
@link_view()
def shared_stream(request, link, secret, stream_id):
    return _stream_page(request, link, secret, _stream_in(link, stream_id))


@require_GET
@link_view()
def shared_stream_events(request, link, secret, stream_id):
    return event_window_page(request, _stream_in(link, stream_id))


@require_GET
@link_view()
def shared_stream_event(request, link, secret, stream_id, index):
    return event_detail_page(request, _stream_in(link, stream_id), index)


@require_GET
@link_view()
def shared_stream_timing(request, link, secret, stream_id):
    return json_response(timing_series(_stream_in(link, stream_id)))


@require_GET
@link_view()
def shared_stream_replay(request, link, secret, stream_id):
    return json_response(replay_events(_stream_in(link, stream_id)))
