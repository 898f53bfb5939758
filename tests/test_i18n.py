"""The pages in Dutch, with nothing of their own left in English, and data never translated.

Every page route of Django's resolver (the Django admin's aside) is fetched as a staff member
and as a plain user, once with `Accept-Language: en` and once with `nl`, over a small history
(imported real captures, a conversation, an import job). A visible text of a Dutch page (a
text node, or a title, placeholder, aria-label or alt) that is the same in the English page and
still holds an English word is left untranslated, unless it is recorded data (anything stored:
prompts, outputs, event types, model ids, errors) or a product term (ALLOWED). A route the walk
cannot fill fails with its name, as the other walkers.

The Django admin is walked the same way as a superuser: its index, each app's index, and for
every model registered by this project and by django.contrib.auth its changelist, its add form
(where adding is allowed) and one object's change form. Django translates its own chrome; the
models' and fields' names, choices and the ModelAdmins' columns are ours (streams/locale).
"""

import datetime as dt
import html
import json
import re
import zoneinfo
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import translation
from django.utils.dates import MONTHS_3
from django.utils.text import capfirst

from dashboard import timezone as tzmod
from dashboard.language import is_data
from dashboard.models import Conversation, SavedView, Turn
from streams.ingest import importer
from streams.management.commands.seed_demo import seed
from streams.models import (
    ApiToken,
    Capture,
    Comment,
    Event,
    Finding,
    ImportFile,
    ImportJob,
    Price,
    Score,
    ScoreType,
    ShareLink,
    Stream,
)
from streams.simulator import SCENARIOS
from streams.simulator.models import MODELS
from streams.store import scores, shares
from tests.support.captures import small_stream, sse
from tests.support.routes import Unfillable, django_routes, fill

