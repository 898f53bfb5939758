"""Scores and comments on streams: the one way they are written (docs/scores.md).

A score is a value under a named `ScoreType` (thumbs: 1 up, 0 down; a number within the
type's range; or one of its categories, each with a value). A person gives at most one score
of each type to a stream (giving it again replaces it); an application, with its token, may
give one per `key` of its own (an end user, an evaluator's run). Comments are free text.

The rollups (`ScoreRollup`, streams/store/aggregates.py) follow every write: `give` and
`withdraw` apply the score's own difference under the stream's row lock, so a stream that
finishes at the same moment counts each score once (the recorder's `tracking` reads the
scores that are committed when it finishes; a score given while it runs waits for that row
lock, then sees it finished). Deleting a score any other way (the admin) passes the
`post_delete` receiver below; deleting the stream takes its scores with it, and retention
leaves their rollups as they are.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from django.db import models, transaction
from django.utils.translation import gettext, gettext_noop

from streams.core.storable import storable
from streams.models import MAX_COMMENT_CHARS, MAX_SCORE_KEY_CHARS, Comment, Score, ScoreType, Stream
from streams.store import aggregates

THUMBS = "thumbs"
UP, DOWN = "up", "down"
# the built-in thumbs type's description: ours, so a page says it in its language (a type
# someone made keeps theirs as written); stored in English (migration 0014 wrote it too)
THUMBS_DESCRIPTION = gettext_noop("Thumbs up or down: was the answer good?")


class Invalid(ValueError):
    """A score or comment that can't be stored: `field` and a message for a 400."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field
        self.message = message


def types():
    """Every score type, by name; `thumbs` is always one (made again if it was deleted)."""
    found = list(ScoreType.objects.order_by("name"))
    if not any(t.name == THUMBS for t in found):
        thumbs()
        found = list(ScoreType.objects.order_by("name"))
    return found


def thumbs() -> ScoreType:
    found, _ = ScoreType.objects.get_or_create(
        name=THUMBS,
        defaults={
            "kind": ScoreType.Kind.THUMBS,
            "minimum": 0,
            "maximum": 1,
            "description": THUMBS_DESCRIPTION,
        },
    )
    return found


def description_shown(kind: ScoreType) -> str:
    """A score type's description as a page shows it: the built-in thumbs type's in the page's
    language, any other as its author wrote it."""
    if kind.name == THUMBS and kind.description == THUMBS_DESCRIPTION:
        return gettext(THUMBS_DESCRIPTION)
    return kind.description


def score_type(name) -> ScoreType:
    if not isinstance(name, str) or not name:
        raise Invalid("name", "Name a score type (e.g. thumbs).")
    found = thumbs() if name == THUMBS else ScoreType.objects.filter(name=name).first()
    if found is None:
        known = ", ".join(t.name for t in types()[:20])
        raise Invalid("name", f"No score type {name[:50]!r}; one of: {known}.")
    return found


def value_of(kind: ScoreType, value=None, label=None) -> tuple[float, str]:
    """(value, label) of a score of type `kind`, from a value or a label; Invalid otherwise."""
    if kind.kind == ScoreType.Kind.THUMBS:
        if label in (UP, DOWN) and value is None:
            return (1.0 if label == UP else 0.0), label
        if isinstance(value, bool) or value in (0, 1):
            return (1.0 if value else 0.0), (UP if value else DOWN)
        raise Invalid("value", 'Thumbs: value 1 or 0 (or label "up" or "down").')
    if kind.kind == ScoreType.Kind.CATEGORICAL:
        categories = [c for c in kind.categories if isinstance(c, dict)]
        for c in categories:
            if label is not None and c.get("label") == label:
                return float(c["value"]), c["label"]
            if label is None and value is not None and _number(value) == c.get("value"):
                return float(c["value"]), c["label"]
        names = ", ".join(str(c.get("label")) for c in categories)
        raise Invalid("label", f"{kind.name}: one of the categories {names}.")
    number = _number(value)
    if number is None or not kind.minimum <= number <= kind.maximum:
        raise Invalid("value", f"{kind.name}: a number from {kind.minimum:g} to {kind.maximum:g}.")
    return number, ""


def _number(value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value, field, limit, required=False):
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise Invalid(field, f"{field}: a string.")
    # storable before anything compares it: a key is looked up as well as stored, and
    # PostgreSQL refuses a NUL in a query's parameters as in a row
    value = storable(value.strip())
    if required and not value:
        raise Invalid(field, f"{field}: required.")
    if len(value) > limit:
        raise Invalid(field, f"{field}: at most {limit:,} characters.")
    return value


