"""What the recorder stores: one `Stream` per upstream attempt, one `Event` per SSE event.

Metrics are denormalised onto `Stream` at write time so that list and analytics pages are plain
aggregates over one table. Times measured by us are monotonic offsets in microseconds from the
moment the stream was started (`started_at` is the wall-clock reading of that same moment).
"""

import functools
import hashlib
import math
import operator
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import IntegrityError, models, transaction
from django.dispatch import Signal
from django.utils.text import slugify
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from streams import fields
from streams.core import formats, pricing
from streams.core.checks import OUTPUT_DELTAS

# ---------------------------------------------------------------------------------------------
# What the audit log watches (streams/store/audit.py): Django's save and delete signals see a
# row's `save()` and `delete()`, not a queryset's `update()` (how a link is revoked, how a
# token's last use is noted). The watched models' querysets tell of their updates too.

# sent by WatchedQuerySet.update before it writes, with `queryset` (the rows) and `fields` (the
# names it sets); a receiver may answer a callable, called with the count once they are written
updating = Signal()


class WatchedQuerySet(models.QuerySet):
    def update(self, **kwargs):
        answers = updating.send(self.model, queryset=self, fields=frozenset(kwargs))
        done = [answer for _receiver, answer in answers if callable(answer)]
        n = super().update(**kwargs)
        for then in done:
            then(n)
        return n


# ---------------------------------------------------------------------------------------------
# Projects (streams/access/projects.py decides what each role may do; docs/teams.md)

MAX_PROJECT_NAME_CHARS = 100
# The currencies costs are in, and a new project's.
CURRENCIES = [(code, code) for code in pricing.CURRENCIES]
DEFAULT_CURRENCY = pricing.CURRENCIES[0]
MAX_RETENTION_DAYS = 3650  # a project's own retention: ten years at most


class Project(models.Model):
    """What a team works in: every stream, token, conversation, saved view, share link, score
    type, import and price override belongs to one. `personal_of`: the user whose own project
    this is (each user gets one the first time they need it, which keeps a user who never
    joins a team exactly as private as before)."""

    name = fields.CharField(_("name"), max_length=MAX_PROJECT_NAME_CHARS, unique=True)
    slug = fields.SlugField(_("slug"), max_length=60, unique=True)
    personal_of = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="personal_project",
        verbose_name=_("personal project of"),
    )
    # what the project's spend caps are in (its tokens' caps, streams/store/spend.py): a
    # stream priced in another currency is not counted against them (no exchange rates here)
    currency = fields.CharField(
        _("currency"), max_length=3, choices=CURRENCIES, default=DEFAULT_CURRENCY
    )
    # The language its alert notices are said in (streams/alerts/notices.py); empty: the
    # instance's (LANGUAGE_CODE). A notice is read by a team, not by one person whose
    # browser says which.
    language = fields.CharField(
        _("language of notices"), max_length=10, blank=True, default="", choices=settings.LANGUAGES
    )
    # Retention of its own (streams/store/retention.py), in days, shorter or longer than the
    # instance's (STREAMSCOPE_RETAIN_*_DAYS); none: the instance's
    retain_streams_days = models.PositiveIntegerField(
        _("keep streams for (days)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RETENTION_DAYS)],
    )
    retain_events_days = models.PositiveIntegerField(
        _("keep events for (days)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RETENTION_DAYS)],
    )
    # set when its owner deletes it: it is gone from every list at once, and the periodic job
    # (streams/run/deletions.py: members.delete_marked) deletes its streams in batches, then it;
    # the process doing so holds it until `deletion_claimed_until` (one at a time), and counts
    # the streams gone in `deleted_streams` (its deletion's audit entry says how many)
    deleting_at = models.DateTimeField(_("being deleted since"), null=True, blank=True)
    deletion_claimed_until = models.DateTimeField(
        _("deletion claimed until"), null=True, blank=True
    )
    deleted_streams = models.PositiveBigIntegerField(_("streams deleted"), default=0)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    # The switcher's word for every project at once (dashboard/project.py: staff's "all"): a
    # project of such a slug could not be chosen, so no project is given one.
    RESERVED_SLUGS = frozenset({"all"})

    class Meta:
        verbose_name = _("project")
        verbose_name_plural = _("projects")
        ordering = ["name"]

    def __str__(self):
        return self.name

    @classmethod
    def personal(cls, user):
        """`user`'s personal project, made with them as its owner the first time it is asked
        for (remembered on the user object for the rest of the request)."""
        cached = getattr(user, "_personal_project", None)
        if cached is not None:
            return cached
        project = cls.objects.filter(personal_of=user).first()
        if project is None:
            project = cls._make_personal(user)
            # the roles read before it existed (streams/access/projects.py caches them on the
            # user) lack its membership: a page that first listed, then made, said "no role"
            try:  # (`del`, not `__dict__`: request.user is a lazy object)
                del user._project_roles
            except AttributeError:
                pass
        user._personal_project = project
        return project

    @classmethod
    def _make_personal(cls, user):
        base = (user.get_username() or f"user {user.pk}")[: MAX_PROJECT_NAME_CHARS - 8]
        slug_base = (slugify(base) or "user")[:40]
        for n in range(1, 1000):
            suffix = "" if n == 1 else f" ({n})"
            name, slug = base + suffix, slug_base + ("" if n == 1 else f"-{n}")
            if slug in cls.RESERVED_SLUGS:
                continue
            if cls.objects.filter(models.Q(name=name) | models.Q(slug=slug)).exists():
                continue
            try:
                with transaction.atomic():
                    project = cls.objects.create(name=name, slug=slug, personal_of=user)
                    Membership.objects.create(
                        project=project, user=user, role=Membership.Role.OWNER
                    )
                    return project
            except IntegrityError:
                mine = cls.objects.filter(personal_of=user).first()
                if mine is not None:  # (made meanwhile by another request)
                    return mine
        raise RuntimeError(f"no free name for {user}'s personal project")


class Membership(models.Model):
    """One user's role in one project. The roles are ordered: each may do what the one
    before it may, and more (streams/access/projects.py: `ACTIONS`)."""

    class Role(models.TextChoices):
        VIEWER = "viewer", _("Viewer")
        MEMBER = "member", _("Member")
        ADMIN = "admin", _("Admin")
        OWNER = "owner", _("Owner")

    class Origin(models.TextChoices):
        # who made it: a person (an admin, an invitation, a command) or the identity
        # provider's groups at sign-in (which it may change again at the next sign-in)
        HAND = "hand", _("Added by hand")
        IDP = "idp", _("Identity provider")

    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=_("project"),
        db_index=False,
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=_("user"),
        db_index=False,
    )
    role = fields.CharField(_("role"), max_length=10, choices=Role.choices)
    origin = fields.CharField(
        _("origin"), max_length=10, choices=Origin.choices, default=Origin.HAND
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # when the user last worked in it: the project a new session starts in
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique"),
        ]
        indexes = [models.Index(fields=["user", "-last_used_at"], name="membership_user_used")]

    def __str__(self):  # (the role in the reader's language: the admin's pages say it)
        return f"{self.user} · {self.project} ({self.get_role_display()})"


class Invitation(models.Model):
    """An invitation to join a project in a role, sent to an e-mail address: a link whose
    secret (`inv_` + random) is stored only as its SHA-256, that works once, until it expires
    or is revoked (streams/access/invitations.py)."""

    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="invitations",
        verbose_name=_("project"),
        db_index=False,
    )
    email = fields.EmailField(_("e-mail address"))
    role = fields.CharField(_("role"), max_length=10, choices=Membership.Role.choices)
    digest = fields.CharField(_("digest"), max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("invited by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires at"))
    accepted_at = models.DateTimeField(_("accepted at"), null=True, blank=True)
    # who opened the link and joined: whoever was signed in, not necessarily `email`'s owner
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("accepted by"),
    )
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("invitation")
        verbose_name_plural = _("invitations")
        # the members page: a project's invitations, newest first
        indexes = [models.Index(fields=["project", "-created_at"], name="invitation_project")]

    def __str__(self):  # (the role in the reader's language: the admin's pages say it)
        return f"{self.email} · {self.project} ({self.get_role_display()})"

    @staticmethod
    def hash(secret):
        return hashlib.sha256(secret.encode()).hexdigest()


def _project_field(**kwargs):
    """The `project` column of what belongs to a project. Nullable in the database so that
    rows written before projects (and instance-wide score types and prices) have one."""
    kwargs = {"null": True, "blank": True, **kwargs}  # (required for what came after them)
    return models.ForeignKey(Project, on_delete=models.CASCADE, verbose_name=_("project"), **kwargs)


def in_personal_projects(streams):
    """A row made for a user and no project is the user's personal project's: what every
    stream was before projects, and still is for a user who never joins one."""
    for stream in streams:
        if stream.project_id is None and stream.user_id is not None:
            stream.project = Project.personal(stream.user)


class StreamQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        in_personal_projects(objs)
        return super().bulk_create(objs, *args, **kwargs)


