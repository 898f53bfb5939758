"""Datasets, experiments, their runs and results (docs/experiments.md). Viewers read; members
(Action.EXPERIMENT) make datasets and experiments and run them. A dataset, experiment or run
of a project one is not in is a 404 (its id must not leak); a role too low for the action, 403.
The domain is streams/experiments/; these views check access, parse, call once and render."""

import json

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard import exports
from dashboard.forms.experiments import (
    AddStreamForm,
    DatasetForm,
    ExperimentForm,
    ItemsPageForm,
    UploadForm,
)
from dashboard.forms.streams import StreamFilterForm
from dashboard.project import project_of, require, working
from dashboard.queries import stream_list
from streams.access import projects
from streams.access.projects import Action
from streams.access.rules import streams_for
from streams.access.throttle import search_allowed
from streams.experiments import datasets, experiments, results, runs, uploads
from streams.models import Dataset, Evaluator, Experiment, Run, Stream

ITEMS_SHOWN = 100  # a dataset page's items (the rest are counted)


def _visible(queryset, user, pk, action=Action.READ):
    """The object `pk` of `queryset` in a project `user` is in (else 404), once their role
    there allows `action` (else 403)."""
    found = projects.in_project(queryset, user).filter(pk=pk).first()
    if found is None:
        raise Http404("not found")
    require(user, action, found.project_id)
    return found


def _in_current(queryset, request):
    project = project_of(request)
    return projects.in_project(queryset, request.user, project)


def _run_of(user, run_id, action=Action.READ):
    return _visible(
        Run.objects.select_related("experiment__dataset_version__dataset", "experiment"),
        user,
        run_id,
        action,
    )


# ---- datasets --------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def dataset_list(request):
    form, status = DatasetForm(), 200
    if request.method == "POST":
        project = working(request, Action.EXPERIMENT)
        form = DatasetForm(request.POST)
        if form.is_valid():
            try:
                dataset = datasets.create(
                    project,
                    form.cleaned_data["name"],
                    user=request.user,
                    description=form.cleaned_data["description"],
                )
            except datasets.Refused as exc:
                form.add_error("name", str(exc))
            else:
                return HttpResponseRedirect(reverse("dataset_detail", args=[dataset.pk]))
        status = 400
    rows = datasets.listed(_in_current(Dataset.objects, request))
    context = {"rows": rows, "form": form, "nav": "experiments"}
    return render(request, "dashboard/dataset_list.html", context, status=status)


@login_required
@require_GET
def dataset_detail(request, dataset_id):
    dataset = _visible(Dataset.objects, request.user, dataset_id)
    version = datasets.latest(dataset)
    items = list(version.items.order_by("position")[:ITEMS_SHOWN]) if version else []
    count = version.items.count() if version else 0
    context = {
        "dataset": dataset,
        "version": version,
        "versions": dataset.versions.all(),
        "items": items,
        "count": count,
        "more": max(0, count - len(items)),
        "upload_form": UploadForm(),
        "upload_limit": uploads.max_bytes(),
        "nav": "experiments",
    }
    return render(request, "dashboard/dataset_detail.html", context)


@login_required
@require_POST
def dataset_upload(request, dataset_id):
    """Items from a JSONL or CSV file, all or none; over the limit refused by its declared
    length before the body is read (413), and while reading when the length lies."""
    dataset = _visible(Dataset.objects, request.user, dataset_id, Action.EXPERIMENT)
    errors, status = [], 400
    try:
        uploads.refuse_declared(request.META.get("CONTENT_LENGTH"))
        form = UploadForm(request.POST, request.FILES)
        if form.is_valid():
            upload = form.cleaned_data["file"]
            items, errors = uploads.parse(uploads.read_bounded(upload), upload.name)
            if not errors:
                datasets.add(dataset, items)
                return HttpResponseRedirect(reverse("dataset_detail", args=[dataset.pk]))
        else:
            errors = [(0, gettext("Choose a file."))]
    except uploads.TooLarge as exc:
        errors, status = [(0, str(exc))], 413
    except datasets.Refused as exc:
        errors = [(0, str(exc))]
    context = {"dataset": dataset, "errors": errors, "nav": "experiments"}
    return render(request, "dashboard/dataset_upload.html", context, status=status)


