"""Notifications: channels (where), messages (what) and their delivery (docs/alerts.md).

    from streams import notify
    notify.send(channels, notify.Message(subject=…, lines=[…]), key="rule-7-firing-3")

`send` is the one way to notify: one Delivery per enabled channel, never two for the same
key and channel; the delivery job (streams/notify/deliver.py) sends them off the loop."""

from streams.notify.message import Message  # noqa: F401


def send(channels, message, key):
    from streams.notify import deliver  # (the models: imported once the apps are ready)

    return deliver.send(channels, message, key)
