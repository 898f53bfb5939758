"""The pages in a project (dashboard/project.py): lists show the current project's things, a
stream's own page opens for any member of its project and names it, writes go into the current
project and need the role (streams/access/projects.py), a viewer's pages leave out what they may
not use, and the top bar switches. Who gets 404 / 403 on every route: tests/test_access.py."""

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from dashboard.models import SavedView
from streams.models import Comment, ImportJob, Membership, Project, Score, ShareLink, Stream
from tests.support import captures

pytestmark = pytest.mark.django_db

Role = Membership.Role


class Team:
    """A project "Team" with an owner, a member and a viewer; an outsider; staff."""

    def __init__(self):
        User = get_user_model()
        self.project = Project.objects.create(name="Team", slug="team")
        for name, role in (("owner", Role.OWNER), ("member", Role.MEMBER), ("viewer", Role.VIEWER)):
            user = User.objects.create_user(name)
            Membership.objects.create(project=self.project, user=user, role=role)
            setattr(self, name, user)
        self.outsider = User.objects.create_user("outsider")
        self.staff = User.objects.create_user("staff", is_staff=True)
        for name in ("owner", "member", "viewer", "outsider", "staff"):
            client = Client()
            client.force_login(getattr(self, name))
            setattr(self, f"{name}_client", client)

    def stream(self, project=None, user=None, **fields):
        return Stream.objects.create(
            user=user or self.owner,
            project=project or self.project,
            status=Stream.Status.COMPLETED,
            **fields,
        )


@pytest.fixture
def team(settings):
    settings.UPSTREAM_BASE_URL = ""  # the built-in simulator's catalogue: no HTTP for a page
    return Team()


def rows(response):
    return {int(i) for i in re.findall(r'id="stream-row-(\d+)"', response.content.decode())}


def upload(client):
    capture = captures.sse(*captures.small_stream())
    file = SimpleUploadedFile("a.sse", capture, content_type="application/octet-stream")
    return client.post("/streams/upload/", {"file": [file]})


def test_the_list_shows_the_current_projects_streams_and_remembers_it(team):
    mine = team.stream(Project.personal(team.member), user=team.member, session="s")
    theirs = team.stream(session="s")
    client = team.member_client
    assert rows(client.get("/")) == {mine.pk}  # a new session: the personal project
    page = client.get("/?project=team")
    assert rows(page) == {theirs.pk}
    assert '<td class="owner muted">owner</td>' in page.content.decode()  # whose, in a team
    assert rows(client.get("/")) == {theirs.pk}  # remembered
    assert rows(client.get(f"/?q=%23{mine.pk}")) == set()  # search too: this project's
    csv = b"".join(client.get("/streams.csv").streaming_content).decode().splitlines()
    assert [line.split(",")[0] for line in csv[1:]] == [str(theirs.pk)]
    assert rows(client.get("/sessions/s/")) == {theirs.pk}
    r = client.post("/projects/switch/", {"project": "member", "next": "/?status=completed"})
    assert r.status_code == 302 and r["Location"] == "/?status=completed"
    assert rows(client.get("/")) == {mine.pk}
    # a project one is not in: not found, whether it exists or not
    assert team.outsider_client.get("/?project=team").status_code == 404
    assert team.outsider_client.get("/?project=nope").status_code == 404


def test_a_stream_opens_for_any_member_whatever_the_project_and_names_its_own(team):
    stream = team.stream()
    team.member_client.get("/?project=member")  # working in their personal project
    r = team.member_client.get(f"/streams/{stream.pk}/")
    assert r.status_code == 200
    text = r.content.decode()
    assert '<dd id="stream-project"><a href="/?project=team"' in text and ">Team</a>" in text
    assert team.outsider_client.get(f"/streams/{stream.pk}/").status_code == 404
    dutch = team.member_client.get(f"/streams/{stream.pk}/", HTTP_ACCEPT_LANGUAGE="nl")
    assert "de streams van dit project" in dutch.content.decode()


def test_a_viewer_reads_comments_and_sees_no_control_that_would_answer_403(team):
    stream = team.stream()
    viewer = team.viewer_client
    viewer.get("/?project=team")
    page = viewer.get(f"/streams/{stream.pk}/").content.decode()
    assert 'class="feedback-form"' not in page and 'id="share"' not in page
    assert 'class="thumb up" disabled' in page
    assert f'action="/streams/{stream.pk}/comment/"' in page
    member_page = team.member_client.get(f"/streams/{stream.pk}/").content.decode()
    assert 'class="feedback-form"' in member_page and 'id="share"' in member_page
    assert 'class="thumb up" aria-pressed' in member_page  # (not disabled)
    # posting anyway
    r = viewer.post(f"/streams/{stream.pk}/score/", {"name": "thumbs", "value": "up"})
    assert r.status_code == 403 and not Score.objects.exists()
    r = viewer.post(f"/streams/{stream.pk}/comment/", {"text": "Mooi"})
    assert r.status_code == 302 and Comment.objects.get().text == "Mooi"
    r = viewer.post("/shares/new/", {"stream": stream.pk, "expires": "7d"})
    assert r.status_code == 403 and not ShareLink.objects.exists()
    playground = viewer.get("/playground/").content.decode()
    assert 'id="pg-composer"' not in playground and 'id="pg-read-only"' in playground
    assert viewer.post("/playground/send/", {"input": "Hoi"}).status_code == 403
    assert viewer.get("/playground/compare/").status_code == 403
    assert upload(viewer).status_code == 403 and not ImportJob.objects.exists()
    listed = viewer.get("/").content.decode()
    assert 'class="save-view-form' not in listed and 'class="import-box"' not in listed
    r = viewer.post("/views/", {"name": "x", "page": "stream_list", "query": ""})
    assert r.status_code == 403 and not SavedView.objects.exists()


