"""A channel's target: what is accepted (`check`), what is shown of it (`masked`), which of its
parts are secrets for the egress gate (`secret_parts`), and whether the address it resolves to
may be reached now (`reachable`).

Where a notification goes is chosen by a project's admin, so it is untrusted: only http(s),
and no private, loopback, link-local or otherwise non-public address unless the instance's
administrator allows that host (STREAMSCOPE_ALERT_ALLOWED_HOSTS), checked when the channel is
saved and again on the address each delivery connects to (a name may resolve elsewhere by
then: DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.utils.translation import gettext as _

from streams.core import conf
from streams.core.redaction import FRAGMENT_MIN

MAX_TARGET_CHARS = 2000
MAX_RECIPIENTS = 20
# apprise's services on this machine rather than over the network: never a channel
LOCAL_SCHEMES = frozenset({"file", "windows", "macosx", "dbus", "kde", "glib", "gnome", "qt"})


class Refused(ValueError):
    """A target (or channel) that may not be used, with a reason a person can read, and the
    form field it is about (None: the whole form)."""

    def __init__(self, message, field="target"):
        super().__init__(message)
        self.field = field


def allowed_hosts():
    return {
        h.strip().lower().strip("[]")
        for h in conf.get().alert_allowed_hosts.split(",")
        if h.strip()
    }


def _is_public(address):
    ip = ipaddress.ip_address(address)
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def resolve(host, port):
    """The addresses `host` resolves to now (a literal address is itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]")).compressed]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(_("The host %(host)s cannot be resolved.") % {"host": host}) from exc
    return list(dict.fromkeys(info[4][0] for info in infos))


def reachable(host, port):
    """The addresses of `host` a delivery may connect to now: all of them when the host is
    allowed, else its public ones; Refused when there are none (one private address among
    public ones refuses the host: which one a client picks is not ours to say)."""
    addresses = resolve(host, port)
    allowed = allowed_hosts()
    if host.lower().strip("[]") in allowed:
        return addresses
    private = [a for a in addresses if not _is_public(a) and a not in allowed]
    if private or not addresses:
        raise Refused(
            _(
                "%(host)s is a private or local address; an administrator may allow it "
                "(STREAMSCOPE_ALERT_ALLOWED_HOSTS)."
            )
            % {"host": host}
        )
    return addresses


def check_url(url):
    """`url` if it is an http(s) URL with a host a delivery may reach; Refused otherwise."""
    url = url.strip()
    if len(url) > MAX_TARGET_CHARS:
        raise Refused(_("The URL is too long."))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(_("Only http:// and https:// URLs are accepted."))
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise Refused(_("The URL's port is not a number.")) from exc
    reachable(parts.hostname, port)
    return url


def apprise_host(target):
    """The host an apprise URL sends to, checked like a webhook's: None for a service at a
    fixed public address (Discord's, Telegram's), whose own URL apprise knows."""
    import apprise

    scheme = target.partition("://")[0].lower()
    plugin = None
    if scheme and scheme not in LOCAL_SCHEMES:
        plugin = apprise.Apprise.instantiate(target, suppress_exceptions=True)
    if plugin is None:
        raise Refused(_("Apprise does not know this URL (see its list of services)."))
    if str(getattr(type(plugin), "notify_url", "") or "").startswith("https://"):
        return None
    host = getattr(plugin, "host", None)
    if not host:
        raise Refused(_("Apprise does not know this URL (see its list of services)."))
    reachable(host, getattr(plugin, "port", None) or 443)
    return host


def recipients(target):
    """The e-mail addresses of an e-mail channel's target (comma-separated)."""
    return [a.strip() for a in re.split(r"[,;\s]+", target) if a.strip()]


def check_email(target):
    found = recipients(target)
    if not found:
        raise Refused(_("Give at least one e-mail address."))
    if len(found) > MAX_RECIPIENTS:
        raise Refused(_("At most %(n)d addresses per channel.") % {"n": MAX_RECIPIENTS})
    for address in found:
        try:
            validate_email(address)
        except ValidationError as exc:
            raise Refused(
                _("%(address)s is not an e-mail address.") % {"address": address}
            ) from exc
    return ", ".join(found)


def masked(kind, target):
    """What a page shows of a target: an e-mail channel's addresses (they are no credential);
    of a URL, its scheme, its host and the last 4 characters, the rest (a webhook's token, an
    apprise URL's keys) never shown again."""
    if kind == "email":
        return target[:200]
    parts = urlsplit(target)
    host = parts.hostname or ""
    if kind == "apprise":  # (the host of `discord://id/token` is an id: not shown)
        return f"{parts.scheme}://…{target[-4:]}"[:200]
    return f"{parts.scheme}://{host}/…{target[-4:]}"[:200]


# A part of a URL that is a word (`services`, `webhooks`, `incoming`) is no secret: the egress
# gate would take that word out of every page. Tokens and ids have digits or mixed case.
_WORD = re.compile(r"[a-z]+(?:[-_.][a-z]+)*|[A-Z]+")
# What a token in a URL is made of (RFC 3986's unreserved characters, and `+`). Anything else
# (a query's free text, markup) is no credential, and a "secret" with spaces or quotes in it
# weakens the gate's look for other secrets (docs/alerts.md).
_TOKEN = re.compile(r"[A-Za-z0-9._~+-]+")
_USERINFO = re.compile(r"[A-Za-z0-9._~+%:!$'*-]+")


def secret_parts(kind, target):
    """The parts of a target the egress gate redacts (each FRAGMENT_MIN characters or more):
    a URL's userinfo and password, and each segment of its host (apprise: an id or a key),
    path, query and fragment that is a token, not a plain word. An e-mail channel's addresses
    are not secrets."""
    if kind == "email":
        return set()
    parts = urlsplit(target)
    found = set()
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo and _USERINFO.fullmatch(userinfo):
        found.update({userinfo, userinfo.partition(":")[2]})
    pieces = [parts.netloc.rpartition("@")[2]] if kind == "apprise" else []
    pieces += re.split(r"[/?&=#;,:]", f"{parts.path}?{parts.query}#{parts.fragment}")
    for piece in pieces:
        if _TOKEN.fullmatch(piece) and not _WORD.fullmatch(piece):
            found.add(piece)
    return {s for s in found if len(s) >= FRAGMENT_MIN}
