"""Which agent of a zone owns a partition: rendezvous (highest random weight) hashing.

Every partition of a zone belongs to exactly one of the zone's agents, chosen by a stable
function of (agent address, topic, partition) alone: each proxy computes the same owner
with no coordination, and adding or removing an agent moves only the partitions that
agent gains or loses (about 1/n of them), never one between two other agents. The WAL
writer groups a zone's entries by owner, so each agent reads one contiguous byte range,
and the sender notifies each owner of its range (docs/routing.md, "Several agents per
zone"). Pure functions, table-tested in tests/leader_notify/test_owners.py.

Score: the first 8 bytes, big-endian, of BLAKE2b-64(address ‖ 0x00 ‖ topic ‖ 0x00 ‖
partition as decimal); the highest score owns the partition, ties (never seen in
practice) go to the first agent in the list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from wal_s3.agent_shares import share_name


class _Entry(Protocol):
    topic: str
    partition: int


def score(address: str, topic: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{address}\x00{topic}\x00{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_index(agents: Sequence[str], topic: str, partition: int) -> int:
    """Index in `agents` of the owner of topic-partition. Raises ValueError for no agents."""
    if not agents:
        raise ValueError("a zone needs at least one agent")
    if len(agents) == 1:
        return 0
    best, best_score = 0, -1
    for i, address in enumerate(agents):
        s = score(address, topic, partition)
        if s > best_score:
            best, best_score = i, s
    return best


def agent_lists(agents: Mapping[str, str | Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """`notify.agents` with every zone as a tuple of addresses (one address stays one)."""
    return {zone: (a,) if isinstance(a, str) else tuple(a) for zone, a in agents.items()}


def health_key(zone: str, agents: Sequence[str], index: int) -> str:
    """The name health is tracked by (circuit breakers, readiness): the zone for a one-agent
    zone, `<zone>/<address>` for each agent of a zone with several."""
    return zone if len(agents) <= 1 else f"{zone}/{agents[index]}"


def probe_targets(agents: Mapping[str, str | Sequence[str]], skip_zone: str | None = None) -> dict[str, str]:
    """Every agent to probe, by health key, except those of `skip_zone` (the proxy's own)."""
    return {health_key(zone, addresses, i): address
            for zone, addresses in agent_lists(agents).items() if zone != skip_zone
            for i, address in enumerate(addresses)}


class AgentMap:
    """The agents of each zone and who owns what. Caches owners (a proxy asks per batch)."""

    def __init__(self, agents: Mapping[str, str | Sequence[str]]) -> None:
        self._agents = agent_lists(agents)
        self._owners: dict[tuple[str, str, int], int] = {}

    def agents(self, zone: str) -> tuple[str, ...]:
        return self._agents.get(zone, ())

    def count(self, zone: str) -> int:
        return len(self._agents.get(zone, ()))

    def owner(self, zone: str, topic: str, partition: int) -> int:
        """Index of the owning agent of `zone` (0 for a zone with one or no agent)."""
        key = (zone, topic, partition)
        found = self._owners.get(key)
        if found is None:
            agents = self._agents.get(zone, ())
            found = owner_index(agents, topic, partition) if len(agents) > 1 else 0
            if len(self._owners) > 1_000_000:  # topics come and go: a bound, not an LRU
                self._owners.clear()
            self._owners[key] = found
        return found

    def share_of(self, zone: str, topic: str, partition: int) -> str:
        """The share name of topic-partition in `zone` (the WAL writer groups entries by it)."""
        n = self.count(zone)
        return zone if n <= 1 else share_name(zone, self.owner(zone, topic, partition), n)

    def slices(self, zone: str, entries: Sequence[_Entry]) -> list[tuple[int, int, int]]:
        """(agent index, first entry, end entry) of each owner's run in a zone share.

        Raises ValueError if an owner's entries are not one contiguous run (the share was
        not laid out by owner: a writer built without this map).
        """
        out: list[tuple[int, int, int]] = []
        if self.count(zone) <= 1:
            return [(0, 0, len(entries))] if entries else []
        seen: set[int] = set()
        for i, e in enumerate(entries):
            owner = self.owner(zone, e.topic, e.partition)
            if out and out[-1][0] == owner:
                out[-1] = (owner, out[-1][1], i + 1)
                continue
            if owner in seen:
                raise ValueError(f"entries of agent {owner} of {zone} are not contiguous in the share")
            seen.add(owner)
            out.append((owner, i, i + 1))
        return out
