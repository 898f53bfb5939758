"""The language of a response: a page's is the user's (the switcher's cookie, then the
browser's Accept-Language, as Django's LocaleMiddleware decides); data is never translated.

The JSON API, the exports (`.sse`, `.json`), the proxy's `/v1`, `/metrics` and the JavaScript
that reads data (`timing.json`, `replay.json`) answer in the project's language whatever the
request asks for, so a client never gets a Dutch error message or field where it parses
English, and a page in Dutch shows recorded events and model output as they were sent.
"""

from django.conf import settings
from django.middleware.locale import LocaleMiddleware
from django.utils import translation

DATA_PREFIXES = ("/api/", "/v1/", "/metrics")
DATA_SUFFIXES = (".sse", ".json", ".csv")


def is_data(path):
    """Whether `path` answers with data (never translated) rather than a page."""
    return path.startswith(DATA_PREFIXES) or path.endswith(DATA_SUFFIXES)


class PageLanguageMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware for pages; the project's language for data."""

    def process_request(self, request):
        if is_data(request.path):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = settings.LANGUAGE_CODE
            return
        super().process_request(request)

    def process_response(self, request, response):
        if is_data(request.path):
            return response
        return super().process_response(request, response)
