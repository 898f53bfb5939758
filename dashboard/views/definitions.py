"""A project's score types and prices (/projects/<slug>/score-types/, /projects/<slug>/prices/):
everyone in the project reads them, with the instance's; its admins add, change and delete its
own (streams/access/definitions.py decides and checks). Bad input is a 400 with the page saying
what, under the field; a type in use keeps its kind and range (409).

The two pages are one mechanism over a `Table` each: the same list, forms and answers.
"""

import dataclasses

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _g
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.definitions import PriceForm, ScoreTypeForm
from dashboard.views.projects import project_view
from streams.access import definitions, members, projects
from streams.access.definitions import Invalid
from streams.access.members import Refused
from streams.access.projects import Action
from streams.models import Price, ScoreType


@dataclasses.dataclass(frozen=True)
class Table:
    model: type
    form: type
    action: Action  # who may change it
    listed: object  # (project) -> the rows shown
    of: object  # (project, pk) -> one of its own
    save: object  # (actor, project, row)
    delete: object  # (actor, project, pk)
    url: str  # the list's URL name
    template: str
    param: str  # the URL's name of a row's id


SCORE_TYPES = Table(
    ScoreType,
    ScoreTypeForm,
    Action.MANAGE_SCORE_TYPES,
    definitions.score_types,
    definitions.score_type_of,
    definitions.save_score_type,
    definitions.delete_score_type,
    "project_score_types",
    "dashboard/project_score_types.html",
    "score_type_id",
)
PRICES = Table(
    Price,
    PriceForm,
    Action.MANAGE_PRICES,
    definitions.prices,
    definitions.price_of,
    definitions.save_price,
    definitions.delete_price,
    "project_prices",
    "dashboard/project_prices.html",
    "price_id",
)


def _page(request, table, project, status=200, add_form=None, editing=None):
    manage = projects.may(request.user, table.action, project)
    rows = table.listed(project)
    for row in rows:
        if manage and row.own:
            failed = editing is not None and editing.instance.pk == row.pk
            row.form = editing if failed else table.form(instance=row, auto_id=f"r{row.pk}_%s")
            row.failed = failed
    context = {
        # (not `project`: that is the page's current project, the top bar's, context_processor)
        "this_project": project,
        "rows": rows,
        "may_manage": manage,
        "add_form": add_form or table.form(),
        "nav": "projects",
    }
    return render(request, table.template, context, status=status)


def _saved(request, table, project, form, **page):
    """Writes the form's row if it is valid, else the page again saying why (400; 409 for a
    rule such as a type in use)."""
    if form.is_valid():
        try:
            table.save(request.user, project, form.instance)
        except Invalid as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        except Refused as exc:
            if exc.status in (403, 404):
                raise
            form.add_error(None, exc.message)
            return _page(request, table, project, status=exc.status, **page)
        else:
            messages.success(request, _g("Saved."))
            return HttpResponseRedirect(reverse(table.url, args=[project.slug]))
    return _page(request, table, project, status=400, **page)


def _list(table):
    @require_GET
    @project_view
    def view(request, project):
        return _page(request, table, project)

    return view


def _add(table):
    @require_POST
    @project_view
    def view(request, project):
        members.require(request.user, table.action, project)
        form = table.form(request.POST, instance=table.model(project=project))
        return _saved(request, table, project, form, add_form=form)

    return view


def _edit(table):
    @require_POST
    @project_view
    def view(request, project, **kwargs):
        members.require(request.user, table.action, project)
        pk = kwargs[table.param]
        row = table.of(project, pk)
        form = table.form(request.POST, instance=row, auto_id=f"r{pk}_%s")
        return _saved(request, table, project, form, editing=form)

    return view


def _delete(table):
    @require_POST
    @project_view
    def view(request, project, **kwargs):
        try:
            gone = table.delete(request.user, project, kwargs[table.param])
        except Refused as exc:
            if exc.status in (403, 404):
                raise
            messages.error(request, exc.message)
            return _page(request, table, project, status=exc.status)
        if gone is not None:  # (none: deleted already, a second click)
            messages.success(request, _g("Deleted."))
        return HttpResponseRedirect(reverse(table.url, args=[project.slug]))

    return view


project_score_types = _list(SCORE_TYPES)
project_score_type_add = _add(SCORE_TYPES)
project_score_type_edit = _edit(SCORE_TYPES)
project_score_type_delete = _delete(SCORE_TYPES)
project_prices = _list(PRICES)
project_price_add = _add(PRICES)
project_price_edit = _edit(PRICES)
project_price_delete = _delete(PRICES)
