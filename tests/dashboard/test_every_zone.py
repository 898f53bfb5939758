"""Every time zone the selector offers, on the pages: none of them fails, and each page is
rendered in the zone by its own name (dashboard/timezone.py).

The selector offers every zone the browser knows and the server accepts (`timezone.available`,
which `set_time_zone` checks): all of them are tried on the analytics pages, whose reports take
the zone (their days, buckets and custom bounds are the zone's); every page route (Django's
resolver walked, tests/support/routes.py) is tried in the zones at the ends of each way a zone
can be unusual. Django names a zone whose offset never changes by its abbreviation ("-12" for
Etc/GMT+12, "+14" for Etc/GMT-14), which is no zone's name: a report handed it answered 500,
and the choice was remembered.

A page reads a zone two ways: its name, as text (the selector, `data-time-zone`, the usage
page's CSV link), and its clock, through the zone's offsets, DST and
abbreviations at the instants the page buckets and shows (`Scope.zone`, Django's localtime)
and the abbreviations the scripts get (`timezone.abbreviations`). Zones whose clocks read the
same at every such instant draw the same report, so the analytics pages are rendered once per
such class of zones (`zone_classes`: about 130 of the 600), in the class's longest name; and
every zone's name is checked on a page of its own.
"""

import contextlib
import datetime as dt
import re
import zoneinfo
from urllib.parse import quote

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from dashboard import timezone as tzmod
from dashboard.forms.analytics import RangeForm
from dashboard.forms.ranges import PRESETS
from dashboard.language import is_data
from dashboard.models import Conversation, SavedView, Turn
from streams import evaluate
from streams.access import invitations, shares
from streams.evaluate import online
from streams.ingest import importer
from streams.models import ApiToken, ImportJob, Price, Project, ScoreType, Silence, Stream
from streams.models import Rule as AlertRule
from streams.notify import channels
from streams.store import scores
from tests.conftest import FIXTURES
from tests.support.experiments import made as made_experiments
from tests.support.routes import Unfillable, django_routes, fill

NOW = dt.datetime.now(dt.UTC)
# The pages whose reports are built in the page's zone (the list only formats times: it is
# walked below with the rest), each in one zone of every class (`zone_classes`).
ZONED_PAGES = ("/latency/", "/routing/", "/usage/", "/analytics/")
# One zone of each way a zone is unusual: the ends of the offsets (as Etc/GMT±N names them,
# their sign the reverse of ISO's), an abbreviation for a name (Factory's "-00"), 45-minute and
# half-hour offsets with and without DST, a DST of half an hour, the date line crossed.
EDGE_ZONES = (
    "Etc/GMT-14", "Etc/GMT+12", "Etc/GMT", "Factory", "Asia/Kathmandu", "America/St_Johns",
    "Australia/Lord_Howe", "Pacific/Apia", "America/New_York", "UTC",
)  # fmt: skip


