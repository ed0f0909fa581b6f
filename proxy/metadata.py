"""The upstream cluster as the proxy sees it, and the Metadata answers it gives clients.

Strategy: `MetadataCache` keeps per-topic entries from upstream Metadata responses for
`metadata_ttl_s`; `build_client_metadata` (pure) rewrites a view so the proxy is the only
broker and the leader, replica and ISR of every partition, while topic ids, error codes
and auto-creation come from upstream. Real leaders and racks stay inside the proxy (the
router reads them); no upstream endpoint reaches a client.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from core.errors import LEADER_NOT_AVAILABLE, NONE, UNKNOWN_TOPIC_OR_PARTITION
from proxy.upstream import BrokerAddress, UpstreamCluster

log = logging.getLogger(__name__)

HIGHEST_METADATA_VERSION = 12  # what we decode; v13 only adds a top-level error code


@dataclass(frozen=True)
class PartitionInfo:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    error_code: int
    topic_id: uuid.UUID
    is_internal: bool
    partitions: dict[int, PartitionInfo]
    fetched_at: float = 0.0


@dataclass
class MetadataView:
    cluster_id: str | None = None
    brokers: dict[int, BrokerAddress] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)


class MetadataCache:
    """Upstream metadata with a TTL; refreshes on demand and on invalidation."""

    def __init__(self, cluster: UpstreamCluster, ttl_s: float, timeout_s: float) -> None:
        self._cluster = cluster
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self.view = MetadataView()
        self._lock = trio.Lock()
        self.hits = 0
        self.misses = 0

    def invalidate(self, topic: str) -> None:
        self.view.topics.pop(topic, None)

    def _fresh(self, topic: str, now: float) -> bool:
        info = self.view.topics.get(topic)
        return info is not None and info.error_code == NONE and now - info.fetched_at < self._ttl_s

    async def topics(self, names: Iterable[str] | None, allow_auto_create: bool = False) -> MetadataView:
        """A view covering `names` (None = every topic). Raises UpstreamError."""
        now = trio.current_time()
        if names is not None:
            names = list(names)
            missing = [n for n in names if not self._fresh(n, now)]
            if not missing:
                self.hits += 1
                return self.view
            self.misses += 1
            await self._refresh(missing, allow_auto_create)
        else:
            self.misses += 1
            await self._refresh(None, allow_auto_create)
        return self.view

    async def probe(self) -> None:
        """One Metadata request naming no topic (the brokers only), for readiness. Raises UpstreamError."""
        await self._refresh([], False)

    async def leader(self, topic: str, partition: int) -> tuple[PartitionInfo | None, BrokerAddress | None, int]:
        """(partition info, leader broker, topic error) for one partition, refreshing if stale."""
        view = await self.topics([topic])
        info = view.topics.get(topic)
        if info is None:
            return None, None, UNKNOWN_TOPIC_OR_PARTITION
        if info.error_code != NONE:
            return None, None, info.error_code
        p = info.partitions.get(partition)
        if p is None:
            return None, None, UNKNOWN_TOPIC_OR_PARTITION
        return p, view.brokers.get(p.leader_id), NONE

    async def _refresh(self, names: list[str] | None, allow_auto_create: bool) -> None:
        async with self._lock:
            await self._cluster.ensure_api_versions()
            version = self._cluster.version_for(MetadataRequest.API_KEY, HIGHEST_METADATA_VERSION)
            topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
            if version == 0 and topics is None:
                topics = []  # v0 means "all" with an empty list
            request = MetadataRequest(topics=topics, allow_auto_topic_creation=allow_auto_create)
            conn = await self._cluster.connection()
            response = await conn.request(request, version, self._timeout_s)
            self._absorb(response)

    def _absorb(self, response: MetadataResponse) -> None:
        now = trio.current_time()
        brokers = {b.node_id: BrokerAddress(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.view.brokers = brokers
        self._cluster.set_brokers(brokers)
        self.view.cluster_id = getattr(response, "cluster_id", None)
        for t in response.topics:
            parts = {p.partition_index: PartitionInfo(p.error_code, p.leader_id, p.leader_epoch) for p in t.partitions}
            topic_id = t.topic_id if isinstance(getattr(t, "topic_id", None), uuid.UUID) else uuid.UUID(int=0)
            self.view.topics[t.name] = TopicInfo(t.name, t.error_code, topic_id, bool(t.is_internal), parts, now)


def build_client_metadata(view: MetadataView, requested: list[str] | None, proxy_node_id: int,
                          proxy_host: str, proxy_port: int) -> MetadataResponse:
    """The Metadata answer for a client: the proxy leads every partition (pure)."""
    names = sorted(view.topics) if requested is None else requested
    topics = []
    for name in names:
        info = view.topics.get(name)
        if info is None:
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0),
                is_internal=False, partitions=[]))
            continue
        partitions = []
        for index in sorted(info.partitions):
            p = info.partitions[index]
            ok = p.error_code in (NONE, LEADER_NOT_AVAILABLE)  # upstream election: still ours to serve
            partitions.append(MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                error_code=NONE if ok else p.error_code, partition_index=index,
                leader_id=proxy_node_id, leader_epoch=max(p.leader_epoch, 0),
                replica_nodes=[proxy_node_id], isr_nodes=[proxy_node_id], offline_replicas=[]))
        topics.append(MetadataResponse.MetadataResponseTopic(
            error_code=info.error_code, name=name, topic_id=info.topic_id,
            is_internal=info.is_internal, partitions=partitions))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=proxy_node_id, host=proxy_host,
                                                         port=proxy_port, rack=None)],
        cluster_id=view.cluster_id, controller_id=proxy_node_id, topics=topics)
