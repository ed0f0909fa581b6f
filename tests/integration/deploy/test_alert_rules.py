"""The alerting rules (deploy/helm/azsidecar/files/alerts.rules.yaml) checked and unit-tested
by a real promtool, and every alert's runbook present in docs/runbooks.md."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.integration.deploy._hcl import ROOT
from tests.integration.deploy._tools import tool

RULES = ROOT / "deploy" / "helm" / "azsidecar" / "files" / "alerts.rules.yaml"
RULE_TESTS = ROOT / "tests" / "integration" / "deploy" / "alerts_test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
TIMEOUT_S = 120


def _alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules():
    done = subprocess.run([tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in done.stdout


def test_promtool_test_rules():
    done = subprocess.run([tool("promtool"), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("alert", [a["alert"] for a in _alerts()])
def test_every_alert_has_a_runbook_section_and_a_tested_firing(alert):
    rule = next(a for a in _alerts() if a["alert"] == alert)
    assert rule["annotations"]["runbook_url"] == f"docs/runbooks.md#{alert.lower()}"
    headings = re.findall(r"^## (\w+)$", RUNBOOKS.read_text(), re.M)
    assert alert in headings
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert alert in tested, f"{alert}: no promtool test sees it fire"
