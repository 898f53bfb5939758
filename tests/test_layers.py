"""The house by stage, kept so: every module of `streams/` and `dashboard/` sits in a layer of
`LAYERS` (docs/architecture.md draws them), imports only its own layer and those below it, and
no import circle exists, lazy imports (inside functions) included.

A new module or package is placed here or this test fails; an import up the path or a circle
fails with the edge that made it. Read from the source (AST), so nothing needs to be imported.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("streams", "dashboard")

# Lowest first. The data path reads bottom to top: pure rules, the schema and what is stored,
# who is asking and what they may see (access), the outward shapes of what is stored (shapes),
# the instruments, the channel layer, the recorder, the orchestration, the exits; then Django's
# fixed places, the commands and benchmarks, and the face (`dashboard`), which nothing imports.
LAYERS = (
    ("streams.core",),
    ("streams.simulator",),
    ("streams.models", "streams.fields"),
    ("streams.store",),
    ("streams.access",),
    ("streams.stats",),
    ("streams.shapes",),
    ("streams.observe",),
    ("streams.live",),
    ("streams.ingest",),
    ("streams.run",),
    ("streams.notify",),
    ("streams.alerts",),
    ("streams.evaluate",),
    ("streams.experiments",),
    ("streams.serve",),
    ("streams", "streams.apps", "streams.admin", "streams.urls", "streams.migrations"),
    ("streams.bench",),
    ("streams.management",),
    ("dashboard", "dashboard.*"),
)


def module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    """{module name: path} of every Python file of the two packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _resolve(name, known):
    """The longest known module `name` names (an attribute import names its module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def from_base(node, module, is_package):
    """The absolute module a `from … import` (an ast.ImportFrom in `module`) imports from,
    relative imports resolved."""
    base = node.module or ""
    if not node.level:
        return base
    anchor = module.split(".")
    if not is_package:
        anchor = anchor[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([base] if base else []))


def edges_of(source, module, known, is_package=False, filename="<source>"):
    """{imported module: line} of `source` (the text of `module`), for the two packages only."""
    edges = {}
    for node in ast.walk(ast.parse(source, filename)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module, is_package)
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            if target.split(".")[0] not in PACKAGES:
                continue
            resolved = _resolve(target, known)
            if resolved and resolved != module:
                edges.setdefault(resolved, node.lineno)
    return edges


def imports(known):
    """{module: {imported module: line}} over `known`, for the two packages only."""
    return {
        module: edges_of(
            path.read_text(), module, known, path.name == "__init__.py", filename=str(path)
        )
        for module, path in known.items()
    }


def layer_of(module):
    """The index in LAYERS of the longest prefix naming `module`'s layer (None: unplaced)."""
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = prefix.endswith(".*") and module.startswith(prefix[:-1])
            inside = inside or (module.startswith(prefix + ".") and prefix not in PACKAGES)
            if (module == prefix or inside) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def circles(graph):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


KNOWN = modules()
GRAPH = imports(KNOWN)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in KNOWN if layer_of(m) is None)
    assert not unplaced, f"place these in tests/test_layers.py's LAYERS: {unplaced}"


def upward(module, edges):
    """[(line, imported module)] of `edges` (a module's imports) that go up the path."""
    return sorted(
        (line, target) for target, line in edges.items() if layer_of(target) > layer_of(module)
    )


def test_no_import_goes_up_the_path():
    found = []
    for module, edges in GRAPH.items():
        path = KNOWN[module].relative_to(ROOT)
        found += [
            f"{path}:{line}: {module} imports {target}" for line, target in upward(module, edges)
        ]
    assert not found, "imports up the path:\n" + "\n".join(sorted(found))


def test_no_import_circles():
    found = circles(GRAPH)
    detail = []
    for component in found:
        members = set(component)
        for module in component:
            for target, line in GRAPH[module].items():
                if target in members:
                    detail.append(f"{KNOWN[module].relative_to(ROOT)}:{line}: imports {target}")
    assert not found, f"import circles {found}:\n" + "\n".join(detail)


