"""proxy/bypass.py: which brokers Metadata names at their real address (pure, table-tested)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from core.configload import ConfigError
from kafka_upstream.upstream import BrokerAddress
from proxy.bypass import SameZoneBypass, coordinator_endpoint, same_zone_brokers, with_real_endpoints
from proxy.config import ProxyConfig

BROKERS = {
    1: BrokerAddress(1, "b1.az1", 9092, "use1-az1"),
    2: BrokerAddress(2, "b2.az2", 9092, "use1-az2"),
    3: BrokerAddress(3, "b3.az1", 9093, "use1-az1"),
    4: BrokerAddress(4, "b4.norack", 9094, None),
}


@pytest.mark.parametrize("bypass, expected", [
    (SameZoneBypass("use1-az1"), {1, 3}),  # by rack
    (SameZoneBypass("use1-az2"), {2}),
    (SameZoneBypass("use1-az3"), set()),  # no broker in the proxy's zone
    (SameZoneBypass("use1-az1", {"3": "use1-az3"}), {1}),  # broker_zones wins over the rack
    (SameZoneBypass("use1-az1", {"4": "use1-az1"}), {1, 3, 4}),  # a rackless broker placed by broker_zones
    (SameZoneBypass(""), set()),  # zone unknown: nothing bypassed, not the rackless broker
])
def test_same_zone_brokers(bypass, expected):
    assert same_zone_brokers(BROKERS, bypass) == expected


def test_with_real_endpoints_changes_only_the_bypassed_brokers():
    partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
        error_code=0, partition_index=0, leader_id=2, leader_epoch=5, replica_nodes=[2], isr_nodes=[2],
        offline_replicas=[])
    topic = MetadataResponse.MetadataResponseTopic(error_code=0, name="t", topic_id=uuid.UUID(int=7),
                                                   is_internal=False, partitions=[partition])
    listeners = MetadataResponse(throttle_time_ms=0, cluster_id="c1", controller_id=2, topics=[topic], brokers=[
        MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=40001, rack="use1-az1"),
        MetadataResponse.MetadataResponseBroker(node_id=2, host="127.0.0.1", port=40002, rack="use1-az2"),
        MetadataResponse.MetadataResponseBroker(node_id=3, host="127.0.0.1", port=40003, rack="use1-az1")])
    out = with_real_endpoints(listeners, BROKERS, frozenset({1, 3}))
    assert [(b.node_id, b.host, b.port, b.rack) for b in out.brokers] == [
        (1, "b1.az1", 9092, "use1-az1"), (2, "127.0.0.1", 40002, "use1-az2"), (3, "b3.az1", 9093, "use1-az1")]
    assert (out.cluster_id, out.controller_id, out.topics) == ("c1", 2, [topic])


@pytest.mark.parametrize("node_id, expected", [
    (1, ("b1.az1", 9092)),  # bypassed: the real broker, as Metadata names it
    (2, ("127.0.0.1", 40002)),  # other zone: its listener
    (9, ("127.0.0.1", 40002)),  # unknown to the view: the listener
])
def test_coordinator_endpoint_matches_metadata(node_id, expected):
    assert coordinator_endpoint(node_id, ("127.0.0.1", 40002), BROKERS, frozenset({1, 3, 9})) == expected


def test_bypass_needs_the_broker_listeners():
    with pytest.raises(ConfigError, match="proxy.bypass_same_zone: requires pass-through"):
        ProxyConfig(broker_listeners=False, bypass_same_zone=True)
    assert ProxyConfig(broker_listeners=True, bypass_same_zone=True).bypass_same_zone
    assert ProxyConfig(bypass_same_zone=True).bypass_same_zone  # a loopback sidecar has pass-through by default
    assert not ProxyConfig().bypass_same_zone  # off by default: clients leak around it (tests/integration/cluster)
