from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.utils import display_for_value
from django.core.paginator import Paginator
from django.db import models
from django.utils.formats import number_format
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from streams.access import invitations
from streams.core.checks import KNOWN_TYPES
from streams.models import (
    ApiToken,
    AuditEntry,
    Comment,
    Event,
    Finding,
    ImportFile,
    ImportJob,
    Invitation,
    Price,
    Score,
    ScoreType,
    ShareLink,
    Stream,
)
from streams.store import audit, compact, known_secrets, retention
from streams.store import events as stored_events
from streams.store.lookups import distinct_stream_values, events_of_type

# A big table's changelist counts this many rows at most; beyond, it says it did not count.
COUNT_CAP = 10_000


class FiltersOnly:
    """A changelist filters by what its own list filters offer, and by nothing else.

    Django lets the query string filter by any lookup on a model's own fields
    (`?error_message__startswith=Incorrect API key provided: sk-4`, `?output_text__gt=…`): each
    is a question about stored text, and an upstream's echo of a key in it is walked out one
    character at a time (a prefix) or by halves (a range), though every page shows it
    `[redacted]` (docs/security.md). So only the parameters the filters make are allowed: a
    value (`__exact`, `__isnull`, a related id), a date filter's bounds."""

    FILTER_LOOKUPS = ("exact", "isnull", "id__exact")
    DATE_LOOKUPS = ("gte", "lt")

    def lookup_allowed(self, lookup, value, request=None):
        if not super().lookup_allowed(lookup, value, request):
            return False
        name, _, rest = lookup.partition("__")
        for entry in self.get_list_filter(request):
            if isinstance(entry, type) and issubclass(entry, admin.SimpleListFilter):
                if lookup == entry.parameter_name:  # (its own parameter, its own query)
                    return True
                continue
            field = entry[0] if isinstance(entry, tuple | list) else entry
            if not isinstance(field, str) or field != name:
                continue
            kinds = self.FILTER_LOOKUPS
            if isinstance(self.model._meta.get_field(name), models.DateField):
                kinds += self.DATE_LOOKUPS
            return rest in kinds
        return False


class CappedCountPaginator(Paginator):
    """Counts a big table's changelist only as far as it is cheap, and says which it did (the
    admin's templates for this app show `count_label`: templates/admin/streams/).

    Up to COUNT_CAP rows, exactly: a count over `LIMIT COUNT_CAP + 1` reads at most that many
    entries of an index (a filter without one: as many rows as it takes to find them, as the
    page's own query does). Beyond it, the whole table (no filter, no search) is estimated
    from its ids, two index seeks: MAX(id) − MIN(id) + 1, an upper bound (ids are never
    reused; rows deleted between the oldest and the newest still count, and retention deletes
    the oldest). A filtered list beyond it is "more than COUNT_CAP", its pages numbered up to
    there. Never COUNT(*) over millions of rows, and never a number made up."""

    EXACT, ESTIMATE, MORE = "exact", "estimate", "more"

    @cached_property
    def counted(self):
        """(count, how): how = EXACT, ESTIMATE or MORE."""
        rows = self.object_list
        n = rows.order_by()[: COUNT_CAP + 1].count()
        if n <= COUNT_CAP:
            return n, self.EXACT
        if not rows.query.has_filters():
            ids = rows.model._base_manager.order_by("pk").values_list("pk", flat=True)
            return max(n, ids.last() - ids.first() + 1), self.ESTIMATE
        return n, self.MORE

    @cached_property
    def count(self):
        return self.counted[0]

    @property
    def count_label(self):
        """The count as the admin shows it when it is not exact ("" when it is)."""
        n, how = self.counted
        if how == self.ESTIMATE:
            return gettext("about %(n)s (estimate)") % {"n": number_format(n, force_grouping=True)}
        if how == self.MORE:
            return gettext("more than %(n)s") % {"n": number_format(COUNT_CAP, force_grouping=True)}
        return ""


