"""Two recorded streams side by side (dashboard/stats/compare.py, /streams/<a>/compare/<b>/):
the figures and their differences, the arrival curves, the word diff, access, the live poll, and
the ways there (the list's ticks, a timeline's "Compare with…")."""

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.stats import compare
from streams.models import Stream
from tests.support.recording import recorded, text_events

pytestmark = pytest.mark.django_db


def test_the_word_diff_keeps_the_words_and_spaces_and_marks_what_differs():
    diff, cut = compare.word_diff("De Dom is hoog.", "De Domtoren is erg hoog.")
    assert diff == [
        ("=", "De "),
        ("-", "Dom"),
        ("+", "Domtoren"),
        ("=", " is "),
        ("+", "erg "),
        ("=", "hoog."),
    ]
    assert not cut
    # both sides rebuild from the pieces
    assert "".join(t for op, t in diff if op != "+") == "De Dom is hoog."
    assert "".join(t for op, t in diff if op != "-") == "De Domtoren is erg hoog."
    long = " ".join(["woord"] * (compare.DIFF_MAX_WORDS + 10))
    assert compare.word_diff(long, long)[1]


def test_the_arrival_curve_is_cumulative_characters_since_the_request():
    owner = get_user_model().objects.create_user("owner")
    stream = recorded(owner, text_events("Hallo ", "wereld", "!"))
    Stream.objects.filter(pk=stream.pk).update(request_written_us=500)
    stream.refresh_from_db()
    curve = compare.arrivals(stream)
    assert curve["y"] == [6, 12, 13]
    assert curve["x"] == sorted(curve["x"]) and curve["x"][0] >= 0
    assert curve["ttft_ms"] == stream.ttft_ms


def test_the_arrival_curve_is_thinned_to_its_bound(monkeypatch):
    monkeypatch.setattr(compare, "CURVE_POINTS", 10)
    owner = get_user_model().objects.create_user("owner")
    stream = recorded(owner, text_events(*["x"] * 100))
    curve = compare.arrivals(stream)
    assert len(curve["x"]) <= 11 and curve["y"][-1] == 100  # the last point kept


def test_figures_and_their_differences():
    owner = get_user_model().objects.create_user("owner")
    a = recorded(owner, text_events("Kort"))
    b = recorded(owner, text_events("Wat langer"))
    Stream.objects.filter(pk=a.pk).update(ttft_ms=100.0, cost_nanos=1000, cost_currency="EUR")
    Stream.objects.filter(pk=b.pk).update(ttft_ms=250.0, cost_nanos=4000, cost_currency="USD")
    a.refresh_from_db()
    b.refresh_from_db()
    rows = {str(label): (va, vb, diff) for label, va, vb, diff, _ in compare.figures(a, b)}
    assert rows["TTFT"] == (100.0, 250.0, 150.0)
    assert rows["Output characters"] == (4, 10, 6)
    assert compare.cost_difference(a, b) is None  # EUR and USD are never subtracted
    Stream.objects.filter(pk=b.pk).update(cost_currency="EUR")
    b.refresh_from_db()
    assert compare.cost_difference(a, b) == 3000


