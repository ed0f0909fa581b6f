"""The pure parts of pass-through (proxy/passthrough.py): the Metadata answer with one
listener per broker, and the versions advertised. Through real sockets:
tests/cluster/test_passthrough_on_cluster.py."""

from __future__ import annotations

import uuid

from proxy.metadata import MetadataView, PartitionInfo, TopicInfo
from proxy.passthrough import build_broker_metadata, passthrough_versions
from proxy.upstream import BrokerAddress


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


def test_versions_pass_through_all_but_inter_broker_apis_and_describe_cluster():
    upstream = {0: (0, 11), 1: (0, 16), 2: (0, 8), 4: (0, 7), 11: (0, 9), 60: (0, 1), 3: (0, 12)}
    advertised = {0: (0, 11), 3: (0, 12), 18: (0, 4)}
    assert passthrough_versions(upstream, advertised) == {
        0: (0, 11), 3: (0, 12), 18: (0, 4),  # served by the proxy: unchanged
        1: (0, 12),  # Fetch capped below KIP-951's leader endpoints
        2: (0, 8), 11: (0, 9),  # ListOffsets, JoinGroup: the broker's range
    }  # 4 (LeaderAndIsr) and 60 (DescribeCluster) are not offered
