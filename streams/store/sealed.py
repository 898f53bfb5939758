"""Pass-through keys at rest: sealed (encrypted) under a key derived from SECRET_KEY, found
again by an HMAC fingerprint, so the egress gate of every process, now and after a restart,
knows every key the proxy has forwarded without the database holding one in clear.

Why sealed and not only fingerprinted: the gate must find any fragment of FRAGMENT_MIN
characters of a key in every page at the speed of a set look-up, which needs the key in
memory. Fingerprints of every 8-character window would not protect more (whoever holds
SECRET_KEY can brute-force an 8-character window and chain the next ones), and would cost a
keyed hash per window of every response. A database read without SECRET_KEY yields nothing.
Changing SECRET_KEY makes the sealed keys unreadable: they are no longer redacted (stated in
docs/security.md); `cryptography`'s Fernet does the sealing (AES-CBC + HMAC, a vetted format).
"""

import base64
import hashlib
import hmac
import logging

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import IntegrityError

from streams.models import SealedSecret

# Kept: the most recent keys (a client rotating keys every request must not grow the table and
# every process's set without bound).
MAX_SEALED = 10_000

log = logging.getLogger(__name__)


def _derived(purpose: bytes) -> bytes:
    return hmac.new(
        settings.SECRET_KEY.encode(), b"streamscope.sealed." + purpose, "sha256"
    ).digest()


def _fernet():
    return Fernet(base64.urlsafe_b64encode(_derived(b"seal")))


def fingerprint(secret: str) -> str:
    return hmac.new(_derived(b"fingerprint"), secret.encode(), hashlib.sha256).hexdigest()


def seal(text: str) -> str:
    """`text` encrypted under this SECRET_KEY (a notification channel's target at rest)."""
    return _fernet().encrypt(text.encode()).decode()


def unseal(token: str) -> str | None:
    """What `seal` sealed; None when this SECRET_KEY does not open it."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except (InvalidToken, UnicodeDecodeError, ValueError):
        return None


def store(secret: str) -> None:
    fp = fingerprint(secret)
    if SealedSecret.objects.filter(fingerprint=fp).exists():
        return
    try:
        SealedSecret.objects.create(
            fingerprint=fp, sealed=_fernet().encrypt(secret.encode()).decode()
        )
    except IntegrityError:  # another process sealed it meanwhile
        return
    excess = SealedSecret.objects.count() - MAX_SEALED
    if excess > 0:
        old = SealedSecret.objects.order_by("id").values_list("id", flat=True)[:excess]
        SealedSecret.objects.filter(id__in=list(old)).delete()


def load_after(last_id: int):
    """(highest id seen, the keys sealed after `last_id` that this SECRET_KEY opens)."""
    f = _fernet()
    top, secrets, unreadable = last_id, [], 0
    for pk, sealed in SealedSecret.objects.filter(id__gt=last_id).values_list("id", "sealed"):
        top = max(top, pk)
        try:
            secrets.append(f.decrypt(sealed.encode()).decode())
        except (InvalidToken, UnicodeDecodeError):
            unreadable += 1
    if unreadable:
        log.warning(
            "%d pass-through key(s) sealed under another SECRET_KEY: not redacted", unreadable
        )
    return top, secrets
