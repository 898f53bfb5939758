"""Deleting a project in the background (streams/run/deletions.py, streams/access/members.py
`delete` and `delete_marked`): the owner's request only marks it (gone from every list at
once, a bounded number of queries whatever its size), the periodic job deletes its streams in
batches over as many runs as it takes, one process at a time, then the project; the audit
log's entry of its deletion names the owner and counts its streams."""

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from streams.access import members, projects
from streams.models import AuditEntry, Event, Membership, Project, Stream
from streams.run import deletions, periodic

pytestmark = pytest.mark.django_db

N_STREAMS = 3_000
EVENTS_EACH = 4


@pytest.fixture
def big():
    make = get_user_model().objects.create_user
    owner, member = make("owner"), make("member")
    project = members.create(owner, "Big team")
    Membership.objects.create(project=project, user=member, role="member")
    other = members.create(member, "Other team")
    Stream.objects.bulk_create(
        Stream(user=member, project=project, status="completed") for _n in range(N_STREAMS)
    )
    kept = Stream.objects.create(user=member, project=other, status="completed")
    ids = list(Stream.objects.filter(project=project).values_list("pk", flat=True))
    Event.objects.bulk_create(
        Event(stream_id=pk, index=i, data="{}") for pk in ids for i in range(EVENTS_EACH)
    )
    return project, other, owner, member, kept


def test_the_request_marks_and_the_job_deletes_in_batches(big, monkeypatch):
    project, other, owner, member, kept = big
    client = Client()
    client.force_login(owner)
    with CaptureQueriesContext(connection) as seen:
        answer = client.post(f"/projects/{project.slug}/delete/", {"name": "Big team"})
    assert answer.status_code == 302
    # the request deleted nothing and did a few queries, not one per batch of 200 (the
    # streams were deleted in it before: 15 batches here, minutes for a million)
    assert len(seen.captured_queries) < 40, len(seen.captured_queries)
    assert Stream.objects.filter(project=project).count() == N_STREAMS
    marked = Project.objects.get(pk=project.pk)
    assert marked.deleting_at is not None
    # gone from every list and switcher at once, for its members too
    page = client.get("/projects/").content.decode()
    assert "is being deleted, with its 3" in page  # (the message)
    assert f"/projects/{project.slug}/" not in page
    assert client.get(f"/projects/{project.slug}/members/").status_code == 404
    member_client = Client()
    member_client.force_login(member)
    assert f"/projects/{project.slug}/" not in member_client.get("/projects/").content.decode()
    assert member_client.get(f"/?project={project.slug}").status_code == 404
    # the job: a short budget, so it takes several runs (each a batch of 200 at least)
    monkeypatch.setattr(members, "DELETE_BUDGET_S", 0.0)
    runs, gone = 0, 0
    while Project.objects.filter(pk=project.pk).exists():
        gone += deletions.delete_marked_projects().get(project.pk, 0)
        runs += 1
        assert runs < 100
    assert runs == N_STREAMS // members.STREAMS_PER_BATCH + 1 and gone == N_STREAMS
    assert not Stream.objects.filter(project_id=project.pk).exists()
    assert not Event.objects.filter(stream__project_id=project.pk).exists()
    assert (
        Stream.objects.filter(pk=kept.pk).exists() and Project.objects.filter(pk=other.pk).exists()
    )
    entry = AuditEntry.objects.get(action="project.deleted", target_id=str(project.pk))
    assert entry.project_id is None  # (the instance's: the project's own entries went with it)
    assert entry.changes["deleted_streams"] == [None, N_STREAMS]
    assert (entry.actor_id, entry.actor_name) == (owner.pk, "owner")  # who asked, not the job
    assert "project deletions" in periodic.jobs()


def test_one_process_at_a_time_and_another_takes_over_a_lapsed_claim(big):
    project, _other, owner, _member, _kept = big
    members.delete(owner, project)
    now = dt.datetime.now(dt.UTC)
    # another process holds it: this one leaves it alone
    Project.objects.filter(pk=project.pk).update(
        deletion_claimed_until=now + dt.timedelta(seconds=30)
    )
    assert members.delete_marked(now=now) == {}
    assert Stream.objects.filter(project=project).count() == N_STREAMS
    # that process died: once its claim lapses, this one takes over and finishes
    later = now + dt.timedelta(seconds=31)
    assert members.delete_marked(now=later) == {project.pk: N_STREAMS}
    assert not Project.objects.filter(pk=project.pk).exists()


def test_a_personal_project_deleted_leaves_its_user_a_new_one(db):
    user = get_user_model().objects.create_user("solo")
    mine = Project.personal(user)
    Stream.objects.create(user=user, project=mine, status="completed")
    members.delete(user, mine)
    projects.forget(user)
    user.__dict__.pop("_personal_project", None)
    fresh = Project.personal(user)
    assert fresh.pk != mine.pk and fresh.deleting_at is None
    assert projects.home(user) == fresh
    members.delete_marked()
    assert not Project.objects.filter(pk=mine.pk).exists()
