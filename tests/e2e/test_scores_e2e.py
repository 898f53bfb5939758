"""Scoring, in real Chromium against a real Daphne:

- on the timeline: thumbs up (pressed, counted, no reload), pressed again (taken back), a
  score of a numeric type with a comment, a wrong value refused with its reason in the panel,
  a comment; the list then filters on the score and shows it in its Feedback column;
- on the comparison, above each column: thumbs, and "Score…" for a typed score with a comment
  and a comment (the playground has the same box: tests/streams/store/test_scores.py).
Screenshots at 1440 and 390 px: tests/e2e/test_screenshots_e2e.py (`site`: "feedback")."""

import pytest

from streams.models import Comment, Score, ScoreType
from tests.support.processes import wait_until
from tests.support.recording import recorded, text_events

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

MARK = "() => { window.__notReloaded = true; }"
NOT_RELOADED = "() => window.__notReloaded === true"


def test_a_person_scores_and_comments_on_the_timeline_and_the_list_finds_it(
    logged_in_page, people, live_server_daphne
):
    owner = people.owner
    ScoreType.objects.create(name="stars", kind="numeric", minimum=1, maximum=5)
    stream = recorded(owner, text_events("Utrecht ligt in het midden."))
    other = recorded(owner, text_events("Iets anders."))
    page = logged_in_page(owner, base_url=live_server_daphne.url, path=f"/streams/{stream.pk}/")
    page.evaluate(MARK)
    up = page.locator("#feedback .thumb.up")
    up.click()
    page.wait_for_selector('#feedback .thumbs[data-mine="up"]')
    assert up.get_attribute("aria-pressed") == "true"
    assert page.locator("#feedback .thumb.up .n").inner_text() == "1"
    assert Score.objects.get(stream=stream).label == "up"
    page.locator("#feedback .thumb.up").click()  # pressed again: taken back
    page.wait_for_selector('#feedback .thumbs[data-mine=""]')
    wait_until(lambda: not Score.objects.exists(), 10, what="the thumbs taken back")

    page.locator("#feedback details.feedback-form summary").click()
    page.select_option("#feedback select[name=name]", "stars")
    page.fill("#feedback input[name=value]", "9")
    page.fill("#feedback textarea[name=comment]", "Te lang.")
    page.click("#feedback details.feedback-form button[type=submit]")
    page.wait_for_selector("#feedback p.error")
    assert "1 to 5" in page.locator("#feedback p.error").inner_text()
    page.fill("#feedback input[name=value]", "4")
    page.click("#feedback details.feedback-form button[type=submit]")
    page.wait_for_selector("#feedback table.feedback-scores td:has-text('Te lang.')")
    page.fill("#feedback textarea[name=text]", "Klopt, maar noem de provincie.")
    page.locator("#feedback form[action$='/comment/'] button[type=submit]").click()
    page.wait_for_selector("#feedback .feedback-comments li")
    assert page.evaluate(NOT_RELOADED)
    assert Comment.objects.get().text == "Klopt, maar noem de provincie."
    assert Score.objects.get().value == 4.0

    page.goto(f"{live_server_daphne.url}/?score=positive")
    rows = page.locator("table.streams tbody tr.stream")
    assert [int(r.get_attribute("data-id")) for r in rows.all()] == [stream.pk]
    assert "1/1" in page.locator(f"#stream-row-{stream.pk} td.feedback-cell").inner_text()
    page.goto(f"{live_server_daphne.url}/?score=none")
    ids = [int(r.get_attribute("data-id")) for r in rows.all()]
    assert other.pk in ids and stream.pk not in ids
    assert page.errors == []


def test_thumbs_and_scores_beside_answers_on_the_comparison(
    logged_in_page, people, live_server_daphne
):
    owner = people.owner
    ScoreType.objects.create(name="stars", kind="numeric", minimum=1, maximum=5)
    a = recorded(owner, text_events("Eerste antwoord."))
    b = recorded(owner, text_events("Tweede antwoord."))
    page = logged_in_page(
        owner, base_url=live_server_daphne.url, path=f"/streams/{a.pk}/compare/{b.pk}/"
    )
    page.locator(f'.thumbs[data-stream="{b.pk}"] .thumb.down').click()
    page.wait_for_selector(f'.thumbs[data-stream="{b.pk}"][data-mine="down"]')
    assert Score.objects.get().stream_id == b.pk
    assert page.locator(f'.thumbs[data-stream="{a.pk}"]').get_attribute("data-mine") == ""
    # a typed score with a comment, and a comment, from the column's "Score…"
    box = page.locator(f'.thumbs-box[data-stream="{a.pk}"]')
    box.locator("summary").click()
    box.locator("select[name=name]").select_option("stars")
    box.locator("input[name=value]").fill("2")
    box.locator(".score-pop textarea[name=comment]").fill("Te kort.")
    box.locator(".score-pop button.primary").click()
    page.wait_for_selector(f'.thumbs-box[data-stream="{a.pk}"] p.saved')
    box.locator("form[action$='/comment/'] textarea[name=text]").fill("Vergelijk met b.")
    box.locator("form[action$='/comment/'] button[type=submit]").click()
    page.wait_for_selector(f'.thumbs-box[data-stream="{a.pk}"] p.saved:has-text("Comment added")')
    stars = Score.objects.get(stream=a)
    assert (stars.score_type.name, stars.value, stars.comment) == ("stars", 2.0, "Te kort.")
    assert Comment.objects.get(stream=a).text == "Vergelijk met b."
    assert page.errors == []
