"""What a notification says, whichever channel carries it: a `Message`.

The caller (an alert rule's firing, a channel's test) builds it in the project's language;
each channel's format (streams/notify/kinds.py) renders it. It is bounded when made (a caller
cannot hand a channel a megabyte) and redacted where it is stored and again where it leaves
(`redacted`): a notification is built from stored text and read by people outside.
"""

from __future__ import annotations

import dataclasses
import math

from django.conf import settings

from streams.store import known_secrets

MAX_SUBJECT_CHARS = 200
MAX_LINES = 30
MAX_LINE_CHARS = 1000
MAX_FIELDS = 20
MAX_FIELD_CHARS = 200
MAX_SERIES = 200
MAX_LINKS = 10
MAX_URL_CHARS = 2000


def _cut(text, limit):
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclasses.dataclass(frozen=True)
class Message:
    """subject: one line; lines: the body's paragraphs; fields: {label: value} (a value and
    its threshold, the window, the scope); series: numbers for a sparkline where the channel
    draws one (oldest first; NaN and infinities dropped); links: [(label, absolute URL)];
    language: the language code the texts are in."""

    subject: str
    lines: tuple = ()
    fields: dict = dataclasses.field(default_factory=dict)
    series: tuple = ()
    links: tuple = ()
    language: str = ""

    def __post_init__(self):
        bound = object.__setattr__
        bound(self, "subject", _cut(" ".join(str(self.subject).split()), MAX_SUBJECT_CHARS))
        bound(self, "lines", tuple(_cut(x, MAX_LINE_CHARS) for x in list(self.lines)[:MAX_LINES]))
        bound(
            self,
            "fields",
            {
                _cut(k, MAX_FIELD_CHARS): _cut(v, MAX_FIELD_CHARS)
                for k, v in list(dict(self.fields).items())[:MAX_FIELDS]
            },
        )
        numbers = []
        for x in list(self.series)[-MAX_SERIES:]:
            try:
                x = float(x)
            except (TypeError, ValueError):
                continue
            if math.isfinite(x):
                numbers.append(x)
        bound(self, "series", tuple(numbers))
        links = []
        for label, url in list(self.links)[:MAX_LINKS]:
            url = str(url)
            # only web links: a receiver renders them as links (no javascript:, no data:)
            if url.startswith(("https://", "http://")) and len(url) <= MAX_URL_CHARS:
                links.append((_cut(label, MAX_FIELD_CHARS), url))
        bound(self, "links", tuple(links))
        bound(self, "language", str(self.language or settings.LANGUAGE_CODE)[:10])

    def as_json(self):
        return {
            "subject": self.subject,
            "lines": list(self.lines),
            "fields": dict(self.fields),
            "series": list(self.series),
            "links": [list(pair) for pair in self.links],
            "language": self.language,
        }

    @classmethod
    def from_json(cls, data):
        data = data if isinstance(data, dict) else {}
        return cls(
            subject=data.get("subject", ""),
            lines=data.get("lines") or (),
            fields=data.get("fields") or {},
            series=data.get("series") or (),
            links=[pair for pair in data.get("links") or () if len(pair) == 2],
            language=data.get("language", ""),
        )

    def redacted(self):
        """This message without any secret the egress gate knows (other processes' keys read
        first): every text, labels and links included."""
        rules = known_secrets.fresh_rules()
        if not rules:
            return self
        clean = rules.text
        return Message(
            subject=clean(self.subject),
            lines=[clean(x) for x in self.lines],
            fields={clean(k): clean(v) for k, v in self.fields.items()},
            series=self.series,
            links=[(clean(label), clean(url)) for label, url in self.links],
            language=self.language,
        )
