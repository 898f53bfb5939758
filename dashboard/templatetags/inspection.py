"""Number formatting for the stream pages (plain text out; Django escapes it), in the page's
language: its decimal separator (English 0.42, Dutch 0,42), thousands grouped by a thin space
in every language (1 234), and the pages' words (finding pills, figure help, status labels).
"""

import math
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

from django import template
from django.template import defaultfilters
from django.utils import formats
from django.utils.html import format_html
from django.utils.translation import get_language, gettext, ngettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from dashboard import dates, disguise
from dashboard.queries.output import TEXT_SHOWN
from streams.core import pricing
from streams.models import Finding, Stream

register = template.Library()

THIN_SPACE = "\u202f"


def number(value, decimals):
    """`value` with `decimals` places, the active language's decimal separator and thin-space
    thousands (the same in every language, as the scripts group them). Rounded half away from
    zero from the exact value, as the scripts' Intl.NumberFormat rounds: 38.25 is "38.3" on
    the server and in a live figure alike."""
    exact = Decimal(value).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    text = f"{exact:,.{decimals}f}"  # grouped by ","
    decimal = formats.get_format("DECIMAL_SEPARATOR")
    return text.translate(str.maketrans({",": THIN_SPACE, ".": decimal}))


@register.filter
def ms(value):
    """Milliseconds with a precision that suits their size: 0.42, 12.3, 1 234."""
    if value is None or value == "":
        return "—"
    value = float(value)
    if abs(value) < 10:
        return number(value, 2)
    if abs(value) < 1000:
        return number(value, 1)
    return number(round(value), 0)


@register.filter
def duration(value):
    """A duration in ms as people read it: 850 ms, 3.21 s, 2 min 05 s."""
    if value is None or value == "":
        return "—"
    value = float(value)
    if value < 1000:
        return f"{number(round(value), 0)} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{number(seconds, 2)} s"
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes} min {seconds:02d} s"


@register.filter
def count(value):
    """An integer with thin-space thousands separators."""
    if value is None or value == "":
        return "—"
    return number(int(value), 0)


@register.filter
def size(value):
    """A size in bytes as Django's filesizeformat says it ("1.2 KB", in the page's language),
    under a KB grouped as every count ("1 015 bytes"; filesizeformat writes "1015")."""
    if value is None or value == "":
        return "—"
    n = int(value)
    text = defaultfilters.filesizeformat(n)
    return text.replace(str(n), count(n), 1) if abs(n) < 1024 else text


@register.filter(expects_localtime=True)
def moment(value, form="second"):
    """A moment in the page's zone and its language's form (dashboard/dates.py): "second"
    (the default) and "minute" with the zone named ("2026-12-05 07:06:12 CET", Dutch
    "5-12-2026 07:06:12 CET"), "recent" (the list's "Dec 5 07:06:12", "5 dec 07:06:12"), "day"
    ("2026-12-05", "5-12-2026"); "" for none."""
    return dates.write(value, form)


@register.filter
def decimals(value, places=1):
    """A figure with `places` decimals ("1 234.5", Dutch "1 234,5": grouped as every figure);
    negative `places` as Django's floatformat: at most that many, only where the figure has
    them ("-1": 50, 12.5). "" for none (the caller's `default` says it)."""
    if value is None or value == "":
        return ""
    places = int(places)
    text = number(float(value), abs(places))
    if places < 0:
        decimal = formats.get_format("DECIMAL_SEPARATOR")
        text = text.rstrip("0").removesuffix(decimal) if decimal in text else text
    return text


@register.filter
def whole(value):
    """A figure rounded to a whole number and grouped ("1 496"); "" for none."""
    return decimals(value, 0)


SYMBOLS = {"EUR": "€", "USD": "$"}


def money_places(amount):
    """Two places from 1 on, else three significant digits, at most nine (static/js/i18n.js's
    moneyPlaces says the same)."""
    amount = abs(amount)
    if amount >= 1 or amount == 0:
        return 2
    return min(9, max(2, 2 - math.floor(math.log10(amount))))


@register.filter
def money(nanos, currency):
    """A cost stored as nano-units of `currency` (streams/core/pricing.py): "€0.00123",
    Dutch "€ 0,00123"; "" for none (the caller says "no price")."""
    if nanos is None or nanos == "" or not currency:
        return ""
    amount = pricing.decimal(int(nanos))
    places = money_places(amount)
    # rounded from the exact amount, half to even (as i18n.js's `money`: both show one figure)
    shown = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
    symbol = SYMBOLS.get(currency, f"{currency} ")
    space = "\u00a0" if get_language().startswith("nl") and len(symbol) == 1 else ""
    return f"{symbol}{space}{number(shown, places)}"


