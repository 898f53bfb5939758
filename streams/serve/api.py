"""A small JSON API for scripts and tests; the same access rules as the pages.

Authenticate with the session (browsers; unsafe methods need the CSRF token in
``X-CSRFToken``) or ``Authorization: Bearer ss_…`` (``python manage.py create_token USER``).
A stream someone may not see answers 404, as if it did not exist.

=======  ==================================  ==================================================
method   path                                what
=======  ==================================  ==================================================
POST     /api/streams/                       start a stream: ``{"input", "model"?, "format"?,
                                             "scenario"?, "instructions"?, "temperature"?,
                                             "max_output_tokens"?, "metadata"?}`` → 201
                                             ``{"id", "status", "url", "ws"}``; 400 on invalid
                                             input, 429 over MAX_CONCURRENT_PER_USER; format
                                             responses (default), chat or messages: the request
                                             in that API's shape, to its upstream (``input``:
                                             a string, or the format's own items/messages)
GET      /api/streams/?limit=&before=        the project's streams, newest first (the project:
         &project=<slug>                     ``project`` if given, else the current one)
         &status=&format=                    only those (format: responses, chat, messages)
GET      /api/streams/<id>/                  ``stream_summary``: status, milestones, metrics,
                                             text, findings
GET      /api/streams/<id>/events/           ``?after=-1&limit=1000`` → ``{"events": [{"index",
                                             "type", "sequence_number", "t_us", "data"}],
                                             "next_after", "has_more", "status"}``
POST     /api/streams/<id>/cancel/           202 if it was running here and is now being
                                             cancelled; 409 if it already ended (or runs in
                                             another process)
POST     /api/scores/                        score a stream: ``{"stream": id`` or
                                             ``"response_id": "resp_…", "name", "value"?,
                                             "label"?, "comment"?, "key"?}`` → 201 the score
                                             (the same author, type and key again: 200, the
                                             score replaced); 400 invalid, 404 no such stream
GET      /api/scores/?stream=<id>            a stream's scores and comments
POST     /api/comments/                      ``{"stream"`` or ``"response_id", "text"}`` → 201
GET      /api/score-types/                   the types a score may have, with their ranges
GET      /api/alerts/rules/                  the project's alert rules with their state; POST
                                             one (the rule form's fields) → 201
GET      /api/alerts/rules/<id>/             a rule; POST changes it, DELETE deletes it (204)
GET      /api/alerts/silences/               the active silences; POST ``{"rule"`` or
                                             ``"scope": {field: value}, "hours", "reason"?}``
GET      /api/alerts/history/?rule=<id>      firings, newest first (docs/alerts.md)
GET      /api/channels/                      the project's notification channels (``{"id",
                                             "name"}`` only, unless one manages them)
POST     /api/channels/                      ``{"name", "kind", "target"}`` → 201 the channel
                                             (a webhook's: with ``signing_secret``, this once);
                                             400 a target refused (not http(s), private)
GET      /api/channels/<id>/                 a channel (its target masked); admins
POST     /api/channels/<id>/                 change ``{"name"?, "target"?, "enabled"?}``
POST     /api/channels/<id>/delete/          ``{"confirm": true}``: delete it and its log
POST     /api/channels/<id>/test/            202: a test notification queued (its delivery)
GET      /api/channels/<id>/deliveries/      its newest deliveries: state, attempts, answer
=======  ==================================  ==================================================

Errors are ``{"error": {"code", "message", "fields"?}}`` with a 4xx status. ``ws`` is the
path of the stream's WebSocket (``/ws/streams/<id>/``; add ``?format=json`` for JSON frames).
"""

import asyncio
import functools
import json
import math

from asgiref.sync import sync_to_async
from django import forms
from django.http import HttpResponse
from django.utils.translation import gettext

from streams.access import limits, projects
from streams.access.projects import Action
from streams.access.rules import streams_for
from streams.access.throttle import search_allowed
from streams.alerts import notices as alert_notices
from streams.alerts import rules as alert_rules
from streams.core import conf
from streams.models import MAX_CHANNEL_NAME_CHARS, Channel, Project, Stream
from streams.notify import channels as channel_rows
from streams.notify import deliver, targets
from streams.run import services
from streams.serve.http import api_view, json_body, json_error, limit_error, method_not_allowed
from streams.shapes import event_message, public
from streams.simulator import scenarios_of
from streams.simulator.scenarios import RequestError, check_metadata
from streams.store import events as stored_events
from streams.store import rows, scores, search

