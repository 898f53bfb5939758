"""What the i18n walks look for in a page's texts (tests/dashboard/test_i18n.py over the server's
pages, tests/e2e/test_dutch_e2e.py over what the scripts made of them):

- `visible_texts(html)`: the texts a reader sees (text nodes outside scripts, styles and code,
  and the attributes a browser shows);
- `english_left(text, data)` (a text the same in both languages) and `english_kept(text,
  words, data)` (English kept inside a translation): the English words a Dutch page should
  not have, unless data (`recorded_data()`, a `Recorded` set) or a product term (ALLOWED), or
  a word our Dutch catalogs use as Dutch (DUTCH);
- `misgrouped(text, language)`: figures not grouped by the one rule (a narrow no-break space);
- OTHER_DATE_FORM: a date in the other language's form; UTC_TIME: a time named UTC;
- `catalog_entries(po)`: the translated entries of a catalog (CATALOGS: ours in Dutch).
"""

import json
import re
import zoneinfo
from html.parser import HTMLParser
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import translation
from django.utils.dates import MONTHS_3

from dashboard.models import Conversation, SavedView, Turn
from streams.core.checks import KNOWN_TYPES, Said
from streams.core.formats import FORMATS
from streams.models import (
    ApiToken,
    AuditEntry,
    Capture,
    Channel,
    Comment,
    Delivery,
    Evaluation,
    Evaluator,
    Event,
    Finding,
    ImportFile,
    ImportJob,
    Invitation,
    OnlineRule,
    Price,
    Score,
    ScoreType,
    ShareLink,
    Stream,
)
from streams.simulator import scenarios_of
from streams.simulator.models import MODELS

ROOT = Path(__file__).resolve().parent.parent.parent

# Words a Dutch page may keep: product and protocol terms, units, and words Dutch spells the
# same way (checked case-insensitively, as whole words).
ALLOWED = {
    # product, protocol and format names
    "streamscope", "eu", "gpt", "openai", "api", "json", "sse", "har", "http", "https", "html",
    "url", "id", "ids", "sdk", "csv", "otel", "prometheus", "django", "admin", "htmx", "utc",
    "ttft", "p50", "p90", "p99", "ms", "µs", "s", "kb", "mb", "byte", "bytes", "tokens", "token",
    "websocket", "markdown", "stream", "streams", "playground", "latency", "routing", "router",
    "proxy", "auto", "live", "import", "export", "replay", "delta", "deltas", "en", "nl", "headers",
    "tcp", "rst", "content-type", "capture", "timing", "body", "bodies",
    "utre",  # the search box's example of a word's beginning ("utre*")
    # the same word in Dutch, and key names
    "model", "modellen", "status", "type", "filter", "filters", "tag", "tags", "index",
    "details", "code", "info", "min", "max", "totaal", "events", "event",
    "output", "input", "sessie", "prompt", "tool", "reasoning", "server", "client", "pending",
    "streaming", "scenario", "enter", "shift", "esc", "per", "protocol", "link", "links",
    "histogram", "simulator", "types", "labels", "extra", "offline", "had", "band", "socket",
    "feedback", "project", "projecten", "dataset", "datasets", "experiment", "item", "items",
    "variant", "metadata",
    # notification channels' kinds, as their makers name them (docs/alerts.md)
    "e-mail", "webhook", "webhooks", "slack", "apprise",
    # the APIs a stream speaks (streams/core/formats/): product names
    "responses", "chat", "completions", "anthropic", "messages",
    # providers whose habits the simulator's Chat scenarios imitate
    "azure", "openrouter",
}  # fmt: skip
CATALOGS = [
    ROOT / app / "locale" / "nl" / "LC_MESSAGES" / f"{domain}.po"
    for app, domain in (("dashboard", "django"), ("dashboard", "djangojs"), ("streams", "django"))
]
# inside a translation, shown as written: markup quoted as an example ("<img src=x>"), paths
# and media types ("application/json", "Europe/Amsterdam"), data in straight double quotes
# (a text's start, as the timeline quotes it); and identifiers
# ("metadata.events", "time_scale")
CODE_LIKE = re.compile(r'<[^>]*>|\S+/\S+|"[^"]*"?')
IDENTIFIER = re.compile(r"\w[._]\w")
PERCENTILE = re.compile(r"p\d{1,3}(\.\d+)?")
WORD = re.compile(r"[\w'’.-]*[A-Za-z][\w'’.-]*")
SKIP_TAGS = {"script", "style", "template", "textarea", "pre", "code"}
SHOWN_ATTRIBUTES = ("title", "placeholder", "aria-label", "alt")


