"""Fetch answers' record bytes per broker and partition, and their `fetch_bytes` records (pure parts)."""

from __future__ import annotations

import struct
import uuid

from kafka.protocol.consumer.fetch import FetchResponse

from core.audit import KINDS, MemoryAuditSink
from proxy.fetch_audit import (
    OVERFLOW_PARTITION,
    UNPARSED_PARTITION,
    FetchCounter,
    FetchMeter,
    count_answer,
    records,
)

Topic = FetchResponse.FetchableTopicResponse
Partition = Topic.PartitionData
ZONES = {1: "use1-az1", 2: "use1-az2"}
LEADERS = {("orders", 0): 2, ("orders", 1): 1}  # orders-2 has no leader in this metadata
ORDERS_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def leader_of(topic: str, partition: int) -> int | None:
    return LEADERS.get((topic, partition))


def topic_name(topic_id: bytes) -> str | None:
    return "orders" if topic_id == ORDERS_ID.bytes else None


def answer(version: int, sizes: dict[int, int], topic_id: uuid.UUID = ORDERS_ID) -> bytes:
    """A Fetch answer of topic orders with `sizes[partition]` record bytes, as the proxy gets it
    from the broker (no size prefix; correlation id, v12+ header tagged fields, the body)."""
    partitions = [Partition(partition_index=p, error_code=0, high_watermark=10, aborted_transactions=None,
                            records=b"r" * n) for p, n in sizes.items()]
    body = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0,
                         responses=[Topic(topic="orders", topic_id=topic_id, partitions=partitions)]).encode(version=version)
    return struct.pack(">i", 3) + (b"\x00" if version >= 12 else b"") + bytes(body)


def test_record_bytes_add_up_per_broker_partition_and_whether_the_leader_served_them():
    counter = FetchCounter()
    assert count_answer(counter, 2, answer(11, {0: 500, 1: 40, 2: 7}), 11, leader_of, topic_name)
    assert count_answer(counter, 2, answer(12, {0: 100, 1: 0}), 12, leader_of, topic_name)  # 0 bytes: no key
    assert count_answer(counter, 1, answer(4, {1: 60}), 4, leader_of, topic_name)
    assert counter.take() == {
        (1, "orders", 1, True): 60,  # broker 1 leads orders-1
        (2, "orders", 0, True): 600,  # broker 2 leads orders-0: 500 + 100
        (2, "orders", 1, False): 40,  # a follower served orders-1
        (2, "orders", 2, None): 7,  # no leader known for orders-2
    }
    assert counter.take() == {}


def test_topic_ids_are_named_from_the_metadata_and_unknown_ones_by_their_text():
    counter = FetchCounter()
    other = uuid.UUID("99999999-8888-7777-6666-555555555555")
    assert count_answer(counter, 2, answer(13, {0: 30}), 13, leader_of, topic_name)
    assert count_answer(counter, 2, answer(17, {0: 5}, topic_id=other), 17, leader_of, topic_name)
    assert counter.take() == {(2, "99999999-8888-7777-6666-555555555555", 0, None): 5,
                              (2, "orders", 0, True): 30}


def test_an_answer_that_does_not_scan_is_counted_whole_as_unparsed():
    counter = FetchCounter()
    whole = answer(11, {0: 500})
    assert not count_answer(counter, 2, whole[:-10], 11, leader_of, topic_name)  # truncated
    assert not count_answer(counter, 2, whole, 3, leader_of, topic_name)  # a version not scanned
    # frames as on the wire: the size prefix counts too
    assert counter.take() == {(2, "", UNPARSED_PARTITION, None): (len(whole) - 10 + 4) + (len(whole) + 4)}
    assert counter.unparsed_answers == 2


def test_the_bootstrap_listener_counts_under_broker_minus_one_without_a_leader_verdict():
    counter = FetchCounter()
    count_answer(counter, -1, answer(11, {0: 9}), 11, leader_of, topic_name)
    assert counter.take() == {(-1, "orders", 0, None): 9}


def test_keys_beyond_the_bound_are_counted_together_per_broker():
    counter = FetchCounter(max_keys=2)
    counter.add((1, "a", 0, True), 10)
    counter.add((1, "a", 1, True), 20)
    counter.add((1, "b", 0, False), 5)  # a third key: overflow of broker 1
    counter.add((3, "c", 0, None), 7)  # a fourth, of broker 3
    counter.add((1, "a", 0, True), 1)  # a key already held keeps counting as itself
    counter.add_unparsed(3, 100)  # unparsed answers are counted even beyond the bound
    assert counter.take() == {(1, "", OVERFLOW_PARTITION, None): 5, (1, "a", 0, True): 11, (1, "a", 1, True): 20,
                              (3, "", UNPARSED_PARTITION, None): 100, (3, "", OVERFLOW_PARTITION, None): 7}


def test_records_name_the_broker_zone_leave_an_unknown_leader_null_and_fit_the_contract():
    out = records({(2, "orders", 0, True): 600, (9, "orders", 2, None): 7}, "proxy-a",
                  lambda node: ZONES.get(node, ""), 10_000)
    assert out == [
        {"proxy_id": "proxy-a", "broker_id": 2, "broker_zone": "use1-az2", "topic": "orders", "partition": 0,
         "bytes": 600, "from_leader": True, "interval_ms": 10_000},
        {"proxy_id": "proxy-a", "broker_id": 9, "broker_zone": "", "topic": "orders", "partition": 2,
         "bytes": 7, "interval_ms": 10_000},
    ]
    assert {name for name, _t in KINDS["fetch_bytes"]} == set(out[0])


def test_the_meter_emits_what_was_counted_and_nothing_when_idle():
    sink = MemoryAuditSink()
    meter = FetchMeter(sink, "proxy-a", lambda node: ZONES.get(node, ""), leader_of, topic_name, 10.0)
    meter.add(1, answer(12, {1: 321}), 12)
    meter.flush()
    meter.flush()  # nothing counted since: no record
    got = sink.of("fetch_bytes")
    assert [(r["broker_zone"], r["topic"], r["partition"], r["bytes"], r["from_leader"]) for r in got] \
        == [("use1-az1", "orders", 1, 321, True)]