def test_the_checks_see_what_they_are_for():
    """The walker finds the graph it guards: a circle and an upward import built here fail."""
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [
        ["a", "b", "c"]
    ]
    assert layer_of("streams.store.rows") < layer_of("streams.ingest.recorder")
    assert layer_of("streams.bench.proxy") < layer_of("dashboard.asgi")
    assert layer_of("streams.nowhere") is None  # a new top-level module must be placed
    assert GRAPH["streams.ingest.recorder"], "the recorder's imports were read"
    lazy = GRAPH["streams.run.shutdown"]
    assert "streams.run.runner" in lazy, "imports inside functions count"


def test_the_rooms_rules_see_what_they_are_for():
    """An import planted against each rule of the rooms between the store and the exits is
    caught, in every spelling; the ways the rooms are meant to be used are not."""
    caught = {
        # the store keeps rows: who asks and what leaves are above it
        "streams.store.rows": [
            "from streams.access import rules",
            "from streams.access.rules import streams_for",
            "from streams.shapes import public",
            "def f():\n    from streams.shapes.event_message import message",  # lazy
        ],
        "streams.store.search": ["import streams.access.throttle", "from ..access import shares"],
        # access decides who may see: it knows nothing of the channel layer, nor of the exits
        "streams.access.rules": [
            "from streams.live import relay",
            "from streams.serve.http import json_error",
            "from ..shapes import public",
        ],
        "streams.access.shares": ["from streams.ingest import recorder"],
        # the outward shapes are built from what is kept, never from what records or serves
        "streams.shapes.public": [
            "from streams.ingest import recorder",
            "from streams.live.relay import stream_group",
            "from streams.run import services",
        ],
        # the figures are read from what is kept, by whoever needs them: the store never asks
        # them, and they neither shape, run nor alert
        "streams.store.aggregates": ["from streams.stats import cube"],
        "streams.stats.source": [
            "from streams.shapes import public",
            "from streams.run import services",
            "def f():\n    from streams.alerts import figures",
        ],
        # the background jobs register themselves (StreamsConfig.ready): run knows none of them
        "streams.run.periodic": [
            "from streams.notify import deliver",
            "def f():\n    from streams.evaluate import online",
        ],
        # notify delivers what it is handed: it knows no alert, judge or experiment
        "streams.notify.deliver": [
            "from streams.alerts import notices",
            "from ..evaluate import judge",
            "import streams.experiments.runs",
        ],
        # alerts read figures and notify; evaluators and experiments are above them
        "streams.alerts.evaluate": [
            "from streams.evaluate import online",
            "from streams.serve.http import json_error",
        ],
        # an evaluator scores a stream; the experiments that use evaluators are above it
        "streams.evaluate.online": ["from streams.experiments import runs"],
        # experiments start streams through run, never through the exits
        "streams.experiments.runs": [
            "from streams.serve import api",
            "from streams.management.commands import experiment",
        ],
        # `streams` never imports the face
        "streams.store.known_secrets": ["from dashboard.queries.stream_list import marked"],
        "streams.access.tokens": ["import dashboard.views.streams"],
        "streams.shapes.event_message": ["from dashboard import vocabulary"],
    }
    for module, sources in caught.items():
        for source in sources:
            edges = edges_of(source, module, KNOWN)
            assert edges and upward(module, edges), f"{module}: {source}"
    allowed = {
        "streams.access.shares": [
            "from streams.store import rows",
            "from streams.models import Stream",
        ],
        "streams.shapes.public": [
            "from streams.store import scores",
            "from streams.core import conf",
        ],
        "streams.live.consumers": [
            "from streams.access import sockets",
            "from streams.shapes import public",
        ],
        "streams.serve.http": ["from streams.access.throttle import token_user"],
        "dashboard.queries.stream_list": ["from streams.access.rules import streams_for"],
        "streams.alerts.figures": ["from streams.stats import source"],
        "streams.alerts.notices": ["from streams.notify import deliver"],
        "streams.evaluate.judge": ["from streams.run import services"],
        "streams.experiments.runs": [
            "from streams.run import services",
            "from streams.evaluate import evaluators",
        ],
        "streams.serve.api": [
            "from streams.experiments import results",
            "from streams.alerts import rules",
        ],
        "streams.notify.deliver": ["from streams.run import periodic"],
    }
    for module, sources in allowed.items():
        for source in sources:
            edges = edges_of(source, module, KNOWN)
            assert edges and not upward(module, edges), f"{module}: {source}"


