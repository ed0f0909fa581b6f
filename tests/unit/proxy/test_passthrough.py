"""The pure parts of pass-through (proxy/passthrough.py): the Metadata answer with one
listener per broker, and the versions advertised. Through real sockets:
tests/integration/cluster/test_passthrough_on_cluster.py."""

from __future__ import annotations

import uuid

from kafka.protocol.consumer.fetch import FetchRequest

from kafka_upstream.metadata import MetadataView, PartitionInfo, TopicInfo
from kafka_upstream.upstream import BrokerAddress
from proxy.passthrough import build_broker_metadata, fetch_with_rack, passthrough_versions


def view() -> MetadataView:
    brokers = {n: BrokerAddress(n, f"b{n}.internal", 9092, f"use1-az{n}") for n in (1, 2, 3)}
    parts = {0: PartitionInfo(0, 2, 5, (2, 3), (2, 3)), 1: PartitionInfo(0, 3, 1, (3, 1), (3,))}
    topic = TopicInfo("t", 0, uuid.UUID(int=7), False, parts)
    return MetadataView("c1", 1, brokers, {"t": topic})


def test_every_broker_at_its_listener_with_its_rack_and_the_real_leaders():
    answer = build_broker_metadata(view(), None, {1: 40001, 2: 40002, 3: 40003}, "127.0.0.1")
    assert [(b.node_id, b.host, b.port, b.rack) for b in answer.brokers] == [
        (1, "127.0.0.1", 40001, "use1-az1"), (2, "127.0.0.1", 40002, "use1-az2"), (3, "127.0.0.1", 40003, "use1-az3")]
    assert answer.controller_id == 1
    parts = answer.topics[0].partitions
    assert [(p.partition_index, p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
            for p in parts] == [(0, 0, 2, 5, [2, 3], [2, 3]), (1, 0, 3, 1, [3, 1], [3])]
    assert answer.topics[0].topic_id == uuid.UUID(int=7)


def test_a_broker_without_a_listener_is_left_out_and_its_partitions_have_no_leader():
    answer = build_broker_metadata(view(), ["t", "nope"], {1: 40001, 3: 40003}, "127.0.0.1")
    assert [b.node_id for b in answer.brokers] == [1, 3]
    p0, p1 = answer.topics[0].partitions
    assert (p0.error_code, p0.leader_id, p0.replica_nodes) == (5, -1, [3])  # LEADER_NOT_AVAILABLE: ask again
    assert (p1.error_code, p1.leader_id) == (0, 3)
    assert answer.topics[1].error_code == 3  # unknown topic


def test_versions_pass_through_all_but_inter_broker_apis_describe_cluster_telemetry_and_sasl():
    upstream = {0: (0, 11), 1: (0, 16), 2: (0, 8), 4: (0, 7), 11: (0, 9), 60: (0, 1), 3: (0, 12), 71: (0, 0),
                72: (0, 0), 17: (0, 1), 36: (0, 2), 27: (0, 1)}
    advertised = {0: (0, 11), 3: (0, 12), 18: (0, 4)}
    assert passthrough_versions(upstream, advertised) == {
        0: (0, 11), 3: (0, 12), 18: (0, 4),  # served by the proxy: unchanged
        1: (0, 12),  # Fetch capped below KIP-951's leader endpoints
        2: (0, 8), 11: (0, 9),  # ListOffsets, JoinGroup: the broker's range
    }  # not offered: 4 (LeaderAndIsr), 27 (WriteTxnMarkers), 60 (DescribeCluster), 71 and 72
    # (client telemetry), 17 and 36 (SASL: the listener's own, advertised only where it serves it)


def fetch_body(version: int, rack: str) -> bytes:
    """A Fetch body as the proxy's codec cuts it: flexible versions still start with the
    request header's tagged fields (none: one 0 byte)."""
    topic = FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchTopic.FetchPartition(
        partition=3, current_leader_epoch=-1, fetch_offset=42, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=1 << 20)])
    request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                           session_id=0, session_epoch=-1, topics=[topic], forgotten_topics_data=[], rack_id=rack)
    body = bytes(request.encode(version=version))
    return (b"\x00" + body) if FetchRequest.flexible_version_q(version) else body


def test_a_consumers_fetch_gets_this_zones_rack_when_it_sent_none():
    for version in (11, 12):
        raw = fetch_with_rack(fetch_body(version, ""), version, "use1-az2", "app-1")
        assert (raw.api_key, raw.api_version, raw.flexible, raw.client_id) == (1, version, version >= 12, "app-1")
        expected = fetch_body(version, "use1-az2")  # the same request, written with the rack by the library
        assert raw.body == (expected[1:] if version >= 12 else expected)  # byte for byte
        forwarded = FetchRequest.decode(raw.body, version=version)
        assert forwarded.rack_id == "use1-az2"
        assert (forwarded.isolation_level, forwarded.topics[0].topic, forwarded.topics[0].partitions[0].fetch_offset) \
            == (1, "t", 42)  # the rest as the client sent it


def test_the_clients_own_rack_an_old_version_or_no_rack_leave_the_fetch_alone():
    assert fetch_with_rack(fetch_body(11, "use1-az3"), 11, "use1-az2", "app-1") is None
    assert fetch_with_rack(fetch_body(10, ""), 10, "use1-az2", "app-1") is None  # no rack_id before v11
    assert fetch_with_rack(fetch_body(12, ""), 12, "", "app-1") is None  # no consumer_rack configured
    assert fetch_with_rack(b"\x01\x02garbage", 12, "use1-az2", "app-1") is None  # header tags we do not read
    assert fetch_with_rack(b"\x00garbage", 12, "use1-az2", "app-1") is None  # the broker judges what does not decode
