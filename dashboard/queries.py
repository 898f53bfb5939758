"""Read-side query functions for the stream pages: plain data in, plain data out.

Views call exactly one of these and render what it returns. Nothing here writes, and nothing
loads a table into Python: the list is a keyset page over the existing `created_at` indexes
(never COUNT(*) nor OFFSET), the event table reads index ranges through the unique
(stream, index) constraint, and the chart gets two flat arrays from `values_list`.

Everything an upstream or a model sent is untrusted text: it is returned as plain strings for
the templates to escape, never marked safe, and verbatim: secrets an upstream echoed are taken
out of the rendered page as it leaves, by the egress gate (streams/serve/egress.py), which also
catches a key cut by clipping or split across rows.
"""

from __future__ import annotations

import difflib
import heapq
import json
import math
import re
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db.models import Count, F, Max, Min, OuterRef, Q, Subquery, Sum
from django.utils.formats import get_format, number_format
from django.utils.translation import gettext, gettext_lazy, ngettext

from streams.core import figures
from streams.core.checks import CODES, OUTPUT_DELTAS, TERMINAL_STATUS, Said
from streams.core.pricing import CURRENCIES
from streams.models import Event, Finding, Stream
from streams.store import known_secrets, public, scores, search
from streams.store.access import may_see, streams_for
from streams.store.event_shape import PROXIED_ROW_COLUMNS
from streams.store.lookups import HasTag

PAGE_STREAMS = 50  # rows per list page
EVENTS_PAGE = 200  # rows per event-table window
JUMP_CONTEXT = 20  # rows shown above an event the page jumps to
FINDINGS_SHOWN = 500  # findings listed on the timeline; the .json export has them all
MODEL_SCAN = 5000  # recent streams whose model names feed the filter suggestions
SUMMARY_MAX = 160  # characters of an event's one-line summary
DETAIL_MAX = 200_000  # characters of an event's data shown in the page (the export has all)
ITEM_JSON_MAX = 20_000
# Characters of a text part laid out at first; the rest waits in an inert <template> behind a
# "show all" button (laying out a long text was a large part of a big stream page's load;
# docs/performance.md, "Inspection").
TEXT_SHOWN = 20_000
DIFF_MAX = 200_000  # characters beyond which a word diff is not computed for the page
SEVERITY_RANK = {"error": 3, "warning": 2, "info": 1}


# ---------------------------------------------------------------------------------------------
# The streams list


@dataclass
class StreamPage:
    streams: list
    older: int | None = None  # cursor (a stream id) for ?before=
    newer: int | None = None  # cursor for ?after=; None on the newest page
    newest_id: int | None = None  # the newest id shown, for the live list's `after=`
    # a ranked search (`search_page`): its page number and its neighbours' (None: none)
    search_page: int | None = None
    next_page: int | None = None
    previous_page: int | None = None


def filter_streams(qs, filters):
    """Apply the list filters (a StreamFilterForm's cleaned data) to a Stream queryset."""
    f = filters
    if f.get("status"):
        qs = qs.filter(status=f["status"])
    if f.get("source"):
        qs = qs.filter(source=f["source"])
    if f.get("tag"):
        qs = qs.filter(HasTag(F("tags"), f["tag"]))
    if f.get("session"):
        qs = qs.filter(session=f["session"])
    if f.get("user"):
        # Narrows what `qs` already allows (streams_for): a user who is not staff filtering
        # by someone else gets nothing, the same as for a name nobody has. A scalar subquery,
        # so the (user, created_at) index still serves the page.
        users = get_user_model().objects.filter(username=f["user"]).values("pk")[:1]
        qs = qs.filter(user_id=Subquery(users))
    if f.get("meta"):
        key, value = f["meta"]
        # a JSON member lookup of the stored request (Django quotes the key as a JSON path)
        qs = qs.filter(**{f"request_body__metadata__{key}": value})
    if f.get("requested"):
        qs = qs.filter(requested_model=f["requested"])
    if f.get("resolved"):
        qs = qs.filter(resolved_model=f["resolved"])
    if f.get("score"):
        qs = scores.filtered(qs, f["score"])
    findings = f.get("findings")
    if findings == "any":
        qs = qs.filter(findings_count__gt=0)
    elif findings == "errors":
        qs = qs.filter(error_findings__gt=0)
    elif findings == "warnings":  # or worse
        qs = qs.filter(Q(error_findings__gt=0) | Q(warning_findings__gt=0))
    elif findings == "none":
        qs = qs.filter(findings_count=0)
    if f.get("since"):
        qs = qs.filter(created_at__gte=f["since"])
    if f.get("until"):
        qs = qs.filter(created_at__lte=f["until"])
    q = (f.get("q") or "").strip()
    if q:
        qs = _search(qs, q)
    return qs


def _search(qs, q):
    """A stream id (`#42`), an exact upstream id, or words of what was said (full text,
    streams/store/search.py: the prompt, instructions, output, reasoning summaries, tool calls,
    errors); a number is also a stream id. Unranked: `stream_page` ranks a text search."""
    exact = _exact(qs, q)
    if exact is not None:
        return exact
    terms = search.parse(q)
    if not terms:
        return qs.none()  # (only punctuation: no word to find)
    matched = search.matching(qs, terms)
    if q.isdigit() and len(q) <= 18:
        return qs.filter(Q(pk=int(q)) | Q(pk__in=matched.values("pk")))
    return matched


