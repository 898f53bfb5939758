"""The stream inspection pages: the list (/), the timeline (/streams/<id>/) and its
fragments and data (events windows, one event, timing.json, replay.json). Who may see what,
and what each shows."""

import html
import json
import re
from urllib.parse import quote, urljoin, urlsplit

import pytest
from django.test import Client

from dashboard.queries import sessions
from streams.ingest.importer import import_capture
from streams.models import Event, Stream
from tests.conftest import FIXTURES, log_in_people
from tests.support.recording import recorded, text_events

XSS = "<img src=x onerror=alert(1)>"


class Base:
    """An owner with a stream, a stranger and a staff member, each with a logged-in client."""

    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)
        self.stream = recorded(
            self.owner,
            text_events("Careful with ", XSS, " and <script>alert(2)</script>."),
            prompt=f"Say {XSS}",
        )

    def get(self, client, url=None, **headers):
        return client.get(url or self.url(), headers=headers)


def htmx(target):
    return {"HX-Request": "true", "HX-Target": target}


def proxied(user, tags=("checkout", "beta"), session="s-1", **fields):
    """A stream as the recording proxy stores one (8 events, 1 ms apart from 100 ms): event i
    handed to the client 50·(i + 1) µs after its receipt, but the last, which never was."""
    fields = {"proxy_added_p50_ms": 0.2, "proxy_added_p99_ms": 0.35, **fields}
    stream = recorded(user, text_events("Hello ", "there"), source=Stream.Source.PROXY,
                      tags=list(tags), session=session, **fields)  # fmt: skip
    events = Event.objects.filter(stream=stream)
    for i in range(stream.event_count - 1):
        events.filter(index=i).update(sent_us=100_000 + 1000 * i + 50 * (i + 1))
    return stream


def rows_in_order(text):
    return [int(pk) for pk in re.findall(r'id="stream-row-(\d+)"', text)]


