"""The health a process's monitor records and /livez and /readyz answer from.

The proxy's monitor (trio, azsidecar/proxy_monitor.py) and the agent's (asyncio,
azsidecar/agent_monitor.py) write it from their event loops; the status server's thread
reads it (the facts: one attribute, replaced whole). No event loop here, so neither process
imports the other's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from prometheus_client import Gauge

from azsidecar.readiness import (
    AgentFacts,
    Check,
    Probe,
    ProxyFacts,
    assess_agent,
    assess_proxy,
    liveness,
)

READY = Gauge("azsidecar_ready", "1 while /readyz answers 200, as of the monitor's last probe (every 5 s)",
              ["component"])
HEARTBEAT_S = 1.0
PROBE_TIMEOUT_S = 4.0  # under PROBE_INTERVAL_S: a hung broker or agent is a failed probe, not a stuck monitor


class _StartupWait:
    """While start-up waits for the brokers (azsidecar/broker_wait.py) no event loop turns yet:
    the process is alive (a restart would only start the wait again) and not ready, with the
    wait's reason as the brokers' failed probe."""

    heartbeat: float
    starting: str | None = None  # the wait's latest reason while waiting

    def waiting_for_brokers(self, detail: str) -> None:
        self.starting = detail
        self._failed_probe(Probe(False, detail, time.monotonic()))

    def brokers_reachable(self) -> None:
        self.starting = None
        self.heartbeat = time.monotonic()

    def _failed_probe(self, probe: Probe) -> None:
        raise NotImplementedError

    def live(self) -> Check:
        if self.starting is not None:
            return Check(True, "starting: waiting for the upstream brokers")
        return liveness(self.heartbeat, time.monotonic())


class ProxyHealth(_StartupWait):
    def __init__(self, fallback: str, draining: Callable[[], bool] = lambda: False) -> None:
        self.heartbeat = time.monotonic()
        self.facts = ProxyFacts(heartbeat=self.heartbeat, fallback=fallback)
        self.draining = draining  # read at every /readyz: a shutdown shows at once
        self.warnings: dict[str, str] = {}  # kind -> sentence (azsidecar/placement_check.py); ready all the same

    def _failed_probe(self, probe: Probe) -> None:
        self.facts = dataclasses.replace(self.facts, upstream=probe)

    def checks(self) -> dict[str, Check]:
        facts = self.facts
        if self.draining() and not facts.draining:
            facts = ProxyFacts(facts.heartbeat, True, facts.upstream, facts.agents, facts.circuits, facts.fallback,
                               facts.circuit_reasons)
        checks = assess_proxy(facts, time.monotonic())
        checks.update({f"warning:{kind}": Check(True, text) for kind, text in self.warnings.items()})
        return checks


class AgentHealth(_StartupWait):
    def __init__(self) -> None:
        self.heartbeat = time.monotonic()
        self.facts = AgentFacts(heartbeat=self.heartbeat)

    def _failed_probe(self, probe: Probe) -> None:
        self.facts = dataclasses.replace(self.facts, brokers=probe)

    def checks(self) -> dict[str, Check]:
        return assess_agent(self.facts, time.monotonic())
