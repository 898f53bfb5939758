"""The evaluators' JSON API (docs/experiments.md, "Evaluators"), with api.py's conventions:
the same authentication, errors and project rules; viewers read, members make and apply
(`Action.EVALUATE`).

=======  ==================================  ==================================================
method   path                                what
=======  ==================================  ==================================================
GET      /api/evaluators/                    the project's evaluators
POST     /api/evaluators/                    ``{"name", "kind", "config"}`` → 201 the evaluator
GET      /api/evaluators/<id>/               one evaluator, with its latest evaluations
POST     /api/evaluators/<id>/               ``{"kind"?, "config"}`` → 200 its next version
DELETE   /api/evaluators/<id>/               204; its scores stay (``evaluators.delete``)
POST     /api/evaluators/<id>/apply/         ``{"stream", "expected"?}`` → 201 ``{"written",
                                             "value", "label", "reason", "key",
                                             "judge_stream"}`` (no score: ``written`` false and
                                             the reason)
GET      /api/online-rules/                  the project's online rules: their evaluators,
                                             filter, budget, what they judged and spent, and
                                             ``stopped_reason`` (empty while they run)
GET      /api/online-rules/<id>/             one rule, with its latest evaluations
DELETE   /api/online-rules/<id>/             204; what it judged stays
=======  ==================================  ==================================================
"""

import asyncio

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections
from django.http import HttpResponse

from streams import evaluate
from streams.access import projects
from streams.access.projects import Action
from streams.evaluate import evaluators, online
from streams.models import Project
from streams.serve import api
from streams.serve.http import api_view, json_error, method_not_allowed


def evaluator_shape(evaluator):
    return {
        "id": evaluator.pk,
        "name": evaluator.name,
        "kind": evaluator.kind,
        "version": evaluator.version,
        "key": evaluator.key,
        "config": evaluator.config,
        "score_type": evaluator.score_type.name if evaluator.score_type else None,
        "created_at": evaluator.created_at,
        "updated_at": evaluator.updated_at,
    }


def evaluation_shape(e):
    return {
        "id": e.pk,
        "stream": e.stream_id,
        "key": f"{e.evaluator.name}@v{e.version}",
        "written": e.score_id is not None,
        "value": e.value,
        "label": e.label,
        "reason": e.reason,
        "judge_stream": e.judge_stream_id,
        "rule": e.rule_id,
        "created_at": e.created_at,
    }


def rule_shape(rule):
    return {
        "id": rule.pk,
        "name": rule.name,
        "evaluators": [e.key for e in rule.evaluators.all()],
        "enabled": rule.enabled,
        "sample_rate": rule.sample_rate,
        "model": rule.model,
        "tag": rule.tag,
        "source": rule.source,
        "token": rule.token_id,
        "per_hour": rule.per_hour,
        "spend_cap_nanos": rule.spend_cap_nanos,
        "currency": rule.project.currency,
        "judged": rule.judged,
        "over_budget": rule.over_budget,
        "over_budget_at": rule.over_budget_at,
        "spent_nanos": rule.spent_nanos,
        "stopped_reason": rule.stopped_reason,
    }