class TestStreamList(Base):
    def url(self):
        return "/"

    def test_it_lists_the_users_streams(self):
        r = self.get(self.owner_client)
        assert r.status_code == 200
        assert f'id="stream-row-{self.stream.pk}"' in r.text
        assert f'href="/streams/{self.stream.pk}/"' in r.text
        assert 'id="results"' in r.text and 'data-live="on"' in r.text
        assert f'data-newest="{self.stream.pk}"' in r.text

    def test_it_escapes_prompts(self):
        r = self.get(self.owner_client)
        assert XSS not in r.text
        assert "Say &lt;img src=x onerror=alert(1)&gt;" in r.text

    def test_it_hides_other_users_streams(self):
        r = self.get(self.stranger_client)
        assert r.status_code == 200
        assert f"stream-row-{self.stream.pk}" not in r.text
        assert "No streams yet." in r.text

    def test_it_shows_staff_every_stream_and_whose_it_is(self):
        r = self.get(self.staff_client)
        assert f"stream-row-{self.stream.pk}" in r.text
        assert '<td class="owner muted">owner</td>' in r.text
        assert 'class="owner' not in self.get(self.owner_client).text

    def test_it_requires_login(self):
        r = self.get(Client())
        assert r.status_code == 302 and r["Location"].startswith("/login/")

    def test_it_has_the_upload_form(self):
        r = self.get(self.owner_client)
        assert 'action="/streams/upload/"' in r.text and 'enctype="multipart/form-data"' in r.text

    def test_it_filters(self):
        failed = Stream.objects.create(user=self.owner, status="failed", prompt="broken")
        r = self.get(self.owner_client, "/?status=failed")
        assert f"stream-row-{failed.pk}" in r.text
        assert f"stream-row-{self.stream.pk}" not in r.text
        r = self.get(self.owner_client, "/?q=grachtenfiets")  # nowhere
        assert "No streams match these filters" in r.text
        # words of the answer find it too (full text), its snippet escaped like the rest
        r = self.get(self.owner_client, "/?q=careful")
        assert f"stream-row-{self.stream.pk}" in r.text and "<mark>Careful</mark>" in r.text
        assert XSS not in r.text and "<script>alert(2)" not in r.text
        r = self.get(self.owner_client, f"/?q={self.stream.upstream_id}")
        assert f"stream-row-{self.stream.pk}" in r.text

    def test_it_pages_with_cursors(self):
        Stream.objects.bulk_create([Stream(user=self.owner) for _ in range(55)])
        r = self.get(self.owner_client, "/?status=pending")
        assert r.text.count('class="stream status-pending"') == 50
        page = r.context["page"]
        assert f"before={page.older}" in r.text and "after=" not in r.text
        r = self.get(self.owner_client, f"/?status=pending&before={page.older}")
        assert r.text.count('class="stream status-pending"') == 5
        assert 'data-live="off"' in r.text  # an older page does not take live inserts
        assert f"status=pending&amp;after={r.context['page'].newer}" in r.text

    def test_it_answers_htmx_with_fragments(self):
        newer = Stream.objects.create(user=self.owner, prompt="newer")
        r = self.get(self.owner_client, f"/?after={self.stream.pk}", **htmx("streams"))
        assert r.status_code == 200 and "<form" not in r.text
        assert f"stream-row-{newer.pk}" in r.text and f"stream-row-{self.stream.pk}" not in r.text
        r = self.get(self.owner_client, "/?status=pending", **htmx("results"))
        assert r.text.lstrip().startswith('<section id="results"')
        assert f"stream-row-{newer.pk}" in r.text

    def test_it_answers_fragments_asked_for_in_the_query(self):
        # stream_list.js asks so (no htmx headers); the cursors and filters work as on pages
        newer = Stream.objects.create(user=self.owner, prompt="newer")
        r = self.get(self.owner_client, f"/?fragment=streams&before={newer.pk}")
        assert r.status_code == 200 and "<form" not in r.text
        assert f"stream-row-{self.stream.pk}" in r.text and f"stream-row-{newer.pk}" not in r.text
        r = self.get(self.owner_client, "/?status=pending&fragment=results")
        assert r.text.lstrip().startswith('<section id="results"')
        assert f"stream-row-{newer.pk}" in r.text and "fragment" not in r.text
        r = self.get(self.stranger_client, f"/?fragment=streams&before={newer.pk}")
        assert f"stream-row-{self.stream.pk}" not in r.text

    def test_it_refuses_bad_filters(self):
        r = self.get(self.owner_client, "/?status=nonsense&before=x")
        assert r.status_code == 400
        assert "Select a valid choice" in r.text

    def test_it_filters_by_tag_session_and_source(self):
        tagged = proxied(self.owner, tags=['a"b', "beta"], session="s-1")
        other = proxied(self.owner, tags=["beta"], session="s-2")
        # a tag is matched whole, never as a piece of the encoded list ('a"b' holds "b")
        for query, want in (
            ("?tag=beta", [other.pk, tagged.pk]),
            ('?tag=a"b', [tagged.pk]),
            ("?tag=b", []),
            ("?tag=BETA", []),
            ("?session=s-2", [other.pk]),
            ("?session=s-1&tag=beta", [tagged.pk]),
            ("?source=proxy", [other.pk, tagged.pk]),
            ("?source=live", [self.stream.pk]),
        ):
            r = self.get(self.owner_client, "/" + query.replace('"', "%22"))
            assert r.status_code == 200 and rows_in_order(r.text) == want, query
        # the live list's row requests keep the filters
        r = self.get(self.owner_client, f"/?tag=beta&fragment=streams&after={tagged.pk}")
        assert rows_in_order(r.text) == [other.pk]

    def test_it_filters_by_request_metadata(self):
        acme = proxied(self.owner, request_body={"input": "x", "metadata": {"tenant": "acme"}})
        odd = proxied(self.owner, request_body={"metadata": {'te"n.a-nt': "a'b", "tenant": 5}})
        for query, want in (
            ("?meta=tenant%3Dacme", [acme.pk]),
            ("?meta=tenant%3D+acme", [acme.pk]),  # spaces around the value are the form's
            ("?meta=tenant%3Dac", []),  # matched whole
            ("?meta=tenant%3D", []),
            ("?meta=nobody%3Dacme", []),
        ):
            r = self.get(self.owner_client, "/" + query)
            assert r.status_code == 200 and rows_in_order(r.text) == want, query
        assert odd.pk not in rows_in_order(self.get(self.owner_client, "/?meta=tenant%3D5").text)
        for bad in ("tenant", "%3Dacme", "a%22b%3Dc", "k" * 65 + "%3Dv"):
            r = self.get(self.owner_client, "/?meta=" + bad)
            assert r.status_code == 400 and "key=value" in r.text, bad
        # the stranger's own list never shows the owner's stream, whatever the filter
        r = self.get(self.stranger_client, "/?meta=tenant%3Dacme")
        assert rows_in_order(r.text) == []

    def test_staff_filter_by_user_and_others_only_narrow_their_own(self):
        mine = proxied(self.stranger)
        r = self.get(self.staff_client, "/?user=stranger")
        assert rows_in_order(r.text) == [mine.pk]
        assert 'name="user" value="stranger"' in r.text
        r = self.get(self.staff_client, "/?user=nobody")
        assert rows_in_order(r.text) == []
        # not staff: someone else's name finds nothing (as a name nobody has), one's own works
        r = self.get(self.owner_client, "/?user=stranger")
        assert r.status_code == 200 and rows_in_order(r.text) == []
        assert 'name="user"' not in r.text  # the filter is offered to staff only
        assert rows_in_order(self.get(self.owner_client, "/?user=owner").text) == [self.stream.pk]

    def test_rows_show_tags_and_session_escaped_and_linked(self):
        stream = proxied(self.owner, tags=[XSS], session=f"run/{XSS}")
        r = self.get(self.owner_client)
        assert XSS not in r.text
        row = r.text[r.text.index(f'id="stream-row-{stream.pk}"') :]
        assert '<a class="tag" href="/?tag=%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"' in row
        assert ">&lt;img src=x onerror=alert(1)&gt;</a>" in row
        link = "/sessions/run/%3Cimg%20src=x%20onerror=alert(1)%3E/"
        assert f'<a class="session-link" href="{link}"' in row
        assert self.get(self.owner_client, link).status_code == 200  # the link works

    def test_a_list_of_proxied_streams_shows_the_proxys_delay(self):
        proxied(self.owner)
        assert "Proxy +ms p50 / p99" in self.get(self.owner_client, "/?source=proxy").text
        assert '<td class="num proxy-added"' in self.get(self.owner_client, "/?source=proxy").text
        assert "Proxy +ms" not in self.get(self.owner_client).text

    def test_retries_sit_under_their_first_attempt_with_token_counts(self):
        first = Stream.objects.create(user=self.owner, status="stalled", output_deltas=1234)
        unrelated = Stream.objects.create(user=self.owner, status="completed")
        second = Stream.objects.create(
            user=self.owner, status="completed", attempt=2, first_attempt=first
        )
        r = self.get(self.owner_client)
        order = rows_in_order(r.text)
        # newest first, but the retry right below the attempt it retried
        assert order[:3] == [unrelated.pk, first.pk, second.pk]
        row = r.text.split(f'id="stream-row-{second.pk}"')[1].split("</tr>")[0]
        assert "↳" in row and "try 2" in row
        assert ">Deltas</th>" in r.text
        first_row = r.text.split(f'id="stream-row-{first.pk}"')[1].split("</tr>")[0]
        assert '<td class="num" data-f="output_deltas">1\u202f234</td>' in first_row

    def test_a_retry_whose_first_attempt_is_on_another_page_links_to_it(self):
        first = Stream.objects.create(user=self.owner, status="stalled")
        second = Stream.objects.create(
            user=self.owner, status="completed", attempt=2, first_attempt=first
        )
        r = self.get(self.owner_client, f"/?status=completed&q=%23{second.pk}")
        row = r.text.split(f'id="stream-row-{second.pk}"')[1].split("</tr>")[0]
        assert f'try 2 of <a href="/streams/{first.pk}/">#{first.pk}</a>' in row

    def test_the_time_ranges_are_the_analytics_pages_ones(self):
        from dashboard.forms.analytics import RANGE_CHOICES
        from dashboard.forms.streams import StreamFilterForm

        mine = [c for c in StreamFilterForm().fields["range"].choices if c[0]]
        presets = [c for c in RANGE_CHOICES if c[0] not in ("all", "custom")]
        assert mine == presets


