"""The alert pages' forms: a rule (parsed here, checked by `streams.alerts.rules.clean`, the one
validation the API shares) and a silence."""

from django import forms
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from streams.models import (
    ALERT_MAX_WINDOW_S,
    ALERT_MIN_WINDOW_S,
    Channel,
    Finding,
    ScoreType,
)
from streams.models import Rule as RuleRow

WINDOWS = (
    (300, _("5 minutes")),
    (900, _("15 minutes")),
    (1800, _("30 minutes")),
    (3600, _("1 hour")),
    (6 * 3600, _("6 hours")),
    (86400, _("1 day")),
    (7 * 86400, _("7 days")),
)


class RuleForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    figure = forms.ChoiceField(label=_("Figure"), choices=RuleRow.Figure.choices)
    severity = forms.ChoiceField(
        label=_("Severity (findings only)"),
        choices=[("", "—"), *Finding.Severity.choices],
        required=False,
    )
    score_type = forms.ModelChoiceField(
        label=_("Score type (positive scores only)"), queryset=None, required=False
    )
    window_s = forms.TypedChoiceField(label=_("Window"), choices=WINDOWS, coerce=int, initial=900)
    comparison = forms.ChoiceField(label=_("Fires when it is"), choices=RuleRow.Comparison.choices)
    # (a plain text input: the one validation says what is wrong with NaN, inf or a range)
    threshold = forms.CharField(label=_("Threshold"), max_length=40)
    baseline = forms.ChoiceField(
        label=_("Compared with (a change)"),
        choices=[("", "—"), *RuleRow.Baseline.choices],
        required=False,
    )
    min_streams = forms.IntegerField(label=_("Minimum streams"), initial=10, min_value=0)
    for_s = forms.IntegerField(label=_("Holds for (seconds)"), initial=0, min_value=0)
    renotify_s = forms.IntegerField(
        label=_("Notify again every (seconds, 0: never)"), initial=0, min_value=0
    )
    notify_recovery = forms.BooleanField(label=_("Recovery notices"), required=False, initial=True)
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)
    requested_model = forms.CharField(label=_("Model asked for"), required=False, max_length=200)
    resolved_model = forms.CharField(label=_("Model that answered"), required=False, max_length=200)
    username = forms.CharField(label=_("User"), required=False, max_length=150)
    # offered: the user's tokens (`rules.tokens_for`); any other id is the one validation's
    # to refuse (a 404: whether it exists is not theirs to know)
    token = forms.IntegerField(label=_("Token"), required=False, widget=forms.Select)
    source = forms.CharField(label=_("Source"), required=False, max_length=20)
    tag = forms.CharField(label=_("Tag"), required=False, max_length=64)
    session = forms.CharField(label=_("Session"), required=False, max_length=200)
    channels = forms.ModelMultipleChoiceField(
        label=_("Channels"),
        queryset=None,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, project, tokens, **kwargs):
        """`tokens`: those the user may scope a rule to (`rules.tokens_for`)."""
        super().__init__(*args, **kwargs)
        self.fields["channels"].queryset = Channel.objects.filter(project=project)
        self.fields["token"].widget.choices = [("", "—")] + [(t.pk, str(t)) for t in tokens]
        # the instance's score types and the project's own
        self.fields["score_type"].queryset = ScoreType.objects.filter(
            Q(project__isnull=True) | Q(project=project)
        )
        self.fields["window_s"].help_text = _("From %(lo)s minutes to %(hi)s days.") % {
            "lo": ALERT_MIN_WINDOW_S // 60,
            "hi": ALERT_MAX_WINDOW_S // 86400,
        }

    @staticmethod
    def initial_of(rule):
        values = {f: getattr(rule, f) for f in RuleForm.base_fields if f != "channels"}
        values["token"] = rule.token_id
        values["score_type"] = rule.score_type_id
        values["channels"] = [c.pk for c in rule.channels.all()]
        return values


class SilenceForm(forms.Form):
    """A rule, or every rule whose scope has each value given (the rule form's scope fields)."""

    rule = forms.ModelChoiceField(label=_("Rule"), queryset=None, required=False)
    requested_model = RuleForm.base_fields["requested_model"]
    resolved_model = RuleForm.base_fields["resolved_model"]
    username = RuleForm.base_fields["username"]
    token = forms.IntegerField(label=_("Token"), required=False, widget=forms.Select)
    source = RuleForm.base_fields["source"]
    tag = RuleForm.base_fields["tag"]
    session = RuleForm.base_fields["session"]
    hours = forms.FloatField(label=_("For (hours)"), initial=1)
    reason = forms.CharField(label=_("Reason"), required=False, max_length=200)

    SCOPE = ("requested_model", "resolved_model", "username", "token", "source", "tag", "session")

    def __init__(self, *args, rules, tokens, **kwargs):
        """`tokens`: those the user may scope a rule to (`rules.tokens_for`)."""
        super().__init__(*args, **kwargs)
        self.fields["rule"].queryset = rules
        self.fields["token"].widget.choices = [("", "—")] + [(t.pk, str(t)) for t in tokens]

    def scope(self):
        """{field: value} of the scope fields given."""
        data = self.cleaned_data
        return {name: data[name] for name in self.SCOPE if data.get(name) not in (None, "")}
