"""Forms of the streams pages: the capture upload, the list's query string, the event window."""

import datetime as dt
import re
from urllib.parse import urlencode

from django import forms
from django.contrib.auth import get_user_model
from django.utils.formats import number_format
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.forms.ranges import ALL_TIME, PRESET_CHOICES, PRESETS, InstantField
from streams.core import conf
from streams.ingest.import_jobs import MAX_FILES
from streams.models import MAX_TAG_CHARS, Event, Stream
from streams.store import search

MB = 1024 * 1024


def column_chars(model, name):
    """The column's max_length: a field that fills or filters it takes no longer a value."""
    return model._meta.get_field(name).max_length


MODEL_CHARS = column_chars(Stream, "requested_model")
USER_CHARS = column_chars(get_user_model(), get_user_model().USERNAME_FIELD)


def _mb(n):
    return number_format(n / MB, 1)


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (Django's documented recipe): a list of uploads."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        if isinstance(data, list | tuple) and not data:
            data = None  # nothing chosen: FileField's own "required" error
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(d, initial) for d in data]
        return [super().clean(data, initial)]


class CaptureUploadForm(forms.Form):
    """Captured streams to import: raw SSE bodies or HAR exports, several at once. Only what is
    cheap is checked here (sizes, count); reading them is an import job's
    (streams/ingest/import_jobs.py), whose page shows why a file could not be imported."""

    file = MultipleFileField(label=_("Files"))
    model = forms.CharField(
        max_length=MODEL_CHARS,
        required=False,
        label=_("Requested model"),
        help_text=_("The model the request asked for (e.g. auto), when the file does not say."),
    )

    def clean_file(self):
        uploads = self.cleaned_data["file"]
        if len(uploads) > MAX_FILES:
            raise forms.ValidationError(
                gettext("%(n)s files: at most %(max)s per upload")
                % {"n": len(uploads), "max": MAX_FILES},
                code="too_many",
            )
        limit = conf.get().upload_max_bytes
        total = sum(u.size for u in uploads)
        if total > limit:
            raise forms.ValidationError(
                gettext("File too large: %(size)s MB (limit %(limit)s MB)")
                % {"size": _mb(total), "limit": _mb(limit)},
                code="too_large",
            )
        return uploads

    def files_to_import(self):
        """(name, bytes) of each upload, read once."""
        return [(u.name, u.read()) for u in self.cleaned_data["file"]]


RANGES = PRESETS
DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]


