"""How a page writes a moment: in the page's time zone (dashboard/timezone.py), in the forms of
its language, the zone named after a time of day.

The forms are Django's format modules' (dashboard/formats/<language>/formats.py: English
"2026-12-05 07:06 CET", Dutch "5-12-2026 07:06 CET"; the list's "Dec 5 07:06:12", Dutch
"5 dec 07:06:12"), one set for the templates (the `moment` filter, dashboard/templatetags),
the report builders' pre-written table rows (`write`) and the scripts: the vocabulary carries
the forms and the month abbreviations to static/js/time.js, which writes the same letters
(`LETTERS`) the same way. Stored times stay UTC; the JSON API and exports never use these.
"""

import datetime as dt
import functools

from django.utils import dateformat, formats, translation
from django.utils.dates import MONTHS_3

from dashboard.formats.en import formats as english

# a form's name → its setting in a language's format module
FORMS = {
    "day": "DAY_FORMAT",
    "minute": "MINUTE_FORMAT",
    "second": "SECOND_FORMAT",
    "recent": "RECENT_FORMAT",
    "axis_day": "AXIS_DAY_FORMAT",
}
# the forms whose zone is named after them (the list's recent moments go without: its rows
# are many, and the top bar names the zone)
ZONED = frozenset({"minute", "second"})


def form(name, language=None):
    """The Django date format of the form `name` in `language` (the active one by default)."""
    setting = FORMS[name]
    for module in formats.get_format_modules(language or translation.get_language()):
        value = getattr(module, setting, None)
        if value is not None:
            return value
    return getattr(english, setting)


def months():
    """The months' abbreviations in the active language ("jan" … "dec"; Django's `b`)."""
    return [str(MONTHS_3[m]) for m in range(1, 13)]


def zone_name(value):
    """The zone's abbreviation at `value` (aware): "CET", "CEST", "IST", "UTC"."""
    return dateformat.format(value, "T")


# The letters of Django's date format that both writers know (this module's and time.js's).
LETTERS = {
    "Y": lambda d, months: f"{d.year:04d}",
    "m": lambda d, months: f"{d.month:02d}",
    "n": lambda d, months: str(d.month),
    "d": lambda d, months: f"{d.day:02d}",
    "j": lambda d, months: str(d.day),
    "b": lambda d, months: months[d.month - 1],
    "M": lambda d, months: months[d.month - 1].title(),
    "H": lambda d, months: f"{d.hour:02d}",
    "i": lambda d, months: f"{d.minute:02d}",
    "s": lambda d, months: f"{d.second:02d}",
}


@functools.cache
def _compiled(language, name):
    """The form as a list of pieces: a letter's writer or a literal text (backslash escapes
    as Django's). None: the form uses a letter only Django's dateformat knows."""
    with translation.override(language):
        text, names = form(name), months()
    pieces, escaped = [], False
    for ch in text:
        if escaped or not ch.isalpha():
            pieces.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in LETTERS:
            pieces.append(functools.partial(LETTERS[ch], months=names))
        else:
            return None
    return pieces


def write(value, name="second", zone=True):
    """`value` (a datetime in the zone it is to be shown in, or a date for "day") in the active
    language's form `name`, its zone named after a time of day unless `zone` is false; "" for
    none. A tenth of Django's dateformat's cost: the report builders write hundreds of table
    rows with it. (The templates' `moment` filter hands it the value in the page's zone.)"""
    if value is None or value == "":
        return ""
    pieces = _compiled(translation.get_language() or "en", name)
    if pieces is None:
        text = dateformat.format(value, form(name))
    else:
        text = "".join(p if isinstance(p, str) else p(value) for p in pieces)
    if zone and name in ZONED and isinstance(value, dt.datetime) and value.tzinfo is not None:
        return f"{text} {zone_name(value)}"
    return text


def vocabulary():
    """The forms and months for static/js/time.js, in the active language (JSON-ready)."""
    return {"forms": {name: form(name) for name in FORMS}, "months": months()}
