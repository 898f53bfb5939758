"""The audit log's page (/audit/): a project's admins read their project's log, staff every
project's (and the instance's) or one project's with `?project=<slug>`; a member whose role is
lower gets 403, someone who is not a member of the project 404 (dashboard/project.py)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.forms.audit import AuditFilterForm
from dashboard.project import PARAM, project_of
from dashboard.queries import audit as audit_rows
from streams.access import projects


def _project(request):
    """The project whose log is read: the request's, except that staff read every project's
    unless the URL names one."""
    if request.user.is_staff and not request.GET.get(PARAM):
        return None
    return project_of(request)


@login_required
@require_GET
def audit(request):
    project = _project(request)
    if not projects.may(request.user, projects.Action.AUDIT, project):
        raise PermissionDenied
    form = AuditFilterForm(request.GET)
    valid = form.is_valid()
    filters = dict(form.cleaned_data) if valid else {}
    before = filters.pop("before", None)
    found = audit_rows.entries(None if project is None else [project.pk], **filters)
    page = audit_rows.page(found, before) if valid else audit_rows.Page([], None)
    older = None
    if page.next_cursor is not None:
        query = request.GET.copy()
        query["before"] = page.next_cursor
        older = f"?{query.urlencode()}"
    context = {
        "form": form,
        "page": page,
        "older": older,
        "audited": project,
        "projects": projects.projects_for(request.user).only("name", "slug")
        if request.user.is_staff
        else None,
        "nav": "audit",
    }
    return render(request, "dashboard/audit.html", context, status=200 if valid else 400)
