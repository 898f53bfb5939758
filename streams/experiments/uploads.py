"""Dataset items from an uploaded file: JSON Lines (one item object a line, `clean_item`'s
fields) or CSV (a header row naming the columns `input`, `expected_output`, `instructions`,
`metadata` (JSON), `tools` (JSON)). Every bad line is reported by its number and nothing is
added unless every line is good; the size is bounded before anything is parsed and again
while reading (a declared length can lie, and a stream has none)."""

import csv
import io

from streams.core import conf, safejson
from streams.experiments import datasets

# bad lines reported at most (the rest are counted)
MAX_REPORTED = 50


def max_bytes():
    """The largest upload read: the capture uploads' limit (UPLOAD_MAX_BYTES)."""
    return conf.get().upload_max_bytes


class TooLarge(ValueError):
    def __init__(self, limit):
        super().__init__(f"The file is over the limit of {limit:,} bytes.")
        self.limit = limit


def refuse_declared(length):
    """Raise TooLarge for a declared length over the limit (before a byte is read)."""
    try:
        declared = int(length or 0)
    except (TypeError, ValueError):
        declared = 0
    if declared > max_bytes():
        raise TooLarge(max_bytes())


def read_bounded(stream, limit=None):
    """All of `stream`'s bytes, or TooLarge as soon as more than `limit` have come."""
    limit = max_bytes() if limit is None else limit
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit)
    return data


def parse(data, name=""):
    """(items, errors) of an upload's bytes: errors are (line number, message); items are
    empty whenever errors are not. CSV when `name` ends in .csv or the first line is not
    JSON."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [], [(0, f"The file is not UTF-8 text ({exc.reason} at byte {exc.start}).")]
    first = text.lstrip()[:1]
    if name.lower().endswith(".csv") or (first and first not in "{["):
        items, errors = _csv(text)
    else:
        items, errors = _jsonl(text)
    if not items and not errors:
        errors = [(0, "The file has no items.")]
    return ([] if errors else items), errors


def _report(errors, number, message):
    if len(errors) < MAX_REPORTED:
        errors.append((number, message))
    elif len(errors) == MAX_REPORTED:
        errors.append((number, "… and more bad lines after this one."))


def _jsonl(text):
    items, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(datasets.clean_item(safejson.loads(line)))
        except datasets.Refused as exc:
            _report(errors, number, str(exc))
        except ValueError as exc:
            _report(errors, number, f"Not JSON: {exc}")
    return items, errors


_CSV_JSON = ("metadata", "tools")


def _csv(text):
    items, errors = [], []
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
        if not reader.fieldnames or "input" not in reader.fieldnames:
            return [], [(1, "The header row has no 'input' column.")]
        for row in reader:
            number = reader.line_num
            if None in row:
                _report(errors, number, "More values than the header has columns.")
                continue
            data = {k: v for k, v in row.items() if k and v not in (None, "")}
            try:
                for key in _CSV_JSON:
                    if key in data:
                        data[key] = safejson.loads(data[key])
                items.append(datasets.clean_item(data))
            except datasets.Refused as exc:
                _report(errors, number, str(exc))
            except ValueError as exc:
                _report(errors, number, f"Not JSON in a JSON column: {exc}")
    except csv.Error as exc:
        _report(errors, reader.line_num, f"Not CSV: {exc}")
    return items, errors
