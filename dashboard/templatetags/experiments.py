"""The "Add to dataset" control of a stream's page and the comparison's."""

from django import template

from dashboard.forms.experiments import AddStreamForm
from streams.models import Dataset

register = template.Library()


@register.inclusion_tag("dashboard/dataset_add_button.html")
def add_to_dataset(stream):
    """A form adding `stream` to a dataset of its project (or a new one)."""
    choices = Dataset.objects.filter(project_id=stream.project_id).only("pk", "name")
    return {"stream": stream, "form": AddStreamForm(datasets=choices)}
