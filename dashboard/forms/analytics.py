"""Query-string forms of the analytics pages: validated input in, a `stats.sql.Scope` out."""

import datetime as dt

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard import timezone
from dashboard.forms.ranges import ALL_TIME, PRESET_CHOICES, PRESETS, InstantField
from streams.models import MAX_TAG_CHARS, ScoreType, Stream
from streams.stats.sql import Scope

RANGES = PRESETS
RANGE_CHOICES = [
    *PRESET_CHOICES,
    ("all", ALL_TIME),
    # (the bounds are read in the page's time zone: dashboard/timezone.py)
    ("custom", _("Custom")),
]
ANY = [("", _("Any"))]


class RangeForm(forms.Form):
    """A time range: a preset relative to now, or custom bounds, in the time zone `tz` (the
    page's, dashboard/timezone.py: custom bounds are its wall-clock times, as Django's
    DateTimeField reads them in the active zone); the scope's days and buckets are that
    zone's too (`Scope.tz`)."""

    default_range = "7d"

    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False, label=_("Range"))
    start = InstantField(
        required=False,
        label=_("From"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    end = InstantField(
        required=False,
        label=_("To"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )

    def __init__(self, data=None, *args, tz=None, **kwargs):
        self.tz = tz or timezone.current_name()
        # an untouched page (no query string) is the default range, not an invalid form; a
        # query string without a range shows (and uses) the default range too
        if data and not data.get("range"):
            data = data.copy()
            data["range"] = self.default_range
        super().__init__(data if data else None, *args, **kwargs)
        self.fields["range"].initial = self.default_range
        for name in ("start", "end"):
            self.fields[name].help_text = self.tz

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("range"):
            cleaned["range"] = self.default_range
        start, end = cleaned.get("start"), cleaned.get("end")
        if cleaned["range"] == "custom" and not {"start", "end"} & self.errors.keys():
            if start is None:
                self.add_error("start", gettext("A custom range needs a start."))
            elif end is not None and end <= start:
                self.add_error("end", gettext("The end must come after the start."))
        return cleaned

    def window(self, now):
        """(start, end) of the range, None for an open bound."""
        data = self.cleaned_data if self.is_bound else {"range": self.default_range}
        choice = data.get("range") or self.default_range
        if choice == "custom":
            return _utc(data.get("start")), _utc(data.get("end")) or now
        if choice == "all":
            return None, now
        return now - RANGES[choice], now

    def filters(self):
        return {}

    def scope(self, user, project, now):
        """The scope of `user` working in `project` (the page's, `request.project`)."""
        start, end = self.window(now)
        return Scope.for_user(user, project, start=start, end=end, tz=self.tz, **self.filters())

    @property
    def range_label(self):
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        choice = data.get("range") or self.default_range
        return dict(RANGE_CHOICES)[choice]


def _utc(value):
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


class LabelsForm(RangeForm):
    """A range, plus what a proxied request's client labelled it with, whose it is (`user`
    narrows the project's streams to one member's, see Scope) and the API it spoke."""

    tag = forms.CharField(required=False, max_length=MAX_TAG_CHARS, label=_("Tag"))
    session = forms.CharField(required=False, max_length=200, label=_("Session"))
    user = forms.CharField(required=False, max_length=150, label=_("User"))
    format = forms.ChoiceField(
        choices=ANY + Stream.Format.choices, required=False, label=_("Format")
    )

    def filters(self):
        data = self.cleaned_data if self.is_bound else {}
        return {
            "format": data.get("format", ""),
            "tag": data.get("tag", ""),
            "session": data.get("session", ""),
            "username": data.get("user", ""),
        }


class ScoreTypeChoice(forms.ModelChoiceField):
    """A score type by name: the first of its name (staff looking at every project may see two
    projects' types of one name; the view narrows the choice to a project's otherwise)."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        found = self.queryset.filter(name=value).order_by("pk").first()
        if found is None:
            raise forms.ValidationError(
                self.error_messages["invalid_choice"],
                code="invalid_choice",
                params={"value": value},
            )
        return found


class LatencyForm(LabelsForm):
    model = forms.CharField(required=False, max_length=100, label=_("Resolved model"))
    requested = forms.CharField(required=False, max_length=100, label=_("Requested model"))
    status = forms.ChoiceField(
        choices=ANY + list(Stream.Status.choices), required=False, label=_("Status")
    )
    source = forms.ChoiceField(
        choices=ANY + Stream.Source.choices, required=False, label=_("Source")
    )
    compare = forms.ChoiceField(
        required=False,
        label=_("Compare"),
        choices=[
            ("", _("Nothing")),
            ("models", _("Two models")),
            ("previous", _("This range with the one before")),
        ],
    )
    a = forms.CharField(required=False, max_length=100, label=_("Model A"))
    b = forms.CharField(required=False, max_length=100, label=_("Model B"))
    # the scores section's type, by name (empty: thumbs; stats/scores.py)
    score = ScoreTypeChoice(
        queryset=ScoreType.objects.order_by("name"),
        to_field_name="name",
        required=False,
        label=_("Score type"),
        error_messages={"invalid_choice": _("There is no score type named “%(value)s”.")},
    )

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("compare") == "models" and not (cleaned.get("a") and cleaned.get("b")):
            self.add_error("b", gettext("Choose two models to compare."))
        if cleaned.get("compare") == "previous" and cleaned.get("range") == "all":
            self.add_error("compare", gettext("All time has no range before it."))
        return cleaned

    def filters(self):
        data = self.cleaned_data if self.is_bound else {}
        return {
            **super().filters(),
            "resolved_model": data.get("model", ""),
            "requested_model": data.get("requested", ""),
            "status": data.get("status", ""),
            "source": data.get("source", ""),
        }

    def score_type(self):
        """The chosen ScoreType, or None for the default."""
        data = self.cleaned_data if self.is_bound else {}
        return data.get("score")

    def comparison(self, user, project, now):
        """(label A, scope A, label B, scope B), or None."""
        data = self.cleaned_data if self.is_bound else {}
        how = data.get("compare")
        if not how:
            return None
        scope = self.scope(user, project, now)
        if how == "models":
            a = Scope(**{**scope.__dict__, "resolved_model": data["a"]})
            b = Scope(**{**scope.__dict__, "resolved_model": data["b"]})
            return data["a"], a, data["b"], b
        start, end = scope.start, scope.end
        span = end - start
        before = Scope(**{**scope.__dict__, "start": start - span, "end": start})
        return gettext("Range before"), before, gettext("This range"), scope


class RoutingForm(LabelsForm):
    source = forms.ChoiceField(
        choices=ANY + Stream.Source.choices, required=False, label=_("Source")
    )

    def filters(self):
        data = self.cleaned_data if self.is_bound else {}
        return {**super().filters(), "source": data.get("source", "")}


class AdminAnalyticsForm(RangeForm):
    default_range = "30d"
