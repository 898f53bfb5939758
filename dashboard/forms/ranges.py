"""The time ranges every page offers, in one list: the streams list and the analytics pages
show the same presets with the same labels (a user switching pages keeps a choice that
means the same thing)."""

import datetime as dt

from django.utils.translation import gettext_lazy

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
