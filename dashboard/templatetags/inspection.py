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


# ---- findings by severity ---------------------------------------------------------------------

# Severities worst first, each with its short word and how it reads in full (streams/core/checks.py
# CODES gives every finding code one of them).
SEVERITIES = (
    ("error", "err", "error finding", "error findings", "the protocol was broken"),
    ("warning", "warn", "warning", "warnings", "something to look at"),
    ("info", "info", "info finding", "info findings", "noted, not a fault"),
)


@register.inclusion_tag("dashboard/finding_pills.html")
def finding_pills(source):
    """A stream's findings as one pill per severity present, worst first ("1 err", "2 info"):
    an info finding must never look like an error (info grey, warning orange, error red, and
    the word on each). `source`: counts per severity (`queries.finding_counts`: the timeline,
    the playground), or a stream row, which counts its errors apart from the rest
    (`error_findings`, `findings_count`): its other findings are warnings or info, not told
    apart, in grey; a row with `warning_findings` tells them apart too."""
    if isinstance(source, dict):
        counts = {name: source.get(name) or 0 for name, *_ in SEVERITIES}
        other = 0
    else:
        total = getattr(source, "findings_count", 0) or 0
        errors = getattr(source, "error_findings", 0) or 0
        warnings = getattr(source, "warning_findings", None)
        if warnings is None:
            counts, other = {"error": errors}, max(total - errors, 0)
        else:
            counts = {"error": errors, "warning": warnings, "info": total - errors - warnings}
            other = 0
    pills = []
    for name, short, one, many, meaning in SEVERITIES:
        n = counts.get(name) or 0
        if n > 0:
            pills.append((name, f"{n} {short}", f"{n} {one if n == 1 else many}: {meaning}"))
    if other > 0:
        title = (
            f"{other} {'finding' if other == 1 else 'findings'}, no error: warnings or info "
            "(this list counts errors apart; the timeline tells warnings from info)"
        )
        pills.append(("other", f"{other} warn/info", title))
    return {"pills": pills}


# ---- what a figure counts ---------------------------------------------------------------------

# `Stream.output_tokens` counts output-bearing delta events (streams/core/checks.py), and
# `tokens_per_s` / `inter_token_ms` are taken over those deltas (streams/core/figures.py): the pages
# call them deltas and say so, here, once (compare.js gets them from its page).
FIGURE_HELP = {
    "deltas": (
        "Output deltas: the output-bearing delta events the stream sent (text, refusal, "
        "tool-call arguments, reasoning). It counts delta events, not tokens: one delta may "
        "carry several tokens, or part of one."
    ),
    "rate": (
        "Output deltas per second, from the first output delta to the last: (deltas - 1) / "
        "that time. It counts delta events, not tokens."
    ),
    "gap": "The mean time between two output deltas (delta events, not tokens).",
}


@register.simple_tag
def figure_help(name):
    """The tooltip of a figure counted over output deltas (`deltas`, `rate`, `gap`)."""
    return FIGURE_HELP[name]