class Stream(models.Model):
    class Status(models.TextChoices):
        # the labels are the pages' words for a status (translated); the values are data
        PENDING = "pending", _("Pending")
        STREAMING = "streaming", _("Streaming")
        COMPLETED = "completed", _("Completed")
        INCOMPLETE = "incomplete", _("Incomplete")  # OpenAI's response.incomplete: not an error
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")
        STALLED = "stalled", _("Stalled")
        INTERRUPTED = "interrupted", _("Interrupted")
        TRUNCATED = "truncated", _("Truncated")  # connection closed without a terminal event

    ACTIVE_STATUSES = (Status.PENDING, Status.STREAMING)

    # The pages' one name for each source (the filters' choices, the tables' `source_label`,
    # static/js through the vocabulary).
    class Source(models.TextChoices):
        LIVE = "live", _("Recorded live")
        IMPORT = "import", _("Imported file")
        PROXY = "proxy", _("Recording proxy")

    # The API a stream's bytes speak (streams/core/formats/): its checker, its output's terms.
    class Format(models.TextChoices):
        RESPONSES = formats.RESPONSES, _("Responses")
        CHAT = formats.CHAT, _("Chat Completions")
        MESSAGES = formats.MESSAGES, _("Anthropic Messages")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("user"),
        db_index=False,
    )
    project = _project_field(related_name="streams", db_index=False)
    # the token a proxied stream came through (its spend: streams/store/spend.py)
    token = models.ForeignKey(
        "ApiToken",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="streams",
        verbose_name=_("token"),
    )
    source = fields.CharField(
        _("source"), max_length=10, choices=Source.choices, default=Source.LIVE
    )
    status = fields.CharField(
        _("status"), max_length=12, choices=Status.choices, default=Status.PENDING
    )
    format = fields.CharField(
        _("format"), max_length=10, choices=Format.choices, default=Format.RESPONSES
    )

    # The request. The API key is never part of it (it travels in a header only).
    request_body = fields.JSONField(_("request body"), default=dict)
    requested_model = fields.CharField(_("requested model"), max_length=100, blank=True)
    scenario = fields.CharField(_("scenario"), max_length=50, blank=True)
    prompt = fields.TextField(_("prompt"), blank=True)  # the last user input, for search and lists
    upstream_url = fields.CharField(_("upstream URL"), max_length=300, blank=True)

    # Retries: each attempt is its own row, linked to the first.
    attempt = models.PositiveSmallIntegerField(_("attempt"), default=1)
    first_attempt = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="retries",
        verbose_name=_("first attempt"),
    )

    # Response metadata.
    upstream_id = fields.CharField(_("upstream id"), max_length=200, blank=True)
    resolved_model = fields.CharField(_("resolved model"), max_length=100, blank=True)
    routing_category = fields.CharField(_("routing category"), max_length=50, blank=True)
    routing_source = fields.CharField(_("routing source"), max_length=50, blank=True)
    routing_reasoning = fields.TextField(_("routing reasoning"), blank=True)
    http_status = models.PositiveSmallIntegerField(_("HTTP status"), null=True, blank=True)
    content_type = fields.CharField(_("content type"), max_length=200, blank=True)
    error_code = fields.CharField(_("error code"), max_length=100, blank=True)
    error_message = fields.TextField(_("error message"), blank=True)

    # Wall clock, for display and time filters.
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    heartbeat_at = models.DateTimeField(_("heartbeat at"), null=True, blank=True)
    runner = fields.CharField(
        _("runner"), max_length=120, blank=True
    )  # host:pid:boot of the process

    # Whose clock stamped this attempt's receipt times (docs/measurement.md): the kernel's
    # (SO_TIMESTAMPNS, plain TCP) or the event loop's callback (TLS, other platforms, or
    # STREAMSCOPE_RECEIPT_CLOCK=loop); blank when no request went out (imports, early failures).
    receipt_clock = fields.CharField(
        _("receipt clock"),
        max_length=10,
        blank=True,
        choices=[("kernel", _("kernel")), ("loop", _("event loop"))],
    )
    # Milestones: monotonic µs since the start of this attempt (null = not reached).
    connected_us = models.BigIntegerField(_("connected (µs)"), null=True, blank=True)
    request_written_us = models.BigIntegerField(_("request written (µs)"), null=True, blank=True)
    headers_us = models.BigIntegerField(_("headers received (µs)"), null=True, blank=True)
    created_event_us = models.BigIntegerField(_("created event (µs)"), null=True, blank=True)
    routing_us = models.BigIntegerField(_("routing event (µs)"), null=True, blank=True)
    first_token_us = models.BigIntegerField(_("first token (µs)"), null=True, blank=True)
    first_tool_call_us = models.BigIntegerField(_("first tool call (µs)"), null=True, blank=True)
    terminal_us = models.BigIntegerField(_("terminal event (µs)"), null=True, blank=True)
    closed_us = models.BigIntegerField(_("connection closed (µs)"), null=True, blank=True)

    # Derived metrics, denormalised when the stream finishes.
    ttft_ms = models.FloatField(
        _("TTFT (ms)"), null=True, blank=True
    )  # first output token − request written
    duration_ms = models.FloatField(
        _("duration (ms)"), null=True, blank=True
    )  # request written → connection closed
    tokens_per_s = models.FloatField(_("tokens/s"), null=True, blank=True)
    inter_token_ms = models.FloatField(
        _("inter-token gap (ms)"), null=True, blank=True
    )  # mean gap between output deltas
    event_count = models.PositiveIntegerField(_("event count"), default=0)
    # output-bearing delta events (not tokens: a delta may carry several)
    output_deltas = models.PositiveIntegerField(_("output deltas"), default=0)
    bytes_received = models.BigIntegerField(_("bytes received"), default=0)
    final_text = fields.TextField(
        _("final text"), blank=True
    )  # from the terminal event, when it has one
    output_text = fields.TextField(_("output text"), blank=True)  # reassembled from the deltas
    # What a search finds besides the prompt, output and error (streams/store/search.py), stored
    # redacted: it is the search's own, made of the request and the parts, which keep it all.
    search_other = fields.TextField(_("other searchable text"), blank=True)
    # What the search index reads instead of the prompt, output and error: each with every
    # secret taken out, kept only where that changed something (NULL: the column itself), and
    # when they were derived (ns since the epoch). NULL there: not derived since an indexed
    # column last changed, and the index holds nothing of the row (streams/store/search.py).
    # (NULL, not "": a copy is not the empty text, and a nullable column is added in place.)
    search_prompt = fields.TextField(_("prompt as searched"), null=True, blank=True)  # noqa: DJ001
    search_output = fields.TextField(_("output as searched"), null=True, blank=True)  # noqa: DJ001
    search_error = fields.TextField(_("error as searched"), null=True, blank=True)  # noqa: DJ001
    search_derived_ns = models.BigIntegerField(_("search text derived (ns)"), null=True, blank=True)
    parts = fields.JSONField(
        _("output parts"), default=list, blank=True
    )  # reassembled output items and parts
    findings_count = models.PositiveIntegerField(_("findings"), default=0)
    error_findings = models.PositiveIntegerField(_("error findings"), default=0)
    warning_findings = models.PositiveIntegerField(
        _("warning findings"), default=0
    )  # (the rest are info)

    # Proxied streams (streams/serve/proxy.py): how long the proxy held events between their receipt
    # from the upstream and handing them to the client's socket, over the stream's events.
    proxy_added_p50_ms = models.FloatField(_("proxy added p50 (ms)"), null=True, blank=True)
    proxy_added_p99_ms = models.FloatField(_("proxy added p99 (ms)"), null=True, blank=True)
    # What the client said about the request (X-Streamscope-Tags / -Session headers).
    tags = fields.JSONField(_("tags"), default=list, blank=True)
    session = fields.CharField(_("session"), max_length=200, blank=True)
    # Retention (streams/store/retention.py): when this stream's events were deleted; the row, its
    # metrics and findings stay, and the timeline says the events are gone.
    events_pruned_at = models.DateTimeField(_("events pruned at"), null=True, blank=True)
    # Packing (streams/store/compact.py): when this ended stream's event rows were packed into
    # blocks (or found to have none). NULL while it runs and until the sweep packs it, so the
    # sweep's look for due streams reads the few unpacked ones by the index `stream_unpacked`
    # instead of asking every ended stream whether it has rows.
    events_packed_at = models.DateTimeField(_("events packed at"), null=True, blank=True)

    # Usage (streams/core/usage.py): what the upstream reported, else an estimate that says so
    # (`usage_source`); None where it is not known (reasoning and cached tokens are never
    # estimated).
    class UsageSource(models.TextChoices):
        REPORTED = "reported", _("Reported")
        ESTIMATED = "estimated", _("Estimated")

    input_tokens = models.BigIntegerField(_("input tokens"), null=True, blank=True)
    output_tokens = models.BigIntegerField(_("output tokens"), null=True, blank=True)
    total_tokens = models.BigIntegerField(_("total tokens"), null=True, blank=True)
    cached_input_tokens = models.BigIntegerField(_("cached input tokens"), null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(_("reasoning tokens"), null=True, blank=True)
    usage_source = fields.CharField(
        _("usage source"), max_length=10, blank=True, choices=UsageSource.choices
    )
    # Cost (streams/store/prices.py), fixed when the stream finished at the price valid at its
    # start: nano-units (10⁻⁹) of `cost_currency`; None = no price (never 0 for "unknown").
    cost_nanos = models.BigIntegerField(_("cost (nano-units)"), null=True, blank=True)
    cost_currency = fields.CharField(_("cost currency"), max_length=3, blank=True)
    price_ref = fields.CharField(_("price used"), max_length=200, blank=True)

    objects = StreamQuerySet.as_manager()

    class Meta:
        verbose_name = _("stream")
        verbose_name_plural = _("streams")
        indexes = [
            # the streams list: newest first, of a project (everyone's but staff's "all"), of a
            # user (the user filter), of every project (staff)
            models.Index(fields=["-created_at"], name="stream_created"),
            models.Index(fields=["project", "-created_at"], name="stream_project_created"),
            models.Index(fields=["user", "-created_at"], name="stream_user_created"),
            # a session's streams in order (the session page, the session filter); most
            # streams have none, so the index holds only those that do
            models.Index(
                fields=["session", "created_at"],
                condition=~models.Q(session=""),
                name="stream_session_created",
            ),
            # the rows whose search text is not derived (search.maintain): almost none
            models.Index(
                fields=["id"],
                condition=models.Q(search_derived_ns__isnull=True),
                name="stream_search_underived",
            ),
            # the packing sweep's due streams (compact.due): the running and the not yet
            # packed, a few minutes' streams however long the history
            models.Index(
                fields=["id"],
                condition=models.Q(events_packed_at__isnull=True),
                name="stream_unpacked",
            ),
            # list filters on status and the sweeper's `status = streaming` scan
            models.Index(fields=["status", "-created_at"], name="stream_status_created"),
            # the lists' and analytics' format filter, within a project
            models.Index(fields=["project", "format", "-created_at"], name="stream_project_format"),
            # a user's streams of one status (the list's and the search's user and status
            # filters together): one range of entries, where the user's index alone looked each
            # of their streams up to test its status (a word searched with both, as staff over
            # 1M streams: 491 ms; docs/performance.md, "Pages at 1M")
            models.Index(fields=["user", "status", "-created_at"], name="stream_user_status"),
            # Analytics (streams/stats/). TTFT percentiles by ordered offset: `WHERE model = ?
            # AND <range, filters> ORDER BY ttft_ms LIMIT 1 OFFSET k` walks one of these three in
            # ttft order and checks every filter in the index entry, never in the table row
            # (without the filter columns each entry cost a table lookup, many times slower on
            # a large history; docs/performance.md, "Models"). Per resolved model:
            models.Index(
                fields=[
                    "resolved_model",
                    "ttft_ms",
                    "created_at",
                    "requested_model",
                    "status",
                    "source",
                    "project",
                    "user",
                ],
                name="stream_resolved_ttft_cov",
            ),
            # … per requested model (auto, and each pinned model):
            models.Index(
                fields=[
                    "requested_model",
                    "ttft_ms",
                    "created_at",
                    "resolved_model",
                    "status",
                    "source",
                    "project",
                    "user",
                ],
                name="stream_requested_ttft_cov",
            ),
            # … over all models (the "all" row, "pinned" as a whole, the slowest N):
            models.Index(
                fields=[
                    "ttft_ms",
                    "created_at",
                    "resolved_model",
                    "requested_model",
                    "status",
                    "source",
                    "project",
                    "user",
                ],
                name="stream_ttft_cov",
            ),
            # Counts, sums and time buckets per (resolved, requested) pair: `WHERE resolved_model
            # = ? AND requested_model = ? AND created_at >= ? …` seeks the range and reads every
            # metric the latency and routing pages aggregate from the index alone (a table scan
            # reads every wide row, far slower; docs/performance.md, "Models"). The
            # loose index scans listing the models also use its (resolved, requested) prefix.
            # Left out on purpose: event_count and heartbeat_at, which the recorder bumps on
            # every batch — indexing them would cost an index write per batch (and on
            # PostgreSQL turn those updates from HOT into full ones).
            models.Index(
                fields=[
                    "resolved_model",
                    "requested_model",
                    "created_at",
                    "status",
                    "source",
                    "project",
                    "user",
                    "ttft_ms",
                    "inter_token_ms",
                    "tokens_per_s",
                    "request_written_us",
                    "headers_us",
                    "created_event_us",
                    "routing_us",
                    "first_token_us",
                    "routing_category",
                    "routing_source",
                ],
                name="stream_pair_metrics",
            ),
            # The routing page's list of pinned requests that got a routing event (a protocol
            # violation, rare): a partial index holds only those rows.
            models.Index(
                fields=["-created_at"],
                condition=models.Q(routing_us__isnull=False)
                & ~models.Q(requested_model__in=["auto", ""]),
                name="stream_pinned_routed",
            ),
            # Admin analytics: usage per project and user (one walk in (project, user) order
            # serves both tables), a project's or user's usage sums, from the index.
            models.Index(
                fields=[
                    "project",
                    "user",
                    "created_at",
                    "status",
                    "resolved_model",
                    "output_deltas",
                    "bytes_received",
                    "duration_ms",
                    "findings_count",
                ],
                name="stream_project_usage",
            ),
            # search by upstream id
            models.Index(fields=["upstream_id"], name="stream_upstream_id"),
            # Admin analytics' largest and slowest streams: `ORDER BY bytes_received DESC LIMIT
            # 10` within a range walks these from the top and checks the range in the entry;
            # without them every stream of the range was read and sorted (seconds at 1M rows).
            # Both columns are written once, when the stream ends (never per batch).
            models.Index(
                fields=["bytes_received", "created_at", "user", "project"],
                name="stream_bytes_top",
            ),
            models.Index(
                fields=["duration_ms", "created_at", "user", "project"],
                name="stream_duration_top",
            ),
        ]

    def __str__(self):
        status = str(self.get_status_display()).lower()
        return gettext("stream %(id)s (%(status)s)") % {"id": self.pk, "status": status}

    def save(self, *args, **kwargs):
        in_personal_projects([self])
        super().save(*args, **kwargs)

    @property
    def is_active(self):
        return self.status in self.ACTIVE_STATUSES


def _not_output_delta():
    """Event rows of any type but the output deltas: one term per delta type, so that a query
    holding the same terms is seen to fit the partial index below (SQLite matches a partial
    index's condition term by term; an IN list it does not recognise)."""
    terms = [~models.Q(type=t) for t in sorted(OUTPUT_DELTAS)]
    return functools.reduce(operator.and_, terms)


# The events that are not output deltas: the condition of the index event_sparse_type.
NOT_OUTPUT_DELTA = _not_output_delta()


class Event(models.Model):
    """One SSE event as received, with its verbatim `data`."""

    # No index of its own: the unique (stream, index) constraint below serves every lookup by
    # stream, and a second B-tree per row made every insert much slower (docs/performance.md).
    stream = models.ForeignKey(
        Stream,
        on_delete=models.CASCADE,
        related_name="events",
        db_index=False,
        verbose_name=_("stream"),
    )
    index = models.PositiveIntegerField(_("index"))  # arrival order: 0, 1, 2 … per stream
    t_us = models.BigIntegerField(
        _("received (µs)"), null=True
    )  # monotonic µs since the stream started
    received_at = models.DateTimeField(_("received at"), null=True)
    event_name = fields.CharField(_("event name"), max_length=200, blank=True)  # the `event:` field
    sse_id = fields.CharField(_("SSE id"), max_length=200, blank=True)  # the `id:` field
    type = fields.CharField(_("type"), max_length=200, blank=True)
    sequence_number = models.BigIntegerField(_("sequence number"), null=True)
    output_index = models.IntegerField(_("output index"), null=True)
    content_index = models.IntegerField(_("content index"), null=True)
    is_json = models.BooleanField(_("valid JSON"), default=True)
    data = fields.TextField(_("data"))
    # The undecoded bytes, kept only when the data was not valid UTF-8 (nothing is lost).
    raw = models.BinaryField(_("raw bytes"), null=True)
    # Proxied streams: µs since the stream started when the event's bytes were handed to the
    # client's socket (t_us is when they came from the upstream).
    sent_us = models.BigIntegerField(_("sent to the client (µs)"), null=True)
    # The lines the upstream sent since the previous event that are no part of an event (SSE
    # comments such as `: OPENROUTER PROCESSING`, `retry:` blocks), verbatim with their line
    # ends: stored so the `.sse` export gives back every byte that came, never an event of
    # their own (no index, not checked, not output).
    preamble = fields.TextField(_("lines before it"), blank=True, default="")

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        constraints = [
            # catch-up reads `index > after` for one stream; uniqueness guards exactly-once
            models.UniqueConstraint(fields=["stream", "index"], name="event_stream_index"),
        ]
        indexes = [
            # The admin's events of a type, newest first, and their count: without it, a type
            # that is rare walked every event (1.8 s at 11.5M events). Only the types that are
            # not output deltas: the deltas are nearly every event of a real stream (one a
            # token), the type any page finds among the newest rows at once, and a B-tree entry
            # per row of theirs is what the recorder's inserts would pay for (docs/
            # performance.md, "Admin"). A query uses it by holding NOT_OUTPUT_DELTA's terms
            # (`streams.store.lookups.events_of_type`).
            models.Index(
                fields=["type", "id"], condition=NOT_OUTPUT_DELTA, name="event_sparse_type"
            ),
        ]

    def __str__(self):
        return gettext("event %(stream)s#%(index)s %(type)s") % {
            "stream": self.stream_id,
            "index": self.index,
            "type": self.type,
        }


class EventBlock(models.Model):
    """Up to `compact.BLOCK` consecutive events of a finished stream, packed (issue 49,
    streams/store/compact.py): their columns compressed together, the rows deleted. The reader
    (streams/store/events.py) opens only the blocks a window overlaps."""

    stream = models.ForeignKey(
        Stream,
        on_delete=models.CASCADE,
        related_name="event_blocks",
        db_index=False,
        verbose_name=_("stream"),
    )
    first = models.PositiveIntegerField(_("first index"))
    last = models.PositiveIntegerField(_("last index"))
    count = models.PositiveIntegerField(_("events"))
    t_first_us = models.BigIntegerField(_("first received (µs)"), null=True)
    t_last_us = models.BigIntegerField(_("last received (µs)"), null=True)
    payload = models.BinaryField(_("packed events"))
    # What the timeline shows of these events without decoding them (streams/store/outline.py):
    # their types' counts and the chart's points. Null: packed before outlines, made on first read.
    outline = models.BinaryField(_("outline"), null=True)
    # The stream's own `created_at`, copied: on PostgreSQL the table is partitioned by it, a
    # partition a day (streams/store/partitions.py), so retention of a day drops a table and a
    # read that names it opens one partition. In the primary key there (a partitioned table's
    # unique keys must hold its partition key); SQLite keeps one table.
    stream_created_at = models.DateTimeField(_("stream created at"))

    class Meta:
        verbose_name = _("event block")
        verbose_name_plural = _("event blocks")
        constraints = [
            models.UniqueConstraint(fields=["stream", "first"], name="event_block_stream_first"),
        ]

    def __str__(self):
        return gettext("events %(stream)s#%(first)s–%(last)s") % {
            "stream": self.stream_id,
            "first": self.first,
            "last": self.last,
        }


class PrunedDay(models.Model):
    """A UTC day whose streams' events retention deleted at once, by dropping the day's
    partition of event blocks (PostgreSQL, streams/store/retention.py): every stream created
    that day had its events deleted `at` then. The streams' rows are left as they were (marking
    each one's `events_pruned_at` was 91 % of a day's retention at 100M events);
    `retention.pruned_at` reads the stream's own mark, else its day's. Of the whole instance,
    not of a project: a partition holds every project's blocks of the day."""

    day = models.DateField(_("day"), unique=True)
    at = models.DateTimeField(_("events deleted at"))

    class Meta:
        verbose_name = _("day of deleted events")
        verbose_name_plural = _("days of deleted events")

    def __str__(self):
        return f"{self.day}"


class Finding(models.Model):
    """One protocol-checker finding on a stream."""

    class Severity(models.TextChoices):
        ERROR = "error", _("Error")
        WARNING = "warning", _("Warning")
        INFO = "info", _("Info")

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="findings", verbose_name=_("stream")
    )
    code = fields.CharField(_("code"), max_length=50)
    severity = fields.CharField(_("severity"), max_length=10, choices=Severity.choices)
    event_index = models.IntegerField(_("event index"), null=True)
    expected = fields.TextField(_("expected"), blank=True)
    got = fields.TextField(_("got"), blank=True)
    detail = fields.TextField(_("detail"), blank=True)
    # which of expected, got and detail are the checker's own words, as phrases with their data
    # (checks.Said: {field: {"key", "params"}}), so a page says them in its language; the
    # English above stays what the API and exports serve. {}: a row from before, shown as stored
    said = fields.JSONField(_("explanation"), default=dict, blank=True)

    class Meta:
        verbose_name = _("finding")
        verbose_name_plural = _("findings")
        indexes = [
            # findings by code on the admin analytics page
            models.Index(fields=["code", "severity"], name="finding_code"),
        ]
        ordering = ["stream", "event_index", "id"]

    def __str__(self):
        return f"{self.get_severity_display()} {self.code} @ {self.event_index}"


