"""Each of the event's shapes has one home, its row the store's (streams/store/event_row.py) and
its live message the outward shapes' (streams/shapes/event_message.py): every column of `Event`
is placed in the row, the message reads back columns of `Event`, and what their makers build is
what the database stores and the relay reads back."""

import ast
import datetime as dt
import re

import pytest

from streams.models import Event
from streams.shapes import event_message
from streams.store import event_row, rows
from tests.support.paths import REPO
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
# a list. A list of them is a channel-layer message's `["events"]`, an object's `.events`, what
# the event reader (`stored_events.read`) or a `values_list` reads with the message's columns
# (`…MESSAGE_COLUMNS`, or a name or attribute bound to them, a parameter's default included), what
# a function of the same module returns when it returns such a list (called directly, as a
# method, or through a wrapper such as `await db_read(f)(…)`), a list that one is appended to or
# that such a list extends, a slice or `list()` of one, and, in a module that imports the shapes,
# a parameter or loop variable named as the writer and the relay name them (`events`,
# `payloads`, `messages`).

SHAPE_MODULES = {"streams.store.event_row", "streams.shapes.event_message"}
MAKERS = {"row", "proxied_row", "message", "proxied", "with_data"}
LIST_PARAMETERS = {"events", "payloads", "messages"}
MESSAGE, LIST = "an event's tuple", "a list of them"
PAIRS = "(list of them, anything) pairs"  # what the relay's frame fitting returns
# a module holds an event's tuple only through one of these words (the shape modules, a
# message's "events", the message's columns)
CLUES = ("event_row", "event_message", "events", "MESSAGE_COLUMNS")
ROOT = REPO


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
        self._nodes = {}  # id(function) -> its own nodes (read once: scope runs many times)
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
        # attributes bound to the message's columns anywhere (`self.columns = …`)
        self.column_attributes = {
            target.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and _names_columns(node.value)
            for target in node.targets
            if isinstance(target, ast.Attribute)
        }
        # {name: LIST or PAIRS} of the functions (and methods) of the module returning either
        self.readers = {}
        functions = [
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        returning = [f for f in functions if any(isinstance(n, ast.Return) for n in self.own(f))]
        while True:  # (a reader may return what another reader returns)
            before = dict(self.readers)
            for function in returning:
                held, makers, columns = self.scope(function)
                for node in self.own(function):
                    if isinstance(node, ast.Return) and node.value is not None:
                        kind = self.kind(node.value, held, makers, columns)
                        if kind in (LIST, PAIRS):
                            self.readers[function.name] = kind
            if self.readers == before:
                break

    def own(self, function):
        """The nodes of `function` (or the module), its nested functions aside; read once."""
        nodes = self._nodes.get(id(function))
        if nodes is None:
            nodes = self._nodes[id(function)] = list(_own_nodes(function))
        return nodes

    def is_columns(self, node, columns):
        """Whether `node` is the message's columns: spelt, or a name or attribute bound to them."""
        if isinstance(node, ast.Starred):
            node = node.value
        if isinstance(node, ast.Name) and node.id in columns:
            return True
        if isinstance(node, ast.Attribute) and node.attr in self.column_attributes:
            return True
        return _names_columns(node)

    def reader(self, node):
        """LIST or PAIRS when `node` names a function of this module returning that."""
        if isinstance(node, ast.Name):
            return self.readers.get(node.id)
        return self.readers.get(node.attr) if isinstance(node, ast.Attribute) else None

    def is_maker(self, node, makers):
        if isinstance(node, ast.Attribute):
            return node.attr in MAKERS and ast.unparse(node.value).split(".")[-1] in {
                m.split(".")[-1] for m in self.modules
            }
        return isinstance(node, ast.Name) and node.id in makers

    def kind(self, node, held, makers, columns=frozenset()):
        if isinstance(node, ast.Await):
            return self.kind(node.value, held, makers, columns)
        if isinstance(node, ast.Call):
            if self.is_maker(node.func, makers):
                return MESSAGE
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("list", "sorted", "reversed"):
                return self.kind(node.args[0], held, makers, columns) if node.args else None
            if isinstance(func, ast.Attribute) and func.attr in ("values_list", "read"):
                given = [*node.args, *(k.value for k in node.keywords)]
                if any(self.is_columns(a, columns) for a in given):
                    return LIST
            if (kind := self.reader(func)) is not None:
                return kind
            if isinstance(func, ast.Call):  # (`db_read(_events_between)(…)`)
                for kind in map(self.reader, func.args):
                    if kind is not None:
                        return kind
            return None
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Tuple) and first.elts:  # (`[(events, text)]`)
                if self.kind(first.elts[0], held, makers, columns) == LIST:
                    return PAIRS
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            kinds = {self.kind(n, held, makers, columns) for n in (node.left, node.right)}
            return PAIRS if PAIRS in kinds else (LIST if LIST in kinds else None)
        if isinstance(node, ast.Name):
            return held.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr == "events":
            return LIST
        if isinstance(node, ast.Subscript):
            s = node.slice
            if isinstance(s, ast.Constant) and s.value == "events":
                return LIST  # a channel-layer message's events
            if self.kind(node.value, held, makers, columns) == LIST:
                return LIST if isinstance(s, ast.Slice) else MESSAGE
        return None

    def scope(self, function):
        """({name: kind}, maker aliases, names of the message's columns) of a function (or the
        module), its nested functions aside."""
        held, makers, columns = {}, set(self.makers), set()
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            args = function.args
            positional = args.posonlyargs + args.args
            with_default = positional[len(positional) - len(args.defaults) :]
            defaults = [
                *zip(with_default, args.defaults, strict=True),
                *zip(args.kwonlyargs, args.kw_defaults, strict=True),
            ]
            columns |= {a.arg for a, d in defaults if d is not None and _names_columns(d)}
            if self.imports_shapes:
                for arg in args.args + args.kwonlyargs:
                    if arg.arg in LIST_PARAMETERS:
                        held[arg.arg] = LIST
        nodes = self.own(function)
        while True:  # (a binding may read one made later in the source)
            known = (dict(held), set(makers), set(columns))
            for node in nodes:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and self.is_columns(node.value, columns):
                            columns.add(target.id)
                        self.bind(target, node.value, held, makers, columns)
                elif isinstance(node, ast.AugAssign):  # (`out += page`)
                    if (
                        isinstance(node.target, ast.Name)
                        and self.kind(node.value, held, makers, columns) == LIST
                    ):
                        held[node.target.id] = LIST
                elif isinstance(node, ast.Call):
                    self.gather(node, held, makers, columns)
                elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                    over = self.kind(node.iter, held, makers, columns)
                    target = node.target
                    if over == LIST and isinstance(target, ast.Name):
                        held[target.id] = MESSAGE
                    elif over == PAIRS and isinstance(target, ast.Tuple) and target.elts:
                        if isinstance(target.elts[0], ast.Name):
                            held[target.elts[0].id] = LIST
                    elif self.imports_shapes:  # (`for rec, payloads in per_stream.items()`)
                        for name in ast.walk(node.target):
                            if isinstance(name, ast.Name) and name.id in LIST_PARAMETERS:
                                held[name.id] = LIST
            if known == (held, makers, columns):
                return held, makers, columns

    def gather(self, call, held, makers, columns):
        """A list an event is appended to (or inserted into), or that a list of them extends,
        is a list of them: `out.append(e)`, `out.extend(page)`."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return
        wanted = {"append": MESSAGE, "insert": MESSAGE, "extend": LIST}.get(func.attr)
        if wanted and call.args and self.kind(call.args[-1], held, makers, columns) == wanted:
            held[func.value.id] = LIST

    def bind(self, target, value, held, makers, columns=frozenset()):
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):
                self.bind(t, v, held, makers, columns)
        elif isinstance(target, ast.Name):
            if self.is_maker(value, makers):
                makers.add(target.id)
            elif (kind := self.kind(value, held, makers, columns)) is not None:
                held[target.id] = kind


def _names_columns(node):
    """Whether `node` spells the message's columns (`MESSAGE_COLUMNS`, its proxied form)."""
    return any(
        "MESSAGE_COLUMNS" in (n.id if isinstance(n, ast.Name) else n.attr)
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    )


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
    if not any(word in source for word in CLUES):
        return []  # (nothing here can hold one: the walk of the house stays quick)
    tree = ast.parse(source)
    shapes = _Shapes(tree)
    found = []
    scopes = [tree] + [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    for scope in scopes:
        held, makers, columns = shapes.scope(scope)
        for node in shapes.own(scope):
            if (
                isinstance(node, ast.Subscript)
                and _constant_index(node)
                and shapes.kind(node.value, held, makers, columns) == MESSAGE
            ):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_nothing_indexes_an_events_tuple_by_number_outside_its_shapes():
    owners = {ROOT / "streams/store/event_row.py", ROOT / "streams/shapes/event_message.py"}
    offending, walked = [], 0
    for package in ("streams", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in owners or "migrations" in path.parts:
                continue
            walked += 1
            found = positional_reaches(path.read_text())
            offending += [f"{path.relative_to(ROOT)}:{line}: {code}" for line, code in found]
    # (it walked nothing for a while: its root was tests/streams/ once the tests moved there)
    assert walked > 200, f"walked {walked} modules: is ROOT the repository?"
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
        # what the event reader returns, through a function of the module and a wrapper
        READER + "async def f(db_read, sid):\n"
        "    page = await db_read(between)(sid, 0)\n    return page[-1][0]",
        # a list gathered from one
        READER + "def f(sid):\n    out = []\n    out.extend(between(sid, 0))\n"
        "    return [out[j][4] for j in range(2)]",
        READER + "def f(sid):\n    out = []\n    for e in between(sid, 0):\n"
        "        out.append(e)\n    return out[0][1]",
        # the columns held by an attribute
        READER + "class C:\n    def __init__(self):\n        self.columns = MESSAGE_COLUMNS\n"
        "    def f(self, sid):\n        rows = stored_events.read(sid, self.columns)\n"
        "        return rows[0][1]",
        # the first of the pairs the frame fitting returns
        READER + "def fit(events):\n    return [(events, 'x')]\n"
        "def f(events):\n    for part, text in fit(events[:1]) + fit(events[1:]):\n"
        "        return part[-1][0]",
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
        # the reader with other columns than the message's, a list of other tuples
        READER + "def f(sid):\n    rows = stored_events.read(sid, ('t_us', 'data'))\n"
        "    return [r[0] for r in rows]",
        READER + "def f():\n    out = []\n    out.append((1, 2))\n    return out[0][1]",
    ]
    for source in allowed:
        assert positional_reaches(source) == [], source


READER = (
    "from streams.shapes.event_message import MESSAGE_COLUMNS\n"
    "from streams.store import events as stored_events\n"
    "def between(sid, after, columns=MESSAGE_COLUMNS):\n"
    "    return stored_events.read(sid, columns, after=after)\n"
)


@pytest.mark.parametrize(
    "module, at_least",
    [("streams/live/consumers.py", 10), ("streams/ingest/writer.py", 1)],
)
def test_a_number_planted_for_any_named_position_of_the_relay_or_the_writer_is_caught(
    module, at_least
):
    """Each place the consumers and the writer read an event's tuple by a named position,
    planted with a number instead (`e[DATA]` -> `e[4]`), fails the check at its line: the check
    follows every event's tuple these modules read, not only the ones its self-test spells."""
    source = (ROOT / module).read_text()
    named = list(re.finditer(r"\[(INDEX|DATA)\]", source))
    assert len(named) >= at_least, "the module reads fewer named positions than it did"
    missed = []
    for match in named:
        line = source.count("\n", 0, match.start()) + 1
        planted = source[: match.start()] + "[4]" + source[match.end() :]
        if line not in {n for n, _ in positional_reaches(planted)}:
            missed.append(f"{module}:{line}: {source.splitlines()[line - 1].strip()}")
    assert not missed, "a number planted here went unseen:\n" + "\n".join(missed)


# ---- nothing spells an event's row out by position ----------------------------------------------

# A source that could write event rows (the writers that take them, or the row's columns): only
# these are read, so the walk of the house stays quick.
ROW_CLUES = ("insert_events", "insert_flat", "write_batch", "ROW_COLUMNS", "event_row")
# A row's values spelled out one by one: as many as the row (plain or proxied) has, or one fewer
# (a literal written before the last column came, which would shift every value after it).
ROW_LENGTHS = {
    len(event_row.ROW_COLUMNS) - 1,
    len(event_row.ROW_COLUMNS),
    len(event_row.PROXIED_ROW_COLUMNS),
}


def positional_rows(source):
    """[(line, first values)] of each tuple or list literal in `source` that spells an event's
    row out by position: a row's length of values, the first a stream's id (`….pk`,
    `stream_id`) or one of them a number, a flag or None (a list of names or of snippets of
    code is not a row)."""
    if not any(word in source for word in ROW_CLUES):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Tuple | ast.List)
            and len(node.elts) in ROW_LENGTHS
            and (_a_stream_id(node.elts[0]) or any(map(_a_plain_constant, node.elts)))
        ):
            found.append((node.lineno, ast.unparse(node)[:60]))
    return found