FIXTURES = Path(__file__).parent / "fixtures" / "streams"
CAPTURES = ("openai_text_basic.sse", "openai_function_call.sse", "openai_refusal.sse")

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
    "details", "code", "info", "error", "warning", "min", "max", "totaal", "events", "event",
    "output", "input", "sessie", "prompt", "tool", "reasoning", "server", "client", "pending",
    "streaming", "scenario", "enter", "shift", "esc", "per", "protocol", "link", "links",
    "histogram", "simulator", "types", "labels", "extra", "offline", "had", "band", "socket",
}  # fmt: skip
CATALOGS = [
    Path(__file__).parent.parent / app / "locale" / "nl" / "LC_MESSAGES" / f"{domain}.po"
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


def _catalog_entries(path):
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
        for msgid, plural, msgstr in _catalog_entries(path):
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
    values.update(Finding.objects.values_list("code", flat=True).distinct())
    values.update(Finding.objects.values_list("detail", flat=True).distinct())
    values.update(Conversation.objects.values_list("title", flat=True))
    values.update(Turn.objects.values_list("prompt", flat=True))
    for name, query in SavedView.objects.values_list("name", "query"):  # a view's, as typed
        values.update((name, query))
    values.update(get_user_model().objects.values_list("username", flat=True))
    # scores and comments as given: type names (identifiers, as the API takes them), labels,
    # keys, comments
    values.update(ScoreType.objects.values_list("name", flat=True))
    for row in Score.objects.values_list("label", "key", "comment"):
        values.update(v for v in row if v)
    values.update(Comment.objects.values_list("text", flat=True))
    for tags, session in Stream.objects.values_list("tags", "session"):
        values.update(tags or ())
        values.add(session)
    for data in Event.objects.values_list("data", flat=True):
        values.update(_strings(_json(data)))
    values.update(_admin_data())
    values.update(SCENARIOS)  # identifiers the playground offers, as the API takes them
    values.update(MODELS)
    values.update(_month_abbreviations())
    # each word as found and as english_left reads it (its ends' quotes, dashes and dots off)
    words = {x for v in values for w in WORD.findall(str(v)) for x in (w, w.strip("'’-."))}
    # shown whole (never word by word): a JSON field as the admin writes it, an event's data as
    # received, IANA zone names (the time zone selector's identifiers)
    whole = set(zoneinfo.available_timezones())
    for body, parts, tags in Stream.objects.values_list("request_body", "parts", "tags"):
        whole.update(json.dumps(v, ensure_ascii=False) for v in (body, parts, tags) if v)
    whole.update(Event.objects.values_list("data", flat=True))
    return Recorded({str(v) for v in values if v} | words | whole)


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
        Finding: ("expected", "got"),
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


@pytest.fixture(scope="module")
def history(django_db_setup, django_db_blocker):
    # one history for the module, in an outer transaction rolled back at the end (each case
    # runs in its own savepoint): nothing of it is left for the modules after this one
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        users = get_user_model().objects
        staff = users.create_user("i18n-staff", password="pw-staff-1", is_staff=True)
        user = users.create_user("i18n-user", password="pw-user-1")
        streams = []
        for owner in (staff, user):
            for name in CAPTURES:
                streams += importer.import_capture((FIXTURES / name).read_bytes(), name, user=owner)
        for s in streams:
            Stream.objects.filter(pk=s.pk).update(session="sessie-een", tags=["demo"])
        # a stream each the checker faults in its own words (a skipped number, no end), walked
        # first; and a few days of recorded streams of every status, with their TTFTs and
        # durations, for the analytics pages' tables
        faulty = [
            s.pk
            for owner in (staff, user)
            for s in importer.import_capture(faulty_capture(), "fouten.sse", user=owner)
        ]
        seed(30, days=2, seed=7, events_per_stream=40, users=(staff.username, user.username))
        conversations = {}
        for owner in (staff, user):
            c = Conversation.objects.create(user=owner, title="Utrecht")
            mine = [s for s in streams if s.user_id == owner.pk]
            turn = Turn.objects.create(
                conversation=c, position=0, prompt="Utrecht?", stream=mine[0]
            )
            conversations[c.pk] = [turn.pk]
        jobs = [ImportJob.objects.create(user=owner).pk for owner in (staff, user)]
        # the admin's: a superuser, and a row of each model the walk opens that has none yet
        superuser = users.create_superuser("i18n-admin", password="pw-admin-1")
        ApiToken.issue(staff, name="ci-script")
        Price.objects.create(
            model_pattern="gpt-oss-*", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            currency="EUR", input_per_million=Decimal("0.5"), output_per_million=2,
            note="volgens contract",
        )  # fmt: skip
        ImportFile.objects.create(
            job_id=jobs[0], position=0, filename="gesprek.sse", size=12, status="failed",
            error="Cannot import gesprek.sse: the file is empty",
            error_reason={"code": "empty", "params": {}},
        )  # fmt: skip
        if not Finding.objects.exists():
            Finding.objects.create(stream=streams[0], code="missing_terminal", severity="error")
        Group.objects.create(name="i18n-groep")
        views = [
            SavedView.objects.create(owner=owner, page="latency", name="mijn weergave",
                                     query="range=7d", shared=shared).pk
            for owner, shared in ((staff, True), (user, False))
        ]  # fmt: skip
        # a thumbs up, a numeric score and a comment on each one's first stream: the feedback
        # panel, the list's column and the analytics' scores all have something to say
        ScoreType.objects.create(name="sterren", kind="numeric", minimum=1, maximum=5)
        score_ids = {}
        for owner in (staff, user):
            first = next(s for s in streams if s.user_id == owner.pk)
            made = scores.give(first.pk, author=owner, name="thumbs", value=1, source="person")
            scores.give(first.pk, author=owner, name="sterren", value=4, source="api", key="k")
            scores.comment(first.pk, author=owner, text="Goed antwoord.", source="person")
            score_ids[first.pk] = [made.pk]
        # share links of the user: to a stream, and to the session (streams/store/shares.py)
        share_links = {}
        for target in ({"stream": streams[-1].pk}, {"session": "sessie-een"}):
            link, secret = shares.create(user, **target)
            share_links[secret] = list(shares.streams_of(link).values_list("pk", flat=True))
        yield {
            "share_links": share_links,
            "link_ids": list(ShareLink.objects.values_list("pk", flat=True)),
            "staff": staff,
            "user": user,
            "superuser": superuser,
            "stream_ids": faulty + [s.pk for s in streams],
            "conversations": conversations,
            "jobs": jobs,
            "views": views,
            "score_ids": score_ids,
            "data": recorded_data(),
        }
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        outer.__exit__(None, None, None)


def faulty_capture():
    """A short text stream with a delta missing and no terminal event."""
    events = small_stream("Hallo Utrecht")
    del events[6]
    return sse(*events[:-1])


FILL = {
    # (through a share link: the streams it shows)
    "stream_id": lambda h, bound: h["share_links"].get(bound.get("secret"), h["stream_ids"]),
    "other_id": lambda h, bound: [pk for pk in h["stream_ids"] if pk != bound["stream_id"]][:1],
    "index": lambda h, bound: [0, 1],
    "job_id": lambda h, bound: h["jobs"],
    "session": lambda h, bound: ["sessie-een"],
    "conversation_id": lambda h, bound: list(h["conversations"]),
    "view_id": lambda h, bound: h["views"],
    "score_id": lambda h, bound: h["score_ids"].get(bound["stream_id"], []),
    "turn_id": lambda h, bound: h["conversations"][bound["conversation_id"]],
    "secret": lambda h, bound: list(h["share_links"]),
    "link_id": lambda h, bound: h["link_ids"],
}


def page_paths(history):
    """Every GET page path, filled from the history (admin and data routes apart)."""
    paths, unfilled = [], []
    for route in django_routes():
        if route.text.startswith("admin/") or route.model is not None:
            continue
        try:
            found = fill(route, lambda r, name, bound: _fill(history, name, bound), limit=4)
        except Unfillable as exc:
            unfilled.append(str(exc))
            continue
        paths += [p for p in found if not (is_data(p) or p.startswith(("/jsi18n/", "/i18n/")))]
    assert not unfilled, "\n".join(unfilled)
    return sorted(set(paths))


def _fill(history, name, bound):
    maker = FILL.get(name)
    return None if maker is None else maker(history, bound)


def _client(user, language):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client


@pytest.fixture(scope="module")
def walked(history, django_db_blocker):
    """Every page as staff and as a user, each fetched once in English and once in Dutch:
    {who: ([(path, English texts, Dutch texts)], [paths that failed])}."""
    found = {}
    with django_db_blocker.unblock():
        for who in ("staff", "user"):
            en, nl = _client(history[who], "en"), _client(history[who], "nl")
            pages, errors = [], []
            for path in page_paths(history):
                a, b = en.get(path), nl.get(path)
                if b.status_code >= 500:
                    errors.append(f"{path}: {b.status_code}")
                if "text/html" not in b.get("Content-Type", "") or b.status_code != a.status_code:
                    continue
                pages.append(
                    (path, visible_texts(a.content.decode()), visible_texts(b.content.decode()))
                )
            found[who] = (pages, errors)
    return found


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "user"])
def test_no_page_keeps_english_in_dutch(history, walked, who):
    pages, errors = walked[who]
    left = {}
    for path, english, dutch in pages:
        same, words = set(english), english_words(english)
        for text in dutch:
            found = english_left(text, history["data"]) if text in same else []
            found = found or english_kept(text, words, history["data"])
            if found:
                left.setdefault(text, (path, found))
    assert not errors, errors
    report = [f"{path}: {text!r} ({', '.join(words)})" for text, (path, words) in left.items()]
    assert not report, f"{len(report)} English text(s) left in Dutch pages:\n" + "\n".join(
        sorted(report)
    )


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


