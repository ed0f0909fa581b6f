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
     "fallback to direct (agent: ConnectionRefusedError: refused; circuit closed)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": UP}, circuits={"az2": "open"}), True,
     "fallback to direct (circuit open)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": UP}, circuits={"az2": "half_open"}), True,
     "WAL path (agent: answered, circuit half_open)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": DOWN}, fallback="fail"), False,
     "no WAL path and router.fallback = fail (agent: ConnectionRefusedError: refused; circuit closed)"),
    (ProxyFacts(NOW, upstream=UP, agents={"az2": OLD}, fallback="fail"), False,
     f"no WAL path and router.fallback = fail (agent: last probe {STALE_AFTER_S + 1:.0f} s ago; circuit closed)"),
    # The circuit's cause (router/zone_health.py) is shown, as the router has it.
    (ProxyFacts(NOW, upstream=UP, agents={"az2": DOWN}, circuits={"az2": "open"},
                circuit_reasons={"az2": "open: zone_partitioned after 1 failure(s) (agent probe: no answer)"}), True,
     "fallback to direct (agent: ConnectionRefusedError: refused; "
     "circuit open: zone_partitioned after 1 failure(s) (agent probe: no answer))"),
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


def test_a_failed_agent_probe_becomes_a_zone_signal():
    import errno

    import trio

    from azsidecar.proxy_monitor import probe_signal
    from router.zone_health import Signal

    refused = OSError("all attempts to connect to 127.0.0.1:1 failed")
    refused.__cause__ = ExceptionGroup("attempts", [ConnectionRefusedError(errno.ECONNREFUSED, "refused")])
    unreachable = OSError("all attempts to connect to 10.0.0.9:9400 failed")
    unreachable.__cause__ = ExceptionGroup("attempts", [OSError(errno.EHOSTUNREACH, "No route to host")])
    assert probe_signal(refused) is Signal.REFUSED
    assert probe_signal(unreachable) is Signal.NO_ANSWER
    assert probe_signal(trio.TooSlowError()) is Signal.NO_ANSWER