def _exact(qs, q):
    """`qs` narrowed to the stream a search names exactly (`#42`, an upstream id it may see),
    or None when the search is for words."""
    if re.fullmatch(r"#\d{1,18}", q):
        return qs.filter(pk=int(q[1:]))
    if not any(c.isspace() for c in q):
        # Through the upstream_id index alone: with `user_id = ?` beside it SQLite walked the
        # user's created_at index instead (docs/performance.md); access is applied after.
        hits = Stream.objects.filter(upstream_id=q).values_list("pk", flat=True)[:PAGE_STREAMS]
        # only the hits this user may see (and the filters keep) decide: another user's id
        # must not change what a search shows, or its absence would confirm that it exists
        visible = list(qs.filter(pk__in=list(hits)).values_list("pk", flat=True)) if hits else ()
        if visible:
            return qs.filter(pk__in=visible)
    return None


def ranked_terms(user, filters):
    """The terms of the list's search when it is a search for words (ranked, with snippets),
    else None (no search, or one that names a stream exactly)."""
    q = (filters.get("q") or "").strip()
    if not q or _exact(streams_for(user), q) is not None:
        return None
    return search.parse(q) or None


def search_page(user, filters, terms, number=1):
    """Page `number` of the streams `user` may see that match `terms` and the other filters,
    best first, each with its `snippet` and `rank` (a StreamPage: `search_page`, `next_page`)."""
    qs = filter_streams(streams_for(user), {**filters, "q": ""})
    hits, more = search.page(qs, terms, number)
    by_pk = qs.in_bulk([h.pk for h in hits])
    streams = []
    for hit in hits:
        stream = by_pk.get(hit.pk)
        if stream is not None:
            stream.snippet, stream.rank = hit.snippet, hit.rank
            streams.append(stream)
    q = filters["q"].strip()
    if number == 1 and q.isdigit() and len(q) <= 18 and int(q) not in by_pk:
        streams[:0] = qs.filter(pk=int(q))  # (a number is also a stream id)
    page = StreamPage(streams, search_page=number)
    page.next_page = number + 1 if more else None
    page.previous_page = number - 1 if number > 1 else None
    _rows_for(user, page.streams)
    return page


def stream_page(user, filters, *, before=None, after=None, limit=PAGE_STREAMS):
    """One page of the streams `user` may see, newest first, after the filters.

    Keyset pagination on (created_at, id): `before` / `after` are stream ids whose position
    the page continues from. `created_at <= c AND NOT (created_at = c AND id >= pk)` keeps the
    range on `created_at` usable by the `stream_created` / `stream_user_created` indexes
    (an OR of the two cases would not be); ties are ordered by id."""
    visible = streams_for(user)
    qs = filter_streams(visible, filters)
    cursor_id = before or after
    anchor = None
    if cursor_id:
        anchor = visible.filter(pk=cursor_id).values_list("created_at", flat=True).first()
    if anchor is not None and after:
        rows = list(
            qs.filter(created_at__gte=anchor)
            .exclude(created_at=anchor, pk__lte=after)
            .order_by("created_at", "pk")[: limit + 1]
        )
        has_newer = len(rows) > limit
        rows = rows[:limit][::-1]
        page = StreamPage(rows, newer=rows[0].pk if has_newer and rows else None)
        page.older = rows[-1].pk if rows else after
        # Past the newest row there is nothing left to page back to.
        if not rows:
            page.newer = None
    else:
        if anchor is not None:
            qs = qs.filter(created_at__lte=anchor).exclude(created_at=anchor, pk__gte=before)
        rows = list(qs.order_by("-created_at", "-pk")[: limit + 1])
        has_older = len(rows) > limit
        rows = rows[:limit]
        page = StreamPage(rows, older=rows[-1].pk if has_older else None)
        if anchor is not None:
            page.newer = rows[0].pk if rows else before
    page.streams = _group_attempts(list(page.streams))
    page.newest_id = max((s.pk for s in page.streams), default=None)
    _rows_for(user, page.streams)
    return page


def _group_attempts(streams):
    """Retries under their first attempt: a retry whose first attempt is on the same page
    moves to just below it (in attempt order) and is marked `grouped`; one whose first attempt
    is on another page stays where its time puts it. Only the page's order changes: the
    cursors were taken from the rows as queried."""
    shown = {s.pk for s in streams}
    retries = {}
    for s in streams:
        if s.first_attempt_id in shown:
            s.grouped = True
            retries.setdefault(s.first_attempt_id, []).append(s)
    if not retries:
        return streams
    out = []
    for s in streams:
        if getattr(s, "grouped", False):
            continue
        out.append(s)
        out.extend(sorted(retries.get(s.pk, ()), key=lambda r: (r.attempt, r.pk)))
    return out


def model_names(user):
    """Requested and resolved model names of the user's recent streams (filter suggestions).
    Bounded: the newest MODEL_SCAN rows through the created_at index, not a DISTINCT over
    the whole table."""
    recent = streams_for(user).order_by("-created_at")[:MODEL_SCAN]
    names = set()
    pairs = list(recent.values_list("requested_model", "resolved_model"))
    for requested, resolved in pairs:
        names.add(requested)
        names.add(resolved)
    names.discard("")
    return known_secrets.label_order(names)


def _rows_for(user, streams):
    """What every table of stream rows (streams/stream_row.html) shows beyond the row: its
    scores and comments (`feedback`), and for staff, whose stream it is."""
    summaries = scores.summaries(s.pk for s in streams)
    empty = scores.Summary()
    for stream in streams:
        stream.feedback = summaries.get(stream.pk, empty)
    if user.is_staff:
        _owner_names(streams)


def _owner_names(streams):
    """Staff see everyone's streams: say whose (one lookup for the page, not a join)."""
    owners = {s.user_id for s in streams} - {None}
    names = dict(get_user_model().objects.filter(pk__in=owners).values_list("pk", "username"))
    for stream in streams:
        stream.owner_name = names.get(stream.user_id, "")


# ---------------------------------------------------------------------------------------------
# A session: the streams a proxied client labelled with one X-Streamscope-Session


