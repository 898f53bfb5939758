"""Channel-layer names and messages; the only caller of `group_send`.

One message per committed batch per stream (DESIGN.md §1): Channels' per-message cost is high,
so batching is what makes fast streams viewable. Messages are high-level; each consumer formats
them for its client. A message is sent only after the batch it describes has committed, so a
browser never sees an event the database does not have.
"""

import logging

from channels.layers import get_channel_layer
from django.conf import settings

log = logging.getLogger(__name__)

LIST_GROUP = "streams.list"


def stream_group(stream_id):
    return f"stream.{stream_id}"


def event_payload(index, type_, sequence_number, t_us, data):
    """The compact form of one event in a channel-layer message: a list, not a dict, because
    it is repeated thousands of times per second. `data` is None when it is too large to carry
    inline; the consumer then reads it from the database."""
    if data is not None and len(data) > settings.STREAMSCOPE["RELAY_INLINE_MAX_BYTES"]:
        data = None
    return [index, type_, sequence_number, t_us, data]


async def publish_batch(stream_id, user_id, events, stream_fields=None):
    """Announce committed events (payloads from `event_payload`) and stream changes."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "stream.batch", "stream": stream_id, "events": events}
    if stream_fields:
        message["stream_fields"] = stream_fields
    try:
        await layer.group_send(stream_group(stream_id), message)
        if stream_fields:
            summary = {
                "type": "streams.changed",
                "stream": stream_id,
                "user": user_id,
                "fields": stream_fields,
            }
            await layer.group_send(LIST_GROUP, summary)
    except Exception:
        # The database already has everything; viewers catch up from it on reconnect.
        log.exception("publish to the channel layer failed for stream %s", stream_id)
