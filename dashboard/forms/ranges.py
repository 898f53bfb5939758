"""The time ranges every page offers, in one list: the streams list and the analytics pages
show the same presets with the same labels (a user switching pages keeps a choice that
means the same thing); and the one field every page reads a moment with (`InstantField`)."""

import datetime as dt

from django import forms
from django.utils.translation import gettext, gettext_lazy

PRESETS = {
    "15m": dt.timedelta(minutes=15),
    "1h": dt.timedelta(hours=1),
    "24h": dt.timedelta(hours=24),
    "7d": dt.timedelta(days=7),
    "30d": dt.timedelta(days=30),
    "90d": dt.timedelta(days=90),
}
PRESET_CHOICES = [
    ("15m", gettext_lazy("Last 15 minutes")),
    ("1h", gettext_lazy("Last hour")),
    ("24h", gettext_lazy("Last 24 hours")),
    ("7d", gettext_lazy("Last 7 days")),
    ("30d", gettext_lazy("Last 30 days")),
    ("90d", gettext_lazy("Last 90 days")),
]
ALL_TIME = gettext_lazy("All time")

# The years a typed moment may be in. A bound at the calendar's ends overflows as soon as it is
# converted to UTC for the database (9999-12-31 23:59 in New York is in the year 10000) or a
# range is shifted or widened (the range before, a bucket's edge).
EARLIEST_YEAR, LATEST_YEAR = 1970, 2999


class InstantField(forms.DateTimeField):
    """A moment typed as the page's wall-clock time (Django reads naive input in the active
    zone, dashboard/timezone.py), in the years EARLIEST_YEAR to LATEST_YEAR of that zone: every
    date filter of every page takes it, so none can reach the database out of range."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is not None and not EARLIEST_YEAR <= moment.year <= LATEST_YEAR:
            raise forms.ValidationError(
                gettext("Choose a date between %(earliest)s and %(latest)s.")
                % {"earliest": EARLIEST_YEAR, "latest": LATEST_YEAR},
                code="out_of_range",
            )
        return moment