class Capture(models.Model):
    """The exact bytes of an imported file, so an export is byte-identical."""

    stream = models.OneToOneField(
        Stream, on_delete=models.CASCADE, related_name="capture", verbose_name=_("stream")
    )
    filename = fields.CharField(_("file name"), max_length=300)
    content = models.BinaryField(_("content"))

    class Meta:
        verbose_name = _("capture")
        verbose_name_plural = _("captures")

    def __str__(self):
        return self.filename


class ImportJob(models.Model):
    """One upload of captured files, imported in the background (streams/ingest/import_jobs.py)."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")  # every file was read (some may have failed: see its files)
        FAILED = "failed", _("Failed")  # the job itself broke off (its process died, an error)
        CANCELLED = "cancelled", _("Cancelled")

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        verbose_name=_("user"),
        db_index=False,
    )
    project = _project_field(related_name="import_jobs")
    status = fields.CharField(
        _("status"), max_length=20, choices=Status.choices, default=Status.QUEUED
    )
    model = fields.CharField(
        _("requested model"), max_length=100, blank=True
    )  # the requested model, when given
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # when someone last looked at its progress: a job nobody watches is cancelled
    polled_at = models.DateTimeField(_("polled at"), auto_now_add=True)
    cancel_reason = fields.CharField(_("cancel reason"), max_length=100, blank=True)
    error = fields.TextField(_("error"), blank=True)

    class Meta:
        verbose_name = _("import job")
        verbose_name_plural = _("import jobs")
        indexes = [
            # the per-user caps: a user's active jobs and uploads of the last minute
            models.Index(fields=["user", "status"], name="importjob_user_status"),
            models.Index(fields=["user", "created_at"], name="importjob_user_created"),
        ]

    def __str__(self):
        status = str(self.get_status_display()).lower()
        return gettext("import %(id)s (%(status)s)") % {"id": self.pk, "status": status}


class ImportFile(models.Model):
    """One uploaded file of an import job: its bytes until it is imported, then its outcome."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        READING = "reading", _("Reading")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    job = models.ForeignKey(
        ImportJob, on_delete=models.CASCADE, related_name="files", verbose_name=_("import job")
    )
    position = models.PositiveIntegerField(_("position"))
    filename = fields.CharField(_("file name"), max_length=300)
    size = models.PositiveBigIntegerField(_("size (bytes)"))
    content = models.BinaryField(
        _("content")
    )  # emptied once imported (the Capture rows keep the bytes)
    status = fields.CharField(
        _("status"), max_length=20, choices=Status.choices, default=Status.QUEUED
    )
    error = fields.TextField(_("error"), blank=True)  # in English, as every stored text
    # The importer's reason for `error` as a code and its parameters (`importer.CaptureError`:
    # {"code": "empty", "params": {}}), which the import page says in its own language; null
    # for other errors and for rows from before it was kept (the page shows `error` then).
    error_reason = fields.JSONField(_("error reason"), null=True, blank=True)
    stream_ids = fields.JSONField(_("stream ids"), default=list)

    class Meta:
        verbose_name = _("import file")
        verbose_name_plural = _("import files")
        ordering = ["job", "position"]

    def __str__(self):
        return self.filename


