"""What came of a run, from its streams' own rows (nothing recomputed from events): per
variant, per item side by side, one run against another, and the same as CSV or JSON.

The figures use the house's definitions: percentiles by nearest rank (streams/core/figures.py),
cost as fixed on each stream when it ended (streams/store/prices.py), "positive" as a score
type says (`ScoreType.positive`). A run's answers are read through `answers` (redacted).
"""

import dataclasses
from collections import defaultdict

from django.db.models import Avg, Count, Q, Sum

from streams.core import figures, pricing
from streams.experiments import answers
from streams.models import Run, RunItem, Score, ScoreType, Stream

GOOD = (Stream.Status.COMPLETED, Stream.Status.INCOMPLETE)
# One run against another: a change below these is noise, not "slower" or "costlier".
SLOWER_SHARE = 0.10
COSTLIER_SHARE = 0.0
ITEMS_PAGE = 50

_COLUMNS = (
    "pk",
    "item_id",
    "item__position",
    "variant_id",
    "stream_id",
    "stream__status",
    "stream__ttft_ms",
    "stream__tokens_per_s",
    "stream__duration_ms",
    "stream__findings_count",
    "stream__cost_nanos",
    "stream__cost_currency",
)


@dataclasses.dataclass
class Row:
    """One run item as the results read it."""

    pk: int
    item_id: int
    position: int
    variant_id: int
    stream_id: int | None
    status: str | None
    ttft_ms: float | None
    tokens_per_s: float | None
    duration_ms: float | None
    findings: int
    cost_nanos: int | None
    currency: str

    @property
    def failed(self):
        return self.stream_id is not None and self.status not in GOOD


def rows_of(run, **where):
    """The Rows of `run` (of the done items only: those waiting or in flight have no figures)."""
    found = RunItem.objects.filter(run=run, done=True, **where).values_list(*_COLUMNS)
    return [
        Row(*values[:9], values[9] or 0, values[10], values[11] or "")
        for values in found.order_by("item__position", "variant__position")
    ]


@dataclasses.dataclass
class ScoreSummary:
    name: str
    count: int
    mean: float
    positive_share: float


@dataclasses.dataclass
class VariantSummary:
    variant: object
    items: int
    done: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tokens_per_s: float | None  # the mean of the streams' own
    duration_p50_ms: float | None
    findings: int
    cost_nanos: int | None  # over the items that have a cost, in `currency`
    cost_items: int
    currency: str
    scores: list

    @property
    def cost_per_item_nanos(self):
        return None if not self.cost_items else self.cost_nanos // self.cost_items

    @property
    def cost_text(self):
        return pricing.amount_text(self.cost_nanos)

    @property
    def cost_per_item_text(self):
        return pricing.amount_text(self.cost_per_item_nanos)


def summary_dict(s):
    """A VariantSummary as the API, the exports and the command write it."""
    return {
        "variant": s.variant.name,
        "model": s.variant.model,
        "items": s.items,
        "done": s.done,
        "errors": s.errors,
        "ttft_p50_ms": s.ttft_p50_ms,
        "ttft_p95_ms": s.ttft_p95_ms,
        "tokens_per_s": s.tokens_per_s,
        "duration_p50_ms": s.duration_p50_ms,
        "findings": s.findings,
        "cost": s.cost_text,
        "cost_per_item": s.cost_per_item_text,
        "currency": s.currency,
        "scores": {
            x.name: {"count": x.count, "mean": x.mean, "positive_share": x.positive_share}
            for x in s.scores
        },
    }


def scores_by_stream(stream_ids=None, *, run=None):
    """{stream id: [(score type name, value, positive)]} of `stream_ids`, or of `run`'s
    streams (a join: a list of 30,000 ids made the query a second slower)."""
    found = defaultdict(list)
    scores = Score.objects.filter(
        **({"stream__run_item__run": run} if run is not None else {"stream_id__in": stream_ids})
    ).values_list(
        "stream_id", "score_type__name", "value", "score_type__minimum", "score_type__maximum"
    )
    for stream_id, name, value, low, high in scores.iterator(chunk_size=5000):
        found[stream_id].append((name, value, ScoreType.positive(value, low, high)))
    return found


def _percentile(queryset, column, q_permille, n):
    """The nearest-rank percentile of `column` over `queryset`'s `n` rows that have it: the
    house's definition (streams/core/figures.py), as an ORDER BY with an OFFSET."""
    if not n:
        return None
    have = queryset.filter(**{f"{column}__isnull": False})
    ordered = have.order_by(column).values_list(column, flat=True)
    return ordered[figures.rank(q_permille, n) - 1]


