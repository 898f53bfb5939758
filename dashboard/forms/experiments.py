"""Forms of the datasets and experiments pages (streams/experiments/ checks what they make)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from streams.core import safejson
from streams.experiments import experiments
from streams.experiments.datasets import MAX_TOOLS_CHARS
from streams.models import MAX_DATASET_NAME_CHARS, MAX_DESCRIPTION_CHARS

VARIANT_ROWS = 3
EFFORT_CHOICES = [("", _("the model's default"))] + [(e, e) for e in experiments.EFFORTS]


class DatasetForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=MAX_DATASET_NAME_CHARS)
    description = forms.CharField(
        label=_("Description"),
        max_length=MAX_DESCRIPTION_CHARS,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class UploadForm(forms.Form):
    file = forms.FileField(
        label=_("File"),
        help_text=_(
            "JSON Lines (one object a line: input, expected_output, instructions, tools, "
            "metadata) or CSV with a header row naming those columns."
        ),
    )


class AddStreamForm(forms.Form):
    """ "Add to dataset" on a stream's page: one of the project's datasets, or a new one."""

    dataset = forms.TypedChoiceField(label=_("Dataset"), coerce=int, required=False)
    new_name = forms.CharField(
        label=_("or a new dataset named"), max_length=MAX_DATASET_NAME_CHARS, required=False
    )
    with_answer = forms.BooleanField(
        label=_("Keep its answer as the expected output"), required=False, initial=True
    )

    def __init__(self, *args, datasets=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].choices = [("", "—")] + [(d.pk, d.name) for d in datasets]

    def clean(self):
        data = super().clean()
        if not data.get("dataset") and not (data.get("new_name") or "").strip():
            raise forms.ValidationError(_("Choose a dataset or name a new one."))
        return data


class ToolsField(forms.CharField):
    """A variant's tools: a JSON list (None when empty: the items' own tools)."""

    def to_python(self, value):
        text = super().to_python(value).strip()
        if not text:
            return None
        try:
            tools = safejson.loads(text)
        except ValueError:
            raise forms.ValidationError(_("Not JSON.")) from None
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise forms.ValidationError(_('A JSON list of tool objects: [{"type": …}, …].'))
        return tools


class ExperimentForm(forms.Form):
    """An experiment: its dataset, up to VARIANT_ROWS variants (a row without a model is left
    out), the concurrency and the evaluators."""

    name = forms.CharField(label=_("Name"), max_length=MAX_DATASET_NAME_CHARS)
    dataset = forms.TypedChoiceField(label=_("Dataset"), coerce=int)
    concurrency = forms.IntegerField(
        label=_("Streams at once"), min_value=1, max_value=experiments.MAX_CONCURRENCY, initial=5
    )
    evaluators = forms.TypedMultipleChoiceField(label=_("Evaluators"), coerce=int, required=False)

    def __init__(self, *args, datasets=(), evaluators=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].choices = [(d.pk, d.name) for d in datasets]
        self.fields["evaluators"].choices = [(e.pk, e.name) for e in evaluators]
        for n in range(1, VARIANT_ROWS + 1):
            required = n == 1
            self.fields[f"v{n}_model"] = forms.CharField(
                label=_("Model"), max_length=100, required=required
            )
            self.fields[f"v{n}_instructions"] = forms.CharField(
                label=_("Instructions"),
                required=False,
                widget=forms.Textarea(attrs={"rows": 2}),
                help_text=_("Empty: each item's own."),
            )
            self.fields[f"v{n}_temperature"] = forms.FloatField(
                label=_("Temperature"), min_value=0, max_value=2, required=False
            )
            self.fields[f"v{n}_effort"] = forms.ChoiceField(
                label=_("Reasoning effort"), choices=EFFORT_CHOICES, required=False
            )
            self.fields[f"v{n}_max_tokens"] = forms.IntegerField(
                label=_("Max output tokens"), min_value=1, max_value=1_000_000, required=False
            )
            self.fields[f"v{n}_tools"] = ToolsField(
                label=_("Tools"),
                required=False,
                max_length=MAX_TOOLS_CHARS,
                widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
                help_text=_(
                    "A JSON list of tools, as the Responses API takes them. Empty: each item's own."
                ),
            )

    def main_fields(self):
        return [self[name] for name in ("name", "dataset", "concurrency", "evaluators")]

    def variant_rows(self):
        """[(row number, [bound fields])] for the template."""
        names = ("model", "instructions", "temperature", "effort", "max_tokens", "tools")
        return [(n, [self[f"v{n}_{name}"] for name in names]) for n in range(1, VARIANT_ROWS + 1)]

    def variants(self):
        d = self.cleaned_data
        return [
            {
                "model": d[f"v{n}_model"],
                "instructions": d[f"v{n}_instructions"],
                "temperature": d[f"v{n}_temperature"],
                "reasoning_effort": d[f"v{n}_effort"],
                "max_output_tokens": d[f"v{n}_max_tokens"],
                "tools": d[f"v{n}_tools"],
            }
            for n in range(1, VARIANT_ROWS + 1)
            if d.get(f"v{n}_model")
        ]


class ItemsPageForm(forms.Form):
    """A run page's query: the page of items (those after item position `after`, or up to
    `before`) and the baseline to diff against."""

    after = forms.IntegerField(min_value=0, max_value=1_000_000, required=False)
    before = forms.IntegerField(min_value=1, max_value=1_000_000, required=False)
    baseline = forms.IntegerField(min_value=1, required=False)