class TestStreamDetail(Base):
    def url(self, pk=None):
        return f"/streams/{pk or self.stream.pk}/"

    def test_it_shows_the_timeline(self):
        r = self.get(self.owner_client)
        assert r.status_code == 200
        assert f"Stream #{self.stream.pk}" in r.text
        assert 'id="stream-status"' in r.text and 'data-status="completed"' in r.text
        assert f'href="/streams/{self.stream.pk}.sse"' in r.text
        assert f'href="/streams/{self.stream.pk}.json"' in r.text
        assert 'class="wf-bar wf-terminal"' in r.text
        assert 'id="timeline-config"' in r.text and 'id="timing-chart"' in r.text

    def test_model_output_is_escaped(self):
        r = self.get(self.owner_client)
        assert XSS not in r.text and "<script>alert(2)" not in r.text
        assert "Careful with &lt;img src=x onerror=alert(1)&gt; and &lt;script&gt;" in r.text

    def test_it_returns_404_for_strangers(self):
        assert self.get(self.stranger_client).status_code == 404

    def test_it_returns_404_for_missing_streams(self):
        assert self.get(self.owner_client, self.url(self.stream.pk + 100)).status_code == 404

    def test_it_allows_staff(self):
        assert self.get(self.staff_client).status_code == 200

    def test_it_requires_login(self):
        r = self.get(Client())
        assert r.status_code == 302 and r["Location"].startswith("/login/")

    def test_it_shows_tool_calls_as_cards(self):
        [stream] = import_capture(
            (FIXTURES / "openai_parallel_function_calls.sse").read_bytes(),
            "parallel.sse",
            user=self.owner,
        )
        r = self.get(self.owner_client, self.url(stream.pk))
        assert r.text.count('class="item tool') == len(
            [p for p in stream.parts if p["type"] == "function_call"]
        )
        assert "secret_retrieval_tool" in r.text and "call_sKC7OABqf2A2PTLCm0CLeRWV" in r.text
        assert "&quot;password&quot;: &quot;mellon&quot;" in r.text  # pretty-printed, escaped

    def test_it_shows_a_rewrite_as_a_diff(self):
        stream = recorded(self.owner, text_events("teh ", "cat", rewrite_to="the cat"))
        r = self.get(self.owner_client, self.url(stream.pk))
        assert "<del>teh</del><ins>the</ins><span> cat</span>" in r.text
        assert "rewritten_text" in r.text

    def test_findings_link_to_their_events(self):
        events = text_events("a", "b")
        events[4]["sequence_number"] = 40
        stream = recorded(self.owner, events)
        r = self.get(self.owner_client, self.url(stream.pk))
        assert "sequence_gap" in r.text
        assert 'href="?at=4#ev-4" data-jump="4"' in r.text

    def test_it_jumps_to_an_event(self):
        stream = recorded(self.owner, text_events(*[f"{i} " for i in range(400)]))
        r = self.get(self.owner_client, f"{self.url(stream.pk)}?at=300")
        assert 'id="ev-300" class="event target"' in r.text
        assert 'id="ev-279"' not in r.text and 'id="ev-280"' in r.text
        r = self.get(self.owner_client, f"{self.url(stream.pk)}?at=0")
        assert 'id="ev-0" class="event target"' in r.text

    def test_it_links_stall_retries(self):
        Stream.objects.filter(pk=self.stream.pk).update(
            status="stalled", error_code="stall", error_message="no event for 1 s; aborted"
        )
        retry = Stream.objects.create(user=self.owner, first_attempt=self.stream, attempt=2)
        r = self.get(self.owner_client)
        assert f'<a href="/streams/{retry.pk}/" class="retry-link">#{retry.pk}</a>' in r.text
        assert "no event for 1 s; aborted" in r.text
        r = self.get(self.owner_client, self.url(retry.pk))
        assert f'<a href="/streams/{self.stream.pk}/">#{self.stream.pk}</a>' in r.text

    def test_a_live_stream_shows_the_newest_events(self):
        stream = recorded(self.owner, text_events(*"x" * 300), status="streaming")
        r = self.get(self.owner_client, self.url(stream.pk))
        config = json.loads(r.context["page_config"] and json.dumps(r.context["page_config"]))
        assert config["active"] is True and config["ws"] == f"/ws/streams/{stream.pk}/?format=json"
        assert r.context["events"].last == 305 and r.context["events"].has_before


