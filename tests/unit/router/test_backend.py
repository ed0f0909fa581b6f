"""RoutingBackend above its adapters: fake WAL writer, notify sender and direct path.

Real trio, a mock clock for the scripted rates; the adapters themselves are proven by
the integration tests (tests/integration/wal_s3, tests/integration/leader_notify, tests/system/e2e).
"""

from __future__ import annotations

import time
import types
import weakref

import pytest
import trio
from prometheus_client import REGISTRY

from core.audit import MemoryAuditSink
from core.produce import AwaitedCompletion, PartitionBatches, PartitionResult, ProduceContext
from core.record_batch import RecordBatch
from kafka_upstream.errors import UpstreamTimeout
from kafka_upstream.metadata import PartitionInfo
from kafka_upstream.upstream import BrokerAddress
from leader_notify.protocol import EntryResult
from leader_notify.sender.owners import AgentMap
from leader_notify.sender.sender import Answer
from router.backend import RoutingBackend
from router.config import RouterConfig
from tests.refcount import WeakBuffer, collector_off, still_alive
from tests.unit.router.wal_wiring import wal_route
from wal_s3.config import WalConfig

CTX = ProduceContext(acks=-1, timeout_ms=30_000, transactional_id=None, client_version=9)


def batch(nbytes: int) -> RecordBatch:
    return RecordBatch(memoryview(b"x" * nbytes), 7, 0, 0, 1, False, 0)


def made_at(first_timestamp_ms: int) -> PartitionBatches:
    """A WAL-routed batch of t-0 whose first record was made at `first_timestamp_ms`."""
    return PartitionBatches("t", 0, (RecordBatch(memoryview(b"x" * 100), -1, -1, -1, 1, False, 0,
                                                 first_timestamp_ms),))


def item(topic: str, partition: int, nbytes: int) -> PartitionBatches:
    return PartitionBatches(topic, partition, (batch(nbytes),))


class FakeMetadata:
    def __init__(self) -> None:
        self.view = types.SimpleNamespace(topics={}, brokers={})
        self.invalidated: list[str] = []

    async def leader(self, topic, partition):
        self.view.topics[topic] = True
        return PartitionInfo(0, 1, 0), BrokerAddress(1, "b1", 9092, None), 0

    def invalidate(self, topic):
        self.invalidated.append(topic)
        self.view.topics.pop(topic, None)

    def cached(self, topic):
        return topic in self.view.topics


class FakeDirect:
    def __init__(self, log: list) -> None:
        self.log = log

    async def submit(self, items, ctx):
        for it in items:
            self.log.append(("direct", it.partition, trio.current_time()))

        async def complete():
            return {(it.topic, it.partition): PartitionResult(0, 100) for it in items}
        return AwaitedCompletion(complete)


class FakePending:
    def __init__(self) -> None:
        self.callbacks: list = []
        self.outcome = None

    def add_done_callback(self, callback) -> None:
        if self.outcome is not None:
            callback(*self.outcome)
        else:
            self.callbacks.append(callback)

    def finish(self, placement, error) -> None:
        self.outcome = (placement, error)
        for callback in self.callbacks:
            callback(placement, error)


class FakeWriter:
    """Each buffered entry becomes its own object, released in order at the next scheduler
    turn (or, with hold, once the test sets `release`), as WalWriter releases objects."""

    def __init__(self, log: list, hold: bool = False) -> None:
        self.log = log
        self.hold = hold
        self.on_released = None
        self.release = trio.Event()
        self.sequence = 0
        self._queue: list = []
        self._wake = trio.Event()
        self._releasing = False
        self.waited: list[float] = []

    async def buffer(self, entry, zone, waited_s=0.0):
        self.log.append(("wal", entry.partition, trio.current_time()))
        self.waited.append(waited_s)
        pending = FakePending()
        self._queue.append((entry, zone, pending))
        self._wake.set()
        if not self._releasing:
            self._releasing = True
            trio.lowlevel.spawn_system_task(self._release_in_order)
        return pending

    def fails(self, entry):
        return None

    async def _release_in_order(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self.hold:
                await self.release.wait()
            await trio.sleep(0)  # the entry's object is released later than its buffering
            queue, self._queue = self._queue, []
            for entry, zone, pending in queue:
                error = self.fails(entry)
                if error is not None:  # the object's PUT gave up: its entries get the error
                    pending.finish(None, error)
                    continue
                self.sequence += 1
                ref = types.SimpleNamespace(length=len(entry.batch))
                share = types.SimpleNamespace(offset=0, length=len(entry.batch), entries=(ref,))
                flushed = types.SimpleNamespace(key=f"obj-{self.sequence}", sequence=self.sequence,
                                                bytes=len(entry.batch), zones={zone: share}, sealed_at=0.0)
                self.on_released(flushed)
                pending.finish(types.SimpleNamespace(key=flushed.key, entry_index_in_zone=0, flushed=flushed), None)


class SenderFake:
    agents = AgentMap({})  # one agent per zone (tests/unit/router/test_agents_per_zone.py has several)
    prefetch_depth = 0
    pipeline_depth = 1

    def share_of(self, zone, topic, partition):
        return zone

    def start(self, flushed, zone, agent=0):
        return None  # never writes ahead: notify() does all (the real sender's start has its own tests)

    async def prefetch(self, flushed, zone, agent=0):
        return False


class FakeSender(SenderFake):
    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        return [EntryResult(error_code=0, base_offset=500, duplicate=False)]


async def make_backend(nursery, policy: str, log: list, hold: bool = False):
    writer = FakeWriter(log, hold)
    wal, circuits = wal_route(writer, FakeSender(), nursery)
    config = RouterConfig(policy=policy, partition_zones={"t:*": "az2", "local:*": "az1"})
    backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
    return backend, writer


def audited_backend(nursery, log: list, audit) -> RoutingBackend:
    """Policy wal, topic t led in az2 (the WAL route) and topic local in az1, audited to `audit`."""
    wal, circuits = wal_route(FakeWriter(log), FakeSender(), nursery)
    config = RouterConfig(policy="wal", partition_zones={"t:*": "az2", "local:*": "az1"})
    return RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, audit,
                          circuits=circuits)


def wal_backend(nursery, sender, log: list, writer=None, audit=None, metadata=None) -> RoutingBackend:
    """Every partition led in az2, policy wal, through `writer` (a FakeWriter by default)."""
    wal, circuits = wal_route(writer or FakeWriter(log), sender, nursery)
    config = RouterConfig(policy="wal", partition_zones={"*:*": "az2"})
    return RoutingBackend("az1", config, WalConfig(), FakeDirect(log), metadata or FakeMetadata(), wal, nursery,
                          audit, circuits=circuits)


async def send(backend, it):
    complete = await backend.submit([it], CTX)
    return await complete()


