"""Delivering notifications: `send` records what is to be said to whom, once; the delivery job
says it, off the event loop, in whichever process claims it first.

`send(channels, message, key)` makes one `Delivery` per enabled channel, unique on (channel,
key): a firing sent twice (two processes evaluating, a retry of the caller) is delivered once.
Every long-lived process runs `deliver_due` (streams/run/periodic.py); it claims due rows with
a conditional UPDATE that pushes `next_at` past the attempt's time limit (the loser of a race
updates nothing; a process that dies mid-attempt leaves the row due again after that lease),
then tries them all at once on a loop of its own thread, each within notify_timeout_s, so a
receiver that hangs costs the others nothing. A failure is tried again after
notify_backoff_s, doubled at each attempt (with jitter), up to notify_max_attempts; then the
row is given up. Each attempt's answer (status and first bytes, redacted) is kept.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import uuid

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import translation
from django.utils.translation import gettext as _

from streams.core import conf
from streams.models import MAX_ANSWER_CHARS, Channel, Delivery
from streams.notify import channels as channel_rows
from streams.notify import kinds
from streams.notify.message import Message
from streams.observe import telemetry
from streams.run import periodic
from streams.store import known_secrets

log = logging.getLogger(__name__)

MAX_KEY_CHARS = 200
# How often each process looks for due deliveries, and how many it claims at a time (each
# attempt in the batch runs beside the others).
DELIVER_EVERY_S = 2.0
BATCH = 20
# A claim outlives the attempt's time limit by this much (then the row is due again).
LEASE_MARGIN_S = 30.0
BACKOFF_MAX_S = 3600.0
OPEN = (Delivery.State.PENDING, Delivery.State.FAILED)


def now():
    return dt.datetime.now(dt.UTC)


def send(channels, message: Message, key: str, even_disabled=False):
    """One Delivery per enabled channel of `channels` for the notification `key` (what fired:
    the same key to the same channel is delivered once, whoever calls), `message` redacted;
    returns them (an existing one where the key was sent before). `even_disabled`: a
    channel's test, which an admin may send before enabling it."""
    if not key or len(key) > MAX_KEY_CHARS:
        raise ValueError(f"a notification key is 1 to {MAX_KEY_CHARS} characters")
    said = message.redacted()
    stored = said.as_json()
    out = []
    for channel in channels:
        if not (channel.enabled or even_disabled):
            continue
        try:
            with transaction.atomic():
                delivery = Delivery.objects.create(
                    project_id=channel.project_id,
                    channel=channel,
                    key=key,
                    subject=said.subject,
                    message=stored,
                    next_at=now(),
                )
        except IntegrityError:  # sent before (by another process, perhaps a moment ago)
            delivery = Delivery.objects.get(channel=channel, key=key)
        out.append(delivery)
    return out


def claim_due(at=None, limit=BATCH):
    """Claim up to `limit` due deliveries for this process (their attempt counted)."""
    at = at or now()
    claimed = []
    for pk, next_at in due(at, limit * 2):
        if claim(pk, next_at, at):
            claimed.append(pk)
            if len(claimed) >= limit:
                break
    return list(Delivery.objects.filter(pk__in=claimed).select_related("channel").order_by("id"))


def due(at, limit):
    """[(id, next_at)] of the deliveries due at `at`, the longest due first."""
    # delivery_next_at: the due rows are few, the done ones have no next_at
    return list(
        Delivery.objects.filter(next_at__lte=at, state__in=OPEN)
        .order_by("next_at", "id")
        .values_list("id", "next_at")[:limit]
    )


def claim(pk, next_at, at):
    """Whether this process won the delivery `pk` last seen due at `next_at`: one conditional
    UPDATE, which the loser of a race (its row's next_at moved on) makes to no row."""
    lease = dt.timedelta(seconds=conf.get().notify_timeout_s + LEASE_MARGIN_S)
    won = Delivery.objects.filter(pk=pk, next_at=next_at, state__in=OPEN).update(
        next_at=at + lease, attempts=F("attempts") + 1
    )
    return bool(won)


