"""RoutingBackend.forward, the local route's forward path, above a fake connection: what it
takes and declines (declining changes nothing), how a plain answer settles, and how any
other answer is settled like the decoding path's (the real DirectBackend's results)."""

from __future__ import annotations

import types

import pytest
import trio
from prometheus_client import REGISTRY

from core.audit import MemoryAuditSink
from core.produce import PartitionBatches, PartitionResult, ProduceContext
from core.record_batch import RecordBatch
from kafka_protocol.produce import PartitionAnswer, encode_produce_response
from kafka_protocol.produce_scan import ScannedAnswer, ScannedProduce
from kafka_upstream.direct import DirectBackend
from kafka_upstream.errors import UpstreamTimeout
from kafka_upstream.metadata import PartitionInfo
from kafka_upstream.upstream import BrokerAddress
from router.backend import RoutingBackend
from router.config import RouterConfig
from router.decide import Path
from wal_s3.config import WalConfig

CTX = ProduceContext(acks=-1, timeout_ms=30_000, transactional_id=None, client_version=9, principal="User:app")
BODY = memoryview(b"the client's request body")


def item(topic: str, partition: int, nbytes: int, records: int = 3) -> PartitionBatches:
    return PartitionBatches(topic, partition, (RecordBatch(memoryview(b"x" * nbytes), 7, 0, 40, records, False, 0),))


class FakeMetadata:
    """Every partition led by broker `leader_id` (1); the router's partition_zones place the topics."""

    def __init__(self) -> None:
        self.view = types.SimpleNamespace(topics={}, brokers={1: BrokerAddress(1, "b1", 9092, None)})
        self.invalidated: list[str] = []

    leader_id = 1

    async def leader(self, topic, partition):
        self.view.topics[topic] = True
        return PartitionInfo(0, self.leader_id, 0), self.view.brokers[self.leader_id], 0

    def invalidate(self, topic):
        self.invalidated.append(topic)

    def cached(self, topic):
        return topic in self.view.topics


class FakeConnection:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes, float]] = []
        self.on_answer = None

    async def forward_produce(self, api_version, body, timeout_s, on_answer):
        self.sent.append((api_version, bytes(body), timeout_s))
        self.on_answer = on_answer


class FakeCluster:
    """One connection for every broker, opened by the first `connection()`; `while_connecting`
    runs inside that wait (what other requests do meanwhile)."""

    def __init__(self) -> None:
        self.brokers = {1: BrokerAddress(1, "b1", 9092, None)}
        self.api_versions = {0: (3, 11)}
        self.conn = FakeConnection()
        self.opened = False
        self.connects = 0
        self.while_connecting = lambda: None

    def open_connection(self, node_id):
        return self.conn if self.opened else None

    async def connection(self, node_id):
        assert node_id in self.brokers
        self.connects += 1
        await trio.lowlevel.checkpoint()
        self.while_connecting()
        self.opened = True
        return self.conn


class Answer:
    """The handler's side: what came back, and how."""

    def __init__(self) -> None:
        self.as_bytes: list[tuple[bytes, ScannedAnswer]] = []
        self.as_results: list[dict] = []
        self.done = trio.Event()

    def answer_bytes(self, frame, answer):
        self.as_bytes.append((frame, answer))
        self.done.set()

    def answer_results(self, results):
        self.as_results.append(results)
        self.done.set()


def backend(nursery, audit=None) -> tuple[RoutingBackend, FakeCluster]:
    cluster = FakeCluster()
    metadata = FakeMetadata()
    direct = DirectBackend(cluster, metadata, 30.0)  # type: ignore[arg-type]  # the fakes stand in
    config = RouterConfig(policy="direct", partition_zones={"local:*": "az1", "far:*": "az2"})
    return RoutingBackend("az1", config, WalConfig(), direct, metadata, None, nursery, audit), cluster  # type: ignore[arg-type]


def answer_frame(partitions: list[PartitionAnswer], version: int = 9) -> bytes:
    return encode_produce_response(partitions, 1, version)[4:]


