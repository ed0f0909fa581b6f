"""The router with several agents in a zone, and prefetching (fakes above the sender):
owners are notified in parallel, each in object order; an agent that fails opens only its
own breaker, so only its partitions fall back; an object queued behind one in flight is
prefetched."""

from __future__ import annotations

import types

import pytest
import trio

from kafka_upstream.metadata import PartitionInfo
from kafka_upstream.upstream import BrokerAddress
from leader_notify.protocol import EntryResult
from leader_notify.sender.owners import AgentMap
from router.backend import RoutingBackend
from router.config import RouterConfig
from tests.unit.router.test_backend import CTX, FakeDirect, FakeMetadata, FakeWriter, item
from tests.unit.router.wal_wiring import wal_route
from wal_s3.agent_shares import share_index
from wal_s3.config import WalConfig

AGENTS = ("10.0.2.1:9400", "10.0.2.2:9400")
MAP = AgentMap({"az2": AGENTS})
# Owners of topic "t" among AGENTS, from leader_notify.sender.owners (pinned in its own test):
OWNER = {p: MAP.owner("az2", "t", p) for p in range(8)}
P0 = next(p for p, a in OWNER.items() if a == 0)  # a partition of agent 0
P1 = next(p for p, a in OWNER.items() if a == 1)  # and one of agent 1


class EntryWriter(FakeWriter):
    """FakeWriter whose object entries name their topic and partition (the owners need them)."""

    share_of = None

    async def buffer(self, entry, zone, waited_s=0.0):
        # The owner is decided when the entry is buffered and recorded with its object, as
        # WalWriter records share runs: a later owner change does not move a written entry.
        share = zone if self.share_of is None else self.share_of(zone, entry.topic, entry.partition)
        pending = await super().buffer(entry, zone, waited_s)
        pending.share = share
        return pending

    async def _release_in_order(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(0)
            queue, self._queue = self._queue, []
            for entry, zone, pending in queue:
                self.sequence += 1
                ref = types.SimpleNamespace(topic=entry.topic, partition=entry.partition, length=len(entry.batch))
                share = types.SimpleNamespace(offset=0, length=len(entry.batch), entries=(ref,))
                runs = {zone: ((share_index(pending.share), 0, 1),)} if pending.share != zone else {}
                flushed = types.SimpleNamespace(key=f"obj-{self.sequence}", sequence=self.sequence,
                                                bytes=len(entry.batch), zones={zone: share}, sealed_at=0.0,
                                                share_runs=runs)
                self.on_released(flushed)
                pending.finish(types.SimpleNamespace(key=flushed.key, entry_index_in_zone=0, flushed=flushed), None)


class AgentsSender:
    """Two agents in az2; agent `blocked` waits for `release`; agent `failing` times out."""

    agents = MAP
    prefetch_depth = 2
    pipeline_depth = 1

    def __init__(self, blocked: int | None = None, failing: int | None = None) -> None:
        self.blocked, self.failing = blocked, failing
        self.release = trio.Event()
        self.notified: list[tuple[int, str]] = []
        self.prefetched: list[tuple[int, str]] = []

    def share_of(self, zone, topic, partition):
        return MAP.share_of(zone, topic, partition)

    def start(self, flushed, zone, agent=0):
        return None

    async def prefetch(self, flushed, zone, agent=0):
        self.prefetched.append((agent, flushed.key))
        return True

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        if agent == self.blocked:
            await self.release.wait()
        self.notified.append((agent, flushed.key))
        if agent == self.failing:
            from leader_notify.sender.sender import NotifyError

            raise NotifyError("agent down", retriable=True)
        return [EntryResult(error_code=0, base_offset=100 + agent, duplicate=False)]


def backend_for(nursery, sender, log, writer=None):
    writer = writer or EntryWriter(log)
    wal, circuits = wal_route(writer, sender, nursery)
    config = RouterConfig(policy="wal", partition_zones={"*:*": "az2"})
    return RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits), writer


def test_both_agents_own_some_partitions():
    assert set(OWNER.values()) == {0, 1}


