"""The Fetch answer scanner against frames kafka-python's schema encodes, v4..v17, and bad frames.

Only the codec is imported from the project; kafka-python encodes the bodies. The response
header (correlation id, and from v12 an empty tagged-field section) is written here by hand:
the library encodes response bodies only.
"""

from __future__ import annotations

import random
import struct
import time
import tracemalloc
import uuid

import pytest
from kafka.protocol.consumer.fetch import FetchResponse

from kafka_protocol.fetch_response import FetchScanError, TopicId, scan_fetch_response

Topic = FetchResponse.FetchableTopicResponse
Partition = Topic.PartitionData
ORDERS_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
AUDIT_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
ALL_VERSIONS = range(4, 18)


def header(correlation_id: int, version: int) -> bytes:
    # correlation_id int32; response header v1 (flexible Fetch, v12+) adds tagged fields: 0 of them
    return struct.pack(">i", correlation_id) + (b"\x00" if version >= 12 else b"")


def frame(version: int, topics: list[Topic], node_endpoints: list[object] | None = None) -> bytes:
    body = FetchResponse(throttle_time_ms=5, error_code=0, session_id=77, responses=topics,
                         node_endpoints=node_endpoints or []).encode(version=version)
    return header(42, version) + bytes(body)


def two_topics() -> list[Topic]:
    aborted = [Partition.AbortedTransaction(producer_id=9, first_offset=100),
               Partition.AbortedTransaction(producer_id=10, first_offset=150)]
    orders = Topic(topic="orders", topic_id=ORDERS_ID, partitions=[
        # 1,234 record bytes, two aborted transactions, and (v12+) every partition tagged field set
        Partition(partition_index=0, error_code=0, high_watermark=200, last_stable_offset=150, log_start_offset=0,
                  aborted_transactions=aborted, preferred_read_replica=-1, records=b"r" * 1234,
                  diverging_epoch=Partition.EpochEndOffset(epoch=3, end_offset=90),
                  current_leader=Partition.LeaderIdAndEpoch(leader_id=2, leader_epoch=4),
                  snapshot_id=Partition.SnapshotId(end_offset=80, epoch=2)),
        # a null records field (an error answer): 0 bytes
        Partition(partition_index=7, error_code=6, high_watermark=-1, aborted_transactions=None, records=None),
        # the preferred read replica named, no records (empty, not null)
        Partition(partition_index=3, error_code=0, high_watermark=5, aborted_transactions=[],
                  preferred_read_replica=2, records=b""),
    ])
    audit = Topic(topic="äudit", topic_id=AUDIT_ID, partitions=[  # a non-ASCII name: 6 UTF-8 bytes
        Partition(partition_index=11, error_code=0, high_watermark=1, aborted_transactions=None, records=b"z" * 300),
    ])
    return [orders, audit]


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_record_bytes_per_partition_of_every_version(version):
    endpoints = [FetchResponse.NodeEndpoint(node_id=2, host="b2.example", port=9092, rack="use1-az2")]
    data = frame(version, two_topics(), endpoints if version >= 16 else None)
    orders, audit = ("orders", "äudit") if version < 13 else (TopicId(ORDERS_ID.bytes), TopicId(AUDIT_ID.bytes))
    assert scan_fetch_response(data, version) == [(orders, 0, 1234), (orders, 7, 0), (orders, 3, 0),
                                                  (audit, 11, 300)]
    assert scan_fetch_response(memoryview(data), version) == scan_fetch_response(data, version)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17])
def test_an_answer_without_topics_has_no_partitions(version):
    assert scan_fetch_response(frame(version, []), version) == []


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_every_truncation_is_refused_as_a_scan_error(version):
    data = frame(version, two_topics())
    for cut in range(len(data)):
        with pytest.raises(FetchScanError):
            scan_fetch_response(data[:cut], version)


@pytest.mark.parametrize("version", [3, 18, -1])
def test_versions_outside_the_scanned_layouts_are_refused(version):
    with pytest.raises(FetchScanError, match="not scanned"):
        scan_fetch_response(frame(4, []), version)


