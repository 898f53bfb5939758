"""A real SMTP server for tests that send mail (invitations): aiosmtpd on 127.0.0.1, with
Django's SMTP backend pointed at it for the test.

    with smtp_server(settings) as inbox:   # pytest-django's `settings` fixture
        ...
        recipients, message = inbox.messages[0]   # an email.message.Message
"""

import contextlib
import email

from aiosmtpd.controller import Controller

from streams.bench import free_port


class Inbox:
    """aiosmtpd's handler: every message the server accepts, parsed."""

    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, email.message_from_bytes(envelope.content)))
        return "250 OK"

    def body(self, n=-1):
        """The text of the `n`th message received."""
        return self.messages[n][1].get_payload(decode=True).decode()


@contextlib.contextmanager
def smtp_server(settings):
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    try:
        yield inbox
    finally:
        controller.stop()