class ApiToken(models.Model):
    """A bearer token for scripts, of one user in one project; only its SHA-256 is stored.
    What it may do (`scopes`), until when, and how much (requests per minute, spend per UTC
    day and month in its project's currency): streams/access/tokens.py, throttle.py, spend.py.
    `spent_*`: what its proxied streams cost, counted as each one's cost is written
    (streams/store/spend.py), for the day and month they name."""

    class Scope(models.TextChoices):
        PROXY = "proxy", _("Recording proxy")
        READ = "read", _("Read the API")
        WRITE = "write", _("Write through the API")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, verbose_name=_("user")
    )
    project = _project_field(related_name="tokens")
    name = fields.CharField(_("name"), max_length=100, blank=True)
    digest = fields.CharField(_("SHA-256 digest"), max_length=64, unique=True)
    prefix = fields.CharField(_("prefix"), max_length=12)  # shown in admin to tell tokens apart
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # who made it (an admin may make a token for a member); None: the user themselves, or gone
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    scopes = fields.JSONField(_("scopes"), default=list, blank=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)
    revoked = models.BooleanField(_("revoked"), default=False)
    # limits (None: none); spend caps in nano-units of the project's currency, like cost_nanos
    requests_per_minute = models.PositiveIntegerField(
        _("requests per minute"), null=True, blank=True
    )
    spend_cap_day_nanos = models.BigIntegerField(_("spend cap per day"), null=True, blank=True)
    spend_cap_month_nanos = models.BigIntegerField(_("spend cap per month"), null=True, blank=True)
    spent_day = models.DateField(_("spend counted on"), null=True, blank=True)
    spent_day_nanos = models.BigIntegerField(_("spent that day"), default=0)
    spent_month = models.DateField(_("spend counted in month"), null=True, blank=True)
    spent_month_nanos = models.BigIntegerField(_("spent that month"), default=0)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self):
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def hash(token):
        return hashlib.sha256(token.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name="", project=None, **fields):
        """A new token of `user` in `project` (by default their personal project), with every
        scope unless `scopes` is given; the token itself is returned once, only its digest is
        kept. `fields`: the rest of the row (created_by, expires_at, limits)."""
        if project is None:
            project = Project.personal(user)
        fields.setdefault("scopes", list(cls.Scope.values))
        token = "ss_" + secrets.token_urlsafe(32)
        cls.objects.create(
            user=user,
            project=project,
            name=name,
            digest=cls.hash(token),
            prefix=token[:10],
            **fields,
        )
        return token


