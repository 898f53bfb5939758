"""A stream seen through a share link, live: `/ws/shared/<secret>/<stream id>/`, and revoking a
link, which closes those sockets.

The socket is StreamConsumer's (the same frames, catch-up and close codes: docs/relay.md) with
another door: the link, checked as its page checks it (streams/access/shares.py: throttled like a
token; signed in, or anyone when the link and the instance allow it), and the stream one the
link shows. It reads nothing from its client. It closes with 4003 when its link stops opening:
at once when the link is revoked (`revoke` tells the link's group, in every process), and
within REVOCATION_CHECK_S when it expires or its message was lost (the guard task's periodic
check of every link with open sockets, streams/live/consumers.py).
"""

import asyncio

from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser

from streams.access import shares, throttle
from streams.live import relay
from streams.live.consumers import StreamConsumer, db_read


def revoke(user, link_id):
    """Revoke the link (its owner; staff: any) and close its open sockets: the link, or None
    when there is no such link for `user` (sync)."""
    link = shares.revoke(user, link_id)
    if link is not None:
        async_to_sync(relay.close_share)(link.pk)
    return link


class SharedStreamConsumer(StreamConsumer):
    """`/ws/shared/<secret>/<stream id>/`: a stream a share link shows, read-only."""

    fast_handlers = (*StreamConsumer.fast_handlers, "share.closed")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.link = None
        self.loop = None

    async def resolve_user(self):
        # a link may open for someone signed out: anonymous is a user here, refused or not by
        # the link itself
        return await super().resolve_user() or AnonymousUser()

    def socket_holder(self):
        # Signed-out viewers of public links share their IP's slots.
        if self.user.is_authenticated:
            return self.user.pk
        return f"ip-{throttle.client_ip(self.scope)}"

    async def authorize(self):
        try:
            secret = self.scope["url_route"]["kwargs"]["secret"]
        except KeyError:
            return False
        ip = throttle.client_ip(self.scope)
        opening = await db_read(shares.open)(secret, self.user, ip)
        if opening.link is None:
            return False
        self.link = opening.link
        self.share_link_id = self.link.pk
        self.loop = asyncio.get_running_loop()
        return await super().authorize()

    async def visible_source(self):
        return await db_read(shares.stream_source)(self.link, self.stream_id)

    async def websocket_connect(self, message):
        await super().websocket_connect(message)
        if not self.joined:
            return
        group = relay.share_group(self.share_link_id)
        if self.local is not None:
            self.local.subscribe(group, self.deliver)
            return
        await self.channel_layer.group_add(group, self.channel_name)
        if not self.joined:  # it ended (a finished stream) while we joined: leave again
            await self.channel_layer.group_discard(group, self.channel_name)

    async def websocket_receive(self, message):
        pass  # read-only: nothing a viewer sends is read

    async def _leave(self):
        if self.joined and self.share_link_id is not None:
            group = relay.share_group(self.share_link_id)
            if self.local is not None:
                self.local.unsubscribe(group, self.deliver)
            else:
                await self.channel_layer.group_discard(group, self.channel_name)
        await super()._leave()

    def share_closed(self, message):
        # (a fast handler: no I/O here; LocalFanout may call it from another thread's loop)
        if not self.closing and self.loop is not None:
            self.loop.call_soon_threadsafe(self._close_soon)

    def _close_soon(self):
        if not self.closing:
            self.loop.create_task(self.close_revoked())
