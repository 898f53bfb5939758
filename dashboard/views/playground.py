"""The chat playground: conversations kept on the server, answers streamed live.

=====================================  ========================  ================================
path                                   name                      what
=====================================  ========================  ================================
GET  /playground/                      playground                a new conversation: the composer
                                                                 (the first message creates it)
GET  /playground/<c>/                  playground_conversation   a conversation: finished answers
                                                                 rendered from their streams; the
                                                                 page's script reattaches to one
                                                                 still streaming
POST /playground/send/                 playground_send           first message → new conversation
POST /playground/<c>/send/             playground_send           the next message
GET  /playground/<c>/turns/<t>/        playground_turn           one turn, rendered (the script
                                                                 swaps it in when its stream ends)
POST /playground/<c>/turns/<t>/retry/  playground_retry          ask again (last turn only)
POST /playground/<c>/delete/           playground_delete         delete (its streams are kept)
GET  /playground/compare/              playground_compare        compare mode: one message to 2–4
                                                                 models side by side, live
POST /playground/compare/send/         playground_compare_send   start one stream per model (JSON)
=====================================  ========================  ================================

Stop is the API's `POST /api/streams/<id>/cancel/`. POSTs answer JSON to the page's script
(`Accept: application/json`): `{"conversation": {...}, "turn": {...}, "html"}`, or
`{"message", "errors"?}` with 400 (invalid), 409 (busy) or 429 (per-user limit); without
that header they redirect or re-render the page, so the forms work without the script too.
A conversation is its owner's only: anyone else (staff included) gets a 404.
"""

import datetime as dt

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince
from django.utils.translation import gettext, ngettext
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.playground import (
    COMPARE_MAX,
    DEFAULT_SPEED,
    SPEEDS,
    CompareForm,
    PlaygroundForm,
    scenario_groups,
)
from dashboard.models import Busy, CannotRetry, Conversation, TooLong, Turn, retry, send
from dashboard.project import abilities, require, working, writing_project
from dashboard.queries.common import finding_counts
from dashboard.queries.output import output_blocks
from streams.access import projects
from streams.access.projects import Action
from streams.core import conf
from streams.models import Finding, Stream
from streams.run import services
from streams.run.catalog import get_catalog
from streams.serve import api

SIDEBAR_CONVERSATIONS = 100
FINDING_CODES_MAX = 200  # findings read to name their codes on an answer's badge
RETRYABLE = {
    Stream.Status.FAILED,
    Stream.Status.CANCELLED,
    Stream.Status.STALLED,
    Stream.Status.TRUNCATED,
    Stream.Status.INTERRUPTED,
    Stream.Status.INCOMPLETE,
}


def _get_conversation_for_user(user, conversation_id, action=Action.READ):
    """The user's own conversation, while they are a member of its project (whichever project
    the page works in); sending in it needs `action` there (else 403)."""
    conversation = Conversation.objects.filter(pk=conversation_id, user_id=user.pk).first()
    if conversation is None or not projects.may(user, Action.READ, conversation.project_id):
        raise Http404("No such conversation")
    if action != Action.READ:
        require(user, action, conversation.project_id)
    return conversation


def _get_turn(conversation, turn_id):
    turn = Turn.objects.filter(pk=turn_id, conversation=conversation).first()
    if turn is None:
        raise Http404("No such turn")
    return turn


def _wants_json(request):
    return "application/json" in request.headers.get("Accept", "")


# ---------------------------------------------------------------------------------------------
# How an answer looks: one function for the page, the turn partial and the script's swap


def answer_output(stream):
    """The answer's output items (templates/dashboard/output.html, as on the timeline; a
    stream whose terminal event alone carried the text shows that text), whether a rewrite
    pass changed a text, and whether anything at all is shown."""
    items = output_blocks(stream, terminal_text=True)
    rewritten = any(
        part["streamed"] is not None
        for item in items
        if item["kind"] == "message"
        for part in item["parts"]
    )
    shown = any(item["kind"] != "message" or item["parts"] for item in items)
    return items, rewritten, shown