SESSION_PAGE = 200


@dataclass
class UsageTotals:
    """The usage and cost of a set of streams, summed from their rows (`usage_aggregates`)."""

    with_usage: int = 0  # streams with usage, reported or estimated
    estimated: int = 0  # of them, estimates (the upstream reported none)
    input_tokens: int | None = None  # the sums over the streams that know them
    output_tokens: int | None = None
    costs: list = field(default_factory=list)  # [(currency, nano-units, streams)], priced only
    unpriced: int = 0  # finished streams without a price (shown as such, never as 0)


# What `usage_totals` reads from an aggregate over stream rows (one query with the rest).
_FINISHED = ~Q(status__in=Stream.ACTIVE_STATUSES)
_PRICED = Q(cost_nanos__isnull=False)


def usage_aggregates():
    """The aggregate expressions `usage_totals` reads, to add to a query's own."""
    sums = {
        "usage_n": Count("pk", filter=~Q(usage_source="")),
        "usage_estimated": Count("pk", filter=Q(usage_source=Stream.UsageSource.ESTIMATED)),
        "usage_input": Sum("input_tokens"),
        "usage_output": Sum("output_tokens"),
        "usage_unpriced": Count("pk", filter=_FINISHED & ~_PRICED),
    }
    for currency in CURRENCIES:
        priced = _PRICED & Q(cost_currency=currency)
        sums[f"cost_{currency}"] = Sum("cost_nanos", filter=priced)
        sums[f"cost_{currency}_n"] = Count("pk", filter=priced)
    return sums


def usage_totals(row):
    """`UsageTotals` from an aggregate row with `usage_aggregates()`: the costs per currency
    (a sum across currencies means nothing), each with how many streams it is over."""
    costs = [
        (currency, row[f"cost_{currency}"] or 0, row[f"cost_{currency}_n"])
        for currency in CURRENCIES
        if row[f"cost_{currency}_n"]
    ]
    return UsageTotals(
        with_usage=row["usage_n"],
        estimated=row["usage_estimated"],
        input_tokens=row["usage_input"],
        output_tokens=row["usage_output"],
        costs=costs,
        unpriced=row["usage_unpriced"],
    )


@dataclass
class SessionPage:
    session: str
    streams: list
    count: int  # the session's streams `user` may see, on every page
    statuses: list  # [(status, n)], most frequent first
    first_at: object = None  # the first one's created_at
    last_at: object = None  # the last finished_at (or created_at while none has finished)
    later: int | None = None  # cursor (a stream id) for ?after=
    after: int | None = None  # the cursor this page continues from
    usage: UsageTotals = field(default_factory=UsageTotals)  # over all of them, every page


def session_page(user, session, *, after=None, limit=None):
    """The streams of `session` that `user` may see (their own; staff: everyone's), in creation
    order, a page at a time after the stream `after`, with the totals of all of them (count,
    times, usage and cost: one aggregate); None when there are none (the page is a 404: whether
    someone else used that session name is not told)."""
    if not session:
        return None
    limit = limit or SESSION_PAGE
    qs = streams_for(user).filter(session=session)
    figures = qs.aggregate(
        n=Count("pk"),
        first=Min("created_at"),
        finished=Max("finished_at"),
        last=Max("created_at"),
        **usage_aggregates(),
    )
    if not figures["n"]:
        return None
    statuses = sorted(
        qs.values_list("status").annotate(n=Count("pk")).values_list("status", "n"),
        key=lambda r: (-r[1], r[0]),
    )
    ordered = qs.order_by("created_at", "pk")
    anchor = None
    if after:
        anchor = qs.filter(pk=after).values_list("created_at", flat=True).first()
    if anchor is not None:
        ordered = ordered.filter(created_at__gte=anchor).exclude(created_at=anchor, pk__lte=after)
    rows = list(ordered[: limit + 1])
    page = SessionPage(
        session=session,
        streams=rows[:limit],
        count=figures["n"],
        statuses=statuses,
        first_at=figures["first"],
        last_at=max(filter(None, (figures["finished"], figures["last"])), default=None),
        later=rows[limit - 1].pk if len(rows) > limit else None,
        after=after if anchor is not None else None,
        usage=usage_totals(figures),
    )
    _rows_for(user, page.streams)
    return page


# ---------------------------------------------------------------------------------------------
# The timeline


MILESTONES = (
    # (field, label, what it marks)
    ("connected_us", gettext_lazy("Connected"), gettext_lazy("TCP connection established")),
    (
        "request_written_us",
        gettext_lazy("Request sent"),
        gettext_lazy("request body written to the socket"),
    ),
    ("headers_us", gettext_lazy("Headers"), gettext_lazy("response headers received")),
    ("created_event_us", "response.created", gettext_lazy("first event")),
    (
        "routing_us",
        gettext_lazy("Routing"),
        gettext_lazy("response.routing.completed: the model was chosen"),
    ),
    ("first_token_us", gettext_lazy("First token"), gettext_lazy("first output-bearing delta")),
    (
        "first_tool_call_us",
        gettext_lazy("First tool call"),
        gettext_lazy("first function call item"),
    ),
    (
        "terminal_us",
        gettext_lazy("Terminal"),
        gettext_lazy("response.completed / error / failed / incomplete"),
    ),
    ("closed_us", gettext_lazy("Closed"), gettext_lazy("connection closed")),
)
# A proxied stream's one milestone of its own: the first event's bytes reached the client (its
# bar, from the milestone before, is the proxy's delay for that event).
TO_CLIENT = (
    "first_sent_us",
    gettext_lazy("To client"),
    gettext_lazy("the proxy handed the first event to its client"),
)


