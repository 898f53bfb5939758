"""Making and changing notification channels: the one place a target is checked, sealed and
handed to the egress gate.

A target is sealed at rest (streams/store/sealed.py) and shown masked; its secret parts
(`targets.secret_parts`) and a webhook's signing secret are handed to the egress gate
(`known_secrets.remember`), so no page, log line or API answer gives them back, in any
process, after restarts. `remember_all` hands them again now and then: the gate keeps the most
recent MAX_SEALED pass-through keys, and a channel's must not be pushed out by a proxy's.
"""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils.translation import gettext as _

from streams.models import Channel
from streams.notify import targets
from streams.notify.targets import Refused
from streams.run import periodic
from streams.store import known_secrets, sealed

SIGNING_PREFIX = "whsec_"


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


def _remember(kind, target, signing, again=False):
    for part in targets.secret_parts(kind, target) | ({signing} if signing else set()):
        if again:  # (sealed anew if the table's limit pushed it out; this process knows it)
            sealed.store(part)
        known_secrets.remember(part)


def create(project, name, kind, target, created_by=None, enabled=True):
    """A new channel and, for a webhook, its signing secret (returned once; None otherwise).
    Refused: a target that may not be used."""
    target = check_target(kind, target)
    signing = SIGNING_PREFIX + secrets.token_urlsafe(32) if kind == Channel.Kind.WEBHOOK else ""
    _remember(kind, target, signing)  # known to the gate before anything can show it
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
        _remember(channel.kind, target, "")
        channel.target_sealed = sealed.seal(target)
        channel.target_masked = targets.masked(channel.kind, target)
    if name is not None:
        channel.name = name
    if enabled is not None:
        channel.enabled = enabled
    channel.save()
    return channel


def target_of(channel):
    """The channel's target in clear (for its delivery only); None when this SECRET_KEY does
    not open it."""
    return sealed.unseal(channel.target_sealed)


def signing_secret_of(channel):
    return sealed.unseal(channel.signing_sealed) if channel.signing_sealed else None


# rarely: only after MAX_SEALED newer pass-through keys can a channel's have been pushed out
REMEMBER_EVERY_S = 600


@periodic.job("notify.remember", REMEMBER_EVERY_S)
def remember_all():
    for channel in Channel.objects.only("kind", "target_sealed", "signing_sealed"):
        target = target_of(channel)
        if target:
            _remember(channel.kind, target, signing_secret_of(channel), again=True)