class _Visible(HTMLParser):
    """The texts a reader sees: text nodes (outside scripts, styles and code) and the
    attributes a browser shows."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts, self.skipping = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIP_TAGS:
            self.skipping += 1
        for name, value in attrs:
            if name in SHOWN_ATTRIBUTES and value:
                self.texts.append(value.strip())

    def handle_endtag(self, tag):
        if tag in SKIP_TAGS and self.skipping:
            self.skipping -= 1

    def handle_data(self, data):
        if not self.skipping and data.strip():
            self.texts.append(" ".join(data.split()))


def visible_texts(page):
    parser = _Visible()
    parser.feed(page)
    return parser.texts


class Recorded(frozenset):
    """The history's strings (recorded_data), and all of them in one text to look a part up in
    at once."""

    def __init__(self, values):
        super().__init__()
        self.blob = "\x00".join(self)


def is_recorded(text, data):
    """Whether `text` is recorded data, shown whole or cut short ("…")."""
    part = text.removesuffix("…")
    if isinstance(data, Recorded):
        return part in data.blob
    return any(part in d for d in data)


def english_left(text, data):
    """The words of `text` a Dutch page should not have (empty: fine)."""
    if is_recorded(text, data):
        return []
    words = [w.strip("'’-.") for w in WORD.findall(CODE_LIKE.sub(" ", text))]
    return [w for w in words if len(w) > 1 and not _allowed(w) and w not in data]


def english_words(texts):
    """The words of a page's texts, as english_kept compares them."""
    return {w.strip("'’-.") for text in texts for w in WORD.findall(text)}


def english_kept(text, english, data):
    """The words of a Dutch `text` that the English page (its `english` words) has too and that
    Dutch does not use (DUTCH): English kept inside a translation ("Exact: nearest rank over
    elke stream"), unless it is data or a product term."""
    if is_recorded(text, data):
        return []
    words = [w.strip("'’-.") for w in WORD.findall(CODE_LIKE.sub(" ", text))]
    return [
        w
        for w in words
        if len(w) > 1 and w in english and w.lower() not in DUTCH and not _allowed(w)
        and w not in data and not IDENTIFIER.search(w)
    ]  # fmt: skip


PO_LINE = re.compile(r"^(msgctxt|msgid|msgid_plural|msgstr(?:\[\d+\])?)\s+(\".*\")$")


def catalog_entries(path):
    """(msgid, msgid_plural, msgstr) of each translated entry of a .po file (a plural's forms
    joined)."""
    entries, entry, key = [], {}, None
    for line in path.read_text().splitlines():
        line = line.strip()
        match = PO_LINE.match(line)
        if match:
            if match[1] in ("msgctxt", "msgid") and entry.get("msgstr"):
                entries.append(entry)
                entry = {}
            key = "msgstr" if match[1].startswith("msgstr") else match[1]
            joint = " " if key == "msgstr" and key in entry else ""
            entry[key] = entry.get(key, "") + joint + json.loads(match[2])
        elif line.startswith('"') and key:
            entry[key] += json.loads(line)
    entries.append(entry)
    return [
        (e["msgid"], e.get("msgid_plural", ""), e["msgstr"])
        for e in entries
        if e.get("msgid", "").strip() and e.get("msgstr", "").strip()
    ]


def _dutch_words():
    """The words our Dutch catalogs use as Dutch: in a translation whose English does not have
    them ("over" of "over 30 dagen", for "in 30 days"). A word a translation only kept from its
    English ("nearest" in "nearest rank over elke stream") is not among them."""
    words = set()
    for path in CATALOGS:
        for msgid, plural, msgstr in catalog_entries(path):
            kept = {w.lower() for w in WORD.findall(f"{msgid} {plural}")}
            words |= {w.strip("'’-.").lower() for w in WORD.findall(msgstr)} - kept
    return frozenset(words)


DUTCH = _dutch_words()


def _allowed(word):
    """A product term, a word Dutch spells the same, a file type or a percentile (p95)."""
    return word.lower() in ALLOWED or PERCENTILE.fullmatch(word) is not None