def answer_notice(stream):
    """(css class, sentence) saying how an answer ended, when it did not simply complete (the
    upstream's error message is in the sentence)."""
    status = stream.status
    error = ": ".join(x for x in (stream.error_code, stream.error_message) if x)
    if status == Stream.Status.CANCELLED:
        return "warn", gettext("Stopped. What arrived before the stop is kept.")
    limit = conf.get().stall_max_attempts
    if status == Stream.Status.STALLED:
        if stream.attempt < limit:
            # the recorder's message names the threshold it applied ("no event for 60 s")
            why = stream.error_message or gettext("no event for a while")
            text = gettext("Stalled: %(why)s — retrying, attempt %(next)s of %(limit)s.")
            return "warn", text % {"why": why, "next": stream.attempt + 1, "limit": limit}
        text = ngettext(
            "No event for a while, %(n)s time: gave up.",
            "No event for a while, %(n)s times: gave up.",
            stream.attempt,
        )
        return "err", text % {"n": stream.attempt}
    if stream.is_active and stream.attempt > 1:
        # the answer being followed is a retry: say so, not swap attempts silently
        text = gettext("Retrying after a stall: attempt %(n)s of %(limit)s.")
        return "warn", text % {"n": stream.attempt, "limit": limit}
    if status == Stream.Status.FAILED:
        return "err", _failure(stream, error)
    if status == Stream.Status.TRUNCATED:
        return "err", gettext("The connection closed before the answer ended.")
    if status == Stream.Status.INTERRUPTED:
        return "err", gettext("The server stopped while this answer was being recorded.")
    if status == Stream.Status.INCOMPLETE:
        if error:
            return "warn", gettext("The answer is incomplete — %(error)s.") % {"error": error}
        return "warn", gettext("The answer is incomplete.")
    return "", ""


def _failure(stream, error):
    """What a failed answer's notice says: an HTTP refusal and an answer that was not an event
    stream are the upstream's answers, not its "errors", and read as such."""
    http = stream.http_status
    details = error or gettext("no details")
    if stream.error_code == "wrong_content_type":
        kind = stream.content_type or gettext("no Content-Type")
        if http:
            text = gettext(
                "The upstream answered HTTP %(http)s with %(kind)s, not an event stream: "
                "nothing to show."
            )
        else:
            text = gettext(
                "The upstream answered with %(kind)s, not an event stream: nothing to show."
            )
        return text % {"http": http, "kind": kind}
    if http and http >= 400:
        # The upstream's Retry-After is not recorded (streams.models.Stream has no field for
        # it): a 429 says so rather than pretend there is none.
        if http == 429:
            text = gettext(
                "The upstream answered HTTP %(http)s (rate limited: wait before retrying) — "
                "%(details)s."
            )
        else:
            text = gettext("The upstream answered HTTP %(http)s — %(details)s.")
        return text % {"http": http, "details": details}
    return gettext("The upstream reported an error — %(details)s.") % {"details": details}


def _findings(stream):
    """(count, {severity: count}, "code, code") of the checker's findings on an answer, for its
    header's badge (which says their severities)."""
    if stream is None or not stream.findings_count:
        return 0, {}, ""
    codes = Finding.objects.filter(stream_id=stream.pk).values_list("code", flat=True)
    names = sorted(set(codes[:FINDING_CODES_MAX]))
    return stream.findings_count, finding_counts(stream), ", ".join(names)


def _prepare(turn, is_last):
    """Attach what the turn partial shows."""
    turn.is_last = is_last
    stream = turn.answer
    if stream is not None:
        turn.blocks, turn.rewritten, turn.has_output = answer_output(stream)
        turn.notice_class, turn.notice = answer_notice(stream)
        turn.findings, turn.finding_counts, turn.finding_codes = _findings(stream)
    else:
        turn.findings, turn.finding_counts, turn.finding_codes = 0, {}, ""
        turn.blocks, turn.rewritten, turn.has_output = [], False, False
        turn.notice_class, turn.notice = "", ""
    turn.retryable = bool(is_last and stream is not None and stream.status in RETRYABLE)
    # A stall is retried by the runner as a new stream row: the script asks again until it
    # appears (or the stall was the last attempt).
    turn.awaiting_retry = bool(
        stream is not None
        and stream.status == Stream.Status.STALLED
        and stream.attempt < conf.get().stall_max_attempts
    )
    return turn


def _turn_html(turn, request):
    can = abilities(request.user, turn.conversation.project_id)
    context = {"turn": turn, "can": can}
    return render_to_string("dashboard/playground.html#turn", context, request=request)


# ---------------------------------------------------------------------------------------------
# Pages


