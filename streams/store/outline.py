"""A stream's outline: what its timeline shows before reading any event (issue 49) — how many
events of each type (the table's filter), the timing chart's points as the chart draws them, and
the figures of its caption.

The packer builds a block's outline from the events it packs and stores it beside the block
(`EventBlock.outline`), so opening a packed 100,000-event stream reads a hundred small outlines
and decodes no block; a stream still stored as rows gets its outline from its rows by the same
function (`of_events`), so the page reads one shape from either. A block packed before outlines
existed gets its own on first read (streams/store/compact.py, `outline`).

The chart's points are thinned as the chart draws them: it plots each event at (its receipt
time, its gap on a log axis) as a 3–4 px dot, one per distinct pixel
(static/js/stream_detail/timing_chart.js), so an outline keeps one event per cell of a grid
about a dot's size — `WIDTH` cells across the stream's duration, `PER_DECADE` cells per decade of
the gap — per series (output deltas, other events, the proxy's delay). Each kept point is a real
event: clicking it opens that event.

The caption's figures: the event count, the duration and the longest gaps (with their events)
are exact; the median, 90th and 99th percentile of the gaps are read from a histogram of
buckets `RATIO` apart, so each is within 0.5 % of the exact nearest-rank value.
"""

import heapq
import json
import math

import zstandard

from streams.core import figures
from streams.core.checks import OUTPUT_DELTAS

# What an outline is built from, per event, in index order.
COLUMNS = ("index", "t_us", "type", "sent_us")
# Streams of more events than this are outlined: the packer stores their blocks' outlines and
# their chart is drawn from them. A shorter one (five blocks at most) is read whole in about
# the time a long one's outlines take, and storing outlines would cost its blocks 4–13 B/event
# more (simulator streams of 87–2,844 events; 1.7 B/event at 54,205).
ABOVE = 5_000
# The grid: a cell about as large as the chart's dots (3–4 px; the plot ~1,000 px wide and
# ~200 px high over 4–7 decades of gaps, 30–50 px each), so the dots kept cover what all of them
# covered to within a dot's size.
WIDTH = 512  # x cells over the stream's duration
PER_DECADE = 12  # y cells a decade of the gap axis
RATIO = 1.01  # histogram buckets: a value read back is within (RATIO - 1) / (RATIO + 1) < 0.5 %
LONGEST = 10  # the longest gaps the caption lists
OUTPUT, OTHER, PROXY = 0, 1, 2  # the chart's series
_LANE = -(10**6)  # the y cell of gaps of 0 µs or less (the chart's "0" lane)
_LOG_RATIO = math.log(RATIO)


def of_events(events, *, before_us, span_us):
    """The outline of consecutive events (tuples of `COLUMNS`, in index order). `before_us`:
    the receipt time of the event before the first (None: the first is the stream's first, its
    gap counts from the attempt's start and the caption's figures leave it out); `span_us`:
    the stream's duration (`span`), which the chart's x cells divide."""
    span_us = max(1, span_us or 1)
    types = {}
    buckets = {}
    longest = []  # (gap, -index): the heap of the longest gaps
    points = {}  # cell -> [index, t_us, value]
    untimed = 0
    last = None
    previous = before_us
    for index, t_us, type_, sent_us in events:
        types[type_] = types.get(type_, 0) + 1
        if t_us is None:
            untimed += 1
            continue
        gap = t_us - (previous or 0)
        if previous is not None:
            key = _bucket(gap)
            buckets[key] = buckets.get(key, 0) + 1
            entry = (gap, -index)
            if len(longest) < LONGEST:
                heapq.heappush(longest, entry)
            elif entry > longest[0]:
                heapq.heapreplace(longest, entry)
        previous = last = t_us
        x = t_us * WIDTH // span_us
        series = OUTPUT if type_ in OUTPUT_DELTAS else OTHER
        points.setdefault((series, x, _cell(gap)), (index, t_us, gap))
        if sent_us is not None:
            held = sent_us - t_us
            points.setdefault((PROXY, x, _cell(held)), (index, t_us, held))
    kept = sorted((p[0], p[1], p[2], key[0]) for key, p in points.items())
    return {
        "count": sum(types.values()),
        "untimed": untimed,
        "last_us": last,
        "span_us": span_us,
        "types": types,
        "buckets": sorted(buckets.items()),
        "longest": sorted(((g, -i) for g, i in longest), key=lambda gi: (-gi[0], gi[1])),
        "points": [list(column) for column in zip(*kept, strict=True)] if kept else [[]] * 4,
    }


