"""Dutch forms (Django's own for "nl" fill in the rest).

Figures: thousands grouped by a narrow no-break space, as in English (Django's Dutch groups
with a dot, "200.000", which the English pages would read as two hundred): one rule.
Moments (dashboard/dates.py; static/js/time.js reads the same forms): day before month, as
Django's Dutch short date ("5-12-2026") and Intl.DateTimeFormat("nl") write it; "5 dec" where
the year goes without saying. Never "12-05", which a Dutch reader takes for 12 May.
"""

THOUSAND_SEPARATOR = "\u202f"
NUMBER_GROUPING = 3

DAY_FORMAT = "j-n-Y"  # 5-12-2026
MINUTE_FORMAT = "j-n-Y H:i"  # 5-12-2026 07:06
SECOND_FORMAT = "j-n-Y H:i:s"  # 5-12-2026 07:06:12
RECENT_FORMAT = "j b H:i:s"  # 5 dec 07:06:12 (the list: this year's streams)
AXIS_DAY_FORMAT = "j b"  # 5 dec (a chart's day tick)
