"""Append raw record batches to their partition leaders with aiokafka's low-level client.

Strategy: the batch bytes travel unchanged (producer id, epoch and sequence included), so
the leader does its own duplicate detection. Per leader node one drain task keeps one
ProduceRequest in flight and puts into it every batch waiting for that node, at most one
per partition (Kafka's rule), the way a producer's sender does; callers append a
partition's batches one after another, so each partition's order is kept. Leader moves and unknown partitions refresh metadata and retry; connection
failures and timeouts retry too; all with bounded attempts and capped exponential backoff.
When attempts run out the caller gets the last Kafka error code, which is retriable for
the producer, never an exception. aiokafka's exceptions stop here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, RequestTimedOutError
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.structs import TopicPartition

log = logging.getLogger(__name__)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NETWORK_EXCEPTION = 13
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
DUPLICATE_SEQUENCE_NUMBER = 46
KAFKA_STORAGE_ERROR = 56
CORRUPT_MESSAGE = 2

# Errors after which the leader may have moved: refresh metadata before the next attempt.
REFRESH_METADATA_CODES = frozenset({UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
                                    NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, NETWORK_EXCEPTION})
RETRIABLE_CODES = REFRESH_METADATA_CODES | {REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
                                            NOT_ENOUGH_REPLICAS_AFTER_APPEND, CORRUPT_MESSAGE}

# Internal marker, never sent: the leader moved out of the agent's zone; answered at once as
# NOT_LEADER_OR_FOLLOWER (no retries: waiting does not bring the leader back).
_LEADER_IN_OTHER_ZONE = -1000

BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 1.0  # a Tansu/Kafka restart takes about a second to reach; wait no longer per step


@dataclass(frozen=True)
class AppendResult:
    error_code: int
    base_offset: int = -1
    duplicate: bool = False
    attempts: int = 1
    latency_s: float = 0.0


class KafkaAppender:
    """Owns one AIOKafkaClient for the zone's cluster. Use `async with` (or start/close)."""

    def __init__(self, bootstrap_servers: list[str] | tuple[str, ...], *, client_id: str = "azsidecar-agent",
                 max_attempts: int = 5, produce_timeout_ms: int = 10_000, request_timeout_ms: int = 15_000,
                 home_zone: str | None = None, security: Mapping[str, Any] | None = None) -> None:
        """home_zone: refuse (NOT_LEADER_OR_FOLLOWER) to append to a leader whose broker rack
        names another zone, so the proxy re-routes instead of the agent crossing zones.
        security: AIOKafkaClient's security_protocol/ssl_context/sasl_* arguments (TLS, SASL)."""
        self._security = dict(security or {})
        self._home_zone = home_zone
        self._bootstrap = list(bootstrap_servers)
        self._client_id = client_id
        self._max_attempts = max_attempts
        self._produce_timeout_ms = produce_timeout_ms
        self._request_timeout_ms = request_timeout_ms
        self._client: AIOKafkaClient | None = None
        # Per leader node: batches waiting for the next ProduceRequest, and the task sending them.
        self._pending: dict[int, list[tuple[TopicPartition, bytes, asyncio.Future]]] = {}
        self._drains: dict[int, asyncio.Task] = {}

    async def start(self) -> None:
        """Connect and fetch metadata. Raises KafkaAppendUnavailable if no broker answers."""
        self._client = AIOKafkaClient(bootstrap_servers=self._bootstrap, client_id=self._client_id,
                                      request_timeout_ms=self._request_timeout_ms, retry_backoff_ms=100,
                                      **self._security)
        try:
            await self._client.bootstrap()
        except KafkaError as exc:
            await self._client.close()
            self._client = None
            raise KafkaAppendUnavailable(f"no broker of {self._bootstrap} answered: {exc}") from exc

    async def close(self) -> None:
        for task in list(self._drains.values()):
            task.cancel()
        if self._drains:
            await asyncio.gather(*self._drains.values(), return_exceptions=True)
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> KafkaAppender:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def append(self, topic: str, partition: int, batch: bytes) -> AppendResult:
        """Append one raw batch; returns the leader's base offset or the last error code."""
        assert self._client is not None, "start() first"
        client = self._client
        tp = TopicPartition(topic, partition)
        started = time.monotonic()
        backoff_s = BACKOFF_INITIAL_S
        code = LEADER_NOT_AVAILABLE
        for attempt in range(1, self._max_attempts + 1):
            code, offset = await self._attempt(client, tp, batch)
            if code == NONE:
                return AppendResult(NONE, offset, False, attempt, time.monotonic() - started)
            if code == DUPLICATE_SEQUENCE_NUMBER:
                return AppendResult(NONE, -1, True, attempt, time.monotonic() - started)
            if code == _LEADER_IN_OTHER_ZONE:
                return AppendResult(NOT_LEADER_OR_FOLLOWER, -1, False, attempt, time.monotonic() - started)
            if code not in RETRIABLE_CODES or attempt == self._max_attempts:
                break
            log.info("append %s-%d: error %d, attempt %d/%d", topic, partition, code, attempt, self._max_attempts)
            if code in REFRESH_METADATA_CODES:
                await self._refresh(client)
            await asyncio.sleep(backoff_s)  # backoff between attempts, not synchronization
            backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
        return AppendResult(code, -1, False, attempt, time.monotonic() - started)

    async def _attempt(self, client: AIOKafkaClient, tp: TopicPartition, batch: bytes) -> tuple[int, int]:
        leader = client.cluster.leader_for_partition(tp)
        if leader is None:
            # Unknown topic to this client: start tracking it (one metadata round trip).
            try:
                await client.add_topic(tp.topic)
            except KafkaError:
                return NETWORK_EXCEPTION, -1
            leader = client.cluster.leader_for_partition(tp)
            if leader is None:
                return UNKNOWN_TOPIC_OR_PARTITION, -1
        if leader == -1:
            return LEADER_NOT_AVAILABLE, -1
        if leader_in_other_zone(client.cluster.broker_metadata(leader), self._home_zone):
            return _LEADER_IN_OTHER_ZONE, -1
        return await self._enqueue(client, leader, tp, batch)

    async def _enqueue(self, client: AIOKafkaClient, node: int, tp: TopicPartition, batch: bytes) -> tuple[int, int]:
        """Queue the batch for `node`; the node's drain task sends it with other partitions' batches."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.setdefault(node, []).append((tp, batch, fut))
        if node not in self._drains:
            self._drains[node] = asyncio.create_task(self._drain(client, node))
        return await fut

    async def _drain(self, client: AIOKafkaClient, node: int) -> None:
        """Send the node's queued batches, one ProduceRequest in flight at a time.

        A request carries at most one batch per partition (Kafka's rule for v3+), so a second
        batch of the same partition waits for the next request and order is kept.
        """
        try:
            while self._pending.get(node):
                queue = self._pending[node]
                taken: dict[TopicPartition, tuple[bytes, asyncio.Future]] = {}
                rest = []
                for tp, batch, fut in queue:
                    if fut.done():
                        continue  # its appender was cancelled
                    if tp in taken:
                        rest.append((tp, batch, fut))
                    else:
                        taken[tp] = (batch, fut)
                self._pending[node] = rest
                if not taken:
                    continue
                by_topic: dict[str, list[tuple[int, bytes]]] = {}
                for tp, (batch, _fut) in taken.items():
                    by_topic.setdefault(tp.topic, []).append((tp.partition, batch))
                request = ProduceRequest(transactional_id=None, required_acks=-1, timeout=self._produce_timeout_ms,
                                         topics=list(by_topic.items()))
                outcome: dict[tuple[str, int], tuple[int, int]] = {}
                failure = None
                try:
                    response = await client.send(node, request)
                except RequestTimedOutError:
                    failure = REQUEST_TIMED_OUT
                except KafkaError as exc:
                    log.info("produce to node %s: %r", node, exc)
                    failure = NETWORK_EXCEPTION
                else:
                    for topic, partitions in response.topics:
                        for part in partitions:
                            outcome[(topic, int(part[0]))] = (int(part[1]), int(part[2]))
                for tp, (_batch, fut) in taken.items():
                    if not fut.done():
                        fut.set_result((failure, -1) if failure is not None
                                       else outcome.get((tp.topic, tp.partition), (UNKNOWN_TOPIC_OR_PARTITION, -1)))
        finally:
            del self._drains[node]
            for _tp, _batch, fut in self._pending.pop(node, []):
                if not fut.done():
                    fut.set_result((NETWORK_EXCEPTION, -1))

    async def _refresh(self, client: AIOKafkaClient) -> None:
        try:
            async with asyncio.timeout(self._request_timeout_ms / 1000):  # not wait_for: see agent.py
                await client.force_metadata_update()
        except (KafkaError, asyncio.TimeoutError) as exc:
            log.info("metadata refresh failed: %r", exc)


def leader_in_other_zone(broker: object | None, home_zone: str | None) -> bool:
    """True if the broker reports a rack and it is not our zone (no rack, e.g. Tansu: unknown, so False)."""
    rack = getattr(broker, "rack", None)
    return bool(home_zone) and bool(rack) and rack != home_zone


class KafkaAppendUnavailable(RuntimeError):
    """The zone's cluster could not be reached at start-up."""
