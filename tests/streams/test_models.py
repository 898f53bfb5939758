"""What the models say of themselves (streams/models.py, and dashboard/models.py's beside them): a
row's `__str__` is shown in the admin (its change pages, its lists, its delete confirmations) and
on pages (the playground's conversations), so it speaks the reader's language."""

import ast
import inspect
import re

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db import models as dj_models
from django.test.utils import CaptureQueriesContext
from django.utils import translation

from dashboard import models as dashboard_models
from streams import models
from streams.models import (
    Comment,
    Event,
    Finding,
    Membership,
    Project,
    SealedSecret,
)
from streams.store import rows

WORD = re.compile(r"[^\W\d_]{2,}")  # (a unit such as the `s` of seconds is not a word)
TRANSLATED = {"gettext", "_", "pgettext", "ngettext"}


def untranslated(source, choices):
    """[(line, what)] of the words a `__str__` in `source` says outside a translation, and of
    the fields with choices it shows by their stored value (`choices`: class name → fields)."""
    found = []
    tree = ast.parse(source)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in cls.body:
            if not (isinstance(method, ast.FunctionDef) and method.name == "__str__"):
                continue
            inside = set()
            for node in ast.walk(method):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", "")) in TRANSLATED
                ):
                    inside |= {id(n) for n in ast.walk(node)}
                elif isinstance(node, ast.Dict):  # (a translation's placeholders, by name)
                    inside |= {id(k) for k in node.keys}
            for node in ast.walk(method):
                if id(node) in inside:
                    continue
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if WORD.search(node.value):
                        found.append((node.lineno, f"{cls.name}: {node.value!r}"))
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr in choices.get(cls.name, ())
                ):
                    found.append((node.lineno, f"{cls.name}: self.{node.attr} (its stored value)"))
    return found


def _choices(app):
    """Each model's fields whose choices have labels (not a currency's code, its own label)."""
    return {
        model.__name__: {
            f.name
            for f in model._meta.concrete_fields
            if f.choices and any(str(label) != value for value, label in f.flatchoices)
        }
        for model in apps.get_app_config(app).get_models()
    }


@pytest.mark.parametrize("module, app", [(models, "streams"), (dashboard_models, "dashboard")])
def test_no_models_str_says_a_word_outside_a_translation(module, app):
    found = untranslated(inspect.getsource(module), _choices(app))
    path = f"{app}/models.py"
    assert not found, "\n".join(f"{path}:{line}: {what}" for line, what in found)


def test_the_str_check_sees_what_it_is_for():
    choices = {"M": {"role"}}
    head = "class M:\n    def __str__(self):\n        return "
    caught = [
        head + 'f"event {self.pk}"',
        head + "f'{self.user} ({self.role})'",
        head + '"swept " + self.fingerprint',
    ]
    for source in caught:
        assert untranslated(source, choices), source
    allowed = [
        head + 'gettext("event %(id)s") % {"id": 1}',
        head + "f'{self.user} ({self.get_role_display()})'",
        head + 'f"{self.span}s @ {self.t}"',
    ]
    for source in allowed:
        assert untranslated(source, choices) == [], source


def test_rows_say_themselves_in_dutch():
    membership = Membership(user=User(username="ann"), project=Project(name="Kanaal"), role="admin")
    event = Event(stream_id=7, index=3, type="response.created")
    finding = Finding(severity="error", code="stall", event_index=4)
    with translation.override("nl"):
        assert str(membership) == "ann · Kanaal (Beheerder)"
        assert str(event) == "event 7#3 response.created"
        assert str(finding) == "Fout stall @ 4"
        assert str(SealedSecret(fingerprint="ab" * 32)) == "doorgegeven sleutel abababababab…"
        assert str(models.UsageRollup(span=3600, t=0, n=2)).startswith("gebruiksaggregaat van 3600")
        assert str(dashboard_models.Conversation(pk=5)) == "Gesprek 5"