METADATA_MAX_KEYS = 16  # the OpenAI API's limits on `metadata`
METADATA_MAX_KEY = 64
METADATA_MAX_VALUE = 512
# Integers in metadata: what a 64-bit column and JavaScript's numbers both hold exactly.
METADATA_MAX_INT = 2**53


def max_input_chars():
    return conf.get().max_input_chars


def max_body_bytes():
    """The largest request body that could be valid: `input` and `instructions` of up to
    MAX_INPUT_CHARS characters each, at most 6 bytes a character as JSON writes them
    (`\u00e9`), plus room for the small fields."""
    return 12 * max_input_chars() + 64 * 1024


def respond(data, status=200):
    """Every API answer is JSON by `public.dumps` (the egress gate redacts it as it leaves)."""
    return HttpResponse(public.dumps(data), status=status, content_type="application/json")


def stream_summary(stream):
    """The stream as the `.json` export has it (without events), plus its live feed's path
    (sync: reads its findings)."""
    return {**public.stream(stream), "ws": ws_path(stream.pk)}


def ws_path(stream_id):
    return f"/ws/streams/{stream_id}/"


# ---------------------------------------------------------------------------------------------
# Input


class InputField(forms.Field):
    """A Responses API `input`: a string, or a list of input items (objects)."""

    def clean(self, value):
        limit = max_input_chars()
        if value is None:
            raise forms.ValidationError(gettext("This field is required."))
        if isinstance(value, str):
            if not value.strip():
                raise forms.ValidationError(gettext("The input is empty."))
            if len(value) > limit:
                raise forms.ValidationError(
                    gettext("The input is %(n)s characters; at most %(limit)s.")
                    % {"n": len(value), "limit": limit}
                )
            return value
        if isinstance(value, list) and value and all(isinstance(i, dict) for i in value):
            for n, item in enumerate(value):
                _check_content(item.get("content"), f"input[{n}].content")
            size = len(json.dumps(value))
            if size > limit:
                raise forms.ValidationError(
                    gettext("The input is %(n)s characters of JSON; at most %(limit)s.")
                    % {"n": size, "limit": limit}
                )
            return value
        raise forms.ValidationError(
            gettext("A string, or a non-empty list of input items (objects).")
        )


def _check_content(content, where):
    """An input item's `content`: a string, or a list of parts (objects) whose `text`, if any,
    is a string (the prompt is read from it; an upstream would refuse anything else)."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise forms.ValidationError(f"{where} is a string or a list of parts (objects).")
    for n, part in enumerate(content):
        if not isinstance(part, dict):
            raise forms.ValidationError(f"{where}[{n}] is not an object.")
        if "text" in part and not isinstance(part["text"], str):
            raise forms.ValidationError(f"{where}[{n}].text is not a string.")


class TextField(forms.CharField):
    """A string, or nothing: Django's CharField would store `["a"]` as the text "['a']"."""

    def to_python(self, value):
        if value not in self.empty_values and not isinstance(value, str):
            raise forms.ValidationError(f"A string, not {type(value).__name__}.")
        return super().to_python(value)


