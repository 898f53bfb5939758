"""The playground's conversations, kept on the server: one `Turn` per message sent, each linked
to the `Stream` that recorded its answer.

An answer's text is never copied here: the stream row already holds it (`parts`, `final_text`,
`output_text`), so the transcript, the timeline and the statistics cannot disagree.
"""

import json

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils.translation import gettext, pgettext_lazy

from streams import fields
from streams.core import conf
from streams.models import Project, Stream
from streams.run import services
from streams.store import rows

TITLE_CHARS = 80


class Busy(Exception):
    """The conversation's last answer is still streaming."""


class CannotRetry(Exception):
    pass


class TooLong(Exception):
    """The conversation with the new message is over the input limit."""

    def message(self):
        size, limit = self.args
        return gettext(
            "With this message the conversation is %(size)s characters long; at most %(limit)s "
            "can be sent. Start a new conversation."
        ) % {"size": size, "limit": limit}


class Conversation(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="conversations"
    )
    title = fields.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The composer's last settings, so that the next message (or a reload) starts from them.
    model = fields.CharField(max_length=100, default="auto")
    instructions = fields.TextField(blank=True)
    temperature = models.FloatField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    scenario = fields.CharField(max_length=50, blank=True)
    speed = fields.CharField(max_length=10, blank=True)  # simulator time_scale, as sent

    class Meta:
        indexes = [
            # the sidebar: one user's conversations, most recently used first
            models.Index(fields=["user", "-updated_at"], name="conversation_user_updated"),
        ]

    def __str__(self):
        return self.title or gettext("Conversation %(id)s") % {"id": self.pk}

    def save(self, *args, **kwargs):
        # a user's conversation made without a project is their personal project's (as a
        # stream is: streams.models)
        if self.project_id is None and self.user_id is not None:
            self.project = Project.personal(self.user)
        super().save(*args, **kwargs)

    SETTINGS = ("model", "instructions", "temperature", "max_output_tokens", "scenario", "speed")

    def settings_dict(self):
        """What the composer starts from: the settings kept, and the format its last answer
        spoke (its history, plain user and assistant messages, reads the same in each)."""
        answers = Stream.objects.filter(turns__conversation=self).order_by("-pk")
        format = answers.values_list("format", flat=True).first() or Stream.Format.RESPONSES
        return {**{name: getattr(self, name) for name in self.SETTINGS}, "format": format}

    def turns_with_answers(self):
        """The turns in order, each with `.answer`: the stream of its latest attempt (a stall
        retry is a new stream row linked to the first), or None if the stream was deleted."""
        turns = list(self.turns.order_by("position"))
        first_ids = [t.stream_id for t in turns if t.stream_id]
        latest = {}
        attempts = Stream.objects.filter(Q(pk__in=first_ids) | Q(first_attempt_id__in=first_ids))
        for stream in attempts.order_by("attempt", "pk"):
            latest[stream.first_attempt_id or stream.pk] = stream
        for turn in turns:
            turn.answer = latest.get(turn.stream_id)
        return turns

    def input_items(self, turns=None):
        """The conversation so far as Responses `input` items: each user message, and each
        answer that has text (a stopped answer counts with what was received)."""
        items = []
        for turn in self.turns_with_answers() if turns is None else turns:
            items.append({"role": "user", "content": turn.prompt})
            text = answer_text(turn.answer)
            if text:
                items.append({"role": "assistant", "content": text})
        return items

    def previous_response_id(self, turns):
        """The upstream id of the last answer, if it completed (for `previous_response_id`)."""
        answer = turns[-1].answer if turns else None
        if answer is not None and answer.status == Stream.Status.COMPLETED:
            return answer.upstream_id
        return ""


class Turn(models.Model):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    position = models.PositiveIntegerField()  # 0, 1, 2 … within the conversation
    prompt = fields.TextField()
    # The first attempt of the answer; a retry from the page replaces it (the old stream stays
    # in the streams list). SET_NULL: deleting old streams must not rewrite conversations.
    stream = models.ForeignKey(
        Stream, null=True, blank=True, on_delete=models.SET_NULL, related_name="turns"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # turns_with_answers reads a conversation's turns in order; unique keeps the order
            models.UniqueConstraint(fields=["conversation", "position"], name="turn_position"),
        ]

    def __str__(self):
        return gettext("turn %(position)s of conversation %(id)s") % {
            "position": self.position,
            "id": self.conversation_id,
        }


