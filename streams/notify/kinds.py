"""Each kind of channel: how a `Message` is written for it and sent (one attempt).

- webhook: JSON, signed (`signing.header`: HMAC-SHA256 over the timestamp and the body);
- slack: Slack's incoming-webhook JSON (text and blocks; Mattermost reads it too);
- email: plain text through Django's mail settings;
- apprise: any service `apprise` knows (Teams, Discord, ntfy, Telegram, PagerDuty…).

Every attempt is bounded by its caller (streams/notify/deliver.py) in time; here in bytes (at
most MAX_ANSWER_BYTES of an answer are read), in where it connects (the addresses checked by
`targets.reachable` at this moment, pinned: a name cannot resolve elsewhere between the check
and the connection) and in redirects (none followed: a 3xx is an answer, and a failure).
Blocking libraries (smtplib, apprise's requests) run on a pool of their own, with their own
socket time limits, so the loop gives up on them in time whatever they do.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import json
import smtplib
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from django.core.mail import EmailMessage, get_connection
from django.utils import translation
from django.utils.translation import gettext as _

from streams.notify import signing, targets
from streams.notify.message import Message

MAX_ANSWER_BYTES = 4096
# statuses worth another attempt; any other 3xx or 4xx will answer the same again
RETRYABLE_4XX = frozenset({408, 425, 429})
USER_AGENT = "Streamscope-Notifications/1"
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="notify")


@dataclasses.dataclass(frozen=True)
class Attempt:
    kind: str
    target: str | None
    signing: str | None
    message: Message
    delivery_id: int
    key: str
    channel_name: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    ok: bool
    status: int  # HTTP or SMTP status; 0: no answer
    answer: str = ""
    final: bool = False  # another attempt would fail alike: given up at once


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(series):
    """The series as a line of block characters (for channels that show only text)."""
    if not series:
        return ""
    low, high = min(series), max(series)
    span = (high - low) or 1.0
    return "".join(SPARK[min(int((x - low) / span * len(SPARK)), len(SPARK) - 1)] for x in series)


async def deliver(attempt: Attempt, limit: float) -> Outcome:
    if attempt.target is None:
        return Outcome(False, 0, "the target cannot be opened (SECRET_KEY changed?)", final=True)
    with translation.override(attempt.message.language):
        if attempt.kind == "webhook":
            return await _webhook(attempt, limit)
        if attempt.kind == "slack":
            return await _slack(attempt, limit)
        if attempt.kind == "email":
            return await _blocking(_email, attempt, limit)
        if attempt.kind == "apprise":
            return await _blocking(_apprise, attempt, limit)
    return Outcome(False, 0, f"unknown kind {attempt.kind!r}", final=True)


# ---- text -----------------------------------------------------------------------------------


def plain_text(message: Message):
    """The message as plain text (e-mail, apprise): lines, fields, the series, links."""
    out = list(message.lines)
    if message.fields:
        out.append("")
        out += [f"{label}: {value}" for label, value in message.fields.items()]
    if message.series:
        out += ["", sparkline(message.series)]
    if message.links:
        out.append("")
        out += [f"{label}: {url}" for label, url in message.links]
    return "\n".join(out)


# ---- HTTP -----------------------------------------------------------------------------------


async def _post(url, body: bytes, headers, limit):
    """POST `body` to `url`, connecting to an address `targets.reachable` allows now."""
    parts = urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        addresses = await loop.run_in_executor(_POOL, targets.reachable, host, port)
    except targets.Refused as exc:
        return Outcome(False, 0, str(exc))
    address = addresses[0]
    pinned = urlunsplit(
        (
            parts.scheme,
            f"[{address}]:{port}" if ":" in address else f"{address}:{port}",
            parts.path or "/",
            parts.query,
            "",
        )
    )
    headers = {
        **headers,
        "host": parts.netloc.rpartition("@")[2],
        "user-agent": USER_AGENT,
        "content-type": "application/json",
    }
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    async with httpx.AsyncClient(
        follow_redirects=False, timeout=httpx.Timeout(limit), trust_env=False
    ) as client:
        request = client.build_request(
            "POST", pinned, content=body, headers=headers, extensions=extensions
        )
        response = await client.send(request, stream=True)
        try:
            answer = bytearray()
            async for chunk in response.aiter_raw():
                answer += chunk
                if len(answer) >= MAX_ANSWER_BYTES:
                    break  # the rest is not read: a 10 MB answer costs 4 KB
        finally:
            await response.aclose()
    status = response.status_code
    text = bytes(answer[:MAX_ANSWER_BYTES]).decode("utf-8", "replace")
    if 200 <= status < 300:
        return Outcome(True, status, text)
    final = 300 <= status < 500 and status not in RETRYABLE_4XX
    if 300 <= status < 400:
        text = _("redirect to %(where)s not followed") % {
            "where": response.headers.get("location", "?")[:200]
        }
    return Outcome(False, status, text, final=final)


def webhook_body(attempt: Attempt):
    m = attempt.message
    return {
        "type": "notification",
        "delivery": attempt.delivery_id,
        "key": attempt.key,
        "channel": attempt.channel_name,
        "subject": m.subject,
        "text": "\n".join(m.lines),
        "fields": m.fields,
        "series": list(m.series),
        "links": [{"label": label, "url": url} for label, url in m.links],
        "language": m.language,
    }


async def _webhook(attempt, limit):
    body = json.dumps(webhook_body(attempt), ensure_ascii=False).encode()
    headers = {
        signing.HEADER: signing.header(attempt.signing or "", body),
        "streamscope-delivery": str(attempt.delivery_id),
    }
    return await _post(attempt.target, body, headers, limit)


def _slack_escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(message: Message):
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": message.subject[:150]}},
    ]
    if message.lines:
        text = "\n".join(_slack_escape(x) for x in message.lines)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}})
    if message.fields:
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {
                        "type": "mrkdwn",
                        "text": f"*{_slack_escape(label)}*\n{_slack_escape(value)}"[:2000],
                    }
                    for label, value in list(message.fields.items())[:10]
                ],
            }
        )
    if message.series:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "plain_text", "text": sparkline(message.series)}],
            }
        )
    if message.links:
        links = " · ".join(f"<{url}|{_slack_escape(label)}>" for label, url in message.links)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": links[:3000]}]})
    return {"text": message.subject, "blocks": blocks}


async def _slack(attempt, limit):
    body = json.dumps(slack_body(attempt.message), ensure_ascii=False).encode()
    return await _post(attempt.target, body, {}, limit)


# ---- blocking libraries ---------------------------------------------------------------------


async def _blocking(fn, attempt, limit):
    loop = asyncio.get_running_loop()
    # (the language is the thread's own: set there again)
    return await loop.run_in_executor(_POOL, _in_language, fn, attempt, limit)


def _in_language(fn, attempt, limit):
    with translation.override(attempt.message.language):
        return fn(attempt, limit)


def _email(attempt, limit):
    message = attempt.message
    connection = get_connection(timeout=limit)
    mail = EmailMessage(
        subject=message.subject,
        body=plain_text(message),
        to=targets.recipients(attempt.target),
        connection=connection,
        headers={"X-Streamscope-Delivery": str(attempt.delivery_id)},
    )
    try:
        sent = mail.send()
    except smtplib.SMTPRecipientsRefused as exc:
        return Outcome(False, 550, str(exc)[:500], final=True)
    except smtplib.SMTPResponseException as exc:
        text = (
            exc.smtp_error.decode("utf-8", "replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        return Outcome(False, exc.smtp_code, text, final=500 <= exc.smtp_code < 600)
    except (OSError, smtplib.SMTPException) as exc:
        return Outcome(False, 0, f"{type(exc).__name__}: {exc}")
    return Outcome(bool(sent), 250 if sent else 0, "" if sent else "not sent")


def _apprise(attempt, limit):
    import apprise

    try:
        targets.apprise_host(attempt.target)  # (checked again: a name may point elsewhere now)
    except targets.Refused as exc:
        return Outcome(False, 0, str(exc))
    # apprise's own connect and read time limits, so its thread ends near ours
    joiner = "&" if "?" in attempt.target else "?"
    url = f"{attempt.target}{joiner}cto={limit:g}&rto={limit:g}"
    sender = apprise.Apprise()
    if not sender.add(url):
        return Outcome(False, 0, "apprise does not know this URL", final=True)
    message = attempt.message
    ok = sender.notify(title=message.subject, body=plain_text(message))
    return Outcome(bool(ok), 0, "" if ok else "apprise: not delivered (see the server's log)")
