"""The audit page's rows (streams/store/audit.py records them): a project's entries, or every
project's for staff, newest first, filtered, a page at a time by a cursor (the entry the last
page ended at), each said in the page's language: the action's name, who, what changed with
each field's own name and each value as its field says it."""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.core.exceptions import FieldDoesNotExist
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from streams.models import AuditEntry
from streams.store import audit

PAGE = 50

WHO = {audit.SYSTEM: _("system"), audit.ANONYMOUS: _("anonymous")}
BY = {"retention": _("retention"), "admin": _("the Django admin")}
YES_NO = {True: _("yes"), False: _("no")}


@dataclasses.dataclass
class Change:
    field: str
    before: object
    after: object


@dataclasses.dataclass
class Row:
    entry: AuditEntry
    action: str
    who: str
    command: str  # the command's name when a command made it
    changes: list[Change]
    deleted: dict | None  # a deletion of streams: count, ids, created_at, by


@dataclasses.dataclass
class Page:
    rows: list[Row]
    next_cursor: int | None


def entries(project_ids=None, *, action="", actor="", since=None, until=None):
    """The entries of `project_ids` (None: every project's and the instance's), filtered, in
    the page's order."""
    found = AuditEntry.objects.all()
    if project_ids is not None:
        found = found.filter(project_id__in=project_ids)
    if action:
        found = found.filter(action=action)
    if actor:
        found = found.filter(actor_name=actor)
    if since is not None:
        found = found.filter(at__gte=since)
    if until is not None:
        found = found.filter(at__lt=until)
    return found.order_by("-at", "-pk")


def page(found, before=None, size=PAGE):
    """One page of `found` (entries() in its order) after the entry `before` (an id)."""
    if before is not None:
        mark = found.filter(pk=before).values_list("at", flat=True).first()
        if mark is None:
            return Page([], None)
        found = found.filter(Q(at__lt=mark) | Q(at=mark, pk__lt=before))
    got = list(found.select_related("project")[: size + 1])
    more = len(got) > size
    got = got[:size]
    return Page([row(e) for e in got], got[-1].pk if more else None)


def row(entry):
    command = entry.address.removeprefix("command:") if entry.address.startswith("command:") else ""
    deleted = _deleted(entry.changes) if entry.action == "streams.deleted" else None
    # (a deleted user keeps their name; "system" and "anonymous" are said in the page's words)
    who = entry.actor_name if entry.actor_id else WHO.get(entry.actor_name, entry.actor_name)
    return Row(
        entry=entry,
        action=audit.action_label(entry.action),
        who=who,
        command=command,
        changes=[] if deleted is not None else _changes(entry),
        deleted=deleted,
    )


def _deleted(changes):
    def moment(text):
        try:
            return dt.datetime.fromisoformat(text)
        except (TypeError, ValueError):
            return None

    first, last = (list(changes.get("created_at") or []) + [None, None])[:2]
    lo, hi = (list(changes.get("ids") or []) + [None, None])[:2]
    return {
        "count": changes.get("count", 0),
        "lo": lo,
        "hi": hi,
        "first": moment(first),
        "last": moment(last),
        "by": BY.get(changes.get("by"), changes.get("by") or ""),
    }


def _changes(entry):
    model = audit.model_of(entry.target_type)
    out = []
    for name, pair in entry.changes.items():
        before, after = (list(pair) + [None, None])[:2] if isinstance(pair, list) else (None, pair)
        field = None
        if model is not None:
            try:
                field = model._meta.get_field(name)
            except FieldDoesNotExist:
                field = None
        label = field.verbose_name if field is not None else name
        out.append(Change(label, _value(field, before), _value(field, after)))
    return out


def _value(field, value):
    """A value as the field says it: a choice's name, yes or no; else as recorded."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return YES_NO[value]
    choices = dict(getattr(field, "flatchoices", None) or ())
    return choices.get(value, value)
