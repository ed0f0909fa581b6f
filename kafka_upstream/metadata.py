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
from typing import Any

import trio
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from core.errors import LEADER_NOT_AVAILABLE, NONE, UNKNOWN_TOPIC_OR_PARTITION
from kafka_upstream.errors import UpstreamError
from kafka_upstream.upstream import BOOTSTRAP_NODE, BrokerAddress, UpstreamCluster

log = logging.getLogger(__name__)

HIGHEST_METADATA_VERSION = 12  # what we decode; v13 only adds a top-level error code


@dataclass(frozen=True)
class PartitionInfo:
    error_code: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


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
    controller_id: int = -1
    brokers: dict[int, BrokerAddress] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)


class MetadataCache:
    """Upstream metadata with a TTL; refreshes on demand and on invalidation.

    A topic whose entry only aged past the TTL is served from the cache while a background
    refresh runs, so produce never waits for a routine refresh. A topic that was
    invalidated (its leader answered NOT_LEADER, the proxy found no leader, a leader's
    connection failed) or is unknown waits for a refresh; if that fails and an old entry
    exists, the old entry is used. A refresh asks one broker after another - the one that
    answered last first, one that failed last at the end - each within `timeout_s`, so one
    hung broker costs one timeout, not every refresh.
    """

    def __init__(self, cluster: UpstreamCluster, ttl_s: float, timeout_s: float) -> None:
        self._cluster = cluster
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self.view = MetadataView()
        self._lock = trio.Lock()
        self._invalidated: set[str] = set()
        self._refreshing: set[str] = set()  # topics a background refresh is fetching
        self._source_failed_at: dict[int, float] = {}  # node id (BOOTSTRAP_NODE too) -> last failure
        self._source_ok = BOOTSTRAP_NODE  # the node that answered the last refresh
        self.hits = 0
        self.misses = 0

    def invalidate(self, topic: str) -> None:
        """The next lookup of `topic` waits for fresh metadata."""
        self._invalidated.add(topic)

    def _fresh(self, topic: str, now: float) -> bool:
        info = self.view.topics.get(topic)
        return (info is not None and info.error_code == NONE and topic not in self._invalidated
                and now - info.fetched_at < self._ttl_s)

    def cached(self, topic: str) -> bool:
        """Whether a lookup of `topic` is answered from the cache (fresh, or aged while a
        background refresh runs), not after a refresh."""
        return self._usable(topic)

    def _usable(self, topic: str) -> bool:
        """Cached without error and not invalidated: good enough while a refresh runs."""
        info = self.view.topics.get(topic)
        return info is not None and info.error_code == NONE and topic not in self._invalidated

    async def topics(self, names: Iterable[str] | None, allow_auto_create: bool = False) -> MetadataView:
        """A view covering `names` (None = every topic). Raises UpstreamError."""
        now = trio.current_time()
        if names is None:
            self.misses += 1
            await self._refresh(None, allow_auto_create)
            return self.view
        names = list(names)
        missing = [n for n in names if not self._fresh(n, now)]
        if not missing:
            self.hits += 1
            return self.view
        if all(self._usable(n) for n in missing):
            self.hits += 1
            self._refresh_in_background(missing)
            return self.view
        self.misses += 1
        try:
            await self._refresh(missing, allow_auto_create)
        except UpstreamError as exc:
            if not all(n in self.view.topics for n in missing):
                raise
            log.warning("metadata refresh of %s failed (%s); using the cached entries", missing, exc)
        return self.view

    async def probe(self) -> None:
        """One Metadata request naming no topic (the brokers only), for readiness. Raises UpstreamError."""
        await self._refresh([], False)

    async def ensure_broker(self, node_id: int) -> None:
        """Learn the brokers' addresses if `node_id` is not among them (a coordinator named
        before any Metadata request; -1: whichever, to learn the brokers at all). Raises
        UpstreamError."""
        if node_id not in self.view.brokers:
            await self._refresh([], False)  # no topics: the broker list only

    def _refresh_in_background(self, names: list[str]) -> None:
        wanted = [n for n in names if n not in self._refreshing]
        if not wanted:
            return
        self._refreshing.update(wanted)
        self._cluster.start_soon(self._background_refresh, wanted)

    async def _background_refresh(self, names: list[str]) -> None:
        try:
            await self._refresh(names, False)
        except UpstreamError as exc:
            log.warning("background metadata refresh of %s failed: %s", names, exc)
        finally:
            self._refreshing.difference_update(names)

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

    def _sources(self) -> list[int]:
        """Nodes to ask, in order: the last good one, then known brokers and the bootstrap
        servers, those that failed longest ago (or never) first."""
        order = [self._source_ok, *self.view.brokers, BOOTSTRAP_NODE]
        unique = list(dict.fromkeys(order))
        return sorted(unique, key=lambda n: (self._source_failed_at.get(n, float("-inf")), unique.index(n)))

    async def _refresh(self, names: list[str] | None, allow_auto_create: bool) -> None:
        """Raises UpstreamError if no broker answered."""
        async with self._lock:
            await self._cluster.ensure_api_versions()
            version = self._cluster.version_for(MetadataRequest.API_KEY, HIGHEST_METADATA_VERSION)
            topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
            if version == 0 and topics is None:
                topics = []  # v0 means "all" with an empty list
            request = MetadataRequest(topics=topics, allow_auto_topic_creation=allow_auto_create)
            response = await self.ask_any_broker(request, version)
            self._absorb(response)
            if names is not None:
                self._invalidated.difference_update(names)
            else:
                self._invalidated.clear()

    async def ask_any_broker(self, request: Any, version: int) -> Any:
        """Send a request any broker can answer (Metadata, a non-transactional InitProducerId)
        to one broker after another until one answers, each within the metadata timeout.

        Raises UpstreamError if none answered.
        """
        failures = []
        for node_id in self._sources():
            try:
                conn = await self._cluster.connection(node_id)
                response = await conn.request(request, version, self._timeout_s)
            except UpstreamError as exc:
                failures.append(f"node {node_id}: {exc}")
                self._source_failed_at[node_id] = trio.current_time()
                if node_id == BOOTSTRAP_NODE:
                    await self._cluster.drop(BOOTSTRAP_NODE)  # reconnect elsewhere next time
                continue
            self._source_ok = node_id
            self._source_failed_at.pop(node_id, None)
            return response
        raise UpstreamError(f"no broker answered {type(request).__name__}: {'; '.join(failures)}")

    def _absorb(self, response: MetadataResponse) -> None:
        now = trio.current_time()
        brokers = {b.node_id: BrokerAddress(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.view.brokers = brokers
        self._cluster.set_brokers(brokers)
        self.view.cluster_id = getattr(response, "cluster_id", None)
        self.view.controller_id = getattr(response, "controller_id", -1)
        for t in response.topics:
            parts = {p.partition_index: PartitionInfo(p.error_code, p.leader_id, p.leader_epoch,
                                                      tuple(p.replica_nodes), tuple(p.isr_nodes))
                     for p in t.partitions}
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
