"""What a row of a table of streams (templates/streams/stream_row.html) decides, decided here
once, so the row's cells read as markup: which retry links back, which labels show, whether
the resolved model differs, what the feedback cell says."""

from dataclasses import dataclass

from django import template

register = template.Library()


@dataclass(frozen=True)
class Row:
    retry_of: int | None  # a retry shown away from its first attempt links back to it
    session: str  # "" on the session's own page (it would name itself)
    labels: bool  # tags or a session to show under the source
    resolved: str  # the resolved model where it is not the requested one
    feedback: object  # scores.Summary, None when there is nothing to say
    thumbs: bool  # the feedback has thumbs up or down
    other_scores: bool  # and scores that are not thumbs


@register.simple_tag(takes_context=True)
def stream_row(context, stream):
    session = "" if context.get("in_session") else stream.session
    f = getattr(stream, "feedback", None)
    said = f if f is not None and (f.n or f.comments) else None
    return Row(
        retry_of=None if getattr(stream, "grouped", False) else stream.first_attempt_id,
        session=session,
        labels=bool(stream.tags or session),
        resolved=stream.resolved_model
        if stream.resolved_model and stream.resolved_model != stream.requested_model
        else "",
        feedback=said,
        thumbs=bool(said and (said.up or said.down)),
        other_scores=bool(said and said.n > said.up + said.down),
    )
