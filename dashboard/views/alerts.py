"""The alert pages (/alerts/, docs/alerts.md "Rules"): the overview of a project's rules and their
state, the rule form with its backtest, the history of firings, and silences. Everyone in the
project reads them; members and up make, change, delete and mute rules (`Action.MANAGE_ALERTS`).
Staff working in every project at once see every project's rules and history, and make rules
in a project they choose first. What a rule may be: `streams.alerts.rules` (the API's too).
"""

import datetime as dt

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.forms.alerts import RuleForm, SilenceForm
from dashboard.project import project_of, require, working, writing_project
from streams.access import projects
from streams.alerts import evaluate
from streams.alerts import rules as alert_rules

Action = projects.Action


def _rule(user, rule_id, action=Action.READ):
    try:
        return alert_rules.get(user, rule_id, action)
    except alert_rules.NotVisible:
        raise Http404("No such rule") from None
    except PermissionError:
        raise PermissionDenied("Your role in this project may not change its alerts.") from None


def _manages(user, project):
    return project is not None and projects.may(user, Action.MANAGE_ALERTS, project)


def _rule_form(request, project, rule=None):
    data = request.POST if request.method == "POST" else None
    initial = RuleForm.initial_of(rule) if rule is not None else None
    tokens = alert_rules.tokens_for(request.user, project)
    return RuleForm(data, initial=initial, project=project, tokens=tokens)


def _apply(request, form, project, rule=None):
    """Save the form's rule through the one validation; its refusals on the form (400) or as
    a 404 for a scope the user may not see."""
    if not form.is_valid():
        return None
    try:
        return alert_rules.save(request.user, project, form.cleaned_data, rule)
    except alert_rules.Invalid as exc:
        for name, message in exc.errors.items():
            form.add_error(name if name in form.fields else None, message)
    except alert_rules.NotVisible:
        raise Http404("No such token, user, score type or channel") from None
    return None


@login_required
@require_GET
def alerts(request):
    project = project_of(request)
    require(request.user, Action.READ, project)
    context = {
        "rows": alert_rules.overview(request.user, project),
        "manages": _manages(request.user, writing_project(request)),
        "every_project": project is None,
        "nav": "alerts",
    }
    return render(request, "dashboard/alerts.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def alert_rule_new(request):
    project = working(request, Action.MANAGE_ALERTS)
    form = _rule_form(request, project)
    if request.method == "POST":
        rule = _apply(request, form, project)
        if rule is not None:
            return HttpResponseRedirect(reverse("alert_rule", args=[rule.pk]))
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "rule": None, "manages": True, "nav": "alerts"}
    return render(request, "dashboard/alert_rule.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def alert_rule(request, rule_id):
    action = Action.MANAGE_ALERTS if request.method == "POST" else Action.READ
    rule = _rule(request.user, rule_id, action)
    form = _rule_form(request, rule.project, rule)
    if request.method == "POST":
        if _apply(request, form, rule.project, rule) is not None:
            return HttpResponseRedirect(reverse("alert_rule", args=[rule.pk]))
    context = {
        "form": form,
        "rule": rule,
        "manages": projects.may(request.user, Action.MANAGE_ALERTS, rule.project),
        "firings": alert_rules.history(request.user, rule=rule, limit=50),
        "nav": "alerts",
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "dashboard/alert_rule.html", context, status=status)


@login_required
@require_POST
def alert_rule_delete(request, rule_id):
    _rule(request.user, rule_id, Action.MANAGE_ALERTS).delete()
    return HttpResponseRedirect(reverse("alerts"))


@login_required
@require_POST
def alert_backtest(request):
    """The form's rule, unsaved, over the last 7 days (htmx: the form's "Backtest" button;
    `?rule=<id>`: in that rule's project, else in the page's)."""
    rule_id = request.GET.get("rule", "")
    if rule_id.isdigit():
        project = _rule(request.user, int(rule_id), Action.MANAGE_ALERTS).project
    else:
        project = working(request, Action.MANAGE_ALERTS)
    form = _rule_form(request, project)
    result, status = None, 400
    if form.is_valid():
        try:
            fields = alert_rules.clean(request.user, project, form.cleaned_data)
        except alert_rules.Invalid as exc:
            for name, message in exc.errors.items():
                form.add_error(name if name in form.fields else None, message)
        except alert_rules.NotVisible:
            raise Http404("No such token, user, score type or channel") from None
        else:
            now = dt.datetime.now(dt.UTC)
            result = evaluate.backtest(alert_rules.draft(project, fields), now)
            status = 200
    context = {"result": result, "form": form}
    return render(request, "dashboard/alert_backtest.html", context, status=status)


@login_required
@require_GET
def alert_history(request):
    project = project_of(request)
    require(request.user, Action.READ, project)
    context = {
        "firings": alert_rules.history(request.user, project),
        "every_project": project is None,
        "nav": "alerts",
    }
    return render(request, "dashboard/alert_history.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def alert_silences(request):
    project = project_of(request)
    require(request.user, Action.READ, project)
    # (staff in every project at once mute in their home project, as they make things there)
    target = writing_project(request)
    manages = _manages(request.user, target)
    form = None
    if manages:
        rules = alert_rules.visible(request.user, target)
        form = SilenceForm(
            request.POST if request.method == "POST" else None,
            rules=rules,
            tokens=alert_rules.tokens_for(request.user, target),
        )
    status = 200
    if request.method == "POST":
        if form is None:
            raise PermissionDenied("Your role in this project may not mute its alerts.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                alert_rules.silence(
                    request.user,
                    target,
                    rule=data["rule"],
                    scope=form.scope(),
                    hours=data["hours"],
                    reason=data["reason"],
                )
            except alert_rules.NotVisible:
                raise Http404("No such token") from None
            except alert_rules.Invalid as exc:
                for name, message in exc.errors.items():
                    form.add_error(name if name in form.fields else None, message)
            else:
                return HttpResponseRedirect(reverse("alert_silences"))
        status = 400
    context = {
        "silences": alert_rules.silences(request.user, project),
        "form": form,
        "manages": manages,
        "every_project": project is None,
        "nav": "alerts",
    }
    return render(request, "dashboard/alert_silences.html", context, status=status)


@login_required
@require_POST
def alert_silence_end(request, silence_id):
    try:
        alert_rules.end_silence(request.user, silence_id)
    except alert_rules.NotVisible:
        raise Http404("No such silence") from None
    except PermissionError:
        raise PermissionDenied("Your role in this project may not change its alerts.") from None
    return HttpResponseRedirect(reverse("alert_silences"))
