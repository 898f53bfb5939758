"""The "Add to dataset" control of a stream's page and the comparison's."""

from django import template
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from dashboard import disguise
from dashboard.forms.experiments import AddStreamForm
from streams.models import Dataset

register = template.Library()


@register.inclusion_tag("dashboard/dataset_add_button.html")
def add_to_dataset(stream):
    """A form adding `stream` to a dataset of its project (or a new one)."""
    choices = Dataset.objects.filter(project_id=stream.project_id).only("pk", "name")
    return {"stream": stream, "form": AddStreamForm(datasets=choices)}


_DIFF_TAGS = {"del": "del", "ins": "ins", "same": "span"}


@register.filter
def diff_html(ops):
    """A word diff ([(op, text)], streams/core/checks.word_ops) as <del>/<ins>/<span>, each
    text escaped with its hidden characters drawn (as output.html marks a rewrite's diff);
    one call per answer: a run page shows a few hundred."""
    return (
        format_html_join(
            "", "<{0}>{1}</{0}>", ((_DIFF_TAGS[op], disguise.reveal_html(text)) for op, text in ops)
        )
        if ops
        else mark_safe("")
    )
