"""One bootstrap for the whole application: a local listener per upstream broker.

Strategy (pass-through, `proxy.broker_listeners`; on by default for a loopback sidecar):
every upstream broker gets a listener of the proxy (an ephemeral port on the proxy's
host), and Metadata names the brokers by their
own node ids at those listeners, with their racks and the real leaders, replicas and
controller. A client therefore keeps one connection per broker, each to the proxy, and
sends every request where it would send it on a direct connection. The proxy serves
ApiVersions, Metadata, FindCoordinator (the coordinator's listener), Produce (the router:
WAL or direct, by its own view of the leader) and the transaction APIs itself; every other
request is forwarded verbatim - header and body bytes, the correlation id swapped - to the
broker whose listener it arrived on (a request on the bootstrap listener: any healthy
broker), and the broker's answer goes back verbatim. So Fetch, ListOffsets, the consumer
group APIs, OffsetCommit/Fetch and admin requests reach the broker they address.

Not passed through: the inter-broker and controller APIs (LeaderAndIsr ... ControlledShutdown,
WriteTxnMarkers, the KRaft quorum and registration APIs), DescribeCluster (its answer names
the brokers' real endpoints; a client falls back to Metadata), SASL (the listener's own)
and client telemetry (KIP-714); see NOT_PASSED. Fetch is offered up to v12: from v16 a Fetch answer may
carry KIP-951 leader endpoints, which would lead the client past the proxy.

A Fetch (v11+) without a rack_id gets `proxy.consumer_rack` (this zone's AZ id) put in
(KIP-392), so a cluster with broker.rack and the rack-aware replica selector names a
replica in this zone as the preferred read replica; the client then fetches from that
broker's listener, and the proxy forwards there.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping

import trio
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata import MetadataResponse

from core.errors import LEADER_NOT_AVAILABLE, NONE, UNKNOWN_TOPIC_OR_PARTITION
from kafka_protocol.fetch_request import decode_fetch_request
from kafka_upstream.metadata import MetadataView
from kafka_upstream.upstream import RawRequest

API_FETCH = 1
API_DESCRIBE_CLUSTER = 60
HIGHEST_FETCH_VERSION = 12  # v16 answers may name leader endpoints (KIP-951)
FIRST_RACK_FETCH_VERSION = 11  # KIP-392: Fetch carries the consumer's rack_id
# KIP-714 client telemetry: a client sends GetTelemetrySubscriptions to one broker right
# after connecting, ahead of its InitProducerId on the same connection; passed through to
# a hung broker it held that producer's start (answers go in request order). Metrics the
# client would push are not worth that: not offered, so clients skip telemetry.
API_GET_TELEMETRY_SUBSCRIPTIONS, API_PUSH_TELEMETRY = 71, 72
# SASL belongs to the proxy's own listener (served there when proxy.sasl_mechanisms is set,
# proxy/versions.with_sasl); passed through it would authenticate the client at the broker
# on the proxy's connection, and a listener without SASL would advertise it.
API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = 17, 36
# Broker-to-broker and controller APIs: no client sends them, and none should reach a broker
# with the proxy's identity (WriteTxnMarkers would write transaction markers).
INTER_BROKER = frozenset({4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 57, 58, 62, 63, 64, 67, 70})
NOT_PASSED = INTER_BROKER | {API_DESCRIBE_CLUSTER,  # its answer names the brokers' real endpoints
                             API_GET_TELEMETRY_SUBSCRIPTIONS, API_PUSH_TELEMETRY,
                             API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE}


def passthrough_versions(upstream: Mapping[int, tuple[int, int]],
                         advertised: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """`advertised` plus the upstream's range of every API passed through (pure)."""
    out = dict(advertised)
    for api_key, (lo, hi) in upstream.items():
        if api_key in out or api_key in NOT_PASSED:
            continue
        if api_key == API_FETCH:
            hi = min(hi, HIGHEST_FETCH_VERSION)
        if lo <= hi:
            out[api_key] = (lo, hi)
    fetch = upstream.get(API_FETCH)
    if fetch is not None and fetch[0] <= HIGHEST_FETCH_VERSION:
        out[API_FETCH] = (fetch[0], min(fetch[1], HIGHEST_FETCH_VERSION))  # also replaces the feature marker
    return out