def _score_summaries(run):
    """{variant id: [ScoreSummary]} of `run`'s scores, by score type."""
    found = defaultdict(list)
    rows = (
        Score.objects.filter(stream__run_item__run=run)
        .values("stream__run_item__variant_id", "score_type__name")
        .annotate(
            n=Count("pk"), mean=Avg("value"), positive=Count("pk", filter=ScoreType.positive_q())
        )
        .order_by("score_type__name")
    )
    for row in rows:
        found[row["stream__run_item__variant_id"]].append(
            ScoreSummary(row["score_type__name"], row["n"], row["mean"], row["positive"] / row["n"])
        )
    return found


def variant_summaries(run):
    """[VariantSummary] of `run`, in the experiment's order of variants: as stored when it
    finished (`store_figures`), else computed from its items now (`computed_summaries`)."""
    if run.state != Run.State.FINISHED:
        return computed_summaries(run)
    if run.figures is None:  # (one that finished before figures were stored)
        store_figures(run)
    return _stored_summaries(run)


_STORED = (
    "items",
    "done",
    "errors",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "tokens_per_s",
    "duration_p50_ms",
    "findings",
    "cost_nanos",
    "cost_items",
    "currency",
)


def as_stored(summaries):
    """`summaries` as they are stored with a run (JSON: one dict per variant, by its id)."""
    return [
        {
            "variant_id": s.variant.pk,
            **{name: getattr(s, name) for name in _STORED},
            "scores": [dataclasses.astuple(x) for x in s.scores],
        }
        for s in summaries
    ]


def store_figures(run):
    """Compute `run`'s figures and store them with it (it finished: its items and their
    streams' rows no longer change); the figures."""
    run.figures = as_stored(computed_summaries(run))
    Run.objects.filter(pk=run.pk).update(figures=run.figures)
    return run.figures


def stored_progress(figures):
    """(total, done, failed) of a finished run, from its stored figures."""
    return tuple(sum(v[k] for v in figures) for k in ("items", "done", "errors"))


def _stored_summaries(run):
    variants = {v.pk: v for v in run.experiment.variants.all()}
    return [
        VariantSummary(
            variant=variants[stored["variant_id"]],
            **{name: stored[name] for name in _STORED},
            scores=[ScoreSummary(*x) for x in stored["scores"]],
        )
        for stored in run.figures
        if stored["variant_id"] in variants
    ]


def computed_summaries(run):
    """[VariantSummary] of `run` from its items' streams now: aggregates and percentiles in
    the database (a run of 10,000 items × 3 read into Python took seconds)."""
    done = RunItem.objects.filter(run=run, done=True)
    good = done.filter(stream__status__in=GOOD)
    totals = dict(
        RunItem.objects.filter(run=run)
        .values("variant_id")
        .annotate(n=Count("pk"))
        .values_list("variant_id", "n")
    )
    figures_of = {
        row["variant_id"]: row
        for row in done.values("variant_id").annotate(
            n=Count("pk"),
            errors=Count("pk", filter=Q(stream__isnull=True) | ~Q(stream__status__in=GOOD)),
            findings=Sum("stream__findings_count"),
            tokens_per_s=Avg("stream__tokens_per_s", filter=Q(stream__status__in=GOOD)),
            # (how many each percentile ranks: counted here, not once per percentile)
            ttfts=Count("stream__ttft_ms", filter=Q(stream__status__in=GOOD)),
            durations=Count("stream__duration_ms", filter=Q(stream__status__in=GOOD)),
        )
    }
    costs = defaultdict(list)  # variant id -> [(items, total, currency)], most items first
    for row in (
        done.filter(stream__cost_nanos__isnull=False)
        .values("variant_id", "stream__cost_currency")
        .annotate(n=Count("pk"), total=Sum("stream__cost_nanos"))
        .order_by("-n")
    ):
        costs[row["variant_id"]].append((row["n"], row["total"], row["stream__cost_currency"]))
    scores = _score_summaries(run)
    summaries = []
    for variant in run.experiment.variants.order_by("position"):
        row = figures_of.get(variant.pk, {})
        mine = good.filter(variant=variant)
        cost_items, cost, currency = (costs.get(variant.pk) or [(0, None, "")])[0]
        summaries.append(
            VariantSummary(
                variant=variant,
                items=totals.get(variant.pk, 0),
                done=row.get("n", 0),
                errors=row.get("errors", 0),
                ttft_p50_ms=_percentile(mine, "stream__ttft_ms", 500, row.get("ttfts")),
                ttft_p95_ms=_percentile(mine, "stream__ttft_ms", 950, row.get("ttfts")),
                tokens_per_s=row.get("tokens_per_s"),
                duration_p50_ms=_percentile(mine, "stream__duration_ms", 500, row.get("durations")),
                findings=row.get("findings") or 0,
                cost_nanos=cost,
                cost_items=cost_items,
                currency=currency,
                scores=scores.get(variant.pk, []),
            )
        )
    return summaries