class BigTableAdmin(FiltersOnly, admin.ModelAdmin):
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50

    def action_checkbox(self, obj):
        """Django's checkbox, the same markup written at once: its widget renders three
        templates a row, a third of a 50-row changelist's time (docs/performance.md,
        "Admin")."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            str(obj.pk),
            format_html(gettext("Select this object for an action - {}"), str(obj)),
        )


class FindingInline(admin.TabularInline):
    model = Finding
    extra = 0
    fields = ("event_index", "severity", "code", "expected", "got", "detail")
    readonly_fields = fields
    can_delete = False


class _ModelFilter(admin.SimpleListFilter):
    """A model column's values, by a loose index scan of its index (one seek per model):
    Django's own filter reads them with `SELECT DISTINCT` over every stream (77 ms for the two
    at 100,000 streams on PostgreSQL, growing with the table). Listed in the order of their
    redacted texts: in the order of the stored ones, a key's place among the values someone
    else chose would tell its characters (known_secrets.label_order)."""

    def lookups(self, request, model_admin):
        models = known_secrets.label_order(distinct_stream_values(self.column))
        return [(m, m) for m in models]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


class RequestedModelFilter(_ModelFilter):
    title = _("requested model")
    column = "requested_model"
    parameter_name = "requested_model__exact"


class ResolvedModelFilter(_ModelFilter):
    title = _("resolved model")
    column = "resolved_model"
    parameter_name = "resolved_model__exact"


@admin.register(Stream)
class StreamAdmin(BigTableAdmin):
    list_display = (
        "id",
        "created_at",
        "user",
        "source",
        "status",
        "requested_model",
        "resolved_model",
        "ttft_ms",
        "event_count",
        "findings_count",
    )
    list_filter = ("status", "source", RequestedModelFilter, ResolvedModelFilter)
    # `__exact`, which the upstream_id index serves (`=` is `iexact`: a LIKE on SQLite, which
    # reads every row)
    search_fields = ("upstream_id__exact",)
    list_select_related = ("user",)
    raw_id_fields = ("user", "first_attempt")
    # every column, but whether retention deleted the events is its answer, not the column's
    # (a dropped day's streams keep theirs empty: streams/store/retention.py, `pruned_at`)
    readonly_fields = [
        "events_pruned" if f.name == "events_pruned_at" else f.name
        for f in Stream._meta.fields
        if f.name not in ("id",)
    ]
    exclude = ("events_pruned_at",)
    inlines = [FindingInline]

    @admin.display(description=_("events pruned at"))
    def events_pruned(self, obj):
        return display_for_value(retention.pruned_at(obj), self.get_empty_value_display())

    # a deletion of streams is in the audit log, one entry per project (streams/store/audit.py)
    def delete_model(self, request, obj):
        audit.streams_deleted([obj.pk], by="admin")
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        audit.streams_deleted(queryset, by="admin")
        super().delete_queryset(request, queryset)


class EventTypeFilter(admin.SimpleListFilter):
    """The protocol's event types to filter by (any other works in the URL too): Django's own
    filter lists the stored ones, a DISTINCT over every event (0.6 s at a million). A type's
    events are read through their index (`events_of_type`)."""

    title = _("type")
    parameter_name = "type"

    def lookups(self, request, model_admin):
        return [(t, t) for t in sorted(KNOWN_TYPES)]

    def queryset(self, request, queryset):
        return events_of_type(queryset, self.value()) if self.value() else queryset


@admin.register(Event)
class EventAdmin(BigTableAdmin):
    list_display = ("stream", "index", "t_us", "type", "sequence_number")
    list_filter = (EventTypeFilter,)
    search_fields = ("stream__id",)  # (get_search_results: the search box says what it searches)
    search_help_text = _("A stream's id: its events.")
    raw_id_fields = ("stream",)
    readonly_fields = [f.name for f in Event._meta.fields if f.name != "id"]

    def get_search_results(self, request, queryset, search_term):
        """The events of the stream whose id is searched, through the (stream, index)
        constraint's index (Django's own search compares the id as text, row by row); a term
        that is no id finds nothing."""
        stream_id = _stream_id(search_term)
        if stream_id is None:
            return (queryset.none() if search_term.strip().lstrip("#") else queryset), False
        return queryset.filter(stream_id=stream_id), False

    def changelist_view(self, request, extra_context=None):
        """A searched stream whose events are packed (streams/store/compact.py: its rows are
        gone) has them listed through the one event reader, a page at a time from an index
        (`after`, which the changelist's own filters never see)."""
        after = request.GET.get(PACKED_AFTER)
        if after is not None:
            request.GET = request.GET.copy()
            del request.GET[PACKED_AFTER]
        stream_id = _stream_id(request.GET.get("q", ""))
        packed = None
        if stream_id is not None and compact.count(stream_id):
            packed = packed_page(stream_id, request.GET.get("type"), after, self.list_per_page)
        return super().changelist_view(request, {**(extra_context or {}), "packed": packed})


PACKED_AFTER = "after"
PACKED_COLUMNS = ("index", "t_us", "type", "sequence_number")


def _stream_id(term):
    """The stream id a search term names (`123`, `#123`), else None."""
    term = term.strip().lstrip("#")
    if term.isdigit() and len(term) <= 18:  # (an id fits a signed 64-bit integer)
        return int(term)
    return None


def packed_page(stream_id, type_, after, size):
    """A page of a packed stream's events for the admin: its `size` events after index `after`
    (of `type_`), read through streams/store/events.py; `next_after` where more follow."""
    after = int(after) if after and after.isdigit() and len(after) <= 9 else None
    types = [type_] if type_ else None
    found = stored_events.read(stream_id, PACKED_COLUMNS, after=after, types=types, limit=size + 1)
    rows = [dict(zip(PACKED_COLUMNS, row, strict=True)) for row in found[:size]]
    return {
        "stream_id": stream_id,
        "count": compact.count(stream_id),
        "headers": [Event._meta.get_field(c).verbose_name for c in PACKED_COLUMNS],
        "rows": rows,
        "next_after": rows[-1]["index"] if len(found) > size else None,
    }


@admin.register(Finding)
class FindingAdmin(BigTableAdmin):
    list_display = ("stream", "event_index", "severity", "code", "detail")
    list_filter = ("severity", "code")
    raw_id_fields = ("stream",)


# Why a job was cancelled (streams/ingest/import_jobs.py writes the code), in the admin's words.
CANCEL_REASONS = {
    "abandoned": _("abandoned (nobody was watching)"),
    "cancelled": _("cancelled by its user"),
}


@admin.register(ImportJob)
class ImportJobAdmin(FiltersOnly, admin.ModelAdmin):
    list_display = ("id", "user", "status", "created_at", "cancelled_because")
    list_filter = ("status",)
    raw_id_fields = ("user",)
    readonly_fields = ("created_at", "updated_at", "polled_at")

    @admin.display(description=_("cancel reason"), ordering="cancel_reason")
    def cancelled_because(self, job):
        return CANCEL_REASONS.get(job.cancel_reason, job.cancel_reason) or None


@admin.register(ImportFile)
class ImportFileAdmin(FiltersOnly, admin.ModelAdmin):
    list_display = ("job", "position", "filename", "size", "status")
    list_filter = ("status",)
    raw_id_fields = ("job",)
    exclude = ("content",)


@admin.register(ApiToken)
class ApiTokenAdmin(FiltersOnly, admin.ModelAdmin):
    list_display = ("prefix", "user", "project", "name", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked",)
    # the spend counters are the recorder's (streams/store/spend.py)
    readonly_fields = (
        "digest", "prefix", "created_at", "last_used_at",
        "spent_day", "spent_day_nanos", "spent_month", "spent_month_nanos",
    )  # fmt: skip
    raw_id_fields = ("user", "created_by", "project")


class LookAndDelete:
    """An admin that shows and deletes rows but never writes them: they have a write path of
    their own (scores, comments, share links)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ScoreType)
class ScoreTypeAdmin(FiltersOnly, admin.ModelAdmin):
    """Where staff define what a score may be (docs/scores.md): a type in use cannot be
    deleted (its scores protect it)."""

    list_display = ("name", "kind", "minimum", "maximum", "description", "created_at")
    readonly_fields = ("created_at",)


@admin.register(Score)
class ScoreAdmin(LookAndDelete, BigTableAdmin):
    """Scores as given: looked at and deleted here, never written (streams/store/scores.py
    is their one write path; a delete here is subtracted from the rollups)."""

    list_display = (
        "stream",
        "score_type",
        "value",
        "label",
        "author",
        "source",
        "key",
        "updated_at",
    )
    list_filter = ("score_type", "source")
    raw_id_fields = ("stream", "author")


@admin.register(Comment)
class CommentAdmin(LookAndDelete, BigTableAdmin):
    list_display = ("stream", "author", "source", "created_at", "text")
    list_filter = ("source",)
    raw_id_fields = ("stream", "author")


@admin.register(ShareLink)
class ShareLinkAdmin(LookAndDelete, FiltersOnly, admin.ModelAdmin):
    """Share links of everyone: which are open, and revoking them (the secret itself is not
    kept, so a link is never made or shown here)."""

    list_display = (
        "id", "owner", "stream", "session", "anyone", "created_at", "expires_at", "revoked_at",
        "last_opened_at", "opened",
    )  # fmt: skip
    list_filter = ("anyone",)
    raw_id_fields = ("owner", "stream")
    readonly_fields = ("digest",)
    actions = ("revoke",)

    @admin.action(description=_("Revoke the selected links (their open pages close)"))
    def revoke(self, request, queryset):
        from streams.live import shared

        for link in queryset:
            shared.revoke(request.user, link.pk)


@admin.register(Invitation)
class InvitationAdmin(LookAndDelete, FiltersOnly, admin.ModelAdmin):
    """Every project's invitations, read-only (they are made on a project's members page, and
    their secret is not kept: `digest` is not shown), and revoking them (docs/teams.md)."""

    list_display = (
        "email", "project", "role", "state", "invited_by", "created_at", "expires_at",
        "accepted_at", "accepted_by", "revoked_at",
    )  # fmt: skip
    list_filter = ("role",)
    list_select_related = ("project", "invited_by", "accepted_by")
    exclude = ("digest",)
    ordering = ("-created_at",)
    actions = ("revoke",)

    def has_delete_permission(self, request, obj=None):
        return False  # (revoked, it stays: who invited whom is the project's history)

    @admin.display(description=_("state"))
    def state(self, obj):
        return invitations.STATES[invitations.status(obj)]

    @admin.action(description=_("Revoke the selected invitations (their links stop working)"))
    def revoke(self, request, queryset):
        n = invitations.revoke_open(queryset)
        self.message_user(
            request,
            ngettext("%(n)s invitation revoked.", "%(n)s invitations revoked.", n)
            % {"n": number_format(n, force_grouping=True)},
        )


@admin.register(Price)
class PriceAdmin(FiltersOnly, admin.ModelAdmin):
    """The team's own prices: they win over the maintained list for the streams that finish
    after an edit (`manage.py reprice` for those already stored)."""

    list_display = (
        "model_pattern",
        "effective_from",
        "currency",
        "input_per_million",
        "cached_input_per_million",
        "output_per_million",
        "reasoning_per_million",
        "note",
    )
    list_filter = ("currency",)
    search_fields = ("model_pattern",)
    ordering = ("model_pattern", "-effective_from")


class AuditActionFilter(admin.SimpleListFilter):
    """The actions the log records (a list, not a scan of the table for its values)."""

    title = _("action")
    parameter_name = "action__exact"

    def lookups(self, request, model_admin):
        return [(a, audit.action_label(a)) for a in audit.ACTIONS]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(action=value) if value else queryset


@admin.register(AuditEntry)
class AuditEntryAdmin(LookAndDelete, BigTableAdmin):
    """The audit log, read only: an entry is never written, changed or deleted by hand (it goes
    with its project). Said as the audit page says it (streams/store/audit.py)."""

    list_display = ("at", "project", "who", "address", "action_said", "target_label")
    list_filter = (AuditActionFilter, "at")
    list_select_related = ("project",)
    fields = readonly_fields = (
        "at", "project", "actor", "who", "address", "action_said", "target_type", "target_id",
        "target_label", "changes_said",
    )  # fmt: skip

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description=_("who"))
    def who(self, entry):
        return audit.who_said(entry)

    @admin.display(description=_("action"))
    def action_said(self, entry):
        return audit.action_label(entry.action)

    @admin.display(description=_("what changed"))
    def changes_said(self, entry):
        return format_html_join(
            mark_safe("<br>"),
            "{}: {} → {}",
            ((c.field, _or_dash(c.before), _or_dash(c.after)) for c in audit.changes_said(entry)),
        )


def _or_dash(value):
    return "—" if value is None else value
