"""Number formatting for the stream pages (plain text out; Django escapes it)."""

from django import template

from dashboard.queries import TEXT_SHOWN

register = template.Library()


@register.filter
def ms(value):
    """Milliseconds with a precision that suits their size: 0.42, 12.3, 1 234."""
    if value is None or value == "":
        return "—"
    value = float(value)
    if abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) < 1000:
        return f"{value:.1f}"
    return f"{value:,.0f}".replace(",", "\u202f")


@register.filter
def duration(value):
    """A duration in ms as people read it: 850 ms, 3.21 s, 2 min 05 s."""
    if value is None or value == "":
        return "—"
    value = float(value)
    if value < 1000:
        return f"{value:.0f} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes} min {seconds:02d} s"


@register.filter
def count(value):
    """An integer with thin-space thousands separators."""
    if value is None or value == "":
        return "—"
    return f"{int(value):,}".replace(",", "\u202f")


@register.filter
def pct(value):
    """A percentage for an inline style (always a dot, never a localised comma)."""
    return f"{float(value or 0):.3f}"


@register.simple_tag
def output_text_shown():
    """Characters of a text laid out before "Show all": the live renderer (static/js/output.js)
    collapses a growing text at the same point as the server's rendering."""
    return TEXT_SHOWN
