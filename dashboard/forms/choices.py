"""The pages' words for values stored as data: a stream's source, as the filters offer it and
the tables show it (the values stay what the database holds; the labels are translated).

A stream's statuses have their labels on the model (`Stream.Status`, translated there)."""

from django.utils.translation import gettext_lazy as _

from streams.models import Stream

SOURCE_LABELS = {
    Stream.Source.LIVE: _("Live"),
    Stream.Source.IMPORT: _("Import"),
    Stream.Source.PROXY: _("Proxy"),
}
SOURCE_CHOICES = [(str(value), SOURCE_LABELS[value]) for value in Stream.Source]


def source_label(value):
    """A source as a page names it ("Live", "Import", "Proxy"); an unknown one as it is."""
    return SOURCE_LABELS.get(value, value)
