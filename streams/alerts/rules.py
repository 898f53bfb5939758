"""Making, changing and muting rules: the one validation the rule form and the API share, and the
reads of a project's rules, history and silences under the project rule.

Bad input is an `Invalid` ({field: message}, a 400), never a stored rule that cannot be
evaluated: a threshold that is not a finite number or lies outside what its figure can be, a
window outside 5 minutes to 7 days, a change rule without its baseline. A scope the user may
not see (a token of the project that is not theirs to manage, a user who is not a member, a
score type of another project) is `NotVisible` (a 404: whether it exists is not theirs to know).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from streams.access import projects
from streams.alerts import notices
from streams.alerts.figures import RANGES
from streams.models import (
    ALERT_MAX_WINDOW_S,
    ALERT_MIN_WINDOW_S,
    MAX_RULE_NAME_CHARS,
    ApiToken,
    Channel,
    Finding,
    Firing,
    Membership,
    Rule,
    RuleState,
    ScoreType,
    Silence,
)

Action = projects.Action
MAX_FOR_S = 7 * 86400
MAX_RENOTIFY_S = 30 * 86400
MAX_MIN_STREAMS = 1_000_000
MAX_SILENCE_S = 90 * 86400
SCOPE_TEXT = ("requested_model", "resolved_model", "username", "source", "tag", "session")
# what a silence may mute every rule of: a rule's scope fields, its token's too
SILENCE_SCOPE = (*SCOPE_TEXT, "token")


class Invalid(ValueError):
    def __init__(self, errors):
        super().__init__(errors)
        self.errors = errors


class NotVisible(LookupError):
    pass


def _number(errors, name, value, lo, hi, *, integer=False):
    try:
        number = float(value)
    except (TypeError, ValueError):
        errors[name] = _("Enter a number.")
        return None
    if not math.isfinite(number):
        errors[name] = _("Enter a finite number.")
        return None
    if integer and number != int(number):
        errors[name] = _("Enter a whole number.")
        return None
    if not lo <= number <= hi:
        errors[name] = _("Enter a number from %(lo)s to %(hi)s.") % {"lo": lo, "hi": hi}
        return None
    return int(number) if integer else number


def clean(user, project, data):
    """The rule's fields from `data` (a form's cleaned data or an API's JSON), checked; raises
    Invalid or NotVisible."""
    errors, out = {}, {}
    name = str(data.get("name") or "").strip()
    if not name or len(name) > MAX_RULE_NAME_CHARS:
        errors["name"] = _("Give a name of at most %(n)s characters.") % {"n": MAX_RULE_NAME_CHARS}
    out["name"] = name
    figure = data.get("figure")
    if figure not in Rule.Figure.values:
        errors["figure"] = _("Choose a figure.")
    out["figure"] = figure
    comparison = data.get("comparison") or Rule.Comparison.GT
    if comparison not in Rule.Comparison.values:
        errors["comparison"] = _("Choose a comparison.")
    out["comparison"] = comparison
    baseline = data.get("baseline") or ""
    if comparison == Rule.Comparison.CHANGED and baseline not in Rule.Baseline.values:
        errors["baseline"] = _("Choose what the change is measured against.")
    out["baseline"] = baseline if comparison == Rule.Comparison.CHANGED else ""
    lo, hi = (0.0, 1e6) if comparison == Rule.Comparison.CHANGED else RANGES.get(figure, (0, 0))
    out["threshold"] = _number(errors, "threshold", data.get("threshold"), lo, hi)
    out["window_s"] = _number(
        errors, "window_s", data.get("window_s"), ALERT_MIN_WINDOW_S, ALERT_MAX_WINDOW_S,
        integer=True,
    )  # fmt: skip
    for field, default, hi in (
        ("min_streams", 1, MAX_MIN_STREAMS),
        ("for_s", 0, MAX_FOR_S),
        ("renotify_s", 0, MAX_RENOTIFY_S),
    ):
        value = data.get(field)
        value = default if value in (None, "") else value
        out[field] = _number(errors, field, value, 0, hi, integer=True)
    out["notify_recovery"] = bool(data.get("notify_recovery", True))
    out["enabled"] = bool(data.get("enabled", True))
    for field in SCOPE_TEXT:
        value = str(data.get(field) or "").strip()
        if len(value) > Rule._meta.get_field(field).max_length:
            errors[field] = _("Too long.")
        out[field] = value
    out["severity"] = str(data.get("severity") or "")
    if out["severity"] and out["severity"] not in Finding.Severity.values:
        errors["severity"] = _("Choose a severity.")
    if figure == Rule.Figure.FINDINGS_SHARE and not out["severity"]:
        errors["severity"] = _("Choose the severity counted.")
    if errors:
        raise Invalid(errors)
    out["token"] = _visible_token(user, project, data.get("token"))
    out["score_type"] = _visible_score_type(project, data.get("score_type"))
    if figure == Rule.Figure.POSITIVE_SCORE_SHARE and out["score_type"] is None:
        raise Invalid({"score_type": _("Choose the score type counted.")})
    if (
        out["username"]
        and not Membership.objects.filter(project=project, user__username=out["username"]).exists()
    ):
        raise NotVisible(out["username"])
    out["channels"] = _channels(project, data.get("channels") or [])
    return out


def _pk(value):
    if value in (None, ""):
        return None
    pk = getattr(value, "pk", value)
    try:
        return int(pk)
    except (TypeError, ValueError):
        raise NotVisible(value) from None


def tokens_for(user, project):
    """The tokens of `project` a rule of `user` may be scoped to: every one for whoever manages
    the project's tokens, else their own (as the token page shows them)."""
    found = ApiToken.objects.filter(project=project)
    if projects.may(user, Action.MANAGE_TOKENS, project):
        return found
    return found.filter(user_id=user.pk)


