"""English forms (Django's own for "en" fill in the rest).

Figures: thousands grouped by a narrow no-break space, in every language (one rule: the
`count` filter, Django's number_format and static/js/i18n.js write it; 1 981, 200 000).
Moments (dashboard/dates.py; static/js/time.js reads the same forms): ISO dates, a 24-hour
clock, and "Dec 5" where the year goes without saying, month first as English reads it.
"""

THOUSAND_SEPARATOR = "\u202f"
NUMBER_GROUPING = 3

DAY_FORMAT = "Y-m-d"  # 2026-12-05
MINUTE_FORMAT = "Y-m-d H:i"  # 2026-12-05 07:06
SECOND_FORMAT = "Y-m-d H:i:s"  # 2026-12-05 07:06:12
RECENT_FORMAT = "M j H:i:s"  # Dec 5 07:06:12 (the list: this year's streams)
AXIS_DAY_FORMAT = "M j"  # Dec 5 (a chart's day tick)