class TestRedaction(Base):
    """An upstream that echoes the key it was sent: no page nor page data shows it."""

    KEY = "sk-echoed-upstream-key-42"

    def test_no_page_shows_the_key(self, settings):
        settings.UPSTREAM_API_KEY = self.KEY
        events = text_events("Your key is ", self.KEY, rewrite_to=f"Your key: {self.KEY}")
        events.insert(
            3,
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {"type": "function_call", "name": f"f_{self.KEY}", "arguments": "{}"},
            },
        )
        stream = recorded(
            self.owner,
            events,
            resolved_model=f"m-{self.KEY}",
            routing_reasoning=f"because {self.KEY}",
            error_code="invalid_api_key",
            error_message=f"Incorrect API key provided: {self.KEY}",
        )
        assert self.KEY in json.dumps(stream.parts)  # the stored row keeps what came
        base = f"/streams/{stream.pk}/"
        for url in ("/", base, f"{base}events/", f"{base}events/4/", f"{base}timing.json",
                    f"{base}replay.json"):  # fmt: skip
            r = self.get(self.owner_client, url)
            assert r.status_code == 200 and self.KEY not in r.text, url
        r = self.get(self.owner_client, base)
        assert "Incorrect API key provided: [redacted]" in r.text
        assert "f_[redacted]" in r.text and "m-[redacted]" in r.text
        assert "Your key: [redacted]" in r.text  # the output, and the rewrite's diff
        assert r.context["vocabulary"]["output"]["itemKinds"]["function_call"] == "tool"


class TestStreamEvents(Base):
    def url(self):
        return f"/streams/{self.stream.pk}/events/"

    def test_it_returns_a_window_of_rows(self):
        r = self.get(self.owner_client, self.url() + "?after=2")
        assert r.status_code == 200
        assert r.text.lstrip().startswith('<tbody id="events-body"')
        assert 'data-first="3"' in r.text and 'id="ev-2"' not in r.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in r.text and XSS not in r.text

    def test_it_filters_by_type(self):
        r = self.get(self.owner_client, self.url() + "?type=response.completed")
        assert r.text.count('class="event"') == 1 and "response.completed" in r.text

    def test_it_returns_404_for_strangers(self):
        assert self.get(self.stranger_client).status_code == 404

    def test_it_refuses_bad_windows(self):
        assert self.get(self.owner_client, self.url() + "?after=x").status_code == 400


class TestStreamEvent(Base):
    def url(self, index=4):
        return f"/streams/{self.stream.pk}/events/{index}/"

    def test_it_shows_pretty_and_verbatim_data(self):
        r = self.get(self.owner_client)
        assert r.status_code == 200 and r.text.lstrip().startswith('<tr class="event-detail"')
        assert "&quot;delta&quot;: &quot;&lt;img src=x onerror=alert(1)&gt;&quot;" in r.text
        assert "&quot;delta&quot;:&quot;&lt;img" in r.text  # verbatim
        assert XSS not in r.text

    def test_it_returns_404_for_missing_events_and_strangers(self):
        assert self.get(self.owner_client, self.url(999)).status_code == 404
        assert self.get(self.stranger_client).status_code == 404


class TestStreamTiming(Base):
    def url(self):
        return f"/streams/{self.stream.pk}/timing.json"

    def test_it_returns_compact_arrays(self):
        r = self.get(self.owner_client)
        assert r.status_code == 200 and r["Content-Type"] == "application/json"
        data = r.json()
        assert data["count"] == self.stream.event_count == len(data["gap_us"])
        assert data["gap_us"][:3] == [100_000, 1000, 1000]

    def test_it_returns_404_for_strangers(self):
        assert self.get(self.stranger_client).status_code == 404

    def test_it_allows_staff(self):
        assert self.get(self.staff_client).status_code == 200


class TestStreamReplay(Base):
    def url(self):
        return f"/streams/{self.stream.pk}/replay.json"

    def test_it_returns_the_output_events(self):
        data = self.get(self.owner_client).json()
        assert "".join(e[2] for e in data["events"] if len(e) == 3) == self.stream.output_text

    def test_it_returns_404_for_strangers(self):
        assert self.get(self.stranger_client).status_code == 404

    def test_it_requires_login(self):
        assert self.get(Client()).status_code == 302


