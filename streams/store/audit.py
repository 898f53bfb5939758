"""The audit log (docs/teams.md, "Audit log"): who changed what, when, from where, and what
changed, kept as long as the project it concerns.

Recorded by construction, not by call site: the watched models' own signals write it, whoever
changes them (a view, the admin, the API, a command, a shell). `pre_save` keeps a row as it was,
`post_save` and `post_delete` write the entry, and a watched model's queryset tells of its
`update()`s too (streams/models.py: `WatchedQuerySet`), which is how a link is revoked. Who and
from where is the context of the change, set by `acting`: the request middleware
(streams/access/audit.py) for every request, the admin's included; every management command
(`watch_commands`, installed once by streams/apps.py); anything else (a background job, the
periodic sweep) is the system.

Deletions of streams have no receiver: a `post_delete` receiver on Stream would make Django
fetch every row it deletes (retention deletes millions). The places that delete streams say so
once per batch instead, in the batch's transaction: `streams_deleted` (the admin), `Deletions`
(retention: one entry per project for a whole prune).

An entry is read by people, so it is built from redacted values (known_secrets, as every exit
is), each cut to MAX_VALUE_CHARS, and a secret column (a digest, a sealed key) is never read.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import decimal
import functools
import getpass
import json
import math
import re

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.db.models import (
    Count,
    DateTimeField,
    DecimalField,
    FloatField,
    IntegerField,
    Max,
    Min,
    QuerySet,
)
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.utils import formats, timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from streams.models import MAX_AUDIT_LABEL_CHARS, AuditEntry, Project, Stream, updating
from streams.store import known_secrets

MAX_VALUE_CHARS = 200
MAX_FIELDS = 30

SYSTEM = "system"  # the actor's name of a change no person made (a background job)
ANONYMOUS = "anonymous"  # …of a request nobody was signed in for


@dataclasses.dataclass(frozen=True)
class Actor:
    user_id: int | None = None
    name: str = SYSTEM
    address: str = ""  # the client's address, or "command:<name>"


# An Actor, or a callable giving one when a change is recorded (a request's user can be set
# after the middleware ran: the API's bearer token)
_actor = contextvars.ContextVar("streamscope_audit_actor", default=None)


@contextlib.contextmanager
def acting(actor):
    """Changes made inside are `actor`'s (an Actor, or a callable giving one)."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)


def current_actor():
    got = _actor.get()
    if callable(got):
        got = got()
    return got if isinstance(got, Actor) else Actor()


def asked_by(project_id, field):
    """The Actor of the latest entry of project `project_id` that changed `field` (None if
    there is none): a background job finishing what someone asked for (a project's deletion,
    marked by its owner) records the end as theirs, not the system's."""
    recent = AuditEntry.objects.filter(project_id=project_id, action="project.changed")
    for entry in recent.order_by("-at", "-pk")[:20]:
        if isinstance(entry.changes, dict) and field in entry.changes:
            return Actor(entry.actor_id, entry.actor_name, entry.address)
    return None


# ---- what is watched ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Watched:
    kind: str  # the actions' prefix and the target's type
    label: object  # instance -> the target's label
    # a change of one of these fields names the action ("token.revoked"); checked in order
    special: tuple = ()
    added: str = "created"
    removed: str = "deleted"


def _user_label(instance):
    try:
        return instance.user.get_username()
    except Exception:  # (the user is gone)
        return f"#{instance.user_id}"


WATCHED = {
    "streams.Project": Watched("project", lambda p: p.name, special=(("name", "renamed"),)),
    "streams.Membership": Watched(
        "membership",
        _user_label,
        special=(("role", "role_changed"),),
        added="added",
        removed="removed",
    ),
    "streams.ApiToken": Watched(
        "token",
        lambda t: f"{t.name} ({t.prefix}…)" if t.name else f"{t.prefix}…",
        special=(("revoked", "revoked"),),
    ),
    "streams.ScoreType": Watched("score_type", lambda s: s.name),
    "streams.Price": Watched("price", lambda p: f"{p.model_pattern} · {p.effective_from:%Y-%m-%d}"),
    "streams.ShareLink": Watched(
        "share_link",
        lambda s: f"#{s.stream_id}" if s.stream_id else s.session,
        special=(("revoked_at", "revoked"),),
    ),
    "streams.Invitation": Watched(
        "invitation",
        lambda i: i.email or f"#{i.pk}",
        special=(("accepted_at", "accepted"), ("revoked_at", "revoked")),
    ),
}

