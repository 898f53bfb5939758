"""The forms of the evaluators' and online rules' pages: what someone types, turned into the
config that `streams.evaluate` checks (its errors come back on the field they name)."""

import json
from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from streams.core.pricing import NANO
from streams.evaluate import judge, kinds
from streams.models import MAX_EVALUATOR_NAME_CHARS, MAX_TAG_CHARS, Evaluator, Stream

Kind = Evaluator.Kind
TEXT = {"required": False, "strip": False}

# the config's fields by kind: the page shows a kind's only (static/js/evaluators.js)
FIELDS_OF = {
    Kind.EXACT: ("text", "case_sensitive"),
    Kind.CONTAINS: ("text", "case_sensitive"),
    Kind.REGEX: ("pattern", "case_sensitive"),
    Kind.JSON_VALID: (),
    Kind.JSON_SCHEMA: ("schema",),
    Kind.LENGTH: ("min", "max", "unit"),
    Kind.REFUSAL: ("phrases",),
    Kind.TTFT: ("max_ms",),
    Kind.DURATION: ("max_ms",),
    Kind.JUDGE: (
        "model",
        "prompt",
        "instructions",
        "minimum",
        "maximum",
        "categories",
        "metadata",
        "timeout_s",
        "max_output_tokens",
    ),
}
JSON_FIELDS = ("schema", "metadata")
LINE_FIELDS = ("phrases",)


