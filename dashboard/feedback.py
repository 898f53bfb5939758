"""The feedback panel of a stream's timeline: its scores and comments, the forms to add more,
and the user's thumbs (templates/dashboard/feedback.html; dashboard/views/feedback.py takes
what it posts)."""

from dashboard.forms.feedback import CommentForm, ScoreForm
from dashboard.project import abilities
from dashboard.templatetags.feedback import thumbs_context
from streams.store import scores


def panel(user, stream, *, score_form=None, comment_form=None, error=None):
    """The feedback panel's context (templates/dashboard/feedback.html)."""
    given, comments = scores.of_stream(stream.pk)
    types = scores.types(stream.project_id)  # (the instance's and the stream's project's)
    return {
        "stream": stream,
        "scores": given,
        "comments": comments,
        "score_types": types,
        "score_form": score_form or ScoreForm(types=types),
        "comment_form": comment_form or CommentForm(),
        "feedback_error": error,
        "thumbs": thumbs_context(user, stream.pk, panel=True),
        # the controls of the stream's project, whichever project the page works in
        "can": abilities(user, stream.project_id),
    }
