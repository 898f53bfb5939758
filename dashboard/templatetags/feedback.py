"""The thumbs beside an answer: `{% thumbs stream_id %}` (the playground, the comparison) and
the feedback panel's own (dashboard/views/feedback.py)."""

from django import template

from dashboard.forms.feedback import CommentForm, ScoreForm
from streams.access import projects
from streams.models import Score, Stream
from streams.store import scores

register = template.Library()


def thumbs_context(
    user,
    stream_id,
    *,
    panel=False,
    note=None,
    error=None,
    score_form=None,
    comment_form=None,
    types=None,
):
    """What templates/dashboard/thumbs.html needs: the user's own thumbs on the stream (up,
    down or none) and everyone's counts; beside an answer (not `panel`) also the score types
    (`types`: `scores.types()`, read already) and the forms of its "Score…" (`note`: what was
    just saved; `error`: what was wrong)."""
    types = types if types is not None else scores.types()
    kind = next(t for t in types if t.name == scores.THUMBS)
    rows = list(
        Score.objects.filter(stream_id=stream_id, score_type=kind).values_list(
            "author_id", "key", "value"
        )
    )
    mine = next((v for a, k, v in rows if a == user.pk and k == ""), None)
    project = Stream.objects.filter(pk=stream_id).values_list("project_id", flat=True).first()
    return {
        "stream_id": stream_id,
        # a viewer sees the counts, and no buttons that would only answer 403
        "may_score": projects.may(user, projects.Action.SCORE, project),
        "mine": None if mine is None else (scores.UP if kind.is_positive(mine) else scores.DOWN),
        "up": sum(1 for *_, v in rows if kind.is_positive(v)),
        "down": sum(1 for *_, v in rows if not kind.is_positive(v)),
        "panel": panel,
        "note": note,
        "error": error,
        **(
            {}
            if panel
            else {
                "score_form": score_form or ScoreForm(types=types),
                "comment_form": comment_form or CommentForm(),
            }
        ),
    }


@register.inclusion_tag("dashboard/thumbs.html", takes_context=True)
def thumbs(context, stream_id):
    request = context["request"]
    # (a page of answers reads the score types once)
    types = context.render_context.setdefault("score_types", None) or scores.types()
    context.render_context["score_types"] = types
    return {
        **thumbs_context(request.user, stream_id, types=types),
        "csrf_token": context.get("csrf_token"),
    }


@register.filter
def score_type_description(kind):
    """A score type's description in the page's words (scores.description_shown)."""
    return scores.description_shown(kind)