@login_required
@require_POST
def stream_add_to_dataset(request, stream_id):
    """ "Add to dataset" on a stream's page and the comparison's: into a dataset of the
    stream's project, or a new one."""
    stream = _visible(Stream.objects, request.user, stream_id, Action.EXPERIMENT)
    choices = Dataset.objects.filter(project_id=stream.project_id)
    form = AddStreamForm(request.POST, datasets=choices)
    if not form.is_valid():
        context = {"stream": stream, "form": form, "nav": "streams"}
        return render(request, "dashboard/stream_add_to_dataset.html", context, status=400)
    d = form.cleaned_data
    try:
        dataset = datasets.add_stream(
            stream, d["dataset"] or d["new_name"], user=request.user, with_answer=d["with_answer"]
        )
    except datasets.Refused as exc:
        form.add_error(None, str(exc))
        context = {"stream": stream, "form": form, "nav": "streams"}
        return render(request, "dashboard/stream_add_to_dataset.html", context, status=400)
    return HttpResponseRedirect(reverse("dataset_detail", args=[dataset.pk]))


@login_required
@require_http_methods(["GET", "POST"])
def streams_add_to_dataset(request):
    """The stream list's current filter or search (its query string) added to a dataset: the
    first datasets.MAX_FROM_LIST of the streams it finds, oldest first."""
    filters = StreamFilterForm(request.GET)
    if not filters.is_valid():
        raise Http404("invalid filters")
    project = working(request, Action.EXPERIMENT) if request.method == "POST" else None
    project = project or project_of(request) or projects.home(request.user)
    if stream_list.ranked_terms(request.user, filters.filters(), project):  # a search of the text
        if search_allowed(request.user) is not None:
            return HttpResponse(gettext("Too many searches: try again in a minute."), status=429)
    found = stream_list.filter_streams(streams_for(request.user, project), filters.filters())
    choices = Dataset.objects.filter(project=project)
    form, status = AddStreamForm(datasets=choices), 200
    if request.method == "POST":
        form = AddStreamForm(request.POST, datasets=choices)
        if form.is_valid():
            d = form.cleaned_data
            try:
                dataset = datasets.add_found(
                    project, found, d["dataset"] or d["new_name"], user=request.user,
                    with_answer=d["with_answer"],
                )  # fmt: skip
            except datasets.Refused as exc:
                form.add_error(None, str(exc))
            else:
                return HttpResponseRedirect(reverse("dataset_detail", args=[dataset.pk]))
        status = 400
    context = {
        "form": form,
        "count": found.count() if not filters.filters().get("q") else None,
        "limit": datasets.MAX_FROM_LIST,
        "query": request.GET.urlencode(),
        "nav": "streams",
    }
    return render(request, "dashboard/streams_add_to_dataset.html", context, status=status)


# ---- experiments -----------------------------------------------------------------------------


def _experiment_form(request, project, data=None):
    return ExperimentForm(
        data,
        datasets=Dataset.objects.filter(project=project),
        evaluators=Evaluator.objects.filter(project=project),
    )


@login_required
@require_http_methods(["GET", "POST"])
def experiment_list(request):
    project = project_of(request)
    form, status = None, 200
    if request.method == "POST":
        project = working(request, Action.EXPERIMENT)
        form = _experiment_form(request, project, request.POST)
        if form.is_valid():
            d = form.cleaned_data
            try:
                experiment = experiments.create(
                    project,
                    name=d["name"],
                    version=datasets.latest(Dataset.objects.get(project=project, pk=d["dataset"])),
                    variants=form.variants(),
                    concurrency=d["concurrency"],
                    user=request.user,
                    evaluators=list(
                        Evaluator.objects.filter(project=project, pk__in=d["evaluators"])
                    ),
                )
            except datasets.Refused as exc:
                form.add_error(None, str(exc))
            else:
                return HttpResponseRedirect(reverse("experiment_detail", args=[experiment.pk]))
        status = 400
    elif project is not None and projects.may(request.user, Action.EXPERIMENT, project):
        form = _experiment_form(request, project)
    rows = _in_current(Experiment.objects, request).select_related("dataset_version__dataset")
    context = {"rows": rows[:200], "form": form, "nav": "experiments"}
    return render(request, "dashboard/experiment_list.html", context, status=status)