def waterfall(stream, last_event_us=None, until=None, first_sent_us=None):
    """The milestones in time order, each a bar from the previous milestone to itself, scaled
    like a browser's network timing view (percentages of the whole attempt, or of the time
    up to `until` µs: the page's "until the first token" zoom). `first_sent_us`: a proxied
    stream's TO_CLIENT milestone."""
    times = {name: getattr(stream, name) for name, _, _ in MILESTONES}
    times[TO_CLIENT[0]] = first_sent_us
    reached = [
        (times[name], i, name, label, what)
        for i, (name, label, what) in enumerate((*MILESTONES, TO_CLIENT))
        if times[name] is not None
    ]
    reached.sort()
    end = until or max([r[0] for r in reached] + [last_event_us or 0])
    rows = []
    prev = 0
    for at, _, name, label, what in reached:
        start = prev
        rows.append(
            {
                "name": name.removesuffix("_us"),
                "label": label,
                "what": what,
                "at_ms": at / 1000,
                "start_ms": start / 1000,
                "duration_ms": (at - start) / 1000,
                "left": min(_pct(start, end), 100),
                "width": max(min(_pct(at, end), 100) - min(_pct(start, end), 100), 0.25),
                "beyond": at > end,
            }
        )
        prev = max(prev, at)
    spans = []
    if stream.request_written_us is not None and stream.first_token_us is not None:
        spans.append(_span(gettext("TTFT"), stream.request_written_us, stream.first_token_us, end))
    if stream.first_token_us is not None and stream.terminal_us is not None and not until:
        spans.append(_span(gettext("Generation"), stream.first_token_us, stream.terminal_us, end))
    return {"rows": rows, "ticks": _ticks(end), "total_ms": end / 1000, "spans": spans}


def _start_view(stream, first_sent_us=None):
    """The waterfall up to the first token (+20 %), where a long stream's early milestones
    are otherwise a few pixels wide; None when there is nothing to zoom into."""
    first = stream.first_token_us
    if first is None or not stream.terminal_us or stream.terminal_us < 3 * first:
        return None
    return waterfall(stream, until=int(first * 1.2), first_sent_us=first_sent_us)


def _ticks(end_us):
    """Round tick marks (1, 2, 2.5 or 5 × 10^k ms) across 0…end, labelled in ms or s."""
    if not end_us:
        return []
    end_ms = end_us / 1000
    raw = end_ms / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    in_s = end_ms >= 2000
    ticks = []
    value = 0.0
    while value <= end_ms * 1.0001:
        label = f"{value / 1000:g} s" if in_s else f"{value:g} ms"
        label = label.replace(".", get_format("DECIMAL_SEPARATOR"))  # 2.5 s, Dutch 2,5 s
        ticks.append({"left": round(100 * value / end_ms, 3), "label": label})
        value += step
    return ticks


def _pct(us, end):
    return round(100 * us / end, 3) if end else 0


def _span(label, start, stop, end):
    return {
        "label": label,
        "ms": (stop - start) / 1000,
        "left": min(_pct(start, end), 100),
        "width": max(min(_pct(stop, end), 100) - min(_pct(start, end), 100), 0.25),
    }


_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


def word_ops(old, new):
    """A word diff as [(op, text)], op in "same" | "del" | "ins" (the checker's `word_diff`
    as structure, so the page can mark it up without parsing its [-…-]{+…+} text)."""
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    ops = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            ops.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            ops.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            ops.append(("ins", "".join(b[j1:j2])))
    return ops


def _pretty(value):
    """(text, is JSON) for a tool's arguments or output: JSON indented (as static/js/dom.js's
    `pretty` does while it streams), anything else as it came; None stays None."""
    if value is None:
        return None, False
    if not isinstance(value, str):
        return json.dumps(value, indent=2, ensure_ascii=False), True
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):  # (nested too deep to show as a tree)
        return value, False
    return json.dumps(parsed, indent=2, ensure_ascii=False), True


def output_blocks(stream, *, terminal_text=False):
    """The one server rendering of a stream's output (templates/dashboard/output.html, on the
    timeline and in the playground): `public.output` (one `kind` per item type)
    prepared for display. Texts longer than TEXT_SHOWN are split for the "show all" button, a
    rewrite gets a word diff of streamed vs final, tool arguments and outputs are
    pretty-printed, other items are shown as JSON."""
    items = public.output(stream, terminal_text=terminal_text)
    for item in items:
        kind = item["kind"]
        if kind == "message":
            for part in item["parts"]:
                _prepare_text(part)
        elif kind == "tool":
            item["arguments"], item["arguments_json"] = _pretty(item["arguments"])
            item["output"], item["output_json"] = _pretty(item["output"])
        elif kind == "other":
            item["json"] = json.dumps(item["item"], indent=2, ensure_ascii=False)[:ITEM_JSON_MAX]
    return items


def _prepare_text(part):
    final, streamed = part["text"], part["streamed"]
    if len(final) > TEXT_SHOWN:
        part["head"], part["rest"] = final[:TEXT_SHOWN], final[TEXT_SHOWN:]
    if streamed is not None:
        # SequenceMatcher is quadratic at worst: huge rewrites keep the checker's own diff
        # (the rewritten_text finding) instead.
        if len(streamed) + len(final) <= DIFF_MAX:
            part["diff"] = word_ops(streamed, final)
        else:
            part["diff_skipped"] = True


def _final_texts(items):
    return "".join(
        part["text"]
        for item in items
        if item["kind"] == "message"
        for part in item["parts"]
        if part["type"] == "output_text"
    )