# What each action is called on the pages: every action an entry can have (a test derives them
# from WATCHED), in the order the filters offer them
ACTION_LABELS = {
    "project.created": _("Project created"),
    "project.renamed": _("Project renamed"),
    "project.changed": _("Project changed"),
    "project.deleted": _("Project deleted"),
    "membership.added": _("Member added"),
    "membership.role_changed": _("Member's role changed"),
    "membership.changed": _("Membership changed"),
    "membership.removed": _("Member removed"),
    "invitation.created": _("Invitation sent"),
    "invitation.accepted": _("Invitation accepted"),
    "invitation.revoked": _("Invitation revoked"),
    "invitation.changed": _("Invitation changed"),
    "invitation.deleted": _("Invitation deleted"),
    "token.created": _("Token created"),
    "token.revoked": _("Token revoked"),
    "token.changed": _("Token changed"),
    "token.deleted": _("Token deleted"),
    "score_type.created": _("Score type created"),
    "score_type.changed": _("Score type changed"),
    "score_type.deleted": _("Score type deleted"),
    "price.created": _("Price created"),
    "price.changed": _("Price changed"),
    "price.deleted": _("Price deleted"),
    "share_link.created": _("Share link created"),
    "share_link.revoked": _("Share link revoked"),
    "share_link.changed": _("Share link changed"),
    "share_link.deleted": _("Share link deleted"),
    "streams.deleted": _("Streams deleted"),
    "retention.changed": _("Retention changed"),
}
ACTIONS = tuple(ACTION_LABELS)


def action_label(action):
    return ACTION_LABELS.get(action, action)


def model_of(kind):
    """The watched model whose entries have target type `kind`, or None."""
    for model, spec in watched_models().items():
        if spec.kind == kind:
            return model
    return None


# Columns never read into an entry: secrets by their name (a digest of one is a secret's
# fingerprint too), and what changes by use rather than by anyone's decision
SECRET_FIELD = re.compile(r"digest|secret|password|sealed|fingerprint|(^|_)(token|key)$")
# (a token's spend counters change with every proxied stream's cost: streams/store/spend.py;
# a project being deleted, its claim and its count of streams gone: every batch)
NOISE = re.compile(
    r"^(last_used_at|last_opened_at|opened|spent_\w*|deletion_claimed_until|deleted_streams)$"
)


def watched_models():
    """{model: Watched} of the watched models this schema has."""
    out = {}
    for label, spec in WATCHED.items():
        try:
            out[apps.get_model(label)] = spec
        except LookupError:
            continue
    return out


@functools.cache
def _fields(model):
    """{name: field} of `model`'s columns an entry may say (not the id, secrets, noise, nor
    times Django sets itself)."""
    out = {}
    for field in model._meta.concrete_fields:
        if field.primary_key or NOISE.match(field.name) or SECRET_FIELD.search(field.name):
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            continue
        out[field.name] = field
    return out