def _rules(request):
    try:
        project = api.project_id(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    found = online.visible(request.user, project).select_related("project")
    return api.respond({"online_rules": [rule_shape(r) for r in found]})


def _rule(request, rule_id):
    found = online.visible_one(request.user, rule_id)
    if found is None:
        return json_error(404, "not_found", f"No online rule {rule_id}.")
    latest = [evaluation_shape(e) for e in online.recent(found, limit=20)]
    return api.respond({**rule_shape(found), "evaluations": latest})


def _invalid(exc):
    return json_error(400, "invalid", exc.message, fields={exc.field: [exc.message]})


def _list(request):
    try:
        project = api.project_id(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    found = evaluators.visible(request.user, project)
    return api.respond({"evaluators": [evaluator_shape(e) for e in found]})


def _create(request, data):
    try:
        project_id = api.writing_project_id(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    if not projects.may(request.user, Action.EVALUATE, project_id):
        return api.forbidden(Action.EVALUATE)
    try:
        made = evaluate.save(
            Project.objects.get(pk=project_id),
            name=_text(data.get("name")),
            kind=_text(data.get("kind")),
            config=data.get("config", {}),
            user=request.user,
        )
    except evaluators.Invalid as exc:
        return _invalid(exc)
    return api.respond(evaluator_shape(made), status=201)


def _text(value):
    return value if isinstance(value, str) else ""


def _one(request, evaluator_id):
    found = evaluators.visible_one(request.user, evaluator_id)
    if found is None:
        return None, json_error(404, "not_found", f"No evaluator {evaluator_id}.")
    return found, None


def _read(request, evaluator_id):
    found, error = _one(request, evaluator_id)
    if error:
        return error
    latest = [evaluation_shape(e) for e in evaluators.recent(found, limit=20)]
    return api.respond({**evaluator_shape(found), "evaluations": latest})


def _edit(request, evaluator_id, data):
    found, error = _one(request, evaluator_id)
    if error:
        return error
    if not projects.may(request.user, Action.EVALUATE, found.project_id):
        return api.forbidden(Action.EVALUATE)
    try:
        changed = evaluate.save(
            found.project,
            name=found.name,
            kind=_text(data.get("kind")) or found.kind,
            config=data.get("config") if "config" in data else found.config,
            user=request.user,
            evaluator=found,
        )
    except evaluators.Invalid as exc:
        return _invalid(exc)
    return api.respond(evaluator_shape(changed))


def _delete(request, evaluator_id):
    found, error = _one(request, evaluator_id)
    if error:
        return error
    if not projects.may(request.user, Action.EVALUATE, found.project_id):
        return api.forbidden(Action.EVALUATE)
    evaluators.delete(found)
    return HttpResponse(status=204)


def _delete_rule(request, rule_id):
    found = online.visible_one(request.user, rule_id)
    if found is None:
        return json_error(404, "not_found", f"No online rule {rule_id}.")
    if not projects.may(request.user, Action.EVALUATE, found.project_id):
        return api.forbidden(Action.EVALUATE)
    online.delete(found)
    return HttpResponse(status=204)


def _apply(request, evaluator_id, data):
    close_old_connections()
    try:
        found, error = _one(request, evaluator_id)
        if error:
            return error
        if not projects.may(request.user, Action.EVALUATE, found.project_id):
            return api.forbidden(Action.EVALUATE)
        stream_id, expected = data.get("stream"), data.get("expected")
        if not isinstance(stream_id, int) or isinstance(stream_id, bool):
            return json_error(400, "invalid", '"stream": the id of a stream.')
        if expected is not None and not isinstance(expected, str):
            return json_error(400, "invalid", '"expected": a string, or leave it out.')
        stream = evaluators.stream_to_try(request.user, found, stream_id)
        if stream is None:
            return json_error(404, "not_found", f"No stream {stream_id} in this project.")
        result = evaluate.apply(found, stream=stream, expected=expected, run_as=request.user)
        return api.respond(evaluation_shape(result.evaluation), status=201)
    finally:
        connections.close_all()  # (this thread's own: see `api_evaluator_apply`)


@api_view
async def api_evaluators(request):
    if request.method == "GET":
        return await sync_to_async(_list)(request)
    if request.method != "POST":
        return method_not_allowed("GET", "POST")
    data, error = await asyncio.to_thread(api.parse_json, request)
    if error:
        return error
    return await sync_to_async(_create)(request, data)


@api_view
async def api_evaluator(request, evaluator_id):
    if request.method == "GET":
        return await sync_to_async(_read)(request, evaluator_id)
    if request.method == "DELETE":
        return await sync_to_async(_delete)(request, evaluator_id)
    if request.method != "POST":
        return method_not_allowed("GET", "POST", "DELETE")
    data, error = await asyncio.to_thread(api.parse_json, request)
    if error:
        return error
    return await sync_to_async(_edit)(request, evaluator_id, data)


@api_view
async def api_evaluator_apply(request, evaluator_id):
    if request.method != "POST":
        return method_not_allowed("POST")
    data, error = await asyncio.to_thread(api.parse_json, request)
    if error:
        return error
    # a judge waits for its model: on a thread of its own, not the one sync code shares
    return await sync_to_async(_apply, thread_sensitive=False)(request, evaluator_id, data)


@api_view
async def api_online_rules(request):
    if request.method != "GET":
        return method_not_allowed("GET")
    return await sync_to_async(_rules)(request)


@api_view
async def api_online_rule(request, online_rule_id):
    if request.method == "DELETE":
        return await sync_to_async(_delete_rule)(request, online_rule_id)
    if request.method != "GET":
        return method_not_allowed("GET", "DELETE")
    return await sync_to_async(_rule)(request, online_rule_id)