def forwarded(label: str) -> float:
    return REGISTRY.get_sample_value("azsidecar_router_forwarded_requests_total", {"outcome": label}) or 0.0


@pytest.mark.trio
async def test_a_local_request_is_sent_whole_and_its_plain_answer_settles_in_the_readers_step():
    audit = MemoryAuditSink()
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery, audit)
        request = ScannedProduce(None, -1, 30_000, (item("local", 0, 100), item("local", 2, 50, records=1)))
        answer = Answer()
        assert await routing.forward(request, CTX, BODY, answer)
        assert cluster.conn.sent == [(9, b"the client's request body", 30.0)]
        assert routing._book.state(("local", 0)).in_flight == 1
        before = forwarded("bytes")
        frame = answer_frame([PartitionAnswer("local", 0, 0, 500), PartitionAnswer("local", 2, 0, 77)])
        cluster.conn.on_answer(frame)  # as the reader task calls it: no await in between
        assert [f for f, _a in answer.as_bytes] == [frame] and answer.as_results == []
        assert answer.as_bytes[0][1].partitions == (("local", 0, 0, 500), ("local", 2, 0, 77))
        assert forwarded("bytes") == before + 1
        assert routing._book.state(("local", 0)).in_flight == 0
        assert routing._book.state(("local", 2)).in_flight == 0
        assert routing.route_counts == {"local": 2}
        nursery.cancel_scope.cancel()
    batches = [r for kind, r in audit.records if kind == "produce_batch"]
    assert [(b["topic"], b["partition"], b["route"], b["reason"], b["bytes"], b["records"], b["error_code"],
             b["leader_zone"], b["principal"]) for b in batches] == [
        ("local", 0, "local", "same zone", 100, 3, 0, "az1", "User:app"),
        ("local", 2, "local", "same zone", 50, 1, 0, "az1", "User:app")]
    lookups = [r for kind, r in audit.records if kind == "metadata_lookup"]
    assert [(r["topic"], r["partition"], r["leader_zone"]) for r in lookups] == [("local", 0, "az1"), ("local", 2, "az1")]


@pytest.mark.trio
@pytest.mark.parametrize(("why", "partitions", "version"), [
    ("a partition led in another zone", (("local", 0), ("far", 0)), 9),
    ("a version the cluster does not take", (("local", 0),), 12),
    ("no partitions", (), 9),
])
async def test_a_request_it_declines_changes_nothing(why, partitions, version):
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        request = ScannedProduce(None, -1, 30_000, tuple(item(t, p, 10) for t, p in partitions))
        ctx = ProduceContext(-1, 30_000, None, version)
        assert not await routing.forward(request, ctx, BODY, Answer()), why
        assert cluster.conn.sent == []
        assert routing.route_counts == {}
        for t, p in partitions:
            state = routing._book.state((t, p))
            assert (state.in_flight, state.path, state.last_request_at) == (0, None, None)
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_partition_still_draining_another_path_is_left_to_the_decoding_path():
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        routing._book.take(("local", 0), Path.DIRECT_CROSS, None)  # a batch in flight on another path
        request = ScannedProduce(None, -1, 30_000, (item("local", 0, 10),))
        assert not await routing.forward(request, CTX, BODY, Answer())
        assert cluster.conn.sent == []
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_the_first_request_waits_for_the_connection_and_later_ones_take_it_open():
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        for _ in range(3):
            assert await routing.forward(ScannedProduce(None, -1, 30_000, (item("local", 0, 10),)), CTX, BODY,
                                         Answer())
        assert (cluster.connects, len(cluster.conn.sent)) == (1, 3)
        assert routing._book.state(("local", 0)).in_flight == 3
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_partition_another_request_moved_while_this_one_connected_is_left_to_the_decoding_path():
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        cluster.while_connecting = lambda: routing._book.take(("local", 0), Path.DIRECT_CROSS, None)
        request = ScannedProduce(None, -1, 30_000, (item("local", 0, 10),))
        assert not await routing.forward(request, CTX, BODY, Answer())
        assert cluster.conn.sent == [] and routing.route_counts == {}
        state = routing._book.state(("local", 0))
        assert (state.in_flight, state.path, state.last_request_at) == (1, Path.DIRECT_CROSS, None)
        nursery.cancel_scope.cancel()