@login_required
@require_GET
def experiment_detail(request, experiment_id):
    experiment = _visible(
        Experiment.objects.select_related("dataset_version__dataset"), request.user, experiment_id
    )
    context = {
        "experiment": experiment,
        "variants": experiment.variants.order_by("position"),
        "evaluators": experiment.evaluators.all(),
        "runs": experiment.runs.order_by("-number"),
        "nav": "experiments",
    }
    return render(request, "dashboard/experiment_detail.html", context)


def _start(user, experiment_id):
    experiment = _visible(Experiment.objects, user, experiment_id, Action.EXPERIMENT)
    return runs.start(experiment, user)


@login_required
@require_POST
async def experiment_run(request, experiment_id):
    """A new run, driven by a task on the server's loop (it outlives this request)."""
    run = await sync_to_async(_start)(await request.auser(), experiment_id)
    runs.launch(run)
    return HttpResponseRedirect(reverse("run_detail", args=[run.pk]))


# ---- runs ------------------------------------------------------------------------------------


@login_required
@require_GET
def run_detail(request, run_id):
    run = _run_of(request.user, run_id)
    progress = runs.progress(run.pk)
    if request.GET.get("fragment") == "run-progress":  # (the progress card's poll)
        return render(
            request, "dashboard/run_detail.html#progress", {"run": run, "progress": progress}
        )
    form = ItemsPageForm(request.GET)
    d = form.cleaned_data if form.is_valid() else {}
    variants = list(run.experiment.variants.order_by("position"))
    baseline = next((v for v in variants if v.pk == d.get("baseline")), None)
    items = results.item_rows(
        run, after=d.get("after"), before=d.get("before"), baseline_variant=baseline
    )
    context = {
        "run": run,
        "progress": progress,
        "summaries": results.variant_summaries(run),
        "variants": variants,
        "baseline": baseline,
        "items": items,
        "others": Run.objects.filter(
            experiment__dataset_version__dataset=run.experiment.dataset_version.dataset
        )
        .exclude(pk=run.pk)
        .select_related("experiment")
        .order_by("-created_at")[:50],
        "nav": "experiments",
    }
    return render(request, "dashboard/run_detail.html", context)


@login_required
@require_POST
def run_cancel(request, run_id):
    run = _run_of(request.user, run_id, Action.EXPERIMENT)
    runs.cancel(run)
    return HttpResponseRedirect(reverse("run_detail", args=[run.pk]))


def _resume(user, run_id):
    run = _run_of(user, run_id, Action.EXPERIMENT)
    return run, runs.resume(run)


@login_required
@require_POST
async def run_resume(request, run_id):
    run, resumed = await sync_to_async(_resume)(await request.auser(), run_id)
    if resumed:
        runs.launch(run)
    return HttpResponseRedirect(reverse("run_detail", args=[run.pk]))


@login_required
@require_GET
def run_compare(request, run_id, other_run_id):
    """`other_run_id` (the earlier) against `run_id`: what got slower, costlier, worse-scored
    or changed its answer, largest change first."""
    later = _run_of(request.user, run_id)
    earlier = _run_of(request.user, other_run_id)
    context = {
        "earlier": earlier,
        "later": later,
        "changes": results.compare(earlier, later),
        "nav": "experiments",
    }
    return render(request, "dashboard/run_compare.html", context)


@login_required
@require_GET
def run_export_json(request, run_id):
    run = _run_of(request.user, run_id)
    body = {
        "run": run.pk,
        "experiment": run.experiment.name,
        "state": run.state,
        "variants": [results.summary_dict(s) for s in results.variant_summaries(run)],
        "items": list(results.export_rows(run)),
    }
    response = HttpResponse(json.dumps(body, ensure_ascii=False), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.json"'
    return response


@login_required
@require_GET
def run_export_csv(request, run_id):
    """One line per item × variant, each text cell guarded against spreadsheet formulas."""
    run = _run_of(request.user, run_id)
    fields = results.EXPORT_FIELDS
    table = [fields] + [
        [json.dumps(row[f], ensure_ascii=False) if f == "scores" else row[f] for f in fields]
        for row in results.export_rows(run)
    ]
    response = StreamingHttpResponse(exports.lines(table), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.csv"'
    return response
