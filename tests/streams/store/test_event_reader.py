"""Stored events are read through one reader (streams/store/events.py): a module that queries
the events table itself (`Event.objects`, SQL on `Event._meta.db_table` or naming the table,
the related `stream.events`, an `events__` lookup) would read rows only, and miss the events of
a compacted stream."""

import ast
import re

from tests.support.paths import REPO

# Who may touch the table, and why.
ALLOWED = {
    "streams/store/events.py": "the reader",
    "streams/store/compact.py": "packs rows into blocks and deletes the rows",
    "streams/store/rows.py": "the writer's inserts",
    "streams/store/retention.py": "deletes what retention says is due",
    "streams/management/commands/seed_demo.py": "writes demo rows by SQL",
}
ALLOWED_UNDER = ("streams/bench/", "streams/migrations/")
MANAGER = {"all", "filter", "exclude", "count", "exists", "order_by", "values", "values_list"}
MANAGER |= {"aggregate", "annotate", "iterator", "first", "last", "get", "aiterator", "acount"}
TABLE = re.compile(r"\bstreams_event\b")


def touches(source, filename="<source>"):
    """[(line, what)] where `source` reads the events table other than through the reader."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute):
            value = node.value
            if isinstance(value, ast.Name) and value.id == "Event" and node.attr == "objects":
                found.append((node.lineno, "Event.objects"))
            if node.attr == "db_table" and isinstance(value, ast.Attribute):
                if isinstance(value.value, ast.Name) and value.value.id == "Event":
                    found.append((node.lineno, "Event._meta.db_table"))
            if node.attr in MANAGER and isinstance(value, ast.Attribute):
                if value.attr == "events" and not isinstance(value.value, ast.Subscript):
                    found.append((node.lineno, f".events.{node.attr}"))
        elif isinstance(node, ast.keyword) and (node.arg or "").startswith("events__"):
            found.append((node.value.lineno, node.arg))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if TABLE.search(node.value) or node.value.startswith("events__"):
                found.append((node.lineno, repr(node.value[:40])))
    return found


def test_the_reader_is_the_only_one_reading_events():
    offenders = []
    for package in ("streams", "dashboard"):
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if name in ALLOWED or name.startswith(ALLOWED_UNDER):
                continue
            for line, what in touches(path.read_text(), name):
                offenders.append(f"{name}:{line}: {what}")
    assert not offenders, "read events through streams/store/events.py:\n" + "\n".join(offenders)


def test_the_check_sees_each_way_of_reading_the_table():
    assert touches("Event.objects.filter(stream_id=1)")
    assert touches("stream.events.all()")
    assert touches("Stream.objects.filter(events__type='x')")
    assert touches("Stream.objects.prefetch_related('events__x')")
    assert touches("cursor.execute('SELECT data FROM streams_event WHERE id = 1')")
    assert touches("qn(Event._meta.db_table)")
    assert not touches("plan.events.append(x)")
    assert not touches("message['events'].count(1)")
    assert not touches("Event._meta.get_field('type')")
    assert not touches("cursor.execute('SELECT 1 FROM streams_eventblock')")
