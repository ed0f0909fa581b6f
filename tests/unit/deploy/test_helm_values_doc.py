"""docs/deploy.md's Helm values table names every key of the chart's values.yaml, with its
default as the file has it, and nothing the chart does not read."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "azsidecar"
DOC = ROOT / "docs" / "deploy.md"
NO_DEFAULT = object()  # a field of a list's entries: the list's own row has the default


def _templates() -> str:
    return "\n".join(p.read_text() for p in sorted((CHART / "templates").iterdir()))


def _passed_whole() -> set[str]:
    """Values the templates hand to Kubernetes as they are (toYaml): one row each."""
    return set(re.findall(r"toYaml \S*Values\.([\w.]+)", _templates()))


def _keys(node: Any, path: str, whole: set[str]) -> dict[str, Any]:
    """Dotted key -> default: every leaf, a map passed whole, a list of maps and its fields (`list[].field`)."""
    if isinstance(node, dict) and node and path not in whole:
        out = {}
        for key, value in node.items():
            out.update(_keys(value, f"{path}.{key}" if path else key, whole))
        return out
    if isinstance(node, list) and node and all(isinstance(entry, dict) for entry in node):
        return {path: node, **{f"{path}[].{field}": NO_DEFAULT for entry in node for field in entry}}
    return {path: node}


def _values_keys() -> dict[str, Any]:
    return _keys(yaml.safe_load((CHART / "values.yaml").read_text()), "", _passed_whole())


def _table() -> dict[str, str]:
    """Key -> the default cell, from the table under docs/deploy.md's "### Values"."""
    section = DOC.read_text().partition("\n### Values\n")[2].partition("\n## ")[0]
    return dict(re.findall(r"^\| `([\w.\[\]]+)` \| ([^|]+?) \|", section, re.M))


def test_the_scan_itself_works():
    keys = _values_keys()
    assert {"agent.resources", "podSecurityContext"} <= _passed_whole()
    assert keys["monitoring.podMonitor.interval"] == "15s"
    assert keys["agent.resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    assert keys["zones[].id"] is NO_DEFAULT and "agent.resources.limits.memory" not in keys
    assert _table()["status.port"] == "`9464`"


def test_every_key_of_values_yaml_has_a_row():
    assert sorted(set(_values_keys()) - set(_table())) == []


def test_every_row_is_a_key_the_chart_reads():
    # Rows beyond values.yaml: optional fields the templates read (a zone's own replicas).
    extra = set(_table()) - set(_values_keys())
    templates = _templates()
    assert {row for row in extra if not re.search(rf"\.{re.escape(row.rpartition('.')[2])}\b", templates)} == set()
    assert extra == {"zones[].agentReplicas", "zones[].gatewayReplicas"}


def test_each_default_is_the_file_s():
    table, keys = _table(), _values_keys()
    documented = {key: default for key, default in keys.items() if key in table}  # a missing row fails above
    wrong = {key: (table[key], default) for key, default in documented.items()
             if default is not NO_DEFAULT and yaml.safe_load(table[key].strip("`")) != default}
    assert wrong == {}
    assert all(table[key] == "-" for key, default in documented.items() if default is NO_DEFAULT)
