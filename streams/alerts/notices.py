"""What a rule's firing says and to whom: built here, once, for every channel, and handed to
`streams.notify` (`deliver.send`, keyed per (rule, firing, kind), so the same firing never
delivers twice whichever process asks).

A notice is built from what is stored (model names, users, tags are the upstream's and the
clients' text): `notify.Message` is redacted where it is stored and where it leaves, so a secret
an upstream planted in a model name does not reach a receiver. It is said in the project's
language (its settings), else the instance's (`settings.LANGUAGE_CODE`).
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, ngettext

from streams.alerts import figures
from streams.alerts.rule_state import FIRED, RECOVERED, REMINDED
from streams.core import conf
from streams.models import Rule, Silence
from streams.notify.deliver import send as deliver
from streams.notify.message import Message

# the scope's fields in a notice (translated when it is built)
SCOPE_LABELS = {
    "requested_model": gettext_noop("Model asked for"),
    "resolved_model": gettext_noop("Model that answered"),
    "username": gettext_noop("User"),
    "source": gettext_noop("Source"),
    "tag": gettext_noop("Tag"),
    "session": gettext_noop("Session"),
    "token": gettext_noop("Token"),
}


def rule_scope(rule):
    """{field: value} of the rule's scope (the fields a silence matches on)."""
    scope = {name: getattr(rule, name) for name in figures.SCOPE_FIELDS if getattr(rule, name)}
    if rule.token_id:
        scope["token"] = rule.token_id
    return scope


def silenced(rule, now):
    """Whether a silence mutes `rule` at `now`: one of the rule, or one whose scope the
    rule's has every value of."""
    mine = rule_scope(rule)
    active = Silence.objects.filter(project_id=rule.project_id, until_at__gt=now).filter(
        Q(rule=rule) | Q(rule__isnull=True)
    )
    for silence in active:
        if silence.rule_id == rule.pk:
            return True
        wanted = silence.scope or {}
        # (a silence keeps its values as text: a rule's token is its id)
        if wanted and all(str(mine.get(k, "")) == str(v) for k, v in wanted.items()):
            return True
    return False


def key_of(rule, firing, kind):
    """The notification's idempotency key: one per (rule, firing, kind), a reminder's also by
    its number."""
    key = f"alert:{rule.pk}:{firing.pk}:{kind}"
    return f"{key}:{firing.notified}" if kind == REMINDED else key


def send(rule, firing, kind, state, reading):
    """Hand the notice of `kind` to the rule's channels (in the caller's transaction)."""
    channels = list(rule.channels.filter(enabled=True))
    if channels:
        deliver(channels, message(rule, firing, kind, state, reading), key_of(rule, firing, kind))


def message(rule, firing, kind, state, reading, language=None):
    language = language or rule.project.language or settings.LANGUAGE_CODE
    with translation.override(language):
        figure = Rule.Figure(rule.figure)
        value = _number(reading.value)
        condition = _condition(rule)
        subject = {
            FIRED: _("Firing: %(rule)s"),
            REMINDED: _("Still firing: %(rule)s"),
            RECOVERED: _("Recovered: %(rule)s"),
        }[kind] % {"rule": rule.name}
        lines = [
            _("%(figure)s is %(value)s (%(condition)s) over the last %(window)s.")
            % {
                "figure": figure.label,
                "value": value,
                "condition": condition,
                "window": window_label(rule.window_s),
            },
        ]
        fields = {
            _("Rule"): rule.name,
            _("Project"): rule.project.name,
            _("Value"): value,
            _("Condition"): condition,
            _("Window"): window_label(rule.window_s),
            _("Streams"): str(reading.streams),
            _("Since"): firing.started_at.strftime("%Y-%m-%d %H:%M UTC"),
        }
        for name, scope_value in rule_scope(rule).items():
            fields[_(SCOPE_LABELS[name])] = str(scope_value)
        series = [v for _t, v in state.recent if v is not None]
        return Message(
            subject=subject,
            lines=lines,
            fields=fields,
            series=series,
            links=links(rule, state.evaluated_at or firing.started_at),
            language=language,
        )


def links(rule, end):
    """[(label, absolute URL)]: the rule, the latency page on its scope and window, and the
    window's three worst streams; none without `public_url` (a receiver needs whole URLs)."""
    base = conf.get().public_url.rstrip("/")
    if not base:
        return []
    try:
        out = [(_("Rule"), base + reverse("alert_rule", args=[rule.pk]))]
        query = {"start": _minute(end - dt.timedelta(seconds=rule.window_s)), "end": _minute(end)}
        query.update(
            {
                k: v
                for k, v in {
                    "model": rule.resolved_model,
                    "requested": rule.requested_model,
                    "user": rule.username,
                    "source": rule.source,
                    "tag": rule.tag,
                    "session": rule.session,
                }.items()
                if v
            }
        )
        if rule.window_s:
            query["range"] = "custom"
        out.append((_("Latency"), f"{base}{reverse('latency')}?{urlencode(query)}"))
        for n, stream_id in enumerate(figures.worst_streams(rule, end), 1):
            url = base + reverse("stream_detail", args=[stream_id])
            out.append((_("Worst stream %(n)s") % {"n": n}, url))
    except NoReverseMatch:  # (a deployment without the pages)
        return []
    return out


def _minute(at):
    # with its offset: the page reads a bare time as the reader's wall clock, which this is not
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M+00:00")


def _number(value):
    if value is None:
        return "–"
    return f"{value:,.1f}" if abs(value) < 1e6 else f"{value:,.0f}"


def _condition(rule):
    if rule.comparison == Rule.Comparison.CHANGED:
        baseline = Rule.Baseline(rule.baseline or Rule.Baseline.DAY).label
        return _("changed by more than %(pct)s %% against %(baseline)s") % {
            "pct": _number(rule.threshold),
            "baseline": baseline,
        }
    return f"{Rule.Comparison(rule.comparison).label} {_number(rule.threshold)}"


def window_label(window_s):
    """The window in the largest whole unit: "7 days", "2 hours", "15 minutes"."""
    if window_s % 86400 == 0:
        n = window_s // 86400
        return ngettext("%(n)s day", "%(n)s days", n) % {"n": n}
    if window_s % 3600 == 0:
        n = window_s // 3600
        return ngettext("%(n)s hour", "%(n)s hours", n) % {"n": n}
    n = max(1, window_s // 60)
    return ngettext("%(n)s minute", "%(n)s minutes", n) % {"n": n}
