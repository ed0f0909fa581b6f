"""What /livez and /readyz decide from the monitor's facts (pure), table by table."""

from __future__ import annotations

import pytest

from azsidecar.readiness import (
    LOOP_STALL_S,
    STALE_AFTER_S,
    AgentFacts,
    Check,
    Probe,
    ProxyFacts,
    assess_agent,
    assess_proxy,
    liveness,
    ready,
)

NOW = 1000.0
UP = Probe(True, "answered", NOW - 1)
DOWN = Probe(False, "ConnectionRefusedError: refused", NOW - 1)
OLD = Probe(True, "answered", NOW - STALE_AFTER_S - 1)


def test_liveness():
    assert liveness(NOW - 1, NOW) == Check(True, "event loop turning")
    assert liveness(NOW - LOOP_STALL_S - 2, NOW) == Check(False, f"event loop has not turned for {LOOP_STALL_S + 2:.1f} s")


@pytest.mark.parametrize(("facts", "is_ready", "zone_detail"), [
    (ProxyFacts(NOW, upstream=UP, agents={"az2": UP}), True, "WAL path (agent: answered, circuit closed)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": DOWN}), True,
     "fallback to direct (agent: ConnectionRefusedError: refused)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": UP}, circuits={"az2": "open"}), True,
     "fallback to direct (circuit open)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": UP}, circuits={"az2": "half_open"}), True,
     "WAL path (agent: answered, circuit half_open)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": DOWN}, fallback="fail"), False,
     "no WAL path and router.fallback = fail (agent: ConnectionRefusedError: refused)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": OLD}, fallback="fail"), False,
     f"no WAL path and router.fallback = fail (agent: last probe {STALE_AFTER_S + 1:.0f} s ago)"),
])
def test_proxy_zones(facts, is_ready, zone_detail):
    checks = assess_proxy(facts, NOW)
    assert checks["zone:az2"].detail == zone_detail
    assert ready(checks) is is_ready


@pytest.mark.parametrize(("facts", "failing"), [
    (ProxyFacts(NOW, upstream=UP), set()),
    (ProxyFacts(NOW, upstream=None), {"upstream"}),  # not probed yet: not ready
    (ProxyFacts(NOW, upstream=DOWN), {"upstream"}),
    (ProxyFacts(NOW, upstream=OLD), {"upstream"}),
    (ProxyFacts(NOW, draining=True, upstream=UP), {"draining"}),
])
def test_proxy_upstream_and_draining(facts, failing):
    checks = assess_proxy(facts, NOW)
    assert {name for name, c in checks.items() if not c.ok} == failing


def test_agent():
    assert ready(assess_agent(AgentFacts(NOW, brokers=UP), NOW))
    assert not ready(assess_agent(AgentFacts(NOW, brokers=DOWN), NOW))
    assert not ready(assess_agent(AgentFacts(NOW, draining=True, brokers=UP), NOW))
    assert assess_agent(AgentFacts(NOW), NOW)["brokers"] == Check(False, "zone's brokers Metadata: not probed yet")