def faults(history, pages, check):
    """What `check(text, language)` finds in the walked pages' texts (English and Dutch, recorded
    data apart), one line each."""
    found = {}
    for path, english, dutch in pages:
        for language, texts in (("en", english), ("nl", dutch)):
            for text in texts:
                if (bad := check(text, language)) and not is_recorded(text, history["data"]):
                    found.setdefault((language, text), (path, bad))
    return sorted(
        f"{path} ({language}): {text!r} ({', '.join(bad)})"
        for (language, text), (path, bad) in found.items()
    )


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "user"])
def test_figures_are_grouped_one_way_in_both_languages(history, walked, who):
    report = faults(history, walked[who][0], misgrouped)
    assert not report, f"{len(report)} figure(s) grouped another way:\n" + "\n".join(report)


# A date in the other language's form: on a Dutch page ISO's "2026-12-05" or month first
# ("Dec 5"; "12-05", which a Dutch reader takes for 12 May); on an English one day first
# ("5-12-2026", "5 dec").
OTHER_DATE_FORM = {
    "nl": re.compile(
        r"(?<![\w-])\d{4}-\d{2}-\d{2}\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\b"
    ),
    "en": re.compile(
        r"(?<![\w-])\d{1,2}-\d{1,2}-\d{4}\b|\b\d{1,2}\s+(?:jan|feb|mrt|apr|mei|jun|jul|aug|sep|okt|nov|dec)\b"
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "user"])
def test_dates_are_written_in_the_pages_language(history, walked, who):
    report = faults(history, walked[who][0], lambda text, lang: OTHER_DATE_FORM[lang].findall(text))
    assert not report, f"{len(report)} date(s) in the other language's form:\n" + "\n".join(report)


