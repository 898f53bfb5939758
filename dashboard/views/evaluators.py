"""The evaluators' pages (docs/experiments.md, "Evaluators"): the project's evaluators, making
one, its page (its config, a new version on each edit, its latest scores, trying it on a
stream), and the online rules that apply them to new streams. Viewers read; members make and
edit (`Action.EVALUATE`). The work is streams/evaluate/'s."""

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.db import close_old_connections, connections
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.forms.evaluators import FIELDS_OF, EvaluatorForm, OnlineRuleForm, TryForm
from dashboard.project import project_of, require, working
from streams import evaluate
from streams.access.projects import Action
from streams.evaluate import evaluators, online


def _evaluator(request, evaluator_id):
    found = evaluators.visible_one(request.user, evaluator_id)
    if found is None:
        raise Http404("No such evaluator")
    return found


def _rule(request, rule_id):
    found = online.visible_one(request.user, rule_id)
    if found is None:
        raise Http404("No such online rule")
    return found


@login_required
def evaluator_list(request):
    context = {
        "evaluators": list(evaluators.visible(request.user, project_of(request))),
        "nav": "evaluators",
    }
    return render(request, "dashboard/evaluator_list.html", context)


def _fields_of():
    return {kind.value: list(names) for kind, names in FIELDS_OF.items()}


@login_required
@require_http_methods(["GET", "POST"])
def evaluator_new(request):
    project = working(request, Action.EVALUATE)
    form = EvaluatorForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        config = form.config()
        if config is not None:
            try:
                made = evaluate.save(
                    project,
                    name=form.cleaned_data["name"],
                    kind=form.cleaned_data["kind"],
                    config=config,
                    user=request.user,
                )
                return HttpResponseRedirect(reverse("evaluator_detail", args=[made.pk]))
            except evaluators.Invalid as exc:
                form.refused(exc)
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "fields_of": _fields_of(), "nav": "evaluators"}
    return render(request, "dashboard/evaluator_new.html", context, status=status)


def _detail(request, evaluator, form=None, try_form=None, tried=None, status=200):
    context = {
        "evaluator": evaluator,
        "form": form or EvaluatorForm(evaluator=evaluator),
        "try_form": try_form or TryForm(),
        "tried": tried,
        "evaluations": evaluators.recent(evaluator),
        "fields_of": _fields_of(),
        "nav": "evaluators",
    }
    return render(request, "dashboard/evaluator_detail.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def evaluator_detail(request, evaluator_id):
    evaluator = _evaluator(request, evaluator_id)
    if request.method == "GET":
        return _detail(request, evaluator)
    require(request.user, Action.EVALUATE, evaluator.project_id)
    form = EvaluatorForm(request.POST, evaluator=evaluator)
    if form.is_valid() and (config := form.config()) is not None:
        try:
            evaluate.save(
                evaluator.project,
                name=evaluator.name,
                kind=form.cleaned_data["kind"],
                config=config,
                user=request.user,
                evaluator=evaluator,
            )
            return HttpResponseRedirect(reverse("evaluator_detail", args=[evaluator.pk]))
        except evaluators.Invalid as exc:
            form.refused(exc)
    return _detail(request, evaluator, form=form, status=400)


@login_required
@require_POST
def evaluator_delete(request, evaluator_id):
    """Its scores stay (`evaluators.delete` says why)."""
    evaluator = _evaluator(request, evaluator_id)
    require(request.user, Action.EVALUATE, evaluator.project_id)
    evaluators.delete(evaluator)
    return HttpResponseRedirect(reverse("evaluator_list"))


@login_required
@require_POST
async def evaluator_try(request, evaluator_id):
    # A judge waits for its model (up to its time limit): on a thread of its own, not the
    # one every sync view shares, and its stream recorded on the server's loop (asgiref
    # finds it from such a thread)
    return await sync_to_async(_try, thread_sensitive=False)(request, evaluator_id)


def _try(request, evaluator_id):
    close_old_connections()
    try:
        evaluator = _evaluator(request, evaluator_id)
        require(request.user, Action.EVALUATE, evaluator.project_id)
        try_form = TryForm(request.POST)
        if not try_form.is_valid():
            return _detail(request, evaluator, try_form=try_form, status=400)
        stream = evaluators.stream_to_try(request.user, evaluator, try_form.cleaned_data["stream"])
        if stream is None:
            raise Http404("No such stream in the evaluator's project")
        expected = try_form.cleaned_data["expected"] or None
        tried = evaluate.apply(evaluator, stream=stream, expected=expected, run_as=request.user)
        return _detail(request, evaluator, try_form=try_form, tried=tried)
    finally:
        connections.close_all()  # (this thread's: it is not a request's, nothing else would)


@login_required
@require_http_methods(["GET", "POST"])
def online_rule_list(request):
    project = project_of(request)
    form, status = None, 200
    if request.method == "POST":
        project = working(request, Action.EVALUATE)
    if project is not None:
        choices = evaluators.visible(request.user, project)
        form = OnlineRuleForm(request.POST or None, evaluators=choices)
    if request.method == "POST":
        if form.is_valid():
            fields = form.rule_fields()
            made = online.create(project, user=request.user, **fields)
            return HttpResponseRedirect(reverse("online_rule_detail", args=[made.pk]))
        status = 400
    context = {
        "rules": list(online.visible(request.user, project).prefetch_related("evaluators")),
        "form": form,
        "nav": "evaluators",
    }
    return render(request, "dashboard/online_rule_list.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def online_rule_detail(request, online_rule_id):
    rule = _rule(request, online_rule_id)
    choices = evaluators.visible(request.user, rule.project_id)
    form, status = OnlineRuleForm(evaluators=choices, rule=rule), 200
    if request.method == "POST":
        require(request.user, Action.EVALUATE, rule.project_id)
        form = OnlineRuleForm(request.POST, evaluators=choices)
        if form.is_valid():
            online.update(rule, **form.rule_fields())
            return HttpResponseRedirect(reverse("online_rule_detail", args=[rule.pk]))
        status = 400
    context = {
        "rule": rule,
        "form": form,
        "evaluations": online.recent(rule),
        "this_hour": online.judgements_this_hour(rule),
        "over_budget_now": online.over_budget_now(rule),
        "currency": rule.project.currency,
        "nav": "evaluators",
    }
    return render(request, "dashboard/online_rule_detail.html", context, status=status)


@login_required
@require_POST
def online_rule_delete(request, online_rule_id):
    rule = _rule(request, online_rule_id)
    require(request.user, Action.EVALUATE, rule.project_id)
    online.delete(rule)
    return HttpResponseRedirect(reverse("online_rule_list"))