def test_what_is_made_goes_into_the_current_project(team):
    client = team.member_client
    client.get("/?project=team")
    r = upload(client)
    assert r.status_code == 302
    job = ImportJob.objects.get()
    assert job.project == team.project
    assert set(Stream.objects.values_list("project", flat=True)) == {team.project.pk}
    r = client.post("/views/", {"name": "Team's", "page": "stream_list", "query": ""})
    assert r.status_code == 302 and SavedView.objects.get().project == team.project
    # a session's link shows the session's streams of the project it was shared from
    inside = team.stream(user=team.member, session="s")
    team.stream(Project.personal(team.member), user=team.member, session="s")
    r = client.post("/shares/new/", {"session": "s", "expires": "7d"})
    assert r.status_code == 200
    link = ShareLink.objects.get()
    assert link.project == team.project
    secret = r.content.decode().split("/s/sl_")[1].split("/")[0]
    assert rows(team.outsider_client.get(f"/s/sl_{secret}/")) == {inside.pk}


def test_staff_in_every_project_start_things_in_their_home_project_and_are_told(team):
    team.stream()
    staff = team.staff_client
    staff.post("/projects/switch/", {"project": "all", "next": "/"})
    assert team.stream().pk in rows(staff.get("/"))  # every project's
    home = Project.personal(team.staff)
    page = staff.get("/playground/").content.decode()
    assert 'id="pg-new-in"' in page and f"goes into {home.name}." in page
    assert f"goes into {home.name}." in staff.get("/streams/upload/").content.decode()
    assert 'id="import-new-in"' in staff.get("/").content.decode()
    assert upload(staff).status_code == 302
    assert ImportJob.objects.get().project == home
    # working in one project, nothing is said
    staff.get("/?project=team")
    assert 'id="pg-new-in"' not in staff.get("/playground/").content.decode()


def test_the_api_lists_and_starts_in_its_project(team):
    stream = team.stream()
    team.stream(Project.personal(team.member), user=team.member)
    r = team.member_client.get("/api/streams/?project=team")
    assert [s["id"] for s in r.json()["streams"]] == [stream.pk]
    assert team.outsider_client.get("/api/streams/?project=team").status_code == 404
    body = json.dumps({"input": "Hoi"})
    r = team.viewer_client.post("/api/streams/?project=team", body, content_type="application/json")
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    r = team.viewer_client.post(
        "/api/scores/",
        json.dumps({"stream": stream.pk, "name": "thumbs", "value": 1}),
        content_type="application/json",
    )
    assert r.status_code == 403
    r = team.viewer_client.post(
        "/api/comments/",
        json.dumps({"stream": stream.pk, "text": "Mooi"}),
        content_type="application/json",
    )
    assert r.status_code == 201


def test_the_top_bar_switches_between_ones_projects(team):
    Project.personal(team.member)  # (made when first needed)
    page = team.member_client.get("/?project=team").content.decode()
    assert 'action="/projects/switch/"' in page
    assert '<option value="team" selected>Team</option>' in page
    assert '<option value="member">' in page and 'value="all"' not in page
    assert '<option value="team"' not in team.outsider_client.get("/").content.decode()
    staff = team.staff_client.get("/", HTTP_ACCEPT_LANGUAGE="nl").content.decode()
    assert '<option value="all">Alle projecten</option>' in staff
    assert '<option value="team">Team</option>' in staff  # staff may work in any project
    # a project one is not in is not switched to
    r = team.outsider_client.post("/projects/switch/", {"project": "team", "next": "/"})
    assert r.status_code == 400


def test_a_personal_project_made_during_a_request_counts_at_once(team):
    """The roles are cached on the user for the request: a page that reads them (analytics'
    scope) before the personal project is first made must still see its owner role."""
    page = team.outsider_client.get("/latency/").content.decode()
    assert 'class="save-view-form' in page


def test_a_streams_tags_and_session_link_into_its_own_project(team):
    stream = team.stream(session="s", tags=["beta"])
    team.member_client.get("/?project=member")  # working elsewhere
    page = team.member_client.get(f"/streams/{stream.pk}/").content.decode()
    assert 'href="/sessions/s/?project=team"' in page
    assert 'href="/?tag=beta&amp;project=team"' in page
    r = team.member_client.get("/sessions/s/?project=team")
    assert rows(r) == {stream.pk}