class SealedSecret(models.Model):
    """A pass-through key the proxy forwarded (a client's own upstream key), kept so that the
    egress gate redacts it, and any fragment of it, in every process and after restarts. Never
    in clear: `sealed` is the key encrypted under a key derived from SECRET_KEY, `fingerprint`
    an HMAC of it (streams/store/sealed.py; docs/security.md says why not fingerprints alone)."""

    fingerprint = fields.CharField(_("fingerprint"), max_length=64, unique=True)
    sealed = fields.TextField(_("sealed key"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("sealed secret")
        verbose_name_plural = _("sealed secrets")

    def __str__(self):
        return gettext("pass-through key %(fingerprint)s…") % {"fingerprint": self.fingerprint[:12]}


class SweptSecret(models.Model):
    """A secret (the fingerprint of streams/store/sealed.py) for which the rows whose search
    index may hold it were derived again, with it redacted (streams/store/search.py:
    `maintain`): a pass-through key first forwarded, or a configured key changed, after rows
    holding it were indexed."""

    fingerprint = fields.CharField(_("fingerprint"), max_length=64, unique=True)
    swept_at = models.DateTimeField(_("swept at"), auto_now_add=True)

    class Meta:
        verbose_name = _("swept secret")
        verbose_name_plural = _("swept secrets")

    def __str__(self):
        return gettext("swept %(fingerprint)s…") % {"fingerprint": self.fingerprint[:12]}


# What a client may label a stream with (X-Streamscope-Tags): the proxy keeps at most MAX_TAGS
# tags of at most MAX_TAG_CHARS characters; the rollups and the filter forms take tags that long.
MAX_TAGS = 20
MAX_TAG_CHARS = 64


# ---------------------------------------------------------------------------------------------
# Pre-aggregates of finished streams (streams/store/aggregates.py keeps them; docs/analytics.md).
# One row per (period, key): `span` is 3600 (an hour), 10800 (3 hours) or 86400 (a UTC day),
# `t` the period's start in epoch seconds; every value column adds up, so a stream is added
# and subtracted exactly and the rows of any set of periods sum to the figures of their
# streams. `tag` is "" in the rows every stream adds; a tagged stream adds its rows once more
# under each of its tags (what a tag filter reads). `user_key` is the user's id, 0 for none (a
# NULL would make every key distinct to ON CONFLICT); `project_key` likewise the project's. The
# project follows span and tag in every key: a page reads one project's rows (staff: every
# project's), so its periods are one key range.


class _Rollup(models.Model):
    """What every rollup has: the period, the tag and the dimensions every page filters by
    (each part of every rollup's key, `rollup_key`), and the count."""

    span = models.IntegerField(_("period length (s)"))
    tag = fields.CharField(_("tag"), max_length=MAX_TAG_CHARS)
    t = models.BigIntegerField(_("period start (epoch s)"))
    resolved_model = fields.CharField(_("resolved model"), max_length=100)
    source = fields.CharField(_("source"), max_length=10)
    user_key = models.BigIntegerField(_("user key"))
    # the stream's project's id, 0 for none: what every page's access reads first
    project_key = models.BigIntegerField(_("project key"))
    status = fields.CharField(_("status"), max_length=12)
    # the API the stream's bytes spoke (Stream.format): the pages' format filter (0039)
    format = fields.CharField(_("format"), max_length=10)
    n = models.BigIntegerField(_("count"), default=0)

    VALUES = ("n",)  # the base's fields that add up; the others are dimensions

    class Meta:
        abstract = True

    def __str__(self):
        return _rollup_str(self)


def _rollup_str(rollup):
    return gettext("%(rollup)s of %(span)s s from %(t)s: %(n)s") % {
        "rollup": rollup._meta.verbose_name,
        "span": rollup.span,
        "t": rollup.t,
        "n": rollup.n,
    }


def rollup_dimensions():
    """The names of the dimensions every rollup has (the base's fields that are not values)."""
    return tuple(f.name for f in _Rollup._meta.local_fields if f.name not in _Rollup.VALUES)


def rollup_key(*names):
    """A rollup's primary key: `names` in the order its readers' ranges want, then each of
    the base's dimensions they leave out — a dimension added to `_Rollup` is in every key
    (a dimension outside the key would let ON CONFLICT add two of its values into one row)."""
    return models.CompositePrimaryKey(*names, *(d for d in rollup_dimensions() if d not in names))


class _Spend(models.Model):
    """Usage and cost (Stream's columns, summed): `usage_n` streams had usage, `estimated_n`
    of them an estimate; `priced_n` had a cost, in one of the two currencies."""

    usage_n = models.BigIntegerField(_("streams with usage"), default=0)
    estimated_n = models.BigIntegerField(_("streams with estimated usage"), default=0)
    input_tokens = models.BigIntegerField(_("input tokens"), default=0)
    output_tokens = models.BigIntegerField(_("output tokens"), default=0)
    cached_input_tokens = models.BigIntegerField(_("cached input tokens"), default=0)
    reasoning_tokens = models.BigIntegerField(_("reasoning tokens"), default=0)
    priced_n = models.BigIntegerField(_("streams with a cost"), default=0)
    cost_eur_nanos = models.BigIntegerField(_("cost in EUR (nano-units)"), default=0)
    cost_usd_nanos = models.BigIntegerField(_("cost in USD (nano-units)"), default=0)

    class Meta:
        abstract = True


class UsageRollup(_Rollup, _Spend):
    """Counts and sums of finished streams per period and (models, source, user, status,
    error code): what every table row, rate, mean and the admin totals add up from."""

    requested_model = fields.CharField(_("requested model"), max_length=100)
    error_code = fields.CharField(_("error code"), max_length=100)
    ttft_n = models.BigIntegerField(_("TTFT count"), default=0)
    ttft_sum_ns = models.BigIntegerField(_("TTFT sum (ns)"), default=0)
    itl_n = models.BigIntegerField(_("inter-token count"), default=0)
    itl_sum_ns = models.BigIntegerField(_("inter-token sum (ns)"), default=0)
    routed = models.BigIntegerField(_("routed"), default=0)
    decision_n = models.BigIntegerField(_("routing decisions"), default=0)
    phase_n = models.BigIntegerField(_("with phases"), default=0)
    written_sum_us = models.BigIntegerField(_("request written sum (µs)"), default=0)
    headers_sum_us = models.BigIntegerField(_("headers sum (µs)"), default=0)
    created_sum_us = models.BigIntegerField(_("created event sum (µs)"), default=0)
    routed_or_created_sum_us = models.BigIntegerField(
        _("routing or created event sum (µs)"), default=0
    )
    first_token_sum_us = models.BigIntegerField(_("first token sum (µs)"), default=0)
    output_deltas = models.BigIntegerField(_("output deltas"), default=0)
    bytes_received = models.BigIntegerField(_("bytes received"), default=0)
    events = models.BigIntegerField(_("events"), default=0)
    findings = models.BigIntegerField(_("findings"), default=0)

    pk = rollup_key(
        "span",
        "tag",
        "project_key",
        "t",
        "resolved_model",
        "requested_model",
        "source",
        "user_key",
        "status",
        "error_code",
    )

    class Meta:
        verbose_name = _("usage rollup")
        verbose_name_plural = _("usage rollups")


class HistogramRollup(_Rollup):
    """Log-bucketed histograms (bucket b holds values in (γ^(b-1), γ^b], γ = 1.02) of TTFT
    and of the routing decision time, per period, project, models and the stream's status; `full`
    rows also per source and user, the others summed over both (what an unfiltered page reads:
    several times fewer rows). `status` "" marks rows migrated from before it was kept whose
    streams retention had deleted (migration 0008), which also adds the covering index
    `histogram_rollup_user` (metric, full, span, tag, user_key, t, n) for a user's filter."""

    metric = models.SmallIntegerField(_("metric"))
    full = models.BooleanField(_("per source and user"))
    requested_model = fields.CharField(_("requested model"), max_length=100)
    bucket = models.SmallIntegerField(_("bucket"))

    pk = rollup_key(
        "metric",
        "full",
        "span",
        "tag",
        "project_key",
        "t",
        "user_key",
        "source",
        "resolved_model",
        "requested_model",
        "status",
        "bucket",
    )

    class Meta:
        verbose_name = _("histogram rollup")
        verbose_name_plural = _("histogram rollups")


class RoutingRollup(_Rollup):
    """Requests with `model: "auto"` per period, chosen model, source, user, the router's
    category and source, and the stream's status (the routing page's matrix and sources)."""

    routing_category = fields.CharField(_("routing category"), max_length=50)
    routing_source = fields.CharField(_("routing source"), max_length=50)

    pk = rollup_key(
        "span",
        "tag",
        "project_key",
        "t",
        "resolved_model",
        "source",
        "user_key",
        "routing_category",
        "routing_source",
        "status",
    )

    class Meta:
        verbose_name = _("routing rollup")
        verbose_name_plural = _("routing rollups")


class FindingRollup(_Rollup):
    """Checker findings of finished streams per period, code, severity, models, source, user
    and the stream's status (admin analytics' findings table, the routing page's
    pinned-routing count)."""

    code = fields.CharField(_("code"), max_length=50)
    severity = fields.CharField(_("severity"), max_length=10)
    requested_model = fields.CharField(_("requested model"), max_length=100)

    pk = rollup_key(
        "span",
        "tag",
        "project_key",
        "t",
        "code",
        "severity",
        "resolved_model",
        "requested_model",
        "source",
        "user_key",
        "status",
    )

    class Meta:
        verbose_name = _("finding rollup")
        verbose_name_plural = _("finding rollups")


class ProjectRollup(_Spend):
    """Streams, usage and spend per period, tag and project alone: the usage rollup's figures
    summed over its other dimensions (models, source, user, status, error code). What a page
    asks without those filters — the spend per project of staff's analytics page, a range's
    streams and spend per day — is a few rows a day here (one per project, and one under every
    project) against the usage rollup's hundreds, which PostgreSQL reads scattered over the
    heap, a page each (docs/performance.md, "Pages at 1M"). Not a `_Rollup`: its key leaves
    those dimensions out on purpose, and `cube.Cube` reads it only for a scope that filters on
    none of them (`aggregates.PROJECT_DIMENSIONS`)."""

    span = models.IntegerField(_("period length (s)"))
    tag = fields.CharField(_("tag"), max_length=MAX_TAG_CHARS)
    project_key = models.BigIntegerField(_("project key"))
    t = models.BigIntegerField(_("period start (epoch s)"))
    n = models.BigIntegerField(_("count"), default=0)

    pk = models.CompositePrimaryKey("span", "tag", "project_key", "t")

    class Meta:
        verbose_name = _("project rollup")
        verbose_name_plural = _("project rollups")

    def __str__(self):
        return _rollup_str(self)


class Price(models.Model):
    """A team's own price for models (edited in the admin): per million tokens, from a date
    on. An own entry wins over the maintained list (streams/store/prices.py); among own
    entries the most specific pattern in effect at a stream's start wins, then the latest."""

    class Currency(models.TextChoices):
        EUR = "EUR", "EUR"
        USD = "USD", "USD"

    model_pattern = fields.CharField(
        _("model pattern"),
        max_length=100,
        help_text=_("A model id, or a pattern with * (gpt-4o*); case is ignored."),
    )
    effective_from = models.DateTimeField(
        _("effective from"), help_text=_("Streams that started from this moment on.")
    )
    currency = fields.CharField(
        _("currency"), max_length=3, choices=Currency.choices, default=Currency.EUR
    )
    input_per_million = models.DecimalField(_("input per million"), max_digits=14, decimal_places=6)
    cached_input_per_million = models.DecimalField(
        _("cached input per million"),
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Empty: the input price."),
    )
    output_per_million = models.DecimalField(
        _("output per million"), max_digits=14, decimal_places=6
    )
    reasoning_per_million = models.DecimalField(
        _("reasoning per million"),
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Empty: the output price."),
    )
    note = fields.CharField(_("note"), max_length=200, blank=True)
    # none: the instance's own price, for every project
    project = _project_field(related_name="prices")
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("price")
        verbose_name_plural = _("prices")
        ordering = ["model_pattern", "-effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(input_per_million__gte=0)
                & models.Q(output_per_million__gte=0)
                & (
                    models.Q(cached_input_per_million__isnull=True)
                    | models.Q(cached_input_per_million__gte=0)
                )
                & (
                    models.Q(reasoning_per_million__isnull=True)
                    | models.Q(reasoning_per_million__gte=0)
                ),
                name="price_not_negative",
            ),
            # one price per pattern and start for the instance, and one per project (two
            # partial indexes: SQLite has no NULLS NOT DISTINCT)
            models.UniqueConstraint(
                fields=["model_pattern", "effective_from"],
                condition=models.Q(project__isnull=True),
                name="price_one_per_start",
            ),
            models.UniqueConstraint(
                fields=["project", "model_pattern", "effective_from"],
                condition=models.Q(project__isnull=False),
                name="price_one_per_start_in_project",
            ),
        ]

    def __str__(self):
        return f"{self.model_pattern} ({self.currency}, {self.effective_from:%Y-%m-%d})"

    @property
    def ref(self):
        """How pages name this price beside a figure."""
        return f"team price {self.pk}: {self.model_pattern} from {self.effective_from:%Y-%m-%d}"

    def rate(self):
        from streams.core.pricing import TEAM, Rate

        return Rate(
            pattern=self.model_pattern,
            effective_from=self.effective_from,
            currency=self.currency,
            input=self.input_per_million,
            output=self.output_per_million,
            cached_input=self.cached_input_per_million,
            reasoning=self.reasoning_per_million,
            source=TEAM,
            ref=self.ref,
            project=self.project_id,
        )


# ---------------------------------------------------------------------------------------------
# Judging streams (streams/store/scores.py; docs/scores.md): a person's or an application's
# score under a named type, comments, and the rollup that keeps them after retention.

MAX_COMMENT_CHARS = 2000
MAX_SCORE_KEY_CHARS = 100


class ScoreType(models.Model):
    """What a score means: thumbs (1 up, 0 down), a number in [minimum, maximum], or one of a
    few named categories, each with its value. Staff define them (the admin); `thumbs` comes
    with the instance. A score is positive when its value is above the middle of the range."""

    class Kind(models.TextChoices):
        THUMBS = "thumbs", _("Thumbs up or down")
        NUMERIC = "numeric", _("Number")
        CATEGORICAL = "categorical", _("Category")

    # none: the instance's, offered in every project (thumbs)
    project = _project_field(related_name="score_types")
    name = fields.SlugField(_("name"), max_length=50)
    kind = fields.CharField(_("kind"), max_length=12, choices=Kind.choices)
    minimum = models.FloatField(_("minimum"), default=0)
    maximum = models.FloatField(_("maximum"), default=1)
    # [{"label": "wrong", "value": 0}, …] for a categorical type
    categories = fields.JSONField(_("categories"), default=list, blank=True)
    description = fields.CharField(_("description"), max_length=300, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("score type")
        verbose_name_plural = _("score types")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(project__isnull=True),
                name="score_type_instance_name",
            ),
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(project__isnull=False),
                name="score_type_project_name",
            ),
        ]

    def __str__(self):
        return self.name

    MAX_CATEGORIES = 20

    def clean(self):
        """What a type must be to be scored under (a form's, a page's and the domain's check:
        streams/access/definitions.py): a range that is one, categories with distinct labels
        and finite values (the range is theirs), thumbs as 0 to 1."""
        if self.kind == self.Kind.THUMBS:
            self.minimum, self.maximum, self.categories = 0, 1, []
        elif self.kind == self.Kind.CATEGORICAL:
            found = self.categories if isinstance(self.categories, list) else []
            labels = [c.get("label") for c in found if isinstance(c, dict)]
            values = [c.get("value") for c in found if isinstance(c, dict)]
            if not 2 <= len(found) <= self.MAX_CATEGORIES or len(labels) != len(found):
                raise ValidationError(
                    {"categories": _("From 2 to %(n)d categories.") % {"n": self.MAX_CATEGORIES}}
                )
            if any(not isinstance(label, str) or not 0 < len(label) <= 50 for label in labels):
                raise ValidationError(
                    {"categories": _("Each category needs a label of 1 to 50 characters.")}
                )
            if len(set(labels)) != len(labels):
                raise ValidationError({"categories": _("Two categories have the same label.")})
            if any(
                isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                for v in values
            ):
                raise ValidationError(
                    {"categories": _("Each category needs a number as its value.")}
                )
            self.minimum, self.maximum = float(min(values)), float(max(values))
        else:
            self.categories = []
            if not all(math.isfinite(v) for v in (self.minimum, self.maximum)):
                raise ValidationError({"maximum": _("The range's ends are numbers.")})
            if self.minimum >= self.maximum:
                raise ValidationError({"maximum": _("The maximum is above the minimum.")})

    def is_positive(self, value):
        return self.positive(value, self.minimum, self.maximum)

    @staticmethod
    def positive(value, minimum, maximum):
        """What "positive" means, for every page and rollup: above the middle of the range."""
        return value > (minimum + maximum) / 2

    @staticmethod
    def positive_q(prefix=""):
        """`positive` as a condition on Score rows (`prefix` reaches a Score from elsewhere)."""
        middle = (
            models.F(f"{prefix}score_type__minimum") + models.F(f"{prefix}score_type__maximum")
        ) / 2.0
        return models.Q(**{f"{prefix}value__gt": middle})