def non_flexible_one_partition(records_length: bytes, tail: bytes, topics: bytes = b"\x00\x00\x00\x01",
                               partitions: bytes = b"\x00\x00\x00\x01") -> bytes:
    """A Fetch v11 answer written field by field, for lengths no library would encode."""
    return (b"\x00\x00\x00\x2a"  # correlation_id 42
            + b"\x00\x00\x00\x00"  # throttle_time_ms
            + b"\x00\x00"  # error_code
            + b"\x00\x00\x00\x00"  # session_id
            + topics  # topics array length
            + b"\x00\x01t"  # topic name "t"
            + partitions  # partitions array length
            + b"\x00\x00\x00\x00"  # partition_index 0
            + b"\x00\x00"  # error_code
            + b"\x00" * 24  # high_watermark, last_stable_offset, log_start_offset
            + b"\xff\xff\xff\xff"  # aborted_transactions: null
            + b"\xff\xff\xff\xff"  # preferred_read_replica -1
            + records_length + tail)


def test_the_hand_written_frame_scans():
    assert scan_fetch_response(non_flexible_one_partition(b"\x00\x00\x00\x03", b"abc"), 11) == [("t", 0, 3)]
    assert scan_fetch_response(non_flexible_one_partition(b"\xff\xff\xff\xff", b""), 11) == [("t", 0, 0)]


@pytest.mark.parametrize(("case", "data"), [
    ("records longer than the frame", non_flexible_one_partition(b"\x00\x00\x00\x04", b"abc")),
    ("records length -2", non_flexible_one_partition(b"\xff\xff\xff\xfe", b"")),
    ("2**31-1 topics", non_flexible_one_partition(b"\x00\x00\x00\x00", b"", topics=b"\x7f\xff\xff\xff")),
    ("a null topics array", non_flexible_one_partition(b"\x00\x00\x00\x00", b"", topics=b"\xff\xff\xff\xff")),
    ("2**31-1 partitions", non_flexible_one_partition(b"\x00\x00\x00\x00", b"", partitions=b"\x7f\xff\xff\xff")),
    ("-5 partitions", non_flexible_one_partition(b"\x00\x00\x00\x00", b"", partitions=b"\xff\xff\xff\xfb")),
])
def test_hostile_lengths_are_refused_without_looping(case, data):
    started = time.perf_counter()
    with pytest.raises(FetchScanError):
        scan_fetch_response(data, 11)
    assert time.perf_counter() - started < 0.5, case  # a length of 2**31 is refused, not looped over


def test_a_flexible_varint_of_six_bytes_is_refused():
    data = header(42, 12) + b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff" * 6 + b"\x01"
    with pytest.raises(FetchScanError, match="varint"):
        scan_fetch_response(data, 12)


def test_a_topic_name_that_is_not_utf8_is_refused():
    data = non_flexible_one_partition(b"\x00\x00\x00\x00", b"").replace(b"\x00\x01t", b"\x00\x01\xff")
    with pytest.raises(FetchScanError, match="UTF-8"):
        scan_fetch_response(data, 11)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_random_corruption_gives_partitions_or_a_scan_error_never_another_exception(version):
    data = bytearray(frame(version, two_topics()))
    rng = random.Random(version)  # a fixed seed: the same 2,000 corruptions every run
    for _ in range(2000):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            got = scan_fetch_response(bytes(bad), version)
        except FetchScanError:
            continue
        assert all(0 <= size <= len(bad) for _t, _p, size in got)


def test_a_hundred_partition_answer_of_a_megabyte_is_scanned_without_copying_its_records():
    # What keeps the scan cheap, checked without a clock (timings belong in bench/): the
    # records (10,000 bytes per partition, not even valid batches, so a decode would fail)
    # are measured, never copied. A scan that copied one partition's records would allocate
    # at least 10,000 bytes at once; the whole scan stays well under that.
    partitions = [Partition(partition_index=i, error_code=0, high_watermark=i, aborted_transactions=None,
                            records=b"r" * 10_000) for i in range(100)]
    data = frame(12, [Topic(topic="orders", partitions=partitions)])
    scan_fetch_response(data, 12)  # warm: imports and caches are not the scan's
    tracemalloc.start()
    try:
        got = scan_fetch_response(data, 12)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(got) == 100 and got[99] == ("orders", 99, 10_000)
    assert peak < 10_000, f"{peak} bytes allocated while scanning 1 MB of records"
