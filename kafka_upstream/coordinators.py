"""Transactions through the proxy: coordinators found upstream, their APIs forwarded to them.

Strategy: a transactional producer asks FindCoordinator (key type transaction, and group
for sendOffsetsToTransaction); the proxy asks any healthy upstream broker, remembers the
real coordinator per (key type, key) and answers that the coordinator is the proxy itself
(the client knows no other broker), or - with proxy.broker_listeners - the listener that
stands for the coordinator (proxy/passthrough.py). InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn then go to the transaction coordinator of
their transactional id, TxnOffsetCommit to the group coordinator of its group id. They
are forwarded verbatim: the client's header (with the proxy's correlation id) and body
bytes, and the coordinator's answer with the client's correlation id put back, so every
version both sides speak passes unchanged. An answer NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE, or a failed connection, forgets the coordinator; the client
retries and the proxy looks it up again. Transactional record batches themselves are
routed like any other Produce (docs/routing.md: never by the WAL).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
)

from core import errors
from kafka_protocol.kafka_codec import (
    API_ADD_OFFSETS_TO_TXN,
    API_ADD_PARTITIONS_TO_TXN,
    API_END_TXN,
    API_FIND_COORDINATOR,
    API_TXN_OFFSET_COMMIT,
    RequestFrame,
    is_flexible,
)
from kafka_upstream.errors import UpstreamError
from kafka_upstream.metadata import MetadataCache
from kafka_upstream.upstream import RawRequest, UpstreamCluster

log = logging.getLogger(__name__)

KEY_GROUP = 0
KEY_TRANSACTION = 1
FIRST_BATCHED_FIND_COORDINATOR_VERSION = 4  # KIP-699: coordinator_keys instead of key
HIGHEST_FIND_COORDINATOR_VERSION = 6  # what kafka-python's classes decode
# The APIs forwarded to a coordinator: api_key -> highest version forwarded (AddPartitionsToTxn
# v4+ is broker-to-broker only, KIP-890).
FORWARDED: dict[int, int] = {
    API_ADD_PARTITIONS_TO_TXN: 3,
    API_ADD_OFFSETS_TO_TXN: 4,
    API_END_TXN: 5,
    API_TXN_OFFSET_COMMIT: 5,
}
_FORGET = frozenset({errors.NOT_COORDINATOR, errors.COORDINATOR_NOT_AVAILABLE})
_I16 = struct.Struct(">h")


def coordinator_key(api_key: int, request: Any) -> tuple[int, str]:
    """(key type, key) of the coordinator a forwarded request must reach (pure)."""
    if api_key == API_TXN_OFFSET_COMMIT:
        return KEY_GROUP, request.group_id
    if api_key == API_ADD_PARTITIONS_TO_TXN and getattr(request, "v3_and_below_transactional_id", None):
        return KEY_TRANSACTION, request.v3_and_below_transactional_id
    return KEY_TRANSACTION, request.transactional_id


def forwarded_frame(frame: RequestFrame) -> RawRequest:
    """The client's request as it goes upstream: same header fields (client id included)
    but the correlation id (the upstream connection sets its own), same body bytes (pure)."""
    return RawRequest(frame.api_key, frame.api_version, bytes(frame.body),
                      is_flexible(frame.api_key, frame.api_version), frame.client_id)


def with_correlation_id(response_frame: bytes, correlation_id: int) -> bytes:
    """A coordinator's response frame (size prefix removed) for the client: its correlation
    id back in place, the size prefix added (pure)."""
    return struct.pack(">ii", len(response_frame), correlation_id) + response_frame[4:]


def top_level_error(api_key: int, response_frame: bytes, api_version: int) -> int:
    """The error code that says "wrong coordinator" in an AddOffsetsToTxn or EndTxn answer
    (throttle_time_ms int32, error_code int16 after the header); others: NONE (pure).

    AddPartitionsToTxn and TxnOffsetCommit carry errors per partition; a wrong coordinator
    shows there and the client retries after its own FindCoordinator, which the proxy
    answers from a fresh lookup (the cache entry is dropped on any FindCoordinator).
    """
    if api_key not in (API_ADD_OFFSETS_TO_TXN, API_END_TXN):
        return errors.NONE
    offset = 4 + (1 if is_flexible(api_key, api_version) else 0)  # correlation id, tagged fields
    if len(response_frame) < offset + 6:
        return errors.NONE
    code: int = _I16.unpack_from(response_frame, offset + 4)[0]
    return code


class Coordinators:
    """Finds coordinators upstream and forwards their APIs. One per proxy."""

    def __init__(self, cluster: UpstreamCluster, metadata: MetadataCache, timeout_s: float) -> None:
        self._cluster = cluster
        self._metadata = metadata
        self._timeout_s = timeout_s
        self._known: dict[tuple[int, str], int] = {}  # (key type, key) -> coordinator node id

    async def lookup(self, key_type: int, key: str) -> tuple[int, int, str | None]:
        """(error code, coordinator node id, message), asking upstream; never raises."""
        try:
            version = self._cluster.version_for(API_FIND_COORDINATOR, HIGHEST_FIND_COORDINATOR_VERSION)
        except UpstreamError as exc:
            return errors.COORDINATOR_NOT_AVAILABLE, -1, str(exc)
        if version >= FIRST_BATCHED_FIND_COORDINATOR_VERSION:
            request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        else:
            request = FindCoordinatorRequest(key=key, key_type=key_type)
        try:
            response = await self._metadata.ask_any_broker(request, version)
        except UpstreamError as exc:
            log.warning("FindCoordinator(%d, %r) upstream failed: %s", key_type, key, exc)
            return errors.COORDINATOR_NOT_AVAILABLE, -1, str(exc)
        if version >= FIRST_BATCHED_FIND_COORDINATOR_VERSION:
            found = response.coordinators[0]
            code, node, message = found.error_code, found.node_id, found.error_message
        else:
            code, node, message = response.error_code, response.node_id, getattr(response, "error_message", None)
        if code == errors.NONE:
            self._known[(key_type, key)] = node
            try:
                await self._metadata.ensure_broker(node)  # a broker not heard of yet: learn its address
            except UpstreamError as exc:
                return errors.COORDINATOR_NOT_AVAILABLE, -1, str(exc)
        else:
            self._known.pop((key_type, key), None)
        return code, node, message

    async def find_coordinator(self, request: Any, version: int,
                               endpoint: Callable[[int], Awaitable[tuple[int, str, int]]],
                               refused: Callable[[int, str], int] | None = None) -> FindCoordinatorResponse:
        """The client's answer: for each key, where the client reaches its coordinator -
        `endpoint(upstream node id)` gives (node id, host, port) as the client sees them.
        `refused(key type, key)`: an authorization error for that key (not looked up), or NONE."""
        keys = list(request.coordinator_keys) if version >= FIRST_BATCHED_FIND_COORDINATOR_VERSION else [request.key]
        answers: list[tuple[Any, int, str | None, tuple[int, str, int]]] = []  # key as the library decoded it
        for key in keys:
            denied = refused(request.key_type, key) if refused is not None else errors.NONE
            if denied != errors.NONE:
                answers.append((key, denied, None, (-1, "", -1)))
                continue
            code, node, message = await self.lookup(request.key_type, key)
            where = await endpoint(node) if code == errors.NONE else (-1, "", -1)
            answers.append((key, code, message, where))
        if version >= FIRST_BATCHED_FIND_COORDINATOR_VERSION:
            coordinators = [FindCoordinatorResponse.Coordinator(
                key=key, node_id=where[0], host=where[1], port=where[2], error_code=code, error_message=message)
                for key, code, message, where in answers]
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
        _key, code, message, where = answers[0]
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                       node_id=where[0], host=where[1], port=where[2])

    async def forward(self, frame: RequestFrame, key_type: int, key: str) -> bytes | int:
        """The coordinator's framed answer for the client, or an error code to answer with
        (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the client looks the coordinator up
        again). Never raises."""
        node = self._known.get((key_type, key))
        if node is None:
            code, node, _message = await self.lookup(key_type, key)
            if code != errors.NONE:
                return code
        try:
            conn = await self._cluster.connection(node)
            response = await conn.request(forwarded_frame(frame), frame.api_version, self._timeout_s)
        except UpstreamError as exc:
            log.info("forwarding api_key %d for %r to coordinator %d failed: %s", frame.api_key, key, node, exc)
            self._known.pop((key_type, key), None)
            return errors.COORDINATOR_NOT_AVAILABLE
        if top_level_error(frame.api_key, response, frame.api_version) in _FORGET:
            self._known.pop((key_type, key), None)
        return with_correlation_id(response, frame.correlation_id)

    async def init_producer_id(self, request: Any, version: int) -> Any:
        """A transactional InitProducerId, at the transaction coordinator. Raises UpstreamError;
        the response's error code says NOT_COORDINATOR when it moved (then forgotten)."""
        key = (KEY_TRANSACTION, request.transactional_id)
        node = self._known.get(key)
        if node is None:
            code, node, message = await self.lookup(*key)
            if code != errors.NONE:
                raise UpstreamError(f"no transaction coordinator for {request.transactional_id!r}: {code} {message}")
        conn = await self._cluster.connection(node)
        response = await conn.request(request, version, self._timeout_s)
        if response.error_code in _FORGET:
            self._known.pop(key, None)
        return response


