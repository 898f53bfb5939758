"""The token page in real Chromium against a real Daphne (and the simulator process): a
project's admin makes a token for a member with the form, copies it from the page that shows it
once, and the openai SDK records a stream through the proxy with it, in the project; revoked
on the page, the proxy refuses it (once its cache of the token has run out)."""

import time

import openai
import pytest

from streams.models import ApiToken, Membership, Project, Stream
from tests.e2e.conftest import take_screenshot
from tests.support.recording import wait_terminal

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_admin_makes_a_members_token_that_records_through_the_proxy_until_revoked(
    logged_in_page, people, live_server_daphne
):
    from django.contrib.auth import get_user_model

    server = live_server_daphne
    team = Project.objects.create(name="Team", slug="team")
    member = get_user_model().objects.create_user("member")
    Membership.objects.create(project=team, user=people.owner, role=Membership.Role.ADMIN)
    Membership.objects.create(project=team, user=member, role=Membership.Role.MEMBER)
    page = logged_in_page(people.owner, base_url=server.url, path="/tokens/?project=team")
    page.fill("#id_name", "nightly evals")
    page.select_option("#id_owner", label="member")
    page.uncheck("input[name=scopes][value=write]")
    page.fill("#id_spend_cap_day", "5")
    page.click(".token-form button[type=submit]")
    token = page.input_value("#token-value")
    assert token.startswith("ss_") and not page.errors and not page.csp_violations
    take_screenshot(page, "token_created")

    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)
    body = {"model": "auto", "input": "Hallo", "stream": True,
            "metadata": {"time_scale": "0.02", "seed": "3"}}  # fmt: skip
    assert list(client.responses.create(**body))[-1].type == "response.completed"
    stream = wait_terminal(Stream.objects.get(source=Stream.Source.PROXY).pk)
    row = ApiToken.objects.get(digest=ApiToken.hash(token))
    assert (stream.project_id, stream.user, stream.token_id) == (team.pk, member, row.pk)
    assert (row.created_by, sorted(row.scopes)) == (people.owner, ["proxy", "read"])

    page.goto(f"{server.url}/tokens/")
    listed = page.locator(f"#token-{row.pk}")
    assert "nightly evals" in listed.inner_text() and "member" in listed.inner_text()
    take_screenshot(page, "token_list")
    listed.locator("button.revoke").click()
    page.wait_for_selector(f"#token-{row.pk}[data-status=revoked]")
    deadline = time.monotonic() + 15  # (the proxy keeps a valid token for PROXY_TOKEN_CACHE_S)
    while True:
        try:
            client.models.list()
        except openai.AuthenticationError as refused:
            assert refused.body["code"] == "token_revoked"
            break
        assert time.monotonic() < deadline, "the revoked token still works"
        time.sleep(0.5)