def plain(value):
    """`value` as an entry keeps it: JSON, redacted, at most MAX_VALUE_CHARS characters."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, decimal.Decimal):
        text = format(value.normalize(), "f") if value.is_finite() else str(value)
    elif isinstance(value, dt.datetime) and value.tzinfo is not None:
        text = value.astimezone(dt.UTC).isoformat()  # (one instant, one text: a form's zone
    elif isinstance(value, dt.datetime | dt.date):  # is not a change)
        text = value.isoformat()
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    return _cut(known_secrets.redact(text), MAX_VALUE_CHARS)


def _cut(text, n):
    return text if len(text) <= n else text[: n - 1] + "…"


def _values(instance, names):
    return {name: getattr(instance, _fields(type(instance))[name].attname) for name in names}


def _said_as(field, value):
    """`value` as an entry says it, read as its field reads it (a price set to 2 is "2", as
    the stored Decimal('2.000000') is: no change)."""
    try:
        value = field.to_python(value)
    except Exception:  # (what a field would refuse is said as it was given)
        pass
    return plain(value)


def _said(field, value):
    """Whether a value of a new or deleted row is worth saying (not empty, not the default)."""
    if value in (None, "", [], {}):
        return False
    return not (field.has_default() and not callable(field.default) and value == field.default)


def _changes(model, before, after):
    """{field: [before, after]} of the fields whose value differs (as an entry says them)."""
    fields = _fields(model)
    out = {}
    for name in fields:
        if name not in after:
            continue
        old, new = _said_as(fields[name], before.get(name)), _said_as(fields[name], after[name])
        if name in before and old == new:
            continue
        if name not in before and not _said(fields[name], after[name]):
            continue
        if name not in before and name == "project":  # (a new row's: the entry's own)
            continue
        field = fields[name]
        if field.is_relation:  # who or what it points at, by name (an id says little later)
            old, new = _named(field, old), _named(field, new)
        out[name] = [old if name in before else None, new]
        if len(out) >= MAX_FIELDS:
            break
    return out


def _named(field, pk):
    """The label of the row `pk` of `field`'s model (a user's name, a project's), else `pk`."""
    if pk is None:
        return None
    related = field.related_model
    if related is get_user_model():
        name = related._base_manager.filter(pk=pk).values_list(related.USERNAME_FIELD, flat=True)
        return plain(name.first() or pk)
    if related is Project:
        return plain(
            Project._base_manager.filter(pk=pk).values_list("name", flat=True).first() or pk
        )
    return pk


def _action(spec, changes):
    for name, word in spec.special:
        if name in changes:
            return f"{spec.kind}.{word}"
    return f"{spec.kind}.changed"


def _project_id(instance):
    return instance.pk if isinstance(instance, Project) else getattr(instance, "project_id", None)


# ---- writing ------------------------------------------------------------------------------------

# the projects and users being deleted in this context: an entry of a row deleted with its
# project would be deleted with it (or point at a project that is gone), so the project's own
# entry says it; an actor deleting their own account is kept by name only
_deleting = contextvars.ContextVar("streamscope_audit_deleting", default=(frozenset(), frozenset()))


def write(action, **kwargs):
    """One entry (`unsaved`'s keywords), by the current actor, now, in the caller's
    transaction: a change rolled back takes its entry with it."""
    made = unsaved(action, **kwargs)
    if made is not None:
        made.save(force_insert=True)
    return made


def unsaved(action, *, project_id=None, target_type="", target_id="", label="", changes=None):
    """An unsaved entry by the current actor, now; None for a project being deleted."""
    actor = current_actor()
    projects, users = _deleting.get()
    if project_id in projects:
        return None
    return AuditEntry(
        project_id=project_id,
        actor_id=None if actor.user_id in users else actor.user_id,
        actor_name=actor.name[:150],
        address=actor.address[:100],
        at=dt.datetime.now(dt.UTC),
        action=action,
        target_type=target_type,
        target_id=str(target_id if target_id is not None else "")[:64],
        target_label=_cut(known_secrets.redact(str(label or "")), MAX_AUDIT_LABEL_CHARS),
        changes=changes or {},
    )


def _write_for(spec, instance, action, changes):
    write(
        action,
        project_id=_project_id(instance),
        target_type=spec.kind,
        target_id=instance.pk,
        label=spec.label(instance),
        changes=changes,
    )


# ---- the receivers ------------------------------------------------------------------------------


def _before_save(sender, instance, raw=False, update_fields=None, **kwargs):
    # (a fixture's rows, `loaddata`, are no one's change; nor is a new row's "before")
    if raw or instance._state.adding or instance.pk is None:
        return
    names = list(_fields(sender))
    if update_fields is not None:
        names = [n for n in names if n in update_fields]
    if not names:
        instance._audit_before = {}
        return
    attnames = [_fields(sender)[n].attname for n in names]
    row = sender._base_manager.filter(pk=instance.pk).values(*attnames).first()
    instance._audit_before = (
        None if row is None else {n: row[a] for n, a in zip(names, attnames, strict=True)}
    )