def error_response(api_key: int, request: Any, error_code: int) -> Any:
    """The answer to a forwarded request that could not reach its coordinator: `error_code`
    everywhere the API carries one (pure). Clients retry COORDINATOR_NOT_AVAILABLE after a
    new FindCoordinator."""
    if api_key == API_ADD_OFFSETS_TO_TXN:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error_code)
    if api_key == API_END_TXN:
        return EndTxnResponse(throttle_time_ms=0, error_code=error_code, producer_id=-1, producer_epoch=-1)
    if api_key == API_ADD_PARTITIONS_TO_TXN:
        topic_cls = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        part_cls = topic_cls.AddPartitionsToTxnPartitionResult
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=error_code, results_by_transaction=[],
                                          results_by_topic_v3_and_below=[
            topic_cls(name=t.name, results_by_partition=[part_cls(partition_index=p, partition_error_code=error_code)
                                                         for p in t.partitions])
            for t in request.v3_and_below_topics])
    if api_key == API_TXN_OFFSET_COMMIT:
        topic_cls = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        part_cls = topic_cls.TxnOffsetCommitResponsePartition
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
            topic_cls(name=t.name, partitions=[part_cls(partition_index=p.partition_index, error_code=error_code)
                                               for p in t.partitions])
            for t in request.topics])
    raise ValueError(f"api_key {api_key} is not forwarded to a coordinator")