class TestProxiedTimeline(Base):
    """The timeline of a stream recorded by the proxy: the proxy's own delay, its labels."""

    @pytest.fixture(autouse=True)
    def _proxied(self, _people):
        self.proxied = proxied(self.owner, tags=[XSS, "beta"], session=f"run/{XSS}")

    def url(self, stream=None):
        return f"/streams/{(stream or self.proxied).pk}/"

    def test_it_shows_the_proxys_added_delay(self):
        r = self.get(self.owner_client)
        assert r.status_code == 200 and r.context["page_config"]["proxied"] is True
        figure = r.text[r.text.index('id="proxy-added"') :]
        assert "Proxy added p50 / p99" in figure and "0.20 / 0.35 <small>ms</small>" in figure
        assert ">proxy +ms</th>" in r.text
        cells = re.findall(r'<td class="num proxy-ms"[^>]*>([^<]*)</td>', r.text)
        assert cells == ["0.05", "0.10", "0.15", "0.20", "0.25", "0.30", "0.35", "—"]
        assert '<td class="num proxy-ms" title="not handed to the client">—</td>' in r.text
        # the waterfall's "To client": the first event's hand-over (100.05 ms)
        assert 'class="wf-bar wf-first_sent"' in r.text and "To client: " in r.text
        assert r.context["waterfall"]["rows"][-1]["name"] != "first_sent"
        to_client = next(w for w in r.context["waterfall"]["rows"] if w["name"] == "first_sent")
        assert to_client["at_ms"] == 100.05

    def test_it_shows_tags_and_session_escaped_with_a_link_to_the_session(self):
        r = self.get(self.owner_client)
        assert XSS not in r.text and "recording proxy" in r.text
        tags = r.text[r.text.index('id="stream-tags"') :]
        assert tags.index("&lt;img src=x onerror=alert(1)&gt;</a>") < tags.index(">beta</a>")
        session = r.text[r.text.index('id="stream-session"') :]
        assert 'href="/sessions/run/%3Cimg%20src=x%20onerror=alert(1)%3E/"' in session
        assert ">run/&lt;img src=x onerror=alert(1)&gt;</a>" in session

    def test_other_streams_have_none_of_it(self):
        r = self.get(self.owner_client, self.url(self.stream))
        assert r.context["page_config"]["proxied"] is False
        for absent in ("proxy-added", "proxy +ms", "proxy-ms", "wf-first_sent", "stream-tags",
                       "stream-session", 'colspan="7"'):  # fmt: skip
            assert absent not in r.text, absent
        timing = self.get(self.owner_client, self.url(self.stream) + "timing.json").json()
        assert "proxy_us" not in timing and "proxy" not in timing

    def test_the_event_window_and_an_events_detail_have_it(self):
        r = self.get(self.owner_client, self.url() + "events/?after=2")
        assert re.findall(r'<td class="num proxy-ms"[^>]*>([^<]*)</td>', r.text)[:2] == [
            "0.20",
            "0.25",
        ]
        r = self.get(self.owner_client, self.url() + "events/3/")
        assert 'colspan="7"' in r.text
        assert "to client</span> 103.2 ms <span" in r.text and "(proxy +0.20 ms)" in r.text
        r = self.get(self.owner_client, self.url() + "events/7/")
        assert "not handed to the client" in r.text

    def test_the_timing_data_has_the_proxys_series(self):
        data = self.get(self.owner_client, self.url() + "timing.json").json()
        assert data["proxy_us"] == [50, 100, 150, 200, 250, 300, 350, None]
        assert data["proxy"] == {"p50_ms": 0.2, "p99_ms": 0.35}

    def test_the_json_export_has_the_labels_figures_and_hand_over_times(self):
        r = self.get(self.owner_client, f"/streams/{self.proxied.pk}.json")
        doc = json.loads(b"".join(r.streaming_content))
        assert doc["source"] == "proxy" and doc["tags"] == [XSS, "beta"]
        assert doc["session"] == f"run/{XSS}"
        assert (doc["proxy_added_p50_ms"], doc["proxy_added_p99_ms"]) == (0.2, 0.35)
        assert [e["sent_us"] for e in doc["events"]][:2] == [100_050, 101_100]

    def test_strangers_get_404_and_staff_see_it(self):
        assert self.get(self.stranger_client).status_code == 404
        assert "Proxy added p50 / p99" in self.get(self.staff_client).text