# ---- tests/: helpers live in tests/support, never in a test module ---------------------------


def imports_of_test_modules(source, module, is_package=False):
    """[(line, imported module)] of the imports in `source` (the text of `module`, a module of
    tests/) that name a test module: `tests.test_*`, `tests.e2e.test_*`, or relatively
    `.test_*` (`from . import test_x` included). Shared helpers belong in tests/support/,
    shared fixtures in a conftest.py."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module, is_package)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            parts = target.split(".")
            if parts[0] == "tests" and any(part.startswith("test_") for part in parts[1:]):
                found.append((node.lineno, target))
                break
    return found


def test_no_module_of_tests_imports_a_test_module():
    offending = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        found = imports_of_test_modules(
            path.read_text(), module_name(path), is_package=path.name == "__init__.py"
        )
        offending += [f"{path.relative_to(ROOT)}:{line}: imports {t}" for line, t in found]
    assert not offending, (
        "import shared helpers from tests/support/ and take shared fixtures from a conftest.py, "
        "not from a test module:\n" + "\n".join(offending)
    )


def test_the_test_module_check_sees_what_it_is_for():
    """Every spelling of an import from a test module is caught; helpers and conftests are not."""
    caught = [
        "from tests.test_recorder import body",
        "from tests.e2e.test_playground_e2e import Playground",
        "from .test_proxy import wait_terminal",
        "from . import test_api",
        "from tests import test_api",
        "import tests.test_api",
        "def f():\n    from .test_redaction import RawUpstream",  # a lazy import
    ]
    for source in caught:
        assert imports_of_test_modules(source, "tests.test_x"), source
    assert imports_of_test_modules("from ..test_api import bearer", "tests.e2e.test_x") == [
        (1, "tests.test_api")
    ]
    assert imports_of_test_modules("from .test_inspection_e2e import x", "tests.e2e.test_y") == [
        (1, "tests.e2e.test_inspection_e2e")
    ]
    allowed = [
        "from tests.support.recording import body",
        "from .support import wire",
        "from tests.conftest import DaphneServer",
        "from tests.e2e.conftest import TIMEOUT_MS",
        "import pytest",
        "from streams.store import rows",
    ]
    for source in allowed:
        assert imports_of_test_modules(source, "tests.test_x") == [], source


# ---- no module reaches into another's private names -----------------------------------------


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(source, module, known, is_package=False):
    """[(line, what)] of the places in `source` (the text of `module`) that use a private name
    (`_x`, not `__dunder__`) of another module of the two packages: `from X import _x` and
    `X._x` where `X` is bound to a module by an import (lazy imports included). A name shared
    between modules is public in the module that owns it."""
    tree = ast.parse(source)
    bound = {}  # local name -> the module of the two packages it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in PACKAGES:
                    continue
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    bound[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, module, is_package)
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if _is_private(alias.name) and base != module:
                    found.append((node.lineno, f"from {base} import {alias.name}"))
                if f"{base}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not (isinstance(value, ast.Name) and value.id in bound):
            continue
        owner = ".".join([bound[value.id], *reversed(chain)])
        if owner in known and owner != module:
            found.append((node.lineno, f"{owner}.{node.attr}"))
    return sorted(found)


def test_no_module_uses_another_modules_private_names():
    offending = []
    for module, path in KNOWN.items():
        found = private_reaches(
            path.read_text(), module, KNOWN, is_package=path.name == "__init__.py"
        )
        offending += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in found]
    assert not offending, (
        "a name another module uses is public in the module that owns it (drop the "
        "underscore, or move it where it belongs):\n" + "\n".join(offending)
    )


def test_the_private_name_check_sees_what_it_is_for():
    """Every spelling of a reach into another module's private names is caught; a module's own
    names, dunders, and third-party private names are not."""
    known = {"streams.store.rows", "streams.store", "streams", "streams.stats.sql"}
    caught = [
        "from streams.store.rows import _bound",
        "from streams.store.rows import _bound as bound",
        "from .rows import _bound",
        "from streams.store import rows\nrows._bound(1)",
        "from streams.store import rows as r\nx = r._bound",
        "import streams.store.rows\nstreams.store.rows._bound(1)",
        "import streams.store.rows as rows\nrows._bound",
        "def f():\n    from streams.store import rows\n    return rows._bound",  # lazy
        "from streams.stats.sql import Scope, _q, scope_where",
    ]
    for source in caught:
        assert private_reaches(source, "streams.store.other", known), source
    allowed = [
        "from streams.store.rows import bound",
        "from streams.store.rows import __all__",
        "from django.db.models import _private",
        "import django\ndjango._x",
        "from streams.store import rows\nrows.__name__",
        "def _own():\n    pass\n_own()",
        "from streams.store import rows\nobject()._bound",
    ]
    for source in allowed:
        assert private_reaches(source, "streams.store.other", known) == [], source
    # a module's own names, even spelt through its own module path
    assert (
        private_reaches("from streams.store.rows import _bound", "streams.store.rows", known) == []
    )
    # one finding per name, each with its line
    assert private_reaches("from streams.store.rows import _a, _b, c", "x", known) == [
        (1, "from streams.store.rows import _a"),
        (1, "from streams.store.rows import _b"),
    ]


# ---- tests/ mirrors the packages ------------------------------------------------------------

# folders of tests/ that are not a package's tests
TESTS_OWN = {"support", "fixtures", "e2e", "__pycache__"}
# at tests/'s top: only the tests of the whole house (this one)
HOUSE_WIDE = {"test_layers.py"}
# and what pytest and the live servers need there: the servers' settings module is named by
# DJANGO_SETTINGS_MODULE in every process a test starts (tests.live_settings)
TOP_OWN = {"__init__.py", "conftest.py", "live_settings.py"}


def misplaced_tests(tests_root, repo_root):
    """The folders of `tests_root` that mirror no package of `repo_root`, and the test modules
    at its top that belong in one."""
    problems = []
    for folder in sorted(p for p in tests_root.rglob("*") if p.is_dir()):
        relative = folder.relative_to(tests_root)
        if relative.parts[0] in TESTS_OWN or "__pycache__" in relative.parts:
            continue
        if not (repo_root / relative / "__init__.py").exists():
            problems.append(f"tests/{relative}/ mirrors no package ({relative}/ is none)")
    for module in sorted(tests_root.glob("test_*.py")):
        if module.name not in HOUSE_WIDE:
            problems.append(f"tests/{module.name}: a package's tests go in its folder")
    for module in sorted(tests_root.rglob("*.py")):
        relative = module.relative_to(tests_root)
        if relative.parts[0] in TESTS_OWN or module.name.startswith("test_"):
            continue
        if module.name in ("__init__.py", "conftest.py"):
            continue
        if len(relative.parts) == 1 and module.name in TOP_OWN:
            continue
        problems.append(f"tests/{relative}: a shared helper goes in tests/support/")
    return problems


def test_tests_mirror_the_packages():
    problems = misplaced_tests(ROOT / "tests", ROOT)
    assert not problems, "\n".join(problems)


def test_the_mirror_check_sees_what_it_is_for(tmp_path):
    repo = tmp_path / "repo"
    for package in ("streams", "streams/store"):
        (repo / package).mkdir(parents=True)
        (repo / package / "__init__.py").write_text("")
    tests = repo / "tests"
    for folder in ("streams/store", "streams/nowhere", "support"):
        (tests / folder).mkdir(parents=True)
    (tests / "test_layers.py").write_text("")
    (tests / "test_stray.py").write_text("")
    for allowed in ("conftest.py", "live_settings.py", "support/x.py", "streams/store/conftest.py"):
        (tests / allowed).write_text("")
    (tests / "helpers.py").write_text("")
    (tests / "streams" / "store" / "fixtures.py").write_text("")
    assert misplaced_tests(tests, repo) == [
        "tests/streams/nowhere/ mirrors no package (streams/nowhere/ is none)",
        "tests/test_stray.py: a package's tests go in its folder",
        "tests/helpers.py: a shared helper goes in tests/support/",
        "tests/streams/store/fixtures.py: a shared helper goes in tests/support/",
    ]


# The one live import a migration keeps: which secrets the server knows, and their
# fingerprints, are the running code's by design (0015 derives the search text under them).
MIGRATIONS_MAY_IMPORT = {
    "streams.migrations.0015_search_redacted": {
        "streams.store.known_secrets",
        "streams.store.sealed",
    }
}


def live_imports(source, module):
    """The modules of the two packages a migration's `source` imports, other migrations aside:
    by an import statement (lazy ones too) or by name (`importlib.import_module("streams.…")`,
    `__import__`). The one kind of import Django's own `makemigrations` writes is allowed: a
    plain `import streams.x` whose every use is a value in a field's arguments
    (`models.CharField(default=streams.x.new_key)`: a callable default, a validator, an
    `upload_to`), which Django stores by reference and calls on later writes, never while the
    migration runs."""
    tree = ast.parse(source)
    edges = edges_of(source, module, KNOWN)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
            "import_module",
            "__import__",
        ):
            for arg in node.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if arg.value.split(".")[0] in PACKAGES:
                        edges.setdefault(_resolve(arg.value, KNOWN) or arg.value, node.lineno)
    found = {m for m in edges if ".migrations" not in m} - MIGRATIONS_MAY_IMPORT.get(module, set())
    return found - _field_references(tree)


def _field_references(tree):
    """The modules a migration imports plainly (`import streams.x`) and uses only as values of
    a field's arguments."""
    plain = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if not alias.asname and alias.name.split(".")[0] in PACKAGES
    }
    in_fields = set()  # ids of the nodes that are a field's argument values
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Field"):
            values = [*node.args, *(k.value for k in node.keywords)]
            in_fields |= {id(n) for v in values for n in ast.walk(v)}
    used_elsewhere = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name) and id(node) not in in_fields:
            name = ast.unparse(node)
            used_elsewhere |= {m for m in plain if name == m or name.startswith(m + ".")}
    return {_resolve(m, KNOWN) or m for m in plain - used_elsewhere}


