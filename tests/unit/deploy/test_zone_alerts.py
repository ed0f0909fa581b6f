"""deploy/prometheus/zone-alerts.yml names metrics, labels and conditions the proxy exports."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from router import metrics as router_metrics
from router.zone_health import Cause

RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "zone-alerts.yml"


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_every_alert_uses_exported_metrics_and_known_conditions():
    exported = {router_metrics.ZONE_CONDITION._name, router_metrics.ZONE_OPEN._name}
    names = set()
    for rule in rules():
        names.add(rule["alert"])
        assert rule["labels"]["severity"] in ("page", "warning")
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
