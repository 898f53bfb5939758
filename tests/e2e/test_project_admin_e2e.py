"""What a project's admins manage themselves, in real Chromium (pytest-django's live server):
an admin sets the project's currency and its own retention on its settings page, adds a score
type with categories, and a colleague in another browser reads it; the owner deletes the
project, which is gone from their list at once, and the periodic job's run deletes it. No
script error and no refusal by the page's Content-Security-Policy on the way."""

import pytest

from streams.access import members
from streams.models import Membership, Project, ScoreType, Stream

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_admin_sets_retention_and_a_score_type_and_the_owner_deletes(
    logged_in_page, people, live_server
):
    project = members.create(people.owner, "Data team")
    Membership.objects.create(project=project, user=people.stranger, role="admin")
    Stream.objects.create(user=people.owner, project=project, status="completed")
    admin = logged_in_page(people.stranger, path=f"/projects/{project.slug}/settings/")
    assert admin.locator("form.project-rename").count() == 0  # (owners rename)
    admin.select_option("select[name=currency]", "USD")
    admin.fill("input[name=retain_streams_days]", "30")
    admin.click("form.project-configure button[type=submit]")
    admin.wait_for_url(f"**/projects/{project.slug}/settings/")
    assert "Settings saved." in admin.inner_text(".messages")
    saved = Project.objects.get(pk=project.pk)
    assert (saved.currency, saved.retain_streams_days, saved.retain_events_days) == (
        "USD",
        30,
        None,
    )

    admin.goto(f"{live_server.url}/projects/{project.slug}/score-types/")
    form = admin.locator("#score-type-new ~ form")
    form.locator("input[name=name]").fill("tone")
    form.locator("select[name=kind]").select_option("categorical")
    form.locator("textarea[name=categories]").fill("rude = 0\nkind = 1")
    form.locator("button[type=submit]").click()
    admin.wait_for_url(f"**/projects/{project.slug}/score-types/")
    made = ScoreType.objects.get(project=project, name="tone")
    assert made.categories == [{"label": "rude", "value": 0}, {"label": "kind", "value": 1}]
    assert admin.locator("tr.score-type[data-name='tone'][data-own='1']").count() == 1

    owner = logged_in_page(people.owner, path=f"/projects/{project.slug}/score-types/")
    assert "rude = 0; kind = 1" in owner.inner_text("tr.score-type[data-name='tone']")
    owner.goto(f"{live_server.url}/projects/{project.slug}/settings/")
    owner.fill("form[action$='/delete/'] input[name=name]", "Data team")
    owner.click("form[action$='/delete/'] button[type=submit]")
    owner.wait_for_url("**/projects/")
    assert "is being deleted, with its 1 stream" in owner.inner_text(".messages")
    assert owner.locator(f"a[href='/projects/{project.slug}/members/']").count() == 0
    assert members.delete_marked() == {project.pk: 1}  # (the periodic job's run)
    assert not Project.objects.filter(pk=project.pk).exists()

    for page in (admin, owner):
        assert not page.errors and not page.csp_violations