class TestSessionDetail(Base):
    """/sessions/<session>/: a proxied client's session, its streams in creation order."""

    def url(self, session="s-1"):
        return f"/sessions/{quote(session)}/"

    def test_it_lists_the_sessions_streams_in_creation_order(self):
        first = proxied(self.owner, session="s-1", ttft_ms=81.5)
        proxied(self.owner, session="s-2")
        second = proxied(self.owner, session="s-1", status="failed", error_code="boom")
        r = self.get(self.owner_client)
        assert r.status_code == 200
        assert rows_in_order(r.text) == [first.pk, second.pk]
        assert '<dd id="session-count">2</dd>' in r.text
        assert f'href="/streams/{first.pk}/"' in r.text and ">82</td>" in r.text  # TTFT
        assert '<td class="num proxy-added"' in r.text and "0.20 / 0.35" in r.text
        assert 'class="session-link"' not in r.text  # the page is the session
        assert 'href="/?session=s-1"' in r.text

    @pytest.mark.parametrize("name", ["..", ".", "a/b/../../c", "./x", "~", "~/..", "%2e%2e"])
    def test_a_link_to_any_session_opens_it_in_a_browser(self, name):
        ours = proxied(self.owner, session=name)
        stream_page = self.get(self.owner_client, f"/streams/{ours.pk}/").text
        href = html.unescape(re.search(r'class="session-link" href="([^"]+)"', stream_page)[1])
        # what a browser requests: dot segments resolved, as urljoin does (RFC 3986 5.2)
        url = urljoin("http://127.0.0.1/streams/1/", href)
        r = self.get(self.owner_client, urlsplit(url).path)
        assert r.status_code == 200 and rows_in_order(r.text) == [ours.pk], (name, href, url)

    def test_a_stranger_sees_nothing_of_the_owners(self):
        ours = proxied(self.owner, session="s-1")
        r = self.get(self.stranger_client)
        assert r.status_code == 404 and f"/streams/{ours.pk}/" not in r.text
        # the same session name used by the stranger: only theirs
        theirs = proxied(self.stranger, session="s-1")
        r = self.get(self.stranger_client)
        assert r.status_code == 200 and rows_in_order(r.text) == [theirs.pk]
        assert '<dd id="session-count">1</dd>' in r.text and 'class="owner' not in r.text

    def test_staff_see_everyones_and_whose_it_is(self):
        ours = proxied(self.owner, session="s-1")
        theirs = proxied(self.stranger, session="s-1")
        r = self.get(self.staff_client)
        assert rows_in_order(r.text) == [ours.pk, theirs.pk]
        assert '<td class="owner muted">owner</td>' in r.text
        assert '<td class="owner muted">stranger</td>' in r.text

    def test_it_escapes_the_session_and_its_tags(self):
        session = f"a/{XSS}?x=1#y"
        proxied(self.owner, tags=[XSS], session=session)
        r = self.get(self.owner_client, self.url(session))
        assert r.status_code == 200 and XSS not in r.text
        assert '<code id="session-name">a/&lt;img src=x onerror=alert(1)&gt;?x=1#y</code>' in r.text

    def test_it_pages_in_creation_order(self, monkeypatch):
        monkeypatch.setattr(sessions, "SESSION_PAGE", 2)
        streams = [proxied(self.owner, session="s-1") for _ in range(5)]
        r = self.get(self.owner_client)
        assert rows_in_order(r.text) == [s.pk for s in streams[:2]]
        assert f'href="?after={streams[1].pk}"' in r.text
        r = self.get(self.owner_client, self.url() + f"?after={streams[1].pk}")
        assert rows_in_order(r.text) == [s.pk for s in streams[2:4]]
        assert "2 of 5" in r.text and "From the first" in r.text
        r = self.get(self.owner_client, self.url() + f"?after={streams[3].pk}")
        assert rows_in_order(r.text) == [streams[4].pk] and "Later →" not in r.text

    def test_it_returns_404_for_unknown_sessions_and_requires_login(self):
        assert self.get(self.owner_client, self.url("nope")).status_code == 404
        r = self.get(Client())
        assert r.status_code == 302 and r["Location"].startswith("/login/")


class TestFindingsAndDeltas(Base):
    """Findings say their severity in words and colour (an info finding never looks like an
    error), and the figures counted over output delta events say "deltas", not "tokens"."""

    def with_findings(self, *severities):
        from streams.models import Finding

        stream = recorded(self.owner, text_events("Hello ", "there"))
        for severity in severities:
            Finding.objects.create(stream=stream, code="x", severity=severity)
        Stream.objects.filter(pk=stream.pk).update(
            findings_count=len(severities),
            error_findings=severities.count("error"),
            warning_findings=severities.count("warning"),
        )
        return stream

    def cell(self, text, stream):
        row = text.split(f'id="stream-row-{stream.pk}"')[1].split("</tr>")[0]
        return row.split('data-f="findings_count">')[1].split("</td>")[0]

    def test_a_list_row_tells_each_severity_apart(self):
        info = self.with_findings("info")
        mixed = self.with_findings("error", "error", "warning", "info")
        text = self.get(self.owner_client, "/").text
        # an info finding is grey and says so, never orange or red
        assert self.cell(text, info) == (
            '<span class="sev-pill sev-pill-info" title="1 info finding: noted, not a fault">'
            "1 info</span>"
        )
        cell = self.cell(text, mixed)
        pills = [p.split(">")[-1] for p in cell.split("</span>")[:-1]]
        assert pills == ["2 err", "1 warn", "1 info"]
        assert "sev-pill-error" in cell and "sev-pill-warning" in cell
        assert self.cell(text, self.stream) == '<span class="muted">0</span>'
        # and the list filters by it: warnings or worse
        filtered = self.get(self.owner_client, "/?findings=warnings").text
        assert f'id="stream-row-{mixed.pk}"' in filtered
        assert f'id="stream-row-{info.pk}"' not in filtered

    def test_a_row_that_counts_warnings_tells_them_from_info(self):
        from django.template import Context, Template

        row = Stream(findings_count=4, error_findings=1)
        row.warning_findings = 2
        html = Template("{% load inspection %}{% finding_pills row %}").render(
            Context({"row": row})
        )
        assert [p.split(">")[1] for p in html.split("</span>")[:-1]] == [
            "1 err",
            "2 warn",
            "1 info",
        ]
        assert "sev-pill-info" in html and "sev-pill-other" not in html

    def test_the_timeline_says_each_severity(self):
        stream = self.with_findings("warning", "info", "info")
        text = self.get(self.owner_client, f"/streams/{stream.pk}/").text
        split = text.split('class="finding-split">')[1].split("</small>")[0]
        assert split == (
            '<span class="sev-pill sev-pill-warning" title="1 warning: something to look at">'
            '1 warn</span> <span class="sev-pill sev-pill-info" title="2 info findings: noted, '
            'not a fault">2 info</span>'
        )

    def test_figures_over_deltas_say_deltas(self):
        text = self.get(self.owner_client, f"/streams/{self.stream.pk}/").text
        assert "Tokens/s" not in text and "Inter-token" not in text
        # "Output tokens" is the usage figure (the upstream's tokens), never the deltas' count
        assert text.count("Output tokens</div>") == 1
        usage = text.split('id="figure-output-tokens"')[1].split("</div></div>")[0]
        assert "Not the output deltas" in usage and 'id="usage-output"' in usage
        for figure, label in (
            ("output-deltas", "Output deltas"),
            ("deltas-per-s", "Deltas/s"),
            ("inter-delta", "Inter-delta"),
        ):
            div = text.split(f'id="figure-{figure}"')[1].split("</div>")[0]
            assert f'<div class="label">{label}' in div
            assert "not tokens" in div.split('title="')[1].split('"')[0]
        head = self.get(self.owner_client, "/").text
        th = head.split(">Deltas</th>")[0].rsplit("<th", 1)[1]
        assert "It counts delta events, not tokens" in th
        # the Tokens column is the upstream's usage, and says so
        th = head.split(">Tokens</th>")[0].rsplit("<th", 1)[1]
        assert "as the upstream reported them" in th

    def test_the_findings_filter_names_severities(self):
        text = self.get(self.owner_client, "/").text
        assert '<option value="errors">With error findings</option>' in text
        assert '<option value="any">With findings (any severity)</option>' in text


