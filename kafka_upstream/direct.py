"""Produce handling: validate per partition, hand batches to a backend, assemble the answer.

Strategy: handling is split into a *submit* phase, run in the connection's request order
(so a partition's batches are handed on in the order the client sent them), and a
*completion* phase awaited concurrently. The backend decides where bytes go: the direct
backend below forwards to the upstream leader; the router wraps it to add the WAL path.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from kafka.protocol.producer import ProduceRequest

from core import errors
from core.duplicates import Verdict
from core.produce import (
    AwaitedCompletion,
    PartitionBatches,
    PartitionResult,
    ProduceCompletion,
    ProduceContext,
    TopicPartition,
)
from core.record_batch import InvalidBatch, split_batches
from kafka_protocol.kafka_codec import MIN_ACCEPTED_PRODUCE_VERSION
from kafka_protocol.produce import (
    PartitionAnswer,
    PartitionProduceData,
    ProduceAnswer,
    ProduceRequestData,
    TopicProduceData,
    encode_produce_response,
)
from kafka_upstream.errors import UpstreamError, UpstreamTimeout
from kafka_upstream.metadata import MetadataCache
from kafka_upstream.tail_read import verify_duplicate
from kafka_upstream.upstream import UpstreamCluster, UpstreamConnection

log = logging.getLogger(__name__)

HIGHEST_PRODUCE_VERSION = 12  # v13 addresses topics by id only

@dataclass
class ValidatedProduce:
    ctx: ProduceContext
    items: list[PartitionBatches] = field(default_factory=list)
    rejected: dict[TopicPartition, PartitionResult] = field(default_factory=dict)
    order: list[TopicPartition] = field(default_factory=list)


def validate_produce(request: ProduceRequest, version: int, max_batch_bytes: int, principal: str = "") -> ValidatedProduce:
    """Split a Produce request into valid partition batches and per-partition rejections (pure).
    `principal`: the client's, carried in the context to the audit records."""
    ctx = ProduceContext(request.acks, request.timeout_ms, getattr(request, "transactional_id", None), version,
                         principal)
    out = ValidatedProduce(ctx)
    for topic in request.topic_data:
        for part in topic.partition_data:
            tp = (topic.name, part.index)
            out.order.append(tp)
            if version < MIN_ACCEPTED_PRODUCE_VERSION:
                out.rejected[tp] = PartitionResult(errors.UNSUPPORTED_VERSION,
                                                   error_message="Produce v0-v2 are not supported")
                continue
            if request.acks not in (-1, 0, 1):
                out.rejected[tp] = PartitionResult(errors.INVALID_REQUIRED_ACKS)
                continue
            try:
                batches = split_batches(part.records, max_batch_bytes)
            except InvalidBatch as exc:
                out.rejected[tp] = PartitionResult(exc.error_code, error_message=str(exc))
                continue
            out.items.append(PartitionBatches(topic.name, part.index, tuple(batches)))
    return out


def refuse_partitions(validated: ValidatedProduce, error_code: int, topics: frozenset[str] | None) -> None:
    """Answer `error_code` for every partition of `topics` (None: of the whole request) and
    send none of their batches on. An authorization refusal replaces any other rejection,
    as Kafka checks rights before it looks at the records."""
    validated.items = [i for i in validated.items if topics is not None and i.topic not in topics]
    for tp in validated.order:
        if topics is None or tp[0] in topics:
            validated.rejected[tp] = PartitionResult(error_code)


def produce_answers(order: list[TopicPartition], results: dict[TopicPartition, PartitionResult]) -> list[PartitionAnswer]:
    """The client's answer per partition, in request order (a partition without a result failed)."""
    out = []
    for topic, partition in order:
        r = results.get((topic, partition)) or PartitionResult(errors.UNKNOWN_SERVER_ERROR)
        out.append(PartitionAnswer(topic, partition, r.error_code, r.base_offset, r.log_append_time_ms,
                                   r.log_start_offset, r.error_message))
    return out


def encode_produce_answer(answers: list[PartitionAnswer], correlation_id: int, api_version: int,
                          throttle_time_ms: int = 0) -> bytes:
    """The framed ProduceResponse (v0-v12; the proxy answers v0-v2 only with UNSUPPORTED_VERSION).
    Raises ValueError for a version kafka_protocol.produce does not write."""
    return encode_produce_response(answers, correlation_id, api_version, throttle_time_ms)


