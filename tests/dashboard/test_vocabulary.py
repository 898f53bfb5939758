"""One vocabulary, served from Python (dashboard/vocabulary.py): a stream's statuses (which are
active) and sources, the filters' limits, the output event types, the usage fields. Kept so:

- the JSON every page carries (`#streamscope-vocabulary`, read by static/js/vocabulary.js) is
  what the Python homes say (streams/models.py, streams/core/checks.py, the forms);
- no script under static/js and no template spells an active status or an output delta type
  (they import vocabulary.js), no template types a number into `maxlength` (it renders the
  form field's), and no Python module of streams/ or dashboard/ types the active statuses as a
  tuple or an SQL list (`Stream.ACTIVE_STATUSES`, `aggregates.ACTIVE`);
- no script or template spells a source's label (`Stream.Source`: templates say
  `{{ stream.source|source_label }}`, scripts `sourceWord`) or lists the usage fields (scripts
  import `USAGE_FIELDS`);
- each rule catches a copy (`TestTheRulesCatchACopy`).

static/js/output.js reads the protocol event by event (which part, item or field each delta and
`.done` event writes), as streams/core/checks.py's Checker does: it names the delta types it
reads, each of them one of checks.OUTPUT_DELTAS (checked below), and holds no copy of the list.
"""

import ast
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.forms import CharField
from django.utils import translation
from django.utils.dates import MONTHS_3

from dashboard.formats.en import formats as english_formats
from dashboard.forms.analytics import LatencyForm, RoutingForm
from dashboard.forms.streams import CaptureUploadForm, StreamFilterForm
from streams.core import pricing, usage
from streams.core.checks import ITEM_KINDS, OUTPUT_DELTAS, TERMINAL_STATUS
from streams.models import MAX_TAG_CHARS, MAX_TAGS, Stream
from streams.shapes import public
from streams.shapes.public import FAILED_TOOL_STATUSES
from tests.conftest import log_in_people
from tests.support import paths
from tests.support.recording import recorded, text_events

ROOT = paths.REPO
JS = ROOT / "static" / "js"
TEMPLATES = ROOT / "templates"
ACTIVE = {str(s) for s in Stream.ACTIVE_STATUSES}
# Reads the protocol event by event: may name output delta types (each one of OUTPUT_DELTAS).
PROTOCOL_READERS = {"static/js/output.js"}
# Python files not to look in: the homes themselves, the simulator (it plays an upstream, with
# its own words), migrations (history).
PYTHON_EXEMPT = {"streams/models.py", "streams/core/checks.py"}
PYTHON_EXEMPT_DIRS = ("streams/simulator/", "/migrations/")

_LITERAL = r"""(["'`])({})\1"""
STATUS_LITERAL = re.compile(_LITERAL.format("|".join(map(re.escape, sorted(ACTIVE)))))
DELTA_LITERAL = re.compile(_LITERAL.format("|".join(map(re.escape, sorted(OUTPUT_DELTAS)))))
ANY_DELTA_LITERAL = re.compile(r"""(["'`])(response\.[\w.]+\.delta)\1""")
with translation.override("en"):
    SOURCE_LABELS = sorted(str(label) for label in Stream.Source.labels)
SOURCE_LITERAL = re.compile(_LITERAL.format("|".join(map(re.escape, SOURCE_LABELS))), re.I)
USAGE_FIELDS = {*public.USAGE_COLUMNS}
# A list literal of a script or template: [ … ] without nested brackets.
LIST_LITERAL = re.compile(r"\[([^\[\]]*)\]")
QUOTED = re.compile(r"""(["'`])(\w+)\1""")
NUMERIC_MAXLENGTH = re.compile(r"""maxlength\s*=\s*["']?\s*\d+["']?""", re.I)
_S = r"""\s*(['"])({})\{}\s*"""
SQL_PAIR = re.compile(
    r"\("
    + _S.format("|".join(sorted(ACTIVE)), 1)
    + ","
    + _S.format("|".join(sorted(ACTIVE)), 3)
    + r"\)"
)


def rel(path):
    return path.relative_to(ROOT).as_posix()


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


# ---- the rules: (name, text) → ["name:line: what"] ------------------------------------------


