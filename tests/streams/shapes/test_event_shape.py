"""Each of the event's shapes has one home, its row the store's (streams/store/event_row.py) and
its live message the outward shapes' (streams/shapes/event_message.py): every column of `Event`
is placed in the row, the message reads back columns of `Event`, and what their makers build is
what the database stores and the relay reads back."""

import ast
import datetime as dt
import pathlib

import pytest

from streams.models import Event
from streams.shapes import event_message
from streams.store import event_row, rows
from tests.support.recording import body


def test_every_column_of_the_event_is_placed():
    """Walked from the model, not listed: a new column of `Event` is written by the row (and so
    by every writer: the recorder, the importer, `seed_demo`) or filled by the database."""
    columns = {f.column for f in Event._meta.concrete_fields}
    placed = set(event_row.PROXIED_ROW_COLUMNS) | set(event_row.DATABASE_FILLS)
    assert columns - placed == set(), "place these in streams/store/event_row.py"
    assert placed - columns == set(), "not columns of Event"
    assert not set(event_row.PROXIED_ROW_COLUMNS) & set(event_row.DATABASE_FILLS)
    assert set(event_message.PROXIED_MESSAGE_COLUMNS) <= columns


@pytest.mark.django_db
@pytest.mark.parametrize("proxied", [False, True], ids=["plain", "proxied"])
def test_a_row_is_stored_column_by_column_and_read_back_as_its_message(proxied):
    """What `row` makes lands in the columns `ROW_COLUMNS` names (each value distinct, so a
    swap fails), and the relay's read of the stored event is the message the recorder sent."""
    stream = rows.new_row(None, body())
    start = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    sse = event_row.Received("ev", "id-9", '{"type":"x"}', b"\xff", ": keep-alive\n\n")
    checked = event_row.Checked("response.output_text.delta", 11, 12, 13, False)
    if proxied:
        values = event_row.proxied_row(stream.pk, 7, 1500, start, sse, checked, 2500)
        columns = event_row.PROXIED_ROW_COLUMNS
    else:
        values = event_row.row(stream.pk, 7, 1500, start, sse, checked)
        columns = event_row.ROW_COLUMNS
    assert len(values) == len(columns)
    rows.insert_flat(list(values), offsets=True, columns=columns)
    stored = Event.objects.filter(stream=stream).values(*columns).get()
    stored["raw"] = bytes(stored["raw"])
    assert stored == {
        "stream_id": stream.pk,
        "index": 7,
        "t_us": 1500,
        "received_at": start + dt.timedelta(microseconds=1500),  # the start + t_us
        "event_name": "ev",
        "sse_id": "id-9",
        "type": "response.output_text.delta",
        "sequence_number": 11,
        "output_index": 12,
        "content_index": 13,
        "is_json": False,
        "data": '{"type":"x"}',
        "raw": b"\xff",
        "preamble": ": keep-alive\n\n",
        **({"sent_us": 2500} if proxied else {}),
    }
    message = event_message.message(7, 1500, checked, sse.data)
    message_columns = event_message.MESSAGE_COLUMNS
    if proxied:
        message = event_message.proxied(message, 2500)
        message_columns = event_message.PROXIED_MESSAGE_COLUMNS
    read = Event.objects.filter(stream=stream).values_list(*message_columns).get()
    assert read == message
    assert event_message.with_data(event_message.message(7, 1500, checked, "x" * 9, 8), "d") == (
        7,
        "response.output_text.delta",
        11,
        1500,
        "d",
    )


def test_the_named_positions_are_the_columns():
    message = event_message.message(4, 10, event_row.Checked("t", 4, None, None, True), "data")
    assert message[event_message.INDEX] == 4 and message[event_message.DATA] == "data"
    assert event_row.ROW_COLUMNS[event_row.ROW_T_US] == "t_us"
    assert event_row.ROW_COLUMNS[event_row.ROW_RECEIVED_AT] == "received_at"
    assert event_row.ROW_COLUMNS[event_row.ROW_STREAM_ID] == "stream_id"


