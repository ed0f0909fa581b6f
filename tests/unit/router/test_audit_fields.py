"""produce_batch's timing and byte fields from the instants the backend measures (by hand)."""

from __future__ import annotations

import pytest

from core.framing import PRODUCE_OVERHEAD_BYTES
from core.produce import PartitionBatches, PartitionResult
from core.record_batch import RecordBatch
from router.audit_fields import (
    NOT_APPLICABLE,
    notification_share,
    produce_batch_record,
    wal_leader_append_ms,
    wal_timing_fields,
    wire_bytes,
)
from router.decide import Path, Route
from router.wal_path import WalOutcome


@pytest.mark.parametrize(("route", "size", "share", "expected"), [
    # a direct cross-zone batch puts itself and its 8 + 33 bytes of Produce entries across
    ("direct_cross", 1_000, 0, 1_041),
    ("local", 1_000, 0, 0),
    # a WAL batch: its share of the notification round trip, when the sender said
    ("wal", 1_000, 100, 100),
    ("wal", 1_000, 0, 0),
])
def test_wire_bytes(route, size, share, expected):
    assert wire_bytes(route, size, share) == expected


@pytest.mark.parametrize(("request_bytes", "response_bytes", "entries", "share"), [
    (300, 100, 4, 100),  # 400 / 4
    (301, 100, 2, 201),  # 200.5 rounds up
    (300, 100, 3, 133),  # 133.3
    (300, 100, 0, 0),
])
def test_notification_share_is_equal_per_entry(request_bytes, response_bytes, entries, share):
    assert notification_share(request_bytes, response_bytes, entries) == share


@pytest.mark.parametrize(("instants", "expected"), [
    # received 10.000, buffered 10.001, sealed 10.251 (250 ms linger), durable 10.281,
    # agent answered 10.291: the PUT took 30 ms, not 280.
    ((10.000, 10.001, 10.251, 10.281, 10.291),
     {"queue_ms": 1.0, "linger_wait_ms": 250.0, "s3_put_ms": 30.0, "notify_rtt_ms": 10.0}),
    # sealed by size before this batch's buffering was stamped (the batch filled it): no wait
    ((5.0, 5.002, 5.001, 5.042, 5.050),
     {"queue_ms": 2.0, "linger_wait_ms": 0.0, "s3_put_ms": 40.0, "notify_rtt_ms": 8.0}),
    # the object never became durable: only the queue and the linger are known
    ((1.0, 1.5, 2.0, 0.0, 0.0),
     {"queue_ms": 500.0, "linger_wait_ms": 500.0, "s3_put_ms": NOT_APPLICABLE, "notify_rtt_ms": NOT_APPLICABLE}),
    # ack_mode wal: durable, never notified before the answer
    ((1.0, 1.001, 1.101, 1.201, 0.0),
     {"queue_ms": 1.0, "linger_wait_ms": 100.0, "s3_put_ms": 100.0, "notify_rtt_ms": NOT_APPLICABLE}),
    # a writer that does not report its seal time: the PUT interval starts at buffering
    ((1.0, 1.001, 0.0, 1.101, 1.111),
     {"queue_ms": 1.0, "linger_wait_ms": NOT_APPLICABLE, "s3_put_ms": 100.0, "notify_rtt_ms": 10.0}),
])
def test_wal_timing_fields_each_cover_their_own_interval(instants, expected):
    got = wal_timing_fields(*instants)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize(("append_us", "expected"), [
    (2_345, 2.345),  # the agent's answer said 2,345 us
    (0, 0.0),  # an append under a microsecond is still a known time
    (-1, NOT_APPLICABLE),  # duplicate from the agent's map, refused, or ack_mode wal: not known
])
def test_wal_leader_append_ms_comes_from_the_agents_answer(append_us, expected):
    assert wal_leader_append_ms(append_us) == expected


def _batches(topic: str, partition: int, sizes: list[int], records: int = 1) -> PartitionBatches:
    return PartitionBatches(topic, partition, tuple(RecordBatch(memoryview(b"x" * n), -1, -1, -1, records, False, 0)
                                                    for n in sizes))


def test_a_direct_batch_record():
    record = produce_batch_record("proxy-a", _batches("t", 3, [100, 50], records=2), Route(Path.DIRECT_CROSS, "policy"),
                                  "use1-az2", PartitionResult(0, 41), started=10.0, finished=10.025, outcome=None,
                                  would=None, principal="User:alice")
    assert record == {
        "proxy_id": "proxy-a", "leader_zone": "use1-az2", "topic": "t", "partition": 3, "route": "direct_cross",
        "reason": "policy", "bytes": 150, "records": 4, "wire_bytes": 150 + PRODUCE_OVERHEAD_BYTES, "error_code": 0,
        "latency_ms": pytest.approx(25.0), "queue_ms": -1.0, "s3_put_ms": -1.0, "notify_rtt_ms": -1.0,
        "leader_append_ms": pytest.approx(25.0), "wal_key": "", "linger_wait_ms": -1.0, "producer_wait_ms": -1.0,
        "shadow_route": "", "shadow_reason": "", "principal": "User:alice"}


def test_a_wal_batch_record_takes_its_times_and_bytes_from_its_outcome():
    outcome = WalOutcome(1)
    outcome.buffered_at, outcome.sealed_at, outcome.durable_at, outcome.notified_at = 10.001, 10.006, 10.016, 10.036
    outcome.key, outcome.wire_bytes, outcome.append_us, outcome.producer_wait_s = "wal/k1", 61, 8500, 0.002
    record = produce_batch_record("proxy-a", _batches("t", 0, [1000]), Route(Path.WAL, "cost"), "use1-az3",
                                  PartitionResult(0, 7), started=10.0, finished=10.040, outcome=outcome,
                                  would=Route(Path.WAL, "cost"), principal="")
    assert {k: record[k] for k in ("route", "wire_bytes", "wal_key", "shadow_route", "principal")} == {
        "route": "wal", "wire_bytes": 61, "wal_key": "wal/k1", "shadow_route": "wal", "principal": ""}
    assert {k: round(record[k], 3) for k in ("latency_ms", "queue_ms", "linger_wait_ms", "s3_put_ms",
                                              "notify_rtt_ms", "leader_append_ms", "producer_wait_ms")} == {
        "latency_ms": 40.0, "queue_ms": 1.0, "linger_wait_ms": 5.0, "s3_put_ms": 10.0, "notify_rtt_ms": 20.0,
        "leader_append_ms": 8.5, "producer_wait_ms": 2.0}
