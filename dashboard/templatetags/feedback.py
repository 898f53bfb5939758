"""The thumbs beside an answer: `{% thumbs stream_id %}` (the playground, the comparison) and
the feedback panel's own (dashboard/views/feedback.py)."""

from django import template

from streams.models import Score
from streams.store import scores

register = template.Library()


def thumbs_context(user, stream_id, *, panel=False):
    """What templates/dashboard/thumbs.html needs: the user's own thumbs on the stream (up,
    down or none) and everyone's counts."""
    kind = scores.thumbs()
    rows = list(
        Score.objects.filter(stream_id=stream_id, score_type=kind).values_list(
            "author_id", "key", "value"
        )
    )
    mine = next((v for a, k, v in rows if a == user.pk and k == ""), None)
    return {
        "stream_id": stream_id,
        "mine": None if mine is None else (scores.UP if kind.is_positive(mine) else scores.DOWN),
        "up": sum(1 for *_, v in rows if kind.is_positive(v)),
        "down": sum(1 for *_, v in rows if not kind.is_positive(v)),
        "panel": panel,
    }


@register.inclusion_tag("dashboard/thumbs.html", takes_context=True)
def thumbs(context, stream_id):
    request = context["request"]
    return {**thumbs_context(request.user, stream_id), "csrf_token": context.get("csrf_token")}
