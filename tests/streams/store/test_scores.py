"""Scores and comments: the write path (streams/store/scores.py), its rollups, the API, the
list's filter and column, the exports and the Prometheus counter."""

import datetime as dt
import json

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.test import AsyncClient

from streams.models import Comment, Score, ScoreRollup, ScoreType, Stream
from streams.observe import telemetry
from streams.store import aggregates, retention, scores
from tests.support.clients import bearer, session

pytestmark = pytest.mark.django_db(transaction=True)

T0 = dt.datetime(2026, 11, 3, 10, 15, tzinfo=dt.UTC)


def finished(user, model="m-fast", status=Stream.Status.COMPLETED, **fields):
    created_at = fields.pop("created_at", T0)
    stream = Stream.objects.create(
        user=user, status=status, requested_model="auto", resolved_model=model, **fields
    )
    Stream.objects.filter(pk=stream.pk).update(created_at=created_at)  # (auto_now_add)
    stream.refresh_from_db()
    return stream


def rolled(name="thumbs", span=aggregates.DAY, tag=""):
    """{(model, status): (n, sum_milli, positive)} of the day rows of a score type."""
    kind = scores.score_type(name)
    out = {}
    every = aggregates.EVERY_PROJECT  # (each stream once)
    for r in ScoreRollup.objects.filter(score_type=kind.pk, span=span, tag=tag, project_key=every):
        key = (r.resolved_model, r.status)
        n, s, p = out.get(key, (0, 0, 0))
        out[key] = (n + r.n, s + r.sum_milli, p + r.positive)
    return {k: v for k, v in out.items() if any(v)}


def stars():
    return ScoreType.objects.create(name="stars", kind="numeric", minimum=1, maximum=5)


def verdict():
    return ScoreType.objects.create(
        name="verdict",
        kind="categorical",
        minimum=0,
        maximum=2,
        categories=[
            {"label": "wrong", "value": 0},
            {"label": "partly", "value": 1},
            {"label": "right", "value": 2},
        ],
    )


