"""Scoring and commenting on a stream from the pages (streams/store/scores.py does the rest)."""

import math

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from streams.models import MAX_COMMENT_CHARS, ScoreType
from streams.store import scores


class ScoreForm(forms.Form):
    name = forms.ChoiceField(label=_("Score type"))
    # a number for a numeric type, a category's name for a categorical one, up or down for
    # thumbs
    value = forms.CharField(label=_("Value"), max_length=50, strip=True)
    comment = forms.CharField(
        label=_("Comment"),
        max_length=MAX_COMMENT_CHARS,
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    compact = forms.BooleanField(required=False, widget=forms.HiddenInput)  # thumbs alone

    def __init__(self, *args, types=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.types = {t.name: t for t in (types if types is not None else scores.types())}
        self.fields["name"].choices = [(name, name) for name in self.types]

    def clean(self):
        data = super().clean()
        kind, value = self.types.get(data.get("name")), data.get("value")
        if kind is None or value is None:
            return data
        if kind.kind == ScoreType.Kind.NUMERIC:
            try:
                number = float(value.replace(",", "."))
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                self.add_error("value", gettext("A number."))
            data["score"] = {"value": number}
        else:
            data["score"] = {"label": value}
        return data

    def give(self):
        """The keyword arguments of `scores.give` for this form's score."""
        d = self.cleaned_data
        return {"name": d["name"], "comment": d["comment"], **d["score"]}


class CommentForm(forms.Form):
    text = forms.CharField(
        label=_("Comment"),
        max_length=MAX_COMMENT_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
