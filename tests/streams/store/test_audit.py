"""The audit log (streams/store/audit.py): every change of a watched model is recorded once, by
whoever made it (a request's user and address, a command, the system), with what changed and
never a secret; a project's entries go with it; a deletion of streams is one entry per batch
and project."""

import datetime as dt
import io
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from streams.access import shares
from streams.models import (
    ApiToken,
    AuditEntry,
    Membership,
    Price,
    Project,
    ScoreType,
    ShareLink,
    Stream,
    WatchedQuerySet,
)
from streams.store import audit, retention

KEY = "sk-AUDIT-CANARY-5519203xq"
HERE = audit.Actor(None, "alice", "10.1.2.3")

pytestmark = pytest.mark.django_db


def entries(**filters):
    return list(AuditEntry.objects.filter(**filters).order_by("pk"))


def one(action, **filters):
    found = entries(action=action, **filters)
    assert len(found) == 1, (action, [(e.action, e.target_label) for e in entries()])
    return found[0]


@pytest.fixture
def alice(db):
    user = get_user_model().objects.create_user("alice")
    return user


@pytest.fixture
def team(db):
    with audit.acting(audit.Actor()):
        return Project.objects.create(name="Team", slug="team")


def test_every_watched_model_tells_of_its_updates():
    # Django's signals do not see a queryset's update(): without the watched queryset a link
    # revoked by update() would go unrecorded
    for model in audit.watched_models():
        assert isinstance(model.objects.all(), WatchedQuerySet), model


def test_every_action_an_entry_can_have_has_a_label():
    possible = {"project.deleted", "streams.deleted", "retention.changed"}
    for spec in audit.WATCHED.values():
        possible |= {f"{spec.kind}.{w}" for w in (spec.added, spec.removed, "changed")}
        possible |= {f"{spec.kind}.{word}" for _name, word in spec.special}
    assert possible == set(audit.ACTIONS)


def test_a_membership_is_recorded_with_who_from_where_and_what(alice, team):
    bob = get_user_model().objects.create_user("bob")
    with audit.acting(audit.Actor(alice.pk, "alice", "10.1.2.3")):
        m = Membership.objects.create(project=team, user=bob, role=Membership.Role.VIEWER)
        m.role = Membership.Role.ADMIN
        m.save()
        m.save()  # nothing changed: no entry
        Membership.objects.filter(pk=m.pk).update(last_used_at=dt.datetime.now(dt.UTC))
        m.delete()
    added = one("membership.added")
    assert (added.project_id, added.actor_id, added.actor_name, added.address) == (
        team.pk, alice.pk, "alice", "10.1.2.3",
    )  # fmt: skip
    assert (added.target_type, added.target_label) == ("membership", "bob")
    assert added.changes["role"] == [None, "viewer"]
    assert added.changes["user"] == [None, "bob"]  # (by name: an id says little later)
    assert "project" not in added.changes  # (the entry's own)
    changed = one("membership.role_changed")
    assert changed.changes == {"role": ["viewer", "admin"]}
    removed = one("membership.removed")
    assert removed.changes["role"] == ["admin", None]
    assert len(entries(project=team, action__startswith="membership")) == 3


def test_a_token_never_shows_its_digest_and_its_use_is_no_change(alice, team, settings):
    settings.UPSTREAM_API_KEY = KEY
    with audit.acting(HERE):
        secret = ApiToken.issue(alice, name=f"ci {KEY}", project=team)
    token = ApiToken.objects.get(digest=ApiToken.hash(secret))
    created = one("token.created")
    assert created.project_id == team.pk
    text = repr(created.changes) + created.target_label
    assert token.digest not in text and secret not in text and KEY not in text
    assert "[redacted]" in created.target_label and created.changes["name"][1].startswith("ci ")
    assert "digest" not in created.changes
    # used: not a change anyone made
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=dt.datetime.now(dt.UTC))
    assert len(entries(target_type="token")) == 1
    ApiToken.objects.filter(pk=token.pk).update(revoked=True)  # as a revoke view may
    revoked = one("token.revoked")
    assert revoked.changes == {"revoked": [False, True]}
    assert (revoked.actor_name, revoked.address) == ("system", "")  # no one's context


def test_a_share_link_made_and_revoked_through_its_service(alice, settings):
    settings.UPSTREAM_API_KEY = KEY
    stream = Stream.objects.create(user=alice, session=f"s/{KEY}")
    with audit.acting(HERE):
        link, secret = shares.create(alice, session=stream.session)
        shares.revoke(alice, link.pk)
        shares.revoke(alice, link.pk)  # twice: the first time stands, one entry
    made = one("share_link.created")
    assert made.project_id == ShareLink.objects.get(pk=link.pk).project_id
    assert KEY not in made.target_label and "[redacted]" in made.target_label
    assert secret not in repr(made.changes) and link.digest not in repr(made.changes)
    assert one("share_link.revoked").changes["revoked_at"][0] is None
    assert ShareLink.objects.get(pk=link.pk).revoked_at is not None


