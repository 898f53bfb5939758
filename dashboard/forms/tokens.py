"""The form that makes a project token (streams/access/tokens.py): its name, whose it is (an
admin may make one for any member), its scopes, expiry and limits."""

import datetime as dt
from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from streams.core.pricing import NANO
from streams.models import ApiToken

EXPIRY_CHOICES = (
    ("", _("never")),
    ("7", _("in 7 days")),
    ("30", _("in 30 days")),
    ("90", _("in 90 days")),
    ("365", _("in a year")),
)
MAX_CAP = Decimal(1_000_000)  # per day or month, in the project's currency
MAX_PER_MINUTE = 100_000


def _cap(label):
    return forms.DecimalField(
        label=label, required=False, min_value=Decimal(0), max_value=MAX_CAP, decimal_places=4
    )


class UserChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return obj.get_username()


class TokenForm(forms.Form):
    name = forms.CharField(
        label=_("Name"),
        required=False,
        max_length=ApiToken._meta.get_field("name").max_length,
        help_text=_("To tell your tokens apart: what uses it."),
    )
    owner = UserChoice(label=_("For"), queryset=None, required=False, empty_label=None)
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"),
        choices=ApiToken.Scope.choices,
        initial=list(ApiToken.Scope.values),
        widget=forms.CheckboxSelectMultiple,
    )
    expires = forms.ChoiceField(label=_("Expires"), choices=EXPIRY_CHOICES, required=False)
    requests_per_minute = forms.IntegerField(
        label=_("Requests per minute"), required=False, min_value=1, max_value=MAX_PER_MINUTE
    )
    spend_cap_day = _cap(_("Spend cap per day"))
    spend_cap_month = _cap(_("Spend cap per month"))

    def __init__(self, *args, owners, **kwargs):
        """`owners`: whom the signed-in user may make a token for (tokens.owners)."""
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = owners

    def token_fields(self, now=None):
        """`tokens.issue`'s keywords (but the project and the actor)."""
        d = self.cleaned_data
        now = now or dt.datetime.now(dt.UTC)
        return {
            "owner": d["owner"],
            "name": d["name"],
            "scopes": [s for s in ApiToken.Scope.values if s in d["scopes"]],
            "expires_at": now + dt.timedelta(days=int(d["expires"])) if d["expires"] else None,
            "requests_per_minute": d["requests_per_minute"],
            "spend_cap_day_nanos": _nanos(d["spend_cap_day"]),
            "spend_cap_month_nanos": _nanos(d["spend_cap_month"]),
        }


def _nanos(amount):
    return None if amount is None else int(amount * NANO)