@pytest.mark.trio
@pytest.mark.parametrize(("second_leader", "sent"), [
    (3, 1),  # the leader moved (within the zone) while the first request is unanswered: wait
    (1, 2),  # the same leader: it may follow at once
])
async def test_a_partition_with_a_batch_on_its_way_to_another_leader_is_left_to_the_decoding_path(
        second_leader, sent):
    """Sent to the new leader at once, the request would overtake the batch the old one will
    refuse and the router send again (OUT_OF_ORDER_SEQUENCE_NUMBER); the decoding path waits
    for it (router/backend.py)."""
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        cluster.brokers[3] = routing._metadata.view.brokers[3] = BrokerAddress(3, "b3", 9092, None)
        assert await routing.forward(ScannedProduce(None, -1, 30_000, (item("local", 0, 10),)), CTX, BODY, Answer())
        routing._metadata.leader_id = second_leader
        later = ScannedProduce(None, -1, 30_000, (item("local", 0, 10),))
        assert await routing.forward(later, CTX, BODY, Answer()) is (sent == 2)
        assert len(cluster.conn.sent) == sent
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_an_error_answer_is_settled_like_the_decoding_paths():
    audit = MemoryAuditSink()
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery, audit)
        request = ScannedProduce(None, -1, 30_000, (item("local", 0, 100), item("local", 1, 10)))
        answer = Answer()
        assert await routing.forward(request, CTX, BODY, answer)
        before = forwarded("decoded")
        cluster.conn.on_answer(answer_frame([PartitionAnswer("local", 0, 0, 500),
                                             PartitionAnswer("local", 1, 2, -1, error_message="corrupt")]))
        with trio.fail_after(5):
            await answer.done.wait()
        assert answer.as_bytes == []
        [results] = answer.as_results
        assert {tp: (r.error_code, r.base_offset) for tp, r in results.items()} == {
            ("local", 0): (0, 500), ("local", 1): (2, -1)}
        assert forwarded("decoded") == before + 1
        assert routing._book.state(("local", 1)).in_flight == 0
        nursery.cancel_scope.cancel()
    batches = [r for kind, r in audit.records if kind == "produce_batch"]
    assert sorted((b["partition"], b["route"], b["error_code"]) for b in batches) == [(0, "local", 0), (1, "local", 2)]


@pytest.mark.trio
async def test_no_answer_in_time_is_request_timed_out_and_the_leader_looked_up_again():
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        answer = Answer()
        assert await routing.forward(ScannedProduce(None, -1, 30_000, (item("local", 0, 10),)), CTX, BODY, answer)
        cluster.conn.on_answer(UpstreamTimeout("no answer within 30.0s"))
        with trio.fail_after(5):
            await answer.done.wait()
        [results] = answer.as_results
        assert results[("local", 0)].error_code == 7  # REQUEST_TIMED_OUT: the producer retries
        assert routing._metadata.invalidated == ["local"]
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_producer_with_a_sequence_gap_is_left_to_the_decoding_path():
    async with trio.open_nursery() as nursery:
        routing, cluster = backend(nursery)
        earlier = item("local", 0, 10)  # producer 7, sequence 40
        routing._book.note_failure(earlier, PartitionResult(7))  # REQUEST_TIMED_OUT: it must come back first
        request = ScannedProduce(None, -1, 30_000, (item("local", 0, 10),))
        assert not await routing.forward(request, CTX, BODY, Answer())
        assert cluster.conn.sent == []
        assert routing._book.gap_open(earlier)  # only asked: the decoding path decides on it
        nursery.cancel_scope.cancel()
