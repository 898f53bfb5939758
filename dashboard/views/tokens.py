"""The project's token page (/tokens/, docs/teams.md "Tokens"): the tokens a user may see in
the page's project (an admin: all of them; a member: their own), what each used against its
limits, making one (shown once) and revoking one. Who may do what: streams/access/tokens.py,
on the one rule (streams/access/projects.py)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.forms.tokens import TokenForm
from dashboard.project import project_of
from dashboard.queries.tokens import token_rows
from streams.access import projects, tokens


def _private(response):
    # a page with a token on it is kept by no cache
    response["Cache-Control"] = "private, no-store"
    return response


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request):
    user, project = request.user, project_of(request)
    manages = projects.may(user, projects.Action.MANAGE_TOKENS, project)
    if not manages and not projects.may(user, projects.Action.OWN_TOKEN, project):
        raise PermissionDenied("Your role in this project has no tokens.")
    # staff who chose every project at once see every token, and make none (no project)
    owners = tokens.owners(user, project) if project is not None else None
    form = None if owners is None else TokenForm(request.POST or None, owners=owners)
    status = 200
    if request.method == "POST":
        if form is None:
            raise Http404("Choose a project first")
        if form.is_valid():
            fields = form.token_fields()
            try:
                token = tokens.issue(user, project, **fields)
            except tokens.Refused:
                raise PermissionDenied("Not a token you may make.") from None
            context = {"token": token, "fields": fields, "project": project, "nav": "tokens"}
            return _private(render(request, "dashboard/token_created.html", context))
        status = 400
    rows, more = token_rows(user, project)
    context = {
        "rows": rows,
        "more": more,
        "form": form,
        "manages": manages,
        "currency": project.currency if project is not None else "",
        "nav": "tokens",
    }
    return _private(render(request, "dashboard/token_list.html", context, status=status))


@login_required
@require_POST
def token_revoke(request, token_id):
    if tokens.revoke(request.user, token_id) is None:
        raise Http404("No such token")
    return HttpResponseRedirect(reverse("token_list"))
