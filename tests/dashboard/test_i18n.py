"""The pages in Dutch, with nothing of their own left in English, and data never translated.

Every page route of Django's resolver (the Django admin's aside) is fetched as a staff member
and as a plain user, once with `Accept-Language: en` and once with `nl`, over a small history
(imported real captures, one the checker faults, a few days of recorded streams, a
conversation, an import job). A visible text of a Dutch page (a text node, or a title,
placeholder, aria-label or alt) is left untranslated when it is the same in the English page
and still holds an English word, or when it keeps a word of the English page that Dutch does
not use ("Exact: nearest rank over elke stream"), unless it is recorded data (anything stored:
prompts, outputs, event types, model ids, errors; a finding's data, not the checker's words) or
a product term (ALLOWED). The same walk finds figures grouped another way than by a narrow
no-break space and dates in the other language's form; one in Kolkata's zone finds times left
in UTC. (What it looks for: tests/support/i18n.py; what the scripts draw, charts included:
tests/e2e/test_dutch_e2e.py.) A route the walk cannot fill fails with its name, as the other
walkers.

The Django admin is walked the same way as a superuser: its index, each app's index, and for
every model registered by this project and by django.contrib.auth its changelist, its add form
(where adding is allowed) and one object's change form. Django translates its own chrome; the
models' and fields' names, choices and the ModelAdmins' columns are ours (streams/locale).
"""

import datetime as dt
import html
import json
import re
from decimal import Decimal

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import translation
from django.utils.text import capfirst

from dashboard import timezone as tzmod
from dashboard.language import is_data
from dashboard.models import Conversation, SavedView, Turn
from streams import evaluate
from streams.access import invitations, shares
from streams.core.checks import PHRASES
from streams.evaluate import online
from streams.ingest import importer
from streams.management.commands.seed_demo import seed
from streams.models import (
    ApiToken,
    Finding,
    ImportFile,
    ImportJob,
    Invitation,
    OnlineRule,
    Price,
    Project,
    ScoreType,
    ShareLink,
    Stream,
)
from streams.notify import channels as notify_channels
from streams.notify import deliver as notify_deliver
from streams.store import scores
from tests.support import paths
from tests.support.alerts import walk_objects
from tests.support.captures import small_stream, sse
from tests.support.experiments import made as made_experiments
from tests.support.i18n import (
    CATALOGS,
    OTHER_DATE_FORM,
    UTC_TIME,
    Recorded,
    catalog_entries,
    english_kept,
    english_left,
    english_words,
    is_recorded,
    misgrouped,
    recorded_data,
    visible_texts,
)
from tests.support.routes import Unfillable, django_routes, fill

FIXTURES = paths.CAPTURES
CAPTURES = ("openai_text_basic.sse", "openai_function_call.sse", "openai_refusal.sse")


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
        # share links of the user: to a stream, and to the session (streams/access/shares.py)
        share_links = {}
        for target in ({"stream": streams[-1].pk}, {"session": "sessie-een"}):
            link, secret = shares.create(user, **target)
            share_links[secret] = list(shares.streams_of(link).values_list("pk", flat=True))
        # an invitation to the user's project, open (its page is walked as whoever holds it)
        invitation_keys = [
            invitations.invite(user, Project.personal(user), "gast@example.com", "member")[1]
        ]
        # a token of the user's, with limits (the token page says what it used of them)
        ApiToken.issue(user, name="ci-token", requests_per_minute=60, spend_cap_day_nanos=10**9)
        # the user's project's own score type and price (its pages: tests/dashboard/views/
        # test_definitions.py)
        own = Project.personal(user)
        ScoreType.objects.create(
            project=own, name="toon", kind="categorical",
            categories=[{"label": "bot", "value": 0}, {"label": "vriendelijk", "value": 1}],
        )  # fmt: skip
        Price.objects.create(
            project=own, model_pattern="eu-gpt-*", currency="EUR",
            effective_from=dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
            input_per_million=Decimal("0.25"), output_per_million=1,
        )  # fmt: skip
        # an alert rule of the user's, firing, in the history and muted (the alert pages)
        alerts = walk_objects(user, Project.personal(user))
        # a notification channel of each, with a test sent to it and a failed delivery
        channel_ids = []
        for owner in (staff, user):
            channel, _ = notify_channels.create(
                Project.personal(owner), "oproep", "email", "dienst@example.com", created_by=owner
            )
            notify_deliver.send_test(channel, owner)
            channel_ids.append(channel.pk)
        # a dataset, an experiment and two finished runs of each (docs/experiments.md)
        walked_experiments = [
            made_experiments(owner, Project.personal(owner)) for owner in (staff, user)
        ]
        # an evaluator of the user's that has scored their first stream, and an online rule
        # stopped at its spend cap (its page says so)
        evaluator = evaluate.save(
            Project.personal(user), name="lengte", kind="length", config={"max": 10}, user=user
        )
        mine = next(s for s in streams if s.user_id == user.pk)
        evaluate.apply(evaluator, stream=mine)
        online_rule = online.create(Project.personal(user), user=user, name="steekproef",
                             evaluators=[evaluator], spend_cap_nanos=1)  # fmt: skip
        OnlineRule.objects.filter(pk=online_rule.pk).update(stopped_reason=online.SPEND_CAP_REACHED)
        yield {
            "score_type_ids": list(
                ScoreType.objects.filter(project=own).values_list("pk", flat=True)
            ),
            "price_ids": list(Price.objects.filter(project=own).values_list("pk", flat=True)),
            **alerts,
            "channel_ids": channel_ids,
            "experiments": walked_experiments,
            "evaluator_ids": [evaluator.pk],
            "online_rule_ids": [online_rule.pk],
            "token_ids": list(ApiToken.objects.values_list("pk", flat=True)),
            "invitation_keys": invitation_keys,
            "project_slugs": [Project.personal(u).slug for u in (staff, user)],
            "member_ids": [staff.pk, user.pk],
            "invitation_ids": list(Invitation.objects.values_list("pk", flat=True)),
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
    "dataset_id": lambda h, bound: [m.dataset.pk for m in h["experiments"]],
    "experiment_id": lambda h, bound: [m.experiment.pk for m in h["experiments"]],
    "run_id": lambda h, bound: [m.run.pk for m in h["experiments"]],
    "other_run_id": lambda h, bound: [
        m.earlier.pk for m in h["experiments"] if m.run.pk == bound["run_id"]
    ],
    "token_id": lambda h, bound: h["token_ids"],
    "channel_id": lambda h, bound: h["channel_ids"],
    "project_slug": lambda h, bound: h["project_slugs"],
    "user_id": lambda h, bound: h["member_ids"],
    "invitation_id": lambda h, bound: h["invitation_ids"],
    "score_type_id": lambda h, bound: h["score_type_ids"],
    "price_id": lambda h, bound: h["price_ids"],
    "key": lambda h, bound: h["invitation_keys"],
    "rule_id": lambda h, bound: h["rule_ids"],
    "silence_id": lambda h, bound: h["silence_ids"],
    "evaluator_id": lambda h, bound: h["evaluator_ids"],
    "online_rule_id": lambda h, bound: h["online_rule_ids"],
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


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "user"])
def test_dates_are_written_in_the_pages_language(history, walked, who):
    report = faults(history, walked[who][0], lambda text, lang: OTHER_DATE_FORM[lang].findall(text))
    assert not report, f"{len(report)} date(s) in the other language's form:\n" + "\n".join(report)


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