PRICE = "team price 3: gpt-4o* from 2026-01-01"
REPORTED = dict(
    input_tokens=412,
    output_tokens=96,
    total_tokens=508,
    cached_input_tokens=12,
    reasoning_tokens=30,
    usage_source="reported",
    cost_nanos=1_234_500,  # €0.0012345
    cost_currency="EUR",
    price_ref=PRICE,
)
ESTIMATED = dict(
    input_tokens=20,
    output_tokens=7,
    total_tokens=27,
    usage_source="estimated",
    cost_nanos=2_000,
    cost_currency="USD",
    price_ref="genai-prices 0.2.3: openai/gpt-oss-120b",
)
ESTIMATE_MARK = (
    '<span class="estimate" title="estimated: the upstream reported no usage">'
    '<span aria-hidden="true">≈</span><span class="visually-hidden">estimated: </span></span>'
)


def element(text, id_):
    """The inner HTML of the element with this id (which holds no element of its own tag)."""
    start = text.index(f'id="{id_}"')
    tag = text[:start].rsplit("<", 1)[1].split()[0]
    return text[start:].split(">", 1)[1].split(f"</{tag}>", 1)[0]


class TestUsageAndCost(Base):
    """Every stream page says what a stream used and cost: input → output tokens, an estimate
    marked as one, the price used named, and "no price" (never 0) where there is none."""

    def stream_with(self, **fields):
        return recorded(self.owner, text_events("Hello ", "there"), **fields)

    def cell(self, text, stream, name):
        row = text.split(f'id="stream-row-{stream.pk}"')[1].split("</tr>")[0]
        return row.split(f'data-f="{name}"')[1].split("</td>")[0]

    def test_reported_usage_and_its_cost_on_the_list_and_the_timeline(self):
        stream = self.stream_with(**REPORTED)
        text = self.get(self.owner_client, "/").text
        assert self.cell(text, stream, "tokens") == (
            ' title="412 input tokens, 12 cached, 96 output tokens, 30 reasoning (reported by '
            'the upstream)">412 → 96'
        )
        assert self.cell(text, stream, "cost") == f' title="price: {PRICE}">€0.00123'
        assert "estimate" not in text.split(f'id="stream-row-{stream.pk}"')[1].split("</tr>")[0]

        page = self.get(self.owner_client, f"/streams/{stream.pk}/").text
        assert element(page, "usage-input") == "412"
        assert element(page, "usage-input-note") == "12 cached"
        assert element(page, "usage-output") == "96"
        assert element(page, "usage-output-note") == "30 reasoning"
        assert element(page, "usage-cost") == "€0.00123"
        assert element(page, "usage-cost-note") == f"price: {PRICE}"
        for figure in ("input-tokens", "output-tokens", "cost"):
            help_text = page.split(f'id="figure-{figure}" title="')[1].split('"')[0]
            assert "estimated" in help_text or "price" in help_text

    def test_an_estimate_says_it_is_one(self):
        stream = self.stream_with(**ESTIMATED)
        text = self.get(self.owner_client, "/").text
        tokens = self.cell(text, stream, "tokens")
        assert tokens.endswith(f">{ESTIMATE_MARK}20 → 7")
        assert "(estimated: the upstream reported no usage)" in tokens  # the cell's title
        cost = self.cell(text, stream, "cost")
        assert cost.endswith(f">{ESTIMATE_MARK}$0.00000200")
        assert "estimated usage · price: genai-prices 0.2.3: openai/gpt-oss-120b" in cost

        page = self.get(self.owner_client, f"/streams/{stream.pk}/").text
        assert element(page, "usage-input") == f"{ESTIMATE_MARK}20"
        assert element(page, "usage-input-note") == "estimated"
        assert element(page, "usage-output-note") == "estimated"  # (no reasoning is estimated)
        assert element(page, "usage-cost") == f"{ESTIMATE_MARK}$0.00000200"
        assert element(page, "usage-cost-note").startswith("estimated usage · price: genai-")

    def test_no_price_says_no_price_never_zero(self):
        stream = self.stream_with(**{**REPORTED, "cost_nanos": None, "price_ref": ""})
        no_usage = self.stream_with(status="failed", error_code="http_500")
        text = self.get(self.owner_client, "/").text
        for s, why in ((stream, "no price known for m-1"), (no_usage, "no usage to price")):
            cost = self.cell(text, s, "cost")
            assert cost == f' title="{why}"><span class="muted no-price">no price</span>'
            assert not re.search(r"\d", cost.split(">", 1)[1])  # no amount at all, not 0
        assert self.cell(text, no_usage, "tokens").endswith(">—")

        page = self.get(self.owner_client, f"/streams/{stream.pk}/").text
        assert element(page, "usage-cost") == '<span class="muted no-price">no price</span>'
        assert element(page, "usage-cost-note") == "no price known for m-1"
        assert element(page, "usage-input") == "412"  # the usage is known all the same
        assert "€0" not in page and "$0" not in page

    def test_a_running_stream_shows_none_yet(self):
        stream = Stream.objects.create(user=self.owner, status="streaming", prompt="running")
        text = self.get(self.owner_client, "/").text
        assert self.cell(text, stream, "tokens") == ">—"
        assert self.cell(text, stream, "cost") == ">—"  # not "no price": it has not ended
        page = self.get(self.owner_client, f"/streams/{stream.pk}/").text
        assert element(page, "usage-input") == element(page, "usage-cost") == "—"
        assert element(page, "usage-cost-note") == ""
        assert json.loads(page.split('id="timeline-config" type="application/json">')[1]
                          .split("</script>")[0])["requestedModel"] == ""  # fmt: skip

    def test_dutch_pages_write_the_amount_the_dutch_way(self):
        stream = self.stream_with(**REPORTED)
        text = self.get(self.owner_client, "/", **{"Accept-Language": "nl"}).text
        assert self.cell(text, stream, "cost").endswith(">€\u00a00,00123")