def answer_text(stream):
    """What the assistant said: the final (possibly rewritten) text, else what streamed."""
    if stream is None:
        return ""
    return stream.final_text or stream.output_text


def use_previous_response_id():
    # Off by default: the simulator keeps no responses, and an upstream that does not either
    # would answer without the conversation's context.
    return conf.get().playground_previous_response_id


def send(user, conversation, form, project=None):
    """Start the answer to the form's message: a new turn (and conversation in `project`, if
    None) and its pending stream, in the conversation's project, in one transaction; the
    caller starts the stream after the commit.
    Raises Busy, TooLong, or services.TooMany over the per-user limit."""
    prompt = form.cleaned_data["input"]
    with transaction.atomic():
        if conversation is None:
            conversation = Conversation.objects.create(
                user=user, title=_title(prompt), project=project
            )
        else:
            # Two tabs sending at once would otherwise both pass the busy check.
            conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
        turns = conversation.turns_with_answers()
        if turns and turns[-1].answer is not None and turns[-1].answer.is_active:
            raise Busy()
        format = form.stream_format()
        # (`previous_response_id` is the Responses API's: the other formats send the history)
        chained = use_previous_response_id() and format == Stream.Format.RESPONSES
        previous = conversation.previous_response_id(turns) if chained else ""
        if previous:
            body = form.request_body([{"role": "user", "content": prompt}])
            body["previous_response_id"] = previous
        else:
            history = conversation.input_items(turns)
            body = form.request_body([*history, {"role": "user", "content": prompt}])
        size = len(json.dumps(rows.input_of(body)))
        limit = conf.get().max_input_chars
        if size > limit:
            raise TooLong(size, limit)
        stream = services.create(user, body, project=conversation.project_id, format=format)
        turn = Turn.objects.create(
            conversation=conversation, position=len(turns), prompt=prompt, stream=stream
        )
        for name, value in form.conversation_settings().items():
            setattr(conversation, name, value)
        conversation.save()  # also bumps updated_at: the sidebar's order
    turn.answer = stream
    return turn


def retry(turn):
    """Ask again for the last turn's answer, with the very request its stream sent."""
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(pk=turn.conversation_id)
        turns = conversation.turns_with_answers()
        last = turns[-1] if turns else None
        if last is None or last.pk != turn.pk:
            raise CannotRetry(gettext("Only the last answer can be retried."))
        if last.answer is None:
            raise CannotRetry(gettext("This answer's stream was deleted; send the message again."))
        if last.answer.is_active:
            raise Busy()
        stream = services.create(
            conversation.user,
            last.answer.request_body,
            project=conversation.project_id,
            format=last.answer.format,
        )
        last.stream = stream
        last.save(update_fields=["stream"])
        conversation.save(update_fields=["updated_at"])
    last.answer = stream
    return last


def _title(prompt):
    line = " ".join(prompt.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


class SavedView(models.Model):
    """A page's filters saved under a name (dashboard/saved_views.py): its owner's alone, or
    shared with everyone signed in to the instance. `query` is the page's query string, cleaned
    to the page's own filter fields."""

    class Page(models.TextChoices):
        # (the value: the page's URL name)
        STREAMS = "stream_list", pgettext_lazy("a page", "Streams")
        LATENCY = "latency", pgettext_lazy("a page", "Latency")
        ROUTING = "routing", pgettext_lazy("a page", "Routing")
        USAGE = "usage", pgettext_lazy("a page", "Usage & cost")
        ANALYTICS = "admin_analytics", pgettext_lazy("a page", "Analytics")

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="saved_views",
        verbose_name=pgettext_lazy("a saved view's", "owner"),
    )
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="saved_views",
        verbose_name=pgettext_lazy("a saved view's", "project"),
    )
    name = fields.CharField(pgettext_lazy("a saved view's", "name"), max_length=100)
    page = fields.CharField(
        pgettext_lazy("a saved view's", "page"), max_length=30, choices=Page.choices
    )
    query = fields.CharField(
        pgettext_lazy("a saved view's", "filters"), max_length=2000, blank=True
    )
    shared = models.BooleanField(pgettext_lazy("a saved view", "shared"), default=False)
    created_at = models.DateTimeField(pgettext_lazy("a saved view's", "created"), auto_now_add=True)

    class Meta:
        ordering = ["page", "name", "pk"]
        constraints = [
            # a name per project: the same name may mean other filters in another project
            models.UniqueConstraint(
                fields=["owner", "project", "page", "name"], name="saved_view_unique"
            )
        ]

    def __str__(self):
        return self.name