@pytest.mark.trio
async def test_cost_policy_thin_traffic_goes_direct_heavy_traffic_goes_wal(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend, _ = await make_backend(nursery, "cost", log)
        # Thin: 2 KB a second to az2 -> 250 ms objects of 500 B; a PUT per 500 B is far
        # dearer than $0.02/GB.
        for _ in range(20):
            await send(backend, item("t", 0, 2_000))
            await trio.sleep(1.0)
        assert {route for route, _p, _t in log} == {"direct"}
        log.clear()
        # Heavy: 1 MB every 50 ms = 20 MB/s -> 5 MB objects: the WAL wins once the rate
        # estimate has seen it; it must not flap back while the traffic stays heavy.
        for _ in range(100):
            await send(backend, item("t", 0, 1_000_000))
            await trio.sleep(0.05)
        routes = [route for route, _p, _t in log]
        assert routes[-50:] == ["wal"] * 50
        first_wal = routes.index("wal")
        assert "direct" not in routes[first_wal:]
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_same_zone_is_local_whatever_the_policy(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend, _ = await make_backend(nursery, "wal", log)
        results = await send(backend, item("local", 3, 100))
        assert results[("local", 3)].base_offset == 100
        assert log[0][0] == "direct" and backend.route_counts == {"local": 1}
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_path_switch_waits_for_the_old_path_to_drain(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend, writer = await make_backend(nursery, "wal", log, hold=True)
        first = await backend.submit([item("t", 0, 100)], CTX)  # buffered in the WAL, not durable
        backend.set_policy("direct")
        second_done = trio.Event()

        async def second():
            complete = await backend.submit([item("t", 0, 100)], CTX)
            await complete()
            second_done.set()

        nursery.start_soon(second)
        await trio.sleep(5.0)
        assert [r for r, _p, _t in log] == ["wal"]  # the direct batch waits behind the WAL one
        writer.release.set()
        assert (await first())[("t", 0)].base_offset == 500
        await second_done.wait()
        assert [r for r, _p, _t in log] == ["wal", "direct"]
        assert log[1][2] >= 5.0  # handed on only after the WAL batch completed
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_path_switch_waiting_long_for_the_old_path_is_logged(autojump_clock, caplog):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend, writer = await make_backend(nursery, "wal", log, hold=True)
        first = await backend.submit([item("t", 0, 100)], CTX)
        backend.set_policy("direct")
        second_done = trio.Event()

        async def second():
            await (await backend.submit([item("t", 0, 100)], CTX))()
            second_done.set()

        with caplog.at_level("WARNING", logger="router.backend"):
            nursery.start_soon(second)
            await trio.sleep(4.0)
            assert not caplog.records  # a short drain says nothing
            await trio.sleep(8.0)
            writer.release.set()
            await first()
            await second_done.wait()
        nursery.cancel_scope.cancel()
    assert [r.getMessage() for r in caplog.records] == [
        "t-0: switching from wal to direct_cross waits for 1 batch(es) still in flight on the old path",
        "t-0: the old path drained after 12.0 s"]


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.mark.trio
async def test_bytes_by_route_metrics_count_each_batch(autojump_clock):
    from prometheus_client import REGISTRY

    def sample(name, route):
        return REGISTRY.get_sample_value(name, {"route": route}) or 0.0

    before_in, before_out = sample("azsidecar_proxy_received_bytes_total", "wal"), sample("azsidecar_proxy_sent_bytes_total", "wal")
    log: list = []
    async with trio.open_nursery() as nursery:
        backend, _ = await make_backend(nursery, "wal", log)
        await send(backend, item("t", 1, 1234))
        await send(backend, item("t", 2, 766))
        nursery.cancel_scope.cancel()
    assert sample("azsidecar_proxy_received_bytes_total", "wal") - before_in == 2000
    assert sample("azsidecar_proxy_sent_bytes_total", "wal") - before_out == 2000


class BlockingSender(SenderFake):
    def __init__(self) -> None:
        self.release = trio.Event()
        self.notified: list[str] = []

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        await self.release.wait()
        self.notified.append(flushed.key)
        return [EntryResult(error_code=0, base_offset=900, duplicate=False)]


@pytest.mark.trio
async def test_ack_mode_wal_answers_when_durable_and_still_appends(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        writer, sender = FakeWriter(log), BlockingSender()
        wal, circuits = wal_route(writer, sender, nursery)
        config = RouterConfig(policy="wal", partition_zones={"*:*": "az2"}, ack_modes={"fire-*": "wal"})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
        with trio.fail_after(5):
            results = await send(backend, item("fire-and-forget", 0, 100))
        # Answered before the agent appended: offset unknown (-1), no error.
        assert (results[("fire-and-forget", 0)].error_code, results[("fire-and-forget", 0)].base_offset) == (0, -1)
        assert sender.notified == []
        sender.release.set()
        await trio.sleep(1)
        assert sender.notified == ["obj-1"]  # the append still happens
        # Topics outside the pattern wait for the leader's offset.
        leader_results = await send(backend, item("orders", 0, 100))
        assert leader_results[("orders", 0)].base_offset == 900
        # Transactional batches never use the WAL ack mode (they go direct, in fact).
        txn = PartitionBatches("fire-x", 1, (RecordBatch(memoryview(b"x" * 10), 7, 0, 0, 1, True, 0),))
        txn_results = await send(backend, txn)
        assert txn_results[("fire-x", 1)].base_offset == 100 and log[-1][0] == "direct"
        nursery.cancel_scope.cancel()


class FailingSender(SenderFake):
    def __init__(self) -> None:
        self.calls = 0

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        self.calls += 1
        from leader_notify.sender.sender import NotifyError

        raise NotifyError("agent unreachable", retriable=True)


@pytest.mark.trio
async def test_unreachable_zone_fails_retriably_then_falls_back_to_direct(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        writer, sender = FakeWriter(log), FailingSender()
        wal, circuits = wal_route(writer, sender, nursery)
        config = RouterConfig(policy="wal", fallback="direct", partition_zones={"*:*": "az2"})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
        codes = [(await send(backend, item("t", 0, 100)))[("t", 0)].error_code for _ in range(2)]
        assert codes == [7, 7]  # REQUEST_TIMED_OUT: retriable, the client retries
        # "agent unreachable" with the zone's brokers not known to be gone is agent_gone
        # (router/zone_health.py): two consecutive failures open the circuit, the next batch goes direct.
        assert (await send(backend, item("t", 0, 100)))[("t", 0)].base_offset == 100
        assert [r for r, _p, _t in log] == ["wal", "wal", "direct"]
        assert backend.zone_reasons()["az2"].startswith("open: agent_gone after 2 failure(s)")
        # The gauge names the destination as dest_zone: `zone` is the scrape target's own.
        assert circuit_open("az2") == 1.0
        # Nothing is kept for objects whose entries all got their answer.
        assert all(n.pending_objects == 0 for n in wal.announcer._notifiers.values())
        # After the open period (10 s) the WAL is tried again.
        await trio.sleep(10.5)
        await send(backend, item("t", 0, 100))
        assert log[-1][0] == "wal"
        nursery.cancel_scope.cancel()
    assert circuit_open("az2") == 1.0  # the half-open try failed too (FailingSender): open again


def circuit_open(dest_zone: str) -> float | None:
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value("azsidecar_router_zone_circuit_open", {"dest_zone": dest_zone})


@pytest.mark.trio
async def test_unreachable_zone_with_fallback_fail_keeps_failing_retriably(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        wal, circuits = wal_route(FakeWriter(log), FailingSender(), nursery)
        config = RouterConfig(policy="wal", fallback="fail", partition_zones={"*:*": "az2"})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
        codes = [(await send(backend, item("t", 0, 100)))[("t", 0)].error_code for _ in range(5)]
        assert codes == [7] * 5 and "direct" not in [r for r, _p, _t in log]
        nursery.cancel_scope.cancel()


class FailSecondObjectWriter(FakeWriter):
    def fails(self, entry):
        from wal_s3.writer import WalWriteError

        return WalWriteError("PUT gave up", retriable=True) if entry.base_sequence == 1 else None


class RefuseSecondBatchWriter(FakeWriter):
    async def buffer(self, entry, zone, waited_s=0.0):
        if entry.base_sequence == 1:
            from wal_s3.writer import WalWriteError

            raise WalWriteError("writer stopped", retriable=True)  # refused before buffering
        return await super().buffer(entry, zone)


@pytest.mark.trio
@pytest.mark.parametrize("ack_mode", ["leader", "wal"])
@pytest.mark.parametrize("writer_class", [FailSecondObjectWriter, RefuseSecondBatchWriter])
async def test_a_failed_later_batch_fails_the_partition(autojump_clock, ack_mode, writer_class):
    log: list = []
    async with trio.open_nursery() as nursery:
        wal, circuits = wal_route(writer_class(log), FakeSender(), nursery)
        config = RouterConfig(policy="wal", partition_zones={"*:*": "az2"}, ack_modes={"t": ack_mode})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
        two = PartitionBatches("t", 0, (RecordBatch(memoryview(b"a" * 10), 7, 0, 0, 1, False, 0),
                                        RecordBatch(memoryview(b"b" * 10), 7, 0, 1, 1, False, 0)))
        result = (await send(backend, two))[("t", 0)]
        assert result.error_code == 7  # retriable; never acknowledged with one batch missing
        nursery.cancel_scope.cancel()


class FailFirstSender(SenderFake):
    def __init__(self) -> None:
        self.calls = 0

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        self.calls += 1
        if self.calls == 1:
            from leader_notify.sender.sender import NotifyError

            raise NotifyError("agent unreachable", retriable=True)
        return [EntryResult(error_code=0, base_offset=self.calls, duplicate=False)]


def seq_item(sequence: int, producer_id: int = 7) -> PartitionBatches:
    return PartitionBatches("t", 0, (RecordBatch(memoryview(b"x" * 10), producer_id, 0, sequence, 5, False, 0),))


@pytest.mark.trio
async def test_later_batches_wait_for_the_retry_of_a_failed_one(autojump_clock):
    """A gap in a producer's sequence would make the leader answer OUT_OF_ORDER_SEQUENCE_NUMBER,
    which librdkafka treats as fatal: later batches are failed (retriably) until the client
    resends the failed one."""
    log: list = []
    async with trio.open_nursery() as nursery:
        sender = FailFirstSender()
        backend = wal_backend(nursery, sender, log)
        assert (await send(backend, seq_item(0)))[("t", 0)].error_code == 7  # WAL path failed
        forwarded = len(log)
        held = (await send(backend, seq_item(5)))[("t", 0)]
        assert held.error_code == 7 and len(log) == forwarded  # failed without being forwarded
        assert (await send(backend, seq_item(5, producer_id=8)))[("t", 0)].error_code == 0  # another producer
        assert (await send(backend, seq_item(0)))[("t", 0)].error_code == 0  # the retry goes through
        assert (await send(backend, seq_item(5)))[("t", 0)].error_code == 0  # and then the rest
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_failed_batch_not_retried_for_seconds_is_logged_once(autojump_clock, caplog):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend = wal_backend(nursery, FailFirstSender(), log)
        assert (await send(backend, seq_item(0)))[("t", 0)].error_code == 7
        with caplog.at_level("WARNING", logger="router.backend"):
            assert (await send(backend, seq_item(5)))[("t", 0)].error_code == 7
            assert not caplog.records  # held back at once: nothing to say yet
            await trio.sleep(6.0)
            for _ in range(3):
                assert (await send(backend, seq_item(5)))[("t", 0)].error_code == 7
        nursery.cancel_scope.cancel()
    [warning] = caplog.records
    assert warning.getMessage().startswith("t-0: producer 7's batch of sequence 0 failed 6.")


class FlakySender(SenderFake):
    """Fails the first `failures` notifications of obj-1; records every notification sent."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[tuple[str, float]] = []

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        self.sent.append((flushed.key, trio.current_time()))
        if flushed.key == "obj-1" and self.failures > 0:
            self.failures -= 1
            raise ConnectionError("agent unreachable")
        return [EntryResult(error_code=0, base_offset=500, duplicate=False)]


@pytest.mark.trio
async def test_ack_mode_wal_entries_are_re_sent_until_applied_before_later_objects(autojump_clock):
    log: list = []
    sender = FlakySender(failures=3)
    async with trio.open_nursery() as nursery:
        writer = FakeWriter(log)
        released = []

        def release_with_topic(flushed):  # the fake writer's objects hold one entry of topic "t"
            for share in flushed.zones.values():
                share.entries = tuple(types.SimpleNamespace(topic="t", length=r.length) for r in share.entries)
            released.append(flushed.key)
            wal_release(flushed)

        wal, circuits = wal_route(writer, sender, nursery, acked_topic=lambda topic: topic == "t")
        wal_release, writer.on_released = writer.on_released, release_with_topic
        # Policy "direct" and an unhealthy zone would send other topics straight there;
        # ack_mode wal keeps "t" on the WAL path whatever the policy.
        config = RouterConfig(policy="direct", partition_zones={"t:*": "az2"}, ack_modes={"t": "wal"})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
        first = await send(backend, item("t", 0, 100))
        second = await send(backend, item("t", 0, 100))
        with trio.fail_after(60):
            while len(sender.sent) < 5:
                await trio.sleep(0.1)  # the mock clock jumps; bounded by fail_after
        nursery.cancel_scope.cancel()
    # Both producers were answered on durability, before any delivery succeeded.
    assert first[("t", 0)] == PartitionResult(0, -1) and second[("t", 0)] == PartitionResult(0, -1)
    assert [route for route, _p, _t in log] == ["wal", "wal"]
    # obj-1 failed three times and was re-sent with growing backoff (0.5, 1, 2 s) before obj-2 went.
    assert [key for key, _t in sender.sent] == ["obj-1", "obj-1", "obj-1", "obj-1", "obj-2"]
    gaps = [b - a for (_k, a), (_k2, b) in zip(sender.sent, sender.sent[1:4])]
    assert gaps == pytest.approx([0.5, 1.0, 2.0], abs=0.01)


class RefusingSender(SenderFake):
    """The agent answers obj-1's entry with a non-retriable Kafka error (UNKNOWN_SERVER_ERROR)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        self.sent.append(flushed.key)
        code = -1 if flushed.key == "obj-1" else 0
        return [EntryResult(error_code=code, base_offset=-1, duplicate=False)]


@pytest.mark.trio
async def test_ack_mode_wal_re_send_stops_on_an_error_no_retry_can_fix(autojump_clock):
    log: list = []
    sender = RefusingSender()
    async with trio.open_nursery() as nursery:
        writer = FakeWriter(log)

        def release_with_topic(flushed):
            for share in flushed.zones.values():
                share.entries = tuple(types.SimpleNamespace(topic="t", length=r.length) for r in share.entries)
            wal_release(flushed)

        wal, circuits = wal_route(writer, sender, nursery, acked_topic=lambda topic: topic == "t")
        wal_release, writer.on_released = writer.on_released, release_with_topic
        config = RouterConfig(policy="wal", partition_zones={"t:*": "az2"}, ack_modes={"t": "wal"})
        backend = RoutingBackend("az1", config, WalConfig(), FakeDirect(log), FakeMetadata(), wal, nursery, circuits=circuits)
        await send(backend, item("t", 0, 100))
        await send(backend, item("t", 0, 100))
        with trio.fail_after(60):
            await wal.drain()
        nursery.cancel_scope.cancel()
    # No endless re-send of obj-1 (it stays in S3 for GC to hold); the zone moved on.
    assert sender.sent == ["obj-1", "obj-2"]


class StartRecordingSender(BlockingSender):
    """Records which notifications the notifier let `start` write ahead (it writes none)."""

    def __init__(self) -> None:
        super().__init__()
        self.start_asked: list[str] = []
        self.started_passed: list = []

    def start(self, flushed, zone, agent=0):
        self.start_asked.append(flushed.key)
        return f"started-{flushed.key}"

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        self.started_passed.append((flushed.key, started))
        return await super().notify(flushed, zone, started, on_answer)


@pytest.mark.trio
async def test_a_notification_is_started_ahead_only_when_its_zone_is_idle(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        sender = StartRecordingSender()
        backend = wal_backend(nursery, sender, log)
        completions = [await backend.submit([item("t", p, 100)], CTX) for p in range(3)]
        await trio.sleep(1)  # obj-1 is being notified (blocked), obj-2 and obj-3 wait behind it
        assert sender.start_asked == ["obj-1"]  # obj-2 and obj-3 arrived while obj-1 was in flight
        sender.release.set()
        results = [await complete() for complete in completions]
        assert [r[("t", p)].base_offset for p, r in enumerate(results)] == [900, 900, 900]
        assert sender.started_passed == [("obj-1", "started-obj-1"), ("obj-2", None), ("obj-3", None)]
        await send(backend, item("t", 0, 100))  # the zone is idle again: started ahead
        assert sender.start_asked == ["obj-1", "obj-4"]
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_on_results_answers_a_wal_only_request_by_callback_before_its_audit(autojump_clock):
    from core.audit import MemoryAuditSink

    log: list = []
    audit = MemoryAuditSink()
    async with trio.open_nursery() as nursery:
        backend = audited_backend(nursery, log, audit)
        seen: list = []
        answered = trio.Event()

        def consumer(results):
            seen.append((results, len(audit.of("produce_batch"))))
            answered.set()

        completion = await backend.submit([item("t", 0, 100), item("t", 1, 100)], CTX)
        assert completion.on_results(consumer)
        assert seen == []  # nothing is durable yet
        with trio.fail_after(5):
            await answered.wait()
        [(results, audited_before)] = seen
        assert {tp: (r.error_code, r.base_offset) for tp, r in results.items()} == {("t", 0): (0, 500),
                                                                                     ("t", 1): (0, 500)}
        assert audited_before == 0 and len(audit.of("produce_batch")) == 2  # audited after the answer
        # A direct partition too: answered by the task that settles it, also before its audit.
        answered = trio.Event()
        mixed = await backend.submit([item("t", 2, 100), item("local", 0, 100)], CTX)
        assert mixed.on_results(consumer)
        with trio.fail_after(5):
            await answered.wait()
        (results, audited_before) = seen[1]
        assert {tp: r.base_offset for tp, r in results.items()} == {("t", 2): 500, ("local", 0): 100}
        assert audited_before == 2 and len(audit.of("produce_batch")) == 4
        assert {tp: r.base_offset for tp, r in (await mixed()).items()} == {("t", 2): 500, ("local", 0): 100}
        nursery.cancel_scope.cancel()


class NotLeaderOnceSender(SenderFake):
    """The agent's first answer: the leader moved (NOT_LEADER_OR_FOLLOWER); then appended."""

    def __init__(self) -> None:
        self.calls = 0

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        self.calls += 1
        code = 6 if self.calls == 1 else 0
        return [EntryResult(error_code=code, base_offset=-1 if code else 77, duplicate=False)]


@pytest.mark.trio
async def test_a_moved_leader_on_the_wal_path_refreshes_its_zone_and_lookups_are_counted(autojump_clock):
    from prometheus_client import REGISTRY

    from core.audit import MemoryAuditSink

    def lookups(cache: str) -> float:
        return REGISTRY.get_sample_value("azsidecar_router_metadata_lookups_total", {"outcome": cache}) or 0.0

    log: list = []
    audit = MemoryAuditSink()
    before = {"hit": lookups("hit"), "miss": lookups("miss")}
    async with trio.open_nursery() as nursery:
        metadata = FakeMetadata()
        backend = wal_backend(nursery, NotLeaderOnceSender(), log, audit=audit, metadata=metadata)
        first = (await send(backend, item("moving", 0, 100)))[("moving", 0)]
        assert first.error_code == 6  # retriable for the producer
        # the leader's zone is looked up afresh while it still names the zone that refused, at
        # 0, 0.05, 0.15, 0.35, 0.75, 1.25, 1.75, 2.25, 2.75 and 3.0 s (backend.FOLLOW_BUDGET_S;
        # then the refusal is passed on), and once more on settling
        assert metadata.invalidated == ["moving"] * 11
        second = (await send(backend, item("moving", 0, 100)))[("moving", 0)]
        third = (await send(backend, item("moving", 0, 100)))[("moving", 0)]
        assert (second.error_code, second.base_offset, third.base_offset) == (0, 77, 77)
        nursery.cancel_scope.cancel()
    assert [r["cache"] for r in audit.of("metadata_lookup")] == ["miss", "miss", "hit"]
    assert (lookups("hit") - before["hit"], lookups("miss") - before["miss"]) == (1.0, 2.0)


@pytest.mark.trio
async def test_gray_failures_count_for_the_breaker_at_once_not_after_every_retry(autojump_clock):
    # The writer and the sender report each attempt they abandon at its gray deadline
    # (wal_s3/latency.py) before any batch fails: three of them open the zone's circuit,
    # so the next batch goes direct without waiting for a WAL outcome.
    log: list = []
    async with trio.open_nursery() as nursery:
        writer, sender = FakeWriter(log), FakeSender()
        backend = wal_backend(nursery, sender, log, writer=writer)
        backend.config = RouterConfig(policy="wal", fallback="direct", partition_zones={"*:*": "az2", "u:*": "az3"})
        gray_before = REGISTRY.get_sample_value("azsidecar_router_gray_failures_total",
                                                {"dest_zone": "az2", "operation": "s3_put"}) or 0.0
        writer.on_gray_put(("az2", "az3"))  # a hung PUT of an object with entries for both zones
        sender.on_gray("az2", 0)  # a notification to az2's (only) agent abandoned
        assert backend.zone_circuits().get("az2", "closed") == "closed"  # two failures so far
        writer.on_gray_put(("az2",))
        assert backend.zone_circuits().get("az2", "closed") == "open" and backend.zone_circuits().get("az3", "closed") == "closed"
        assert circuit_open("az2") == 1.0
        assert REGISTRY.get_sample_value("azsidecar_router_gray_failures_total",
                                         {"dest_zone": "az2", "operation": "s3_put"}) == gray_before + 2
        assert (await send(backend, item("t", 0, 100)))[("t", 0)].base_offset == 100
        assert [r for r, _p, _t in log] == ["direct"]
        nursery.cancel_scope.cancel()


class UnreachableMetadata(FakeMetadata):
    """No broker answers Metadata (B2: the lookup used to raise out of submit)."""

    async def leader(self, topic, partition):
        raise UpstreamTimeout("no answer within 5.0s")


@pytest.mark.trio
async def test_no_metadata_fails_the_partition_retriably_and_holds_back_later_batches(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend = wal_backend(nursery, FakeSender(), log, metadata=UnreachableMetadata())
        first = RecordBatch(memoryview(b"x" * 100), 7, 0, 0, 1, False, 0)
        later = RecordBatch(memoryview(b"x" * 100), 7, 0, 1, 1, False, 0)
        result = (await send(backend, PartitionBatches("t", 0, (first,))))[("t", 0)]
        assert result.error_code == 7  # REQUEST_TIMED_OUT: retried, not the connection closed
        assert "metadata" in result.error_message
        backend._metadata = FakeMetadata()  # metadata is back, but sequence 1 must wait for 0's retry
        held = (await send(backend, PartitionBatches("t", 0, (later,))))[("t", 0)]
        assert held.error_code == 7
        retried = (await send(backend, PartitionBatches("t", 0, (first,))))[("t", 0)]
        assert retried.error_code == 0
        nursery.cancel_scope.cancel()
    assert [entry[0] for entry in log] == ["wal"]  # only the retry was handed on


class NotLeaderSender(SenderFake):
    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        return [EntryResult(error_code=6, base_offset=-1, duplicate=False)]


@pytest.mark.trio
async def test_leader_errors_from_a_working_agent_do_not_open_its_zones_circuit(autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        backend = wal_backend(nursery, NotLeaderSender(), log)
        codes = [(await send(backend, item("t", 0, 100)))[("t", 0)].error_code for _ in range(5)]
        assert codes == [6] * 5  # retriable for the producer, every time
        assert backend.zone_circuits().get("az2", "closed") == "closed"
        nursery.cancel_scope.cancel()
    assert [entry[0] for entry in log] == ["wal"] * 5  # never sent across zones directly


class AnswerSender(SenderFake):
    """The real sender's answer: results and the round trip's bytes each way."""

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        return Answer([EntryResult(error_code=0, base_offset=500, duplicate=False, append_us=2_345)], 300, 101)


@pytest.mark.trio
async def test_a_wal_batch_record_carries_its_share_of_the_notification_bytes(autojump_clock):
    audit = MemoryAuditSink()
    async with trio.open_nursery() as nursery:
        backend = wal_backend(nursery, AnswerSender(), [], audit=audit)
        await send(backend, item("t", 0, 100))
        nursery.cancel_scope.cancel()
    (record,) = audit.of("produce_batch")
    # one entry in its notification: the whole round trip, 300 + 101 bytes; the agent
    # appended it in 2,345 us
    assert (record["route"], record["wire_bytes"], record["leader_append_ms"]) == ("wal", 401, 2.345)


@pytest.mark.trio
async def test_the_linger_counts_what_a_batch_waited_in_its_producer(autojump_clock, monkeypatch):
    # The wall clock (batch timestamps) is pinned; trio's clock measures the gaps between requests.
    now_ms = 1_700_000_000_000
    monkeypatch.setattr(time, "time", lambda: now_ms / 1000)
    audit = MemoryAuditSink()
    writer = FakeWriter([])
    async with trio.open_nursery() as nursery:
        wal, circuits = wal_route(writer, FakeSender(), nursery)
        backend = RoutingBackend("az1", RouterConfig(policy="wal", partition_zones={"*:*": "az2"}),
                                 WalConfig(linger_counts_producer_wait=True), FakeDirect([]), FakeMetadata(), wal,
                                 nursery, audit, circuits=circuits)
        await send(backend, made_at(now_ms - 300))  # first request of t-0: nothing to bound it by
        await trio.sleep(0.2)
        await send(backend, made_at(now_ms - 300))  # made 300 ms ago, previous request 200 ms ago
        await trio.sleep(0.5)
        await send(backend, made_at(now_ms - 40))  # made 40 ms ago
        await trio.sleep(0.5)
        await send(backend, made_at(now_ms + 30))  # a producer clock ahead of ours
        nursery.cancel_scope.cancel()
    assert writer.waited == pytest.approx([0.0, 0.2, 0.04, 0.0])
    assert [r["producer_wait_ms"] for r in audit.of("produce_batch")] == pytest.approx([0.0, 200.0, 40.0, 0.0])


@pytest.mark.trio
async def test_the_linger_ignores_the_producers_wait_when_off(autojump_clock, monkeypatch):
    # off: the default for S3 Standard
    now_ms = 1_700_000_000_000
    monkeypatch.setattr(time, "time", lambda: now_ms / 1000)
    writer = FakeWriter([])
    async with trio.open_nursery() as nursery:
        wal, circuits = wal_route(writer, FakeSender(), nursery)
        backend = RoutingBackend("az1", RouterConfig(policy="wal", partition_zones={"*:*": "az2"}),
                                 WalConfig(linger_counts_producer_wait=False), FakeDirect([]), FakeMetadata(), wal,
                                 nursery, circuits=circuits)
        await send(backend, made_at(now_ms - 300))
        await trio.sleep(0.2)
        await send(backend, made_at(now_ms - 300))
        nursery.cancel_scope.cancel()
    assert writer.waited == [0.0, 0.0]


class HoldingDirect(FakeDirect):
    """A direct path whose answers wait for `release` (a leader slow to answer)."""

    def __init__(self, log: list) -> None:
        super().__init__(log)
        self.release = trio.Event()

    async def submit(self, items, ctx):
        for it in items:
            self.log.append(("direct", it.partition, trio.current_time()))

        async def complete():
            await self.release.wait()
            return {(it.topic, it.partition): PartitionResult(0, 100) for it in items}
        return AwaitedCompletion(complete)


@pytest.mark.trio
async def test_a_client_gone_with_a_direct_batch_in_flight_does_not_block_the_partitions_next_path_switch(
        autojump_clock):
    log: list = []
    async with trio.open_nursery() as nursery:
        direct = HoldingDirect(log)
        wal, circuits = wal_route(FakeWriter(log), FakeSender(), nursery)
        config = RouterConfig(policy="direct", partition_zones={"t:*": "az2"})
        backend = RoutingBackend("az1", config, WalConfig(), direct, FakeMetadata(), wal, nursery, circuits=circuits)
        first = await backend.submit([item("t", 0, 100)], CTX)
        with trio.move_on_after(1.0):  # the client's connection closes: its answer task is cancelled
            await first()
        direct.release.set()  # the leader answers the batch after all
        backend.set_policy("wal")
        with trio.fail_after(60):  # the old path has nothing in flight: the switch must not wait
            second = await backend.submit([item("t", 0, 100)], CTX)
            assert (await second())[("t", 0)].error_code == 0
        assert [route for route, _p, _t in log] == ["direct", "wal"]
        nursery.cancel_scope.cancel()


class BrokenDirect(FakeDirect):
    """A direct backend whose completion fails with an exception (a bug, not an error code)."""

    async def submit(self, items, ctx):
        async def complete():
            raise RuntimeError("bug in the direct backend")
        return AwaitedCompletion(complete)


@pytest.mark.trio
async def test_a_direct_part_that_fails_inside_the_sidecar_is_answered_request_timed_out_not_left_waiting():
    # The producer hears REQUEST_TIMED_OUT for every partition of the request (the outcome is
    # unknown; idempotent producers retry with the same sequence) instead of never hearing back.
    async with trio.open_nursery() as nursery:
        config = RouterConfig(policy="direct", partition_zones={"local:*": "az1"})
        backend = RoutingBackend("az1", config, WalConfig(), BrokenDirect([]), FakeMetadata(), None, nursery)
        heard = []
        answered = trio.Event()

        def consumer(results):
            heard.append(results)
            answered.set()

        completion = await backend.submit([item("local", 0, 100), item("local", 1, 100)], CTX)
        assert completion.on_results(consumer)
        with trio.fail_after(5):
            await answered.wait()
        assert {tp: r.error_code for tp, r in heard[0].items()} == {("local", 0): 7, ("local", 1): 7}
        with pytest.raises(RuntimeError, match="bug in the direct backend"):
            await completion()  # an awaiting caller sees the bug itself
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_every_audit_record_names_the_client_principal_on_every_route(autojump_clock):
    from dataclasses import replace

    from core.audit import MemoryAuditSink

    log: list = []
    audit = MemoryAuditSink()
    async with trio.open_nursery() as nursery:
        backend = audited_backend(nursery, log, audit)
        alice = await backend.submit([item("t", 0, 100), item("local", 0, 100)], replace(CTX, principal="User:alice"))
        await alice()
        anonymous = await backend.submit([item("t", 1, 100)], CTX)  # no front door named one
        await anonymous()
        nursery.cancel_scope.cancel()
    assert sorted((r["topic"], r["partition"], r["route"], r["principal"]) for r in audit.of("produce_batch")) == [
        ("local", 0, "local", "User:alice"), ("t", 0, "wal", "User:alice"), ("t", 1, "wal", "")]


# ---- a leader that moves while batches are on their way (router/resend_order.py) -----------------


class MovingCluster:
    """Leaders that move: `actual` is who leads now, `known` what metadata says until refreshed;
    each partition's log keeps what its leaders appended (the batches' base sequences)."""

    def __init__(self, leaders: dict) -> None:
        self.actual = dict(leaders)
        self.known = dict(leaders)
        self.logs: dict = {}

    def append(self, tp, leader: int, sequence: int) -> PartitionResult:
        if self.actual[tp] != leader:
            return PartitionResult(6)  # NOT_LEADER_OR_FOLLOWER, not appended
        log = self.logs.setdefault(tp, [])
        log.append(sequence)
        return PartitionResult(0, len(log) - 1)


class MovingMetadata(FakeMetadata):
    def __init__(self, cluster: MovingCluster) -> None:
        super().__init__()
        self.cluster = cluster

    async def leader(self, topic, partition):
        tp = (topic, partition)
        if topic not in self.view.topics:  # invalidated (or never looked up): refreshed
            self.cluster.known[tp] = self.cluster.actual[tp]
        self.view.topics[topic] = True
        leader = self.cluster.known[tp]
        return PartitionInfo(0, leader, 0), BrokerAddress(leader, f"b{leader}", 9092, None), 0


class LeaderDirect:
    """The direct backend over a MovingCluster: sent to the leader metadata names at submit.
    With `hold`, the leader takes the request when the test sets its event (in any order);
    else at once, as a request reaches the leader in the order it was put on the connection."""

    def __init__(self, cluster: MovingCluster, metadata: MovingMetadata) -> None:
        self.cluster, self.metadata = cluster, metadata
        self.answer_now: list[trio.Event] = []
        self.sent: list[tuple[int, int]] = []  # (leader, base sequence)
        self.hold = True

    async def submit(self, items, ctx):
        sent = [(it, self.cluster.known[(it.topic, it.partition)]) for it in items]
        self.sent.extend((leader, it.batches[0].base_sequence) for it, leader in sent)
        event = trio.Event()
        self.answer_now.append(event)

        def take():
            return {(it.topic, it.partition): self.cluster.append((it.topic, it.partition), leader,
                                                                   it.batches[0].base_sequence)
                    for it, leader in sent}
        taken = None if self.hold else take()

        async def complete():
            if taken is not None:
                return taken
            await event.wait()
            return take()
        return AwaitedCompletion(complete)


def idempotent(sequence: int) -> PartitionBatches:
    return PartitionBatches("t", 0, (RecordBatch(memoryview(b"x" * 100), 1000, 0, sequence, 1, False, 0),))


BROKER_ZONES = {"1": "az1", "2": "az2", "3": "az3"}


@pytest.mark.trio
async def test_batches_refused_by_a_moved_leader_are_sent_again_in_order_whatever_order_their_refusals_come_in(
        autojump_clock):
    cluster = MovingCluster({("t", 0): 2})  # led in az2: direct_cross from az1
    metadata = MovingMetadata(cluster)
    direct = LeaderDirect(cluster, metadata)
    audit = MemoryAuditSink()
    config = RouterConfig(policy="direct", broker_zones=BROKER_ZONES)
    async with trio.open_nursery() as nursery:
        backend = RoutingBackend("az1", config, WalConfig(), direct, metadata, None, nursery, audit)
        rounds = [await backend.submit([idempotent(seq)], CTX) for seq in (0, 1, 2)]  # 3 requests in flight
        cluster.actual[("t", 0)] = 1  # the leader moves to this zone
        direct.hold = False
        for event in reversed(direct.answer_now):  # the last request's refusal is seen first
            event.set()
        with trio.fail_after(5):
            results = [(await r())[("t", 0)] for r in rounds]
        nursery.cancel_scope.cancel()
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0), (0, 1), (0, 2)]  # no refusal answered
    assert cluster.logs[("t", 0)] == [0, 1, 2]  # the new leader got them in the producer's order
    assert direct.sent == [(2, 0), (2, 1), (2, 2), (1, 0), (1, 1), (1, 2)]  # each sent again once
    records = audit.of("produce_batch")
    assert [(r["route"], r["reason"], r["error_code"]) for r in records] == \
        [("local", "leader moved: re-routed (direct_cross to az2 refused)", 0)] * 3
    # the refused attempt crossed zones: the batch and its Produce share (framing.PRODUCE_OVERHEAD_BYTES, 41)
    assert {r["wire_bytes"] for r in records} == {100 + 41}


@pytest.mark.parametrize("policy, leaders", [
    ("direct", (2, 1)),  # direct_cross to az2, then the leader is elected in this zone: local
    ("direct", (2, 3)),  # direct_cross to az2, then to az3: the same route, another leader
])
@pytest.mark.trio
async def test_a_batch_after_a_leader_moved_waits_for_the_earlier_ones_still_at_the_old_leader(
        autojump_clock, policy, leaders):
    """A CI run on Apache Kafka: the proxy learned the new leader while a batch was still at the
    old one, sent the next batch to the new leader at once, and the old one's refusal, sent
    again, came after it: OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for librdkafka. The later
    batch must wait until the earlier one has its result (here: refused, sent again)."""
    tp = ("t", 0)
    old, new = leaders
    cluster = MovingCluster({tp: old})
    metadata = MovingMetadata(cluster)
    direct = LeaderDirect(cluster, metadata)
    config = RouterConfig(policy=policy, broker_zones=BROKER_ZONES)
    second_done = trio.Event()
    results = {}
    async with trio.open_nursery() as nursery:
        backend = RoutingBackend("az1", config, WalConfig(), direct, metadata, None, nursery)
        first = await backend.submit([idempotent(0)], CTX)  # at the old leader, unanswered
        cluster.actual[tp] = new
        metadata.invalidate("t")  # the proxy learns the new leader (another partition's refusal, a refresh)
        direct.hold = False  # from now on a leader takes a request when it is sent

        async def second() -> None:
            completion = await backend.submit([idempotent(1)], CTX)
            results[1] = (await completion())[tp]
            second_done.set()
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        direct.answer_now[0].set()  # the old leader refuses the first batch
        with trio.fail_after(10):
            results[0] = (await first())[tp]
            await second_done.wait()
        nursery.cancel_scope.cancel()
    assert cluster.logs[tp] == [0, 1]  # the new leader got them in the producer's order
    assert direct.sent == [(old, 0), (new, 0), (new, 1)]
    assert [(results[k].error_code, results[k].base_offset) for k in (0, 1)] == [(0, 0), (0, 1)]


class LaggingMetadata(MovingMetadata):
    """Metadata from a broker behind on the cluster's metadata log: a refresh still names the
    old leader until `lag_s` after `moved_at`."""

    def __init__(self, cluster: MovingCluster, lag_s: float) -> None:
        super().__init__(cluster)
        self.lag_s = lag_s
        self.moved_at = float("inf")
        self.lookups_at: list[float] = []

    async def leader(self, topic, partition):
        self.lookups_at.append(trio.current_time())
        if topic not in self.view.topics and trio.current_time() >= self.moved_at + self.lag_s:
            self.cluster.known[(topic, partition)] = self.cluster.actual[(topic, partition)]
        self.view.topics[topic] = True
        leader = self.cluster.known[(topic, partition)]
        return PartitionInfo(0, leader, 0), BrokerAddress(leader, f"b{leader}", 9092, None), 0


@pytest.mark.parametrize("lag_s, code, sent_to", [
    (2.0, 0, [2, 1]),  # the election reached the metadata 2 s late: followed, nothing refused
    (4.0, 6, [2]),  # not within 3 s (FOLLOW_BUDGET_S): the producer hears the refusal and retries
])
@pytest.mark.trio
async def test_a_refused_batch_follows_a_leader_whose_election_reaches_the_metadata_late(
        autojump_clock, lag_s, code, sent_to):
    cluster = MovingCluster({("t", 0): 2})  # led in az2: direct_cross from az1
    metadata = LaggingMetadata(cluster, lag_s)
    direct = LeaderDirect(cluster, metadata)
    config = RouterConfig(policy="direct", broker_zones=BROKER_ZONES)
    async with trio.open_nursery() as nursery:
        backend = RoutingBackend("az1", config, WalConfig(), direct, metadata, None, nursery)
        completion = await backend.submit([idempotent(0)], CTX)
        cluster.actual[("t", 0)] = 1  # elected in this zone; the old leader refuses from now on
        metadata.moved_at = trio.current_time()
        direct.hold = False
        direct.answer_now[0].set()
        with trio.fail_after(10):
            result = (await completion())[("t", 0)]
        nursery.cancel_scope.cancel()
    assert result.error_code == code
    assert [leader for leader, _seq in direct.sent] == sent_to
    follow_lookups = [t - metadata.moved_at for t in metadata.lookups_at[1:]]  # the first: at submit
    assert follow_lookups[0] == pytest.approx(0.0)
    assert follow_lookups[-1] == pytest.approx(min(lag_s, 3.0), abs=0.5)


@pytest.mark.trio
async def test_after_an_earlier_batch_fails_for_the_producer_later_refused_ones_are_not_sent_again(autojump_clock):
    cluster = MovingCluster({("t", 0): 2})
    metadata = MovingMetadata(cluster)
    direct = LeaderDirect(cluster, metadata)
    config = RouterConfig(policy="direct", broker_zones=BROKER_ZONES)
    async with trio.open_nursery() as nursery:
        backend = RoutingBackend("az1", config, WalConfig(), direct, metadata, None, nursery)
        first = await backend.submit([idempotent(0)], CTX)
        second = await backend.submit([idempotent(1)], CTX)
        cluster.actual[("t", 0)] = 1

        def timed_out(*_args):  # the first request's answer is lost: the producer must retry it
            return PartitionResult(7)
        appended = cluster.append
        cluster.append = lambda tp, leader, seq: timed_out() if seq == 0 else appended(tp, leader, seq)
        direct.answer_now[1].set()  # the second's refusal first: it waits for the first
        direct.answer_now[0].set()
        with trio.fail_after(5):
            codes = [(await r())[("t", 0)].error_code for r in (first, second)]
        nursery.cancel_scope.cancel()
    assert codes == [7, 6]  # the second, sent again, would have overtaken the first's retry
    assert direct.sent == [(2, 0), (2, 1)]


class ZoneAgentSender(SenderFake):
    """The agent of each zone: appends to the partition's leader if it is in its zone, else
    refuses (NOT_LEADER_OR_FOLLOWER), as leader_notify/agent/appender.py's home_zone check."""

    def __init__(self, cluster: MovingCluster) -> None:
        self.cluster = cluster
        self.refused = 0

    async def notify(self, flushed, zone, agent=None, started=None, on_answer=None):
        leader = self.cluster.actual[("t", 0)]
        if BROKER_ZONES[str(leader)] != zone:
            self.refused += 1
            return Answer([EntryResult(error_code=6, base_offset=-1, duplicate=False)], 300, 101)
        result = self.cluster.append(("t", 0), leader, 0)
        return Answer([EntryResult(error_code=0, base_offset=result.base_offset, duplicate=False)], 300, 101)


@pytest.mark.trio
async def test_a_wal_batch_whose_agent_says_the_leader_left_its_zone_goes_by_the_new_leaders_route(autojump_clock):
    cluster = MovingCluster({("t", 0): 2})  # led in az2: the WAL route to az2's agent
    metadata = MovingMetadata(cluster)
    direct = LeaderDirect(cluster, metadata)
    direct.hold = False
    sender = ZoneAgentSender(cluster)
    audit = MemoryAuditSink()
    log: list = []
    async with trio.open_nursery() as nursery:
        wal, circuits = wal_route(FakeWriter(log), sender, nursery)
        config = RouterConfig(policy="wal", broker_zones=BROKER_ZONES)
        backend = RoutingBackend("az1", config, WalConfig(), direct, metadata, wal, nursery, audit, circuits=circuits)
        completion = await backend.submit([idempotent(0)], CTX)
        cluster.actual[("t", 0)] = 1  # moved to this zone before the agent appends
        answered = trio.Event()
        seen: list = []
        assert completion.on_results(lambda results: (seen.append(results), answered.set()))
        with trio.fail_after(5):
            await answered.wait()
        nursery.cancel_scope.cancel()
    assert [(r.error_code, r.base_offset) for r in seen[0].values()] == [(0, 0)]
    assert sender.refused == 1 and direct.sent == [(1, 0)]  # sent again locally, once
    assert cluster.logs[("t", 0)] == [0]
    [record] = audit.of("produce_batch")
    assert (record["route"], record["leader_zone"], record["reason"]) == \
        ("local", "az1", "leader moved: re-routed (wal to az2 refused)")
    assert record["wire_bytes"] == 401  # the refused notification's round trip (300 + 101 bytes), one entry
    assert backend.zone_circuits().get("az2", "closed") == "closed"  # a moved leader is no failure of az2


@pytest.mark.trio
async def test_each_partition_of_a_request_refused_by_moved_leaders_is_sent_again(autojump_clock):
    cluster = MovingCluster({("t", 0): 2, ("t", 1): 3})
    metadata = MovingMetadata(cluster)
    direct = LeaderDirect(cluster, metadata)
    config = RouterConfig(policy="direct", broker_zones=BROKER_ZONES)
    two = [PartitionBatches("t", p, (RecordBatch(memoryview(b"x" * 100), 1000 + p, 0, 5, 1, False, 0),))
           for p in (0, 1)]
    async with trio.open_nursery() as nursery:
        backend = RoutingBackend("az1", config, WalConfig(), direct, metadata, None, nursery)
        completion = await backend.submit(two, CTX)
        cluster.actual.update({("t", 0): 1, ("t", 1): 2})  # both leaders move
        direct.hold = False
        direct.answer_now[0].set()
        with trio.fail_after(5):
            results = await completion()
        nursery.cancel_scope.cancel()
    assert {tp: (r.error_code, r.base_offset) for tp, r in results.items()} == {("t", 0): (0, 0), ("t", 1): (0, 0)}
    assert cluster.logs == {("t", 0): [5], ("t", 1): [5]}
    assert sorted(direct.sent) == [(1, 5), (2, 5), (2, 5), (3, 5)]  # first to 2 and 3, then to 1 and 2


def test_a_wal_routed_batch_leaves_no_cycle_holding_its_request_bytes():
    """A WAL-routed batch is a view of its Produce request's buffer (up to megabytes). Once
    the producer is answered, reference counting alone must free that buffer: a cycle
    through it waits for the cyclic collector, which runs seldom under the raised thresholds
    (azsidecar/runtime.py), and an agent once held hundreds of MiB that way."""
    buffers = [WeakBuffer(b"x" * 100), WeakBuffer(b"y" * 100)]
    alive = [weakref.ref(buffer) for buffer in buffers]

    async def main(views):
        log: list = []
        async with trio.open_nursery() as nursery:
            backend = wal_backend(nursery, FakeSender(), log)
            answers = []
            for partition, view in enumerate(views):
                it = PartitionBatches("t", partition, (RecordBatch(view, 7, 0, 0, 1, False, 0),))
                with trio.fail_after(5):
                    results = await send(backend, it)
                answers.append((results[("t", partition)].error_code, results[("t", partition)].base_offset))
            nursery.cancel_scope.cancel()
        return answers

    with collector_off():
        answers = trio.run(main, [memoryview(buffer) for buffer in buffers])
        del buffers
        left = still_alive(alive)
    assert answers == [(0, 500), (0, 500)]
    assert left == []