STATIC_JS = paths.REPO / "static" / "js"
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
    translated = {(msgid, plural) for msgid, plural, _ in catalog_entries(CATALOGS[1])}
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
    # the admin shows a finding's texts as stored (English): data there
    stored = Finding.objects.values_list("expected", "got", "detail")
    data = Recorded(history["data"] | {text for row in stored for text in row if text})
    for path in paths:
        a, b = en.get(path), nl.get(path)
        if a.status_code != 200 or b.status_code != 200:
            errors.append(f"{path}: {a.status_code} / {b.status_code}")
            continue
        english = set(visible_texts(a.content.decode()))
        for text in visible_texts(b.content.decode()):
            if text in english and text not in theirs:
                if words := english_left(text, data):
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


# phrases that read the same in Dutch (a unit, a protocol name)
SAME_IN_DUTCH = {"seconds", "json_of_type"}


@pytest.mark.django_db
def test_the_checkers_words_are_said_in_dutch_its_data_as_recorded(history):
    """A finding's expected, got and detail: the checker's own words in the page's language
    ("connection closed", "missing so far: 6"), the data they quote as recorded, the API in
    English; a row from before the phrases (Finding.said empty) as stored."""
    with translation.override("nl"):
        untranslated = [
            key for key, phrase in PHRASES.items()
            if key not in SAME_IN_DUTCH and _in_english(key) == _said(key)
        ]  # fmt: skip
    assert not untranslated, untranslated
    stream_id = history["stream_ids"][1]  # the user's faulty capture
    client = _client(history["user"], "nl")
    page = html.unescape(client.get(f"/streams/{stream_id}/").content.decode())
    assert "verbinding gesloten" in page and "connection closed" not in page
    assert "tot nu toe ontbreekt: 6" in page and "missing so far" not in page
    assert "&#x27;Halo Utrecht&#x27;" in client.get(f"/streams/{stream_id}/").content.decode()
    api = Client()
    api.force_login(history["user"])
    response = api.get(f"/streams/{stream_id}.json", HTTP_ACCEPT_LANGUAGE="nl")
    served = json.loads(b"".join(response.streaming_content))
    assert {"connection closed", "missing so far: 6"} <= {
        text for f in served["findings"] for text in (f["got"], f["detail"])
    }
    Finding.objects.filter(stream_id=stream_id).update(said={})  # as a row from before
    page = html.unescape(client.get(f"/streams/{stream_id}/").content.decode())
    assert "connection closed" in page and "missing so far: 6" in page


def _in_english(key):
    with translation.override("en"):
        return _said(key)


class _Filled(dict):
    def __missing__(self, key):
        return "x"


def _said(key):
    """A phrase with every parameter filled (a plural's by 2)."""
    return PHRASES[key] % _Filled(n=2)


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
