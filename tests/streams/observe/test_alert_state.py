"""`streamscope_alert_state` (streams/observe/telemetry.py): each enabled rule's state, read from
its state row at the scrape, with its project's slug."""

import pytest

from streams.models import Project, RuleState
from streams.observe import telemetry
from tests.support.alerts import rule

pytestmark = pytest.mark.django_db


def test_each_rule_says_its_state():
    team = Project.objects.create(name="Team", slug="team")
    firing, fresh = rule(team, name="firing"), rule(team, name="fresh")
    rule(team, name="off", enabled=False)
    RuleState.objects.create(rule=firing, project=team, state="firing")
    body, _type = telemetry.exposition()
    lines = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in body.decode().splitlines()
        if line.startswith("streamscope_alert_state{")
    }

    def value(r, state):
        key = (
            f'streamscope_alert_state{{project="team",rule="{r.pk}",rule_name="{r.name}",'
            f'state="{state}"}}'
        )
        return lines[key]

    assert [value(firing, s) for s in ("ok", "pending", "firing")] == [0.0, 0.0, 1.0]
    assert [value(fresh, s) for s in ("ok", "pending", "firing")] == [1.0, 0.0, 0.0]
    assert len(lines) == 6  # the disabled rule is not exported
