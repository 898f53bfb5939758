"""Channel-layer names and messages; the only caller of `group_send`.

One message per committed batch per stream (docs/recorder.md): Channels' per-message cost is high,
so batching is what makes fast streams viewable. Messages are high-level; each consumer formats
them for its client. A message is sent only after the batch it describes has committed, so a
browser never sees an event the database does not have.

Messages:

- to `stream_group(id)` ("stream.<id>"): `{"type": "stream.batch", "stream": id,
  "events": [message, …], "stream_fields": {changed public fields}}`, each event a message of
  `streams/shapes/event_message.py` (index, type, sequence_number, t_us, data or None when too
  large to inline; and sent_us for a proxied stream).
- to `LIST_GROUP` ("streams.list"): `{"type": "streams.changed", "stream": id, "project":
  project_id, "fields": {…}}` when a stream is created, changes status or reaches a
  milestone. Changes of counters only (event_count, output_deltas) are sent at most
  every LIST_COUNTER_INTERVAL_S per stream: every batch changes them, and the list does not
  need 200 updates a second.

Channel layers drop messages silently when a consumer's queue is full, so nothing here is
trusted for completeness: consumers detect gaps in arrival indexes and read the database.

With the in-memory layer (which is process-local by nature) messages skip the layer and go
through `LocalFanout`: the same groups and messages, delivered by a direct call. The layer
costs real CPU per message and viewer (a deepcopy per member, an expiry scan of every channel
on each send and receive, a task per delivery and another per receive); paced streams make one
message per event, and that alone saturated the server's loop with many paced streams
(docs/performance.md, "Relay"). RELAY_LOCAL_FANOUT = False turns it off; a real layer (Redis) is
always used when configured.
"""

import logging
import time

from channels.layers import InMemoryChannelLayer, get_channel_layer

from streams.core import conf
from streams.models import Stream

log = logging.getLogger(__name__)

LIST_GROUP = "streams.list"
# Fields whose change alone is not worth a list message more often than this.
COUNTER_FIELDS = frozenset({"event_count", "output_deltas", "heartbeat_at"})
LIST_COUNTER_INTERVAL_S = 0.5

_list_sent_at = {}  # stream id -> monotonic time of its last list message


class LocalFanout:
    """Groups of callbacks in this process. A callback gets the message itself, shared with
    the other members: it must treat it as read-only, and must not block (consumers append
    it to their outbox)."""

    def __init__(self):
        self.groups = {}

    def subscribe(self, group, callback):
        self.groups.setdefault(group, set()).add(callback)

    def unsubscribe(self, group, callback):
        members = self.groups.get(group)
        if members is not None:
            members.discard(callback)
            if not members:
                del self.groups[group]

    def publish(self, group, message):
        members = self.groups.get(group)
        if not members:
            return
        for callback in tuple(members):
            try:
                callback(message)
            except Exception:
                log.exception("relay: a local subscriber of %s failed", group)


fanout = LocalFanout()


def local_fanout():
    """`fanout` when messages should skip the channel layer (see the module docstring)."""
    if not conf.get().relay_local_fanout:
        return None
    return fanout if isinstance(get_channel_layer(), InMemoryChannelLayer) else None


def stream_group(stream_id):
    return f"stream.{stream_id}"


def _list_worthy(stream_id, fields):
    """Whether a change of `fields` goes to the list group now (see the module docstring)."""
    now = time.monotonic()
    status = fields.get("status")
    if status is not None and status not in Stream.ACTIVE_STATUSES:
        _list_sent_at.pop(stream_id, None)
        return True
    if not COUNTER_FIELDS.issuperset(fields):
        _list_sent_at[stream_id] = now
        return True
    last = _list_sent_at.get(stream_id)
    if last is None or now - last >= LIST_COUNTER_INTERVAL_S:
        _list_sent_at[stream_id] = now
        return True
    return False


def publish(stream_id, project_id, events, stream_fields=None):
    """Announce committed events (`event_message.message` tuples) and stream changes.

    In-process subscribers (`local_fanout()`) get them now, and this returns None; otherwise
    it returns the coroutine that sends them through the channel layer. The writer calls this
    for every stream of a batch: a direct call, where a task per stream put the publish
    behind everything else on a busy loop."""
    layer = get_channel_layer()
    if layer is None:
        return None
    message = {"type": "stream.batch", "stream": stream_id, "events": events}
    if stream_fields:
        message["stream_fields"] = stream_fields
    summary = None
    if stream_fields and _list_worthy(stream_id, stream_fields):
        summary = {
            "type": "streams.changed",
            "stream": stream_id,
            "project": project_id,
            "fields": stream_fields,
        }
    local = local_fanout()
    if local is not None:
        local.publish(stream_group(stream_id), message)
        if summary is not None:
            local.publish(LIST_GROUP, summary)
        return None
    return _group_send(layer, stream_id, message, summary)


async def _group_send(layer, stream_id, message, summary):
    try:
        await layer.group_send(stream_group(stream_id), message)
        if summary is not None:
            await layer.group_send(LIST_GROUP, summary)
    except Exception:
        # The database already has everything; viewers catch up from it on reconnect.
        log.exception("publish to the channel layer failed for stream %s", stream_id)


def created_fields(stream):
    """What the live list is told about a new stream."""
    return {
        "status": stream.status,
        "source": stream.source,
        "requested_model": stream.requested_model,
        "scenario": stream.scenario,
        "prompt": stream.prompt[:200],
        "attempt": stream.attempt,
        "created_at": stream.created_at.isoformat() if stream.created_at else None,
    }


async def publish_created(stream):
    """Tell the live list about a stream row that was just created (after its commit)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {
        "type": "streams.changed",
        "stream": stream.pk,
        "project": stream.project_id,
        "fields": created_fields(stream),
    }
    local = local_fanout()
    if local is not None:
        local.publish(LIST_GROUP, message)
        return
    try:
        await layer.group_send(LIST_GROUP, message)
    except Exception:
        log.exception("publish to the channel layer failed for new stream %s", stream.pk)


# ---- share links (streams/access/shares.py) ----------------------------------------------------
#
# A revoked link's open sockets close at once: one message to the link's group, which every
# socket opened through it joined, in whichever process it runs (the consumers' periodic check
# of their links closes them too, within a few seconds, should this message be lost, and it is
# the only way an expiry is noticed).


def share_group(link_id):
    return f"share.{link_id}"


async def close_share(link_id):
    """Tell the sockets opened through the link `link_id` to close (it was revoked)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "share.closed", "link": link_id}
    local = local_fanout()
    if local is not None:
        local.publish(share_group(link_id), message)
        return
    try:
        await layer.group_send(share_group(link_id), message)
    except Exception:
        log.exception("relay: could not tell share link %s's sockets to close", link_id)