class DirectBackend:
    """Forwards raw batches to each partition's upstream leader.

    Kafka accepts one batch per partition per ProduceRequest (v3+): a partition with
    several batches takes several requests, pipelined in order on the leader's connection.
    A DUPLICATE_SEQUENCE_NUMBER answer is checked against the leader's log before it is
    passed on as success (core/duplicates.py says why).
    """

    def __init__(self, cluster: UpstreamCluster, metadata: MetadataCache, timeout_s: float) -> None:
        self._cluster = cluster
        self._metadata = metadata
        self._timeout_s = timeout_s

    async def submit(self, items: list[PartitionBatches], ctx: ProduceContext) -> ProduceCompletion:
        results: dict[TopicPartition, PartitionResult] = {}
        by_node: dict[int, list[PartitionBatches]] = defaultdict(list)
        for item in items:
            tp = (item.topic, item.partition)
            try:
                info, broker, err = await self._metadata.leader(item.topic, item.partition)
            except UpstreamError as exc:
                results[tp] = PartitionResult(errors.NETWORK_EXCEPTION, error_message=str(exc))
                continue
            if err != errors.NONE or info is None:
                results[tp] = PartitionResult(err or errors.UNKNOWN_TOPIC_OR_PARTITION)
            elif info.leader_id < 0 or broker is None:
                results[tp] = PartitionResult(errors.LEADER_NOT_AVAILABLE)
                self._metadata.invalidate(item.topic)  # the retry asks again: an election ends
            else:
                by_node[info.leader_id].append(item)
        pending = []
        for node_id, node_items in by_node.items():
            try:
                conn = await self._cluster.connection(node_id)
                version = self._cluster.version_for(ProduceRequest.API_KEY, HIGHEST_PRODUCE_VERSION)
            except UpstreamError as exc:
                for it in node_items:
                    results[(it.topic, it.partition)] = PartitionResult(errors.NETWORK_EXCEPTION, error_message=str(exc))
                self._leader_failed(node_items)
                continue
            rounds = max(len(it.batches) for it in node_items)
            for r in range(rounds):
                round_items = [it for it in node_items if len(it.batches) > r]
                request = _produce_request(round_items, r, ctx)
                try:
                    handle = await conn.submit(request, version, expect_response=ctx.acks != 0)
                except UpstreamError as exc:
                    for it in round_items:
                        results.setdefault((it.topic, it.partition),
                                           PartitionResult(errors.NETWORK_EXCEPTION, error_message=str(exc)))
                    self._leader_failed(round_items)
                    break
                pending.append((node_id, r, round_items, handle))

        async def complete() -> dict[TopicPartition, PartitionResult]:
            for node_id, r, round_items, handle in pending:
                if handle is None:
                    continue
                try:
                    response = await handle.wait(self._timeout_s)
                except UpstreamError as exc:
                    response = exc
                await self._take_answer(results, node_id, r, round_items, response)
            return results

        return AwaitedCompletion(complete)

    def answered(self, node_id: int, items: list[PartitionBatches],
                 answer: ProduceAnswer | UpstreamError) -> ProduceCompletion:
        """The completion of `items` (one batch each) sent to `node_id` in one request whose
        answer, or failure, is known already (the local route's forward path): the results
        `submit`'s completion would make of it, a duplicate checked against the leader's log."""
        results: dict[TopicPartition, PartitionResult] = {}

        async def complete() -> dict[TopicPartition, PartitionResult]:
            await self._take_answer(results, node_id, 0, items, answer)
            return results

        return AwaitedCompletion(complete)

    async def _take_answer(self, results: dict[TopicPartition, PartitionResult], node_id: int, round_no: int,
                           round_items: list[PartitionBatches], answer: ProduceAnswer | UpstreamError) -> None:
        """Merge one request's answer (or its failure) into `results`."""
        if isinstance(answer, UpstreamError):
            timed_out = isinstance(answer, UpstreamTimeout)
            _fail_round(results, round_items, errors.REQUEST_TIMED_OUT if timed_out else errors.NETWORK_EXCEPTION,
                        str(answer))
            self._leader_failed(round_items)
            return
        duplicates = self._absorb(results, answer, round_no)
        for it in round_items:
            if (it.topic, it.partition) in duplicates:
                await self._check_duplicate(results, node_id, it, round_no)

    @property
    def timeout_s(self) -> float:
        """How long a request waits for the leader's answer."""
        return self._timeout_s

    def open_connection(self, node_id: int) -> UpstreamConnection | None:
        """The open connection to broker `node_id` when there is one (no wait): None also
        when the cluster's metadata names no such broker."""
        return self._cluster.open_connection(node_id) if node_id in self._cluster.brokers else None

    async def connection(self, node_id: int) -> UpstreamConnection:
        """The connection to broker `node_id`. Raises UpstreamError, also when the cluster's
        metadata names no such broker (a connection would go to a bootstrap address)."""
        if node_id not in self._cluster.brokers:
            raise UpstreamError(f"broker {node_id} is not in the cluster's metadata")
        return await self._cluster.connection(node_id)

    def speaks_produce(self, api_version: int) -> bool:
        """Whether the upstream cluster takes Produce requests of `api_version` as they are."""
        lo, hi = self._cluster.api_versions.get(ProduceRequest.API_KEY, (0, -1))
        return lo <= api_version <= min(hi, HIGHEST_PRODUCE_VERSION)

    def _leader_failed(self, items: list[PartitionBatches]) -> None:
        """The leader could not be reached or did not answer: it may have lost leadership
        (failover), so the next batch of these topics asks for metadata again."""
        for topic in {it.topic for it in items}:
            self._metadata.invalidate(topic)

    async def _check_duplicate(self, results: dict[TopicPartition, PartitionResult], node_id: int,
                               item: PartitionBatches, round_no: int) -> None:
        """Replace the leader's DUPLICATE_SEQUENCE_NUMBER for `item`'s batch `round_no` by what its log shows."""
        tp = (item.topic, item.partition)
        batch = item.batches[round_no]
        try:
            conn = await self._cluster.connection(node_id)
        except UpstreamError:
            verdict, offset = Verdict.UNKNOWN, -1
        else:
            verdict, offset = await verify_duplicate(self._cluster, conn, item.topic, item.partition, batch.data,
                                                     self._timeout_s)
        result = duplicate_result(verdict, offset, batch.producer_id, batch.base_sequence)
        if round_no == 0:
            results[tp] = result
        elif result.error_code != errors.NONE and results.get(tp, PartitionResult(0)).error_code == errors.NONE:
            results[tp] = result

    def _absorb(self, results: dict[TopicPartition, PartitionResult], response: ProduceAnswer,
                round_no: int) -> set[TopicPartition]:
        """Take the leader's answers; returns the partitions it answered DUPLICATE_SEQUENCE_NUMBER.

        Leader hints (KIP-951 current_leader, node_endpoints) never get this far: the
        response decoder skips them.
        """
        duplicates: set[TopicPartition] = set()
        for p in response.partitions:
            tp = (p.topic, p.index)
            if p.error_code in (errors.NOT_LEADER_OR_FOLLOWER, errors.UNKNOWN_TOPIC_OR_PARTITION,
                                errors.LEADER_NOT_AVAILABLE):
                self._metadata.invalidate(p.topic)
            if p.error_code == errors.DUPLICATE_SEQUENCE_NUMBER:
                duplicates.add(tp)
                continue
            if round_no == 0:
                results[tp] = PartitionResult(p.error_code, p.base_offset, p.log_append_time_ms,
                                              p.log_start_offset, p.error_message)
            elif p.error_code != errors.NONE and results.get(tp, PartitionResult(0)).error_code == errors.NONE:
                results[tp] = PartitionResult(p.error_code, error_message=p.error_message)
        return duplicates