@dataclasses.dataclass
class Cell:
    """One variant's answer to one item."""

    variant: object
    row: Row | None
    answer: str
    diff: list  # [(op, text)] against the baseline: the expected output or a variant's answer
    scores: list


@dataclasses.dataclass
class ItemRow:
    item: object
    baseline: str
    cells: list


@dataclasses.dataclass
class ItemsPage:
    """One page of a run's items and where the pages around it start (keyset: item
    positions, so a page deep in 10,000 items costs what the first does)."""

    rows: list  # [ItemRow]
    count: int  # the items of the run's dataset version
    earlier: int | None  # the `before` of the page before this one (None: this is the first)
    later: int | None  # the `after` of the page after this one (None: this is the last)

    @property
    def first(self):
        return self.rows[0].item.position if self.rows else 0

    @property
    def last(self):
        return self.rows[-1].item.position if self.rows else 0


def item_rows(run, *, after=None, before=None, baseline_variant=None):
    """An ItemsPage of `run`'s items (ITEMS_PAGE of them, from the one after position
    `after`, or up to the one before `before`; the first page without either): each variant's
    redacted answer with its word diff against `baseline_variant`'s answer, or (none given)
    against the item's expected output."""
    variants = list(run.experiment.variants.order_by("position"))
    version = run.experiment.dataset_version
    found = version.items.all()
    if before is not None:
        found = found.filter(position__lt=before).order_by("-position")
    else:
        found = found.filter(position__gt=after or 0).order_by("position")
    # (one more than a page: whether there is another page that way)
    items = list(found[: ITEMS_PAGE + 1])
    more = len(items) > ITEMS_PAGE
    items = items[:ITEMS_PAGE]
    if before is not None:
        items.reverse()
    page = ItemsPage([], version.items.count(), None, None)
    if items:
        backwards, forwards = (more, True) if before is not None else (bool(after), more)
        # (a page reached going back always has one after it, and one going on one before)
        page.earlier = items[0].position if backwards else None
        page.later = items[-1].position if forwards else None
    rows = {
        (r.item_id, r.variant_id): r for r in rows_of(run, item_id__in=[item.pk for item in items])
    }
    stream_ids = [r.stream_id for r in rows.values() if r.stream_id]
    texts = {
        pk: answers.redacted(final or output)
        for pk, final, output in Stream.objects.filter(pk__in=stream_ids).values_list(
            "pk", "final_text", "output_text"
        )
    }
    by_stream = scores_by_stream(stream_ids)
    for item in items:
        cells_rows = [(v, rows.get((item.pk, v.pk))) for v in variants]
        answers_of = {v.pk: texts.get(r.stream_id, "") if r else "" for v, r in cells_rows}
        if baseline_variant is not None:
            baseline = answers_of.get(baseline_variant.pk, "")
        else:
            baseline = answers.redacted(item.expected_output)
        cells = [
            Cell(
                variant=v,
                row=r,
                answer=answers_of[v.pk],
                diff=answers.word_diff(baseline, answers_of[v.pk]) if baseline else [],
                scores=by_stream.get(r.stream_id, []) if r else [],
            )
            for v, r in cells_rows
        ]
        page.rows.append(ItemRow(item=item, baseline=baseline, cells=cells))
    return page


# ---- one run against another ----------------------------------------------------------------


@dataclasses.dataclass
class Change:
    """One item × variant in two runs; `size` is what it is sorted by in its list."""

    position: int
    variant: str
    before: Row
    after: Row
    size: float
    before_value: object
    after_value: object


def comparable_runs(run, limit=50):
    """The other runs over `run`'s dataset (any version of it), newest first."""
    dataset = run.experiment.dataset_version.dataset_id
    return (
        Run.objects.filter(experiment__dataset_version__dataset_id=dataset)
        .exclude(pk=run.pk)
        .select_related("experiment")
        .order_by("-created_at")[:limit]
    )