@register.filter
def status_label(value):
    """A stream status as the page says it (lower case, translated: "completed", Dutch
    "voltooid"); the value itself (a CSS class, data) is never translated. An unknown value is
    shown as it is."""
    try:
        return str(Stream.Status(value).label).lower()
    except ValueError:
        return value


@register.filter
def severity_label(value):
    """A finding's severity as the page says it (lower case, translated: "error", Dutch
    "fout"); the value stays in classes. An unknown value is shown as it is."""
    try:
        return str(Finding.Severity(value).label).lower()
    except ValueError:
        return value


@register.filter
def pct(value):
    """A percentage for an inline style (always a dot, never a localised comma)."""
    return f"{float(value or 0):.3f}"


@register.simple_tag
def output_text_shown():
    """Characters of a text laid out before "Show all": the live renderer (static/js/output.js)
    collapses a growing text at the same point as the server's rendering."""
    return TEXT_SHOWN


@register.filter
def format_label(value):
    """A stream's format as the pages name it ("Chat Completions"), from `Stream.Format`'s
    labels (product names: not lower-cased); an unknown value is shown as it is."""
    try:
        return str(Stream.Format(value).label)
    except ValueError:
        return value


@register.filter
def source_label(value):
    """A stream's source as the pages name it (lower case, translated: "recorded live", Dutch
    "live opgenomen"), from `Stream.Source`'s labels; an unknown value is shown as it is."""
    try:
        return str(Stream.Source(value).label).lower()
    except ValueError:
        return value


# An import job's and its files' statuses (streams.models.ImportJob / ImportFile), in the
# pages' words; the value is shown as it is when it has none.
IMPORT_STATUS_LABELS = {
    "queued": _("Queued"),
    "running": _("Running"),
    "reading": _("Reading"),
    "done": _("Done"),
    "failed": _("Failed"),
    "cancelled": _("Cancelled"),
}


@register.filter
def import_status_label(value):
    """An import job's or file's status as the import page says it ("Queued", "Done")."""
    return str(IMPORT_STATUS_LABELS.get(value, value))


# ---- findings by severity ---------------------------------------------------------------------

# Severities worst first, each with its short word and how it reads in full (streams/core/checks.py
# CODES gives every finding code one of them).
SEVERITIES = (
    ("error", pgettext_lazy("finding pill", "err"), _("the protocol was broken")),
    ("warning", pgettext_lazy("finding pill", "warn"), _("something to look at")),
    ("info", pgettext_lazy("finding pill", "info"), _("noted, not a fault")),
)


def _pill_title(name, n, meaning):
    if name == "error":
        what = ngettext("%(n)s error finding", "%(n)s error findings", n)
    elif name == "warning":
        what = ngettext("%(n)s warning", "%(n)s warnings", n)
    else:
        what = ngettext("%(n)s info finding", "%(n)s info findings", n)
    return f"{what % {'n': n}}: {meaning}"


@register.inclusion_tag("dashboard/finding_pills.html")
def finding_pills(source):
    """A stream's findings as one pill per severity present, worst first ("1 err", "2 info"):
    an info finding must never look like an error (info grey, warning orange, error red, and
    the word on each). `source`: counts per severity (`queries.common.finding_counts`: the timeline,
    the playground), or a stream row, which counts its errors apart from the rest
    (`error_findings`, `findings_count`): its other findings are warnings or info, not told
    apart, in grey; a row with `warning_findings` tells them apart too."""
    if isinstance(source, dict):
        counts = {name: source.get(name) or 0 for name, *__ in SEVERITIES}
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
    for name, short, meaning in SEVERITIES:
        n = counts.get(name) or 0
        if n > 0:
            pills.append((name, f"{n} {short}", _pill_title(name, n, meaning)))
    if other > 0:
        title = ngettext(
            "%(n)s finding, no error: warnings or info (this list counts errors apart; the "
            "timeline tells warnings from info)",
            "%(n)s findings, no error: warnings or info (this list counts errors apart; the "
            "timeline tells warnings from info)",
            other,
        ) % {"n": other}
        pills.append(("other", f"{other} {gettext('warn/info')}", title))
    return {"pills": pills}


# ---- what a figure counts ---------------------------------------------------------------------

