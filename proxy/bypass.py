"""Same-zone bypass: Metadata sends clients straight to the brokers of the proxy's own zone.

Strategy (with `proxy.broker_listeners` and `proxy.bypass_same_zone`): the pass-through
Metadata answer (`passthrough.build_broker_metadata`) names every broker at a listener of
the proxy; this module puts the real host and port back for the brokers whose zone
(`router.broker_zones` by node id, else the broker's rack, `core.zones.leader_zone`) is
the proxy's own. A client then sends the batches of partitions led in this zone to the
broker itself (never through Python) and everything else to the proxy's listeners.

What it cannot do (measured, docs/protocol-front-door.md "Same-zone bypass"): a client
that talks to a real broker may send that broker its next Metadata request, and the
broker answers with the real addresses of every broker; librdkafka then reconnects to
the cross-zone brokers directly, around the proxy. So the bypass is off by default and
safe only where the client cannot reach other zones' brokers (network policy), or where
every broker is in this zone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka.protocol.metadata import MetadataResponse

from core.zones import leader_zone
from kafka_upstream.upstream import BrokerAddress


@dataclass(frozen=True)
class SameZoneBypass:
    """The proxy's zone and how brokers are placed in zones (the router's broker_zones)."""

    zone: str
    broker_zones: Mapping[str, str] = field(default_factory=dict)  # node id (as text) -> zone; wins over racks


def same_zone_brokers(brokers: Mapping[int, BrokerAddress], bypass: SameZoneBypass) -> frozenset[int]:
    """Node ids of the brokers in `bypass.zone` (pure). A broker whose zone nothing says
    (no rack, not in broker_zones) is not bypassed: the proxy keeps it."""
    return frozenset(node_id for node_id, b in brokers.items()
                     if leader_zone("", -1, node_id, b.rack, {}, bypass.broker_zones) == bypass.zone)


def with_real_endpoints(response: MetadataResponse, brokers: Mapping[int, BrokerAddress],
                        bypassed: frozenset[int]) -> MetadataResponse:
    """`response` (a pass-through Metadata answer) with the brokers in `bypassed` at their
    real host and port; node ids, racks, leaders and every other broker unchanged (pure)."""
    listed = [MetadataResponse.MetadataResponseBroker(
        node_id=b.node_id,
        host=brokers[b.node_id].host if b.node_id in bypassed else b.host,
        port=brokers[b.node_id].port if b.node_id in bypassed else b.port,
        rack=b.rack) for b in response.brokers]
    return MetadataResponse(throttle_time_ms=response.throttle_time_ms, brokers=listed,
                            cluster_id=response.cluster_id, controller_id=response.controller_id,
                            topics=response.topics)


def coordinator_endpoint(node_id: int, listener: tuple[str, int], brokers: Mapping[int, BrokerAddress],
                         bypassed: frozenset[int]) -> tuple[str, int]:
    """Where a client reaches coordinator `node_id`: the same address Metadata gives that
    node (the real broker if bypassed, else its listener), so a client never sees one node
    id at two addresses (pure)."""
    if node_id in bypassed and node_id in brokers:
        return brokers[node_id].host, brokers[node_id].port
    return listener