def build_broker_metadata(view: MetadataView, requested: list[str] | None, ports: Mapping[int, int],
                          host: str) -> MetadataResponse:
    """The Metadata answer when every broker has a listener: real node ids, leaders,
    replicas, racks and controller; every broker at the proxy's host and its port (pure).
    Brokers without a listener yet are left out, and partitions led by one are answered
    LEADER_NOT_AVAILABLE (the client asks again)."""
    names = sorted(view.topics) if requested is None else requested
    topics = []
    for name in names:
        info = view.topics.get(name)
        if info is None:
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0), is_internal=False,
                partitions=[]))
            continue
        partitions = []
        for index in sorted(info.partitions):
            p = info.partitions[index]
            listed = p.leader_id in ports
            code = p.error_code if p.error_code != NONE or listed else LEADER_NOT_AVAILABLE
            partitions.append(MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                error_code=code, partition_index=index, leader_id=p.leader_id if listed else -1,
                leader_epoch=max(p.leader_epoch, 0), replica_nodes=[n for n in p.replicas if n in ports],
                isr_nodes=[n for n in p.isr if n in ports], offline_replicas=[]))
        topics.append(MetadataResponse.MetadataResponseTopic(
            error_code=info.error_code, name=name, topic_id=info.topic_id, is_internal=info.is_internal,
            partitions=partitions))
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=b.node_id, host=host, port=ports[b.node_id],
                                                       rack=b.rack)
               for b in sorted(view.brokers.values(), key=lambda b: b.node_id) if b.node_id in ports]
    controller = view.controller_id if view.controller_id in ports else -1
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=view.cluster_id,
                            controller_id=controller, topics=topics)


class BrokerListeners:
    """Node id <-> local port of the listener that stands for that upstream broker."""

    def __init__(self, open_listener: Callable[[], Awaitable[int]]) -> None:
        """open_listener: opens one more listener on the proxy and returns its port."""
        self._open_listener = open_listener
        self.ports: dict[int, int] = {}
        self.nodes: dict[int, int] = {}  # port -> node id
        self._lock = trio.Lock()

    async def ensure(self, node_ids: list[int]) -> Mapping[int, int]:
        """A listener for each of `node_ids`; returns node id -> port. Raises OSError."""
        if all(n in self.ports for n in node_ids):
            return self.ports
        async with self._lock:
            for node_id in node_ids:
                if node_id not in self.ports:
                    port = await self._open_listener()
                    self.ports[node_id] = port
                    self.nodes[port] = node_id
        return self.ports


def fetch_with_rack(body: bytes, api_version: int, rack: str, client_id: str | None) -> RawRequest | None:
    """The Fetch to forward with `rack` as its rack_id, or None to forward it unchanged: no
    rack configured, a version without rack_id, the client's own rack_id, or header tagged
    fields (flexible versions) other than none (pure). Raises nothing: a body that does not
    decode is forwarded unchanged, for the broker to judge.

    `body` is what the proxy's codec cut after the client id: for flexible versions it
    still starts with the request header's tagged fields (Fetch is not decoded locally).
    """
    if not rack or api_version < FIRST_RACK_FETCH_VERSION:
        return None
    flexible = FetchRequest.flexible_version_q(api_version)
    request = decode_fetch_request(body, api_version)
    if request is None or request.rack_id:
        return None
    # A new request from the decoded fields (a decoded one cannot be encoded again).
    fields = {name: getattr(request, name) for name in FetchRequest.fields}
    forwarded = FetchRequest(**{**fields, "rack_id": rack})
    return RawRequest(API_FETCH, api_version, bytes(forwarded.encode(version=api_version)), flexible, client_id)