class CreateStreamForm(forms.Form):
    input = InputField()
    model = TextField(required=False, max_length=100)
    # the API the request speaks, each at its own upstream (runner.upstream); before `scenario`,
    # whose names are the format's
    format = forms.ChoiceField(required=False, choices=Stream.Format.choices)
    scenario = TextField(required=False, max_length=50)
    instructions = TextField(required=False, strip=False)
    temperature = forms.FloatField(required=False, min_value=0, max_value=2)
    max_output_tokens = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)

    def __init__(self, data=None, **kwargs):
        super().__init__(data, **kwargs)
        self.raw = data if data is not None else {}

    def clean_model(self):
        model = self.cleaned_data["model"] or "auto"
        if any(c.isspace() for c in model):
            raise forms.ValidationError(gettext("A model id has no whitespace."))
        return model

    def clean_format(self):
        return self.cleaned_data["format"] or Stream.Format.RESPONSES

    def clean_scenario(self):
        scenario = self.cleaned_data["scenario"]
        # Scenarios are the simulator's, each format's own; a real upstream ignores
        # `metadata.scenario`, so a name the simulator does not know is a typo either way.
        known = scenarios_of(self.cleaned_data.get("format"))
        if scenario and scenario not in known:
            raise forms.ValidationError(
                gettext("Unknown scenario %(name)s; one of: %(names)s.")
                % {"name": repr(scenario), "names": ", ".join(sorted(known))}
            )
        return scenario

    def clean_instructions(self):
        text = self.cleaned_data["instructions"]
        if len(text) > max_input_chars():
            raise forms.ValidationError(
                gettext("At most %(limit)s characters.") % {"limit": max_input_chars()}
            )
        return text

    def clean(self):
        data = super().clean()
        metadata = self.raw.get("metadata") or {}
        if not isinstance(metadata, dict):
            self.add_error(None, "metadata must be an object.")
        elif len(metadata) > METADATA_MAX_KEYS:
            self.add_error(None, f"metadata has at most {METADATA_MAX_KEYS} keys.")
        else:
            for k, v in metadata.items():
                ok_value = (
                    isinstance(v, bool)
                    or (isinstance(v, int) and abs(v) <= METADATA_MAX_INT)
                    or (isinstance(v, float) and math.isfinite(v))
                    or (isinstance(v, str) and len(v) <= METADATA_MAX_VALUE)
                )
                if len(k) > METADATA_MAX_KEY or not ok_value:
                    self.add_error(
                        None,
                        f"metadata[{k[:64]!r}]: keys up to {METADATA_MAX_KEY} characters, "
                        f"values finite numbers or strings up to {METADATA_MAX_VALUE}.",
                    )
                    break
            else:
                # The simulator's parameters (events, huge_bytes, stall_s, …) within their caps:
                # refused here with the simulator's own message rather than as a failed stream
                # (and a real upstream takes metadata as opaque labels, so nothing is lost).
                try:
                    check_metadata(metadata)
                except RequestError as exc:
                    self.add_error(None, exc.message + ".")
        data["metadata"] = metadata if isinstance(metadata, dict) else {}
        return data

    def request_body(self, input=None):
        """The request for the cleaned data; `input` replaces the validated one (the playground
        sends the conversation so far, having validated only the new message)."""
        d = self.cleaned_data
        return rows.build_request_body(
            d["input"] if input is None else input,
            d["model"],
            format=d["format"],
            instructions=d["instructions"],
            scenario=d["scenario"],
            temperature=d["temperature"],
            max_output_tokens=d["max_output_tokens"],
            metadata=d["metadata"],
        )


class EventsPageForm(forms.Form):
    after = forms.IntegerField(required=False, min_value=-1)
    limit = forms.IntegerField(required=False, min_value=1, max_value=10_000)


class ListForm(forms.Form):
    limit = forms.IntegerField(required=False, min_value=1, max_value=500)
    before = forms.IntegerField(required=False, min_value=1)
    status = forms.ChoiceField(required=False, choices=Stream.Status.choices)
    format = forms.ChoiceField(required=False, choices=Stream.Format.choices)
    # words, "phrases" and prefixes* (streams/store/search.py): the best matches first
    q = forms.CharField(required=False, max_length=200, strip=True)
    page = forms.IntegerField(required=False, min_value=1, max_value=search.MAX_PAGES)


def _invalid(form):
    fields = {
        name: [e["message"] for e in errors] for name, errors in form.errors.get_json_data().items()
    }
    first = next(iter(fields.items()))
    where = "" if first[0] == "__all__" else f"{first[0]}: "
    return json_error(400, "invalid", f"{where}{first[1][0]}", fields=fields)


def parse_json(request):
    return json_body(request, max_body_bytes())


# ---------------------------------------------------------------------------------------------
# Domain calls (sync, one transaction each)


class NotAllowed(Exception):
    """The user sees the stream, but their role in its project does not allow this (a 403)."""


def project_id(request):
    """The id of the project an API request works in: `?project=<slug>` if given (LookupError
    when the user is not a member: a 404), else a browser's current project (the page's),
    else the user's home project; None for staff working in every project at once. A token's
    request works in the token's project (another project's slug: a 404)."""
    slug = request.GET.get("project", "")
    token = getattr(request, "token", None)
    if token is not None:  # a token works in its own project, and only there
        if slug and slug != request.bearer.project.slug:
            raise LookupError(slug)
        return token.project_id
    if slug:
        project, _ = projects.current(request.user, slug)
        return project.pk
    # the pages' middleware resolves it (dashboard/project.py); None: every project
    return getattr(getattr(request, "project", None), "pk", None)