def attempts(user, stream):
    """Every attempt of the request `stream` belongs to (stall retries), in order.

    Two lookups by primary key and by the first_attempt foreign key, with the access rule
    applied to the rows: with `user_id = ?` in the SQL, SQLite preferred the user's
    created_at index and scanned it, as did an OR of the two lookups (docs/performance.md,
    "Inspection")."""
    first = stream.first_attempt_id or stream.pk
    columns = ("id", "attempt", "status", "error_code", "user_id")
    rows = list(Stream.objects.filter(pk=first).values(*columns))
    rows += Stream.objects.filter(first_attempt_id=first).values(*columns)
    rows = [r for r in rows if may_see(user, r["user_id"])]
    return sorted(rows, key=lambda r: (r["attempt"], r["id"]))


def describe(code):
    """A finding code's description (checks.CODES), in the page's language; "" for a code the
    checker does not know. The API and the exports keep the English of checks.CODES."""
    description = CODES.get(code, ("", ""))[1]
    return gettext(description) if description else ""


def explained(row):
    """A finding row as a page shows it: its description, and its expected, got and detail in
    the page's language where they are the checker's own words (Finding.said: phrases with
    their data, which stays as recorded); the stored English where a row has no phrase for one
    (data, a row from before phrases) or one this version does not know."""
    row["description"] = describe(row["code"])
    row["words"] = set()  # which of them are words (not data: a page sets them as prose)
    for name, stored in (row.pop("said", None) or {}).items():
        phrase = Said.from_json(stored)
        if name in EXPLAINED and phrase is not None:
            try:
                row[name] = phrase.said(_figure)
            except (KeyError, TypeError, ValueError):
                continue  # (a stored phrase whose parameters this version's words do not take)
            row["words"].add(name)
    return row


EXPLAINED = ("expected", "got", "detail")


def _figure(value):
    """A number in a finding's words, as every figure: grouped (dashboard/formats), with the
    page's decimal sign."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # (30.0 s reads "30 s", as in English)
    return number_format(value, force_grouping=True)


def findings(stream, limit=FINDINGS_SHOWN):
    rows = Finding.objects.filter(stream_id=stream.pk).order_by("event_index", "id")
    fields = ("code", "severity", "event_index", "expected", "got", "detail", "said")
    return [explained(row) for row in rows.values(*fields)[:limit]]


def finding_counts(stream):
    counts = dict(
        Finding.objects.filter(stream_id=stream.pk)
        .values_list("severity")
        .annotate(n=Count("id"))
        .values_list("severity", "n")
    )
    return {s: counts.get(s, 0) for s in ("error", "warning", "info")}


def type_counts(stream):
    """Event types of the stream with their counts, most frequent first (the table filter)."""
    rows = (
        Event.objects.filter(stream_id=stream.pk)
        .values_list("type")
        .annotate(n=Count("id"))
        .values_list("type", "n")
    )
    return sorted(rows, key=lambda r: (-r[1], known_secrets.label_key(r[0])))


def stream_timeline(user, stream, window=None):
    """Everything the timeline page shows of a stream, but the chart's points (see
    `timing_series`): header, attempts, figures, waterfall, output, findings, the first
    window of the event table (or the one `window` asks for)."""
    window = window or {}
    events = event_window(stream, **window)
    items = output_blocks(stream)
    if stream.is_active:
        # A streaming row's event_count is rewritten at most every COUNT_WRITE_INTERVAL_MS:
        # the page counts what is stored, as its table and chart do (never saved).
        stream.event_count = stored_event_count(stream)
    final_text = stream.final_text
    terminal_diff = None
    if final_text and not stream.is_active and final_text != _final_texts(items):
        terminal_diff = word_ops(_final_texts(items), final_text)
    last_us = _last_event_us(stream)
    first_sent = _first_sent_us(stream) if events.proxied else None
    chain = attempts(user, stream)
    later = [a for a in chain if a["attempt"] > stream.attempt]
    return {
        "stream": stream,
        "replay": replay_offer(stream),
        "proxied": events.proxied,
        "error_message": stream.error_message,
        "attempts": chain,
        "next_attempt": later[0] if later else None,
        "waterfall": waterfall(stream, last_us, first_sent_us=first_sent),
        "waterfall_start": _start_view(stream, first_sent),
        "items": items,
        "final_text": final_text,
        "terminal_diff": terminal_diff,
        "findings": findings(stream),
        "finding_counts": finding_counts(stream),
        "types": type_counts(stream),
        "events": events,
    }


def _last_event_us(stream):
    """When a finished stream's last event arrived (None: active, or no events)."""
    if stream.is_active or not stream.event_count:
        return None
    last = Event.objects.filter(stream_id=stream.pk, index=stream.event_count - 1)
    return last.values_list("t_us", flat=True).first()


def _first_sent_us(stream):
    """When a proxied stream's first event was handed to its client (index order through the
    (stream, index) index; an event the client never got, after it hung up, has none)."""
    handed = Event.objects.filter(stream_id=stream.pk, sent_us__isnull=False)
    return handed.order_by("index").values_list("sent_us", flat=True).first()


# ---------------------------------------------------------------------------------------------
# The event table


@dataclass
class EventWindow:
    rows: list = field(default_factory=list)
    first: int | None = None
    last: int | None = None
    has_before: bool = False
    has_after: bool = False
    type: str = ""
    at: int | None = None  # the row the page jumped to
    proxied: bool = False  # rows have `proxy_ms`, the table its "proxy +ms" column

    @property
    def columns(self):
        """The table's column count (for cells that span it)."""
        return 7 if self.proxied else 6


def is_proxied(stream):
    return stream.source == Stream.Source.PROXY


def proxy_added_ms(t_us, sent_us):
    """How long the proxy held an event: its receipt from the upstream → handed to the client
    (the per-event value behind Stream.proxy_added_p50_ms; None when it was never handed)."""
    if t_us is None or sent_us is None:
        return None
    return (sent_us - t_us) / 1000


