"""The "Share…" panel of a timeline and a session page (templates/dashboard/share_button.html):
its form and how many of the viewer's links to the target still open. A tag, so the pages' own
views need not know about share links."""

from django import template

from dashboard.forms.shares import ShareLinkForm
from streams.access import shares

register = template.Library()


@register.simple_tag(takes_context=True)
def share_panel(context, stream=None, session=""):
    user = context["request"].user
    target = {"stream": stream} if stream else {"session": session}
    return {
        "form": ShareLinkForm(initial=target, auto_id="share-%s"),
        "active": shares.active_count(user, **target) if user.is_authenticated else 0,
    }
