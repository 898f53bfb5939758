"""What several stream pages share: a page of stream rows as every table of them shows it, and
findings as a page words them."""

from django.contrib.auth import get_user_model
from django.db.models import Count
from django.utils.formats import number_format
from django.utils.translation import gettext

from streams.core.checks import CODES, Said
from streams.models import Finding, Stream
from streams.store import scores

FINDINGS_SHOWN = 500  # findings listed on the timeline; the .json export has them all


def rows_for(user, streams):
    """What every table of stream rows (streams/stream_row.html) shows beyond the row: its
    scores and comments (`feedback`), and for staff, whose stream it is."""
    summaries = scores.summaries(s.pk for s in streams)
    empty = scores.Summary()
    for stream in streams:
        stream.feedback = summaries.get(stream.pk, empty)
    if user.is_staff or any(s.user_id != user.pk for s in streams):
        _owner_names(streams)


def _owner_names(streams):
    """Staff and a project's members see others' streams: say whose (one lookup for the page,
    not a join)."""
    owners = {s.user_id for s in streams} - {None}
    names = dict(get_user_model().objects.filter(pk__in=owners).values_list("pk", "username"))
    for stream in streams:
        stream.owner_name = names.get(stream.user_id, "")


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


def findings_at(stream, index):
    rows = Finding.objects.filter(stream_id=stream.pk, event_index=index)
    return [explained(row) for row in rows.values(*EXPLAINED, "code", "severity", "said")]


def is_proxied(stream):
    return stream.source == Stream.Source.PROXY
