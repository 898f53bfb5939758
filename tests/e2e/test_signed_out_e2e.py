"""After a restart, an open page tells the truth about its session (Chromium, real Daphne):
with the secret key kept, the live list reconnects and stays live; with another key (the old
one-machine default: random per start), its socket is refused, and instead of "reconnecting…"
for ever the page says it was signed out, with a link that logs in and comes back."""

import pytest

from tests.conftest import DaphneServer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _restart(server, simulator_process, **env):
    port = server.port
    server.stop()
    return DaphneServer(simulator_process.base_url, port=port, env=env)


def test_a_restart_with_the_same_key_keeps_the_page_live_and_another_key_signs_out(
    people, simulator_process, logged_in_page
):
    server = DaphneServer(simulator_process.base_url)
    try:
        page = logged_in_page(people.owner, base_url=server.url, path="/?size=5")
        live = page.locator("#list-live")
        state = page.locator("#list-live[data-state='live']")
        state.wait_for()

        # the same secret key (kept in a file, or DJANGO_SECRET_KEY): the session holds
        server = _restart(server, simulator_process)
        page.locator("#list-live[data-state='retrying']").wait_for()  # it noticed the restart
        state.wait_for()
        page.wait_for_timeout(300)
        assert page.locator("#signed-out").count() == 0

        # another secret key: the session cookie means nothing to the new server
        server = _restart(server, simulator_process, DJANGO_SECRET_KEY="another-key-" + "x" * 40)
        notice = page.locator("#signed-out")
        notice.wait_for(timeout=20_000)
        assert "signed out" in notice.inner_text()
        link = notice.locator("a")
        assert link.get_attribute("href") == "/login/?next=%2F%3Fsize%3D5"
        assert live.inner_text() == "signed out"
        link.click()
        page.wait_for_url("**/login/?next=*")
        assert not page.errors
    finally:
        server.stop()