def backoff_s(attempts):
    """How long after its `attempts`th failed attempt a delivery is tried again."""
    base = conf.get().notify_backoff_s * 2 ** max(attempts - 1, 0)
    return min(base, BACKOFF_MAX_S) * random.uniform(0.8, 1.2)


@periodic.job("notify.deliver", DELIVER_EVERY_S)
def deliver_due(at=None):
    """Claim the due deliveries and attempt them (sync: a job's thread, a test); returns how
    many were attempted."""
    claimed = claim_due(at)
    if not claimed:
        return 0
    work = [_prepare(d) for d in claimed]
    outcomes = asyncio.run(_attempt_all(work))
    for delivery, outcome in zip(claimed, outcomes, strict=True):
        _record(delivery, outcome)
    return len(claimed)


def _prepare(delivery):
    channel = delivery.channel
    return kinds.Attempt(
        kind=channel.kind,
        target=channel_rows.target_of(channel),
        signing=channel_rows.signing_secret_of(channel),
        message=Message.from_json(delivery.message).redacted(),
        delivery_id=delivery.pk,
        key=delivery.key,
        channel_name=channel.name,
    )


async def _attempt_all(work):
    limit = conf.get().notify_timeout_s
    return await asyncio.gather(*(_bounded(attempt, limit) for attempt in work))


async def _bounded(attempt, limit):
    try:
        async with asyncio.timeout(limit):
            return await kinds.deliver(attempt, limit)
    except TimeoutError:
        return kinds.Outcome(False, 0, f"no answer within {limit:g} s")
    except Exception as exc:  # a receiver's or a library's failure is this attempt's only
        log.info("delivery %s failed", attempt.delivery_id, exc_info=True)
        return kinds.Outcome(False, 0, f"{type(exc).__name__}: {exc}")


def _record(delivery, outcome):
    answer = known_secrets.redact(outcome.answer or "")[:MAX_ANSWER_CHARS]
    at = now()
    fields = {"last_status": outcome.status, "last_answer": answer}
    if outcome.ok:
        fields.update(state=Delivery.State.SENT, sent_at=at, next_at=None)
        result = "sent"
    elif outcome.final or delivery.attempts >= conf.get().notify_max_attempts:
        fields.update(state=Delivery.State.GIVEN_UP, next_at=None)
        result = "given_up"
    else:
        fields.update(
            state=Delivery.State.FAILED,
            next_at=at + dt.timedelta(seconds=backoff_s(delivery.attempts)),
        )
        result = "failed"
    # conditional on the claim still being this one's (an attempt that outlived its lease
    # must not undo a later attempt's outcome)
    Delivery.objects.filter(pk=delivery.pk, next_at=delivery.next_at, state__in=OPEN).update(
        **fields
    )
    telemetry.notification_delivered(delivery.channel.kind, result)


def send_test(channel, user):
    """A test notification to `channel` now (its own key: every press is a delivery), in the
    language of whoever asked; the Delivery."""
    who = user.get_username() if user is not None else ""
    message = Message(
        subject=_("Test notification from Streamscope"),
        lines=[
            _("%(user)s sent this test to the channel %(channel)s of the project %(project)s.")
            % {"user": who, "channel": channel.name, "project": channel.project.name},
            _("When an alert rule fires, its notifications arrive here like this one."),
        ],
        fields={_("Channel"): channel.name, _("Kind"): channel.get_kind_display()},
        series=[1, 2, 3, 5, 8, 5, 3, 2, 1],
        language=translation.get_language() or "",
    )
    return send([channel], message, f"test-{uuid.uuid4().hex}", even_disabled=True)[0]


def channels_of(project):
    """A project's enabled channels (what an alert sends to by default)."""
    return list(Channel.objects.filter(project=project, enabled=True))