def _a_stream_id(node):
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name in ("pk", "id", "stream_id", "sid")


def _a_plain_constant(node):
    return isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes)


def test_nothing_spells_an_events_row_out_by_position():
    """Rows are made by `event_row.row` (or `sql_row`, by name): a row written value by value,
    in a test's helper too, shifts every value after a new column into the wrong one (the
    preamble column did that to a helper once) instead of failing. Tests build theirs with
    tests/support/recording.py's `event_values`."""
    owner = ROOT / "streams/store/event_row.py"
    offending, walked = [], 0
    for package in ("streams", "dashboard", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == owner or "migrations" in path.parts:
                continue
            walked += 1
            found = positional_rows(path.read_text())
            offending += [f"{path.relative_to(ROOT)}:{line}: {code}" for line, code in found]
    assert walked > 400, f"walked {walked} modules: is ROOT the repository?"
    assert not offending, "make the row with event_row.row:\n" + "\n".join(offending)


def test_the_row_check_sees_what_it_is_for():
    values = ["sid", "i", "t", "at", "'message'", "''", "'x'", "i", "None", "None", "True"]
    values += ["'{}'", "None", "''", "None"]  # (the proxied row's length)
    named = ["s.pk", "i", "t", "at", "name", "sse_id", "o.get('type')", "o.get('n')", "o.get('o')"]
    named += ["o.get('c')", "bool(o)", "data", "raw", "''", "sent"]  # (no number, flag or None)
    for n in ROW_LENGTHS:
        for brackets in ("[]", "()"):
            for row in (values, named):
                spelled = brackets[0] + ", ".join(row[:n]) + brackets[1]
                source = f"from streams.store import rows\nrows.insert_events([{spelled}])"
                assert positional_rows(source), source
    allowed = [
        # by the row's maker, the row's columns named, a list of names, code with no rows
        "from streams.store import event_row\nv = event_row.row(1, 0, 0, None, sse, checked)",
        "from streams.store.event_row import ROW_COLUMNS\n"
        "names = (" + ", ".join(f"'c{i}'" for i in range(len(event_row.ROW_COLUMNS))) + ")",
        "x = [" + ", ".join(values) + "]",
        "from streams.store import rows\nsnippets = [" + ", ".join(["a + 'b'"] * 14) + "]",
    ]
    for source in allowed:
        assert positional_rows(source) == [], source
