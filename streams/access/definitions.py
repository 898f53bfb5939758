"""What a project's admins define for it: its score types and its prices (docs/teams.md,
"Score types and prices"). The instance's own (no project: staff's, in the Django admin) are
offered in every project and read here, never changed.

Everyone in a project reads both lists (`Action.READ`); adding, changing and deleting needs
`MANAGE_SCORE_TYPES` / `MANAGE_PRICES` (admins). A thing of another project is not found
(never forbidden: ids do not leak). A row is checked by its model (`full_clean`: its fields,
its constraints, `ScoreType.clean`) before it is written, whoever calls, and a refusal names
the field (`Invalid`, a 400). The audit log records every change by construction (both models
are watched: streams/store/audit.py).
"""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils.translation import gettext_lazy as _

from streams.access.members import NotFound, Refused, require
from streams.access.projects import Action
from streams.models import Price, Score, ScoreType
from streams.store import scores

# what a type in use keeps: its scores were given under them (a range moved would turn their
# values' meaning, and the rollups' positives, around)
FIXED_IN_USE = ("kind", "minimum", "maximum", "categories")


TAKEN_PRICE = _("The project has a price for that pattern from that moment.")


class Invalid(Refused):
    """Bad input: `field` names what is wrong (NON_FIELD_ERRORS: the whole)."""

    status = 400

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


def _checked(instance, exclude=()):
    try:
        instance.full_clean(exclude=exclude)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise Invalid(field, messages[0]) from None


# ---- score types --------------------------------------------------------------------------------


def score_types(project):
    """The types offered in `project`, the instance's and its own, by name; each with `own`
    (this project's: its admins may change it) and `in_use` (scores were given under it)."""
    used = Score.objects.filter(score_type=OuterRef("pk"))
    found = list(scores.offered(project).annotate(in_use=Exists(used)).order_by("name"))
    for each in found:
        each.own = each.project_id == project.pk
    return found


def score_type_of(project, pk):
    """`project`'s own type `pk` (the instance's are not its admins' to change)."""
    found = ScoreType.objects.filter(project=project, pk=pk).first()
    if found is None:
        raise NotFound(_("No such score type."))
    return found


def save_score_type(actor, project, score_type):
    """Writes `score_type` (new, or one of `project`'s own) after its checks: a name the
    instance's types do not have, and, for a type in use, the kind, range and categories it
    had."""
    require(actor, Action.MANAGE_SCORE_TYPES, project)
    if score_type.project_id != project.pk:
        raise NotFound(_("No such score type."))
    if scores.offered(None).filter(name=score_type.name).exists():
        raise Invalid("name", _("The instance has a score type of that name."))
    same = ScoreType.objects.filter(project=project, name=score_type.name)
    if same.exclude(pk=score_type.pk).exists():
        raise Invalid("name", _("The project has a score type of that name."))
    _checked(score_type)
    if score_type.pk is not None:
        was = score_type_of(project, score_type.pk)
        changed = [f for f in FIXED_IN_USE if getattr(was, f) != getattr(score_type, f)]
        if changed and Score.objects.filter(score_type=was).exists():
            raise Refused(
                _(
                    "Scores were given under this type: its kind, range and categories stay. "
                    "Make a new type instead."
                )
            )
    try:
        with transaction.atomic():
            score_type.save()
    except IntegrityError:  # (the same name, made meanwhile)
        raise Invalid("name", _("The project has a score type of that name.")) from None
    return score_type


def delete_score_type(actor, project, pk):
    """Deletes `project`'s type `pk`, unless scores were given under it (they need it); one
    that is not the project's (gone already: a second click) is nothing to delete: None."""
    require(actor, Action.MANAGE_SCORE_TYPES, project)
    found = ScoreType.objects.filter(project=project, pk=pk).first()
    if found is None:
        return None
    if Score.objects.filter(score_type=found).exists():
        raise Refused(_("Scores were given under this type: it stays."))
    found.delete()
    return found


# ---- prices ---------------------------------------------------------------------------------


def prices(project):
    """The prices that may price `project`'s streams: its own, then the instance's
    (streams/core/pricing.py `pick`: the project's first), each with `own`."""
    found = list(
        Price.objects.filter(Q(project__isnull=True) | Q(project=project)).order_by(
            "project", "model_pattern", "-effective_from"
        )
    )
    found.sort(key=lambda p: p.project_id is None)  # (own first, whatever the database's NULLs)
    for each in found:
        each.own = each.project_id == project.pk
    return found


def price_of(project, pk):
    found = Price.objects.filter(project=project, pk=pk).first()
    if found is None:
        raise NotFound(_("No such price."))
    return found


def save_price(actor, project, price):
    """Writes `price` (new, or one of `project`'s own) after its checks. It prices the
    project's streams that finish from then on (streams/store/prices.py; `manage.py reprice`
    for those stored already)."""
    require(actor, Action.MANAGE_PRICES, project)
    if price.project_id != project.pk:
        raise NotFound(_("No such price."))
    if price.pk is not None:
        price_of(project, price.pk)
    price.model_pattern = (price.model_pattern or "").strip()
    same = Price.objects.filter(
        project=project, model_pattern=price.model_pattern, effective_from=price.effective_from
    )
    if same.exclude(pk=price.pk).exists():
        raise Invalid("effective_from", TAKEN_PRICE)
    _checked(price)
    try:
        with transaction.atomic():
            price.save()
    except IntegrityError:
        raise Invalid("effective_from", TAKEN_PRICE) from None
    return price


def delete_price(actor, project, pk):
    """Deletes `project`'s price `pk`; None for one that is not the project's (gone already)."""
    require(actor, Action.MANAGE_PRICES, project)
    found = Price.objects.filter(project=project, pk=pk).first()
    if found is not None:
        found.delete()
    return found