def span(last_timed_us):
    """The chart's x extent: the stream's last receipt time (µs)."""
    return max(1, last_timed_us or 1)


def merged(outlines):
    """One outline of consecutive parts' outlines (a stream's blocks, in index order). Points
    two parts kept in one cell (a cell across their border) stay one, the first."""
    out = {"count": 0, "untimed": 0, "last_us": None, "span_us": 1, "types": {}}
    buckets, longest, cells = {}, [], {}
    for part in outlines:
        out["count"] += part["count"]
        out["untimed"] += part["untimed"]
        out["span_us"] = part["span_us"]
        if part["last_us"] is not None:
            out["last_us"] = part["last_us"]
        for type_, n in part["types"].items():
            out["types"][type_] = out["types"].get(type_, 0) + n
        for key, n in part["buckets"]:
            buckets[key] = buckets.get(key, 0) + n
        longest.extend(part["longest"])
        span_us = part["span_us"]
        for index, t_us, value, series in zip(*part["points"], strict=True):
            cell = (series, t_us * WIDTH // span_us, _cell(value))
            cells.setdefault(cell, (t_us, index, value, series))
    out["buckets"] = sorted(buckets.items())
    out["longest"] = sorted(longest, key=lambda gi: (-gi[0], gi[1]))[:LONGEST]
    kept = sorted(cells.values())
    t, index, value, series = ([list(c) for c in zip(*kept, strict=True)]) if kept else [[]] * 4
    out["points"] = [index, t, value, series]
    return out


def gap_figures(outline):
    """The caption's figures (ms) of a timed outline of two or more events: duration, median,
    90th and 99th percentile (from the histogram: within 0.5 %) and the longest gap (exact),
    and the longest gaps [(index, ms)]. None with fewer than two events."""
    if outline["count"] < 2 or not outline["buckets"]:
        return None
    quantile = {
        q: _value(figures.weighted_nearest_rank(outline["buckets"], q)) / 1000
        for q in (500, 900, 990)
    }
    return {
        "duration_ms": outline["last_us"] / 1000,
        "median_ms": quantile[500],
        "p90_ms": quantile[900],
        "p99_ms": quantile[990],
        "max_ms": outline["longest"][0][0] / 1000,
        "longest": [{"index": i, "gap_ms": g / 1000} for g, i in outline["longest"]],
    }


def dumps(outline):
    """An outline as `EventBlock.outline` stores it: JSON, compressed; the chart's points on a
    line of their own after the rest, which the page's type filter reads without them."""
    head = {k: v for k, v in outline.items() if k != "points"}
    raw = b"\n".join(
        json.dumps(v, separators=(",", ":")).encode() for v in (head, outline["points"])
    )
    return zstandard.ZstdCompressor(level=3).compress(raw)


def loads(stored, points=True):
    """The outline `dumps` stored (`points=False`: without the chart's points, left empty)."""
    raw = zstandard.ZstdDecompressor().decompress(bytes(stored))
    head, _, rest = raw.partition(b"\n")
    out = json.loads(head)
    out["points"] = json.loads(rest) if points else [[]] * 4
    out["buckets"] = [tuple(b) for b in out["buckets"]]
    out["longest"] = [tuple(g) for g in out["longest"]]
    return out


def _bucket(gap):
    """A gap's histogram bucket, in the gaps' order: a positive gap's log in steps of RATIO, a
    gap of 0 µs or less its own value (below every positive one)."""
    if gap <= 0:
        return gap - 1
    return round(math.log(gap) / _LOG_RATIO)


def _value(bucket):
    if bucket < 0:
        return bucket + 1
    return round(RATIO**bucket)


def _cell(value_us):
    if value_us <= 0:
        return _LANE
    return math.floor(math.log10(value_us) * PER_DECADE)
