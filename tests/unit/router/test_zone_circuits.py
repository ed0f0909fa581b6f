"""ZoneCircuits: the circuits' states reach the gauges, written only when what they show changes."""

from __future__ import annotations

import trio
from prometheus_client import REGISTRY

from leader_notify.sender.owners import AgentMap
from router import metrics as router_metrics
from router.zone_circuits import ZoneCircuits
from router.zone_health import OPEN_AFTER, Cause, Signal


def shown(zone: str) -> tuple[float | None, dict[str, float | None]]:
    """(circuit_open, {condition: value}) as a scrape reads them."""
    return (REGISTRY.get_sample_value("azsidecar_router_zone_circuit_open", {"dest_zone": zone}),
            {cause: REGISTRY.get_sample_value("azsidecar_router_zone_condition",
                                                {"dest_zone": zone, "condition": cause})
             for cause in router_metrics.ZONE_CAUSES})


def test_successes_write_the_gauges_once_and_a_change_writes_them_again():
    zone = "zc-az9"

    async def main():
        circuits = ZoneCircuits(AgentMap({}), {})
        circuits.observe(zone, Signal.OK)
        assert shown(zone) == (0.0, {"healthy": 1.0, "agent_slow": 0.0, "agent_gone": 0.0,
                                     "zone_partitioned": 0.0, "s3_unreachable": 0.0})
        # A sentinel in the gauge: the next successes must leave it alone (nothing changed).
        router_metrics.ZONE_OPEN.labels(zone).set(7)
        for _ in range(3):
            circuits.observe(zone, Signal.OK)
        assert shown(zone)[0] == 7.0
        # S3 failures open the circuit: that is a change, written at once.
        for _ in range(OPEN_AFTER[Cause.S3_UNREACHABLE]):
            circuits.observe(zone, Signal.S3_FAILED, "PUT failed")
        assert shown(zone) == (1.0, {"healthy": 0.0, "agent_slow": 0.0, "agent_gone": 0.0,
                                     "zone_partitioned": 0.0, "s3_unreachable": 1.0})
        circuits.observe(zone, Signal.OK)  # closed again
        assert shown(zone) == (0.0, {"healthy": 1.0, "agent_slow": 0.0, "agent_gone": 0.0,
                                     "zone_partitioned": 0.0, "s3_unreachable": 0.0})
    trio.run(main)
