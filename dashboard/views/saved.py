"""Saved views (dashboard/saved_views.py): the page that lists them, saving one, deleting one."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from dashboard import saved_views
from dashboard.forms.saved import SaveViewForm
from dashboard.project import project_of, working
from streams.access.projects import Action


@login_required
@require_http_methods(["GET", "POST"])
def saved_view_list(request):
    error, status = None, 200
    if request.method == "POST":
        project = working(request, Action.SAVE_VIEW)
        form = SaveViewForm(request.POST)
        if form.is_valid():
            try:
                view = saved_views.save(request.user, **form.cleaned_data, project=project)
                return HttpResponseRedirect(saved_views.url(view))
            except saved_views.Refused as exc:
                error = str(exc)
        else:
            error = " ".join(e for errors in form.errors.values() for e in errors)
        status = 400
    views = [
        (view, saved_views.url(view), saved_views.in_words(view))
        for view in saved_views.visible(request.user, project_of(request))
    ]
    context = {"views": views, "error": error, "nav": "views"}
    return render(request, "dashboard/saved_views.html", context, status=status)


@login_required
@require_POST
def saved_view_delete(request, view_id):
    if not saved_views.delete(request.user, view_id):
        raise Http404("No such view")
    return HttpResponseRedirect(reverse("saved_views"))
