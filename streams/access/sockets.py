"""Open WebSockets per user: leased slots in the cache."""

from django.core.cache import cache

from streams.core import conf

# A user has MAX_SOCKETS_PER_USER numbered slots in the cache; a socket holds one as a lease
# that its process renews (renew_socket_slots, every SOCKET_RENEW_S) while it is open. A process
# that dies uncleanly stops renewing, and its slots come free after SOCKET_LEASE_S.

_SLOT_KEY = "streamscope:ws:{}:{}"
SOCKET_LEASE_S = 30
SOCKET_RENEW_S = 10


def take_socket_slot(user_id, owner):
    """The cache key of a free slot now held by `owner` (a unique string), or None (sync)."""
    cap = conf.get().max_sockets_per_user
    keys = [_SLOT_KEY.format(user_id, i) for i in range(cap)]
    held = cache.get_many(keys)
    for key in keys:
        # `add` is atomic (SET NX in Redis): two processes cannot take one slot
        if key not in held and cache.add(key, owner, timeout=SOCKET_LEASE_S):
            return key
    return None


def renew_socket_slots(slots):
    """Renew leases: `slots` maps cache key -> owner."""
    if slots:
        cache.set_many(slots, timeout=SOCKET_LEASE_S)


def free_socket_slot(key, owner):
    if cache.get(key) == owner:  # not a slot whose lease ran out and went to someone else
        cache.delete(key)
