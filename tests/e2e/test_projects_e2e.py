"""The top bar's project switcher in real Chromium (static/js/project_switch.js): choosing a
project in the select sends the form at once, back to the same page, which then shows that
project's streams."""

import pytest
from django.contrib.auth import get_user_model

from streams.models import Membership, Project, Stream

pytestmark = [pytest.mark.e2e]


def test_choosing_a_project_shows_its_streams(live_server, logged_in_page, transactional_db):
    user = get_user_model().objects.create_user("kim")
    team = Project.objects.create(name="Team", slug="team")
    Membership.objects.create(project=team, user=user, role=Membership.Role.MEMBER)
    mine = Stream.objects.create(user=user, status="completed", requested_model="m-mine")
    theirs = Stream.objects.create(
        user=user, project=team, status="completed", requested_model="m-team"
    )
    page = logged_in_page(user, path="/?status=completed")
    assert page.locator(f"#stream-row-{mine.pk}").count() == 1
    assert page.locator(f"#stream-row-{theirs.pk}").count() == 0
    assert page.locator("#project-select").input_value() == Project.personal(user).slug

    page.select_option("#project-select", "team")  # no button: the script sends it
    page.wait_for_url(f"{live_server.url}/?status=completed")
    page.locator(f"#stream-row-{theirs.pk}").wait_for()
    assert page.locator(f"#stream-row-{mine.pk}").count() == 0
    assert page.locator("#project-select").input_value() == "team"
    assert page.errors == [] and page.csp_violations == []