def _visible_token(user, project, value):
    pk = _pk(value)
    if pk is None:
        return None
    token = tokens_for(user, project).filter(pk=pk).first()
    if token is None:
        raise NotVisible(pk)
    return token


def _visible_score_type(project, value):
    pk = _pk(value)
    if pk is None:
        return None
    found = ScoreType.objects.filter(pk=pk).first()
    if found is None or found.project_id not in (None, project.pk):
        raise NotVisible(pk)
    return found


def _channels(project, values):
    pks = [_pk(v) for v in values]
    found = list(Channel.objects.filter(project=project, pk__in=pks))
    if len(found) != len(set(pks)):
        raise NotVisible(pks)
    return found


def save(user, project, data, rule=None):
    """Make (or change) a rule of `project` from `data`; raises Invalid or NotVisible."""
    fields = clean(user, project, data)
    channels = fields.pop("channels")
    if rule is None:
        rule = Rule(project=project, created_by=user)
    for name, value in fields.items():
        setattr(rule, name, value)
    rule.save()
    rule.channels.set(channels)
    return rule


# ---------------------------------------------------------------------------------------------
# Reads under the project rule


def visible(user, project=None):
    """The rules `user` may read: of `project` (None: of every project they are in; staff:
    every project's)."""
    return projects.in_project(Rule.objects.all(), user, project)


def get(user, rule_id, action=Action.READ):
    """The rule `rule_id` if `user` may see it (else NotVisible: a 404); PermissionError
    when they may see it but not do `action` (a 403)."""
    rule = visible(user).select_related("project").filter(pk=rule_id).first()
    if rule is None:
        raise NotVisible(rule_id)
    if not projects.may(user, action, rule.project):
        raise PermissionError(action)
    return rule


def history(user, project=None, rule=None, limit=200):
    found = projects.in_project(Firing.objects.all(), user, project).select_related("rule")
    if rule is not None:
        found = found.filter(rule=rule)
    return found.order_by("-started_at")[:limit]


def silences(user, project=None, now=None):
    now = now or dt.datetime.now(dt.UTC)
    found = projects.in_project(Silence.objects.all(), user, project).select_related("rule")
    return found.filter(until_at__gt=now)


def silence(user, project, *, rule=None, scope=None, hours, reason="", now=None):
    """Mute `rule` (one of `project`'s) or the rules of `scope` ({field: value}) for `hours`."""
    now = now or dt.datetime.now(dt.UTC)
    errors = {}
    hours = _number(errors, "hours", hours, 0.25, MAX_SILENCE_S / 3600)
    scope = {k: str(v) for k, v in (scope or {}).items() if v}
    if any(k not in SILENCE_SCOPE for k in scope) or any(len(v) > 200 for v in scope.values()):
        errors["scope"] = _("Unknown scope.")
    if rule is None and not scope:
        errors["rule"] = _("Choose a rule or a scope.")
    if errors:
        raise Invalid(errors)
    if rule is not None and rule.project_id != project.pk:
        raise NotVisible(rule.pk)
    if "token" in scope:  # (a token the user could not scope a rule to: as if there were none)
        scope["token"] = str(_visible_token(user, project, scope["token"]).pk)
    return Silence.objects.create(
        project=project,
        rule=rule,
        scope=scope,
        until_at=now + dt.timedelta(hours=hours),
        reason=str(reason or "")[:200],
        created_by=user,
    )


def end_silence(user, silence_id, now=None):
    """End a silence now; NotVisible if `user` may not see it, PermissionError if they may
    not manage alerts in its project."""
    found = projects.in_project(Silence.objects.all(), user).filter(pk=silence_id).first()
    if found is None:
        raise NotVisible(silence_id)
    if not projects.may(user, Action.MANAGE_ALERTS, found.project_id):
        raise PermissionError(Action.MANAGE_ALERTS)
    found.until_at = now or dt.datetime.now(dt.UTC)
    found.save(update_fields=["until_at"])
    return found


@dataclasses.dataclass(frozen=True)
class Row:
    """A rule as the overview shows it: its state (ok, pending, firing, or silenced while a
    silence mutes it), since when, and the last value read."""

    rule: Rule
    state: str
    since: dt.datetime | None
    value: float | None
    evaluated_at: dt.datetime | None

    # (a rule's state, not a stream's: the templates read stream statuses from the
    # vocabulary, and this one is spelled the same, so it is said here)
    @property
    def is_pending(self):
        return self.state == RuleState.State.PENDING

    @property
    def pending_word(self):
        return pgettext("alert state", "pending")


SILENCED = "silenced"


def overview(user, project=None, now=None):
    now = now or dt.datetime.now(dt.UTC)
    found = visible(user, project).select_related("project", "state").order_by("name", "pk")
    rows = []
    for rule in found[:500]:
        state = getattr(rule, "state", None)
        shown = state.state if state is not None else RuleState.State.OK
        if notices.silenced(rule, now):
            shown = SILENCED
        rows.append(
            Row(
                rule,
                shown,
                state.since if state else None,
                state.value if state else None,
                state.evaluated_at if state else None,
            )
        )
    return rows


def draft(project, fields):
    """An unsaved rule of `project` with `clean`'s fields (the backtest of a form)."""
    fields = dict(fields)
    fields.pop("channels", None)
    return Rule(project=project, **fields)
