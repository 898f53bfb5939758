"""A stream's outline (streams/store/outline.py): what the packer stores beside each block is what
the block's events give, the blocks' outlines merged are the rows' outline, a block packed
before outlines gets its own on first read, the caption's figures hold against every event's,
and the timeline of a long packed stream decodes no block it does not show."""

import datetime as dt
import random

import pytest

from dashboard.queries import stream_detail, timing
from streams.ingest.importer import import_capture
from streams.models import Event, EventBlock, Stream
from streams.store import compact, outline
from streams.store import events as stored_events
from tests.support.paths import CAPTURES

pytestmark = pytest.mark.django_db

# every capture in tests/: the Responses API's, the chat completions', the messages API's
CAPTURE_FILES = sorted(str(p.relative_to(CAPTURES)) for p in CAPTURES.rglob("*.sse"))
PAST = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)


def timed_capture(name, seed=1):
    """The capture imported, its events given receipt times (an import keeps none) as a
    recorded stream has them: mostly ms apart, some in one read (0 µs), a few long pauses;
    every other capture proxied, each event handed to the client some µs later (some never)."""
    [stream] = import_capture((CAPTURES / name).read_bytes(), name.replace("/", "_"))
    rng = random.Random(f"{name}{seed}")
    proxied = rng.random() < 0.5
    at = rng.randrange(50_000, 900_000)
    for event in Event.objects.filter(stream_id=stream.pk).order_by("index"):
        at += rng.choice((0, 0, int(rng.lognormvariate(8, 1.5)), rng.randrange(1, 40)))
        if rng.random() < 0.01:
            at += rng.randrange(1_000_000, 9_000_000)
        event.t_us = at
        if proxied and rng.random() < 0.97:
            event.sent_us = at + rng.randrange(0, 3000)
        event.save(update_fields=["t_us", "sent_us"])
    if proxied:
        Stream.objects.filter(pk=stream.pk).update(source=Stream.Source.PROXY)
    return Stream.objects.get(pk=stream.pk)


def _decoded(block):
    events = compact.decode(block.payload)
    return list(zip(*(events[c] for c in outline.COLUMNS), strict=True))


