"""The forms of a project's score types and prices (dashboard/views/definitions.py): they
parse what was typed; the model's checks (`full_clean`, `ScoreType.clean`) say what is wrong,
each under its field."""

from django import forms
from django.core.validators import MinValueValidator
from django.utils.translation import gettext_lazy as _

from dashboard.forms.ranges import InstantField
from streams.models import Price, ScoreType

CATEGORIES_EXAMPLE = _("wrong = 0\npartly = 0.5\nright = 1")


class ScoreTypeForm(forms.ModelForm):
    """A score type; its categories typed one a line, `label = value`."""

    categories = forms.CharField(
        label=_("Categories"),
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": CATEGORIES_EXAMPLE}),
        help_text=_("A category's type only: one a line, its label = its value."),
    )

    class Meta:
        model = ScoreType
        fields = ("name", "kind", "minimum", "maximum", "categories", "description")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("minimum", "maximum"):
            self.fields[name].required = False
        if self.instance.categories and not self.is_bound:
            self.initial["categories"] = "\n".join(
                f"{c['label']} = {c['value']:g}" for c in self.instance.categories
            )

    def clean_categories(self):
        out = []
        for n, line in enumerate(self.cleaned_data["categories"].splitlines(), 1):
            if not line.strip():
                continue
            label, sep, value = line.rpartition("=")
            try:  # (a decimal comma too: "0,5")
                number = float(value.strip().replace(",", "."))
            except ValueError:
                number = None
            if not sep or not label.strip() or number is None:
                raise forms.ValidationError(
                    _("Line %(n)d: a label, “=”, then a number.") % {"n": n}
                )
            out.append({"label": label.strip(), "value": number})
        return out

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("kind") == ScoreType.Kind.NUMERIC:
            for name in ("minimum", "maximum"):
                if cleaned.get(name) is None:
                    self.add_error(name, _("A number's type needs its range."))
        else:  # (set by the model from the kind or the categories)
            for name, default in (("minimum", 0.0), ("maximum", 1.0)):
                if cleaned.get(name) is None:
                    cleaned[name] = default
        return cleaned


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = (
            "model_pattern",
            "effective_from",
            "currency",
            "input_per_million",
            "cached_input_per_million",
            "output_per_million",
            "reasoning_per_million",
            "note",
        )
        widgets = {"effective_from": forms.DateTimeInput(attrs={"type": "datetime-local"})}
        # a moment typed on a page: bounded to the years every zone holds, as every date filter
        field_classes = {"effective_from": InstantField}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (the model's check constraint says so too, but of the whole row: here, per field)
        for name, field in self.fields.items():
            if name.endswith("_per_million"):
                field.validators.append(MinValueValidator(0))
                field.widget.attrs["min"] = "0"