def event_window(
    stream, *, after=None, before=None, at=None, type="", tail=False, limit=EVENTS_PAGE
):
    """A window of up to `limit` events by arrival index: after an index, before one, around
    one (`at`: a jump, which ignores the type filter), the last ones (`tail`), or the first.
    Every read is a range on the unique (stream, index) index."""
    qs = Event.objects.filter(stream_id=stream.pk)
    if at is not None:
        type = ""
    if type:
        qs = qs.filter(type=type)
    descending = at is None and (before is not None or tail)
    if at is not None:
        rows = _event_rows(qs.filter(index__gte=max(0, at - JUMP_CONTEXT)), limit + 1)
        if not rows:  # past the end: show the end
            return event_window(stream, tail=True, limit=limit)
    elif before is not None:
        rows = _event_rows(qs.filter(index__lt=before), limit + 1, descending=True)
    elif tail:
        rows = _event_rows(qs, limit + 1, descending=True)
    else:
        rows = _event_rows(qs.filter(index__gt=-1 if after is None else after), limit + 1)
    window = EventWindow(type=type, at=at, proxied=is_proxied(stream))
    if descending:
        window.has_before = len(rows) > limit
        rows = rows[:limit][::-1]
        window.has_after = bool(rows) and qs.filter(index__gt=rows[-1]["index"]).exists()
    else:
        window.has_after = len(rows) > limit
        rows = rows[:limit]
        window.has_before = bool(rows) and qs.filter(index__lt=rows[0]["index"]).exists()
    if rows:
        window.first, window.last = rows[0]["index"], rows[-1]["index"]
        _mark_findings(stream, rows)
    window.rows = rows
    return window


def _event_rows(qs, limit, descending=False):
    previous = Event.objects.filter(stream_id=OuterRef("stream_id"), index=OuterRef("index") - 1)
    qs = qs.annotate(prev_t_us=Subquery(previous.values("t_us")[:1]))
    qs = qs.order_by("-index" if descending else "index")
    columns = ("index", "t_us", "prev_t_us", "sequence_number", "type", "is_json", "data")
    rows = []
    read = list(qs.values_list(*columns, "sent_us")[:limit])
    for index, t_us, prev_t_us, seq, type_, is_json, data, sent_us in read:
        gap = None
        if t_us is not None and prev_t_us is not None:
            gap = (t_us - prev_t_us) / 1000
        rows.append(
            {
                "index": index,
                "t_ms": None if t_us is None else t_us / 1000,
                "gap_ms": gap,
                "proxy_ms": proxy_added_ms(t_us, sent_us),
                "sequence_number": seq,
                "type": type_ or ("(not JSON)" if not is_json else "(no type)"),
                "summary": event_summary(type_, data, is_json),
                "severity": "",
                "codes": [],
            }
        )
    return rows


def _mark_findings(stream, rows):
    lo, hi = rows[0]["index"], rows[-1]["index"]
    marks = {}
    for index, code, severity in Finding.objects.filter(
        stream_id=stream.pk, event_index__gte=lo, event_index__lte=hi
    ).values_list("event_index", "code", "severity"):
        marks.setdefault(index, []).append((code, severity))
    if not marks:
        return
    for row in rows:
        found = marks.get(row["index"])
        if found:
            row["codes"] = sorted({code for code, _ in found})
            row["severity"] = max((s for _, s in found), key=lambda s: SEVERITY_RANK.get(s, 0))


def _clip(text, limit=SUMMARY_MAX):
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _quoted(text, limit=SUMMARY_MAX):
    return _clip(json.dumps(text, ensure_ascii=False), limit)


def _where(obj):
    oi, ci = obj.get("output_index"), obj.get("content_index")
    if oi is None:
        return ""
    return f" [{oi}:{ci}]" if ci is not None else f" [{oi}]"


def event_summary(type_, data, is_json=True):
    """One line about an event for the table: the delta text, the item, the error, …
    (`data` verbatim: the page leaves through the egress gate)."""
    data = data or ""
    if not is_json:
        return "not JSON: " + _clip(data, SUMMARY_MAX - 10)
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return "not JSON: " + _clip(data, SUMMARY_MAX - 10)
    if not isinstance(obj, dict):
        return _clip(data)
    t = type_ or obj.get("type") or ""
    return _summarizer(t)(obj)


def _summarizer(type_):
    """The summary of an event of this type: by its exact type, else by how its type ends
    (a family: every `….delta`, every `…_text.done`), else the generic one."""
    summarize = _SUMMARY_BY_TYPE.get(type_)
    if summarize is None:
        ending = next((e for e in _SUMMARY_BY_ENDING if type_.endswith(e)), None)
        summarize = _SUMMARY_BY_ENDING[ending] if ending else _summary_other
    return summarize


def _chars(n):
    """A length in characters, as the page's language says it."""
    return ngettext("%(n)s char", "%(n)s chars", n) % {"n": n}


def _summary_delta(obj):
    delta = obj.get("delta")
    return _quoted(delta if isinstance(delta, str) else str(delta)) + _where(obj)


def _summary_text_done(obj):
    text = obj.get("text", obj.get("refusal"))
    if not isinstance(text, str):
        return _summary_other(obj)
    return _chars(len(text)) + f"{_where(obj)}: " + _quoted(text, 100)


def _summary_input_done(obj):
    value = obj.get("arguments", obj.get("input"))
    return _quoted(value if isinstance(value, str) else str(value)) + _where(obj)


def _summary_item(obj):
    item = obj.get("item") if isinstance(obj.get("item"), dict) else {}
    bits = [str(item.get("type") or "item")]
    bits += [str(item[key]) for key in ("name", "call_id", "id", "status") if item.get(key)]
    return _clip(" ".join(bits) + _where(obj))


def _summary_part(obj):
    part = obj.get("part") if isinstance(obj.get("part"), dict) else {}
    return _clip(str(part.get("type") or "part") + _where(obj))