class TestGiving:
    def test_thumbs_up_then_down_replaces_the_score_and_moves_the_rollup(self, people):
        stream = finished(people.owner)
        scores.give(stream.pk, author=people.owner, name="thumbs", label="up", source="person")
        assert rolled() == {("m-fast", "completed"): (1, 1000, 1)}
        scores.give(stream.pk, author=people.owner, name="thumbs", value=0, source="person")
        assert Score.objects.count() == 1
        assert Score.objects.get().label == "down"
        assert rolled() == {("m-fast", "completed"): (1, 0, 0)}

    def test_each_author_and_key_scores_once(self, people):
        stream = finished(people.owner)
        for author, key in ((people.owner, ""), (people.staff, ""), (people.owner, "user-7")):
            scores.give(stream.pk, author=author, name="thumbs", value=1, source="api", key=key)
        scores.give(stream.pk, author=people.owner, name="thumbs", value=1, source="api", key="")
        assert Score.objects.count() == 3
        assert rolled() == {("m-fast", "completed"): (3, 3000, 3)}

    def test_values_are_checked_against_the_type(self, people):
        stream = finished(people.owner)
        stars(), verdict()
        bad = [
            dict(name="nope", value=1),
            dict(name="", value=1),
            dict(name="thumbs", value=2),
            dict(name="thumbs", label="sideways"),
            dict(name="stars", value=6),
            dict(name="stars", value=float("nan")),
            dict(name="stars", value="3"),
            dict(name="stars", value=True),
            dict(name="verdict", label="maybe"),
            dict(name="thumbs", value=1, comment="x" * 2001),
            dict(name="thumbs", value=1, key="k" * 101),
        ]
        for kwargs in bad:
            with pytest.raises(scores.Invalid):
                scores.give(stream.pk, author=people.owner, source="person", **kwargs)
        assert not Score.objects.exists()
        scores.give(stream.pk, author=people.owner, name="stars", value=4.5, source="person")
        s = scores.give(stream.pk, author=people.owner, name="verdict", value=2, source="person")
        assert (s.value, s.label) == (2.0, "right")

    def test_positive_is_above_the_middle_of_the_range(self, people):
        stream = finished(people.owner)
        stars()
        for n, value in enumerate((1, 3, 3.5, 5)):
            scores.give(
                stream.pk, author=people.owner, name="stars", value=value, source="api", key=str(n)
            )
        assert rolled("stars") == {("m-fast", "completed"): (4, 12500, 2)}
        summary = scores.summaries([stream.pk])[stream.pk]
        assert (summary.n, summary.positive, summary.up, summary.down) == (4, 2, 0, 0)

    def test_a_running_streams_scores_are_counted_when_it_finishes(self, people):
        stream = finished(people.owner, status=Stream.Status.STREAMING)
        scores.give(stream.pk, author=people.owner, name="thumbs", value=1, source="person")
        assert rolled() == {}
        with transaction.atomic(), aggregates.tracking([stream.pk]):
            Stream.objects.filter(pk=stream.pk).update(status=Stream.Status.FAILED)
        assert rolled() == {("m-fast", "failed"): (1, 1000, 1)}

    def test_withdrawing_and_admin_deletes_subtract_each_score_once(self, people):
        stream = finished(people.owner, tags=["eval"])
        mine = scores.give(stream.pk, author=people.owner, name="thumbs", value=1, source="person")
        for key in ("a", "b", "c"):
            scores.give(
                stream.pk, author=people.staff, name="thumbs", value=0, source="api", key=key
            )
        assert rolled(tag="eval") == {("m-fast", "completed"): (4, 1000, 1)}
        scores.withdraw(mine)
        assert rolled() == {("m-fast", "completed"): (3, 0, 0)}
        Score.objects.filter(key__in=("a", "b")).delete()  # the admin's "delete selected"
        assert rolled() == rolled(tag="eval") == {("m-fast", "completed"): (1, 0, 0)}

    def test_deleting_the_stream_subtracts_its_scores_once(self, people):
        stream = finished(people.owner)
        other = finished(people.owner)
        for s in (stream, other):
            scores.give(s.pk, author=people.owner, name="thumbs", value=1, source="person")
        stream.delete()
        assert not Score.objects.filter(stream_id=stream.pk).exists()
        assert rolled() == {("m-fast", "completed"): (1, 1000, 1)}

    def test_scores_survive_retention_in_the_rollups(self, people, settings):
        old = finished(people.owner, created_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=40))
        scores.give(old.pk, author=people.owner, name="thumbs", value=1, source="person")
        before = rolled()
        settings.STREAMSCOPE = {"RETAIN_STREAMS_DAYS": 30}
        retention.prune()
        assert not Stream.objects.filter(pk=old.pk).exists()
        assert before and rolled() == before

    def test_rebuild_agrees_with_the_incremental_rollups(self, people):
        stars()
        a, b = finished(people.owner, tags=["x"]), finished(people.staff, model="m-slow")
        scores.give(a.pk, author=people.owner, name="thumbs", value=1, source="person")
        scores.give(a.pk, author=people.owner, name="stars", value=2, source="person")
        scores.give(b.pk, author=people.staff, name="stars", value=5, source="api", key="z")
        incremental = aggregates.stored()[ScoreRollup]
        with transaction.atomic():
            aggregates.rebuild()
        assert incremental and aggregates.stored()[ScoreRollup] == incremental

    def test_comments_are_bounded_text(self, people):
        stream = finished(people.owner)
        with pytest.raises(scores.Invalid):
            scores.comment(stream.pk, author=people.owner, text="   ", source="person")
        with pytest.raises(scores.Invalid):
            scores.comment(stream.pk, author=people.owner, text="x" * 2001, source="person")
        scores.comment(stream.pk, author=people.owner, text=" Too long. ", source="person")
        assert Comment.objects.get().text == "Too long."
        assert scores.summaries([stream.pk])[stream.pk].comments == 1


async def post(client, data, path="/api/scores/"):
    return await client.post(path, json.dumps(data), content_type="application/json")