def test_score_types_and_prices(team):
    with audit.acting(HERE):
        kind = ScoreType.objects.create(project=team, name="helpful", kind="numeric", maximum=5)
        kind.maximum = 10
        kind.save()
        price = Price.objects.create(
            model_pattern="gpt-x*", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            input_per_million=Decimal("0.500000"), output_per_million=2, project=team,
        )  # fmt: skip
        price.input_per_million = Decimal("0.5")  # the same number: no change
        price.save()
        price.output_per_million = Decimal("2.25")
        price.save()
        price.delete()
        kind.delete()
    assert one("score_type.changed").changes == {"maximum": [5.0, 10.0]}
    assert one("score_type.created").target_label == "helpful"
    assert one("score_type.deleted").project_id == team.pk
    assert one("price.created").changes["input_per_million"] == [None, "0.5"]
    assert one("price.changed").changes == {"output_per_million": ["2", "2.25"]}
    assert one("price.deleted").target_label == "gpt-x* · 2026-01-01"


def test_a_project_renamed_and_deleted_keeps_one_instance_entry(alice, team):
    with audit.acting(HERE):
        Membership.objects.create(project=team, user=alice, role=Membership.Role.OWNER)
        team.name = "Team B"
        team.save()
        ApiToken.issue(alice, name="app", project=team)
        assert one("project.renamed").changes == {"name": ["Team", "Team B"]}
        team.delete()
    # its entries went with it; its deletion is the instance's (staff read it)
    assert not AuditEntry.objects.filter(action__startswith="membership").exists()
    assert not AuditEntry.objects.filter(action__startswith="token").exists()
    gone = one("project.deleted")
    assert (gone.project_id, gone.target_label, gone.actor_name) == (None, "Team B", "alice")


def test_a_user_who_deletes_themselves_is_kept_by_name(alice, team):
    Membership.objects.create(project=team, user=alice, role=Membership.Role.MEMBER)
    with audit.acting(audit.Actor(alice.pk, "alice", "10.1.2.3")):
        alice.delete()
    removed = one("membership.removed")
    assert (removed.actor_id, removed.actor_name, removed.target_label) == (None, "alice", "alice")


def test_a_command_is_the_actor(alice):
    out = io.StringIO()
    call_command("create_token", "alice", "--name", "deploy", stdout=out)
    made = one("token.created")
    assert made.address == "command:create_token"
    assert made.actor_id is None and made.actor_name  # the account that ran it
    assert out.getvalue().strip() not in repr(made.changes)


NOW = dt.datetime.now(dt.UTC)


def _old_streams(owner, project, n, days=30):
    from streams.management.commands.seed_demo import _settable_created_at

    with _settable_created_at():
        return [
            Stream.objects.create(
                user=owner, project=project, status=Stream.Status.COMPLETED,
                created_at=NOW - dt.timedelta(days=days, minutes=i),
            ).pk
            for i in range(n)
        ]  # fmt: skip


def test_retention_records_one_entry_per_project_for_a_run_of_batches(alice, team, settings):
    mine = _old_streams(alice, Project.personal(alice), 5)
    theirs = _old_streams(alice, team, 3, days=40)
    Stream.objects.create(user=alice, status=Stream.Status.COMPLETED)  # young: kept
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 10}
    AuditEntry.objects.all().delete()
    assert retention.prune(now=NOW, batch=4)["streams"] == 8
    # batches of 4, oldest first (theirs 3 and mine 1, then mine 4): an entry per project,
    # kept up to date batch by batch, not one per batch and project
    found = entries(action="streams.deleted")
    personal = Project.personal(alice).pk
    by_project = {e.project_id: e.changes for e in found}
    assert len(found) == 2 and set(by_project) == {team.pk, personal}
    assert by_project[personal]["count"] == len(mine) == 5
    assert by_project[personal]["ids"] == [min(mine), max(mine)]
    assert by_project[team.pk]["count"] == len(theirs)
    first, newest = by_project[personal]["created_at"]
    assert dt.datetime.fromisoformat(first) < dt.datetime.fromisoformat(newest)
    assert newest == (NOW - dt.timedelta(days=30)).isoformat()  # (the youngest of mine)
    assert by_project[personal]["by"] == "retention"
    assert {e.actor_name for e in found} == {"system"}