def _summary_routing(obj):
    extra = ", ".join(str(obj[k]) for k in ("category", "source") if obj.get(k))
    return _clip(f"→ {obj.get('model_id', '?')}" + (f" ({extra})" if extra else ""))


def _summary_error(obj):
    nested = obj.get("error") if isinstance(obj.get("error"), dict) else {}
    code = obj.get("code") or nested.get("code") or ""
    message = obj.get("message") or nested.get("message") or ""
    return _clip(f"{code}: {message}" if code else str(message))


def _summary_other(obj):
    """A response (created, terminal, …), a terminal event's `final_text`, or the fields."""
    response = obj.get("response")
    if isinstance(response, dict):
        bits = [str(response.get(k)) for k in ("id", "status", "model") if response.get(k)]
        text = response.get("output_text")
        if isinstance(text, str) and text:
            bits.append(_chars(len(text)))
        return _clip(" ".join(bits))
    if isinstance(obj.get("final_text"), str):
        return "final_text, " + _chars(len(obj["final_text"]))
    rest = {k: v for k, v in obj.items() if k not in ("type", "sequence_number")}
    return _clip(json.dumps(rest, ensure_ascii=False)) if rest else ""


_SUMMARY_BY_TYPE = {
    "response.refusal.done": _summary_text_done,
    "response.output_item.added": _summary_item,
    "response.output_item.done": _summary_item,
    "response.content_part.added": _summary_part,
    "response.content_part.done": _summary_part,
    "response.routing.completed": _summary_routing,
    "error": _summary_error,
}
# (no event type ends in two of these)
_SUMMARY_BY_ENDING = {
    ".delta": _summary_delta,
    "_text.done": _summary_text_done,  # output_text, reasoning_text, reasoning_summary_text
    "arguments.done": _summary_input_done,
    "input.done": _summary_input_done,
}


def event_detail(stream, index):
    """One event with its data: pretty-printed JSON and verbatim; None when it does not exist."""
    events = Event.objects.filter(stream_id=stream.pk, index=index)
    row = events.values(*(c for c in PROXIED_ROW_COLUMNS if c != "stream_id")).first()
    if row is None:
        return None
    raw = row.pop("raw")
    data = row["data"]
    row["size"] = len(data)
    row["truncated"] = len(data) > DETAIL_MAX
    row["verbatim"] = data[:DETAIL_MAX]
    pretty = None
    if row["is_json"]:
        try:
            pretty = json.dumps(json.loads(data), indent=2, ensure_ascii=False)[:DETAIL_MAX]
        except (ValueError, RecursionError):
            pretty = None
    row["pretty"] = pretty
    row["raw"] = None if raw is None else repr(bytes(raw)[:2000])
    row["t_ms"] = None if row["t_us"] is None else row["t_us"] / 1000
    row["proxied"] = is_proxied(stream)
    row["columns"] = EventWindow(proxied=row["proxied"]).columns
    row["sent_ms"] = None if row["sent_us"] is None else row["sent_us"] / 1000
    row["proxy_ms"] = proxy_added_ms(row["t_us"], row["sent_us"])
    row["findings"] = findings_at(stream, index)
    return row


def findings_at(stream, index):
    rows = Finding.objects.filter(stream_id=stream.pk, event_index=index)
    return [explained(row) for row in rows.values(*EXPLAINED, "code", "severity", "said")]


# ---------------------------------------------------------------------------------------------
# Chart and replay data


def flagged_timing(stream):
    """How many stall and buffered_delivery findings the stream has, all of them (a stall
    before the connection closed sits at no event): the chart caption's numbers."""
    counts = dict(
        Finding.objects.filter(stream_id=stream.pk, code__in=("stall", "buffered_delivery"))
        .values_list("code")
        .annotate(n=Count("id"))
        .values_list("code", "n")
    )
    return {
        "stall": counts.get("stall", 0),
        "buffered_delivery": counts.get("buffered_delivery", 0),
    }


def _replay_entry(t_us, type_, obj, targets):
    """`[t_us, target, delta]` for an output delta (its target numbered in `targets` on first
    sight), else `[t_us, obj]` with only the fields the page's renderer reads."""
    delta = obj.get("delta")
    if type_ in OUTPUT_DELTAS and isinstance(delta, str):
        key = (type_, obj.get("output_index"), obj.get("content_index"), obj.get("summary_index"))
        target = targets.get(key)
        if target is None:
            target = targets[key] = len(targets)
        return [t_us, target, delta]
    slim = {k: obj[k] for k in REPLAY_KEYS if k in obj}
    for key in ("item", "part"):
        value = obj.get(key)
        if isinstance(value, dict):
            slim[key] = {k: value[k] for k in REPLAY_ITEM_KEYS if k in value}
    return [t_us, slim]


