"""The project a page works in (streams/access/projects.py decides which, and what its roles
may do): `request.project`, resolved once per request when first asked for, and the top bar's
switcher.

A link may name its project (`?project=<slug>`): a colleague who opens it works in that
project from then on, if they are a member, and gets a 404 if not. Without one, the session
remembers the project last chosen; a new session starts in the one the user last worked in.
Staff may choose every project at once (`request.project` is then None).
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseBadRequest, HttpResponseRedirect
from django.utils.functional import SimpleLazyObject
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from streams.access import projects

SESSION_KEY = "streamscope_project"
PARAM = "project"


def _resolve(request):
    user = getattr(request, "user", None)
    remembered = request.session.get(SESSION_KEY) if hasattr(request, "session") else None
    slug = request.GET.get(PARAM, "") if request.method in ("GET", "HEAD") else ""
    try:
        project, key = projects.current(user, slug, remembered)
    except LookupError:
        # the 404 page itself works in the project they were in
        request._streamscope_project = projects.current(user, "", remembered)[0]
        raise Http404("no such project") from None
    if key is not None and key != remembered and hasattr(request, "session"):
        request.session[SESSION_KEY] = key
        if project is not None:
            projects.remember(user, project)
    return project


class ProjectMiddleware:
    """Sets `request.project`, lazily: a request that never asks costs nothing."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.project = SimpleLazyObject(lambda: project_of(request))
        if request.GET.get(PARAM) and request.method in ("GET", "HEAD"):
            project_of(request)  # a link's project now: a 404 for one that is not theirs
        return self.get_response(request)


_UNRESOLVED = object()


def project_of(request):
    """The project `request` works in (a Project, or None for staff in every project), itself
    rather than `request.project`'s lazy wrapper (which `is None` cannot test)."""
    project = getattr(request, "_streamscope_project", _UNRESOLVED)
    if project is _UNRESOLVED:
        given = getattr(request, "project", None)
        if given is not None and not isinstance(given, SimpleLazyObject):
            # a bearer token's own project (streams/serve/http.py): its requests work there
            project = given
        else:
            project = _resolve(request)
        request._streamscope_project = project
    return project


def context_processor(request):
    user = getattr(request, "user", None)
    if user is None or not projects.signed_in(user):
        return {}
    return {
        "project": project_of(request),
        "switchable_projects": SimpleLazyObject(
            lambda: list(projects.projects_for(user).only("pk", "name", "slug"))
        ),
    }


@login_required
@require_POST
def switch_project(request):
    """The switcher's choice: work in that project (staff: "all" for every project) and go
    back to the page, without its old `?project=`."""
    user = request.user
    slug = request.POST.get(PARAM, "")
    if slug == "all" and user.is_staff:
        request.session[SESSION_KEY] = projects.ALL
    else:
        project = projects.by_slug(user, slug)
        if project is None:
            return HttpResponseBadRequest("unknown project")
        request.session[SESSION_KEY] = project.pk
        projects.remember(user, project)
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = "/"
    path, _, query = target.partition("?")
    kept = "&".join(p for p in query.split("&") if p and not p.startswith(f"{PARAM}="))
    return HttpResponseRedirect(path + (f"?{kept}" if kept else ""))
