"""Saved views: a page's filters under a name, kept on the server (`SavedView`), in a project:
private to their owner or shared with the project's members; listed at /views/ (the current
project's) and opened as the page's URL with their query string and the project's slug.

What is saved is cleaned here: only the page's own filter fields (its form's), never a cursor
or a page number, empty values dropped, at most QUERY_MAX characters. A view names filters, not
data: whoever opens a shared view sees what the filters select among the streams they may see
(streams.access.rules), nothing of the owner's.
"""

from urllib.parse import urlencode

from django import forms
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.http import QueryDict
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext

from dashboard import dates
from dashboard.forms.analytics import AdminAnalyticsForm, LatencyForm, RoutingForm
from dashboard.forms.streams import StreamFilterForm
from dashboard.models import SavedView
from streams.access import projects
from streams.models import Project

Page = SavedView.Page
# The filter fields of each page: its form's (the usage page reads the latency page's form).
FIELDS = {
    Page.STREAMS: StreamFilterForm.base_fields,
    Page.LATENCY: LatencyForm.base_fields,
    Page.ROUTING: RoutingForm.base_fields,
    Page.USAGE: LatencyForm.base_fields,
    Page.ANALYTICS: AdminAnalyticsForm.base_fields,
}
NOT_SAVED = frozenset({"before", "after", "page", "fragment"})  # where one was, not what
QUERY_MAX = 2000
MAX_PER_USER = 200


class Refused(Exception):
    """A view that cannot be saved: the message says why."""


def clean_query(page, query):
    """`query` (a query string) reduced to `page`'s filter fields, in a stable order."""
    fields = FIELDS[page]
    data = QueryDict(query or "")
    kept = [
        (key, value)
        for key in sorted(data)
        if key in fields and key not in NOT_SAVED
        for value in data.getlist(key)
        if value.strip()
    ]
    text = urlencode(kept)
    if len(text) > QUERY_MAX:
        raise Refused(gettext("These filters are longer than %(n)s characters.") % {"n": QUERY_MAX})
    return text


def visible(user, project=None):
    """The views `user` may open: their own and the shared ones of the projects they are in
    (of `project`, given), each page's together."""
    views = SavedView.objects.filter(Q(owner=user) | Q(shared=True))
    return projects.in_project(views, user, project).select_related("owner", "project")


def save(user, page, name, query, shared, project=None):
    """Save (or, under the same page and name, replace) `user`'s view in `project` (by
    default their personal one); the view."""
    if page not in FIELDS:
        raise Refused(gettext("Views of this page cannot be saved."))
    if page == Page.ANALYTICS and not user.is_staff:
        raise Refused(gettext("Only staff see this page."))
    cleaned = clean_query(page, query)
    project = project or Project.personal(user)
    with transaction.atomic():
        mine = SavedView.objects.filter(owner=user, project=project, page=page, name=name)
        existing = mine.first()
        if existing is None and SavedView.objects.filter(owner=user).count() >= MAX_PER_USER:
            raise Refused(
                gettext("You have %(n)s saved views; delete one first.") % {"n": MAX_PER_USER}
            )
        try:
            view, _ = SavedView.objects.update_or_create(
                owner=user,
                project=project,
                page=page,
                name=name,
                defaults={"query": cleaned, "shared": shared},
            )
        except IntegrityError as exc:  # (the same name saved twice at once)
            raise Refused(gettext("A view of this name was just saved; try again.")) from exc
    return view


def delete(user, pk):
    """Delete view `pk` if `user` owns it (staff: any shared one too); whether it was. One's
    own, whatever one's role now: cleaning up is no new write in the project."""
    mine = Q(owner=user) | (Q(shared=True) if user.is_staff else Q(pk__in=()))
    return SavedView.objects.filter(mine, pk=pk).delete()[0] > 0


def url(view):
    """The page with the view's filters, in the view's project (`?project=`: a colleague who
    opens it reads that project's streams)."""
    query = "&".join(
        q for q in (view.query, f"project={view.project.slug}" if view.project_id else "") if q
    )
    return reverse(view.page) + (f"?{query}" if query else "")


def in_words(view):
    """A view's filters as its page names them, [(label, value)]: ("Status", "Completed") for
    `status=completed`, a choice by its label, a time as the page writes it (its zone named),
    what was typed as typed."""
    fields = FIELDS.get(view.page, {})
    data = QueryDict(view.query or "")
    return [
        (str(fields[key].label or key), _value_in_words(fields[key], value))
        for key in data
        if key in fields
        for value in data.getlist(key)
    ]


def _value_in_words(field, value):
    if isinstance(field, forms.ModelChoiceField):
        return value  # (a score type, by its name)
    if isinstance(field, forms.ChoiceField):
        return str(dict(field.choices).get(value, value))
    if isinstance(field, forms.DateTimeField):
        try:
            moment = field.to_python(value)
        except ValidationError:
            return value
        return dates.write(timezone.localtime(moment), "minute") if moment else value
    return value