class TestApi:
    async def test_an_application_scores_by_stream_id_and_by_response_id(self, people):
        stream = await sync_to_async(finished)(people.owner, upstream_id="resp_abc123")
        before = telemetry.SCORES.labels("thumbs", "thumbs", "api", "true")._value.get()
        r = await post(bearer(people.owner), {"stream": stream.pk, "name": "thumbs", "value": 1})
        assert r.status_code == 201, r.content
        body = r.json()
        assert (body["value"], body["label"], body["positive"], body["source"]) == (
            1.0, "up", True, "api",
        )  # fmt: skip
        assert body["author"] == "owner"
        r = await post(
            bearer(people.owner),
            {"response_id": "resp_abc123", "name": "thumbs", "label": "down", "comment": "No."},
        )
        assert r.status_code == 200 and r.json()["label"] == "down"
        after = telemetry.SCORES.labels("thumbs", "thumbs", "api", "true")._value.get()
        assert after == before + 1
        r = await post(
            bearer(people.owner),
            {"response_id": "resp_abc123", "text": "Checked."},
            "/api/comments/",
        )
        assert r.status_code == 201
        r = await bearer(people.owner).get(f"/api/scores/?stream={stream.pk}")
        data = r.json()
        assert [s["label"] for s in data["scores"]] == ["down"]
        assert [c["text"] for c in data["comments"]] == ["Checked."]
        summary = (await bearer(people.owner).get(f"/api/streams/{stream.pk}/")).json()
        assert summary["scores"] == data["scores"] and summary["comments"] == data["comments"]

    async def test_it_answers_404_for_streams_one_may_not_see(self, people):
        stream = await sync_to_async(finished)(people.owner, upstream_id="resp_theirs")
        for data in ({"stream": stream.pk}, {"response_id": "resp_theirs"}, {"stream": 10**9}):
            r = await post(bearer(people.stranger), {**data, "name": "thumbs", "value": 1})
            assert r.status_code == 404, data
        r = await bearer(people.stranger).get(f"/api/scores/?stream={stream.pk}")
        assert r.status_code == 404
        r = await post(bearer(people.staff), {"stream": stream.pk, "name": "thumbs", "value": 0})
        assert r.status_code == 201
        assert await Score.objects.acount() == 1

    async def test_bad_input_is_a_clear_400_and_stores_nothing(self, people):
        stream = await sync_to_async(finished)(people.owner)
        client = bearer(people.owner)
        cases = [
            {"name": "thumbs", "value": 1},
            {"stream": stream.pk, "response_id": "x", "name": "thumbs", "value": 1},
            {"stream": str(stream.pk), "name": "thumbs", "value": 1},
            {"stream": stream.pk, "name": "thumbs", "value": 7},
            {"stream": stream.pk, "name": "made-up", "value": 1},
            {"stream": stream.pk, "name": ["thumbs"], "value": 1},
            {"stream": stream.pk, "name": "thumbs", "value": 1, "comment": 5},
        ]
        for data in cases:
            r = await post(client, data)
            assert r.status_code == 400, data
            assert r.json()["error"]["message"], data
        r = await client.post("/api/scores/", "{nope", content_type="application/json")
        assert r.status_code == 400
        r = await post(client, {"stream": stream.pk, "text": ""}, "/api/comments/")
        assert r.status_code == 400
        assert await Score.objects.acount() == 0 and await Comment.objects.acount() == 0

    async def test_anonymous_gets_401_and_types_are_listed(self, people):
        r = await post(AsyncClient(), {"stream": 1, "name": "thumbs", "value": 1})
        assert r.status_code == 401
        r = await session(people.owner).get("/api/score-types/")
        assert [t["name"] for t in r.json()["score_types"]] == ["thumbs"]