@pytest.mark.parametrize("name", CAPTURE_FILES)
def test_a_blocks_stored_outline_is_the_outline_of_its_events(name, monkeypatch):
    monkeypatch.setattr(compact, "BLOCK", 7)  # several blocks even of a short capture
    monkeypatch.setattr(outline, "ABOVE", 0)  # and outlined, as a long stream is
    stream = timed_capture(name)
    from_rows = stored_events.outline(stream.pk)
    assert from_rows["count"] == stream.event_count > 0
    assert compact.pack(stream.pk, now=PAST) == stream.event_count

    blocks = list(EventBlock.objects.filter(stream_id=stream.pk).order_by("first"))
    assert len(blocks) == -(-stream.event_count // 7)
    span = outline.span(blocks[-1].t_last_us)
    before = None
    for block in blocks:
        made = outline.of_events(_decoded(block), before_us=before, span_us=span)
        assert outline.loads(block.outline) == outline.loads(outline.dumps(made)), block.first
        before = block.t_last_us
    # the page reads one shape from rows or blocks
    assert stored_events.outline(stream.pk) == outline.loads(outline.dumps(from_rows))


@pytest.mark.parametrize("name", CAPTURE_FILES[::5])
def test_a_block_packed_before_outlines_gets_its_own_on_first_read(name, monkeypatch):
    monkeypatch.setattr(compact, "BLOCK", 5)
    monkeypatch.setattr(outline, "ABOVE", 0)
    stream = timed_capture(name, seed=2)
    compact.pack(stream.pk, now=PAST)
    expected = stored_events.outline(stream.pk)
    blocks = EventBlock.objects.filter(stream_id=stream.pk)
    stored = dict(blocks.values_list("first", "outline"))
    blocks.filter(first__gt=0).update(outline=None)  # as the packer wrote them before 0041

    assert stored_events.outline(stream.pk) == expected
    assert dict(blocks.values_list("first", "outline")) == stored  # and kept


def test_the_captions_figures_hold_against_every_events(monkeypatch):
    """Count, duration and the longest gaps exact; the percentiles within 0.5 %."""
    monkeypatch.setattr(compact, "BLOCK", 50)
    stream = timed_capture("openai_text_long_722ev.sse", seed=3)
    exact = timing.timing_series(stream)  # (722 events: every one)
    assert "gap_us" in exact and "points" not in exact
    monkeypatch.setattr(outline, "ABOVE", 100)
    compact.pack(stream.pk, now=PAST)
    outlined = timing.timing_series(stream)
    assert "gap_us" not in outlined

    assert outlined["count"] == exact["count"] == 722
    a, b = outlined["stats"], exact["stats"]
    assert a.pop("approximate") is True
    assert (a["duration_ms"], a["max_ms"], a["longest"]) == (
        b["duration_ms"],
        b["max_ms"],
        b["longest"],
    )
    for q in ("median_ms", "p90_ms", "p99_ms"):
        assert abs(a[q] - b[q]) <= 0.005 * b[q] + 0.0005, q  # (µs are whole: 0.5 µs at the least)
    # every point is a real event at its receipt time, in time order
    times = dict(stored_events.read(stream.pk, ("index", "t_us")))
    points = outlined["points"]
    assert all(times[i] == t for i, t in zip(points["index"], points["at_us"], strict=True))
    assert points["at_us"] == sorted(points["at_us"])
    assert 0 < len(points["index"]) < 2 * 722


def test_a_short_streams_blocks_keep_no_outline_and_read_as_the_same(monkeypatch):
    """Outlines cost a short stream's blocks as much again as their events: it has none, and
    its outline is made as it is read, the same as its rows'."""
    monkeypatch.setattr(compact, "BLOCK", 50)
    stream = timed_capture("openai_text_long_722ev.sse", seed=6)
    from_rows = stored_events.outline(stream.pk)
    assert compact.pack(stream.pk, now=PAST) == 722 <= outline.ABOVE
    assert list(EventBlock.objects.values_list("outline", flat=True).distinct()) == [None]
    assert stored_events.outline(stream.pk) == outline.loads(outline.dumps(from_rows))
    assert EventBlock.objects.filter(outline__isnull=False).count() == 0  # (none kept)


def test_the_chart_keeps_one_event_a_cell_of_its_grid():
    """A 100,000-event stream's chart: far fewer points than events, one per (series, x, y)
    cell, every cell the events reach kept."""
    rng = random.Random(4)
    at, events = 0, []
    for i in range(100_000):
        at += int(rng.lognormvariate(7, 1.2))
        events.append((i, at, "response.output_text.delta" if i % 9 else "other", None))
    made = outline.merged([outline.of_events(events, before_us=None, span_us=at)])
    index, t_us, value, series = made["points"]
    cells = {
        (s, t * outline.WIDTH // at, outline._cell(v))
        for _, t, v, s in zip(*made["points"], strict=True)
    }
    assert len(cells) == len(index) < 25_000  # (bounded by the grid, not by the events)
    times = [e[1] for e in events]
    gaps = [t - p for p, t in zip([0, *times[:-1]], times, strict=True)]
    reached = {
        (0 if e[2] != "other" else 1, e[1] * outline.WIDTH // at, outline._cell(g))
        for e, g in zip(events, gaps, strict=True)
    }
    assert cells == reached
    assert made["types"] == {"response.output_text.delta": 88_888, "other": 11_112}


def test_a_long_packed_streams_timeline_decodes_only_the_blocks_it_shows(monkeypatch):
    """The page (its first window of rows, its type filter) and the chart's data: before
    outlines the type filter decoded every block and the chart read every event."""
    from django.contrib.auth.models import User

    monkeypatch.setattr(compact, "BLOCK", 50)
    monkeypatch.setattr(outline, "ABOVE", 100)
    stream = timed_capture("openai_text_long_722ev.sse", seed=5)
    stream.user = User.objects.create_user("reader")
    compact.pack(stream.pk, now=PAST)
    opened = []
    real = compact.decode

    def decode(payload, *only):
        block = real(payload, *only)
        opened.append(block["index"][0])
        return block

    monkeypatch.setattr(compact, "decode", decode)
    page = stream_detail.stream_timeline(stream.user, stream)
    assert [r["index"] for r in page["events"].rows] == list(range(200))
    assert sum(n for _, n in page["types"]) == 722
    # the first window's blocks (200 rows and one more; a proxied stream's first handed event
    # opens the first again) and the last event's (the waterfall's end), none between
    assert set(opened) == {0, 50, 100, 150, 200, 700}, opened
    opened.clear()
    chart = timing.timing_series(stream)
    assert chart["count"] == 722 and chart["points"]["index"]
    assert opened == []


def test_a_secret_in_a_packed_streams_types_and_data_leaves_through_no_outlined_page(
    settings, monkeypatch
):
    """The outline keeps event types (the filter) and the chart's numbers: an upstream that
    echoes the key in its data and in an event's type gets neither back out of the page or
    the chart's data of its outlined stream."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from tests.support.captures import text_capture
    from tests.support.hostile import KEY, copies

    monkeypatch.setattr(outline, "ABOVE", 3)
    monkeypatch.setattr(compact, "BLOCK", 4)
    settings.UPSTREAM_API_KEY = KEY
    user = User.objects.create_user("outliner", password="x")
    capture = text_capture(f"echoed {KEY} back " * 8)
    capture += f'event: message\ndata: {{"type":"x.{KEY}"}}\n\n'.encode()
    [stream] = import_capture(capture, "o.sse", user=user)
    at = 0
    for event in Event.objects.filter(stream_id=stream.pk).order_by("index"):
        at += 1500
        Event.objects.filter(pk=event.pk).update(t_us=at)
    assert compact.pack(stream.pk, now=PAST) > 8
    stored = outline.loads(EventBlock.objects.order_by("-first").first().outline)
    assert f"x.{KEY}" in stored["types"]  # kept as received: what leaves goes through the gate

    client = Client()
    client.force_login(user)
    chart = client.get(reverse("stream_timing", args=[stream.pk]))
    assert chart.status_code == 200 and chart.json()["points"]["index"]  # the outlined chart
    page = client.get(reverse("stream_detail", args=[stream.pk]))
    assert page.status_code == 200
    for body in (page.content, chart.content):
        assert copies(body.decode()) == 0
    assert b"[redacted]" in page.content  # (the type filter lists it, redacted)
