"""Each destination's WAL-path circuit (the zone, or `zone/agent address` for a zone with
several agents), fed by the router's outcomes, the monitor's agent probes and the gray
failures the WAL writer and the notification sender report as they happen.

Decisions are router/zone_health.py's (pure); this keeps the circuits, asks the proxy's
metadata whether a zone's brokers are still listed (a zone gone from metadata is
partitioned, not an agent fault), and publishes each circuit's state as metrics.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from kafka_upstream.metadata import MetadataCache
from leader_notify.sender.owners import AgentMap, health_key
from router import metrics as router_metrics
from router.zone_health import HEALTHY, Signal, ZoneCircuit, at, observe


class ZoneCircuits:
    """The circuits by breaker key. `follow(metadata)` once the proxy's metadata exists."""

    def __init__(self, agents: AgentMap, broker_zones: Mapping[str, str]) -> None:
        self._agents = agents
        self._broker_zones = broker_zones
        self._metadata: MetadataCache | None = None
        self._circuits: dict[str, ZoneCircuit] = {}
        # key -> (open, cause) as last set in the gauges: every WAL-routed batch's outcome is
        # observed, nearly always "OK on a closed circuit", and six gauge writes for it (two
        # dozen Python calls) changed nothing but cost the request path.
        self._published: dict[str, tuple[bool, str]] = {}

    def follow(self, metadata: MetadataCache) -> None:
        """Judge whether a zone's brokers are listed from this proxy's metadata."""
        self._metadata = metadata

    def key(self, zone: str, topic: str, partition: int) -> str:
        """What health is tracked by: the zone, or `zone/agent address` when it has several."""
        agents = self._agents.agents(zone)
        return health_key(zone, agents, self._agents.owner(zone, topic, partition)) if len(agents) > 1 else zone

    # ---- gray failures, reported at once by the writer and the sender --------------------

    def put_abandoned(self, zones: tuple[str, ...]) -> None:
        """A WAL PUT holding entries for `zones` was abandoned at its gray deadline: S3 hung,
        so every agent of each zone is cut off from them."""
        for zone in zones:
            agents = self._agents.agents(zone)
            for key in sorted({health_key(zone, agents, i) for i in range(len(agents))} or {zone}):
                self._gray(key, "s3_put")

    def notify_abandoned(self, zone: str, agent: int) -> None:
        """A notification attempt to agent `agent` of `zone` was abandoned at its gray deadline."""
        self._gray(health_key(zone, self._agents.agents(zone), agent), "notify")

    def _gray(self, key: str, kind: str) -> None:
        """A failure for that breaker now, not after every retry."""
        router_metrics.GRAY_FAILURES.labels(key, kind).inc()
        self.observe(key, Signal.S3_FAILED if kind == "s3_put" else Signal.DEADLINE,
                     f"{kind} abandoned at its gray deadline")

    # ---- observations and states ----------------------------------------------------------

    def observe(self, key: str, signal: Signal, detail: str = "") -> None:
        """One signal about a destination's WAL path: the router's own outcomes, and the
        monitor's agent probes."""
        listed = None if signal is Signal.OK else self._zone_brokers_listed(key.split("/", 1)[0])
        circuit = observe(self._circuits.get(key, HEALTHY), signal, trio.current_time(), listed, detail)
        self._circuits[key] = circuit
        self._publish(key, circuit)

    def _zone_brokers_listed(self, zone: str) -> bool | None:
        """Whether the last Metadata listed a broker of `zone` (None: no broker has a known zone)."""
        if self._metadata is None:
            return None
        zones = {self._broker_zones.get(str(node_id)) or broker.rack
                 for node_id, broker in self._metadata.view.brokers.items()}
        zones.discard(None)
        zones.discard("")
        return (zone in zones) if zones else None

    def now(self, key: str, when: float) -> ZoneCircuit:
        """The circuit of `key` as of `when` (trio time): an open one may have become half open."""
        circuit = self._circuits.get(key)
        if circuit is None:
            return HEALTHY
        current = at(circuit, when)
        if current is not circuit:
            self._circuits[key] = current
            self._publish(key, current)
        return current

    def _publish(self, key: str, circuit: ZoneCircuit) -> None:
        """The circuit's state into the gauges, when it differs from what they show."""
        shown = (circuit.state == "open", circuit.cause.value if circuit.state != "closed" else "healthy")
        if self._published.get(key) == shown:
            return
        self._published[key] = shown
        is_open, cause = shown
        router_metrics.ZONE_OPEN.labels(key).set(1 if is_open else 0)
        for name in router_metrics.ZONE_CAUSES:
            router_metrics.ZONE_CONDITION.labels(key, name).set(1 if name == cause else 0)

    def states(self) -> dict[str, str]:
        """Each destination's circuit as of now: closed, open or half_open (those seen so far)."""
        when = trio.current_time()
        return {key: self.now(key, when).state for key in list(self._circuits)}

    def reasons(self) -> dict[str, str]:
        """Each destination's circuit with its cause and what was last seen (for /readyz)."""
        when = trio.current_time()
        return {key: self.now(key, when).reason() for key in list(self._circuits)}