class TestPages:
    """The timeline's panel, the thumbs (htmx and plain forms), the list's filter, column and
    CSV; who may score is tests/streams/access/test_access.py's."""

    def test_thumbs_toggle_and_the_panel_shows_scores_and_comments(self, people, client):
        stream = finished(people.owner)
        client.force_login(people.owner)
        url = f"/streams/{stream.pk}/score/"
        htmx = {"HTTP_HX_REQUEST": "true"}
        r = client.post(
            url, {"name": "thumbs", "value": "up", "toggle": "1", "compact": "1"}, **htmx
        )
        assert r.status_code == 200
        assert 'data-mine="up"' in r.content.decode()
        assert Score.objects.get().label == "up"
        r = client.post(
            url, {"name": "thumbs", "value": "up", "toggle": "1", "compact": "1"}, **htmx
        )
        assert 'data-mine=""' in r.content.decode() and not Score.objects.exists()
        # without JavaScript: back to the timeline's panel
        r = client.post(url, {"name": "thumbs", "value": "down"})
        assert r.status_code == 302 and r["Location"].endswith(f"/streams/{stream.pk}/#feedback")
        r = client.post(f"/streams/{stream.pk}/comment/", {"text": "<b>Check</b> the units."})
        assert r.status_code == 302
        page = client.get(f"/streams/{stream.pk}/").content.decode()
        assert 'id="feedback"' in page and "&lt;b&gt;Check&lt;/b&gt; the units." in page
        assert 'data-mine="down"' in page

    def test_bad_scores_are_a_400_with_the_reason(self, people, client):
        stream = finished(people.owner)
        stars()
        client.force_login(people.owner)
        url = f"/streams/{stream.pk}/score/"
        bad = (
            {"name": "stars", "value": "lots"},
            {"name": "stars", "value": "9"},
            {"name": "nope", "value": "1"},
            {"name": "thumbs", "value": "sideways"},
        )
        for data in bad:
            r = client.post(url, data, HTTP_HX_REQUEST="true")
            assert r.status_code == 400, data
            assert 'role="alert"' in r.content.decode(), data
        r = client.post(url, {"name": "stars", "value": "9"})  # no JavaScript: a page
        assert r.status_code == 400 and "<html" in r.content.decode()
        assert not Score.objects.exists()
        r = client.post(url, {"name": "stars", "value": "4,5"})
        assert r.status_code == 302 and Score.objects.get().value == 4.5

    def test_only_ones_own_score_is_taken_back(self, people, client):
        stream = finished(people.owner)
        theirs = scores.give(
            stream.pk, author=people.staff, name="thumbs", value=1, source="person"
        )
        client.force_login(people.owner)
        r = client.post(f"/streams/{stream.pk}/scores/{theirs.pk}/withdraw/")
        assert r.status_code == 404 and Score.objects.exists()

    def test_the_list_filters_and_shows_scores(self, people, client):
        good, bad, none = (finished(people.owner) for _ in range(3))
        scores.give(good.pk, author=people.owner, name="thumbs", value=1, source="person")
        scores.give(bad.pk, author=people.owner, name="thumbs", value=0, source="person")
        scores.comment(bad.pk, author=people.owner, text="Wrong city.", source="person")
        client.force_login(people.owner)

        def listed(score):
            html = client.get("/", {"score": score}).content.decode()
            return {s.pk for s in (good, bad, none) if f'id="stream-row-{s.pk}"' in html}

        assert listed("positive") == {good.pk}
        assert listed("negative") == {bad.pk}
        assert listed("any") == {good.pk, bad.pk}
        assert listed("none") == {none.pk}
        assert listed("") == {good.pk, bad.pk, none.pk}
        assert client.get("/", {"score": "bogus"}).status_code == 400
        html = client.get("/").content.decode()
        assert "▼1" in html and "1 comment" in html
        response = client.get("/streams.csv")
        rows = b"".join(response.streaming_content).decode().splitlines()
        header = rows[0].split(",")
        cells = {r.split(",")[0]: r.split(",") for r in rows[1:]}
        col = {name: header.index(name) for name in ("scores", "thumbs_down", "comments")}
        assert [cells[str(bad.pk)][col[c]] for c in col] == ["1", "1", "1"]
        assert [cells[str(none.pk)][col[c]] for c in col] == ["0", "0", "0"]

    def test_beside_an_answer_a_typed_score_and_a_comment_answer_with_the_thumbs(
        self, people, client
    ):
        from dashboard.models import Conversation, Turn

        stream = finished(people.owner)
        stars()
        client.force_login(people.owner)
        conversation = Conversation.objects.create(user=people.owner, title="Utrecht")
        Turn.objects.create(conversation=conversation, position=0, prompt="Hoi", stream=stream)
        page = client.get(f"/playground/{conversation.pk}/").content.decode()
        assert f'<div class="thumbs-box" data-swap-invalid data-stream="{stream.pk}">' in page
        htmx = {"HTTP_HX_REQUEST": "true"}
        url = f"/streams/{stream.pk}/score/"
        data = {"name": "stars", "value": "5", "comment": "Precies.", "compact": "1"}
        r = client.post(url, data, **htmx)
        body = r.content.decode()
        assert r.status_code == 200 and body.startswith('<div class="thumbs-box"')
        assert "Saved: stars 5." in body and 'role="status"' in body
        assert Score.objects.get().comment == "Precies."
        r = client.post(url, {**data, "value": "6"}, **htmx)
        assert r.status_code == 400 and "1 to 5" in r.content.decode()
        assert r.content.decode().startswith('<div class="thumbs-box"')
        r = client.post(
            f"/streams/{stream.pk}/comment/", {"text": "Noem de provincie.", "compact": "1"}, **htmx
        )
        assert r.status_code == 200 and "Comment added." in r.content.decode()
        assert Comment.objects.get().text == "Noem de provincie."
        assert Score.objects.get().value == 5.0
        # a thumb answers with the thumbs pressed, its "Score…" folded (no note opens it)
        thumb = {"name": "thumbs", "value": "up", "toggle": "1", "compact": "1"}
        body = client.post(url, thumb, **htmx).content.decode()
        assert 'data-mine="up"' in body and '<details class="score-more">' in body
        assert 'role="status"' not in body

    def test_a_thumb_saved_is_confirmed_in_the_pages_language(self, people, client):
        """Not "Saved: thumbs up." on a Dutch page: the thumbs type's words are ours. (A thumb
        pressed answers without a note, which would unfold "Score…"; the score form's thumbs
        are confirmed.)"""
        stream = finished(people.owner)
        client.force_login(people.owner)
        url = f"/streams/{stream.pk}/score/"
        dutch = {"HTTP_HX_REQUEST": "true", "HTTP_ACCEPT_LANGUAGE": "nl"}
        r = client.post(url, {"name": "thumbs", "value": "up", "compact": "1"}, **dutch)
        body = r.content.decode()
        assert r.status_code == 200 and "Opgeslagen: duim omhoog." in body, body
        assert "thumbs up" not in body
        r = client.post(
            url, {"name": "thumbs", "value": "down", "compact": "1"}, HTTP_HX_REQUEST="true"
        )
        assert "Saved: a thumbs down." in r.content.decode()


