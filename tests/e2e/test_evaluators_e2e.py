"""The evaluators' pages in real Chromium against a real Daphne (and the simulator): a member
makes an LLM-as-judge evaluator with the form (only the judge's fields shown once the kind is
chosen), tries it on a recorded stream (the judge's own stream recorded by the server), and
sees the score and the judge's stream linked."""

import pytest

from streams.models import Evaluation, Evaluator, Project, Score, Stream
from tests.e2e.conftest import take_screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_member_makes_a_judge_and_tries_it(logged_in_page, people, live_server_daphne):
    server = live_server_daphne
    stream = Stream.objects.create(
        user=people.owner,
        project=Project.personal(people.owner),
        status=Stream.Status.COMPLETED,
        prompt="Capital of France?",
        output_text="Paris.",
    )
    page = logged_in_page(people.owner, base_url=server.url, path="/evaluators/new/")
    assert page.is_visible("#id_text")  # (exact match, the first kind, has a text)
    page.select_option("#id_kind", "judge")
    assert not page.is_visible("#id_text") and page.is_visible("#id_prompt")
    page.fill("#id_name", "grader")
    page.fill("#id_model", "gpt-oss-20b")
    page.fill("#id_metadata", '{"scenario": "judge", "judge_score": "5", "time_scale": "0"}')
    page.click("form button[type=submit].primary")
    page.wait_for_selector("h1:text('grader')")
    made = Evaluator.objects.get(name="grader")
    assert (made.kind, made.config["minimum"], made.config["maximum"]) == ("judge", 1, 5)

    page.fill("#id_stream", str(stream.pk))
    page.fill("#id_expected", "Paris")
    page.click(".try-form button[type=submit]")
    page.wait_for_selector(".tried-score")
    assert page.inner_text(".tried-score") == "Scored 5 as grader@v1."
    take_screenshot(page, "evaluator_tried")
    score = Score.objects.get(stream=stream)
    assert (score.value, score.key, score.source) == (5.0, "grader@v1", "evaluator")
    call = Evaluation.objects.get(stream=stream).judge_stream
    assert call.status == Stream.Status.COMPLETED and call.tags == ["judge"]
    assert not page.errors and not page.csp_violations
    page.locator(".tried a", has_text="The judge's stream").click()
    page.wait_for_url(f"**/streams/{call.pk}/")
