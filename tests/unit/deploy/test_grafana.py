"""The Grafana dashboard loads, every panel queries something, and every metric it
queries is one the code registers (so a renamed metric breaks this test, not the graphs)."""

from __future__ import annotations

import json
import re

from tests.integration.deploy._hcl import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "azsidecar-dashboard.json"
SOURCES = ("proxy", "wal_s3", "leader_notify", "router", "azsidecar")


def _registered_series() -> set[str]:
    """Series names Prometheus will see for the collectors declared in the code."""
    names = set()
    for package in SOURCES:
        for path in (ROOT / package).glob("*.py"):
            text = path.read_text()
            for kind, name in re.findall(r'(Counter|Gauge|Histogram)\(\s*"(azsidecar_[a-z0-9_]+)"', text):
                if kind == "Counter":  # prometheus_client exposes counters with one _total suffix
                    names.add(name.removesuffix("_total") + "_total")
                elif kind == "Histogram":
                    names |= {name + "_bucket", name + "_sum", name + "_count"}
                else:
                    names.add(name)
    return names


def _panels():
    dash = json.loads(DASHBOARD.read_text())
    return dash, [p for p in dash["panels"] if p["type"] != "row"]


def test_every_panel_has_a_target_with_an_expression_and_unique_ref_ids():
    dash, panels = _panels()
    assert dash["uid"] and dash["title"]
    assert len(panels) >= 12
    for p in panels:
        assert p["targets"], p["title"]
        assert all(t["expr"].strip() for t in p["targets"]), p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids)


def test_panels_do_not_overlap():
    _, panels = _panels()
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_every_queried_metric_is_registered_by_the_code():
    registered = _registered_series()
    assert "azsidecar_proxy_received_bytes_total" in registered  # the scan itself works
    _, panels = _panels()
    used = set()
    for p in panels:
        for t in p["targets"]:
            used |= set(re.findall(r"\b(azsidecar_[a-z0-9_]+)", t["expr"]))
    assert used - registered == set()


def test_the_issue_s_subjects_each_have_a_panel():
    _, panels = _panels()
    titles = " | ".join(p["title"].lower() for p in panels)
    for subject in ("bytes by route", "cross-zone bytes avoided", "flush size", "put latency",
                    "cache hit ratio", "errors"):
        assert subject in titles, subject


TARGET_LABELS = {"zone", "instance", "job"}  # added by Prometheus relabelling, not by the code
SELECTOR_RE = re.compile(r"\b(azsidecar_[a-z0-9_]+)(?:\{([^}]*)\})?")
BY_RE = re.compile(r"\bby \(([^)]*)\)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


def _declared_labels() -> dict[str, set[str]]:
    """Series name -> label names, from the collectors' declarations in the code."""
    out = {}
    decl = re.compile(r'(Counter|Gauge|Histogram)\(\s*"(azsidecar_[a-z0-9_]+)",\s*"[^"]*"\s*,?\s*(?:\[([^\]]*)\])?', re.S)
    for package in SOURCES:
        for path in (ROOT / package).glob("*.py"):
            for kind, name, labels in decl.findall(path.read_text()):
                names = set(re.findall(r'"(\w+)"', labels or ""))
                if kind == "Counter":
                    out[name.removesuffix("_total") + "_total"] = names
                elif kind == "Histogram":
                    out.update({name + "_bucket": names | {"le"}, name + "_sum": names, name + "_count": names})
                else:
                    out[name] = names
    return out


def test_every_label_a_panel_filters_or_groups_by_is_declared_on_its_metric():
    from router.decide import Path as RoutePath

    declared = _declared_labels()
    assert declared["azsidecar_proxy_received_bytes_total"] == {"route"}  # the scan itself works
    routes = {r.value for r in RoutePath}
    _, panels = _panels()
    checked = 0
    for p in panels:
        for t in p["targets"]:
            expr = t["expr"]
            for name, matchers in SELECTOR_RE.findall(expr):
                for label, value in re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', matchers):
                    assert label in declared[name] | TARGET_LABELS, (p["title"], name, label)
                    if label == "route":
                        assert value in routes, (p["title"], value)
                    checked += 1
            for labels, inner in BY_RE.findall(expr):
                metrics = set(re.findall(r"\b(azsidecar_[a-z0-9_]+)", inner))
                assert metrics, (p["title"], expr)
                for label in (x.strip() for x in labels.split(",")):
                    for name in metrics:
                        assert label in declared[name] | TARGET_LABELS, (p["title"], name, label)
                        checked += 1
    assert checked >= 40


def test_the_savings_panel_prices_with_the_served_prices_and_carries_none_of_its_own():
    from azsidecar.price_gauges import ITEMS

    _, panels = _panels()
    (panel,) = [p for p in panels if p["title"].startswith("Estimated net savings")]
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
    items = set()
    for ref, expr in exprs.items():
        without_strings = re.sub(r'"[^"]*"', '""', expr)
        literals = set(re.findall(r"(?<![\w.$])\d+(?:\.\d*)?(?:e[+-]?\d+)?", without_strings, re.I))
        assert literals == {"3600"}, (ref, literals)  # seconds per hour, the panel's unit being $/h
        assert "azsidecar_router_price_usd" in expr, ref
        items |= set(re.findall(r'azsidecar_router_price_usd\{item="(\w+)"\}', expr))
    assert items == set(ITEMS)
    # The net line uses every price: it is the other lines' avoided minus costs.
    assert set(re.findall(r'item="(\w+)"', exprs["D"])) == set(ITEMS)
