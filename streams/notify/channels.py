"""Making and changing notification channels: the one place a target is checked, sealed and
handed to the egress gate.

A target is sealed at rest (streams/store/sealed.py) and shown masked; its secret parts
(`targets.secret_parts`) are handed to the egress gate (`known_secrets.remember`), so no page,
log line or API answer gives them back, in any process, after restarts. A webhook's signing
secret is Streamscope's own credential, like an API token: sealed, shown once when the
channel is made (the gate would take it out of that page too), never put in any text after,
and its `whsec_` prefix keeps it out of log lines (known_secrets.OWN_CREDENTIAL_PREFIXES).
`remember_all` hands the targets' parts again now and then: the gate keeps the most
recent MAX_SEALED pass-through keys, and a channel's must not be pushed out by a proxy's.
"""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils.translation import gettext as _

from streams.access import projects
from streams.access.projects import Action
from streams.models import Channel, Delivery
from streams.notify import targets
from streams.notify.targets import Refused
from streams.run import periodic
from streams.store import known_secrets, sealed

SIGNING_PREFIX = "whsec_"
# A project's channels: a handful in practice; a bound keeps every list and fan-out small.
MAX_CHANNELS = 50


def check_target(kind, target):
    """The target as it will be stored, or Refused with a reason."""
    target = (target or "").strip()
    if not target:
        raise Refused(_("Give a target."))
    if len(target) > targets.MAX_TARGET_CHARS:
        raise Refused(_("The target is too long."))
    if kind == Channel.Kind.EMAIL:
        return targets.check_email(target)
    if kind in (Channel.Kind.WEBHOOK, Channel.Kind.SLACK):
        return targets.check_url(target)
    if kind == Channel.Kind.APPRISE:
        targets.apprise_host(target)
        return target
    raise Refused(_("Unknown kind of channel."))


def _remember(kind, target, again=False):
    for part in targets.secret_parts(kind, target):
        if again:  # (sealed anew if the table's limit pushed it out; this process knows it)
            sealed.store(part)
        known_secrets.remember(part)


def _check_name(project, name, channel=None):
    others = Channel.objects.filter(project=project, name=name)
    if channel is not None:
        others = others.exclude(pk=channel.pk)
    if others.exists():
        raise Refused(_("This project has a channel of that name already."), "name")


def create(project, name, kind, target, created_by=None, enabled=True):
    """A new channel and, for a webhook, its signing secret (returned once; None otherwise).
    Refused: a target that may not be used."""
    if Channel.objects.filter(project=project).count() >= MAX_CHANNELS:
        raise Refused(_("A project has at most %(n)d channels.") % {"n": MAX_CHANNELS}, None)
    _check_name(project, name)
    target = check_target(kind, target)
    signing = SIGNING_PREFIX + secrets.token_urlsafe(32) if kind == Channel.Kind.WEBHOOK else ""
    _remember(kind, target)  # known to the gate before anything can show it
    with transaction.atomic():
        channel = Channel.objects.create(
            project=project,
            name=name,
            kind=kind,
            target_sealed=sealed.seal(target),
            target_masked=targets.masked(kind, target),
            signing_sealed=sealed.seal(signing) if signing else "",
            enabled=enabled,
            created_by=created_by,
        )
    return channel, signing or None


def update(channel, name=None, target=None, enabled=None):
    """Change a channel's name, target (None or "": kept; it is never shown to be edited) or
    whether it is enabled."""
    if target:
        target = check_target(channel.kind, target)
        _remember(channel.kind, target)
        channel.target_sealed = sealed.seal(target)
        channel.target_masked = targets.masked(channel.kind, target)
    if name is not None:
        _check_name(channel.project_id, name, channel)
        channel.name = name
    if enabled is not None:
        channel.enabled = enabled
    channel.save()
    return channel


def delete(channel):
    """The channel gone, its delivery log with it."""
    channel.delete()


def target_of(channel):
    """The channel's target in clear (for its delivery only); None when this SECRET_KEY does
    not open it."""
    return sealed.unseal(channel.target_sealed)


def signing_secret_of(channel):
    return sealed.unseal(channel.signing_sealed) if channel.signing_sealed else None


# ---- who may see and do what (the one rule: streams/access/projects.py) -------------------


class NotFound(LookupError):
    """No such channel for this user (a 404: its id must not leak)."""


class NotAllowed(PermissionError):
    """The user sees the channel but their role does not allow this (a 403)."""


def visible(user, project):
    """The channels `user` may see the names of, in `project` (None: every project, staff)."""
    return projects.in_project(Channel.objects.all(), user, project).select_related("project")


def managed(user, channel_id, action=Action.MANAGE_CHANNELS):
    """The channel `channel_id` once `user` may do `action` to it; NotFound for one of a
    project they are not in, NotAllowed for one their role may not manage."""
    channel = projects.in_project(Channel.objects.all(), user).filter(pk=channel_id).first()
    if channel is None:
        raise NotFound(channel_id)
    if not projects.may(user, action, channel.project_id):
        raise NotAllowed(action)
    return channel


# How many deliveries a channel's log shows (the newest).
LOG_ROWS = 100


def log_of(channel, limit=LOG_ROWS):
    """A channel's newest deliveries (delivery_channel_created)."""
    return list(Delivery.objects.filter(channel=channel).order_by("-created_at", "-id")[:limit])


def last_deliveries(channel_ids):
    """{channel id: its newest Delivery} for a list of channels."""
    found = {}
    for pk in channel_ids:
        last = Delivery.objects.filter(channel_id=pk).order_by("-created_at", "-id").first()
        if last is not None:
            found[pk] = last
    return found


# rarely: only after MAX_SEALED newer pass-through keys can a channel's have been pushed out
REMEMBER_EVERY_S = 600


@periodic.job("notify.remember", REMEMBER_EVERY_S)
def remember_all():
    for channel in Channel.objects.only("kind", "target_sealed"):
        target = target_of(channel)
        if target:
            _remember(channel.kind, target, again=True)