def _after_save(sender, instance, created, raw=False, update_fields=None, **kwargs):
    if raw:
        return
    spec = watched_models()[sender]
    before = instance.__dict__.pop("_audit_before", None)
    names = [n for n in _fields(sender) if update_fields is None or n in update_fields]
    after = _values(instance, names)
    if created or before is None:
        changes = _changes(sender, {}, after)
        _write_for(spec, instance, f"{spec.kind}.{spec.added}", changes)
        return
    changes = _changes(sender, before, after)
    if changes:
        _write_for(spec, instance, _action(spec, changes), changes)


def _before_delete(sender, instance, **kwargs):
    projects, users = _deleting.get()
    if isinstance(instance, Project):
        _deleting.set((projects | {instance.pk}, users))
    else:
        _deleting.set((projects, users | {instance.pk}))


def _after_delete(sender, instance, **kwargs):
    spec = watched_models().get(sender)
    if isinstance(instance, Project):
        projects, users = _deleting.get()
        _deleting.set((projects - {instance.pk}, users))
        # the project's own entries go with it; this one is the instance's (staff read it)
        changes = {"name": [plain(instance.name), None]}
        if instance.deleted_streams:  # (by batches first: streams/access/members.py)
            changes["deleted_streams"] = [None, instance.deleted_streams]
        write("project.deleted", target_type="project", target_id=instance.pk,
              label=instance.name, changes=changes)  # fmt: skip
        return
    if spec is None:  # a user
        projects, users = _deleting.get()
        _deleting.set((projects, users - {instance.pk}))
        return
    changes = _changes(sender, {}, _values(instance, list(_fields(sender))))
    changes = {name: [new, None] for name, (_old, new) in changes.items()}
    _write_for(spec, instance, f"{spec.kind}.{spec.removed}", changes)


def _updating(sender, queryset, fields, **kwargs):
    """A queryset's update() of a watched model: the rows as they were, and a callable that
    records what changed once they are written (nothing when only noise is set, such as a
    token's last use: the hot paths pay nothing)."""
    names = [n for n in _fields(sender) if n in fields or _fields(sender)[n].attname in fields]
    if not names:
        return None
    attnames = [_fields(sender)[n].attname for n in names]
    pk = sender._meta.pk.attname
    before = {
        row[pk]: {n: row[a] for n, a in zip(names, attnames, strict=True)}
        for row in queryset.order_by().values(pk, *attnames)
    }

    def then(count):
        if not count or not before:
            return
        spec = watched_models()[sender]
        for instance in sender._base_manager.filter(pk__in=list(before)):
            changes = _changes(sender, before[instance.pk], _values(instance, names))
            if changes:
                _write_for(spec, instance, _action(spec, changes), changes)

    return then


def connect():
    """The receivers, for every watched model this schema has (streams/apps.py, once)."""
    for model in watched_models():
        uid = f"audit:{model._meta.label}"
        pre_save.connect(_before_save, sender=model, dispatch_uid=uid)
        post_save.connect(_after_save, sender=model, dispatch_uid=uid)
        post_delete.connect(_after_delete, sender=model, dispatch_uid=uid)
        updating.connect(_updating, sender=model, dispatch_uid=uid)
    for model in (Project, get_user_model()):
        uid = f"audit:deleting:{model._meta.label}"
        pre_delete.connect(_before_delete, sender=model, dispatch_uid=uid)
    post_delete.connect(_after_delete, sender=get_user_model(), dispatch_uid="audit:user")


# ---- streams deleted ----------------------------------------------------------------------------


def streams_deleted(streams, by):
    """One entry per project for streams about to be deleted (a queryset of them, or their
    ids), in the caller's transaction: how many, and the range of their ids and creation
    times. `by` says which mechanism deletes ("retention", "admin"); the actor says who."""
    Deletions(by).add(streams)