def test_the_sql_row_orders_by_column_and_refuses_a_stranger():
    columns, values = event_row.sql_row(data="d", stream_id="s")
    assert columns == event_row.ROW_COLUMNS
    assert dict(zip(columns, values, strict=True)) == {
        **dict.fromkeys(columns, "NULL"),
        "data": "d",
        "stream_id": "s",
    }
    with pytest.raises(ValueError, match="sent_me"):
        event_row.sql_row(sent_me="1")


# ---------------------------------------------------------------------------------------------
# Nothing indexes an event's tuple by number outside the two modules that own its shapes
#
# Read from the source (AST). Which names hold an event's tuple is followed, not guessed from a
# name: what the makers return (`event_row.row`, `proxied_row`, `event_message.message`,
# `proxied`, `with_data`, called by their module or imported, or through an alias such as the
# recorder's `row = event_row.row`), an element of a list of them, and a loop variable over such
# a list. A list of them is a channel-layer message's `["events"]`, an object's `.events`, the
# rows a `values_list(*…MESSAGE_COLUMNS)` reads, a slice or `list()` of one, and, in a module
# that imports the shapes, a parameter or loop variable named as the writer and the relay name
# them (`events`, `payloads`, `messages`).

SHAPE_MODULES = {"streams.store.event_row", "streams.shapes.event_message"}
MAKERS = {"row", "proxied_row", "message", "proxied", "with_data"}
LIST_PARAMETERS = {"events", "payloads", "messages"}
MESSAGE, LIST = "an event's tuple", "a list of them"
ROOT = pathlib.Path(__file__).resolve().parent.parent


def _constant_index(node):
    """A subscript's index that is a number (`[4]`, `[-1]`) or a slice (`[1:]`)."""
    s = node.slice
    if isinstance(s, ast.Slice):
        return True
    if isinstance(s, ast.UnaryOp) and isinstance(s.op, ast.USub):
        s = s.operand
    return isinstance(s, ast.Constant) and type(s.value) is int


class _Shapes:
    """What one module's names hold, flow-insensitively per function (a name bound to an
    event's tuple anywhere in a function holds one everywhere in it)."""

    def __init__(self, tree):
        self.modules = set()  # local names of the shape modules
        self.makers = set()  # local names of their makers
        self.imports_shapes = False  # anything of them
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                self.imports_shapes |= node.module in SHAPE_MODULES
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in SHAPE_MODULES:
                        self.modules.add(alias.asname or alias.name)
                    elif node.module in SHAPE_MODULES and alias.name in MAKERS:
                        self.makers.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in SHAPE_MODULES:
                        self.modules.add(alias.asname or alias.name)
        self.imports_shapes |= bool(self.modules)

    def is_maker(self, node, makers):
        if isinstance(node, ast.Attribute):
            return node.attr in MAKERS and ast.unparse(node.value).split(".")[-1] in {
                m.split(".")[-1] for m in self.modules
            }
        return isinstance(node, ast.Name) and node.id in makers

    def kind(self, node, held, makers):
        if isinstance(node, ast.Call):
            if self.is_maker(node.func, makers):
                return MESSAGE
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("list", "sorted", "reversed"):
                return self.kind(node.args[0], held, makers) if node.args else None
            if isinstance(func, ast.Attribute) and func.attr == "values_list":
                starred = [a for a in node.args if isinstance(a, ast.Starred)]
                if any("MESSAGE_COLUMNS" in ast.unparse(a.value) for a in starred):
                    return LIST
            return None
        if isinstance(node, ast.Name):
            return held.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr == "events":
            return LIST
        if isinstance(node, ast.Subscript):
            s = node.slice
            if isinstance(s, ast.Constant) and s.value == "events":
                return LIST  # a channel-layer message's events
            if self.kind(node.value, held, makers) == LIST:
                return LIST if isinstance(s, ast.Slice) else MESSAGE
        return None

    def scope(self, function):
        """({name: kind}, maker aliases) of a function (or the module), its nested functions
        aside."""
        held, makers = {}, set(self.makers)
        if self.imports_shapes and isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in function.args.args + function.args.kwonlyargs:
                if arg.arg in LIST_PARAMETERS:
                    held[arg.arg] = LIST
        nodes = list(_own_nodes(function))
        for _ in range(3):  # (a binding may read one made later in the source)
            for node in nodes:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        self.bind(target, node.value, held, makers)
                elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                    if self.kind(node.iter, held, makers) == LIST and isinstance(
                        node.target, ast.Name
                    ):
                        held[node.target.id] = MESSAGE
                    elif self.imports_shapes:  # (`for rec, payloads in per_stream.items()`)
                        for name in ast.walk(node.target):
                            if isinstance(name, ast.Name) and name.id in LIST_PARAMETERS:
                                held[name.id] = LIST
        return held, makers

    def bind(self, target, value, held, makers):
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):
                self.bind(t, v, held, makers)
        elif isinstance(target, ast.Name):
            if self.is_maker(value, makers):
                makers.add(target.id)
            elif (kind := self.kind(value, held, makers)) is not None:
                held[target.id] = kind