def _page_context(request, conversation, form=None, error=""):
    user = request.user
    catalog = get_catalog()
    turns = conversation.turns_with_answers() if conversation is not None else []
    for n, turn in enumerate(turns, 1):
        _prepare(turn, n == len(turns))
    # the sidebar: the user's conversations in the conversation's project (else the page's)
    project = conversation.project_id if conversation is not None else writing_project(request)
    conversations = Conversation.objects.filter(user_id=user.pk, project=project)
    conversations = conversations.order_by("-updated_at")
    if form is None:
        # A new conversation starts from the model and options of the one used last, but with
        # the simulator's scenario and speed at their defaults: a stall or an error scenario
        # carried into "+ New conversation" made its first answer fail for no visible reason.
        template = conversation or conversations.first()
        initial = template.settings_dict() if template else {"model": "auto"}
        if conversation is None:
            initial = {**initial, "scenario": "", "speed": DEFAULT_SPEED}
        elif not initial.get("speed"):
            initial = {**initial, "speed": DEFAULT_SPEED}  # sent before speeds were kept
        form = PlaygroundForm(initial=initial, catalog=catalog)
    conversations = list(conversations[:SIDEBAR_CONVERSATIONS])
    now = timezone.now()
    for c in conversations:
        recent = now - c.updated_at < dt.timedelta(minutes=1)
        ago = gettext("%(time)s ago") % {"time": timesince(c.updated_at, now, depth=1)}
        c.ago = gettext("just now") if recent else ago
    return {
        "nav": "playground",
        "conversation": conversation,
        "conversations": conversations,
        "turns": turns,
        "form": form,
        "error": error,
        "catalog": catalog,
        "scenario_groups": scenario_groups(),
        "speeds": SPEEDS,
        "send_url": _send_url(conversation),
        "active": bool(turns and turns[-1].answer is not None and turns[-1].answer.is_active),
        "upstream": settings.UPSTREAM_BASE_URL or gettext("the built-in simulator"),
        "can": abilities(user, project),
        # staff working in every project at once: where a new conversation goes
    }


def _send_url(conversation):
    if conversation is None:
        return reverse("playground_send")
    return reverse("playground_send", args=[conversation.pk])


@login_required
@require_GET
def playground(request):
    return render(request, "dashboard/playground.html", _page_context(request, None))


@login_required
@require_GET
def playground_conversation(request, conversation_id):
    conversation = _get_conversation_for_user(request.user, conversation_id)
    context = _page_context(request, conversation)
    return render(request, "dashboard/playground.html", context)


@login_required
@require_GET
def playground_turn(request, conversation_id, turn_id):
    conversation = _get_conversation_for_user(request.user, conversation_id)
    turn = _get_turn(conversation, turn_id)
    turns = conversation.turns_with_answers()
    turn = next(t for t in turns if t.pk == turn.pk)
    _prepare(turn, turn.pk == turns[-1].pk)
    return HttpResponse(_turn_html(turn, request))


@login_required
@require_POST
def playground_delete(request, conversation_id):
    conversation = _get_conversation_for_user(request.user, conversation_id)
    conversation.delete()
    return redirect("playground")


# ---------------------------------------------------------------------------------------------
# Sending: async, because the stream runs as a task on the server's event loop


def _error(request, conversation, status, message, form=None):
    if _wants_json(request):
        errors = form.error_dict() if form is not None else {}
        return JsonResponse({"message": message, "errors": errors}, status=status)
    context = _page_context(request, conversation, form=form, error=message)
    return render(request, "dashboard/playground.html", context, status=status)


def _started(request, turn):
    conversation = turn.conversation
    if not _wants_json(request):
        return redirect("playground_conversation", conversation.pk)
    _prepare(turn, True)
    return JsonResponse(
        {
            "conversation": {
                "id": conversation.pk,
                "title": conversation.title,
                "url": reverse("playground_conversation", args=[conversation.pk]),
                "send_url": _send_url(conversation),
            },
            "turn": {"id": turn.pk, "stream": turn.answer.pk, "ws": api.ws_path(turn.answer.pk)},
            "html": _turn_html(turn, request),
        },
        status=201,
    )