def test_no_migration_imports_live_code():
    """A migration does what it did when it was written: what it needs of the code of its day
    is copied into it (its models are the historical ones `apps` gives it), so a later change
    to, say, the search module cannot change what an old migration does."""
    found = {
        module: live_imports(path.read_text(), module)
        for module, path in KNOWN.items()
        if ".migrations." in module
    }
    assert len(found) > 10
    assert not {m: f for m, f in found.items() if f}
    # seen failing: 0013 as it was, calling the search module's refill
    assert live_imports(
        "from streams.store.search import INDEXED_MAX_CHARS, TABLE, refill",
        "streams.migrations.0013_search",
    ) == {"streams.store.search"}
    assert live_imports(
        "def f():\n    from streams.store import search\n", "streams.migrations.0016_x"
    )
    # by name
    assert live_imports(
        "import importlib\nsearch = importlib.import_module('streams.store.search')\n",
        "streams.migrations.0016_x",
    ) == {"streams.store.search"}
    assert live_imports("x = __import__('dashboard.vocabulary')", "streams.migrations.0016_x")
    # a reference makemigrations writes for a field's callable default is allowed; the same
    # module called while the migration runs is not
    field = (
        "import streams.store.sealed\nfrom django.db import migrations, models\n"
        "ops = [migrations.AddField('stream', 'k', models.CharField("
        "max_length=9, default=streams.store.sealed.fingerprint))]\n"
    )
    assert live_imports(field, "streams.migrations.0016_x") == set()
    assert live_imports(
        field + "streams.store.sealed.fingerprint('x')\n", "streams.migrations.0016_x"
    ) == {"streams.store.sealed"}
    assert (
        live_imports(
            "import importlib\nold = importlib.import_module('streams.migrations.0013_search')",
            "streams.migrations.0016_x",
        )
        == set()
    )
