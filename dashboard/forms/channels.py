"""The forms of the notification channels' pages (streams/notify/channels.py checks a target
and makes or changes the channel): a new channel, and a channel changed."""

from django import forms
from django.utils.translation import gettext_lazy as _

from streams.models import MAX_CHANNEL_NAME_CHARS, Channel
from streams.notify.targets import MAX_TARGET_CHARS


class UnshownInput(forms.TextInput):
    """A text box that never writes its value back into the page: a target is a credential,
    and a form shown again (an error) must not carry it."""

    def format_value(self, value):
        return None


def _target(required):
    return forms.CharField(
        label=_("Target"),
        required=required,
        max_length=MAX_TARGET_CHARS,
        widget=UnshownInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        help_text=_(
            "E-mail: addresses separated by commas. Webhook and Slack: the https:// URL. "
            "Apprise: the service's URL (discord://…, ntfys://…, msteams://…). "
            "It is kept sealed and never shown whole again."
        ),
    )


class ChannelForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=MAX_CHANNEL_NAME_CHARS)
    kind = forms.ChoiceField(label=_("Kind"), choices=Channel.Kind.choices)
    target = _target(required=True)


class ChannelChangeForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=MAX_CHANNEL_NAME_CHARS)
    target = _target(required=False)
    enabled = forms.BooleanField(label=_("Enabled"), required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target"].help_text = _("Leave empty to keep the current target.")


class ChannelDeleteForm(forms.Form):
    confirm = forms.BooleanField(label=_("Yes, delete this channel and its delivery log"))