class TestFromAnApplication:
    def test_an_sdk_client_scores_its_proxied_answer_by_response_id_and_by_stream_id(
        self, live_server_daphne, people
    ):
        """The official openai SDK through the recording proxy, then the score by the
        response's own id and by the id the proxy returned in X-Streamscope-Stream."""
        import httpx
        import openai

        from streams.models import ApiToken
        from tests.support.recording import wait_terminal

        token = ApiToken.issue(people.owner, name="app")
        client = openai.OpenAI(
            base_url=f"{live_server_daphne.url}/v1", api_key=token, max_retries=0
        )
        raw = client.responses.with_raw_response.create(
            model="auto", input="Hoe hoog is de Dom?", stream=True,
            metadata={"time_scale": "0.05"},
        )  # fmt: skip
        stream_id = int(raw.headers["x-streamscope-stream"])
        events = list(raw.parse())
        response_id = events[-1].response.id
        wait_terminal(stream_id)
        api = httpx.Client(
            base_url=live_server_daphne.url, headers={"Authorization": f"Bearer {token}"}
        )
        r = api.post(
            "/api/scores/", json={"response_id": response_id, "name": "thumbs", "value": 1}
        )
        assert r.status_code == 201, r.text
        assert r.json()["stream"] == stream_id
        r = api.post(
            "/api/scores/",
            json={"stream": stream_id, "name": "thumbs", "value": 0, "key": "end-user-7"},
        )
        assert r.status_code == 201
        given = api.get(f"/api/scores/?stream={stream_id}").json()["scores"]
        assert sorted((s["key"], s["label"]) for s in given) == [("", "up"), ("end-user-7", "down")]
        # the recorder had finished the stream: both scores are in its rollups already
        assert [v for v in rolled().values()] == [(2, 1000, 1)]