# ---- foreign keys: one index each, the composite's when one leads with it ---------------------


def _streams_models():
    return list(apps.get_app_config("streams").get_models())


def _foreign_keys():
    return [
        (model, f)
        for model in _streams_models()
        for f in model._meta.concrete_fields
        if isinstance(f, dj_models.ForeignKey)
    ]


def _led_by(model):
    """{field name: the name of a composite index or unique constraint that leads with it}, the
    ones that hold every row only (a partial index is not an index of the column)."""
    led = {}
    for index in model._meta.indexes:
        if index.condition is None and len(index.fields) > 1:
            led.setdefault(index.fields[0].lstrip("-"), index.name)
    for c in model._meta.constraints:
        if isinstance(c, dj_models.UniqueConstraint) and c.condition is None and len(c.fields) > 1:
            led.setdefault(c.fields[0], c.name)
    return led


def test_no_foreign_key_keeps_an_index_that_a_composite_already_leads_with():
    """A foreign key's own index beside a composite index leading with the same column is a
    second B-tree every insert pays for and no query needs (migration 0043)."""
    doubled = [
        f"{model.__name__}.{f.name} (led by {_led_by(model)[f.name]})"
        for model, f in _foreign_keys()
        if f.db_index and f.name in _led_by(model)
    ]
    assert not doubled, "db_index=False on: " + ", ".join(doubled)


@pytest.mark.django_db
def test_the_database_has_the_composite_and_not_the_copy():
    """What the migrations made: for each foreign key without its own index, no index on that
    one column in the database, and an index whose first column it is."""
    unindexed = [(model, f) for model, f in _foreign_keys() if not f.db_index]
    assert len(unindexed) >= 23
    with connection.cursor() as cursor:
        for model, f in unindexed:
            found = connection.introspection.get_constraints(cursor, model._meta.db_table)
            indexes = [c["columns"] for c in found.values() if c["index"] or c["unique"]]
            assert [f.column] not in indexes, f"{model.__name__}.{f.name}: its own index is left"
            assert any(columns[0] == f.column for columns in indexes if columns), (
                f"{model.__name__}.{f.name}: no index leads with it"
            )