def _own_nodes(scope):
    """The nodes of a function (or module), not those of the functions defined in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def positional_reaches(source):
    """[(line, code)] of each subscript by number or slice of an event's tuple in `source`."""
    tree = ast.parse(source)
    shapes = _Shapes(tree)
    found = []
    scopes = [tree] + [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    for scope in scopes:
        held, makers = shapes.scope(scope)
        for node in _own_nodes(scope):
            if (
                isinstance(node, ast.Subscript)
                and _constant_index(node)
                and shapes.kind(node.value, held, makers) == MESSAGE
            ):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_nothing_indexes_an_events_tuple_by_number_outside_its_shapes():
    owners = {ROOT / "streams/store/event_row.py", ROOT / "streams/shapes/event_message.py"}
    offending = []
    for package in ("streams", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in owners or "migrations" in path.parts:
                continue
            found = positional_reaches(path.read_text())
            offending += [f"{path.relative_to(ROOT)}:{line}: {code}" for line, code in found]
    assert not offending, (
        "name the position (event_row's ROW_…, event_message's INDEX, DATA, …):\n"
        + "\n".join(offending)
    )


def test_the_positional_check_sees_what_it_is_for():
    caught = [
        # a planted `msg[4]` in a scratch module
        "from streams.shapes import event_message\n"
        "def f(checked):\n    msg = event_message.message(0, 1, checked, 'x')\n    return msg[4]",
        "from streams.shapes.event_message import message as make\n"
        "def f(c):\n    return make(0, 1, c, 'x')[-1]",
        "from streams.store import event_row\n"
        "def f(*a):\n    row, proxied_row = event_row.row, event_row.proxied_row\n"
        "    values = row(*a)\n    return values[3]",
        "from streams.store import event_row\ndef f(*a):\n    return event_row.proxied_row(*a)[:2]",
        "def consume(message):\n    for e in message['events']:\n        print(e[1])",
        "from streams.shapes.event_message import INDEX\n"
        "def publish(events):\n    return events[-1][0]",
        "def last(batch):\n    events = batch['events']\n    return [x[0] for x in events[:3]]",
        "from streams.shapes import event_message\n"
        "def f(qs):\n    rows = list(qs.values_list(*event_message.MESSAGE_COLUMNS))\n"
        "    return rows[0][4]",
        "import streams.shapes.event_message as em\n"
        "def f(m, d):\n    return em.with_data(m, d)[1:]",
    ]
    for source in caught:
        assert positional_reaches(source), source
    allowed = [
        # by name, a list of events cut or read at its ends, other tuples
        "from streams.shapes.event_message import DATA, INDEX\n"
        "def publish(events):\n    half = len(events) // 2\n"
        "    return events[-1][INDEX], events[:half], [e[DATA] for e in events]",
        "def f(rows):\n    return [r[0] for r in rows]",  # (no shapes here: `rows` is anything)
        "from streams.shapes import event_message\n"
        "def f(pairs):\n    return [p[1] for p in pairs], pairs[0]",
        "def f(entry):\n    return entry['events'][0] and entry['type'][0]",  # (no index twice)
        "times = [1, 2]\nfirst = times[0]",
    ]
    for source in allowed:
        assert positional_reaches(source) == [], source
