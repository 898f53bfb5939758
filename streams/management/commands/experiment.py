"""Run a dataset against variants from the command line (a CI pipeline's step):

    python manage.py experiment run DATASET --variants gpt-oss-20b "eu-reasoner;effort=low"

A progress bar on stderr while it runs, the results per variant on stdout (JSON with --json),
and the exit status: 0 when every item was answered, 1 when some failed, 2 for bad input."""

import asyncio
import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from streams.access import projects
from streams.experiments import datasets, experiments, results, runs
from streams.models import Dataset, Project, Run


class Command(BaseCommand):
    help = "Run a dataset's latest version against variants; exit 1 when an item failed."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="run a dataset against variants")
        run.add_argument("dataset", help="the dataset's name (or id) in the project")
        run.add_argument(
            "--variants",
            nargs="+",
            required=True,
            help="MODEL or 'MODEL;effort=low;temperature=0.2;max_output_tokens=200;name=x'",
        )
        run.add_argument("--project", default="", help="the project's slug (default: the user's)")
        run.add_argument("--user", default="", help="run as this username (default: staff's first)")
        run.add_argument("--name", default="", help="the experiment's name")
        run.add_argument("--concurrency", type=int, default=10)
        run.add_argument("--json", action="store_true", help="the results as JSON")

    def handle(self, *args, **opts):
        try:
            run = self._start(opts)
        except datasets.Refused as exc:
            raise CommandError(str(exc), returncode=2) from None
        state = asyncio.run(runs.drive(run.pk, on_progress=self._bar))
        sys.stderr.write("\n")
        run = Run.objects.select_related("experiment").get(pk=run.pk)
        summaries = results.variant_summaries(run)
        self._report(run, summaries, opts["json"])
        if state.failed or state.done < state.total:
            sys.exit(1)

    def _start(self, opts):
        User = get_user_model()
        if opts["user"]:
            user = User.objects.filter(username=opts["user"]).first()
            if user is None:
                raise datasets.Refused(f"No user {opts['user']!r}.")
        else:
            user = User.objects.filter(is_staff=True).order_by("pk").first()
        if opts["project"]:
            project = Project.objects.filter(slug=opts["project"]).first()
            if project is None or (user is not None and not projects.may(user, "run", project)):
                raise datasets.Refused(f"No project {opts['project']!r} to run in.")
        elif user is not None:
            project = projects.home(user)
        else:
            raise datasets.Refused("Name a --user or a --project (there is no staff user).")
        found = Dataset.objects.filter(project=project, name=opts["dataset"])
        if opts["dataset"].isdigit():
            found = found | Dataset.objects.filter(project=project, pk=int(opts["dataset"]))
        dataset = found.first()
        if dataset is None:
            raise datasets.Refused(f"No dataset {opts['dataset']!r} in {project}.")
        experiment = experiments.create(
            project,
            name=opts["name"] or f"{dataset.name} (command line)",
            version=datasets.latest(dataset),
            variants=[experiments.parse_variant(v) for v in opts["variants"]],
            concurrency=opts["concurrency"],
            user=user,
        )
        return runs.start(experiment, user)

    def _bar(self, progress):
        width = 30
        filled = width * progress.done // max(progress.total, 1)
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {progress.done}/{progress.total}"
            f" done, {progress.in_flight} running, {progress.failed} failed"
        )
        sys.stderr.flush()

    def _report(self, run, summaries, as_json):
        rows = [results.summary_dict(s) for s in summaries]
        if as_json:
            self.stdout.write(json.dumps({"run": run.pk, "state": run.state, "variants": rows}))
            return
        self.stdout.write(f"run {run.pk} of {run.experiment}: {run.state}")
        for row in rows:
            ttft = "-" if row["ttft_p50_ms"] is None else f"{row['ttft_p50_ms']:.0f}"
            self.stdout.write(
                f"  {row['variant']}: {row['done']}/{row['items']} done, {row['errors']} errors,"
                f" TTFT p50 {ttft} ms, cost {row['cost'] or '-'} {row['currency']}"
            )
