"""The streams list: a keyset page of the streams a user may see after the filters, a ranked
search of their text, and the filter suggestions. The list's export filters with the same
`filter_streams`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import F, Q, Subquery
from django.utils.html import escape
from django.utils.safestring import mark_safe

from dashboard.queries.common import rows_for
from streams.access.rules import streams_for
from streams.models import Stream
from streams.store import known_secrets, scores, search
from streams.store.lookups import HasTag

PAGE_STREAMS = 50  # rows per list page
MODEL_SCAN = 5000  # recent streams whose model names feed the filter suggestions


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
    if f.get("format"):
        qs = qs.filter(format=f["format"])
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


def ranked_terms(user, filters, project=None):
    """The terms of the list's search when it is a search for words (ranked, with snippets),
    else None (no search, or one that names a stream exactly)."""
    q = (filters.get("q") or "").strip()
    if not q or _exact(streams_for(user, project), q) is not None:
        return None
    return search.parse(q) or None


def marked(snippet):
    """A search snippet (streams/store/search.py: plain text, its matches between the index's
    markers) as safe HTML: escaped, each match in <mark>. A snippet that held a secret comes
    without markers, so it is shown redacted and unmarked."""
    out = []
    for i, piece in enumerate(re.split(f"[{search.MATCH_START}{search.MATCH_STOP}]", snippet)):
        out.append(f"<mark>{escape(piece)}</mark>" if i % 2 and piece else escape(piece))
    return mark_safe("".join(out))


def search_page(user, filters, terms, number=1, project=None):
    """Page `number` of the streams `user` may see (of `project`, given) that match `terms`
    and the other filters, best first, each with its `snippet` and `rank` (a StreamPage:
    `search_page`, `next_page`)."""
    qs = filter_streams(streams_for(user, project), {**filters, "q": ""})
    hits, more = search.page(qs, terms, number)
    by_pk = qs.in_bulk([h.pk for h in hits])
    streams = []
    for hit in hits:
        stream = by_pk.get(hit.pk)
        if stream is not None:
            stream.snippet, stream.rank = marked(hit.snippet), hit.rank
            streams.append(stream)
    q = filters["q"].strip()
    if number == 1 and q.isdigit() and len(q) <= 18 and int(q) not in by_pk:
        streams[:0] = qs.filter(pk=int(q))  # (a number is also a stream id)
    page = StreamPage(streams, search_page=number)
    page.next_page = number + 1 if more else None
    page.previous_page = number - 1 if number > 1 else None
    rows_for(user, page.streams)
    return page


def stream_page(user, filters, *, before=None, after=None, limit=PAGE_STREAMS, project=None):
    """One page of the streams `user` may see (of `project`, given: the page's project),
    newest first, after the filters.

    Keyset pagination on (created_at, id): `before` / `after` are stream ids whose position
    the page continues from. `created_at <= c AND NOT (created_at = c AND id >= pk)` keeps the
    range on `created_at` usable by the `stream_created` / `stream_user_created` indexes
    (an OR of the two cases would not be); ties are ordered by id."""
    visible = streams_for(user, project)
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
    rows_for(user, page.streams)
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


def model_names(user, project=None):
    """Requested and resolved model names of the user's recent streams (filter suggestions).
    Bounded: the newest MODEL_SCAN rows through the created_at index, not a DISTINCT over
    the whole table."""
    recent = streams_for(user, project).order_by("-created_at")[:MODEL_SCAN]
    names = set()
    pairs = list(recent.values_list("requested_model", "resolved_model"))
    for requested, resolved in pairs:
        names.add(requested)
        names.add(resolved)
    names.discard("")
    return known_secrets.label_order(names)