@pytest.fixture(scope="module")
def _zoned_history(django_db_setup, django_db_blocker):
    """Streams over the last week (so the pages have days and buckets to draw), in a
    transaction rolled back at the module's end."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            staff = get_user_model().objects.create_user("zones-staff", is_staff=True)
            for i in range(24):
                s = Stream.objects.create(
                    user=staff, status="completed", requested_model="auto",
                    resolved_model=("small", "large")[i % 2], ttft_ms=100 + 7 * i,
                    duration_ms=900 + 13 * i, source="api",
                )  # fmt: skip
                created = NOW - dt.timedelta(hours=7 * i + 0.5)
                Stream.objects.filter(pk=s.pk).update(created_at=created)
            yield staff
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def world(_zoned_history, db):
    """One object of each kind a page route names, the staff member's: an imported capture in
    a session with a thumb, a conversation, an import job, a saved view, a share link."""
    staff = _zoned_history
    capture = (FIXTURES / "openai_text_basic.sse").read_bytes()
    stream = importer.import_capture(capture, "basic.sse", user=staff)[0]
    Stream.objects.filter(pk=stream.pk).update(session="zones")
    thumb = scores.give(stream.pk, author=staff, name="thumbs", value=1, source="person")
    conversation = Conversation.objects.create(user=staff, title="zones")
    turn = Turn.objects.create(conversation=conversation, position=0, prompt="?", stream=stream)
    link, secret = shares.create(staff, stream=stream)
    project = Project.personal(staff)
    invitation, key = invitations.invite(staff, project, "zones@example.com", "viewer")
    rule = AlertRule.objects.create(
        project=project, name="zones", figure="ttft_p95", threshold=1000, created_by=staff
    )
    walked = made_experiments(staff, project)
    evaluator = evaluate.save(project, name="zones-json", kind="json_valid", config={}, user=staff)
    ids = {
        "stream_id": [stream.pk],
        "other_id": [Stream.objects.exclude(pk=stream.pk).values_list("pk", flat=True)[0]],
        "index": [0],
        "job_id": [ImportJob.objects.create(user=staff).pk],
        "session": ["zones"],
        "conversation_id": [conversation.pk],
        "turn_id": [turn.pk],
        "view_id": [SavedView.objects.create(owner=staff, page="latency", name="z").pk],
        "score_id": [thumb.pk],
        "secret": [secret],
        "link_id": [link.pk],
        "project_slug": [project.slug],
        "user_id": [staff.pk],
        "invitation_id": [invitation.pk],
        "score_type_id": [
            ScoreType.objects.create(project=project, name="zones", kind="thumbs").pk
        ],
        "price_id": [
            Price.objects.create(
                project=project,
                model_pattern="zones-*",
                effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                input_per_million=1,
                output_per_million=2,
            ).pk
        ],
        "key": [key],
        "token_id": [ApiToken.objects.get(digest=ApiToken.hash(ApiToken.issue(staff))).pk],
        "channel_id": [
            channels.create(project, "zones", "email", "zones@example.com", created_by=staff)[0].pk
        ],
        "rule_id": [rule.pk],
        "silence_id": [
            Silence.objects.create(
                project=project, rule=rule, until_at=NOW + dt.timedelta(hours=1)
            ).pk
        ],
        "evaluator_id": [evaluator.pk],
        "online_rule_id": [
            online.create(project, user=staff, name="zones", evaluators=[evaluator]).pk
        ],
        "dataset_id": [walked.dataset.pk],
        "experiment_id": [walked.experiment.pk],
        "run_id": [walked.run.pk],
        "other_run_id": [walked.earlier.pk],
    }
    paths = []
    for route in django_routes():
        if route.text.startswith("admin/") or route.model is not None:
            continue
        try:
            paths += fill(route, lambda r, name, bound: ids.get(name))
        except Unfillable as exc:  # (a new route's parameter: named, never skipped)
            pytest.fail(str(exc))
    return staff, sorted({p for p in paths if not is_data(p) and not p.startswith("/i18n/")})


@pytest.fixture
def staff_client(_zoned_history, db):
    client = Client(raise_request_exception=False)
    client.force_login(_zoned_history)
    return client


def _named(html, zone):
    """Whether a page says it is in `zone`, by its name: to its scripts, and in the selector."""
    return f'data-time-zone="{zone}"' in html and f'<option value="{zone}" selected>' in html


# The instants a zoned page buckets and shows: its range (the default one, back from now), the
# history's streams in it, the local midnights and bucket floors before it; with two days'
# margin either side (no zone is a day off UTC, and the module runs well within a day).
SPAN = (
    NOW - PRESETS[RangeForm.default_range] - dt.timedelta(days=2),
    NOW + dt.timedelta(days=2),
)


def _clock(instant, zone):
    local = instant.astimezone(zone)
    return local.utcoffset(), local.dst(), local.tzname()


def clock(name, span=SPAN):
    """What a page can read of zone `name` but its name: the name Django gives a zone of one
    fixed offset (`tzname(None)`: see `timezone.current_name`), the abbreviations the scripts
    get, and the zone's offset, DST and abbreviation over `span`, as each one they change to
    and the instant, to the second, they change. (Sampled hourly, then bisected: no zone
    changes and changes back within an hour.)"""
    zone = zoneinfo.ZoneInfo(name)
    start, end = span
    changes = [(start, _clock(start, zone))]
    hour, second = dt.timedelta(hours=1), dt.timedelta(seconds=1)
    for lo in (start + hour * i for i in range(int((end - start) / hour))):
        hi = lo + hour
        if _clock(hi, zone) != _clock(lo, zone):
            while hi - lo > second:
                mid = lo + (hi - lo) // 2
                lo, hi = (mid, hi) if _clock(mid, zone) == _clock(lo, zone) else (lo, mid)
            changes.append((hi, _clock(hi, zone)))
    return zone.tzname(None), tzmod.abbreviations(name), tuple(changes)


def zone_classes(zones):
    """`zones` grouped by their `clock` (a name as the cookie would give it: another name of
    UTC is UTC)."""
    found = {}
    for zone in zones:
        found.setdefault(clock(tzmod.valid(zone)), []).append(zone)
    return list(found.values())


def offered_zones():
    """Every zone the selector may send, on SQLite; on PostgreSQL the edge zones: a zone never
    reaches the SQL (days and bucket edges are computed as instants in Python, stats/sql.py;
    the walk of every page checks it, `zone_in_sql`), so what differs there is the database,
    not the zone (every zone on PostgreSQL took 2½ minutes of CI, and passed)."""
    if connection.vendor == "sqlite":
        return sorted(tzmod.available())
    return EDGE_ZONES


@pytest.fixture(scope="module")
def classes():
    return zone_classes(offered_zones())


@pytest.mark.django_db
@pytest.mark.parametrize("page", ZONED_PAGES)
def test_every_zone_the_selector_offers_renders_the_zoned_pages(staff_client, classes, page):
    """Each class of zones (`zone_classes`) by its longest name: a name is text on the page,
    and its report is the class's."""
    failed = []
    for zones in classes:
        zone = max(zones, key=len)
        staff_client.cookies[tzmod.COOKIE] = zone  # as set_time_zone remembers a choice
        r = staff_client.get(page)
        html = r.content.decode()
        zone = tzmod.valid(zone)  # (another name of UTC is UTC: one zone, one choice)
        if r.status_code != 200 or not _named(html, zone):
            failed.append(f"{zone}: {r.status_code}")
        elif page == "/usage/" and f"tz={quote(zone, safe='')}" not in html:
            failed.append(f"{zone}: the CSV link's zone")  # (its bounds are read in it)
    assert not failed, f"{len(failed)} zones: " + ", ".join(failed)


