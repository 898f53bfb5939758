"""A team forms in real Chromium (pytest-django's live server, a real SMTP server): a user
makes a project on /projects/, invites an address as a viewer on its members page, and the
mail's link, opened by a colleague in a second browser, shows the invitation; "Join" makes
them a viewer, working in that project. The owner sees them listed and makes them a member;
the same link opens nothing a second time. No script error and no refusal by the page's
Content-Security-Policy on the way."""

import re

import pytest

from streams.models import Membership
from tests.e2e.conftest import take_screenshot
from tests.support.mail import smtp_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_project_is_made_an_invitation_mailed_and_accepted(
    logged_in_page, people, live_server, settings
):
    with smtp_server(settings) as inbox:
        owner = logged_in_page(people.owner, path="/projects/")
        owner.fill("input[name=name]", "Search team")
        owner.click("text=Make the project")
        owner.wait_for_url("**/projects/search-team/members/")
        assert "you are its owner" in owner.inner_text(".messages")

        owner.fill("input[name=email]", "carol@example.com")
        owner.locator("#invite ~ form select[name=role]").select_option("viewer")
        owner.click("text=Send the invitation")
        owner.wait_for_url("**/projects/search-team/members/")
        assert "Invitation sent to carol@example.com" in owner.inner_text(".messages")
        assert owner.locator("tr.invitation[data-email='carol@example.com']").count() == 1

        assert [to for to, _ in inbox.messages] == [["carol@example.com"]]
        link = re.search(re.escape(live_server.url) + r"/invitations/inv_[\w-]+/", inbox.body())
        assert link, inbox.body()

        colleague = logged_in_page(people.stranger, path="/")
        colleague.goto(link.group(0))
        take_screenshot(colleague, "invitation")
        assert "Join “Search team”" in colleague.inner_text("h1")
        assert "carol@example.com" in colleague.inner_text(".invitation-card")
        colleague.click("text=Join the project")
        colleague.wait_for_url("**/?project=search-team")
        assert "You joined “Search team” as Viewer" in colleague.inner_text(".messages")
        membership = Membership.objects.get(project__slug="search-team", user=people.stranger)
        assert membership.role == "viewer"

        owner.reload()
        take_screenshot(owner, "project_members")
        row = owner.locator("tr.member[data-user='stranger']")
        assert row.get_attribute("data-role") == "viewer"
        assert owner.locator("tr.invitation").count() == 0  # used: no longer open
        row.locator("select[name=role]").select_option("member")
        row.locator("text=Change").click()
        owner.wait_for_url("**/projects/search-team/members/")
        assert owner.locator("tr.member[data-user='stranger']").get_attribute("data-role") == (
            "member"
        )

        colleague.goto(link.group(0))
        assert "This invitation does not work" in colleague.inner_text("h1")

        owner.goto(f"{live_server.url}/projects/")
        take_screenshot(owner, "project_list")
        owner.goto(f"{live_server.url}/projects/search-team/settings/")
        assert "deletes its 0 streams" in owner.inner_text(".delete-count")
        take_screenshot(owner, "project_settings")

        for page in (owner, colleague):
            assert not page.errors and not page.csp_violations
