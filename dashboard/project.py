"""The project a page works in (streams/access/projects.py decides which, and what its roles
may do): `request.project`, resolved once per request when first asked for, and the top bar's
switcher.

A link may name its project (`?project=<slug>`): a colleague who opens it works in that
project from then on, if they are a member, and gets a 404 if not. Without one, the session
remembers the project last chosen; a new session starts in the one the user last worked in.
Staff may choose every project at once (`request.project` is then None).
"""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
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


def require(user, action, project):
    """403 unless `user` may do `action` in `project` (a Project or id). Only for a project
    whose things `user` has already been shown (a non-member was answered 404 before)."""
    if not projects.may(user, action, project):
        raise PermissionDenied(f"your role in this project does not allow {action}")


def abilities(user, project):
    """{action: whether `user` may do it in `project`}, for a page to leave out the controls
    its user may not use (`{% if can.score %}`); the views check again on every post."""
    return {action.value: projects.may(user, action, project) for action in projects.Action}


def writing_project(request):
    """Where what this request makes goes: the current project, or for staff working in
    every project at once their home project."""
    project = project_of(request)
    return projects.home(request.user) if project is None else project


def working(request, action):
    """The project a thing this request makes goes into, once `request.user` may do `action`
    there (else 403): the current project; staff working in every project at once make it in
    their home project (the pages say so)."""
    project = writing_project(request)
    require(request.user, action, project)
    return project


def context_processor(request):
    user = getattr(request, "user", None)
    if user is None or not projects.signed_in(user):
        return {}
    return {
        "project": project_of(request),
        # what the user may do in the current project (a stream's page: in the stream's)
        "can": SimpleLazyObject(lambda: abilities(user, writing_project(request))),
        # staff working in every project at once: where what they start goes (the pages that
        # start things say so; templates/dashboard/starts_in.html)
        "starts_in": SimpleLazyObject(
            lambda: writing_project(request) if project_of(request) is None else None
        ),
        "switchable_projects": SimpleLazyObject(
            lambda: list(projects.projects_for(user).only("pk", "name", "slug"))
        ),
        # the top bar's link to the audit log (dashboard/views/audit.py checks it again)
        "may_audit": SimpleLazyObject(
            lambda: projects.may(user, projects.Action.AUDIT, project_of(request))
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
