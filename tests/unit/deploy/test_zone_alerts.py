"""The zone alerts of the chart's rule file (group azsidecar-zones) name metrics, labels and
conditions the proxy exports, one alert per failure cause."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from router import metrics as router_metrics
from router.zone_health import Cause

RULES = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "azsidecar" / "files" / "alerts.rules.yaml"


def rules() -> list[dict]:
    (group,) = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "azsidecar-zones"]
    return group["rules"]


def test_every_alert_uses_exported_metrics_and_known_conditions():
    exported = {router_metrics.ZONE_CONDITION._name, router_metrics.ZONE_OPEN._name}
    names = set()
    for rule in rules():
        names.add(rule["alert"])
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        metrics = set(re.findall(r"azsidecar_[a-z_]+", rule["expr"]))
        assert metrics and metrics <= exported, (rule["alert"], metrics)
        for condition in re.findall(r'condition="([a-z0-9_]+)"', rule["expr"]):
            assert condition in {c.value for c in Cause} and condition in router_metrics.ZONE_CAUSES
    assert names == {"AzsidecarZonePartitioned", "AzsidecarZoneAgentsGone", "AzsidecarZoneAgentsSlow",
                     "AzsidecarS3UnreachableFromZone", "AzsidecarZoneCircuitFlapping"}


def test_each_failure_cause_has_an_alert():
    conditions = {c for rule in rules() for c in re.findall(r'condition="([a-z0-9_]+)"', rule["expr"])}
    assert conditions == {c.value for c in Cause} - {"healthy"}


def test_every_alert_under_deploy_is_defined_once():
    # One source of truth per alert: the zone alerts once had a rule file of their own.
    deploy = RULES.parents[3]
    defined = [(name, path.relative_to(deploy)) for path in sorted(deploy.rglob("*.y*ml"))
               for name in re.findall(r"^\s*- alert: (\w+)", path.read_text(), re.M)]
    assert {str(path) for _, path in defined} == {"helm/azsidecar/files/alerts.rules.yaml"}
    names = [name for name, _ in defined]
    assert len(names) == len(set(names)) >= 18