class TestSessionTotals(Base):
    """A session's page sums its streams' usage and cost: per currency (never one sum across
    currencies), saying how many are estimates and how many have no price."""

    def url(self, session="s-1"):
        return f"/sessions/{quote(session)}/"

    def test_it_sums_per_currency_and_counts_estimates_and_unpriced(self):
        proxied(self.owner, **{**REPORTED, "cost_nanos": 1_000_000})  # €0.001
        proxied(self.owner, **{**REPORTED, "input_tokens": 88, "cost_nanos": 2_500_000})
        proxied(self.owner, **ESTIMATED)  # $0.000002
        proxied(self.owner, **{**ESTIMATED, "cost_nanos": 698_000})  # $0.000698
        proxied(self.owner, **{**REPORTED, "cost_nanos": None, "price_ref": ""})  # no price
        proxied(self.owner, status="streaming")  # running: neither priced nor "no price"
        proxied(self.owner, session="s-2", **REPORTED)  # another session
        proxied(self.stranger, **REPORTED)  # someone else's

        r = self.get(self.owner_client)
        totals = r.context["page"].usage
        assert (totals.with_usage, totals.estimated, totals.unpriced) == (5, 2, 1)
        assert (totals.input_tokens, totals.output_tokens) == (
            412 + 88 + 20 + 20 + 412,
            96 * 3 + 7 * 2,
        )
        assert totals.costs == [("EUR", 3_500_000, 2), ("USD", 700_000, 2)]
        tokens = element(r.text, "session-tokens")
        assert tokens.startswith(f"{ESTIMATE_MARK}952 → 302")
        assert element(r.text, "session-estimated") == "2 of 5 estimated"
        cost = r.text.split('id="session-cost"')[1].split("</dd>")[0]
        assert '<span class="session-cost" title="over 2 streams">€0.00350</span> + ' in cost
        assert '<span class="session-cost" title="over 2 streams">$0.000700</span>' in cost
        assert element(r.text, "session-unpriced") == "1 stream without a price"

        # staff: everyone's streams of the session
        staff = self.get(self.staff_client).context["page"].usage
        assert staff.costs == [("EUR", 3_500_000 + 1_234_500, 3), ("USD", 700_000, 2)]

    def test_a_session_without_prices_says_no_price(self):
        proxied(self.owner, **{**REPORTED, "cost_nanos": None, "price_ref": ""})
        proxied(self.owner, **{**REPORTED, "cost_nanos": None, "price_ref": ""})
        r = self.get(self.owner_client)
        cost = r.text.split('id="session-cost"')[1].split("</dd>")[0]
        assert '<span class="muted no-price">no price</span>' in cost
        assert element(r.text, "session-unpriced") == "2 streams without a price"
        assert not re.search(r"[€$]", cost)
        assert "session-estimated" not in r.text  # none is an estimate

    def test_a_session_still_running_has_no_totals_yet(self):
        proxied(self.owner, status="streaming")
        r = self.get(self.owner_client)
        assert element(r.text, "session-tokens") == "—"
        cost = r.text.split('id="session-cost"')[1].split(">", 1)[1].split("</dd>")[0]
        assert cost.strip() == "—"  # not "no price": nothing has ended
