"""A webhook's signature: `Streamscope-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`, the
HMAC keyed with the channel's signing secret over `<t>.` followed by the body's bytes (as
Stripe signs its webhooks). The timestamp is inside the signature, so a receiver that refuses
a `t` older than a few minutes, and a delivery id it has seen (`Streamscope-Delivery`), refuses
a replay; docs/alerts.md shows how. `verify` is that receiver's check (and the tests')."""

import hashlib
import hmac
import time

HEADER = "streamscope-signature"
TOLERANCE_S = 300


def _mac(secret, t, body):
    return hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


def header(secret: str, body: bytes, t: int | None = None) -> str:
    t = int(time.time()) if t is None else int(t)
    return f"t={t},v1={_mac(secret, t, body)}"


def verify(secret: str, value: str, body: bytes, now=None, tolerance_s=TOLERANCE_S) -> bool:
    """Whether `value` (the header) signs `body` with `secret` within `tolerance_s` of now."""
    items = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
    try:
        t = int(items.get("t", ""))
    except ValueError:
        return False
    now = time.time() if now is None else now
    if abs(now - t) > tolerance_s:
        return False
    return hmac.compare_digest(items.get("v1", ""), _mac(secret, t, body))
