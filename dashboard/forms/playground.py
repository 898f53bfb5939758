"""The playground's composer: the API's own stream form (same fields, limits and messages),
plus what only the playground knows: the upstream's model list and the simulator's speed."""

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from streams.models import Stream
from streams.serve.api import CreateStreamForm
from streams.simulator import scenarios_of

# time_scale values the simulator understands, as offered in the composer: slowest first.
SPEEDS = [
    ("2", _("Half speed")),
    ("1", _("Real time")),
    ("0.5", _("2× faster")),
    ("0.25", _("4× faster")),
    ("0", _("Instant")),
]
DEFAULT_SPEED = "1"


class PlaygroundForm(CreateStreamForm):
    """`input` is the new message only; validating it (empty, too long), the model (a known
    one), instructions, temperature (0–2), max output tokens (≥ 1) and the scenario is
    CreateStreamForm's job, so the API and the playground accept exactly the same requests."""

    speed = forms.ChoiceField(required=False, choices=SPEEDS, label=_("Speed"))

    def __init__(self, data=None, *, catalog, **kwargs):
        super().__init__(data, **kwargs)
        self.catalog = catalog
        # The playground sends no metadata of its own choosing; only what its fields say.
        self.raw = {}
        labels = {
            "input": _("Message"),
            "model": _("Model"),
            "max_output_tokens": _("Max output tokens"),
            "temperature": _("Temperature"),
            "instructions": _("Instructions"),
            "scenario": _("Scenario"),
            "format": _("Format"),
        }
        for name, label in labels.items():
            self.fields[name].label = label

    def clean_model(self):
        model = super().clean_model()
        if model not in self.catalog.choices:
            known = ", ".join(self.catalog.choices)
            raise forms.ValidationError(
                gettext("Unknown model %(model)s; choose one of: %(known)s.")
                % {"model": repr(model), "known": known}
            )
        return model

    def clean_scenario(self):
        # A real upstream ignores metadata.scenario: do not pretend to offer one.
        return super().clean_scenario() if self.catalog.simulated else ""

    def clean_speed(self):
        return self.cleaned_data["speed"] if self.catalog.simulated else ""

    def clean(self):
        data = super().clean()
        if data.get("speed"):
            data["metadata"] = {**data.get("metadata", {}), "time_scale": data["speed"]}
        return data

    def conversation_settings(self):
        """What the conversation remembers for its next message."""
        d = self.cleaned_data
        return {
            "model": d["model"],
            "instructions": d["instructions"],
            "temperature": d["temperature"],
            "max_output_tokens": d["max_output_tokens"],
            "scenario": d["scenario"],
            "speed": d["speed"],
        }

    def stream_format(self):
        """The API the request speaks (CreateStreamForm's `format`)."""
        return self.cleaned_data["format"]

    def error_dict(self):
        """{field: [messages]} with field labels, for the page's script."""
        return {
            name: [str(m) for m in messages] for name, messages in self.errors.items() if messages
        }

    def first_error(self):
        for name, messages in self.errors.items():
            where = f"{self[name].label}: " if name in self.fields else ""
            return f"{where}{messages[0]}"
        return ""


def scenario_groups():
    """Each format's scenarios from the simulator's own catalogue (a request is answered with
    its format's: `scenarios_of`): [{format, label, normal: what its default does, scenarios:
    [(id, what it does)] but the default}], what each does in the page's language (the
    descriptions are in the engine's catalog)."""
    groups = []
    for format, label in Stream.Format.choices:
        said = {name: gettext(text) for name, text in scenarios_of(format).items()}
        normal = said.pop("normal", "")
        groups.append({"format": format, "label": label, "normal": normal, "scenarios": said})
    return groups


COMPARE_MIN, COMPARE_MAX = 2, 4


class CompareForm(PlaygroundForm):
    """One message to 2–4 models at once (compare mode): the composer's fields, with `models`
    instead of one `model`; each stream's request is the one the playground would send."""

    models = forms.MultipleChoiceField(required=False)

    def __init__(self, data=None, *, catalog, **kwargs):
        if data is not None:
            data = data.copy()
            data["model"] = "auto"  # the per-stream model comes from `models`
        super().__init__(data, catalog=catalog, **kwargs)
        self.fields["models"].choices = [(m, m) for m in catalog.choices]
        self.fields["models"].label = _("Models")

    def clean_models(self):
        models = list(dict.fromkeys(self.cleaned_data["models"]))  # each once, in order
        if not COMPARE_MIN <= len(models) <= COMPARE_MAX:
            raise forms.ValidationError(
                gettext("Choose %(min)s to %(max)s different models (auto counts as one).")
                % {"min": COMPARE_MIN, "max": COMPARE_MAX}
            )
        return models

    def request_bodies(self):
        """(model, request body) per chosen model."""
        bodies = []
        for model in self.cleaned_data["models"]:
            body = self.request_body()
            body["model"] = model
            bodies.append((model, body))
        return bodies