class EvaluatorForm(forms.Form):
    name = forms.SlugField(
        label=_("Name"),
        max_length=MAX_EVALUATOR_NAME_CHARS,
        help_text=_("Letters, digits, - and _: its scores' type and key (name@v1)."),
    )
    kind = forms.ChoiceField(label=_("Kind"), choices=Kind.choices)
    text = forms.CharField(
        label=_("Text"),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Empty: the expected output given with the stream (a dataset's item)."),
        **TEXT,
    )
    case_sensitive = forms.BooleanField(label=_("Case sensitive"), required=False)
    pattern = forms.CharField(
        label=_("Regular expression"), max_length=kinds.MAX_PATTERN_CHARS, **TEXT
    )
    schema = forms.CharField(
        label=_("JSON Schema"), widget=forms.Textarea(attrs={"rows": 6}), **TEXT
    )
    min = forms.FloatField(label=_("At least"), required=False, min_value=0)
    max = forms.FloatField(label=_("At most"), required=False, min_value=0)
    unit = forms.ChoiceField(
        label=_("Counted in"),
        choices=(("chars", _("characters")), ("words", _("words"))),
        required=False,
    )
    phrases = forms.CharField(
        label=_("Refusal phrases"),
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("One a line, in the answer's first 300 characters; empty: the usual ones."),
        **TEXT,
    )
    max_ms = forms.FloatField(label=_("At most (ms)"), required=False, min_value=0)
    model = forms.CharField(label=_("Judge model"), max_length=100, **TEXT)
    prompt = forms.CharField(
        label=_("Prompt"),
        widget=forms.Textarea(attrs={"rows": 8}),
        initial=judge.DEFAULT_PROMPT,
        help_text=_(
            "{{input}}, {{output}} and {{expected_output}} are replaced by the stream's texts, "
            "with every secret taken out."
        ),  # fmt: skip
        **TEXT,
    )
    instructions = forms.CharField(
        label=_("Instructions"), widget=forms.Textarea(attrs={"rows": 2}), **TEXT
    )
    minimum = forms.FloatField(label=_("Lowest score"), required=False, initial=1)
    maximum = forms.FloatField(label=_("Highest score"), required=False, initial=5)
    categories = forms.CharField(
        label=_("Categories instead"),
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("One a line: label = value (e.g. right = 1). The judge answers a label."),
        **TEXT,
    )
    metadata = forms.CharField(
        label=_("Request metadata"),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_(
            'JSON sent with the judge\'s request, e.g. {"scenario": "judge"} for the simulator.'
        ),  # fmt: skip
        **TEXT,
    )
    timeout_s = forms.FloatField(
        label=_("Time limit (s)"),
        required=False,
        min_value=1,
        max_value=judge.MAX_TIMEOUT_S,
        initial=judge.DEFAULT_TIMEOUT_S,
    )
    max_output_tokens = forms.IntegerField(
        label=_("Most output tokens"),
        required=False,
        min_value=1,
        max_value=100_000,
        initial=judge.DEFAULT_MAX_OUTPUT_TOKENS,
    )

    def __init__(self, *args, evaluator=None, **kwargs):
        if evaluator is not None and "initial" not in kwargs:
            kwargs["initial"] = initial_of(evaluator)
        super().__init__(*args, **kwargs)
        if evaluator is not None:
            # a name is its scores' key: kept across versions
            self.fields["name"].disabled = True

    def config(self):
        """The config for the chosen kind (the domain checks it), or None with form errors."""
        d = self.cleaned_data
        config = {}
        for name in FIELDS_OF[Kind(d["kind"])]:
            value = d.get(name)
            if name in JSON_FIELDS and value:
                try:
                    value = json.loads(value)
                except ValueError:
                    self.add_error(name, _("Not JSON."))
                    return None
            elif name in LINE_FIELDS:
                value = [line for line in (value or "").splitlines() if line.strip()]
            config[name] = value
        return config

    def refused(self, exc):
        """The domain's refusal on its field (or the form's)."""
        field = exc.field if exc.field in self.fields else None
        self.add_error(field, exc.message)


def initial_of(evaluator):
    initial = {"name": evaluator.name, "kind": evaluator.kind}
    for name, value in evaluator.config.items():
        if name in JSON_FIELDS:
            value = json.dumps(value, indent=2) if value else ""
        elif name in LINE_FIELDS:
            value = "\n".join(value)
        elif name == "categories":
            value = "\n".join(f"{c['label']} = {c['value']:g}" for c in value)
        initial[name] = value
    return initial


class TryForm(forms.Form):
    stream = forms.IntegerField(label=_("Stream id"), min_value=1)
    expected = forms.CharField(
        label=pgettext_lazy("evaluators page", "Expected output"),
        required=False,
        strip=False,
        max_length=kinds.MAX_OUTPUT_CHARS,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


MAX_SPEND_CAP = Decimal(1_000_000)


class OnlineRuleForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    evaluators = forms.ModelMultipleChoiceField(
        label=pgettext_lazy("evaluators page", "Evaluators"),
        queryset=Evaluator.objects.none(),
        widget=forms.CheckboxSelectMultiple,
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)
    sample_rate = forms.FloatField(
        label=_("Sample rate"),
        min_value=0,
        max_value=1,
        initial=1,
        help_text=_("The share of matching streams judged, from 0 to 1."),
    )
    model = forms.CharField(label=_("Model"), max_length=100, required=False)
    tag = forms.CharField(label=_("Tag"), max_length=MAX_TAG_CHARS, required=False)
    source = forms.ChoiceField(
        label=_("Source"), choices=[("", _("any"))] + list(Stream.Source.choices), required=False
    )
    per_hour = forms.IntegerField(
        label=_("Judgements per hour"), min_value=1, max_value=1_000_000, initial=100
    )
    spend_cap = forms.DecimalField(
        label=_("Spend cap"),
        required=False,
        min_value=Decimal(0),
        max_value=MAX_SPEND_CAP,
        decimal_places=4,
        help_text=_("What its judges may cost in all, in the project's currency; empty: no cap."),
    )

    def __init__(self, *args, evaluators, rule=None, **kwargs):
        if rule is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": rule.name,
                "evaluators": list(rule.evaluators.all()),
                "enabled": rule.enabled,
                "sample_rate": rule.sample_rate,
                "model": rule.model,
                "tag": rule.tag,
                "source": rule.source,
                "per_hour": rule.per_hour,
                "spend_cap": None
                if rule.spend_cap_nanos is None
                else Decimal(rule.spend_cap_nanos) / NANO,
            }
        super().__init__(*args, **kwargs)
        self.fields["evaluators"].queryset = evaluators

    def rule_fields(self):
        d = dict(self.cleaned_data)
        cap = d.pop("spend_cap")
        d["spend_cap_nanos"] = None if cap is None else int(cap * NANO)
        return d