class Score(models.Model):
    """One judgement of one stream: by a person (`key` "") or by an application with its
    token, which may send one per `key` of its own (an end user, an evaluator run). Writing
    one again replaces it. Written through streams/store/scores.py, which keeps the rollups."""

    class Source(models.TextChoices):
        PERSON = "person", _("Person")
        API = "api", _("API")
        EVALUATOR = "evaluator", _("Evaluator")  # streams/evaluate/

    stream = models.ForeignKey(
        Stream,
        on_delete=models.CASCADE,
        related_name="scores",
        verbose_name=_("stream"),
        db_index=False,
    )
    score_type = models.ForeignKey(
        ScoreType,
        on_delete=models.PROTECT,
        related_name="scores",
        verbose_name=_("score type"),
        db_index=False,
    )
    value = models.FloatField(_("value"))
    label = fields.CharField(_("label"), max_length=50, blank=True)  # a category's, or up/down
    comment = fields.TextField(_("comment"), max_length=MAX_COMMENT_CHARS, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("author"),
    )
    source = fields.CharField(_("source"), max_length=10, choices=Source.choices)
    key = fields.CharField(_("key"), max_length=MAX_SCORE_KEY_CHARS, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("score")
        verbose_name_plural = _("scores")
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "score_type", "author", "key"], name="score_one_per_author"
            ),
        ]
        indexes = [models.Index(fields=["score_type", "stream"], name="score_type_stream")]

    def __str__(self):
        return gettext("%(type)s %(value)s on stream %(id)s") % {
            "type": self.score_type,
            "value": self.shown,
            "id": self.stream_id,
        }

    @property
    def shown(self):
        """The value as people read it: a category's or thumb's label, or the number."""
        return self.label or f"{self.value:g}"


class Comment(models.Model):
    """A remark on a stream, by a person or an application."""

    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="comments", verbose_name=_("stream")
    )
    text = fields.TextField(_("text"), max_length=MAX_COMMENT_CHARS)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("author"),
    )
    source = fields.CharField(_("source"), max_length=10, choices=Score.Source.choices)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("comment")
        verbose_name_plural = _("comments")
        ordering = ["created_at", "id"]

    def __str__(self):
        return gettext("comment %(id)s on stream %(stream)s") % {
            "id": self.pk,
            "stream": self.stream_id,
        }


class ScoreRollup(_Rollup):
    """Scores of finished streams per period, models, source, user, status and score type:
    count, sum of values (thousandths) and how many were positive (the analytics pages'
    scores per model; kept when retention deletes the streams)."""

    score_type = models.BigIntegerField(_("score type"))
    requested_model = fields.CharField(_("requested model"), max_length=100)
    sum_milli = models.BigIntegerField(_("sum of values (thousandths)"), default=0)
    positive = models.BigIntegerField(_("positive"), default=0)

    pk = rollup_key(
        "span",
        "tag",
        "project_key",
        "t",
        "score_type",
        "resolved_model",
        "requested_model",
        "source",
        "user_key",
        "status",
    )

    class Meta:
        verbose_name = _("score rollup")
        verbose_name_plural = _("score rollups")


# ---------------------------------------------------------------------------------------------
# Share links (streams/access/shares.py; docs/sharing.md)


class ShareLink(models.Model):
    """A read-only link to one stream or to one session of its owner's streams. Only the
    SHA-256 of the link's secret is stored. It opens for any signed-in user until it expires
    or is revoked; for anyone with the link only when `anyone` is set and the instance allows
    it (STREAMSCOPE_PUBLIC_SHARE_LINKS)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        verbose_name=_("owner"),
        db_index=False,
    )
    project = _project_field(related_name="share_links")
    stream = models.ForeignKey(
        Stream,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="share_links",
        verbose_name=_("stream"),
    )
    session = fields.CharField(_("session"), max_length=200, blank=True)
    digest = fields.CharField(_("SHA-256 digest"), max_length=64, unique=True)
    anyone = models.BooleanField(_("anyone with the link"), default=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires at"))
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    last_opened_at = models.DateTimeField(_("last opened at"), null=True, blank=True)
    opened = models.PositiveIntegerField(_("times opened"), default=0)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("share link")
        verbose_name_plural = _("share links")
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(stream__isnull=False) & models.Q(session=""))
                | (models.Q(stream__isnull=True) & ~models.Q(session="")),
                name="share_link_one_target",
            ),
        ]
        indexes = [models.Index(fields=["owner", "-created_at"], name="share_owner_created")]

    def __str__(self):
        if self.stream_id:
            return gettext("share link %(id)s to stream %(stream)s") % {
                "id": self.pk,
                "stream": self.stream_id,
            }
        return gettext("share link %(id)s to session %(session)s") % {
            "id": self.pk,
            "session": self.session,
        }

    @staticmethod
    def hash(secret):
        return hashlib.sha256(secret.encode()).hexdigest()


class SignInIdentity(models.Model):
    """A user's account at the identity provider (streams/access/sign_in.py): the provider's
    issuer and its subject id name that account for good, where a username or an address at the
    provider may change or be given to someone else later."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="sign_in_identities",
        verbose_name=_("user"),
    )
    issuer = fields.CharField(_("issuer"), max_length=255)
    # OpenID Connect Core 1.0, 2: a subject is at most 255 ASCII characters (a longer one is
    # refused at sign-in, never cut: streams/access/sign_in.py)
    subject = fields.CharField(_("subject"), max_length=255)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    last_sign_in_at = models.DateTimeField(_("last sign-in at"), null=True, blank=True)

    class Meta:
        verbose_name = _("sign-in identity")
        verbose_name_plural = _("sign-in identities")
        constraints = [
            # the sign-in's lookup, and one user per account at the provider
            models.UniqueConstraint(fields=["issuer", "subject"], name="sign_in_identity_unique"),
        ]

    def __str__(self):
        return f"{self.issuer} {self.subject}"


# ---------------------------------------------------------------------------------------------
# The audit log (streams/store/audit.py records it; docs/teams.md, "Audit log")

MAX_AUDIT_LABEL_CHARS = 200


class AuditEntry(models.Model):
    """One change someone (or something) made: who, when, from where, what to, and what changed.
    Written by streams/store/audit.py's receivers, never by the views that make the change, so a
    new view that changes a membership is recorded without knowing of it."""

    # none: an instance-wide thing (an instance price, a deleted project's last entry); kept
    # as long as its project is
    project = _project_field(related_name="audit_entries", db_index=False)
    # the user, while they exist; `actor_name` keeps who it was after they are deleted
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("actor"),
    )
    actor_name = fields.CharField(_("actor's name"), max_length=150, blank=True)
    at = models.DateTimeField(_("at"))
    # the client's address, "command:<name>" for a management command, "" for the system
    address = fields.CharField(_("from"), max_length=100, blank=True)
    action = fields.CharField(_("action"), max_length=40)
    target_type = fields.CharField(_("target type"), max_length=40, blank=True)
    target_id = fields.CharField(_("target id"), max_length=64, blank=True)
    target_label = fields.CharField(_("target"), max_length=MAX_AUDIT_LABEL_CHARS, blank=True)
    # {field: [before, after]} for a change of a row (never a secret, values redacted and
    # cut); a deletion of streams says how many and which (streams/store/audit.py)
    changes = fields.JSONField(_("changes"), default=dict, blank=True)

    class Meta:
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")
        indexes = [
            # a project's log, newest first (the audit page of a project's admin)
            models.Index(fields=["project", "-at"], name="audit_project_at"),
            # every project's, newest first (staff's page, the admin's changelist)
            models.Index(fields=["-at"], name="audit_at"),
        ]

    def __str__(self):
        return gettext("audit entry %(id)s") % {"id": self.pk}


# ---------------------------------------------------------------------------------------------
# Notification channels and their deliveries (streams/notify/; docs/alerts.md)

MAX_CHANNEL_NAME_CHARS = 100
# What a delivery keeps of the receiver's answer (the first bytes, redacted): enough to read
# an error, never a receiver's whole page.
MAX_ANSWER_CHARS = 500


class Channel(models.Model):
    """Where a project's notifications go: an e-mail address list, a signed JSON webhook, a
    Slack incoming webhook or any service `apprise` knows. The target (an address, a URL that
    is itself a credential) is sealed at rest (streams/store/sealed.py) and known to the
    egress gate; pages show `target_masked` only. A webhook's signing secret likewise."""

    class Kind(models.TextChoices):
        EMAIL = "email", _("E-mail")
        WEBHOOK = "webhook", _("Signed JSON webhook")
        SLACK = "slack", _("Slack")
        APPRISE = "apprise", _("Other service (Apprise URL)")

    project = _project_field(
        related_name="notify_channels", null=False, blank=False, db_index=False
    )
    name = fields.CharField(_("name"), max_length=MAX_CHANNEL_NAME_CHARS)
    kind = fields.CharField(_("kind"), max_length=10, choices=Kind.choices)
    target_sealed = fields.TextField(_("sealed target"))
    target_masked = fields.CharField(_("target"), max_length=200)
    # a webhook's HMAC key (sealed; shown once, when the channel is made); "" for other kinds
    signing_sealed = fields.TextField(_("sealed signing secret"), blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("notification channel")
        verbose_name_plural = _("notification channels")
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="channel_project_name"),
        ]

    def __str__(self):
        return self.name


class Delivery(models.Model):
    """One notification (`key`: what fired, e.g. a rule's firing) to one channel. Unique per
    (channel, key): the same notification is never delivered twice to a channel, whichever
    processes ask. `message`: what is said (streams/notify/message.py), redacted when stored.
    Sent by the delivery job (streams/notify/deliver.py), which claims due rows by pushing
    `next_at` forward with a conditional UPDATE."""

    class State(models.TextChoices):
        PENDING = "pending", _("to be sent")
        SENT = "sent", _("sent")
        # the last attempt failed; another is due at `next_at`
        FAILED = "failed", _("failed, will retry")
        GIVEN_UP = "given_up", _("given up")

    project = _project_field(related_name="notify_deliveries", null=False, blank=False)
    channel = models.ForeignKey(
        Channel,
        on_delete=models.CASCADE,
        related_name="deliveries",
        verbose_name=_("channel"),
        db_index=False,
    )
    key = fields.CharField(_("notification key"), max_length=200)
    subject = fields.CharField(_("subject"), max_length=200)
    message = fields.JSONField(_("message"), default=dict)
    state = fields.CharField(
        _("state"), max_length=10, choices=State.choices, default=State.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    # when it is next due (a claim pushes it past the attempt's time limit; None once done)
    next_at = models.DateTimeField(_("next attempt at"), null=True, blank=True)
    # the receiver's last answer: its HTTP (or SMTP) status, 0 if none came, and its first
    # bytes or the error, redacted
    last_status = models.IntegerField(_("last status"), null=True, blank=True)
    last_answer = fields.CharField(_("last answer"), max_length=MAX_ANSWER_CHARS, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)

    class Meta:
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(fields=["channel", "key"], name="delivery_channel_key"),
        ]
        indexes = [
            # the delivery job's look for due rows: few are due, most are done (next_at NULL)
            models.Index(fields=["next_at"], name="delivery_next_at"),
            # a channel's delivery log, newest first
            models.Index(fields=["channel", "-created_at"], name="delivery_channel_created"),
        ]

    def __str__(self):
        return gettext("delivery %(id)s to %(channel)s") % {
            "id": self.pk,
            "channel": self.channel_id,
        }


