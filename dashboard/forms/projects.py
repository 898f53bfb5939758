"""The forms of the projects' pages (dashboard/views/projects.py): a project's name, a member
to add, a role, an invitation, the confirmation of a deletion, its admins' settings."""

from django import forms
from django.conf import settings
from django.utils.translation import get_language_info
from django.utils.translation import gettext_lazy as _

from streams.models import CURRENCIES, MAX_PROJECT_NAME_CHARS, MAX_RETENTION_DAYS, Membership


def _role_field():
    return forms.ChoiceField(label=_("Role"), choices=Membership.Role.choices, initial="member")


class ProjectNameForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=MAX_PROJECT_NAME_CHARS)


class AddMemberForm(forms.Form):
    user = forms.CharField(label=_("Username or e-mail address"), max_length=254)
    role = _role_field()


class RoleForm(forms.Form):
    role = _role_field()


class InviteForm(forms.Form):
    email = forms.EmailField(label=_("E-mail address"))
    role = _role_field()


class MembersPageForm(forms.Form):
    """A members page's cursor: the user id of the last member of the page before."""

    after = forms.IntegerField(required=False, min_value=1, max_value=2**62)


class DeleteProjectForm(forms.Form):
    """Deleting takes the project's name typed again: what goes with it cannot come back."""

    name = forms.CharField(
        label=_("The project's name"),
        max_length=MAX_PROJECT_NAME_CHARS,
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_name(self):
        if self.cleaned_data["name"].strip() != self.project.name:
            raise forms.ValidationError(_("Type the project's name exactly to delete it."))
        return self.cleaned_data["name"]


def _days_field(label):
    return forms.IntegerField(
        label=label,
        required=False,
        min_value=1,
        max_value=MAX_RETENTION_DAYS,
        help_text=_("Empty: the instance's."),
        widget=forms.NumberInput(attrs={"placeholder": _("the instance's")}),
    )


def _languages():
    # each named in the page's language, as the choice is about the notices' readers
    named = [(code, get_language_info(code)["name_translated"]) for code, _n in settings.LANGUAGES]
    return [("", _("The instance's")), *named]


class ProjectSettingsForm(forms.Form):
    """A project's admins' settings: its currency, its own retention, its notices' language."""

    currency = forms.ChoiceField(label=_("Currency"), choices=CURRENCIES)
    retain_streams_days = _days_field(_("Keep streams for (days)"))
    retain_events_days = _days_field(_("Keep events for (days)"))
    language = forms.ChoiceField(
        label=_("Language of alert notices"), choices=lambda: _languages(), required=False
    )