def recorded_data():
    """Every string stored in the history, and each of its words: data is shown as it was."""
    values = set()
    for row in Stream.objects.values_list(
        "prompt", "output_text", "final_text", "requested_model", "resolved_model",
        "error_message", "error_code", "routing_category", "routing_reasoning", "scenario",
    ):  # fmt: skip
        values.update(v for v in row if v)
    values.update(Event.objects.values_list("type", flat=True).distinct())
    values.update(KNOWN_TYPES)  # (the events admin's type filter offers the protocol's types)
    values.update(_finding_data())
    values.update(Conversation.objects.values_list("title", flat=True))
    values.update(Turn.objects.values_list("prompt", flat=True))
    for name, query in SavedView.objects.values_list("name", "query"):  # a view's, as typed
        values.update((name, query))
    values.update(get_user_model().objects.values_list("username", flat=True))
    values.update(Invitation.objects.values_list("email", flat=True))  # an address, as typed
    # the audit log's targets as they were named (a token's name, a price's pattern)
    values.update(AuditEntry.objects.values_list("target_label", flat=True))
    # scores and comments as given: type names (identifiers, as the API takes them), labels,
    # keys, comments
    values.update(ScoreType.objects.values_list("name", flat=True))
    # a project's own score types and prices as its admins wrote them (their pages)
    for description, categories in ScoreType.objects.values_list("description", "categories"):
        values.add(description)
        values.update(str(c.get("label")) for c in categories or () if isinstance(c, dict))
    for row in Price.objects.values_list("model_pattern", "note"):
        values.update(v for v in row if v)
    for row in Score.objects.values_list("label", "key", "comment"):
        values.update(v for v in row if v)
    values.update(Comment.objects.values_list("text", flat=True))
    # alert rules as named and scoped, silences' reasons: as typed
    from streams.models import Rule, Silence

    for row in Rule.objects.values_list("name", "requested_model", "resolved_model", "tag"):
        values.update(v for v in row if v)
    values.update(Silence.objects.values_list("reason", flat=True))
    # a categorical type's labels as defined (an evaluator's pass and fail), and evaluators,
    # online rules and evaluations as named and written (a reason is said when it is written)
    for categories in ScoreType.objects.values_list("categories", flat=True):
        values.update(c.get("label") for c in categories or () if isinstance(c, dict))
    values.update(Evaluator.objects.values_list("name", flat=True))
    values.update(OnlineRule.objects.values_list("name", flat=True))
    for row in Evaluation.objects.values_list("label", "reason"):
        values.update(v for v in row if v)
    for tags, session in Stream.objects.values_list("tags", "session"):
        values.update(tags or ())
        values.add(session)
    for data in Event.objects.values_list("data", flat=True):
        values.update(_strings(_json(data)))
    # notification channels as named, their targets as masked, and what was sent to them (in
    # the language of whoever sent it) and what their receivers answered
    for row in Channel.objects.values_list("name", "target_masked"):
        values.update(row)
    for row in Delivery.objects.values_list("subject", "last_answer"):
        values.update(v for v in row if v)
    values.update(_admin_data())
    # identifiers the playground offers, as the API takes them (every format's)
    for format in FORMATS:
        values.update(scenarios_of(format))
    values.update(MODELS)
    values.update(_month_abbreviations())
    values.update(_experiments_data())
    # each word as found and as english_left reads it (its ends' quotes, dashes and dots off)
    words = {x for v in values for w in WORD.findall(str(v)) for x in (w, w.strip("'’-."))}
    # shown whole (never word by word): a JSON field as the admin writes it, an event's data as
    # received, IANA zone names (the time zone selector's identifiers)
    whole = set(zoneinfo.available_timezones())
    for body, parts, tags in Stream.objects.values_list("request_body", "parts", "tags"):
        whole.update(json.dumps(v, ensure_ascii=False) for v in (body, parts, tags) if v)
    whole.update(Event.objects.values_list("data", flat=True))
    return Recorded({str(v) for v in values if v} | words | whole)


def _experiments_data():
    """Datasets, their items and experiments as made (names, texts, models, versions), and the
    reasoning efforts as the API takes them."""
    from streams.experiments.experiments import EFFORTS
    from streams.models import Dataset, DatasetItem, DatasetVersion, Experiment, Variant

    yield from EFFORTS
    for row in Dataset.objects.values_list("name", "description"):
        yield from row
    for number in DatasetVersion.objects.values_list("number", flat=True):
        yield f"v{number}"
    for value, *texts in DatasetItem.objects.values_list(
        "input", "instructions", "expected_output"
    ):
        yield from texts
        yield from _strings(value)
    yield from Experiment.objects.values_list("name", flat=True)
    for row in Variant.objects.values_list("name", "model", "instructions"):
        yield from row


