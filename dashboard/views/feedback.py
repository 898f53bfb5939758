"""Scores and comments from the pages: the timeline's feedback panel, and the thumbs beside an
answer in the playground and on the comparison (streams/store/scores.py writes them)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from dashboard.feedback import panel
from dashboard.forms.feedback import CommentForm, ScoreForm
from dashboard.templatetags.feedback import thumbs_context
from dashboard.views.streams import get_stream_for_user
from streams.access.projects import Action
from streams.models import Score
from streams.store import scores


def _saved(score):
    """What a saved score is confirmed with: a thumb in the page's words ("Saved: a thumbs
    up.", Dutch "Opgeslagen: duim omhoog."), any other type by its name and value as given."""
    if score.score_type.name == scores.THUMBS:
        up = score.score_type.is_positive(score.value)
        return _("Saved: a thumbs up.") if up else _("Saved: a thumbs down.")
    return _("Saved: %(name)s %(value)s.") % {"name": score.score_type.name, "value": score.shown}


def _answer(request, stream, *, compact=False, status=200, note=None, **forms):
    """htmx: the piece that was posted from, again (the thumbs, or the whole panel); without
    JavaScript, back to the timeline's panel (or, after a mistake, the panel on its own page
    with what was wrong)."""
    htmx = request.headers.get("HX-Request") == "true"
    if compact and htmx:
        context = thumbs_context(request.user, stream.pk, note=note, **forms)
        return render(request, "dashboard/thumbs.html", context, status=status)
    if status == 200 and not htmx:
        return HttpResponseRedirect(reverse("stream_detail", args=[stream.pk]) + "#feedback")
    context = panel(request.user, stream, **forms)
    template = "dashboard/feedback.html" if htmx else "dashboard/feedback_page.html"
    return render(request, template, {**context, "nav": "streams"}, status=status)


def _compact(request):
    """Posted from the thumbs beside an answer (the playground, the comparison): answered with
    them alone."""
    return request.POST.get("compact") in ("1", "True")


def _errors(form):
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


@login_required
@require_POST
def stream_score(request, stream_id):
    stream = get_stream_for_user(request, stream_id, Action.SCORE)
    form = ScoreForm(request.POST, types=scores.types(stream.project_id))
    compact = _compact(request)
    if not form.is_valid():
        return _answer(
            request, stream, compact=compact, status=400, score_form=form, error=_errors(form)
        )
    thumb = bool(request.POST.get("toggle")) and form.cleaned_data["name"] == scores.THUMBS
    try:
        if thumb:
            score = scores.press_thumb(
                stream.pk, author=request.user, label=form.cleaned_data["value"], source="person"
            )
        else:
            score = scores.give(stream.pk, author=request.user, source="person", **form.give())
    except scores.Invalid as exc:
        return _answer(
            request, stream, compact=compact, status=400, score_form=form, error=exc.message
        )
    if thumb:  # (pressed or taken back: the thumb says which; a note would unfold "Score…")
        return _answer(request, stream, compact=compact)
    return _answer(request, stream, compact=compact, note=_saved(score))


@login_required
@require_POST
def stream_comment(request, stream_id):
    stream = get_stream_for_user(request, stream_id, Action.COMMENT)
    form = CommentForm(request.POST)
    compact = _compact(request)
    if not form.is_valid():
        return _answer(
            request, stream, compact=compact, status=400, comment_form=form, error=_errors(form)
        )
    scores.comment(stream.pk, author=request.user, text=form.cleaned_data["text"], source="person")
    return _answer(request, stream, compact=compact, note=_("Comment added."))


@login_required
@require_POST
def stream_score_withdraw(request, stream_id, score_id):
    """Take back one's own score (someone else's, or one on a stream one may not see: 404)."""
    stream = get_stream_for_user(request, stream_id)
    score = Score.objects.filter(pk=score_id, stream=stream, author=request.user).first()
    if score is None:
        raise Http404("No such score")
    scores.withdraw(score)
    return _answer(request, stream)
