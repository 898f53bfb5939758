"""The JSON API of datasets and experiments (docs/experiments.md, "API"): make a dataset and
add items (all or none, each bad item named by its index), make an experiment, start a run,
read a run's progress and results. Viewers read; members (Action.EXPERIMENT) make and run. A
token works in its own project; another project's things are 404."""

import asyncio

from asgiref.sync import sync_to_async
from django.http import HttpResponse

from streams.access import projects
from streams.access.projects import Action
from streams.experiments import datasets, experiments, results, runs, uploads
from streams.models import Dataset, Experiment, Project, Run
from streams.serve.http import api_view, json_body, json_error, method_not_allowed
from streams.shapes import public

MAX_ITEMS_PER_REQUEST = 10_000


def _respond(data, status=200):
    return HttpResponse(public.dumps(data), status=status, content_type="application/json")


def _body(request):
    """The body's JSON object, bounded by the upload limit (items come by the thousand)."""
    return json_body(request, uploads.max_bytes())


class _Refusal(Exception):
    def __init__(self, response):
        self.response = response


def _project(request, action):
    """The project the request works in (a token's own), once the user may do `action`."""
    token = getattr(request, "token", None)
    slug = request.GET.get("project", "")
    if token is not None:
        project = request.bearer.project
        if slug and slug != project.slug:
            raise _Refusal(json_error(404, "not_found", "No such project."))
    elif slug:
        try:
            project, _ = projects.current(request.user, slug)
        except LookupError:
            raise _Refusal(json_error(404, "not_found", "No such project.")) from None
    else:
        # a browser's current project (the pages' middleware resolves it), else their home
        pk = getattr(getattr(request, "project", None), "pk", None)
        project = Project.objects.get(pk=pk) if pk else projects.home(request.user)
    if not projects.may(request.user, action, project):
        raise _Refusal(json_error(403, "forbidden", f"Your role does not allow {action}."))
    return project


def _object(request, model, pk, action=Action.READ):
    found = projects.in_project(model.objects.all(), request.user).filter(pk=pk).first()
    token = getattr(request, "token", None)
    if found is None or (token is not None and found.project_id != token.project_id):
        raise _Refusal(json_error(404, "not_found", f"No {model._meta.model_name} {pk}."))
    if not projects.may(request.user, action, found.project_id):
        raise _Refusal(json_error(403, "forbidden", f"Your role does not allow {action}."))
    return found


def _items(data):
    """The cleaned items of `data["items"]`, or Refused naming the first bad one's index."""
    raw = data.get("items", [])
    if not isinstance(raw, list) or len(raw) > MAX_ITEMS_PER_REQUEST:
        raise datasets.Refused(f"'items' is a list of at most {MAX_ITEMS_PER_REQUEST:,}.")
    cleaned, errors = [], []
    for index, item in enumerate(raw):
        try:
            cleaned.append(datasets.clean_item(item))
        except datasets.Refused as exc:
            errors.append({"index": index, "error": str(exc)})
    if errors:
        raise datasets.Refused(errors)
    return cleaned


def _dataset_shape(dataset):
    version = datasets.latest(dataset)
    return {
        "id": dataset.pk,
        "name": dataset.name,
        "description": dataset.description,
        "version": version.number if version else None,
        "items": version.items.count() if version else 0,
    }


def _refused(exc):
    detail = exc.args[0]
    if isinstance(detail, list):
        return json_error(400, "invalid_items", "Some items are not valid.", items=detail)
    return json_error(400, "invalid", str(detail))


def _datasets(request, data):
    if request.method == "GET":
        project = _project(request, Action.READ)
        found = Dataset.objects.filter(project=project).order_by("name")[:500]
        return _respond({"datasets": [_dataset_shape(d) for d in found]})
    project = _project(request, Action.EXPERIMENT)
    try:
        items = _items(data)
        dataset = datasets.create(
            project, data.get("name"), user=request.user, description=data.get("description") or ""
        )
        if items:
            datasets.add(dataset, items)
    except datasets.Refused as exc:
        return _refused(exc)
    return _respond(_dataset_shape(dataset), status=201)


def _dataset_items(request, data, dataset_id):
    dataset = _object(request, Dataset, dataset_id, Action.EXPERIMENT)
    try:
        version = datasets.add(dataset, _items(data))
    except datasets.Refused as exc:
        return _refused(exc)
    return _respond({**_dataset_shape(dataset), "version": version.number}, status=201)


def _experiments(request, data):
    project = _project(request, Action.EXPERIMENT)
    dataset = Dataset.objects.filter(project=project, pk=data.get("dataset") or 0).first()
    if dataset is None:
        return json_error(400, "invalid", "'dataset': no such dataset in the project.")
    evaluator_ids = data.get("evaluators") or []
    if not isinstance(evaluator_ids, list):
        return json_error(400, "invalid", "'evaluators' is a list of ids.")
    ids = [i for i in evaluator_ids if isinstance(i, int) and not isinstance(i, bool)]
    evaluators = list(project.evaluators.filter(pk__in=ids))
    if len(evaluators) != len(evaluator_ids):
        return json_error(400, "invalid", "'evaluators': no such evaluator in the project.")
    variants = data.get("variants")
    try:
        experiment = experiments.create(
            project,
            name=data.get("name"),
            version=datasets.latest(dataset),
            variants=variants if isinstance(variants, list) else [],
            concurrency=data.get("concurrency", 5),
            user=request.user,
            evaluators=evaluators,
        )
    except datasets.Refused as exc:
        return _refused(exc)
    return _respond({"id": experiment.pk, "name": experiment.name}, status=201)


def _start(request, experiment_id):
    experiment = _object(request, Experiment, experiment_id, Action.EXPERIMENT)
    return runs.start(experiment, request.user)


def run_shape(run):
    progress = runs.progress(run.pk)
    return {
        "id": run.pk,
        "experiment": run.experiment_id,
        "number": run.number,
        "state": progress.state,
        "total": progress.total,
        "done": progress.done,
        "in_flight": progress.in_flight,
        "failed": progress.failed,
        "variants": [results.summary_dict(s) for s in results.variant_summaries(run)],
        "url": f"/runs/{run.pk}/",
    }


def _run(request, data, run_id):
    run = _object(request, Run, run_id)
    return _respond(run_shape(Run.objects.select_related("experiment").get(pk=run.pk)))


async def _answer(request, allowed, handle, *args):
    """Check the method, parse a POST's body off the loop, and answer `handle`'s response."""
    if request.method not in allowed:
        return method_not_allowed(*allowed)
    data = None
    if request.method == "POST":
        data, error = await asyncio.to_thread(_body, request)
        if error:
            return error

    def call():
        try:
            return handle(request, data, *args)
        except _Refusal as refusal:
            return refusal.response

    return await sync_to_async(call)()


@api_view
async def api_datasets(request):
    return await _answer(request, ("GET", "POST"), _datasets)


@api_view
async def api_dataset_items(request, dataset_id):
    return await _answer(request, ("POST",), _dataset_items, dataset_id)


@api_view
async def api_experiments(request):
    return await _answer(request, ("POST",), _experiments)


@api_view
async def api_experiment_runs(request, experiment_id):
    """Start a run (201), driven by a task on this server's loop."""
    if request.method != "POST":
        return method_not_allowed("POST")
    try:
        run = await sync_to_async(_start)(request, experiment_id)
    except _Refusal as refusal:
        return refusal.response
    runs.launch(run)
    return _respond({"id": run.pk, "url": f"/api/runs/{run.pk}/"}, status=201)


@api_view
async def api_run(request, run_id):
    return await _answer(request, ("GET",), _run, run_id)