def test_a_batch_rolled_back_takes_its_entry_with_it(alice, settings, monkeypatch):
    _old_streams(alice, Project.personal(alice), 3)
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 10}

    def refuse(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(Stream.objects.none().__class__, "delete", refuse)
    with pytest.raises(RuntimeError):
        retention.prune(now=NOW)
    assert not AuditEntry.objects.filter(action="streams.deleted").exists()
    assert Stream.objects.count() == 3


def test_prune_as_a_command_and_the_admins_delete_are_recorded(alice, settings):
    _old_streams(alice, Project.personal(alice), 2)
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 10}
    call_command("prune", stdout=io.StringIO())
    assert one("streams.deleted").address == "command:prune"
    staff = get_user_model().objects.create_superuser("root", password="pw-root-1")
    doomed = [Stream.objects.create(user=alice).pk for _ in range(3)]
    client = Client(REMOTE_ADDR="192.0.2.9")
    client.force_login(staff)
    r = client.post(
        reverse("admin:streams_stream_changelist"),
        {"action": "delete_selected", "_selected_action": doomed, "post": "yes"},
    )
    assert r.status_code == 302 and not Stream.objects.filter(pk__in=doomed).exists()
    by_admin = one("streams.deleted", address="192.0.2.9")
    assert by_admin.changes["count"] == 3 and by_admin.changes["by"] == "admin"
    assert by_admin.actor_id == staff.pk


def test_a_change_of_retention_is_recorded_once_where_it_takes_effect(settings, monkeypatch):
    from django.core.cache import cache

    cache.clear()
    monkeypatch.setattr(audit, "_retention_seen", [None])
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 30}
    retention.prune_if_due()
    retention.prune(now=NOW)
    changed = one("retention.changed")
    assert changed.project_id is None and changed.actor_name == "system"
    assert changed.changes == {"retain_streams_days": [0.0, 30.0]}
    # another process, with the same setting: the database says it is recorded
    monkeypatch.setattr(audit, "_retention_seen", [None])
    retention.prune(now=NOW)
    assert len(entries(action="retention.changed")) == 1
    settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 30, "RETAIN_EVENTS_DAYS": 7}
    call_command("prune", stdout=io.StringIO())
    second = entries(action="retention.changed")[-1]
    assert second.changes == {"retain_events_days": [0.0, 7.0]}
    assert second.address == "command:prune"
    said = [(str(c.field), c.before, str(c.after)) for c in audit.changes_said(second)]
    assert said == [("days events are kept", "for ever", "7")]


def test_an_entry_of_an_unexpected_shape_is_said_as_recorded():
    # (an entry written by an older or newer version: the page shows it, never a 500)
    odd = [
        AuditEntry(action="retention.changed", changes={"name": [None, "x"], "n": "y"}),
        AuditEntry(action="streams.deleted", changes={"count": "many", "ids": 3}),
        AuditEntry(action="token.changed", target_type="token", changes=["not", "a", "dict"]),
        AuditEntry(action="price.changed", target_type="price", changes={"gone_field": [1, 2]}),
    ]
    said = [[(str(c.field), c.before, c.after) for c in audit.changes_said(e)] for e in odd]
    assert said[0] == [("name", None, "x"), ("n", None, "y")]
    assert said[1][0][2] == 0  # (a count the page can say)
    assert said[2] == []
    assert said[3] == [("gone_field", 1, 2)]


def test_figures_are_said_in_the_readers_form(team):
    from django.utils import translation

    with audit.acting(HERE):
        Price.objects.create(
            model_pattern="m*", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            input_per_million=Decimal("1234.5"), output_per_million=2, project=team,
        )  # fmt: skip
    entry = one("price.created")
    with translation.override("nl"):
        said = {str(c.field): c.after for c in audit.changes_said(entry)}
    assert said["input per miljoen"] == "1\u202f234,5"  # (docs/i18n.md: a narrow no-break space)


def test_a_tokens_spend_is_no_change_and_costs_no_query(alice, team, django_assert_num_queries):
    # every proxied stream's cost adds to its token's counters (streams/store/spend.py)
    from streams.store import spend

    class Recording:  # (the writer's record of a stream: what count() reads of it)
        token_id = None

    with audit.acting(HERE):
        ApiToken.issue(alice, name="app", project=team)
    token = ApiToken.objects.get(name="app")
    rec = Recording()
    rec.token_id = token.pk
    done = {rec: {"cost_nanos": 5, "cost_currency": "EUR"}}
    with django_assert_num_queries(1):  # the counters' UPDATE alone
        spend.count(done)
    assert ApiToken.objects.get(pk=token.pk).spent_day_nanos == 5
    assert [e.action for e in entries(target_type="token")] == ["token.created"]
    # a cap set is a change, said as an amount (it is kept in billionths)
    with audit.acting(HERE):
        ApiToken.objects.filter(pk=token.pk).update(spend_cap_day_nanos=5_250_000_000)
    said = [(str(c.field), c.after) for c in audit.changes_said(one("token.changed"))]
    assert said == [("spend cap per day", "5.25")]