def duplicate_result(verdict: Verdict, base_offset: int, producer_id: int, base_sequence: int) -> PartitionResult:
    """What the producer hears for a batch the leader called a duplicate (pure).

    Present in the log: success with its real offset. Absent: the leader consumed the
    sequence without the batch, so no retry with that sequence can ever land; answering
    success would lose the records, so the batch fails with UNKNOWN_SERVER_ERROR, which no
    client retries (librdkafka reports the records failed and bumps its epoch). Not
    readable: REQUEST_TIMED_OUT, retried with the same sequence, and checked again.
    """
    if verdict is Verdict.PRESENT:
        return PartitionResult(errors.NONE, base_offset)
    if verdict is Verdict.ABSENT:
        return PartitionResult(errors.UNKNOWN_SERVER_ERROR, error_message=(
            f"the leader answered DUPLICATE_SEQUENCE_NUMBER for producer {producer_id} sequence {base_sequence} "
            "but its log does not have the batch: not written"))
    return PartitionResult(errors.REQUEST_TIMED_OUT, error_message=(
        "the leader answered DUPLICATE_SEQUENCE_NUMBER and its log could not be read to confirm it"))


def _fail_round(results: dict[TopicPartition, PartitionResult], round_items: list[PartitionBatches], code: int,
                message: str) -> None:
    for it in round_items:
        tp = (it.topic, it.partition)
        if tp not in results or results[tp].error_code == errors.NONE:
            results[tp] = PartitionResult(code, error_message=message)


def _produce_request(items: list[PartitionBatches], round_no: int, ctx: ProduceContext) -> ProduceRequestData:
    by_topic: dict[str, list[PartitionProduceData]] = defaultdict(list)
    for it in items:
        by_topic[it.topic].append(PartitionProduceData(it.partition, it.batches[round_no].data))
    return ProduceRequestData(ctx.transactional_id, ctx.acks, ctx.timeout_ms,
                              tuple(TopicProduceData(t, tuple(ps)) for t, ps in by_topic.items()))
