"""Invitations to a project by e-mail (docs/teams.md, "Members").

- An admin invites an address in a role (an owner only by an owner). The invitation is a link
  whose secret (`inv_` + 32 random bytes) is kept only as its SHA-256: the database holds no
  link that works. It is sent once, by e-mail (Django's `send_mail`; EMAIL_* settings), and
  shown nowhere else.
- It works once: accepting marks it used in the same UPDATE that checks it is unused, so two
  clicks at once make one membership. It expires (STREAMSCOPE_INVITATION_EXPIRY_DAYS, 7 by
  default) and can be revoked. It is worth what its maker may still do: one whose maker is no
  longer an admin of the project (or not an owner, for an owner's invitation) opens nothing.
- Whoever is signed in when the link is opened joins, whatever address it was sent to: the
  link is the credential (an address is often an alias or a list, and the confirmation page
  says which address it was sent to and who is signed in). Opening it shows that page;
  joining is its button (a POST), so a mail scanner that follows links uses nothing up.
- Wrong, used, expired and revoked secrets look alike and count as wrong bearer tokens of the
  client's IP (`throttled_check`: one policy for every secret a client may guess).
"""

import datetime as dt
import math

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.utils.translation import gettext as _g
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext, pgettext_lazy

from streams.access import members, projects
from streams.access.members import NotFound, Refused
from streams.access.projects import Action, Role
from streams.access.shares import new_secret
from streams.access.throttle import throttled_check
from streams.core import conf
from streams.models import Invitation, Membership

PREFIX = "inv_"
MAX_SECRET_CHARS = 100  # longer is no secret of ours: not hashed, not looked up
# Open invitations a project may have at once: a mail-sending form is bounded, and the members
# page lists every one.
MAX_OPEN = 100
PENDING, ACCEPTED, EXPIRED, REVOKED = "pending", "accepted", "expired", "revoked"
STATES = {
    PENDING: pgettext_lazy("invitation", "open"),
    ACCEPTED: pgettext_lazy("invitation", "accepted"),
    EXPIRED: pgettext_lazy("invitation", "expired"),
    REVOKED: pgettext_lazy("invitation", "revoked"),
}
GONE = _("This invitation does not work: it was used, revoked or has expired, or the link is "
         "incomplete. Ask for a new one.")  # fmt: skip


def _now():
    return dt.datetime.now(dt.UTC)


def expiry():
    return dt.timedelta(days=conf.get().invitation_expiry_days)


def status(invitation, now=None):
    if invitation.accepted_at is not None:
        return ACCEPTED
    if invitation.revoked_at is not None:
        return REVOKED
    return PENDING if invitation.expires_at > (now or _now()) else EXPIRED


def _clean_email(email):
    email = (email or "").strip()
    try:
        validate_email(email)
    except ValidationError:
        raise Refused(_("Enter a valid e-mail address.")) from None
    return email


def invite(actor, project, email, role):
    """(the invitation, its secret) of `email` to `project` in `role`, made by `actor`. The
    secret is not kept: send it now (`send`)."""
    role = members.role_of_text(role)
    members.require(actor, Action.MANAGE_MEMBERS, project)
    members.require_owner_rights(actor, project, role)
    email = _clean_email(email)
    if _open(project).count() >= MAX_OPEN:
        raise Refused(_("This project has too many open invitations: revoke some first."))
    secret = new_secret(PREFIX)
    invitation = Invitation.objects.create(
        project=project,
        email=email,
        role=role,
        digest=Invitation.hash(secret),
        invited_by=actor if actor.pk is not None else None,
        expires_at=_now() + expiry(),
    )
    return invitation, secret


def send(invitation, url):
    """Mails `url` (the link with the secret) to the invited address, in the language active
    now (the inviter's page's). Raises OSError/SMTPException when the mail server refuses."""
    days = max(1, math.ceil(expiry().total_seconds() / 86400))
    inviter = invitation.invited_by.get_username() if invitation.invited_by else "Streamscope"
    words = {
        "inviter": inviter,
        "project": invitation.project.name,
        "role": Role(invitation.role).label,
    }
    # (one line: a name with a line break would be a header of its own)
    subject = " ".join((_g("Invitation to the project %(project)s on Streamscope") % words).split())
    body = "\n\n".join(
        [
            _g("%(inviter)s invites you to the project “%(project)s” on Streamscope, as %(role)s.")
            % words,
            _g("Open this link to join:") + "\n" + url,
            ngettext("It works once, within %(n)d day.", "It works once, within %(n)d days.", days)
            % {"n": days},
            _g("If you did not expect this invitation, you can ignore this e-mail."),
        ]
    )
    send_mail(subject, body, None, [invitation.email])


def _open(project):
    return Invitation.objects.filter(
        project=project, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=_now()
    )


def listed(project):
    """`project`'s invitations that still work, newest first (all of them: MAX_OPEN)."""
    return list(_open(project).select_related("invited_by").order_by("-created_at")[:MAX_OPEN])


def _maker_may(invitation):
    maker = invitation.invited_by
    if maker is None or not maker.is_active:
        return False
    projects.forget(maker)  # (their roles now, not as cached)
    action = Action.MANAGE_OWNERS if invitation.role == Role.OWNER else Action.MANAGE_MEMBERS
    return projects.may(maker, action, invitation.project_id)


def find(secret):
    """The invitation of `secret` if it still works, else None."""
    if not secret or not secret.startswith(PREFIX) or len(secret) > MAX_SECRET_CHARS:
        return None
    invitation = (
        Invitation.objects.filter(
            digest=Invitation.hash(secret),
            accepted_at__isnull=True,
            revoked_at__isnull=True,
            expires_at__gt=_now(),
        )
        .select_related("project", "invited_by")
        .first()
    )
    if invitation is None or not _maker_may(invitation):
        return None
    return invitation


def open(secret, ip):
    """(the invitation of `secret` or None, None) — or (None, seconds to wait) when `ip` sent
    too many wrong secrets lately."""
    return throttled_check(secret, ip, find)


def accept(invitation, user):
    """`user` joins the invitation's project in its role (a member already: raised to it,
    never lowered) and the invitation is used up. Raises NotFound when it was used meanwhile."""
    if not projects.signed_in(user):
        raise NotFound(GONE)
    now = _now()
    with transaction.atomic():
        claimed = Invitation.objects.filter(
            pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now
        ).update(accepted_at=now, accepted_by=user)
        if not claimed:
            raise NotFound(GONE)
        membership, made = Membership.objects.get_or_create(
            project_id=invitation.project_id, user=user, defaults={"role": invitation.role}
        )
        if not made and projects.RANKS[membership.role] < projects.RANKS[invitation.role]:
            membership.role = invitation.role
            membership.save(update_fields=["role"])
    projects.forget(user)
    return membership


def revoke(actor, project, invitation_id):
    """Revokes `project`'s invitation `invitation_id` (admins): one used or revoked already
    stays as it is (a second click is no error). Raises NotFound for one that is not the
    project's."""
    members.require(actor, Action.MANAGE_MEMBERS, project)
    mine = Invitation.objects.filter(pk=invitation_id, project=project)
    if not mine.exists():
        raise NotFound(_("No such invitation."))
    revoke_open(mine)


def revoke_open(invitations):
    """Revokes those of `invitations` (a queryset: the admin's selection, or one project's
    one) that are neither used nor revoked; returns how many (the audit log records each)."""
    return invitations.filter(accepted_at__isnull=True, revoked_at__isnull=True).update(
        revoked_at=_now()
    )