def give(
    stream_id,
    *,
    author,
    name=None,
    of_type=None,
    value=None,
    label=None,
    comment="",
    source,
    key="",
) -> Score:
    """Score stream `stream_id` (which the caller has checked `author` may see); replaces the
    author's earlier score of that type (and key). The type: by `name`, or `of_type` itself (an
    evaluator's own, which is its project's)."""
    kind = of_type if of_type is not None else score_type(name)
    number, label = value_of(kind, value, label)
    comment = _text(comment, "comment", MAX_COMMENT_CHARS)
    key = _text(key, "key", MAX_SCORE_KEY_CHARS)
    with transaction.atomic():
        _lock(stream_id)
        score = Score.objects.filter(
            stream_id=stream_id, score_type=kind, author=author, key=key
        ).first()
        before = [] if score is None else [_counted(score, kind)]
        if score is None:
            score = Score(stream_id=stream_id, score_type=kind, author=author, key=key)
        score.value, score.label, score.comment, score.source = number, label, comment, source
        score.save()
        aggregates.scores_changed(stream_id, before, [_counted(score, kind)])
    score.replaced = bool(before)  # (the API answers 200 for a replaced score, 201 for a new one)
    return score


def press_thumb(stream_id, *, author, label, source):
    """A thumb pressed (`label` up or down): given, or taken back when it is the one the author
    gave already (None then)."""
    with transaction.atomic():
        mine = Score.objects.filter(
            stream_id=stream_id, score_type__name=THUMBS, author=author, key=""
        ).first()
        if mine is not None and mine.label == label:
            withdraw(mine)
            return None
        return give(stream_id, author=author, name=THUMBS, label=label, source=source)


def withdraw(score: Score) -> None:
    """Take a score back (its author, from the timeline)."""
    with transaction.atomic():
        _lock(score.stream_id)
        score.delete()  # (the receiver below subtracts it)


def comment(stream_id, *, author, text, source) -> Comment:
    text = _text(text, "text", MAX_COMMENT_CHARS, required=True)
    return Comment.objects.create(stream_id=stream_id, author=author, text=text, source=source)


def _lock(stream_id):
    """The stream row, locked until the transaction ends (PostgreSQL; SQLite writes one at a
    time anyway): the recorder's final write waits, or is waited for."""
    list(Stream.objects.select_for_update().filter(pk=stream_id).values_list("pk"))


def _counted(score, kind):
    return (kind.pk, score.value, kind.is_positive(score.value))


def _deleted(sender, instance, origin=None, **kwargs):
    """post_delete of a Score: subtract it, unless its stream is being deleted with it (the
    stream's own pre_delete subtracted it whole, or retention keeps it)."""
    if isinstance(origin, Stream) or (
        isinstance(origin, models.QuerySet) and origin.model is Stream
    ):
        return
    kind = ScoreType.objects.get(pk=instance.score_type_id)
    aggregates.scores_changed(instance.stream_id, [_counted(instance, kind)], [])


models.signals.post_delete.connect(_deleted, sender=Score, dispatch_uid="streams.store.scores")


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class Summary:
    """A stream's scores in a list's cell: how many, how many positive, thumbs up and down."""

    n: int = 0
    positive: int = 0
    up: int = 0
    down: int = 0
    comments: int = 0


def summaries(stream_ids) -> dict[int, Summary]:
    """{stream id: Summary} for a page of streams (two queries)."""
    ids = list(stream_ids)
    if not ids:
        return {}
    counts = {}
    rows = Score.objects.filter(stream_id__in=ids).values_list(
        "stream_id", "value", "score_type__kind", "score_type__minimum", "score_type__maximum"
    )
    for sid, value, kind, lo, hi in rows:
        n, positive, up, down, c = counts.get(sid, (0, 0, 0, 0, 0))
        good = ScoreType.positive(value, lo, hi)
        thumbs = kind == ScoreType.Kind.THUMBS
        counts[sid] = (
            n + 1,
            positive + good,
            up + (thumbs and good),
            down + (thumbs and not good),
            c,
        )
    # (counted here, not by the database: the list's pages never ask it to COUNT)
    for sid, c in Counter(
        Comment.objects.filter(stream_id__in=ids).values_list("stream_id", flat=True)
    ).items():
        counts[sid] = (*counts.get(sid, (0, 0, 0, 0, 0))[:4], c)
    return {sid: Summary(*values) for sid, values in counts.items()}


def of_stream(stream_id):
    """(scores, comments) of one stream, oldest first, with their types and authors."""
    scores = list(
        Score.objects.filter(stream_id=stream_id)
        .select_related("score_type", "author")
        .order_by("created_at", "id")
    )
    comments = list(Comment.objects.filter(stream_id=stream_id).select_related("author"))
    return scores, comments


# The list's filter: streams with a positive / a not positive score, with any, or with none.
FILTERS = ("positive", "negative", "any", "none")


def filtered(qs, which):
    """`qs` narrowed by one of FILTERS (an EXISTS per stream, on the score's stream index)."""
    if which not in FILTERS:
        return qs
    scores = Score.objects.filter(stream=models.OuterRef("pk"))
    if which in ("positive", "negative"):
        above = ScoreType.positive_q()
        scores = scores.filter(above if which == "positive" else ~above)
    exists = models.Exists(scores)
    return qs.filter(~exists if which == "none" else exists)
