"""Warnings for configurations that quietly send every batch direct (pure decisions + publish)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from azsidecar.config import load_config
from azsidecar.health import ProxyHealth
from azsidecar.placement_check import publish, wal_path_off, zone_rack_problem

AGENTS = {"use1-az2": "10.0.2.15:9400"}


def config(**overrides):
    return load_config(overrides={"zone": "use1-az1", "wal.bucket": "acme-wal", "wal.region": "us-east-1", **overrides})


@pytest.mark.parametrize(("overrides", "policy", "code"), [
    ({"notify.agents": AGENTS}, "cost", None),
    ({"notify.agents": AGENTS}, "wal", None),
    ({"notify.agents": AGENTS}, "direct", "policy_direct"),
    ({}, "cost", "no_agents"),
    ({"notify.agents": {"use1-az1": "10.0.1.15:9400"}}, "cost", "agents_only_in_own_zone"),
    ({"notify.agents": AGENTS, "router.shadow": True}, "cost", "shadow"),
    ({"router.shadow": True}, "cost", "shadow"),  # shadow needs no agents, and says why it is direct
])
def test_wal_path_off(overrides, policy, code):
    found = wal_path_off(config(**overrides), policy)
    assert (found[0] if found else None) == code


@pytest.mark.parametrize(("racks", "overrides", "code"), [
    (["use1-az1", "use1-az2", "use1-az3"], {}, None),
    (["use1-az2", "use1-az3"], {}, "zone_not_a_rack"),
    (["use1-az4", None], {}, "zone_not_a_rack"),
    ([None, None], {}, "no_racks"),
    ([], {}, "no_racks"),
    ([None], {"router.broker_zones": {"1": "use1-az1", "2": "use1-az2"}}, None),
    ([None], {"router.broker_zones": {"1": "use1-az2"}}, "zone_not_a_rack"),
    ([None], {"router.partition_zones": {"orders:*": "use1-az1"}}, None),
])
def test_zone_rack_problem(racks, overrides, code):
    found = zone_rack_problem("use1-az1", racks, config(**overrides))
    assert (found[0] if found else None) == code


def test_zone_rack_problem_names_the_zones_it_knows():
    assert zone_rack_problem("use1-az9", ["use1-az2", "use1-az1"], config()) == (
        "zone_not_a_rack", "zone use1-az9 matches no broker's zone (use1-az1, use1-az2): no leader is ever local; "
                           "check that zone is this host's AZ id in the brokers' account")


def _gauge(kind, reason):
    return REGISTRY.get_sample_value("azsidecar_proxy_config_warning", {"kind": kind, "reason": reason})


def test_publish_logs_exports_and_shows_a_warning_until_it_clears(caplog):
    health = ProxyHealth("direct")
    shown: dict = {}
    caplog.set_level("INFO", logger="azsidecar.placement_check")
    publish(health, "zone_rack", ("no_racks", "no broker reports a rack"), shown)
    publish(health, "zone_rack", ("no_racks", "no broker reports a rack"), shown)  # once, not per check
    assert _gauge("zone_rack", "no_racks") == 1
    assert health.checks()["warning:zone_rack"].ok is True  # ready all the same
    assert health.checks()["warning:zone_rack"].detail == "no broker reports a rack"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", "no broker reports a rack")]
    publish(health, "zone_rack", None, shown)
    assert _gauge("zone_rack", "no_racks") is None
    assert "warning:zone_rack" not in health.checks()
    assert caplog.records[-1].getMessage() == "cleared: no broker reports a rack"