META_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class StreamFilterForm(forms.Form):
    """The streams list's query string: filters, search, and the keyset cursor."""

    q = forms.CharField(required=False, max_length=200, strip=True, label=_("Search"))
    status = forms.ChoiceField(
        required=False, choices=[("", _("Any status")), *Stream.Status.choices], label=_("Status")
    )
    source = forms.ChoiceField(
        required=False, choices=[("", _("Any source")), *Stream.Source.choices], label=_("Source")
    )
    format = forms.ChoiceField(
        required=False, choices=[("", _("Any format")), *Stream.Format.choices], label=_("Format")
    )
    requested = forms.CharField(required=False, max_length=MODEL_CHARS, label=_("Requested model"))
    resolved = forms.CharField(
        required=False,
        max_length=column_chars(Stream, "resolved_model"),
        label=_("Resolved model"),
    )
    # Labels a proxied request's client sent (X-Streamscope-Tags / -Session), and whose
    # streams (the page offers it to staff; for anyone else it can only narrow their own).
    tag = forms.CharField(required=False, max_length=MAX_TAG_CHARS, label=_("Tag"))
    session = forms.CharField(
        required=False, max_length=column_chars(Stream, "session"), label=_("Session")
    )
    user = forms.CharField(required=False, max_length=USER_CHARS, label=_("User"))
    # `key=value` in the request's `metadata` (what an app sends along, e.g. `tenant=acme`)
    meta = forms.CharField(required=False, max_length=300, strip=True, label=_("Metadata"))
    findings = forms.ChoiceField(
        required=False,
        label=_("Findings"),
        choices=[
            ("", _("Any")),
            ("any", _("With findings (any severity)")),
            ("warnings", _("With warnings or errors")),
            ("errors", _("With error findings")),
            ("none", _("Without findings")),
        ],
    )
    score = forms.ChoiceField(
        required=False,
        label=_("Scores"),
        choices=[
            ("", _("Any")),
            ("positive", _("With a positive score")),
            ("negative", _("With a score that is not positive")),
            ("any", _("Scored")),
            ("none", _("Not scored")),
        ],
    )
    # the analytics pages' presets (forms/ranges.py); custom bounds are From / To below
    range = forms.ChoiceField(
        required=False, choices=[("", ALL_TIME), *PRESET_CHOICES], label=_("Time")
    )
    since = InstantField(required=False, input_formats=DATETIME_FORMATS, label=_("From"))
    until = InstantField(required=False, input_formats=DATETIME_FORMATS, label=_("To"))
    before = forms.IntegerField(required=False, min_value=1)
    after = forms.IntegerField(required=False, min_value=1)
    # a ranked search's page (streams/store/search.py)
    page = forms.IntegerField(required=False, min_value=1, max_value=search.MAX_PAGES)

    FILTERS = (
        "q",
        "status",
        "source",
        "format",
        "tag",
        "session",
        "user",
        "meta",
        "requested",
        "resolved",
        "findings",
        "score",
        "range",
    )

    def clean_meta(self):
        """`key=value` → (key, value); the key as OpenAI's metadata keys are (≤ 64 word
        characters, dots or dashes), so it is never more than a JSON object's member name."""
        text = self.cleaned_data.get("meta") or ""
        if not text:
            return None
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not META_KEY.fullmatch(key):
            raise forms.ValidationError(
                gettext(
                    "Metadata as key=value, the key of letters, digits, '_', '.' or '-' (≤ 64)."
                ),
                code="invalid_meta",
            )
        return key, value.strip()

    def filters(self):
        """The cleaned filters for `queries.stream_list.stream_page`, a preset range turned into
        `since`."""
        d = self.cleaned_data
        filters = {k: d.get(k) for k in (*self.FILTERS, "since", "until")}
        preset = RANGES.get(d.get("range") or "")
        if preset is not None:
            start = dt.datetime.now(dt.UTC) - preset
            filters["since"] = max(start, d["since"]) if d.get("since") else start
        return filters

    def is_filtered(self):
        d = self.cleaned_data
        return any(d.get(k) for k in (*self.FILTERS, "since", "until"))

    def query(self, **changes):
        """The filters as a query string (without the cursor), for pager and live links."""
        params = {k: self.data.get(k) for k in (*self.FILTERS, "since", "until")}
        params.update(changes)
        return urlencode({k: v for k, v in params.items() if v not in (None, "")})


class EventWindowForm(forms.Form):
    """Which window of a stream's event table to show (see `queries.stream_detail.event_window`)."""

    after = forms.IntegerField(required=False, min_value=-1)
    before = forms.IntegerField(required=False, min_value=0)
    at = forms.IntegerField(required=False, min_value=0)
    type = forms.CharField(required=False, max_length=column_chars(Event, "type"))
    tail = forms.BooleanField(required=False)

    def window(self):
        d = self.cleaned_data
        keys = ("after", "before", "at", "type", "tail")
        # (not `in (None, "", False)`: 0 == False, and event 0 is a fine place to jump to)
        return {k: d[k] for k in keys if d.get(k) is not None and d[k] != "" and d[k] is not False}


class CompareWithForm(forms.Form):
    """The stream to compare one with: its id (`#42` or `42`)."""

    other = forms.CharField(required=False, max_length=20, label=_("Stream"))

    def clean_other(self):
        value = self.cleaned_data["other"].strip().lstrip("#")
        if not value:
            return None
        if not value.isdigit():
            raise forms.ValidationError(_("A stream's number, such as #42."))
        return int(value)


class SessionPageForm(forms.Form):
    """A session page's cursor: the stream it continues after (creation order)."""

    after = forms.IntegerField(required=False, min_value=1)