def _plan(sql, params=()):
    """The query plan of `sql` as one string (PostgreSQL: as it would read a large table)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
            return " | ".join(r[0] for r in cursor.fetchall())
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return " | ".join(r[-1] for r in cursor.fetchall())


def _leading_columns(table):
    """{index: its first column} of `table`'s indexes, unique ones and its partitions' too."""
    with connection.cursor() as cursor:
        tables = [table]
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
                [table],
            )
            tables += [name for (name,) in cursor.fetchall()]
        found = {}
        for name in tables:
            found.update(connection.introspection.get_constraints(cursor, name))
    return {
        name: c["columns"][0]
        for name, c in found.items()
        if (c["index"] or c["unique"] or c["primary_key"]) and c["columns"]
    }


def looked_up(plan, table, column, leading, vendor=None):
    """Whether `plan` reaches `table` only through an index that leads with `column`
    (`leading`: each index's first column). SQLite: `SEARCH t USING … INDEX x (column=…`,
    never `SCAN t` (a read of the table or of a whole index). PostgreSQL (sequential scans
    off: it takes one only when no index serves): no `Seq Scan`, and an index leading with the
    column exists. Not which index the plan names: on the tests' near-empty tables a walk of an
    index holding the column further on (`Index Cond` notwithstanding) costs the same as a
    lookup, and the planner breaks that tie either way (CI saw `membership_unique`, which leads
    with the project, chosen for `user_id` beside an index leading with it); on a large table
    the index that leads wins, and it must exist."""
    if (vendor or connection.vendor) != "postgresql":
        searched = re.search(
            rf"SEARCH {table} USING (?:COVERING )?INDEX \w+ \({column}[=<>]", plan
        ) or (column == "id" and f"SEARCH {table} USING INTEGER PRIMARY KEY" in plan)
        return bool(searched) and not re.search(rf"(?:^| \| )SCAN {table}\b", plan)
    if re.search(rf"Seq Scan on {table}\b", plan):
        return False
    return column in leading.values()


def test_a_lookup_is_told_from_a_walk():
    leading = {"stream_user_created": "user_id", "stream_duration_top": "duration_ms"}
    t, c = "streams_stream", "user_id"

    def sqlite(plan):
        return looked_up(plan, t, c, {}, "sqlite")

    def postgres(plan):
        return looked_up(plan, t, c, leading, "postgresql")

    assert sqlite("SEARCH streams_stream USING INDEX stream_user_created (user_id=?)")
    assert sqlite("SEARCH streams_stream USING COVERING INDEX x (user_id=?)")
    assert not sqlite("SCAN streams_stream")
    assert not sqlite("SCAN streams_stream USING COVERING INDEX stream_user_status")
    assert not sqlite("SEARCH streams_stream USING INDEX x (project_id=?)")
    assert not postgres("Seq Scan on streams_stream  (cost=1e10..1e10 rows=1)")
    walk = "Update on streams_stream | ->  Index Scan using stream_duration_top on streams_stream"
    # (an index leads with the column: the planner's pick on an empty table is a tie)
    assert postgres(walk + " | Index Cond: (user_id = 1)")
    del leading["stream_user_created"]  # no index leads with it: a walk, whatever it names
    assert not postgres(walk + " | Index Cond: (user_id = 1)")
    used = "Index Scan using stream_user_created on streams_stream  (cost=0.15..8.17 rows=1)"
    assert not postgres(used + " |   Index Cond: (user_id = ANY ('{1,2}'))")


@pytest.mark.django_db
def test_every_foreign_key_is_looked_up_through_an_index():
    """Walked, not listed: the rows of one or several parents (a page's filter, a join, what a
    cascade reads, updates or deletes) are found through an index leading with the key, on
    both databases."""
    walked = []
    for model, f in _foreign_keys():
        table = model._meta.db_table
        qs = model._base_manager.filter(**{f"{f.attname}__in": [1, 2]})
        sql, params = qs.query.sql_with_params()
        plan = _plan(sql, params)
        if not looked_up(plan, table, f.column, _leading_columns(table)):
            walked.append(f"{model.__name__}.{f.name}: {plan}")
    assert len(_foreign_keys()) > 40
    assert not walked, "not looked up by an index:\n" + "\n".join(walked)


@pytest.mark.django_db
@pytest.mark.parametrize("what", ["project", "user"])
def test_deleting_a_project_or_a_user_scans_no_table(what):
    """What a delete's cascade asks of every table that points at it (read, set NULL or delete
    by the parent's id) is planned through an index, never a read of the whole table."""
    user = User.objects.create_user("leaver")
    project = Project.objects.create(name="Weg", slug="weg")
    Membership.objects.create(user=user, project=project, role="owner")
    stream = rows.create(rows.build_request_body("Hoi", "auto"), user=user, project=project)
    Comment.objects.create(stream=stream, author=user, text="Tot ziens")
    with CaptureQueriesContext(connection) as queries:
        (project if what == "project" else user).delete()
    # (each a SELECT, UPDATE or DELETE of the rows whose key is among the parents' ids)
    by_parent = re.compile(r'^(?:SELECT|UPDATE|DELETE) .* WHERE "(\w+)"\."(\w+)" IN \(')
    asked = [m for q in queries.captured_queries if (m := by_parent.match(q["sql"]))]
    tables = {m[1] for m in asked}
    assert {"streams_stream", "streams_membership", "streams_comment"} <= tables
    walked = [
        f"{m[1]}.{m[2]}: {plan}"
        for m in asked
        if not looked_up(plan := _plan(m.string), m[1], m[2], _leading_columns(m[1]))
    ]
    assert not walked, "\n".join(walked)