class TestPage:
    @pytest.fixture(autouse=True)
    def _streams(self, db):
        User = get_user_model()
        self.owner = User.objects.create_user("owner")
        self.stranger = User.objects.create_user("stranger")
        self.a = recorded(self.owner, text_events("De Dom is <b>hoog</b>."))
        self.b = recorded(self.owner, text_events("De Domtoren is erg hoog."))
        self.client = Client()
        self.client.force_login(self.owner)

    def test_the_page_shows_both_the_chart_data_and_the_escaped_diff(self):
        r = self.client.get(f"/streams/{self.a.pk}/compare/{self.b.pk}/")
        assert r.status_code == 200
        html = r.content.decode()
        assert "<del>Dom</del>" in html and "<ins>Domtoren</ins>" in html
        assert "&lt;b&gt;hoog&lt;/b&gt;" in html and "<b>hoog</b>" not in html
        data = re.search(r'<script id="arrivals-data" type="application/json">(.*?)</script>', html)
        curves = json.loads(data.group(1))
        assert [c["label"] for c in curves] == [f"a · #{self.a.pk}", f"b · #{self.b.pk}"]
        assert 'data-live="off"' in html and "hx-trigger" not in html

    def test_figures_carry_their_units_and_times_their_zone(self):
        """Every figure says what it is in ("250.0 ms", "+150.0 ms (+150 %)", "12.5 /s"), and the
        start times name their zone, in the page's language and zone."""
        Stream.objects.filter(pk=self.a.pk).update(ttft_ms=100.0, tokens_per_s=10.0)
        Stream.objects.filter(pk=self.b.pk).update(ttft_ms=250.0, tokens_per_s=12.5)
        self.client.cookies["streamscope_tz"] = "Europe/Amsterdam"
        url = f"/streams/{self.a.pk}/compare/{self.b.pk}/"
        html = self.client.get(url).content.decode()
        ttft = html.split(">TTFT</th>", 1)[1].split("</tr>", 1)[0]
        assert re.findall(r'class="num[^"]*">([^<]*)</td>', ttft) == [
            "100.0 ms", "250.0 ms", "+150.0 ms (+150 %)"
        ]  # fmt: skip
        rate = html.split(">Output deltas/s</th>", 1)[1].split("</tr>", 1)[0]
        assert "12.5 /s" in rate and "+2.5 /s (+25 %)" in rate
        started = html.split(">Started</th>", 1)[1].split("</tr>", 1)[0]
        assert len(re.findall(r"\d{2}:\d{2}:\d{2} CES?T<", started)) == 2, started
        dutch = self.client.get(url, HTTP_ACCEPT_LANGUAGE="nl").content.decode()
        assert "+150,0 ms (+150 %)" in dutch and "12,5 /s" in dutch

    def test_a_stream_still_running_is_polled(self):
        Stream.objects.filter(pk=self.b.pk).update(status=Stream.Status.STREAMING)
        html = self.client.get(f"/streams/{self.a.pk}/compare/{self.b.pk}/").content.decode()
        assert 'data-live="on"' in html and 'hx-trigger="every 1s"' in html
        # the poll gets the body alone
        r = self.client.get(
            f"/streams/{self.a.pk}/compare/{self.b.pk}/",
            headers={"HX-Request": "true", "HX-Target": "compare-body"},
        )
        assert r.content.decode().lstrip().startswith('<div id="compare-body"')

    def test_someone_elses_stream_is_a_404_either_way(self):
        theirs = recorded(self.stranger, text_events("Niet van jou"))
        for path in (
            f"/streams/{self.a.pk}/compare/{theirs.pk}/",
            f"/streams/{theirs.pk}/compare/{self.a.pk}/",
        ):
            assert self.client.get(path).status_code == 404

    def test_the_ways_there(self):
        r = self.client.get("/streams/compare/", {"s": [self.a.pk, self.b.pk]})
        side_by_side = f"/streams/{self.a.pk}/compare/{self.b.pk}/"
        assert r.status_code == 302 and r["Location"] == side_by_side
        assert self.client.get("/streams/compare/", {"s": [self.a.pk]}).status_code == 200
        r = self.client.get(f"/streams/{self.a.pk}/compare/", {"other": f"#{self.b.pk}"})
        assert r["Location"] == f"/streams/{self.a.pk}/compare/{self.b.pk}/"
        picker = self.client.get(f"/streams/{self.a.pk}/compare/").content.decode()
        assert f"/streams/{self.a.pk}/compare/{self.b.pk}/" in picker  # among the newest
        assert self.client.get(f"/streams/{self.a.pk}/compare/", {"other": "x"}).status_code == 200
        listed = self.client.get("/").content.decode()
        assert f'name="s" value="{self.a.pk}"' in listed and 'id="compare-form"' in listed
        timeline = self.client.get(f"/streams/{self.a.pk}/").content.decode()
        assert f'href="/streams/{self.a.pk}/compare/"' in timeline