def _send(request, conversation_id):
    """Validate and create (sync); returns (turn, None) or (None, error response)."""
    conversation, project = None, None
    if conversation_id is not None:
        conversation = _get_conversation_for_user(request.user, conversation_id, Action.RUN)
    else:
        project = working(request, Action.RUN)
    form = PlaygroundForm(request.POST, catalog=get_catalog())
    if not form.is_valid():
        return None, _error(request, conversation, 400, form.first_error(), form)
    try:
        return send(request.user, conversation, form, project=project), None
    except TooLong as exc:
        form.add_error("input", exc.message())
        return None, _error(request, conversation, 400, form.first_error(), form)
    except Busy:
        message = gettext(
            "The last answer is still streaming: stop it (Esc) or wait for it to end."
        )
        return None, _error(request, conversation, 409, message, form)
    except services.TooMany as exc:
        return None, _error(request, conversation, exc.http_status, exc.message(), form)


def _retry(request, conversation_id, turn_id):
    conversation = _get_conversation_for_user(request.user, conversation_id, Action.RUN)
    turn = _get_turn(conversation, turn_id)
    try:
        return retry(turn), None
    except CannotRetry as exc:
        return None, _error(request, conversation, 409, str(exc))
    except Busy:
        message = gettext("This answer is still streaming.")
        return None, _error(request, conversation, 409, message)
    except services.TooMany as exc:
        return None, _error(request, conversation, exc.http_status, exc.message())


async def _start(request, work, *args):
    turn, response = await sync_to_async(work)(request, *args)
    if response is not None:
        return response
    await services.start(turn.answer)
    return await sync_to_async(_started)(request, turn)


@login_required
@require_POST
async def playground_send(request, conversation_id=None):
    return await _start(request, _send, conversation_id)


@login_required
@require_POST
async def playground_retry(request, conversation_id, turn_id):
    return await _start(request, _retry, conversation_id, turn_id)


# ---------------------------------------------------------------------------------------------
# Compare: one message to several models at once. Not a conversation: each answer is a stream
# of its own (in the streams list), started by services.create/start like any other.


@login_required
@require_GET
def playground_compare(request):
    working(request, Action.RUN)  # (the page is its composer and nothing else)
    catalog = get_catalog()
    pinned = [m for m in catalog.choices if m != "auto"]
    initial = {"models": (["auto"] if "auto" in catalog.choices else []) + pinned[:1]}
    form = CompareForm(catalog=catalog, initial={**initial, "speed": DEFAULT_SPEED})
    context = {
        "nav": "playground",
        "form": form,
        "catalog": catalog,
        "scenario_groups": scenario_groups(),
        "speeds": SPEEDS,
        "chosen": initial["models"],
        "slots": COMPARE_MAX,
        "limit": conf.get().max_concurrent_per_user,
    }
    return render(request, "dashboard/playground_compare.html", context)


def _compare_create(request):
    """Validate, check there is a slot per model, create every stream (all or none) in the
    page's project."""
    project = working(request, Action.RUN)
    form = CompareForm(request.POST, catalog=get_catalog())
    if not form.is_valid():
        return None, JsonResponse(
            {"message": form.first_error(), "errors": form.error_dict()}, status=400
        )
    bodies = form.request_bodies()
    limit = conf.get().max_concurrent_per_user
    running = services.running_count(request.user)
    if running + len(bodies) > limit:
        # Said before anything starts: a compare that got 3 of its 4 answers compares nothing.
        free = max(0, limit - running)
        message = gettext(
            "A compare of %(n)s models needs %(n)s free stream slots; you have %(free)s (at "
            "most %(limit)s streams at a time, %(running)s running). Wait for some to finish, "
            "stop them, or choose fewer models."
        ) % {"n": len(bodies), "free": free, "limit": limit, "running": running}
        return None, JsonResponse({"message": message, "errors": {}}, status=429)
    try:
        with transaction.atomic():
            format = form.stream_format()
            streams = [
                services.create(request.user, body, project, format=format) for _, body in bodies
            ]
    except services.TooMany as exc:  # another tab took a slot meanwhile
        return None, JsonResponse({"message": exc.message(), "errors": {}}, status=exc.http_status)
    return streams, None


@login_required
@require_POST
async def playground_compare_send(request):
    streams, response = await sync_to_async(_compare_create)(request)
    if response is not None:
        return response
    for stream in streams:
        await services.start(stream)
    shown = [
        {
            "id": s.pk,
            "model": s.requested_model,
            "ws": api.ws_path(s.pk),
            "timeline": reverse("stream_detail", args=[s.pk]),
        }
        for s in streams
    ]
    return JsonResponse({"streams": shown}, status=201)