def timing_series(stream):
    """The inter-event timing chart's data, compact: `gap_us[i]` is the time since the previous
    event (the first: since the attempt started), so the client rebuilds receipt times with a
    running sum; `kind[i]` indexes `types`. Arrival indexes are sent only when they are not
    simply 0, 1, 2, …

    100 000 events: one ordered read of two columns over the (stream, index) range and list
    comprehensions: cheap enough to send whole (docs/performance.md, "Inspection").

    A proxied stream's also has `proxy_us[i]`, how long the proxy held each event (None: never
    handed to the client), and `proxy`, the stream's p50 and p99 of it."""
    events = Event.objects.filter(stream_id=stream.pk)
    rows, sent = _timed_rows(events, is_proxied(stream))
    times = [t for t, _ in rows]
    data = {
        "stream": stream.pk,
        "status": stream.status,
        "count": len(rows),
        "timed": None not in times,
        "closed_us": stream.closed_us,
        "flagged": flagged_timing(stream),
    }
    if not rows or not data["timed"]:
        # (no events: an HTTP error or a wrong content type; nothing to chart)
        return data
    types = {}
    data["kind"] = [types.setdefault(type_ or "", len(types)) for _, type_ in rows]
    gaps = [t - p for p, t in zip([0, *times[:-1]], times, strict=True)]
    data.update(
        first=0,
        gap_us=gaps,
        types=list(types),
        output_types=sorted(t for t in types if t in OUTPUT_DELTAS),
    )
    if sent is not None:
        data["proxy_us"] = [None if s is None else s - t for t, s in zip(times, sent, strict=True)]
        data["proxy"] = {"p50_ms": stream.proxy_added_p50_ms, "p99_ms": stream.proxy_added_p99_ms}
    bounds = events.aggregate(lo=Min("index"), hi=Max("index"))
    indexes = range(len(rows))
    if rows and (bounds["lo"], bounds["hi"]) != (0, len(rows) - 1):
        indexes = list(events.order_by("index").values_list("index", flat=True))
        data["index"] = indexes
    if len(gaps) > 1:
        data["stats"] = _gap_stats(gaps, times, indexes)
    data["marks"] = _timing_marks(stream)
    return data


def _timed_rows(events, proxied):
    """[(t_us, type)] in index order, and a proxied stream's sent_us list (else None)."""
    columns = ("t_us", "type", "sent_us") if proxied else ("t_us", "type")
    rows = list(events.order_by("index").values_list(*columns))
    if not proxied:
        return rows, None
    return [(t, type_) for t, type_, _ in rows], [s for _, _, s in rows]


def _timing_marks(stream):
    """Where the chart draws its timing findings (those at an event, the first 1,000); the
    caption counts `flagged`, which also has a stall before the connection closed (a finding
    at no event)."""
    marks = Finding.objects.filter(
        stream_id=stream.pk, code__in=("stall", "buffered_delivery"), event_index__isnull=False
    )
    return list(marks.order_by("event_index").values("event_index", "code")[:1000])


def _gap_stats(gaps, times, indexes):
    """The chart's caption: duration, the gaps' median, p90, p99 and maximum (nearest rank,
    the first gap, from the attempt's start, left out), and the ten longest gaps."""
    between = sorted(gaps[1:])
    top = heapq.nlargest(10, range(1, len(gaps)), key=gaps.__getitem__)
    return {
        "duration_ms": times[-1] / 1000,
        "median_ms": figures.nearest_rank(between, 500) / 1000,
        "p90_ms": figures.nearest_rank(between, 900) / 1000,
        "p99_ms": figures.nearest_rank(between, 990) / 1000,
        "max_ms": between[-1] / 1000,
        "longest": [{"index": indexes[i], "gap_ms": gaps[i] / 1000} for i in top],
    }


def stored_event_count(stream):
    """How many events of the stream are stored: its last index + 1 (indexes are dense from
    0), read through the (stream, index) index."""
    last = (
        Event.objects.filter(stream_id=stream.pk)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
    )
    return 0 if last is None else last + 1


def replay_offer(stream):
    """Whether the page offers a replay, and if not, why: a stream that received no events
    (HTTP 429/500, a wrong content type) or none that shaped an output has nothing to replay."""
    if stream.is_active:
        return {
            "available": False,
            "reason": gettext("The replay is available when the stream has ended."),
        }
    if not stream.event_count:
        return {
            "available": False,
            "reason": gettext("Nothing to replay: no events were received."),
        }
    if not stream.parts:
        return {
            "available": False,
            "reason": gettext("Nothing to replay: no event carried output."),
        }
    return {"available": True, "reason": ""}


def terminal_index(stream):
    """The arrival index of the stream's terminal event (None without one). What arrived after
    it is not part of the response (checks: event_after_terminal)."""
    return (
        Event.objects.filter(stream_id=stream.pk, type__in=TERMINAL_STATUS)
        .order_by("index")
        .values_list("index", flat=True)
        .first()
    )


# Types the page's output renderer uses, and the fields of each it needs.
REPLAY_KEYS = ("type", "output_index", "content_index", "summary_index", "text", "arguments")
REPLAY_TYPES = frozenset(
    {
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.output_text.done",
        "response.refusal.done",
        "response.function_call_arguments.done",
        *OUTPUT_DELTAS,
    }
)
REPLAY_ITEM_KEYS = ("type", "id", "name", "call_id", "status", "output", "arguments")


def replay_events(stream):
    """What the page needs to rebuild the output at its recorded pace, compact.

    `events` holds `[t_us, target, delta]` for a delta (`targets[target]` is its
    `[type, output_index, content_index, summary_index]`) and `[t_us, obj]` for the other
    output-shaping events, `obj` reduced to the fields the page's renderer reads; repeated
    sequence numbers are left out, as the checker leaves them out of the text, and so is what
    arrived after the terminal event. A long stream's replay data is megabytes of JSON:
    fetched only when someone presses Replay."""
    rows = Event.objects.filter(stream_id=stream.pk, type__in=REPLAY_TYPES)
    end = terminal_index(stream)
    if end is not None:
        rows = rows.filter(index__lt=end)
    rows = rows.order_by("index").values_list("t_us", "type", "sequence_number", "data")
    targets = {}
    events = []
    seen = set()
    for t_us, type_, seq, data in rows.iterator(chunk_size=5000):
        if seq is not None:
            if seq in seen:
                continue  # a duplicate delivery: the checker did not apply it either
            seen.add(seq)
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            events.append(_replay_entry(t_us, type_, obj, targets))
    return {
        "stream": stream.pk,
        "targets": [list(k) for k in targets],
        "events": events,
        "timed": all(e[0] is not None for e in events),
    }