def _finding_data():
    """What the findings quote: their codes, a text that is data (an event's type, a model's
    text) and the data in the checker's own words (their phrases' parameters), never those
    words themselves, which the pages say in their language."""
    for code, *texts, said in Finding.objects.values_list(
        "code", "expected", "got", "detail", "said"
    ):
        yield code
        for name, text in zip(("expected", "got", "detail"), texts, strict=True):
            phrase = Said.from_json((said or {}).get(name))
            yield from [text] if phrase is None else _parameters(phrase)


def _parameters(phrase):
    for value in dict(phrase.params).values():
        if isinstance(value, Said):
            yield from _parameters(value)
        else:
            yield str(value)


def _admin_data():
    """What the admin shows of the rows beyond what the pages show: stored strings (file names,
    upstream metadata, token names and prefixes, hashes) and group names. (Not an import's
    error: the import page says it in its language.)"""
    fields = {
        Stream: (
            "upstream_id",
            "upstream_url",
            "content_type",
            "routing_source",
            "runner",
            "price_ref",
            "cost_currency",
        ),
        Price: ("model_pattern", "currency", "note"),
        Event: ("event_name", "sse_id"),
        Capture: ("filename",),
        ImportJob: ("model",),
        ImportFile: ("filename",),
        ApiToken: ("name", "prefix", "digest"),
        ScoreType: ("name", "description"),
        ShareLink: ("digest", "session"),
        Group: ("name",),
    }
    for model, names in fields.items():
        for row in model.objects.values_list(*names):
            yield from (v for v in row if v)
    yield from (str(t) for t in ApiToken.objects.select_related("user"))
    yield from (str(p) for p in Price.objects.all())  # (a pattern, a currency code and a date)


def _json(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _strings(value):
    """Every string inside a decoded JSON value (ids, names, texts, arguments)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _month_abbreviations():
    """Django's Dutch month abbreviations as its `M` format writes them ("Dec", "Mrt"): a date
    reads the same in both languages for some months."""
    with translation.override("nl"):
        return {str(m).title() for m in MONTHS_3.values()}


# Figures are grouped one way in every language: thousands by a narrow no-break space
# ("1\u202f981", "200\u202f000"). Not "200,000" (an English page), "200.000" (a Dutch one:
# Django's Dutch grouping, which an English reader takes for two hundred) or "1962385". (Not a
# figure: a part of a date, time, id "#1234", version or name.)
UNGROUPED = re.compile(r"(?<![\w#.,:/+\u202f-])\d{4,}(?![\w.,:/\u202f-]?\d)")
GROUPED_BY = {
    "en": re.compile(r"(?<![\w.])\d{1,3}(?:[,\u00a0]\d{3})+(?![\d,])"),
    "nl": re.compile(r"(?<![\w.-])\d{1,3}(?:[.\u00a0]\d{3})+(?![\d.])"),
}
# quoted protocol text ("a 'retry: 1000' block") is shown as written
QUOTED = re.compile(r"(?:^|(?<=[\s(]))'[^']*'")


def misgrouped(text, language):
    """The figures of `text` not grouped by the one rule."""
    text = QUOTED.sub(" ", text)
    return UNGROUPED.findall(text) + GROUPED_BY[language].findall(text)


# A date in the other language's form: on a Dutch page ISO's "2026-12-05" or month first
# ("Dec 5"); on an English one day first ("5-12-2026", "5 dec"); on either a month and day in
# digits without a year ("12-05", which a Dutch reader takes for 12 May).
NO_YEAR = r"(?<![\w.:-])\d{2}-\d{2}(?![\w:-])"
OTHER_DATE_FORM = {
    "nl": re.compile(
        r"(?<![\w-])\d{4}-\d{2}-\d{2}\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
        rf"\s+\d{{1,2}}\b|{NO_YEAR}"
    ),
    "en": re.compile(
        r"(?<![\w-])\d{1,2}-\d{1,2}-\d{4}\b|\b\d{1,2}\s+(?:jan|feb|mrt|apr|mei|jun|jul|aug|sep|okt"
        rf"|nov|dec)\b|{NO_YEAR}"
    ),
}


# A time written as UTC ("07:06 UTC", "2026-12-05 UTC"): a digit, then the zone's name.
UTC_TIME = re.compile(r"\d\s*UTC\b")
