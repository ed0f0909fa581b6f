"""Routing settings: policy, zone placement overrides, prices, health fallback."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal

from core.configload import require
from core.prices import Prices
from router.pilot import wal_refusal


@dataclass(frozen=True)
class RouterConfig:
    policy: Literal["cost", "wal", "direct"] = "cost"  # cross-zone batches: "cost" WAL when cheaper, "wal" always, "direct" never
    fallback: Literal["direct", "fail"] = "direct"  # a zone whose circuit is open: send direct, or fail the batch retriably
    #: the leader's zone by broker id (`"111" = "use1-az2"`), for clusters whose brokers report no rack
    broker_zones: dict[str, str] = field(default_factory=dict)
    #: the leader's zone by `"topic-glob:partition"` or `"topic-glob:*"`; wins over broker_zones
    partition_zones: dict[str, str] = field(default_factory=dict)
    #: for clusters whose metadata does not place leaders in zones (Tansu: every broker
    #: leads everything): zone -> "host:port" of a broker in that zone. Direct batches for a
    #: partition led in that zone go there, so they cross the zone like a real leader hop
    zone_brokers: dict[str, str] = field(default_factory=dict)
    #: when a producer is answered, by topic glob: "leader" (default: once the leader appended)
    #: or "wal" (once the WAL object is durable in S3; docs/routing.md)
    ack_modes: dict[str, str] = field(default_factory=dict)
    prices: Prices = field(default_factory=Prices)
    # At start, with any ack_mode "wal" topic: how long the proxy may spend re-sending
    # acknowledged entries of its earlier epochs that no agent applied (leader_notify/sender/recovery.py)
    # before it serves anyway (what is left is logged; GC keeps it; `azsidecar recover`).
    recovery_timeout_s: float = 120.0  # at start: longest re-sending of unapplied ack_mode wal entries
    # Piloting: the WAL route is taken only by topics matching a glob here and none of
    # wal_exclude_topics; every other topic's cross-zone batches go direct (router/pilot.py).
    wal_topics: tuple[str, ...] = ("*",)  # topic globs that may take the WAL route; ["orders"] pilots one topic
    wal_exclude_topics: tuple[str, ...] = ()  # topic globs that never take the WAL route (wins over wal_topics)
    # Measure first: every batch goes where policy "direct" sends it (no WAL writer, no
    # agents, no bucket needed); each produce_batch audit record's shadow_route says where
    # `policy` and the topic globs would have sent it, for `azsidecar plan --from-audit`.
    shadow: bool = False  # measure-first mode: route everything direct, audit what `policy` would have done

    def __post_init__(self) -> None:
        for zone, hp in self.zone_brokers.items():
            host, sep, port = hp.rpartition(":")
            require(bool(sep) and bool(host) and port.isdigit(), f"router.zone_brokers.{zone}: {hp!r} is not host:port")
        for topic, mode in self.ack_modes.items():
            require(mode in ("leader", "wal"), f"router.ack_modes.{topic}: 'leader' or 'wal', got {mode!r}")
        require(self.recovery_timeout_s > 0, "router.recovery_timeout_s: must be > 0")
        for key in ("wal_topics", "wal_exclude_topics"):
            for pattern in getattr(self, key):
                require(bool(pattern.strip()), f"router.{key}: an empty topic glob matches no topic")

    def wal_refusal(self, topic: str) -> str | None:
        """Why `topic` may not take the WAL route (router/pilot.py), or None when it may."""
        return wal_refusal(topic, self.wal_topics, self.wal_exclude_topics)

    def ack_mode(self, topic: str) -> str:
        """The topic's ack mode: the first matching glob of ack_modes, else "leader"."""
        for pattern, mode in self.ack_modes.items():
            if fnmatch.fnmatchcase(topic, pattern):
                return mode
        return "leader"