class Deletions:
    """The entries of a run of batches that delete streams (a prune): one per project for the
    whole run, not one per batch and project (a batch's streams are of every project at once:
    at 50 projects, a million streams deleted would be 250,000 entries). Each batch brings its
    projects' entries up to date in the batch's own transaction (`add`, before it deletes), so
    a batch that commits is in the log, and one rolled back is not: two statements a batch."""

    def __init__(self, by):
        self.by = by
        self.entries = {}  # project id -> its saved entry

    def add(self, streams):
        if not isinstance(streams, QuerySet):
            streams = Stream.objects.filter(pk__in=list(streams))
        groups = (
            streams.order_by()
            .values("project_id")
            .annotate(
                n=Count("pk"),
                lo=Min("pk"),
                hi=Max("pk"),
                first=Min("created_at"),
                last=Max("created_at"),
            )  # fmt: skip
        )
        new, grown = [], []
        for g in groups:
            found = self.entries.get(g["project_id"])
            if found is None:
                made = unsaved("streams.deleted", project_id=g["project_id"],
                             target_type="streams", changes=self._changes(g))  # fmt: skip
                if made is not None:
                    new.append(made)
                continue
            found.changes = self._changes(g, found.changes)
            grown.append(found)
        if new:
            AuditEntry.objects.bulk_create(new)
            self.entries.update((e.project_id, e) for e in new)
        if grown:
            AuditEntry.objects.bulk_update(grown, ["changes"])

    def _changes(self, g, was=None):
        n, lo, hi = g["n"], g["lo"], g["hi"]
        first, last = plain(g["first"]), plain(g["last"])
        if was:
            n += was["count"]
            lo, hi = min(lo, was["ids"][0]), max(hi, was["ids"][1])
            first = min(first, was["created_at"][0], key=_moment_of)
            last = max(last, was["created_at"][1], key=_moment_of)
        return {"count": n, "ids": [lo, hi], "created_at": [first, last], "by": self.by}


# ---- the retention setting ----------------------------------------------------------------------
# Retention is the instance's, set in the environment (STREAMSCOPE_RETAIN_EVENTS_DAYS and
# STREAMSCOPE_RETAIN_STREAMS_DAYS; no model holds it, no page changes it): a change is seen
# where it takes effect, by the first process that prunes with the new values.

RETENTION_FIELDS = ("retain_events_days", "retain_streams_days")
_retention_seen = [None]


def retention_in_effect(settings):
    """Record "retention.changed" (the instance's) when `settings`' retention differs from the
    last one recorded; a process asks its database once, then only when its values change."""
    now = tuple(float(getattr(settings, name)) for name in RETENTION_FIELDS)
    if _retention_seen[0] == now:
        return None
    last = (
        AuditEntry.objects.filter(project__isnull=True, action="retention.changed")
        .order_by("-at", "-pk")
        .values_list("changes", flat=True)
        .first()
    )
    before = tuple(
        float((last or {}).get(name, [None, 0.0])[1] or 0.0) for name in RETENTION_FIELDS
    )
    _retention_seen[0] = now
    if before == now:
        return None
    # (processes starting together see the same change: one of them records it)
    from django.core.cache import cache

    if not cache.add("streamscope:audit:retention:" + "-".join(map(str, now)), 1, timeout=300):
        return None
    changes = {
        name: [b, n] for name, b, n in zip(RETENTION_FIELDS, before, now, strict=True) if b != n
    }
    return write("retention.changed", target_type="retention", label="", changes=changes)


# ---- management commands ------------------------------------------------------------------------

# commands that serve: each request says who it is, and their background work is the system's
SERVING = frozenset(
    {"serve", "runserver", "stream_worker", "simulate_upstream", "runworker", "jobs_apart"}
)


def _os_user():
    try:
        return getpass.getuser()
    except Exception:  # (no name for this uid, in a container)
        return SYSTEM


def watch_commands():
    """Every management command's changes are "command:<name>"'s, by the account that ran
    it: Django sends no signal as a command starts, so BaseCommand.execute is wrapped, once."""
    from django.core.management.base import BaseCommand

    execute = BaseCommand.execute
    if getattr(execute, "audited", False):
        return

    @functools.wraps(execute)
    def audited(self, *args, **options):
        name = type(self).__module__.rpartition(".")[2]
        if name in SERVING:
            return execute(self, *args, **options)
        with acting(Actor(None, _os_user(), f"command:{name}")):
            return execute(self, *args, **options)

    audited.audited = True
    BaseCommand.execute = audited