@pytest.mark.trio
async def test_agents_of_a_zone_proceed_in_parallel_each_in_order(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        sender = AgentsSender(blocked=0)
        backend, writer = backend_for(nursery, sender, log)
        slow = [await backend.submit([item("t", P0, 100)], CTX) for _ in range(2)]
        fast = await backend.submit([item("t", P1, 100)], CTX)
        with trio.fail_after(5):
            results = await fast()  # agent 1 answers while agent 0 is still blocked
        assert results[("t", P1)].base_offset == 101
        assert sender.notified == [(1, "obj-3")]
        # obj-2 waits behind obj-1 at agent 0: it was prefetched meanwhile, not notified.
        assert sender.prefetched == [(0, "obj-2")]
        sender.release.set()
        with trio.fail_after(5):
            assert [(await c())[("t", P0)].base_offset for c in slow] == [100, 100]
        assert sender.notified == [(1, "obj-3"), (0, "obj-1"), (0, "obj-2")]
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_an_agent_down_sends_only_its_own_partitions_to_the_fallback(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        sender = AgentsSender(failing=1)
        backend, _ = backend_for(nursery, sender, log)
        with trio.fail_after(5):
            for _ in range(3):  # three failures open agent 1's breaker
                for p in (P0, P1):
                    await (await backend.submit([item("t", p, 100)], CTX))()
            log.clear()
            r0 = await (await backend.submit([item("t", P0, 100)], CTX))()
            r1 = await (await backend.submit([item("t", P1, 100)], CTX))()
        assert r0[("t", P0)].error_code == 0 and r1[("t", P1)].error_code == 0
        assert [(path, p) for path, p, _t in log] == [("wal", P0), ("direct", P1)]
        nursery.cancel_scope.cancel()


class LeaderMetadata(FakeMetadata):
    """Leaders per partition that a test can move (every broker is in az2: partition_zones)."""

    def __init__(self, leaders: dict[int, int]) -> None:
        super().__init__()
        self.leaders = leaders

    async def leader(self, topic, partition):
        self.view.topics[topic] = True
        node = self.leaders[partition]
        return PartitionInfo(0, node, 0), BrokerAddress(node, f"b{node}", 9092, None), 0


class LeaderOwnedSender(AgentsSender):
    """AgentsSender whose agents own brokers (notify.agent_ownership = "leader")."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.agents = AgentMap({"az2": AGENTS}, "leader")

    def share_of(self, zone, topic, partition):
        return self.agents.share_of(zone, topic, partition)


@pytest.mark.trio
async def test_a_partition_whose_leader_moves_to_another_agents_broker_drains_first(autojump_clock):
    """t-0 led by broker 1 (agent 0) has a batch in flight at agent 0 when its leader moves to
    broker 2 (agent 1): the next batch waits until agent 0 has answered, then goes to agent 1."""
    log: list = []
    async with trio.open_nursery() as nursery:
        sender = LeaderOwnedSender()
        writer = EntryWriter(log)
        wal, circuits = wal_route(writer, sender, nursery)
        metadata = LeaderMetadata({0: 1, 1: 2})
        config = RouterConfig(policy="wal", partition_zones={"*:*": "az2"})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), metadata, wal, nursery, circuits=circuits)
        with trio.fail_after(5):
            for p in (0, 1):  # brokers 1 and 2 seen leading: ranks 0 and 1
                await (await backend.submit([item("t", p, 100)], CTX))()
        assert sender.notified == [(0, "obj-1"), (1, "obj-2")]
        sender.blocked = 0
        with trio.fail_after(5):
            first = await backend.submit([item("t", 0, 100)], CTX)  # to agent 0, which holds it
        metadata.leaders[0] = 2  # t-0's leader moves to broker 2, agent 1's
        second: list = []

        async def submit_second():
            second.append(await backend.submit([item("t", 0, 100)], CTX))

        nursery.start_soon(submit_second)
        await trio.sleep(1)  # (autojump clock) every task is blocked: the second batch waits
        assert second == [] and sender.agents.owner("az2", "t", 0) == 1
        assert sender.notified == [(0, "obj-1"), (1, "obj-2")]
        sender.release.set()
        with trio.fail_after(5):
            assert (await first())[("t", 0)].base_offset == 100
            while not second:
                await trio.sleep(0.01)
            assert (await second[0]())[("t", 0)].base_offset == 101  # agent 1 appended it
        assert sender.notified == [(0, "obj-1"), (1, "obj-2"), (0, "obj-3"), (1, "obj-4")]
        nursery.cancel_scope.cancel()
