"""What a text column can store: one rule for every write of text.

Every text value written passes `storable` — the text fields of every model (`streams.fields`)
call it where a value enters SQL, whoever writes (the ORM's create, save, update, bulk writes,
the row module's raw UPDATE), and the row module calls it on the raw event INSERT / COPY and
before it publishes a stream's fields, so what is shown live is what is stored:

- a value is cut to its column's `max_length` (characters, as `varchar(n)` counts them, never
  between the two halves of a surrogate pair): PostgreSQL refuses a longer one ("value too long
  for type character varying"), SQLite stores it whole, and the two would differ;
- a NUL (U+0000) becomes U+FFFD, the replacement character, in text and in JSON (strings and
  keys): PostgreSQL refuses NUL in `text`, `varchar` and `jsonb` (SQLite takes it). Replaced,
  not escaped: an escape such as `\\0` would read back as text the upstream sent, while U+FFFD
  says a character was here that could not be kept, as it does for invalid UTF-8; an event's
  `raw` bytes (and a capture's) keep the NUL.

Lone surrogates are not made storable here: the JSON reader refuses them at the door
(`safejson`), and a driver that cannot encode one refuses the stream's rows as a data error
(streams/store/rows.py, `write_batch`).
"""

import json

NUL = "\x00"
REPLACEMENT = "\ufffd"


def cut(text, limit):
    """`text` cut to `limit` characters (what a `varchar(limit)` counts), never between the
    two halves of a surrogate pair."""
    if len(text) <= limit:
        return text
    end = limit
    if end and "\ud800" <= text[end - 1] <= "\udbff" and "\udc00" <= text[end] <= "\udfff":
        end -= 1
    return text[:end]


def storable(text, limit=None):
    """`text` as a column of `limit` characters (None: unbounded) stores it."""
    if NUL in text:
        text = text.replace(NUL, REPLACEMENT)
    if limit is not None and len(text) > limit:
        text = cut(text, limit)
    return text


def storable_json(value, encoder=None):
    """Decoded JSON `value` with every NUL in its strings and keys replaced: `value` itself
    when it has none (one dump in C tells, mostly: JSON writes a NUL as `\\u0000`, and a
    backslash before `u0000` in a string as `\\\\u0000`, which the walk then finds clean)."""
    try:
        if "\\u0000" not in json.dumps(value, cls=encoder):
            return value
    except (TypeError, ValueError):
        return value  # (not JSON: the field's own encoding says so)
    replaced = _replaced(value)
    return value if replaced == value else replaced


def _replaced(value):
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT)
    if isinstance(value, dict):
        return {_replaced(k): _replaced(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_replaced(v) for v in value]
    return value