# ---------------------------------------------------------------------------------------------
# Alert rules (streams/alerts/ evaluates them; docs/alerts.md, "Rules")

MAX_RULE_NAME_CHARS = 100
ALERT_MIN_WINDOW_S = 300  # 5 minutes
ALERT_MAX_WINDOW_S = 7 * 86400


class Rule(models.Model):
    """A condition over one figure of a project's streams in a sliding window (`window_s`,
    ending at each evaluation), narrowed to a scope: fires when it holds for `for_s`, notifies
    its channels, again every `renotify_s` while firing, and once when it recovers."""

    class Figure(models.TextChoices):
        TTFT_P50 = "ttft_p50", _("TTFT p50 (ms)")
        TTFT_P95 = "ttft_p95", _("TTFT p95 (ms)")
        TTFT_P99 = "ttft_p99", _("TTFT p99 (ms)")
        DURATION_P50 = "duration_p50", _("Duration p50 (ms)")
        DURATION_P95 = "duration_p95", _("Duration p95 (ms)")
        ERROR_RATE = "error_rate", _("Failed streams (% of streams)")
        INTERRUPTED_RATE = "interrupted_rate", _("Interrupted streams (% of streams)")
        STALLED_RATE = "stalled_rate", _("Stalled streams (% of streams)")
        FINDINGS_SHARE = "findings_share", _("Streams with findings of the severity (%)")
        STREAMS_COUNT = "streams_count", _("Streams in the window")
        COST = "cost", _("Cost in the window (project currency)")
        POSITIVE_SCORE_SHARE = "positive_score_share", _("Positive scores (% of scores)")
        PROXY_ADDED_MS = "proxy_added_ms", _("Proxy's added latency, p99 of streams' p99 (ms)")

    class Comparison(models.TextChoices):
        GT = ">", _("above")
        LT = "<", _("below")
        GE = ">=", _("at or above")
        LE = "<=", _("at or below")
        CHANGED = "changed", _("changed by more than (%)")

    class Baseline(models.TextChoices):
        DAY = "day", _("the same window a day earlier")
        WEEK = "week", _("the same window a week earlier")

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="alert_rules", verbose_name=_("project")
    )
    name = fields.CharField(_("name"), max_length=MAX_RULE_NAME_CHARS)
    figure = fields.CharField(_("figure"), max_length=24, choices=Figure.choices)
    # findings_share: the severity counted; positive_score_share: the score type
    severity = fields.CharField(_("severity"), max_length=12, blank=True)
    score_type = models.ForeignKey(
        "ScoreType",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("score type"),
    )
    window_s = models.PositiveIntegerField(_("window (s)"), default=900)
    # the scope: "" (None) is every value
    requested_model = fields.CharField(_("model asked for"), max_length=200, blank=True)
    resolved_model = fields.CharField(_("model that answered"), max_length=200, blank=True)
    username = fields.CharField(_("user"), max_length=150, blank=True)
    token = models.ForeignKey(
        "ApiToken",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("token"),
    )
    source = fields.CharField(_("source"), max_length=20, blank=True)
    tag = fields.CharField(_("tag"), max_length=MAX_TAG_CHARS, blank=True)
    session = fields.CharField(_("session"), max_length=200, blank=True)
    comparison = fields.CharField(
        _("comparison"), max_length=8, choices=Comparison.choices, default=Comparison.GT
    )
    threshold = models.FloatField(_("threshold"))
    baseline = fields.CharField(
        _("compared with"), max_length=8, choices=Baseline.choices, blank=True
    )
    min_streams = models.PositiveIntegerField(_("minimum streams"), default=1)
    for_s = models.PositiveIntegerField(_("holds for (s)"), default=0)
    renotify_s = models.PositiveIntegerField(_("notify again every (s)"), default=0)  # 0: never
    notify_recovery = models.BooleanField(_("recovery notices"), default=True)
    # where its notices go (the project's channels)
    channels = models.ManyToManyField(
        Channel, blank=True, related_name="rules", verbose_name=_("channels")
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("alert rule")
        verbose_name_plural = _("alert rules")
        ordering = ["name", "pk"]

    def __str__(self):
        return self.name


class RuleState(models.Model):
    """Where a rule stands, and the claim that makes one process evaluate it per tick: a
    process takes the rule by moving `due_at` on with a conditional UPDATE (`due_at <= now`),
    so two servers and a worker never evaluate one rule at one tick twice."""

    class State(models.TextChoices):
        OK = "ok", _("OK")
        PENDING = "pending", _("Pending")
        FIRING = "firing", _("Firing")

    rule = models.OneToOneField(
        Rule, on_delete=models.CASCADE, primary_key=True, related_name="state"
    )
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="+", verbose_name=_("project")
    )
    state = fields.CharField(_("state"), max_length=8, choices=State.choices, default=State.OK)
    since = models.DateTimeField(_("since"), null=True, blank=True)
    value = models.FloatField(_("last value"), null=True, blank=True)
    streams = models.PositiveIntegerField(_("streams in the window"), default=0)
    evaluated_at = models.DateTimeField(_("last evaluated"), null=True, blank=True)
    # the last values read ([[epoch s, value or None]], RECENT of them): a notification's series
    recent = fields.JSONField(_("recent values"), default=list, blank=True)
    due_at = models.DateTimeField(_("due at"), null=True, blank=True)
    claimed_by = fields.CharField(_("claimed by"), max_length=100, blank=True)

    class Meta:
        verbose_name = _("alert rule state")
        verbose_name_plural = _("alert rule states")
        indexes = [
            # each tick's claim: the due states, oldest first
            models.Index(fields=["due_at"], name="alert_state_due"),
        ]

    def __str__(self):
        return f"{self.rule_id}: {self.get_state_display()}"