def test_a_zone_is_named_by_its_key():
    for zone in tzmod.available():
        with timezone.override(zone):
            assert tzmod.current_name() == zone


def edge_zones():
    """The edge zones, on SQLite; on PostgreSQL one of them, 45 minutes off the hours: the walk
    checks in each zone that the zone never reaches the SQL (`zone_in_sql`), so what
    PostgreSQL adds is the database, not the zone."""
    if connection.vendor == "sqlite":
        return EDGE_ZONES
    return ("Asia/Kathmandu",)


# A bare UTC offset as Django hands one to a database: "-12" to SQLite, "+12:00" to PostgreSQL
# (whose sign is the POSIX one, the reverse)
BARE_OFFSET = re.compile(r"[+-](\d{1,2}):?(\d{2})?")


@contextlib.contextmanager
def zone_in_sql(zone, found):
    """Appends to `found` each statement that names `zone`, in its text or as a parameter: by
    its key, or, a zone of one fixed offset, by that offset (Django's name for it: "-12" for
    Etc/GMT+12, of either sign), as Django's date lookups and truncations would hand it to the
    database. (UTC is the database's own zone.)"""
    tz = zoneinfo.ZoneInfo(zone)
    fixed = None if tz.utcoffset(None) is None else abs(tz.utcoffset(None))

    def names_it(value):
        if not isinstance(value, str) or zone == "UTC":
            return False
        bare = BARE_OFFSET.fullmatch(value)
        if bare and fixed is not None:
            return dt.timedelta(hours=int(bare[1]), minutes=int(bare[2] or 0)) == fixed
        return value == zone

    def named(execute, sql, params, many, context):
        values = [v for row in params or () for v in row] if many else list(params or ())
        if (zone != "UTC" and f"'{zone}'" in sql) or any(map(names_it, values)):
            found.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(named):
        yield


