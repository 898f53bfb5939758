"""The audit page's filters (dashboard/queries/audit.py): an action of the log's own list, an
actor by their exact name (no search of stored text), a range of moments, and the cursor."""

from django import forms
from django.utils.translation import gettext_lazy as _

from dashboard.forms.ranges import InstantField
from dashboard.forms.streams import DATETIME_FORMATS
from streams.models import AuditEntry
from streams.store import audit


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(
        label=_("Action"),
        required=False,
        choices=[("", _("Every action"))] + [(a, audit.action_label(a)) for a in audit.ACTIONS],
    )
    actor = forms.CharField(
        label=_("Who"),
        required=False,
        max_length=AuditEntry._meta.get_field("actor_name").max_length,
        help_text=_("A user name, exactly as it is written."),
    )
    since = InstantField(required=False, input_formats=DATETIME_FORMATS, label=_("From"))
    until = InstantField(required=False, input_formats=DATETIME_FORMATS, label=_("To"))
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["actor"].widget.attrs["title"] = self.fields["actor"].help_text

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            raise forms.ValidationError(_("The start of the range must be before its end."))
        return data