class Firing(models.Model):
    """One time a rule fired: from `started_at` until it recovered (`ended_at`), the values it
    read meanwhile ([[epoch s, value]], the last ones kept) and how often it notified."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="firings", db_index=False)
    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("project"),
        db_index=False,
    )
    started_at = models.DateTimeField(_("started at"))
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    values = fields.JSONField(_("values"), default=list, blank=True)
    peak = models.FloatField(_("worst value"), null=True, blank=True)
    notified = models.PositiveIntegerField(_("notifications"), default=0)
    notified_at = models.DateTimeField(_("last notified"), null=True, blank=True)
    silenced = models.BooleanField(_("silenced"), default=False)

    class Meta:
        verbose_name = _("firing")
        verbose_name_plural = _("firings")
        indexes = [
            # a rule's history, newest first (the history page, the API)
            models.Index(fields=["rule", "-started_at"], name="firing_rule_started"),
            # a project's history, newest first
            models.Index(fields=["project", "-started_at"], name="firing_project_started"),
        ]

    def __str__(self):
        return gettext("firing %(id)s") % {"id": self.pk}


class Silence(models.Model):
    """Mutes notifications until `until_at`: of one rule, or of every rule of the project whose
    scope has each of `scope`'s values ({field: value}, the rule's scope fields)."""

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="silences", verbose_name=_("project")
    )
    rule = models.ForeignKey(
        Rule,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="silences",
        verbose_name=_("rule"),
    )
    scope = fields.JSONField(_("scope"), default=dict, blank=True)
    until_at = models.DateTimeField(_("until"))
    reason = fields.CharField(_("reason"), max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("silence")
        verbose_name_plural = _("silences")
        ordering = ["-until_at"]

    def __str__(self):
        return gettext("silence %(id)s") % {"id": self.pk}


# ---------------------------------------------------------------------------------------------
# Evaluators and online rules (streams/evaluate/; docs/experiments.md, "Evaluators")

MAX_EVALUATOR_NAME_CHARS = 50
MAX_EVALUATION_REASON_CHARS = 500


class Evaluator(models.Model):
    """A way to score a stream automatically: a deterministic check of its (redacted) output or
    timing, or a judge model asked with a prompt. Each edit makes a new `version`, because a
    score's key is the evaluator and its version (`<name>@v<version>`): scores written before an
    edit stay under the key of what wrote them. Its scores are of `score_type`, which it keeps
    in step with its config (streams/evaluate/kinds.py)."""

    class Kind(models.TextChoices):
        EXACT = "exact", _("Exact match")
        CONTAINS = "contains", _("Contains")
        REGEX = "regex", _("Regular expression")
        JSON_VALID = "json_valid", _("Valid JSON")
        JSON_SCHEMA = "json_schema", _("JSON Schema")
        LENGTH = "length", _("Length within bounds")
        REFUSAL = "refusal", _("Not a refusal")
        TTFT = "ttft", _("Time to first token under a bound")
        DURATION = "duration", _("Duration under a bound")
        JUDGE = "judge", _("LLM as judge")

    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="evaluators",
        verbose_name=_("project"),
        db_index=False,
    )
    name = fields.SlugField(_("name"), max_length=MAX_EVALUATOR_NAME_CHARS)
    kind = fields.CharField(_("kind"), max_length=12, choices=Kind.choices)
    config = fields.JSONField(_("configuration"), default=dict, blank=True)
    version = models.PositiveIntegerField(_("version"), default=1)
    score_type = models.ForeignKey(
        ScoreType,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="evaluators",
        verbose_name=_("score type"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = WatchedQuerySet.as_manager()  # (its updates are audited too)

    class Meta:
        verbose_name = _("evaluator")
        verbose_name_plural = _("evaluators")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="evaluator_project_name")
        ]

    def __str__(self):
        return self.key

    @property
    def key(self):
        """The key of the scores this version writes."""
        return f"{self.name}@v{self.version}"


class OnlineRule(models.Model):
    """Evaluators applied in the background to a sample of a project's newly finished streams
    (streams/evaluate/online.py), within a budget: at most `per_hour` judgements an hour and
    judge calls costing at most `spend_cap_nanos` in all. `cursor`: the last stream id it has
    passed (each stream is looked at once, across processes: the cursor moves by a
    conditional UPDATE); `stopped_reason`: why it stopped by itself, shown on its page."""

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="online_rules", verbose_name=_("project")
    )
    name = fields.CharField(_("name"), max_length=100)
    evaluators = models.ManyToManyField(
        Evaluator, related_name="online_rules", verbose_name=_("evaluators")
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    sample_rate = models.FloatField(_("sample rate"), default=1.0)
    # the filter: empty matches every stream
    model = fields.CharField(_("model"), max_length=100, blank=True)
    tag = fields.CharField(_("tag"), max_length=MAX_TAG_CHARS, blank=True)
    source = fields.CharField(_("source"), max_length=10, choices=Stream.Source.choices, blank=True)
    token = models.ForeignKey(
        "ApiToken",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("token"),
    )
    per_hour = models.PositiveIntegerField(_("judgements per hour"), default=100)
    spend_cap_nanos = models.BigIntegerField(_("spend cap (nano-units)"), null=True, blank=True)
    cursor = models.BigIntegerField(_("last stream passed"), default=0)
    judged = models.PositiveIntegerField(_("streams judged"), default=0)
    over_budget = models.PositiveIntegerField(_("streams passed over the budget"), default=0)
    over_budget_at = models.DateTimeField(_("last over the budget at"), null=True, blank=True)
    spent_nanos = models.BigIntegerField(_("spent (nano-units)"), default=0)
    stopped_reason = fields.CharField(_("stopped because"), max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = WatchedQuerySet.as_manager()

    class Meta:
        verbose_name = _("online rule")
        verbose_name_plural = _("online rules")
        ordering = ["name"]

    def __str__(self):
        return self.name


class Evaluation(models.Model):
    """One application of one evaluator version to one stream: the score it wrote, or why it
    wrote none; for a judge, the judge's own recorded stream (linked to the one it judged)."""

    class Outcome(models.TextChoices):
        SCORED = "scored", _("Scored")
        NO_SCORE = "no_score", _("No score")

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="+", verbose_name=_("project")
    )
    evaluator = models.ForeignKey(
        Evaluator,
        on_delete=models.CASCADE,
        related_name="evaluations",
        verbose_name=_("evaluator"),
        db_index=False,
    )
    version = models.PositiveIntegerField(_("version"))
    stream = models.ForeignKey(
        Stream, on_delete=models.CASCADE, related_name="evaluations", verbose_name=_("stream")
    )
    rule = models.ForeignKey(
        OnlineRule,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="evaluations",
        verbose_name=_("online rule"),
        db_index=False,
    )
    outcome = fields.CharField(_("outcome"), max_length=10, choices=Outcome.choices)
    score = models.ForeignKey(
        Score, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    value = models.FloatField(_("value"), null=True, blank=True)
    label = fields.CharField(_("label"), max_length=50, blank=True)
    reason = fields.CharField(_("reason"), max_length=MAX_EVALUATION_REASON_CHARS, blank=True)
    judge_stream = models.ForeignKey(
        Stream,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="judged",
        verbose_name=_("judge's stream"),
    )
    cost_nanos = models.BigIntegerField(_("cost (nano-units)"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("evaluation")
        verbose_name_plural = _("evaluations")
        indexes = [
            # an evaluator's page, newest first
            models.Index(fields=["evaluator", "-created_at"], name="evaluation_evaluator_at"),
            # a rule's judgements in the last hour (its budget) and its page
            models.Index(fields=["rule", "-created_at"], name="evaluation_rule_at"),
        ]

    def __str__(self):
        return gettext("%(evaluator)s@v%(version)s on stream %(id)s") % {
            "evaluator": self.evaluator.name,
            "version": self.version,
            "id": self.stream_id,
        }


# ---------------------------------------------------------------------------------------------
# Datasets and experiments (streams/experiments/; docs/experiments.md): a dataset's items are
# replayed, each against each variant of an experiment, as recorded streams.

MAX_DATASET_NAME_CHARS = 100
MAX_DESCRIPTION_CHARS = 2000
MAX_EXPECTED_CHARS = 100_000


class Dataset(models.Model):
    """A named set of prompts of a project, in versions: an edit after an experiment used the
    latest version makes a new one, so a finished result never changes under its reader."""

    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="datasets",
        verbose_name=_("project"),
        db_index=False,
    )
    name = fields.CharField(_("name"), max_length=MAX_DATASET_NAME_CHARS)
    description = fields.TextField(_("description"), max_length=MAX_DESCRIPTION_CHARS, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("dataset")
        verbose_name_plural = _("datasets")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="dataset_project_name")
        ]

    def __str__(self):
        return self.name


class DatasetVersion(models.Model):
    """One state of a dataset's items. `frozen` once an experiment refers to it: from then on
    its items are never changed (streams/experiments/datasets.py makes a new version)."""

    dataset = models.ForeignKey(
        Dataset,
        on_delete=models.CASCADE,
        related_name="versions",
        verbose_name=_("dataset"),
        db_index=False,
    )
    number = models.PositiveIntegerField(_("number"))
    frozen = models.BooleanField(_("frozen"), default=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("dataset version")
        verbose_name_plural = _("dataset versions")
        ordering = ["dataset", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_number")
        ]

    def __str__(self):
        return gettext("%(dataset)s v%(number)s") % {"dataset": self.dataset, "number": self.number}


class DatasetItem(models.Model):
    """One prompt: `input` as the Responses API takes it (a string, or a list of input items),
    with its instructions and tools; what the answer should be, if known."""

    version = models.ForeignKey(
        DatasetVersion,
        on_delete=models.CASCADE,
        related_name="items",
        verbose_name=_("version"),
        db_index=False,
    )
    position = models.PositiveIntegerField(_("position"))
    input = fields.JSONField(_("input"), default=str)
    instructions = fields.TextField(_("instructions"), blank=True)
    tools = fields.JSONField(_("tools"), default=list, blank=True)
    expected_output = fields.TextField(
        _("expected output"), max_length=MAX_EXPECTED_CHARS, blank=True
    )
    metadata = fields.JSONField(_("metadata"), default=dict, blank=True)
    source_stream = models.ForeignKey(
        Stream,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("source stream"),
    )

    class Meta:
        verbose_name = _("dataset item")
        verbose_name_plural = _("dataset items")
        ordering = ["version", "position"]
        constraints = [
            models.UniqueConstraint(fields=["version", "position"], name="dataset_item_position")
        ]

    def __str__(self):
        return gettext("item %(position)s") % {"position": self.position}


class Experiment(models.Model):
    """A dataset version replayed against one or more variants, at most `concurrency` streams
    at a time; each replay is a `Run`."""

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="experiments", verbose_name=_("project")
    )
    name = fields.CharField(_("name"), max_length=MAX_DATASET_NAME_CHARS)
    dataset_version = models.ForeignKey(
        DatasetVersion,
        on_delete=models.PROTECT,
        related_name="experiments",
        verbose_name=_("dataset version"),
    )
    concurrency = models.PositiveSmallIntegerField(_("concurrency"), default=5)
    # applied to each item's stream once it ended (streams/evaluate/)
    evaluators = models.ManyToManyField(
        "Evaluator", blank=True, related_name="experiments", verbose_name=_("evaluators")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("experiment")
        verbose_name_plural = _("experiments")
        ordering = ["-created_at"]

    def __str__(self):
        return self.name


class Variant(models.Model):
    """What an item is sent with: the model and the request's settings."""

    experiment = models.ForeignKey(
        Experiment,
        on_delete=models.CASCADE,
        related_name="variants",
        verbose_name=_("experiment"),
        db_index=False,
    )
    position = models.PositiveSmallIntegerField(_("position"))
    name = fields.CharField(_("name"), max_length=MAX_DATASET_NAME_CHARS)
    model = fields.CharField(_("model"), max_length=100)
    # blank: each item's own
    instructions = fields.TextField(_("instructions"), blank=True)
    temperature = models.FloatField(_("temperature"), null=True, blank=True)
    reasoning_effort = fields.CharField(_("reasoning effort"), max_length=10, blank=True)
    max_output_tokens = models.PositiveIntegerField(_("max output tokens"), null=True, blank=True)
    # none: each item's own
    tools = fields.JSONField(_("tools"), null=True, blank=True)

    class Meta:
        verbose_name = _("variant")
        verbose_name_plural = _("variants")
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "position"], name="variant_position")
        ]

    def __str__(self):
        return self.name


class Run(models.Model):
    """One replay of an experiment: every item × variant once (`RunItem`). Driven by one
    process at a time (`driver`, refreshed at `driven_at`); cancelled and resumed without
    recording a finished item again."""

    class State(models.TextChoices):
        RUNNING = "running", _("Running")
        CANCELLED = "cancelled", _("Cancelled")
        STOPPED = "stopped", _("Stopped")  # its driving process went away: resume it
        FINISHED = "finished", _("Finished")

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="runs", verbose_name=_("project")
    )
    experiment = models.ForeignKey(
        Experiment,
        on_delete=models.CASCADE,
        related_name="runs",
        verbose_name=_("experiment"),
        db_index=False,
    )
    number = models.PositiveIntegerField(_("number"))
    state = fields.CharField(
        _("state"), max_length=10, choices=State.choices, default=State.RUNNING
    )
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("started by"),
    )
    driver = fields.CharField(_("driven by"), max_length=120, blank=True)
    driven_at = models.DateTimeField(_("driven at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    # Its per-variant figures, stored when it finished (results.store_figures): a finished
    # run's items never change, and its page read them from 30,000 joined rows each time.
    figures = fields.JSONField(_("figures"), null=True, blank=True)

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["experiment", "-number"]
        constraints = [models.UniqueConstraint(fields=["experiment", "number"], name="run_number")]

    def __str__(self):
        return gettext("%(experiment)s, run %(number)s") % {
            "experiment": self.experiment,
            "number": self.number,
        }


class RunItem(models.Model):
    """One item sent with one variant in one run: its recorded stream (the last attempt, once
    it ended), none while it waits."""

    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="items",
        verbose_name=_("run"),
        db_index=False,
    )
    item = models.ForeignKey(
        DatasetItem, on_delete=models.CASCADE, related_name="+", verbose_name=_("item")
    )
    variant = models.ForeignKey(
        Variant, on_delete=models.CASCADE, related_name="+", verbose_name=_("variant")
    )
    stream = models.OneToOneField(
        Stream,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="run_item",
        verbose_name=_("stream"),
    )
    done = models.BooleanField(_("done"), default=False)
    # its experiment's evaluators were applied (or are being applied) to its stream
    evaluated = models.BooleanField(_("evaluated"), default=False)

    class Meta:
        verbose_name = _("run item")
        verbose_name_plural = _("run items")
        constraints = [
            models.UniqueConstraint(fields=["run", "item", "variant"], name="run_item_once")
        ]
        indexes = [
            # the driver's "what waits, what is in flight" per run
            models.Index(fields=["run", "done", "stream"], name="run_item_progress"),
        ]

    def __str__(self):
        return gettext("%(item)s with %(variant)s") % {"item": self.item, "variant": self.variant}
