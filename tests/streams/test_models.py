"""What the models say of themselves (streams/models.py, and dashboard/models.py's beside them): a
row's `__str__` is shown in the admin (its change pages, its lists, its delete confirmations) and
on pages (the playground's conversations), so it speaks the reader's language."""

import ast
import inspect
import re

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.utils import translation

from dashboard import models as dashboard_models
from streams import models
from streams.models import Event, Finding, Membership, Project, SealedSecret

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