# `Stream.output_deltas` counts output-bearing delta events (streams/core/checks.py), and
# `tokens_per_s` / `inter_token_ms` are taken over those deltas (streams/core/figures.py): the pages
# call them deltas and say so, here, once (compare.js gets them from its page).
FIGURE_HELP = {
    "deltas": _(
        "Output deltas: the output-bearing delta events the stream sent (text, refusal, "
        "tool-call arguments, reasoning). It counts delta events, not tokens: one delta may "
        "carry several tokens, or part of one."
    ),
    "rate": _(
        "Output deltas per second, from the first output delta to the last: (deltas - 1) / "
        "that time. It counts delta events, not tokens."
    ),
    "gap": _("The mean time between two output deltas (delta events, not tokens)."),
    # the usage figures (below): tokens as the upstream counted them, and what they cost
    "tokens": _(
        "Input → output tokens of the request and its answer, as the upstream reported them; "
        "≈ marks an estimate (the upstream reported no usage: counted with the o200k_base "
        "tokenizer)."
    ),
    "input_tokens": _(
        "Input tokens: the request (instructions, messages, tools), as the upstream reported "
        "them, else estimated with the o200k_base tokenizer."
    ),
    "output_tokens": _(
        "Output tokens: the answer (text, tool calls, reasoning), as the upstream reported "
        "them, else estimated with the o200k_base tokenizer. Not the output deltas: one delta "
        "may carry several tokens."
    ),
    "cost": _(
        "What the stream cost at the price valid when it started: the team's own price for "
        "the model, else the maintained price list. “no price”: neither has one, or its usage "
        "is unknown."
    ),
}


@register.simple_tag
def figure_help(name):
    """The tooltip of a figure: one counted over output deltas (`deltas`, `rate`, `gap`), or a
    usage figure (`tokens`, `input_tokens`, `output_tokens`, `cost`)."""
    return str(FIGURE_HELP[name])


# ---- usage and cost ---------------------------------------------------------------------------

# A stream's usage (`usage_source`, the token columns) and cost (`cost_nanos`, `cost_currency`,
# `price_ref`: streams/store/prices.py) as every page shows them: input → output tokens, an
# estimate marked "≈" (a tooltip and a hidden word say what it is), a cost in its currency
# (`money`) with the price used in its title, and "no price" (never 0) for a finished stream that
# has none. A stream still running shows "—". static/js/stream_detail/format.js renders the
# same for the pages' live parts; keep the two alike.
ESTIMATED_HELP = _("estimated: the upstream reported no usage")


def _estimated(stream):
    return getattr(stream, "usage_source", "") == Stream.UsageSource.ESTIMATED


@register.simple_tag(name="estimate_mark")
def _estimate_mark():
    """The "≈" before an estimated figure: its tooltip, and a hidden word for screen readers."""
    return format_html(
        '<span class="estimate" title="{}"><span aria-hidden="true">≈</span>'
        '<span class="visually-hidden">{} </span></span>',
        ESTIMATED_HELP,
        gettext("estimated:"),
    )


def _marked(stream, text):
    return format_html("{}{}", _estimate_mark(), text) if _estimated(stream) else text


@register.simple_tag
def tokens(stream):
    """A stream's input → output tokens ("412 → 96", an estimate "≈412 → 96"); "—" while it
    has no usage (running, or ended without an answer to count)."""
    if not getattr(stream, "usage_source", ""):
        return "—"
    return _marked(stream, f"{count(stream.input_tokens)} → {count(stream.output_tokens)}")


@register.simple_tag
def token_count(stream, which):
    """One of a stream's token counts, `which` "input" or "output" ("≈412" when estimated)."""
    value = getattr(stream, f"{which}_tokens", None)
    if not getattr(stream, "usage_source", "") or value is None:
        return "—"
    return _marked(stream, count(value))


@register.simple_tag
def token_note(stream, which):
    """The line under a token count: "estimated", or the part of it the upstream said was
    cached input ("12 cached") or reasoning output ("30 reasoning"); "" when none is known."""
    if not getattr(stream, "usage_source", ""):
        return ""
    if _estimated(stream):
        return gettext("estimated")
    if which == "input" and stream.cached_input_tokens is not None:
        return gettext("%(n)s cached") % {"n": count(stream.cached_input_tokens)}
    if which == "output" and stream.reasoning_tokens is not None:
        return gettext("%(n)s reasoning") % {"n": count(stream.reasoning_tokens)}
    return ""


@register.simple_tag
def usage_title(stream):
    """What a token cell's figures are, in full (its title)."""
    if not getattr(stream, "usage_source", ""):
        return "" if stream.is_active else gettext("no usage: the stream had no answer to count")
    parts = [gettext("%(n)s input tokens") % {"n": count(stream.input_tokens)}]
    if stream.cached_input_tokens is not None:
        parts.append(gettext("%(n)s cached") % {"n": count(stream.cached_input_tokens)})
    parts.append(gettext("%(n)s output tokens") % {"n": count(stream.output_tokens)})
    if stream.reasoning_tokens is not None:
        parts.append(gettext("%(n)s reasoning") % {"n": count(stream.reasoning_tokens)})
    how = str(ESTIMATED_HELP) if _estimated(stream) else gettext("reported by the upstream")
    return f"{', '.join(parts)} ({how})"


