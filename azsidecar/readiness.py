"""Liveness and readiness: what /livez and /readyz answer, decided from facts (pure).

A monitor task in each process collects facts on its event loop every `PROBE_INTERVAL_S`
(`azsidecar/proxy_monitor.py`, `azsidecar/agent_monitor.py`); the status server's thread reads the latest facts and asks these
functions. Live: the event loop turned recently. Ready:

- proxy: not draining; the upstream cluster answered a Metadata request recently; every
  other zone either has the WAL path (its agents accept connections, its circuit is
  closed) or is on fallback to direct (`router.fallback = "direct"`: producers are still
  served, straight across zones). With `router.fallback = "fail"` a zone without its WAL
  path makes the proxy unready.
- agent: not draining; its zone's brokers answered a Metadata request recently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PROBE_INTERVAL_S = 5.0  # Kubernetes probes every 10 s by default: a fact is at most one probe behind
STALE_AFTER_S = 3 * PROBE_INTERVAL_S  # a probe older than this says nothing any more
LOOP_STALL_S = 10.0  # an event loop that has not turned for this long is wedged: not live


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str
    at: float  # time.monotonic() of the probe


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


@dataclass(frozen=True)
class ProxyFacts:
    heartbeat: float  # time.monotonic() of the event loop's last turn seen by the monitor
    draining: bool = False
    upstream: Probe | None = None
    agents: Mapping[str, Probe] = field(default_factory=dict)  # other zones' agents (TCP connect)
    circuits: Mapping[str, str] = field(default_factory=dict)  # zone -> closed | open | half_open
    fallback: str = "direct"
    # zone -> the circuit with its cause ("open: zone_partitioned after 1 failure(s) (...)"), router/zone_health.py
    circuit_reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentFacts:
    heartbeat: float
    draining: bool = False
    brokers: Probe | None = None


def liveness(heartbeat: float, now: float) -> Check:
    stalled_s = now - heartbeat
    if stalled_s > LOOP_STALL_S:
        return Check(False, f"event loop has not turned for {stalled_s:.1f} s")
    return Check(True, "event loop turning")


def _probe_check(probe: Probe | None, what: str, now: float) -> Check:
    if probe is None:
        return Check(False, f"{what}: not probed yet")
    if now - probe.at > STALE_AFTER_S:
        return Check(False, f"{what}: last probe {now - probe.at:.0f} s ago")
    return Check(probe.ok, f"{what}: {probe.detail}")


def _draining(draining: bool) -> Check:
    return Check(not draining, "draining: shutting down" if draining else "serving")


def assess_proxy(facts: ProxyFacts, now: float) -> dict[str, Check]:
    """Every readiness check of a proxy by name; ready when all are ok."""
    checks = {"draining": _draining(facts.draining),
              "upstream": _probe_check(facts.upstream, "upstream Metadata", now)}
    for zone in sorted(facts.agents):
        agent = _probe_check(facts.agents[zone], "agent", now)
        circuit = facts.circuits.get(zone, "closed")
        reason = facts.circuit_reasons.get(zone, circuit)
        if agent.ok and circuit != "open":
            checks[f"zone:{zone}"] = Check(True, f"WAL path ({agent.detail}, circuit {reason})")
        elif facts.fallback == "direct":
            why = f"{agent.detail}; circuit {reason}" if not agent.ok else f"circuit {reason}"
            checks[f"zone:{zone}"] = Check(True, f"fallback to direct ({why})")
        else:
            why = f"{agent.detail}; circuit {reason}" if not agent.ok else f"circuit {reason}"
            checks[f"zone:{zone}"] = Check(False, f"no WAL path and router.fallback = fail ({why})")
    return checks


def assess_agent(facts: AgentFacts, now: float) -> dict[str, Check]:
    return {"draining": _draining(facts.draining),
            "brokers": _probe_check(facts.brokers, "zone's brokers Metadata", now)}


def ready(checks: Mapping[str, Check]) -> bool:
    return all(c.ok for c in checks.values())