@pytest.mark.django_db
@pytest.mark.parametrize("zone", ["Asia/Kathmandu", "Etc/GMT+12"])
def test_the_walk_sees_a_zone_handed_to_the_database(zone):
    with timezone.override(zone), zone_in_sql(zone, found := []):
        Stream.objects.filter(created_at__date=dt.date(2026, 1, 1)).exists()
    assert found
    with timezone.override(zone), zone_in_sql(zone, found := []):
        Stream.objects.filter(created_at__gte=NOW).exists()
    assert not found


def test_every_page_renders_in_the_zones_at_the_edges(world):
    staff, paths = world
    client = Client(raise_request_exception=False)
    client.force_login(staff)
    assert len(paths) > 30
    failed = []
    for zone in edge_zones():
        client.cookies[tzmod.COOKIE] = zone
        for path in paths:
            with zone_in_sql(zone, sql := []):
                r = client.get(path)
            if r.status_code >= 500:
                failed.append(f"{zone} {path}: {r.status_code}")
            elif sql:
                failed.append(f"{zone} {path}: the zone reached the SQL: {sql[0][:200]}")
            elif "text/html" in r.get("Content-Type", "") and "data-time-zone" in (
                html := r.content.decode()
            ):
                if f'data-time-zone="{zone}"' not in html:
                    failed.append(f"{zone} {path}: named otherwise")
    assert not failed, "\n".join(failed)


@pytest.mark.django_db
def test_every_zone_the_selector_offers_names_a_page(staff_client):
    """Every zone by its own name, on a page of the few the server draws fast (a saved view's
    list: the zoned pages draw the name as the same top bar does)."""
    failed = []
    for zone in offered_zones():
        staff_client.cookies[tzmod.COOKIE] = zone
        r = staff_client.get("/views/")
        if r.status_code != 200 or not _named(r.content.decode(), tzmod.valid(zone)):
            failed.append(f"{zone}: {r.status_code}")
    assert not failed, f"{len(failed)} zones: " + ", ".join(failed)


def test_the_classes_of_zones_part_what_a_page_can_tell_apart():
    """Zones apart when a page could tell them apart (a half-hour offset, the same offset by
    other abbreviations, a fixed offset, which Django names apart, a DST change inside the
    span), together when it could not."""
    apart = [
        ("Asia/Kolkata", "Asia/Kathmandu"),  # +05:30, +05:45
        ("Asia/Riyadh", "Europe/Moscow"),  # +03 and MSK
        ("Europe/Amsterdam", "Africa/Lagos"),  # +01 in winter, named CET and WAT
        ("Asia/Riyadh", "Etc/GMT-3"),  # "+03" both, the latter of one fixed offset
    ]
    for a, b in apart:
        assert clock(a) != clock(b), (a, b)
    # GMT both in December; Europe/London's BST starts on 29 March
    december = (dt.datetime(2026, 12, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 10, tzinfo=dt.UTC))
    march = (dt.datetime(2026, 3, 20, tzinfo=dt.UTC), dt.datetime(2026, 4, 5, tzinfo=dt.UTC))
    london, abidjan = ("Europe/London", "Africa/Abidjan")
    assert clock(london, december)[2] == clock(abidjan, december)[2]
    assert clock(london, march)[2] != clock(abidjan, march)[2]
    assert clock(london, march)[2][1] == (
        dt.datetime(2026, 3, 29, 1, tzinfo=dt.UTC),
        (dt.timedelta(hours=1), dt.timedelta(hours=1), "BST"),
    )
    together = zone_classes(["Europe/Amsterdam", "Europe/Paris", "Etc/UTC", "UTC"])
    assert sorted(map(sorted, together)) == [
        ["Etc/UTC", "UTC"],
        ["Europe/Amsterdam", "Europe/Paris"],
    ]
    assert 50 < len(zone_classes(tzmod.available())) < len(tzmod.available()) / 3


def test_the_servers_own_local_time_is_no_zone():
    """`localtime` in the zone database is a link to the machine's own setting (Debian's), not
    a zone: the selector does not offer it and a cookie naming it is UTC."""
    assert not tzmod.NOT_ZONES & tzmod.available()
    assert tzmod.valid("localtime") is None
    assert tzmod.from_cookie("localtime") == (tzmod.UTC, "default")
