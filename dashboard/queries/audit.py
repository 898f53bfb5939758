"""The audit page's rows (streams/store/audit.py records them): a project's entries, or every
project's for staff, newest first, filtered, a page at a time by a cursor (the entry the last
page ended at), each said in the page's language: the action's name, who, what changed with
each field's own name and each value as its field says it."""

from __future__ import annotations

import dataclasses

from django.db.models import Q
from django.utils import timezone

from dashboard import dates
from streams.models import AuditEntry
from streams.store import audit

PAGE = 50


@dataclasses.dataclass
class Row:
    entry: AuditEntry
    action: str
    who: str
    command: str  # the command's name when a command made it
    changes: list[audit.Change]
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


def _moment(value):
    return dates.write(timezone.localtime(value), "second")


def row(entry):
    command = entry.address.removeprefix("command:") if entry.address.startswith("command:") else ""
    deleted = audit.deletion(entry.changes) if entry.action == "streams.deleted" else None
    return Row(
        entry=entry,
        action=audit.action_label(entry.action),
        who=audit.who_said(entry),
        command=command,
        changes=[] if deleted is not None else audit.changes_said(entry, _moment),
        deleted=deleted,
    )