# ---- an entry in people's words -----------------------------------------------------------------
# (the audit page, dashboard/queries/audit.py, and the admin say an entry the same way)

WHO = {SYSTEM: _("system"), ANONYMOUS: _("anonymous")}
BY = {"retention": _("retention"), "admin": _("the Django admin")}
YES_NO = {True: _("yes"), False: _("no")}
NANOS = decimal.Decimal(1_000_000_000)


@dataclasses.dataclass
class Change:
    field: str
    before: object
    after: object


def who_said(entry):
    """Who made the change: a user's name (kept after they are deleted), else the system or
    anonymous in the reader's language."""
    if entry.actor_id:
        return entry.actor_name
    return WHO.get(entry.actor_name, entry.actor_name)


def _local(moment):
    return formats.localize(timezone.localtime(moment))


def changes_said(entry, moment=_local):
    """[Change] of `entry`: each field by its own name in the reader's language, each value as
    its field says it (a choice's name, yes or no, a moment by `moment`); a deletion of streams
    as how many, which ids, created when, by what."""
    changes = entry.changes if isinstance(entry.changes, dict) else {}
    if entry.action == "streams.deleted":
        return _deletion_said(changes, moment)
    if entry.action == "retention.changed":
        return [
            Change(RETENTION_LABELS.get(name, name), *(_days(v) for v in _pair(pair)))
            for name, pair in changes.items()
        ]
    model = model_of(entry.target_type)
    out = []
    for name, pair in changes.items():
        before, after = _pair(pair)
        field = None
        if model is not None:
            try:
                field = model._meta.get_field(name)
            except FieldDoesNotExist:
                field = None
        label = field.verbose_name if field is not None else name
        out.append(
            Change(label, _value_said(field, before, moment), _value_said(field, after, moment))
        )
    return out


RETENTION_LABELS = {
    "retain_events_days": _("days events are kept"),
    "retain_streams_days": _("days streams are kept"),
}


def _days(value):
    if value is None:
        return None
    if not isinstance(value, int | float):  # (not what this action writes: as recorded)
        return value
    if not value:
        return _("for ever")
    return formats.localize(int(value) if float(value).is_integer() else value)


def _moment_of(text):
    try:
        return dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def deletion(changes):
    """A deletion of streams' entry as {count, lo, hi, first, last, by} (moments as datetimes,
    `by` in the reader's language)."""
    changes = changes if isinstance(changes, dict) else {}
    first, last = _pair(changes.get("created_at"))
    lo, hi = _pair(changes.get("ids"))
    return {
        "count": count if isinstance(count := changes.get("count"), int) else 0,
        "lo": lo,
        "hi": hi,
        "first": _moment_of(first),
        "last": _moment_of(last),
        "by": BY.get(changes.get("by"), changes.get("by") or ""),
    }


def _pair(value):
    """[before, after] as recorded, or (None, value) for anything else."""
    if isinstance(value, list):
        return tuple((value + [None, None])[:2])
    return None, value


def _deletion_said(changes, moment):
    d = deletion(changes)
    return [
        Change(pgettext_lazy("how many deleted", "streams"), None, d["count"]),
        Change("ids", d["lo"], d["hi"]),
        Change(
            pgettext_lazy("streams deleted", "created"),
            d["first"] and moment(d["first"]),
            d["last"] and moment(d["last"]),
        ),
        Change(pgettext_lazy("deleted", "by"), None, d["by"]),
    ]


def _value_said(field, value, moment):
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return YES_NO[value]
    if isinstance(field, DateTimeField) and isinstance(value, str):
        found = _moment_of(value)
        return value if found is None else moment(found)
    choices = dict(getattr(field, "flatchoices", None) or ())
    if value in choices:
        return choices[value]
    if isinstance(field, DecimalField | FloatField | IntegerField) and not field.is_relation:
        try:  # a figure in the reader's form ("2,5"; grouped as every figure of the pages)
            figure = decimal.Decimal(str(value))
            if field.name.endswith("_nanos"):  # (an amount in billionths: a token's caps)
                figure = (figure / NANOS).normalize()
            return formats.number_format(figure, force_grouping=True)
        except (decimal.InvalidOperation, ValueError):
            return value
    return value