def writing_project_id(request):
    """Where what an API request makes goes: its project, or staff's home project."""
    pk = project_id(request)
    return pk if pk is not None else projects.home(request.user).pk


def _require(user, action, project_id):
    if not projects.may(user, action, project_id):
        raise NotAllowed(action)


def _visible(user, stream_id):
    return streams_for(user).filter(pk=stream_id).first()


def _summary(user, stream_id):
    stream = _visible(user, stream_id)
    return None if stream is None else stream_summary(stream)


def _events_page(user, stream_id, after, limit):
    stream = streams_for(user).filter(pk=stream_id).values("status").first()
    if stream is None:
        return None
    rows = stored_events.read(
        stream_id, event_message.PROXIED_MESSAGE_COLUMNS, after=after, limit=limit + 1
    )
    has_more = len(rows) > limit
    rows = rows[:limit]
    return {
        "stream": stream_id,
        "status": stream["status"],
        "events": [event_message.event(*row) for row in rows],
        "next_after": rows[-1][event_message.INDEX] if rows else after,
        "has_more": has_more,
    }


def _search(user, project, q, page, narrow):
    """A page of the streams `user` may see in `project` matching `q`, best first, each with
    its `rank` and `snippet` (redacted plain text); `narrow`: the status and format asked for."""
    qs = streams_for(user, project).filter(**narrow)
    terms = search.parse(q)
    hits, more = search.page(qs, terms, page) if terms else ([], False)
    rows = {r["id"]: r for r in qs.filter(pk__in=[h.pk for h in hits]).values(*public.LIST_COLUMNS)}
    return {
        "streams": [
            {**public.list_item(rows[h.pk]), "rank": h.rank, "snippet": h.text}
            for h in hits
            if h.pk in rows
        ],
        "next_page": page + 1 if more else None,
    }


def _list(user, project, limit, before, narrow):
    qs = streams_for(user, project).filter(**narrow).order_by("-pk")
    if before:
        qs = qs.filter(pk__lt=before)
    rows = list(qs.values(*public.LIST_COLUMNS)[:limit])
    return {
        "streams": [public.list_item(row) for row in rows],
        "next_before": rows[-1]["id"] if len(rows) == limit else None,
    }


def _target(user, data, action):
    """(the stream `data` names by `stream` or `response_id`, visible to `user`, None) or
    (None, the error response: 404 for a stream they may not see, 403 when their role in its
    project does not allow `action`)."""
    stream_id, response_id = data.get("stream"), data.get("response_id")
    qs = streams_for(user)
    if isinstance(stream_id, int) and not isinstance(stream_id, bool) and response_id is None:
        found, named = qs.filter(pk=stream_id).first(), f"stream {stream_id}"
    elif isinstance(response_id, str) and 0 < len(response_id) <= 200 and stream_id is None:
        # (an upstream id is the response's; its retries are other responses)
        found = qs.filter(upstream_id=response_id).order_by("-pk").first()
        named = f"response {response_id!r}"
    else:
        return None, json_error(
            400, "invalid", 'Name the stream: "stream" (its id) or "response_id", one of them.'
        )
    if found is None:
        return None, json_error(404, "not_found", f"No {named}.")
    if not projects.may(user, action, found.project_id):
        return None, forbidden(action)
    return found, None


def forbidden(action):
    return json_error(
        403, "forbidden", f"Your role in this stream's project does not allow {action}."
    )


def _score(user, data, source):
    stream, error = _target(user, data, Action.SCORE)
    if error:
        return error
    try:
        score = scores.give(
            stream.pk,
            author=user,
            name=data.get("name"),
            value=data.get("value"),
            label=data.get("label"),
            comment=data.get("comment"),
            source=source,
            key=data.get("key") or "",
        )
    except scores.Invalid as exc:
        return json_error(400, "invalid", exc.message, fields={exc.field: [exc.message]})
    return respond(public.score(score), status=200 if score.replaced else 201)