def _pairs(earlier, later):
    """{(item position, variant name): (earlier Row, later Row)} of the items both runs did,
    matched by item position and variant name (two experiments over versions of one dataset
    compare too)."""
    names = {}
    for run in (earlier, later):
        for variant in run.experiment.variants.all():
            names[variant.pk] = variant.name
    # (an item whose stream is gone, deleted or never made, has nothing to compare)
    before = {(r.position, names[r.variant_id]): r for r in rows_of(earlier) if r.stream_id}
    return {
        key: (before[key], r)
        for r in rows_of(later)
        if r.stream_id and (key := (r.position, names[r.variant_id])) in before
    }


def _score_mean(by_stream, stream_id):
    values = [value for _, value, _ in by_stream.get(stream_id, ())]
    return sum(values) / len(values) if values else None


def compare(earlier, later, *, limit=ITEMS_PAGE):
    """What changed from run `earlier` to run `later`: {"slower", "costlier", "worse_scored",
    "changed"}: each a list of Changes, largest change first (at most `limit` each), and
    "pairs": how many items were compared."""
    pairs = _pairs(earlier, later)
    ids = [r.stream_id for pair in pairs.values() for r in pair if r.stream_id]
    by_stream = scores_by_stream(ids)
    texts = dict(
        (pk, answers.redacted(final or output))
        for pk, final, output in Stream.objects.filter(pk__in=ids).values_list(
            "pk", "final_text", "output_text"
        )
    )
    found = {"slower": [], "costlier": [], "worse_scored": [], "changed": []}
    for (position, variant), (a, b) in pairs.items():

        def change(size, before, after, a=a, b=b, position=position, variant=variant):
            return Change(position, variant, a, b, size, before, after)

        if a.duration_ms and b.duration_ms and b.duration_ms > a.duration_ms * (1 + SLOWER_SHARE):
            found["slower"].append(
                change(b.duration_ms / a.duration_ms - 1, a.duration_ms, b.duration_ms)
            )
        if a.cost_nanos is not None and b.cost_nanos is not None and a.currency == b.currency:
            if b.cost_nanos > a.cost_nanos * (1 + COSTLIER_SHARE):
                size = (b.cost_nanos - a.cost_nanos) / max(a.cost_nanos, 1)
                found["costlier"].append(change(size, a.cost_nanos, b.cost_nanos))
        before_score = _score_mean(by_stream, a.stream_id)
        after_score = _score_mean(by_stream, b.stream_id)
        if before_score is not None and after_score is not None and after_score < before_score:
            found["worse_scored"].append(
                change(before_score - after_score, before_score, after_score)
            )
        before_text, after_text = texts.get(a.stream_id, ""), texts.get(b.stream_id, "")
        if before_text != after_text:
            share = answers.changed_share(before_text, after_text)
            found["changed"].append(change(share, before_text, after_text))
    for key, changes in found.items():
        changes.sort(key=lambda c: (-c.size, c.position, c.variant))
        found[key] = changes[:limit]
    found["pairs"] = len(pairs)
    return found


# ---- exports --------------------------------------------------------------------------------

EXPORT_FIELDS = (
    "item",
    "variant",
    "model",
    "stream",
    "status",
    "ttft_ms",
    "tokens_per_s",
    "duration_ms",
    "findings",
    "cost",
    "currency",
    "scores",
    "answer",
    "expected_output",
)


def export_rows(run):
    """One dict per done item × variant (EXPORT_FIELDS), answers redacted, in item order."""
    variants = {v.pk: v for v in run.experiment.variants.all()}
    rows = rows_of(run)
    expected = dict(run.experiment.dataset_version.items.values_list("pk", "expected_output"))
    ids = [r.stream_id for r in rows if r.stream_id]
    by_stream = scores_by_stream(ids)
    texts = {}
    for start in range(0, len(ids), 2000):
        chunk = ids[start : start + 2000]
        for pk, final, output in Stream.objects.filter(pk__in=chunk).values_list(
            "pk", "final_text", "output_text"
        ):
            texts[pk] = answers.redacted(final or output)
    for r in rows:
        variant = variants[r.variant_id]
        yield {
            "item": r.position,
            "variant": variant.name,
            "model": variant.model,
            "stream": r.stream_id,
            "status": r.status or "",
            "ttft_ms": r.ttft_ms,
            "tokens_per_s": r.tokens_per_s,
            "duration_ms": r.duration_ms,
            "findings": r.findings,
            "cost": pricing.amount_text(r.cost_nanos),
            "currency": r.currency,
            "scores": {name: value for name, value, _ in by_stream.get(r.stream_id, ())},
            "answer": texts.get(r.stream_id, ""),
            "expected_output": answers.redacted(expected.get(r.item_id, "")),
        }
