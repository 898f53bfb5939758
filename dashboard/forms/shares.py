"""The form that makes a share link (streams/access/shares.py): its target, its expiry, and,
where the instance allows it, whether anyone with the link may open it."""

import datetime as dt

from django import forms
from django.utils.translation import gettext_lazy as _

from streams.access import shares
from streams.models import ShareLink

# Bounded: a link always ends (streams/access/shares.py: MIN_EXPIRY … MAX_EXPIRY).
EXPIRY_CHOICES = (
    ("1h", _("in 1 hour"), dt.timedelta(hours=1)),
    ("1d", _("in 1 day"), dt.timedelta(days=1)),
    ("7d", _("in 7 days"), dt.timedelta(days=7)),
    ("30d", _("in 30 days"), dt.timedelta(days=30)),
)
DEFAULT_EXPIRY = "7d"
_EXPIRY = {key: delta for key, _label, delta in EXPIRY_CHOICES}
assert all(shares.MIN_EXPIRY <= d <= shares.MAX_EXPIRY for d in _EXPIRY.values())
assert _EXPIRY[DEFAULT_EXPIRY] == shares.DEFAULT_EXPIRY


class ShareLinkForm(forms.Form):
    stream = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    session = forms.CharField(
        required=False,
        strip=False,  # a session's name is the client's, spaces and all
        max_length=ShareLink._meta.get_field("session").max_length,
        widget=forms.HiddenInput,
    )
    expires = forms.ChoiceField(
        label=_("Expires"),
        choices=[(key, label) for key, label, _delta in EXPIRY_CHOICES],
        initial=DEFAULT_EXPIRY,
    )
    anyone = forms.BooleanField(required=False, label=_("Anyone with the link, signed in or not"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not shares.public_allowed():
            # the instance does not allow it: not offered, and not taken from a hand-made POST
            del self.fields["anyone"]

    def clean(self):
        data = super().clean()
        if bool(data.get("stream")) == bool(data.get("session")):
            raise forms.ValidationError(_("Share a stream or a session."))
        return data

    def target(self):
        """`create`'s keywords: the target, the expiry and whom it opens for."""
        d = self.cleaned_data
        return {
            "stream": d["stream"] or None,
            "session": d["session"] or "",
            "expires_in": _EXPIRY[d["expires"]],
            "anyone": d.get("anyone", False),
        }