# A time written as UTC ("07:06 UTC", "2026-12-05 UTC"): a digit, then the zone's name.
UTC_TIME = re.compile(r"\d\s*UTC\b")


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "user"])
def test_no_page_shows_utc_times_in_another_zone(history, who):
    """Every page in a zone that is not UTC (Kolkata's, half an hour off the UTC hours) shows
    its times in that zone: none is named UTC, and no stream's UTC time of day (to the second)
    is on it."""
    client = _client(history[who], "en")
    client.cookies[tzmod.COOKIE] = "Asia/Kolkata"
    in_utc = {
        when.astimezone(dt.UTC).strftime("%H:%M:%S")
        for when in Stream.objects.values_list("created_at", flat=True)
    }
    found = {}
    for path in page_paths(history):
        response = client.get(path)
        page = response.content.decode()
        if "text/html" not in response.get("Content-Type", ""):
            continue
        assert "<html" not in page or 'data-time-zone="Asia/Kolkata"' in page, path
        for text in visible_texts(page):
            if text in history["data"]:
                continue
            if UTC_TIME.search(text) or any(clock in text for clock in in_utc):
                found.setdefault(text, path)
    report = [f"{path}: {text!r}" for text, path in found.items()]
    assert not report, f"{len(report)} time(s) in UTC on Kolkata's pages:\n" + "\n".join(
        sorted(report)
    )


STATIC_JS = Path(__file__).parent.parent / "static" / "js"
# what the scripts translate: t("…") and tn("…", "…", n) of static/js/i18n.js, by whatever
# name a module imports them ("import { t as word }")
JS_STRING = r'("(?:[^"\\]|\\.)*"(?:\s*\+\s*"(?:[^"\\]|\\.)*")*)'  # "…" + "…"


def _js_string(literals):
    """The value of `"a" + "b"`: its literals' values, joined."""
    return "".join(json.loads(x) for x in re.findall(r'"(?:[^"\\]|\\.)*"', literals))


def script_strings():
    """{(msgid, plural): file} of every string a script hands to t or tn."""
    found = {}
    for path in sorted(STATIC_JS.rglob("*.js")):
        source = path.read_text()
        names = {"t": "t", "tn": "tn"}
        for imported in re.findall(r"import \{([^}]*)\} from \"[./]+/?i18n\.js\"", source):
            for name in imported.split(","):
                original, _, alias = (p.strip() for p in name.partition(" as "))
                if original in names and alias:
                    names[original] = alias
        if path.name == "i18n.js" or not re.search(r"from \"[./]+/?i18n\.js\"", source):
            continue
        for msgid in re.findall(rf"\b{names['t']}\(\s*{JS_STRING}", source):
            found[(_js_string(msgid), "")] = path.name
        for msgid, plural in re.findall(rf"\b{names['tn']}\(\s*{JS_STRING},\s*{JS_STRING}", source):
            found[(_js_string(msgid), _js_string(plural))] = path.name
    return found


def test_every_string_the_scripts_translate_has_its_dutch():
    """The chart axes' and the scripts' words are in the Dutch catalog (djangojs.po), so no
    script falls back to English: "time (Europe/Amsterdam)" on a Dutch chart was one."""
    translated = {(msgid, plural) for msgid, plural, _ in _catalog_entries(CATALOGS[1])}
    strings = script_strings()
    assert len(strings) > 100 and ("time", "") in strings  # the scan sees the scripts' words
    missing = sorted(
        f"{name}: {key[0]!r}" for key, name in strings.items() if key not in translated
    )
    assert not missing, f"{len(missing)} script string(s) without Dutch:\n" + "\n".join(missing)


# The admin's pages the walk opens, per app: every page of ours; django.contrib.auth's
# changelists only, as its add and change forms list every permission by the name Django stored
# in English when it migrated ("Can add stream": data Django never translates) and Django's Dutch
# catalog lacks its user form's "After you’ve created a user…". django-axes's (login attempts)
# stay out: it has no Dutch catalog (on the index, its names are Django's third-party words).
ADMIN_WALK = {"streams": ("changelist", "add", "change"), "auth": ("changelist",)}
# Django's own admin texts its Dutch leaves in English: a boolean icon's alt, the search icon's
# alt, and the app list's table headings (new in Django 5.1, not yet in its Dutch catalog).
DJANGO_UNTRANSLATED = {
    "True",
    "False",
    "Search",
    "Model name",
    "Add link",
    "Change or view list link",
}


