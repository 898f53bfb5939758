"""The shipped alert rules (docs/prometheus/) and the scrape they run on, checked by Prometheus'
own promtool: the rules parse, every alert has a unit test that passes, and a real scrape of
the app passes `promtool check metrics` and holds every series the rules name.

promtool comes with Debian's `prometheus` package (.ci/apt-deps installs it). Without it these
tests skip, except in CI (`CI` set), where a missing promtool is a failure."""

import asyncio
import datetime as dt
import os
import re
import shutil
import subprocess
from decimal import Decimal

import pytest
from django.test import AsyncClient

from streams.models import Price
from streams.store import prices
from tests.conftest import REPO
from tests.support.recording import body, record

pytestmark = pytest.mark.django_db(transaction=True)

RULES = REPO / "docs" / "prometheus" / "alerts.yml"
RULE_TESTS = REPO / "docs" / "prometheus" / "alerts_test.yml"
TOKEN = "alert-rules-token"


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI (.ci/apt-deps installs Debian's prometheus)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return path


def run(*args, stdin=None):
    proc = subprocess.run(
        args, input=stdin, capture_output=True, text=True, timeout=120, cwd=RULES.parent
    )
    return proc.returncode, proc.stdout + proc.stderr


def alert_names():
    return re.findall(r"^\s*- alert: (\w+)\s*$", RULES.read_text(), re.M)


def test_the_rules_parse(promtool):
    code, out = run(promtool, "check", "rules", str(RULES))
    assert code == 0, out
    assert "SUCCESS" in out


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    names = alert_names()
    assert len(names) >= 9
    tests = RULE_TESTS.read_text()
    # (alertname, whether that case expects alerts) for every alert_rule_test entry
    cases = re.findall(r"alertname: (\w+)\n\s*exp_alerts:( \[\])?", tests)
    firing = {name for name, empty in cases if not empty}
    quiet = {name for name, empty in cases if empty}
    assert set(names) <= firing, f"no firing case for {sorted(set(names) - firing)}"
    assert set(names) <= quiet, f"no quiet case for {sorted(set(names) - quiet)}"
    assert {name for name, _ in cases} <= set(names)


def test_the_unit_tests_pass(promtool):
    code, out = run(promtool, "test", "rules", str(RULE_TESTS))
    assert code == 0, out


async def test_a_real_scrape_passes_promtool_and_holds_every_series_the_rules_use(
    promtool, upstream, settings
):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "METRICS_TOKEN": TOKEN}
    # a team price for every model: the streams have a cost (streamscope_cost_total)
    await Price.objects.acreate(
        model_pattern="*", currency="EUR", input_per_million=Decimal("2"),
        output_per_million=Decimal("8"), effective_from=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
    )  # fmt: skip
    prices.forget()
    try:
        await asyncio.gather(record(body("normal")), record(body("gap")), record(body("http_500")))
    finally:
        prices.forget()  # (the snapshot must not outlive this test's table)
    response = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    text = response.content.decode()
    code, out = run(promtool, "check", "metrics", stdin=text)
    assert code == 0 and not out.strip(), out
    families = dict(re.findall(r"^# TYPE (\S+) (\w+)$", text, re.M))
    exported = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)) | set(families)
    exported |= {f"{n}_{s}" for n, t in families.items() if t == "histogram" for s in HISTOGRAM}
    used = series_in_rules()
    assert used and used <= exported, f"the rules use series /metrics lacks: {used - exported}"


HISTOGRAM = ("bucket", "count", "sum")


def series_in_rules():
    """The metric names the rules' expressions read (not labels, not recorded series)."""
    exprs, inside, indent = [], False, 0
    for line in RULES.read_text().splitlines():
        match = re.match(r"^(\s*)expr: ?(.*)$", line)
        if match:
            inside, indent = True, len(match.group(1))
            exprs.append(match.group(2))
        elif inside and (not line.strip() or len(line) - len(line.lstrip()) > indent):
            exprs.append(line)
        else:
            inside = False
    text = "\n".join(exprs)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", text)  # grouping labels
    return {n for n in re.findall(r"\b[a-z_:][a-z0-9_:]*\b", text) if ":" not in n} & {
        n for n in re.findall(r"\b(?:gen_ai|streamscope)_\w+", text)
    }