def _comment(user, data, source):
    stream, error = _target(user, data, Action.COMMENT)
    if error:
        return error
    try:
        made = scores.comment(stream.pk, author=user, text=data.get("text"), source=source)
    except scores.Invalid as exc:
        return json_error(400, "invalid", exc.message, fields={exc.field: [exc.message]})
    return respond(public.comment(made), status=201)


def _feedback(user, stream_id):
    stream = _visible(user, stream_id)
    return None if stream is None else {"stream": stream.pk, **public.feedback(stream.pk)}


def _score_types(project_id):
    # the instance's and the request's project's (a token's: its own)
    return {"score_types": [public.score_type(t) for t in scores.types(project_id)]}


# ---------------------------------------------------------------------------------------------
# Views


@api_view
async def api_streams(request):
    if request.method == "POST":
        return await _create(request)
    if request.method != "GET":
        return method_not_allowed("GET", "POST")
    form = ListForm(request.GET)
    if not form.is_valid():
        return _invalid(form)
    d = form.cleaned_data
    narrow = {k: d[k] for k in ("status", "format") if d[k]}
    try:
        project = await sync_to_async(project_id)(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    if d["q"] and search.parse(d["q"]):
        retry = await sync_to_async(search_allowed)(request.user)
        if retry is not None:
            response = json_error(
                429, "too_many_searches", f"Too many searches: retry in {retry} s."
            )
            response["Retry-After"] = str(retry)
            return response
        data = await sync_to_async(_search)(request.user, project, d["q"], d["page"] or 1, narrow)
    else:
        data = await sync_to_async(_list)(
            request.user, project, d["limit"] or 50, d["before"], narrow
        )
    return respond(data)


def _request_body(request):
    """((the request body to send upstream, its format), None) or (None, the error
    response)."""
    data, error = parse_json(request)
    if error:
        return None, error
    form = CreateStreamForm(data)
    if not form.is_valid():
        return None, _invalid(form)
    return (form.request_body(), form.cleaned_data["format"]), None


def _start_in(request):
    """The project a new stream of this request goes into, once the user may RUN there."""
    project = writing_project_id(request)
    _require(request.user, Action.RUN, project)
    return project


async def _create(request):
    try:
        project = await sync_to_async(_start_in)(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    except NotAllowed:
        return json_error(403, "forbidden", "Your role in this project does not allow run.")
    # parsed and validated off the event loop: a body may be megabytes of a stranger's JSON
    request_body, error = await asyncio.to_thread(_request_body, request)
    if error:
        return error
    body, format = request_body
    bearer = getattr(request, "bearer", None)
    if bearer is not None and limits.limited(bearer):  # (a stream costs: the caps apply)
        over = await sync_to_async(limits.spend_over)(bearer)
        if over is not None:
            return limit_error(over)
    try:
        stream = await sync_to_async(services.create)(
            request.user, body, project, token=getattr(request, "token", None), format=format
        )
    except services.TooMany as exc:  # (or ShuttingDown: 503)
        return json_error(exc.http_status, exc.code, exc.message(), limit=exc.limit)
    # A task on the server's event loop: the stream outlives this request.
    await services.start(stream)
    return respond(
        {
            "id": stream.pk,
            "status": stream.status,
            "url": f"/api/streams/{stream.pk}/",
            "ws": ws_path(stream.pk),
        },
        status=201,
    )


@api_view
async def api_stream(request, stream_id):
    if request.method != "GET":
        return method_not_allowed("GET")
    summary = await sync_to_async(_summary)(request.user, stream_id)
    if summary is None:
        return json_error(404, "not_found", f"No stream {stream_id}.")
    return respond(summary)


@api_view
async def api_stream_events(request, stream_id):
    if request.method != "GET":
        return method_not_allowed("GET")
    form = EventsPageForm(request.GET)
    if not form.is_valid():
        return _invalid(form)
    after = form.cleaned_data["after"]
    limit = form.cleaned_data["limit"] or 1000
    page = await sync_to_async(_events_page)(
        request.user, stream_id, -1 if after is None else after, limit
    )
    if page is None:
        return json_error(404, "not_found", f"No stream {stream_id}.")
    return respond(page)


@api_view
async def api_stream_cancel(request, stream_id):
    if request.method != "POST":
        return method_not_allowed("POST")
    stream = await sync_to_async(_visible)(request.user, stream_id)
    if stream is None:
        return json_error(404, "not_found", f"No stream {stream_id}.")
    if not await sync_to_async(projects.may)(request.user, Action.RUN, stream.project_id):
        return forbidden(Action.RUN)
    outcome = services.cancel(stream)
    if outcome == services.CANCELLING:
        return respond({"id": stream.pk, "status": "cancelling"}, status=202)
    if outcome == services.FINISHED:
        return json_error(
            409,
            "finished",
            f"Stream {stream_id} already ended ({stream.status}).",
            status=stream.status,
        )
    return json_error(
        409,
        "not_running_here",
        f"Stream {stream_id} is {stream.status} but not running in this server process.",
        status=stream.status,
    )


def _source(request):
    return "api" if getattr(request, "auth_method", "") == "token" else "person"


class FeedbackForm(forms.Form):
    stream = forms.IntegerField(min_value=1)


@api_view
async def api_scores(request):
    if request.method == "GET":
        form = FeedbackForm(request.GET)
        if not form.is_valid():
            return _invalid(form)
        stream_id = form.cleaned_data["stream"]
        data = await sync_to_async(_feedback)(request.user, stream_id)
        if data is None:
            return json_error(404, "not_found", f"No stream {stream_id}.")
        return respond(data)
    if request.method != "POST":
        return method_not_allowed("GET", "POST")
    data, error = await asyncio.to_thread(parse_json, request)
    if error:
        return error
    return await sync_to_async(_score)(request.user, data, _source(request))


@api_view
async def api_comments(request):
    if request.method != "POST":
        return method_not_allowed("POST")
    data, error = await asyncio.to_thread(parse_json, request)
    if error:
        return error
    return await sync_to_async(_comment)(request.user, data, _source(request))


@api_view
async def api_score_types(request):
    if request.method != "GET":
        return method_not_allowed("GET")
    try:
        project = await sync_to_async(project_id)(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    return respond(await sync_to_async(_score_types)(project))


# ---------------------------------------------------------------------------------------------
# Alert rules, silences and firings (streams/alerts/rules.py: the one validation, the reads)


def _rule_json(rule):
    return {
        "id": rule.pk,
        "project": rule.project.slug,
        "name": rule.name,
        "figure": rule.figure,
        "severity": rule.severity,
        "score_type": rule.score_type_id,
        "window_s": rule.window_s,
        "scope": alert_notices.rule_scope(rule),
        "comparison": rule.comparison,
        "threshold": rule.threshold,
        "baseline": rule.baseline,
        "min_streams": rule.min_streams,
        "for_s": rule.for_s,
        "renotify_s": rule.renotify_s,
        "notify_recovery": rule.notify_recovery,
        "enabled": rule.enabled,
        "channels": sorted(c.pk for c in rule.channels.all()),
        "state": _state_json(getattr(rule, "state", None)),
    }


def _state_json(state):
    if state is None:
        return {"state": "ok", "since": None, "value": None, "evaluated_at": None}
    return {
        "state": state.state,
        "since": state.since,
        "value": state.value,
        "streams": state.streams,
        "evaluated_at": state.evaluated_at,
    }


def _firing_json(firing):
    return {
        "id": firing.pk,
        "rule": firing.rule_id,
        "rule_name": firing.rule.name,
        "started_at": firing.started_at,
        "ended_at": firing.ended_at,
        "peak": firing.peak,
        "values": firing.values,
        "notified": firing.notified,
        "silenced": firing.silenced,
    }


def _silence_json(silence):
    return {
        "id": silence.pk,
        "rule": silence.rule_id,
        "scope": silence.scope,
        "until_at": silence.until_at,
        "reason": silence.reason,
    }


def _alert_error(exc):
    if isinstance(exc, alert_rules.Invalid):
        name, message = next(iter(exc.errors.items()))
        return json_error(400, "invalid", f"{name}: {message}", fields=exc.errors)
    if isinstance(exc, PermissionError | NotAllowed):
        return forbidden(Action.MANAGE_ALERTS)
    return json_error(404, "not_found", "No such rule, silence, token, user or channel.")


_ALERT_ERRORS = (alert_rules.Invalid, alert_rules.NotVisible, PermissionError, NotAllowed)


class _BadBody(Exception):
    def __init__(self, response):
        super().__init__(response.status_code)
        self.response = response


def _body(request):
    """The request's JSON object (read after the access checks: a refusal comes first)."""
    data, error = parse_json(request)
    if error:
        raise _BadBody(error)
    return data


def _alert_rules(request):
    user, project = request.user, project_id(request)
    if request.method == "GET":
        found = alert_rules.visible(user, project).select_related("project", "state")
        return respond({"rules": [_rule_json(r) for r in found.prefetch_related("channels")]})
    project = writing_project_id(request)
    _require(user, Action.MANAGE_ALERTS, project)
    rule = alert_rules.save(user, Project.objects.get(pk=project), _body(request))
    return respond(_rule_json(rule), status=201)


def _alert_rule(request, rule_id):
    if request.method == "GET":
        return respond(_rule_json(alert_rules.get(request.user, rule_id)))
    rule = alert_rules.get(request.user, rule_id, Action.MANAGE_ALERTS)
    if request.method == "DELETE":
        rule.delete()
        return HttpResponse(status=204)
    return respond(_rule_json(alert_rules.save(request.user, rule.project, _body(request), rule)))


def _alert_silences(request):
    user, project = request.user, project_id(request)
    if request.method == "GET":
        found = alert_rules.silences(user, project)
        return respond({"silences": [_silence_json(s) for s in found]})
    project = writing_project_id(request)
    _require(user, Action.MANAGE_ALERTS, project)
    data = _body(request)
    rule = None
    if data.get("rule") is not None:
        rule = alert_rules.get(user, data["rule"], Action.MANAGE_ALERTS)
    silence = alert_rules.silence(
        user,
        Project.objects.get(pk=project),
        rule=rule,
        scope=data.get("scope") if isinstance(data.get("scope"), dict) else None,
        hours=data.get("hours"),
        reason=data.get("reason", ""),
    )
    return respond(_silence_json(silence), status=201)


def _alert_history(request, rule_id):
    rule = None if rule_id is None else alert_rules.get(request.user, rule_id)
    found = alert_rules.history(request.user, project_id(request), rule)
    return respond({"firings": [_firing_json(f) for f in found]})


async def _alerts_call(request, fn, *args):
    """Run `fn(request, *args)` off the loop, answering the alert layer's refusals in the
    API's one error shape."""
    try:
        return await sync_to_async(fn)(request, *args)
    except _BadBody as exc:
        return exc.response
    except LookupError:  # (`?project=` of a project one is not in)
        return json_error(404, "not_found", "No such project.")
    except _ALERT_ERRORS as exc:
        return _alert_error(exc)


@api_view
async def api_alert_rules(request):
    if request.method not in ("GET", "POST"):
        return method_not_allowed("GET", "POST")
    return await _alerts_call(request, _alert_rules)


@api_view
async def api_alert_rule(request, rule_id):
    if request.method not in ("GET", "POST", "DELETE"):
        return method_not_allowed("GET", "POST", "DELETE")
    return await _alerts_call(request, _alert_rule, rule_id)


@api_view
async def api_alert_silences(request):
    if request.method not in ("GET", "POST"):
        return method_not_allowed("GET", "POST")
    return await _alerts_call(request, _alert_silences)


class HistoryForm(forms.Form):
    rule = forms.IntegerField(min_value=1, required=False)


@api_view
async def api_alert_history(request):
    if request.method != "GET":
        return method_not_allowed("GET")
    form = HistoryForm(request.GET)
    if not form.is_valid():
        return _invalid(form)
    return await _alerts_call(request, _alert_history, form.cleaned_data["rule"])


# Notification channels (streams/notify/channels.py; docs/alerts.md)


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=MAX_CHANNEL_NAME_CHARS)
    kind = forms.ChoiceField(choices=Channel.Kind.choices)
    target = forms.CharField(max_length=targets.MAX_TARGET_CHARS)


class ChannelChangeForm(forms.Form):
    name = forms.CharField(max_length=MAX_CHANNEL_NAME_CHARS, required=False)
    target = forms.CharField(max_length=targets.MAX_TARGET_CHARS, required=False)
    enabled = forms.NullBooleanField(required=False)


def _refused(exc):
    fields = {exc.field: [str(exc)]} if exc.field else {}
    return json_error(400, "refused", str(exc), **({"fields": fields} if fields else {}))


def _channels(request):
    project = project_id(request)
    manages = projects.may(request.user, Action.MANAGE_CHANNELS, project)
    rows = channel_rows.visible(request.user, project)
    return {"channels": [public.channel(c, manages=manages) for c in rows]}


def _channel_create(request):
    project_id = writing_project_id(request)
    _require(request.user, Action.MANAGE_CHANNELS, project_id)  # (before the body is read)
    data, error = parse_json(request)
    if error:
        return error
    form = ChannelForm(data)
    if not form.is_valid():
        return _invalid(form)
    d = form.cleaned_data
    try:
        channel, secret = channel_rows.create(
            Project.objects.get(pk=project_id),
            d["name"],
            d["kind"],
            d["target"],
            created_by=request.user,
        )
    except targets.Refused as exc:
        return _refused(exc)
    out = public.channel(channel)
    if secret:  # (once: it is sealed, and never shown again)
        out["signing_secret"] = secret
    return respond(out, status=201)


def _for_channel(view):
    """`view(request, channel)` for the channel of the URL once the request may manage it,
    else its error (a token reaches its own project's only)."""

    @functools.wraps(view)
    def wrapper(request, channel_id):
        channel, error = _channel(request, channel_id)
        return error or view(request, channel)

    return wrapper


def _channel(request, channel_id):
    try:
        channel = channel_rows.managed(request.user, channel_id)
    except channel_rows.NotFound:
        channel = None
    except channel_rows.NotAllowed:
        return None, forbidden(Action.MANAGE_CHANNELS)
    token = getattr(request, "token", None)
    if channel is None or (token is not None and channel.project_id != token.project_id):
        return None, json_error(404, "not_found", f"No channel {channel_id}.")
    return channel, None


@_for_channel
def _channel_read(request, channel):
    return respond(public.channel(channel))


@_for_channel
def _channel_change(request, channel):
    data, error = parse_json(request)
    if error:
        return error
    form = ChannelChangeForm(data)
    if not form.is_valid():
        return _invalid(form)
    d = form.cleaned_data
    try:
        channel_rows.update(
            channel,
            name=d["name"] or None,
            target=d["target"] or None,
            enabled=d["enabled"] if "enabled" in data else None,
        )
    except targets.Refused as exc:
        return _refused(exc)
    return respond(public.channel(channel))


@_for_channel
def _channel_delete(request, channel):
    data, error = parse_json(request)
    if error:
        return error
    if data.get("confirm") is not True:
        return json_error(
            400, "invalid", 'Send {"confirm": true} to delete the channel and its log.'
        )
    channel_rows.delete(channel)
    return respond({"deleted": channel.pk})


@_for_channel
def _channel_test(request, channel):
    return respond(public.delivery(deliver.send_test(channel, request.user)), status=202)


@_for_channel
def _channel_log(request, channel):
    return respond({"deliveries": [public.delivery(d) for d in channel_rows.log_of(channel)]})


@api_view
async def api_channels(request):
    if request.method not in ("GET", "POST"):
        return method_not_allowed("GET", "POST")
    view = _channels if request.method == "GET" else _channel_create
    try:
        answer = await sync_to_async(view)(request)
    except LookupError:
        return json_error(404, "not_found", "No such project.")
    except NotAllowed:
        return forbidden(Action.MANAGE_CHANNELS)
    return answer if not isinstance(answer, dict) else respond(answer)


@api_view
async def api_channel(request, channel_id):
    if request.method not in ("GET", "POST"):
        return method_not_allowed("GET", "POST")
    view = _channel_read if request.method == "GET" else _channel_change
    return await sync_to_async(view)(request, channel_id)


@api_view
async def api_channel_delete(request, channel_id):
    if request.method != "POST":
        return method_not_allowed("POST")
    return await sync_to_async(_channel_delete)(request, channel_id)


@api_view
async def api_channel_test(request, channel_id):
    if request.method != "POST":
        return method_not_allowed("POST")
    return await sync_to_async(_channel_test)(request, channel_id)


@api_view
async def api_channel_deliveries(request, channel_id):
    if request.method != "GET":
        return method_not_allowed("GET")
    return await sync_to_async(_channel_log)(request, channel_id)