def admin_paths(history):
    """The admin's index, each walked app's index, and per registered model of those apps the
    pages ADMIN_WALK names (an add form only where adding is allowed)."""
    request = RequestFactory().get("/admin/")
    request.user = history["superuser"]
    paths, empty = [reverse("admin:index")], []
    for model, model_admin in admin.site._registry.items():
        app, name = model._meta.app_label, model._meta.model_name
        pages = ADMIN_WALK.get(app, ())
        if pages:
            paths.append(reverse("admin:app_list", args=[app]))
        if "changelist" in pages:
            paths.append(reverse(f"admin:{app}_{name}_changelist"))
        if "add" in pages and model_admin.has_add_permission(request):
            paths.append(reverse(f"admin:{app}_{name}_add"))
        if "change" in pages:
            obj = model._default_manager.order_by("pk").first()
            if obj is None:
                empty.append(model._meta.label)
            else:
                paths.append(reverse(f"admin:{app}_{name}_change", args=[quote(obj.pk)]))
    assert not empty, f"no row to open the change form of: {empty}"
    return sorted(set(paths))


def _not_walked():
    """The names the index shows of the apps the walk leaves out (their own words)."""
    names = set()
    for model in admin.site._registry:
        if model._meta.app_label not in ADMIN_WALK:
            names.add(str(model._meta.app_config.verbose_name))
            names.add(capfirst(str(model._meta.verbose_name_plural)))
    return names


@pytest.mark.django_db
def test_the_admin_keeps_no_english_in_dutch(history):
    en, nl = _client(history["superuser"], "en"), _client(history["superuser"], "nl")
    left, errors = {}, []
    paths = admin_paths(history)
    theirs = DJANGO_UNTRANSLATED | _not_walked()
    for path in paths:
        a, b = en.get(path), nl.get(path)
        if a.status_code != 200 or b.status_code != 200:
            errors.append(f"{path}: {a.status_code} / {b.status_code}")
            continue
        english = set(visible_texts(a.content.decode()))
        for text in visible_texts(b.content.decode()):
            if text in english and text not in theirs:
                if words := english_left(text, history["data"]):
                    left.setdefault(text, (path, words))
    assert not errors, errors
    assert {"/admin/streams/stream/add/", "/admin/auth/user/"} <= set(paths)
    assert any(p.startswith("/admin/streams/stream/") and p.endswith("/change/") for p in paths)
    report = [f"{path}: {text!r} ({', '.join(words)})" for text, (path, words) in left.items()]
    assert not report, f"{len(report)} English text(s) left in the Dutch admin:\n" + "\n".join(
        sorted(report)
    )


@pytest.mark.django_db
def test_the_checks_see_what_they_are_for():
    page = '<p title="Recorded streams">Streams</p><script>var x = "Hidden text";</script>'
    assert visible_texts(page) == ["Recorded streams", "Streams"]
    assert english_left("Recorded streams", set()) == ["Recorded"]
    assert english_left("Opgenomen streams", set()) == ["Opgenomen"]  # (only same-in-both count)
    assert english_left("Tell me about Utrecht", {"Tell me about Utrecht"}) == []
    assert english_left("TTFT p50 12,5 ms", set()) == []


@pytest.mark.django_db
def test_data_is_never_translated(history):
    """The API, the exports and a page's data requests answer in English whatever the request
    asks for; a page answers in the language asked for, and says so."""
    client = _client(history["staff"], "nl")
    page = client.get("/")
    assert page["Content-Language"] == "nl" and '<html lang="nl"' in page.content.decode()
    stream_id = history["stream_ids"][0]
    for path in (f"/streams/{stream_id}.json", f"/streams/{stream_id}/timing.json"):
        response = client.get(path)
        assert response.status_code == 200 and response.get("Content-Language") != "nl", path
    missing = client.get("/api/streams/999999/", HTTP_AUTHORIZATION="Bearer nope")
    assert b"Nederlands" not in missing.content
    assert html.unescape(missing.content.decode()).isascii()


@pytest.mark.django_db
def test_the_switcher_wins_over_the_browser(history):
    client = _client(history["user"], "en")
    response = client.post("/i18n/setlang/", {"language": "nl", "next": "/"})
    assert response.status_code == 302
    assert '<html lang="nl"' in client.get("/").content.decode()