def face_copies(name, text):
    """Active statuses and output delta types spelled in a script or template."""
    found = [
        f"{name}:{line_of(text, m.start())}: active status {m.group(2)!r}"
        for m in STATUS_LITERAL.finditer(text)
    ]
    if name not in PROTOCOL_READERS:
        found += [
            f"{name}:{line_of(text, m.start())}: output delta type {m.group(2)!r}"
            for m in DELTA_LITERAL.finditer(text)
        ]
    return found


def label_copies(name, text):
    """A source's label spelled out, or a list of (at least two) usage fields typed out."""
    found = [
        f"{name}:{line_of(text, m.start())}: source label {m.group(2)!r}"
        for m in SOURCE_LITERAL.finditer(text)
    ]
    for m in LIST_LITERAL.finditer(text):
        fields = [q.group(2) for q in QUOTED.finditer(m.group(1)) if q.group(2) in USAGE_FIELDS]
        if len(fields) >= 2:
            found.append(f"{name}:{line_of(text, m.start())}: usage fields {fields}")
    return found


def typed_maxlengths(name, text):
    return [
        f"{name}:{line_of(text, m.start())}: {m.group(0)!r} (render the form field's)"
        for m in NUMERIC_MAXLENGTH.finditer(text)
    ]


def python_copies(name, text):
    """The active statuses as a tuple, list or set of the two strings, or as an SQL list."""
    found = [
        f"{name}:{line_of(text, m.start())}: SQL {m.group(0)!r}" for m in SQL_PAIR.finditer(text)
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts:
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if all(isinstance(v, str) for v in values) and set(values) == ACTIVE:
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def scripts():
    return sorted(JS.rglob("*.js"))


def templates():
    return sorted(TEMPLATES.rglob("*.html"))


def python_files():
    for package in ("streams", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = rel(path)
            if name in PYTHON_EXEMPT or any(d in f"/{name}" for d in PYTHON_EXEMPT_DIRS):
                continue
            yield name, path


# ---- the tree keeps to them ------------------------------------------------------------------


def test_scripts_and_templates_read_statuses_and_output_types_from_the_vocabulary():
    found = []
    for path in [*scripts(), *templates()]:
        found += face_copies(rel(path), path.read_text())
    assert found == [], "import them from static/js/vocabulary.js:\n" + "\n".join(found)


def test_scripts_and_templates_read_source_labels_and_usage_fields_from_the_vocabulary():
    found = []
    for path in [*scripts(), *templates()]:
        found += label_copies(rel(path), path.read_text())
    assert found == [], "source_label / sourceWord, USAGE_FIELDS:\n" + "\n".join(found)


def test_no_template_types_a_maxlength():
    found = []
    for path in templates():
        found += typed_maxlengths(rel(path), path.read_text())
    assert found == [], "\n".join(found)


def test_no_python_module_types_the_active_statuses():
    found = []
    for name, path in python_files():
        found += python_copies(name, path.read_text())
    assert found == [], "use Stream.ACTIVE_STATUSES (SQL: aggregates.ACTIVE):\n" + "\n".join(found)


def test_the_protocol_reader_names_only_output_deltas_the_checker_knows():
    for name in PROTOCOL_READERS:
        text = (ROOT / name).read_text()
        named = {m.group(2) for m in ANY_DELTA_LITERAL.finditer(text)}
        assert named and named <= OUTPUT_DELTAS, named - OUTPUT_DELTAS


# ---- what the pages serve --------------------------------------------------------------------


def expected_vocabulary():
    """The vocabulary as the Python homes say it (built here apart from dashboard/vocabulary.py)."""
    statuses = [s.value for s in Stream.Status]
    user = get_user_model()
    return {
        "statuses": {
            "all": statuses,
            "labels": {s.value: s.label for s in Stream.Status},
            "active": [s.value for s in Stream.ACTIVE_STATUSES],
            "finished": [s for s in statuses if s not in ACTIVE],
            "initial": Stream.Status.PENDING.value,
        },
        "sources": {"labels": {s.value: s.label for s in Stream.Source}},
        "limits": {
            "filters": {
                "q": StreamFilterForm.base_fields["q"].max_length,
                "requested": Stream._meta.get_field("requested_model").max_length,
                "resolved": Stream._meta.get_field("resolved_model").max_length,
                "tag": MAX_TAG_CHARS,
                "session": Stream._meta.get_field("session").max_length,
                "user": user._meta.get_field(user.USERNAME_FIELD).max_length,
                "meta": StreamFilterForm.base_fields["meta"].max_length,
            },
            "tags": {"max": MAX_TAGS, "chars": MAX_TAG_CHARS},
        },
        "output": {
            "deltas": sorted(OUTPUT_DELTAS),
            "terminal": dict(TERMINAL_STATUS),
            "itemKinds": dict(ITEM_KINDS),
            "failedToolStatuses": sorted(FAILED_TOOL_STATUSES),
        },
        "usage": {
            "fields": [
                *usage.FIELDS,
                "usage_source",
                "cost_nanos",
                "cost_currency",
                "price_ref",
                "resolved_model",
            ]
        },
        "prices": {"example": pricing.EXAMPLE},
        # the English forms of a moment (dashboard/formats/en/formats.py) and Django's months
        "dates": {
            "forms": {
                "day": english_formats.DAY_FORMAT,
                "minute": english_formats.MINUTE_FORMAT,
                "second": english_formats.SECOND_FORMAT,
                "recent": english_formats.RECENT_FORMAT,
                "axis_day": english_formats.AXIS_DAY_FORMAT,
            },
            "months": [str(MONTHS_3[m]) for m in range(1, 13)],
        },
    }


VOCABULARY_SCRIPT = re.compile(
    r'<script id="streamscope-vocabulary" type="application/json">(.*?)</script>', re.S
)


def served(html):
    [data] = VOCABULARY_SCRIPT.findall(html)  # exactly one per page
    return json.loads(data)


@pytest.mark.django_db
class TestServed:
    @pytest.fixture(autouse=True)
    def _people(self, db):
        log_in_people(self)

    @pytest.mark.parametrize("path", ["/", "/playground/", "/latency/", "/routing/", "/analytics/"])
    def test_every_page_carries_the_vocabulary_of_the_python_homes(self, path):
        r = self.staff_client.get(path)
        assert r.status_code == 200
        assert served(r.content.decode()) == expected_vocabulary()
        assert r.context["vocabulary"] == expected_vocabulary()

    def test_so_does_the_login_page(self, client):
        r = client.get("/login/")
        assert served(r.content.decode()) == expected_vocabulary()

    @pytest.mark.parametrize("language", ["en", "nl"])
    def test_a_streams_source_is_its_label_on_its_page_its_row_and_the_filter(self, language):
        stream = recorded(self.owner, text_events("hi"), source=Stream.Source.PROXY)
        self.owner_client.cookies["django_language"] = language
        with translation.override(language):
            label = str(Stream.Source.PROXY.label)
        page = self.owner_client.get(f"/streams/{stream.pk}/").text
        assert f"<dd>{label.lower()}</dd>" in page
        listing = self.owner_client.get("/").text
        row = listing[listing.index(f'id="stream-row-{stream.pk}"') :]
        assert f'<span class="muted">{label.lower()}</span>' in row[: row.index("</tr>")]
        assert f'<option value="proxy">{label}</option>' in listing
        assert served(listing)["sources"]["labels"]["proxy"] == label

    @pytest.mark.parametrize("path", ["/", "/latency/", "/routing/"])
    def test_inputs_take_their_form_fields_limits(self, path):
        r = self.staff_client.get(path)
        html = r.content.decode()
        inputs = re.findall(r"<input\b[^>]*>", html)
        limited = [i for i in inputs if "maxlength" in i]
        assert len(limited) >= 3, limited
        for tag in limited:
            name = re.search(r'name="(\w+)"', tag).group(1)
            limit = int(re.search(r'maxlength="(\d+)"', tag).group(1))
            # the page's filters, the capture upload's, "Save this view…"'s
            forms = [r.context.get(k) for k in ("form", "upload_form", "save_view_form")]
            form = next(f for f in forms if f is not None and name in f.fields)
            assert limit == form.fields[name].max_length, tag


def test_every_filter_form_takes_the_limits_of_its_columns():
    user = get_user_model()
    column = {
        "tag": MAX_TAG_CHARS,
        "session": Stream._meta.get_field("session").max_length,
        "user": user._meta.get_field(user.USERNAME_FIELD).max_length,
        "requested": Stream._meta.get_field("requested_model").max_length,
        "resolved": Stream._meta.get_field("resolved_model").max_length,
        "model": Stream._meta.get_field("resolved_model").max_length,
        "a": Stream._meta.get_field("resolved_model").max_length,
        "b": Stream._meta.get_field("resolved_model").max_length,
    }
    upload = CaptureUploadForm.base_fields["model"].max_length
    assert upload == Stream._meta.get_field("requested_model").max_length
    for form in (StreamFilterForm, LatencyForm, RoutingForm):
        for name, field in form.base_fields.items():
            if isinstance(field, CharField) and name in column:
                assert field.max_length == column[name], (form.__name__, name)


# ---- each rule catches a copy ----------------------------------------------------------------


class TestTheRulesCatchACopy:
    @pytest.mark.parametrize(
        "text",
        [
            'const TERMINAL = (s) => s !== "pending" && s !== "streaming";',
            "if (status === 'streaming') end();",
            'const OUTPUT = new Set(["response.output_text.delta", "response.refusal.delta"]);',
            '{% if stream.status == "pending" %}',
            "<tr data-type='response.audio.transcript.delta'>",
        ],
    )
    def test_a_script_or_template_copy(self, text):
        assert face_copies("static/js/x.js", text)

    @pytest.mark.parametrize(
        "text",
        [
            '"The answer is still streaming: press Esc"',
            "this.pendingDraw = 0;",
            "if (OUTPUT_DELTAS.has(d.type)) this.counted(e.t_us);",
            "if (!isActive(status)) end();",
        ],
    )
    def test_not_words_in_prose_or_names(self, text):
        assert face_copies("static/js/x.js", text) == []

    def test_the_protocol_reader_may_name_delta_types_but_no_status(self):
        text = 'const T = new Map([["response.refusal.delta", "refusal"]]);'
        assert face_copies("static/js/output.js", text) == []
        assert face_copies("static/js/output.js", 'x === "pending"')

    @pytest.mark.parametrize(
        "text",
        [
            '{% if stream.source == "live" %}{% translate "recorded live" %}{% endif %}',
            "const LABEL = { proxy: 'Recording proxy' };",
            "t(`imported file`)",
            'const USAGE = ["input_tokens", "output_tokens", "cost_nanos"];',
            "for (const f of ['reasoning_tokens',\n 'cached_input_tokens']) show(f);",
        ],
    )
    def test_a_source_label_or_usage_list_copy(self, text):
        assert label_copies("static/js/x.js", text)

    @pytest.mark.parametrize(
        "text",
        [
            "<td>{{ stream.source|source_label }}</td>",
            "an imported file keeps no receipt times",
            "for (const name of USAGE_FIELDS) usage[name] = s[name];",
            'if (known(f["reasoning_tokens"])) show(f.input_tokens);',
        ],
    )
    def test_not_a_source_label_or_usage_list_copy(self, text):
        assert label_copies("static/js/x.js", text) == []

    @pytest.mark.parametrize(
        "text", ['<input name="tag" maxlength="64">', "<input maxlength=200>", "MAXLENGTH='1'"]
    )
    def test_a_typed_maxlength(self, text):
        assert typed_maxlengths("templates/x.html", text)

    def test_a_rendered_maxlength_is_fine(self):
        text = '<input name="tag" maxlength="{{ form.tag.field.max_length }}">'
        assert typed_maxlengths("templates/x.html", text) == []

    @pytest.mark.parametrize(
        "text",
        [
            'ACTIVE = ("pending", "streaming")',
            "STATUSES = ['streaming', 'pending']",
            "where = f\"{qn('status')} NOT IN ('pending', 'streaming')\"",
            "sql = \"status IN ( 'streaming' ,'pending' )\"",
            "if status in {'pending', 'streaming'}:\n    pass",
        ],
    )
    def test_a_python_copy(self, text):
        assert python_copies("streams/x.py", text)

    @pytest.mark.parametrize(
        "text",
        [
            "ACTIVE = tuple(str(s) for s in Stream.ACTIVE_STATUSES)",
            'if status == "streaming":\n    pass',
            'x = ("pending", "streaming", "completed")',
        ],
    )
    def test_not_a_python_copy(self, text):
        assert python_copies("streams/x.py", text) == []
