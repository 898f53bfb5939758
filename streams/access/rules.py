"""Who may see what: a user sees their own streams; staff see every stream. A stream someone
may not see is reported as not found, so ids of other users' streams do not leak."""

from streams.models import Stream


def streams_for(user):
    """The streams `user` may see."""
    if user is None or not user.is_authenticated:
        return Stream.objects.none()
    if user.is_staff:
        return Stream.objects.all()
    return Stream.objects.filter(user_id=user.pk)


def may_see(user, stream_user_id):
    return bool(
        user is not None and user.is_authenticated and (user.is_staff or stream_user_id == user.pk)
    )
