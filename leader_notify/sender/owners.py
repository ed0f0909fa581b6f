"""Which agent of a zone owns a partition (`notify.agent_ownership`).

"leader" (the default): every partition led by one broker belongs to the same agent, so a
broker gets one ProduceRequest per round from one agent, as from one agent serving the
whole zone (Kafka takes one batch per partition per request, so agents splitting a
broker's partitions multiply its requests and the CPU both sides spend on them;
docs/routing.md). A proxy ranks the brokers it has seen lead in the zone by node
id and gives the broker of rank r to agent r mod n: balanced, and stable until a broker
the proxy has not seen before leads there. A zone scales out with its brokers; agents
beyond the zone's brokers stand by. A partition whose leader is not known yet falls back
to "partition".

"partition": rendezvous (highest random weight) hashing of (agent address, topic,
partition): each proxy computes the same owner with no coordination, and adding or
removing an agent moves only the partitions that agent gains or loses (about 1/n of
them). Spreads even one broker's partitions over every agent, at n times the requests.
Score: the first 8 bytes, big-endian, of BLAKE2b-64(address ‖ 0x00 ‖ topic ‖ 0x00 ‖
partition as decimal); the highest score owns the partition, ties (never seen in
practice) go to the first agent in the list.

Either way the WAL writer groups a zone's entries by owner when it buffers them, so each
agent reads one contiguous byte range, and the layout is recorded with the object
(wal_s3/agent_shares.py): an owner that changes later (its leader moved) never splits an
object's run. The router drains a partition before its owner changes, as on any path
switch. Pure functions, table-tested in tests/unit/leader_notify/test_owners.py.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from wal_s3.agent_shares import share_name


class _Entry(Protocol):
    topic: str
    partition: int


class _Share(Protocol):
    @property
    def entries(self) -> Sequence[_Entry]: ...


class _Flushed(Protocol):
    @property
    def zones(self) -> Mapping[str, _Share]: ...


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


def leader_owner_index(count: int, leader_id: int, zone_leaders: Sequence[int]) -> int:
    """Index of the agent (of `count`) owning the partitions led by broker `leader_id`:
    its rank among `zone_leaders` (sorted node ids, containing it) modulo `count`."""
    if count < 1:
        raise ValueError("a zone needs at least one agent")
    rank = bisect.bisect_left(zone_leaders, leader_id)
    if rank == len(zone_leaders) or zone_leaders[rank] != leader_id:
        raise ValueError(f"broker {leader_id} is not among the zone's leaders {list(zone_leaders)}")
    return rank % count


OWNERSHIPS = ("leader", "partition")


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

    def __init__(self, agents: Mapping[str, str | Sequence[str]], ownership: str = "partition") -> None:
        if ownership not in OWNERSHIPS:
            raise ValueError(f"ownership {ownership!r} is not one of {OWNERSHIPS}")
        self._agents = agent_lists(agents)
        self.ownership = ownership
        self._owners: dict[tuple[str, str, int], int] = {}
        self._leader_of: dict[tuple[str, int], int] = {}  # topic-partition -> leader node id ("leader")
        self._zone_leaders: dict[str, list[int]] = {}  # zone -> node ids seen leading there, sorted

    def note_leader(self, zone: str, topic: str, partition: int, leader_id: int) -> bool:
        """The router resolved topic-partition's leader (in `zone`). Returns True if that
        can change owners: the partition's leader changed, or a new broker leads in `zone`."""
        if self.ownership != "leader" or self.count(zone) <= 1 or leader_id < 0:
            return False
        key = (topic, partition)
        changed = self._leader_of.get(key) != leader_id
        if changed:
            if len(self._leader_of) > 1_000_000:  # topics come and go: a bound, not an LRU
                self._leader_of.clear()
            self._leader_of[key] = leader_id
            for z in self._agents:
                self._owners.pop((z, topic, partition), None)
        leaders = self._zone_leaders.setdefault(zone, [])
        at = bisect.bisect_left(leaders, leader_id)
        if at == len(leaders) or leaders[at] != leader_id:
            leaders.insert(at, leader_id)  # ranks shift: every owner of the zone is recomputed
            self._owners = {k: v for k, v in self._owners.items() if k[0] != zone}
            return True
        return changed

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
            leader = self._leader_of.get((topic, partition)) if self.ownership == "leader" else None
            zone_leaders = self._zone_leaders.get(zone, ())
            if len(agents) <= 1:
                found = 0
            elif leader is not None and leader in zone_leaders:
                found = leader_owner_index(len(agents), leader, zone_leaders)
            else:
                found = owner_index(agents, topic, partition)
            if len(self._owners) > 1_000_000:  # topics come and go: a bound, not an LRU
                self._owners.clear()
            self._owners[key] = found
        return found

    def share_of(self, zone: str, topic: str, partition: int) -> str:
        """The share name of topic-partition in `zone` (the WAL writer groups entries by it)."""
        n = self.count(zone)
        return zone if n <= 1 else share_name(zone, self.owner(zone, topic, partition), n)

    def runs(self, flushed: _Flushed, zone: str) -> Sequence[tuple[int, int, int]]:
        """(agent index, first entry, end entry) of each owner's run in `flushed`'s share of
        `zone`: as the writer laid it out (recorded; asked per entry, so not copied), else
        recomputed by `slices`. Raises ValueError as `slices`."""
        recorded = getattr(flushed, "share_runs", None)
        if recorded and zone in recorded:
            return recorded[zone]
        return self.slices(zone, flushed.zones[zone].entries)

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
