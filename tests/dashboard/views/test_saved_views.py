"""Saved views (dashboard/saved_views.py): what is saved of a page's query string, who sees a
view, who may delete it, and the pages' "Save this view…"."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard import saved_views
from dashboard.models import SavedView
from streams.models import Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def people():
    User = get_user_model()
    out = {name: User.objects.create_user(name, is_staff=name == "staff") for name in
           ("owner", "teammate", "staff")}  # fmt: skip
    for user in out.values():
        user.client = Client()
        user.client.force_login(user)
    return out


def test_only_the_pages_own_filters_are_saved():
    query = "q=kortom&status=failed&before=42&page=3&fragment=rows&evil=1&tag=&range=7d"
    assert saved_views.clean_query("stream_list", query) == "q=kortom&range=7d&status=failed"
    assert saved_views.clean_query("latency", "model=m-1&compare=previous&q=x") == (
        "compare=previous&model=m-1"
    )
    # the analytics pages' format filter is theirs (the usage page reads the latency form)
    for page in ("latency", "routing", "usage", "stream_list"):
        assert saved_views.clean_query(page, "format=chat&x=1") == "format=chat", page
    with pytest.raises(saved_views.Refused):
        saved_views.clean_query("stream_list", "q=" + "x" * 3000)


def test_saving_from_a_page_and_opening_it_again(people):
    owner = people["owner"]
    r = owner.client.post(
        "/views/",
        {"name": "Mislukt deze week", "page": "stream_list", "query": "status=failed&range=7d"},
    )
    # opened in its project (a colleague who opens the link reads that project's streams)
    assert r.status_code == 302 and r["Location"] == "/?range=7d&status=failed&project=owner"
    view = SavedView.objects.get(owner=owner)
    assert not view.shared
    # the same name again replaces it
    owner.client.post(
        "/views/", {"name": "Mislukt deze week", "page": "stream_list", "query": "status=failed"}
    )
    assert SavedView.objects.get(owner=owner).query == "status=failed"
    listed = owner.client.get("/views/").content.decode()
    assert "Mislukt deze week" in listed and 'href="/?status=failed&amp;project=owner"' in listed


def test_a_private_view_is_its_owners_and_a_shared_one_the_projects(people):
    owner, teammate, staff = people["owner"], people["teammate"], people["staff"]
    team = Project.objects.create(name="Team", slug="team")
    for user, role in ((owner, "owner"), (teammate, "member")):
        Membership.objects.create(project=team, user=user, role=role)
    outsider = get_user_model().objects.create_user("outsider")
    private = saved_views.save(owner, "latency", "Alleen ik", "range=24h", False, team)
    shared = saved_views.save(owner, "latency", "Voor iedereen", "range=7d", True, team)
    assert set(saved_views.visible(owner)) == {private, shared}
    assert list(saved_views.visible(teammate)) == [shared]
    assert list(saved_views.visible(teammate, Project.personal(teammate))) == []
    assert list(saved_views.visible(outsider)) == []  # shared with the project, not the instance
    page = teammate.client.get("/views/?project=team").content.decode()
    assert "Voor iedereen" in page and "Alleen ik" not in page and "shared by owner" in page
    # deleting: the owner; staff a shared one; nobody else (404, as if it did not exist)
    assert teammate.client.post(f"/views/{shared.pk}/delete/").status_code == 404
    assert staff.client.post(f"/views/{private.pk}/delete/").status_code == 404
    assert staff.client.post(f"/views/{shared.pk}/delete/").status_code == 302
    assert owner.client.post(f"/views/{private.pk}/delete/").status_code == 302
    assert not SavedView.objects.exists()


def test_what_cannot_be_saved_is_a_clear_400(people):
    owner = people["owner"]
    r = owner.client.post("/views/", {"name": "x", "page": "admin_analytics", "query": ""})
    assert r.status_code == 400 and "Only staff" in r.content.decode()
    r = owner.client.post("/views/", {"name": "", "page": "latency"})
    assert r.status_code == 400
    r = owner.client.post("/views/", {"name": "x", "page": "playground"})
    assert r.status_code == 400


@pytest.mark.parametrize("path", ["/", "/latency/", "/routing/", "/usage/"])
def test_every_filtered_page_offers_to_save_its_view(people, path):
    html = people["owner"].client.get(path).content.decode()
    assert 'class="save-view-form' in html and 'action="/views/"' in html


def test_a_view_lists_its_filters_in_words_in_the_pages_language(people):
    """Not its query string (`q=dijk&status=completed`): each filter by the page's name for it,
    a choice by its label, a time as the page writes it, in the page's language and zone."""
    owner = people["owner"]
    query = "q=dijk&status=completed&since=2026-07-01T10:00"
    saved_views.save(owner, "stream_list", "Dijk", query, False)
    saved_views.save(owner, "latency", "Week", "range=7d&source=proxy", False)
    owner.client.cookies["streamscope_tz"] = "Europe/Amsterdam"
    english = owner.client.get("/views/").content.decode()
    assert ">q=dijk" not in english  # (the link to the view keeps it)
    for words in ("Search: <b>dijk</b>", "Status: <b>Completed</b>",
                  "From: <b>2026-07-01 10:00 CEST</b>", "Range: <b>Last 7 days</b>",
                  "Source: <b>Recording proxy</b>"):  # fmt: skip
        assert words in english, words
    dutch = owner.client.get("/views/", HTTP_ACCEPT_LANGUAGE="nl").content.decode()
    for words in ("Zoeken: <b>dijk</b>", "Status: <b>Voltooid</b>",
                  "Van: <b>1-7-2026 10:00 CEST</b>",
                  "Periode: <b>Afgelopen 7 dagen</b>"):  # fmt: skip
        assert words in dutch, words


def test_a_viewer_reads_the_projects_views_and_may_not_save_one(people):
    owner, viewer = people["owner"], people["teammate"]
    team = Project.objects.create(name="Team", slug="team")
    Membership.objects.create(project=team, user=owner, role="owner")
    Membership.objects.create(project=team, user=viewer, role="viewer")
    saved_views.save(owner, "stream_list", "Voor het team", "status=failed", True, team)
    page = viewer.client.get("/?project=team").content.decode()
    assert 'class="save-view-form' not in page  # no control that would only answer 403
    assert "Voor het team" in viewer.client.get("/views/").content.decode()
    r = viewer.client.post("/views/", {"name": "x", "page": "stream_list", "query": ""})
    assert r.status_code == 403
    assert list(SavedView.objects.values_list("name", flat=True)) == ["Voor het team"]
