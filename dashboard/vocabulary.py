"""The words the pages and their scripts share with the server, named once and read from their
Python homes (never retyped here):

- statuses: a stream's statuses with their labels (in the page's language: the vocabulary is
  kept once per language), which of them are active (`pending`,
  `streaming`: `Stream.ACTIVE_STATUSES`) and which finished, and the one a new stream starts in;
- sources: a stream's sources with their labels (`Stream.Source`, in the page's language), as
  the templates' `source_label` filter says them;
- limits: the longest value each filter of the streams list takes (its form's `max_length`,
  which the form takes from the column it filters) and the tag rules (`MAX_TAGS` tags of at
  most `MAX_TAG_CHARS` characters);
- output: the event types that carry model output (`checks.OUTPUT_DELTAS`), the terminal event
  types with the status each ends a stream in (`checks.TERMINAL_STATUS`), how an output item
  type renders (`checks.ITEM_KINDS`) and the tool statuses shown as failed
  (`public.FAILED_TOOL_STATUSES`);
- usage: the fields an answer's tokens and cost are shown from (`public.USAGE_COLUMNS`, whose
  tokens are `usage.FIELDS`, and `resolved_model`, the model that priced them), which
  static/js/stream_detail/main.js and static/js/playground.js take from a stream's frames;
- prices: how a simulator example price's ref begins (`pricing.EXAMPLE`), which the pages say
  is an example;
- dates: the forms a moment is written in and the months' abbreviations, in the page's
  language (dashboard/dates.py), for static/js/time.js.

Every page gets it: `context_processor` puts it in the template context as `vocabulary`, and
base.html renders it once as `{{ vocabulary|json_script:"streamscope-vocabulary" }}` (data, not
script: the CSP allows it), which static/js/vocabulary.js reads and exports.
"""

import functools

from django.forms import CharField
from django.utils import translation

from dashboard import dates
from dashboard.forms.streams import StreamFilterForm
from streams.core.checks import ITEM_KINDS, OUTPUT_DELTAS, TERMINAL_STATUS
from streams.core.pricing import EXAMPLE
from streams.models import MAX_TAG_CHARS, MAX_TAGS, Stream
from streams.shapes.public import FAILED_TOOL_STATUSES, USAGE_COLUMNS

ELEMENT_ID = "streamscope-vocabulary"


def statuses():
    active = [str(s) for s in Stream.ACTIVE_STATUSES]
    return {
        "all": [str(s) for s in Stream.Status.values],
        "labels": {str(value): str(label) for value, label in Stream.Status.choices},
        "active": active,
        "finished": [str(s) for s in Stream.Status.values if s not in active],
        "initial": str(Stream._meta.get_field("status").default),
    }


def sources():
    return {"labels": {str(value): str(label) for value, label in Stream.Source.choices}}


def limits():
    filters = {
        name: field.max_length
        for name, field in StreamFilterForm.base_fields.items()
        if isinstance(field, CharField) and field.max_length is not None
    }
    return {"filters": filters, "tags": {"max": MAX_TAGS, "chars": MAX_TAG_CHARS}}


def output():
    return {
        "deltas": sorted(OUTPUT_DELTAS),
        "terminal": dict(sorted(TERMINAL_STATUS.items())),
        "itemKinds": dict(ITEM_KINDS),
        "failedToolStatuses": sorted(FAILED_TOOL_STATUSES),
    }


def usage():
    return {"fields": [*USAGE_COLUMNS, "resolved_model"]}


def vocabulary():
    """The whole vocabulary, as the page serves it (JSON-ready: strings, numbers, lists), its
    labels in the active language."""
    return _vocabulary(translation.get_language())


@functools.cache
def _vocabulary(language):
    with translation.override(language):
        return {
            "statuses": statuses(),
            "sources": sources(),
            "limits": limits(),
            "output": output(),
            "usage": usage(),
            "prices": {"example": EXAMPLE},
            "dates": dates.vocabulary(),
        }


def context_processor(request):
    return {"vocabulary": vocabulary()}