def _price_name(ref):
    """A stored price ref as the pages name it: as stored, but a simulator example price in
    words (it is nobody's real price)."""
    model = pricing.example_model(ref or "")
    if model is None:
        return ref or "?"
    return gettext("an example price of the built-in simulator for %(model)s, not a real one") % {
        "model": model
    }


EXAMPLE_WORD = _("(example)")  # (after a cost at a made-up price)


@register.simple_tag
def cost(stream):
    """A stream's cost ("€0.00123", an estimate's "≈€0.00123"; "(example)" after one at a
    simulator example price), "no price" (muted) for a finished stream without one, "—" while
    it runs."""
    if stream.is_active:
        return "—"
    if stream.cost_nanos is None:
        return format_html('<span class="muted no-price">{}</span>', gettext("no price"))
    shown = _marked(stream, money(stream.cost_nanos, stream.cost_currency))
    if pricing.example_model(stream.price_ref or "") is not None:
        return format_html('{} <span class="example-price">{}</span>', shown, EXAMPLE_WORD)
    return shown


@register.simple_tag
def cost_note(stream):
    """The price a cost was figured at ("price: team price 3: gpt-4o* from 2026-01-01", and
    "estimated usage" before it for an estimate), or why there is none; "" while it runs."""
    if stream.is_active:
        return ""
    if stream.cost_nanos is not None:
        price = gettext("price: %(price)s") % {"price": _price_name(stream.price_ref)}
        if _estimated(stream):
            return f"{gettext('estimated usage')} · {price}"
        return price
    if not stream.usage_source:
        return gettext("no usage to price")
    if stream.input_tokens is None or stream.output_tokens is None:
        return gettext("its input or output tokens are unknown")
    model = stream.resolved_model or stream.requested_model
    if not model or model == "auto":
        return gettext("no model named to price")
    return gettext("no price known for %(model)s") % {"model": model}


# ---- two streams side by side (templates/dashboard/stream_compare.html) ----------------------


def _shown(value, unit):
    """A compared figure with its unit ("250.0 ms", "12.5 /s"); a count as it is."""
    if value is None:
        return "—"
    if unit == "ms":
        return f"{ms(value)} ms"
    if unit == "rate":
        return f"{number(float(value), 1)} /s"
    return count(value)


@register.filter
def figure_value(value, unit):
    """A compared figure: ms, a rate per second (one place) or a count."""
    return _shown(value, unit)


@register.simple_tag
def figure_difference(diff, base, unit):
    """b − a with its sign ("+12.3", "−4"), and the change against a in percent when a is not
    0; "" when either has no value."""
    if diff is None:
        return ""
    sign = "+" if diff > 0 else "−" if diff < 0 else "±"
    text = f"{sign}{_shown(abs(diff), unit)}"
    if base:
        text += f" ({sign}{number(abs(diff) / abs(base) * 100, 0)} %)"
    return text


@register.simple_tag
def money_difference(nanos, currency):
    if nanos is None:
        return ""
    sign = "+" if nanos > 0 else "−" if nanos < 0 else "±"
    return f"{sign}{money(abs(nanos), currency)}"


# ---- text that disguises itself (dashboard/disguise.py) -----------------------------------------

HIDDEN_NOTE = _(
    "Hidden characters: this holds invisible or bidirectional Unicode characters, which can "
    "hide text or change the order it reads in. Each is shown as ⟨U+…⟩, named in its "
    "tooltip; exports and copies keep them as they are."
)


@register.filter
def reveal(value):
    """Recorded text with every hidden character drawn as a marker (escaped; anything not a
    string is left to the template as it is)."""
    if not isinstance(value, str):
        return value
    return disguise.reveal_html(value)


@register.simple_tag
def hidden_note(value):
    """The note above recorded text (an output item, an event's data) that holds hidden
    characters; "" when nothing in `value` does. static/js/disguise.js `noteHidden` adds the
    same note to output that arrives live."""
    if not disguise.holds_hidden(value):
        return ""
    return format_html('<p class="hidden-note" role="note">{}</p>', HIDDEN_NOTE)


@register.simple_tag
def save_view_form():
    """The form of "Save this view…" (templates/dashboard/save_view.html): its fields' limits."""
    from dashboard.forms.saved import SaveViewForm

    return SaveViewForm()
