"""The form that saves a page's filters under a name (dashboard/saved_views.py)."""

from django import forms
from django.utils.translation import gettext_lazy as _

from dashboard.models import SavedView


class SaveViewForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True, label=_("Name"))
    page = forms.ChoiceField(choices=SavedView.Page.choices)
    query = forms.CharField(required=False, max_length=4000, strip=True)
    shared = forms.BooleanField(required=False, label=_("Share with this project's members"))
