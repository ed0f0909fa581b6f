"""One Produce request forwarded whole to its local leader, from the send to the answer.

Strategy: `RoutingBackend.forward` sends a request whose every partition takes the local
route to one leader as the client's bytes (kafka_upstream/forward.py); the partitions
took their tickets and counted in flight as on the decoding path. The leader's answer is
handled here, in the step the upstream reader delivers it - no task, no await:

- plain (every partition NONE, nothing a client must not see): the answer's bytes go to
  the client, then each partition's ticket and in-flight count are settled as
  ProduceRound settles a success, then metrics and one produce_batch audit record per
  partition, with the same fields the decoding path gives them.
- anything else (a refusal by a moved leader, a duplicate, any error, an answer that does
  not parse, no answer in time, a lost connection): the answer is decoded whole and handed
  to a `ProduceRound` as its one direct part, which settles in a task as it always does -
  sends refused batches again by the new leader's route in the partition's order, checks
  duplicates against the log, notes sequence gaps - and the client gets the results.
  The rare case pays for the machinery; the usual one does not.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from core import errors
from core.produce import PartitionBatches, PartitionResult, ProduceContext, Results
from kafka_protocol._wire import ProtocolError
from kafka_protocol.produce import ProduceAnswer, decode_produce_response
from kafka_protocol.produce_scan import ScannedAnswer, scan_produce_response
from kafka_upstream.direct import DirectBackend
from kafka_upstream.errors import UpstreamError
from kafka_upstream.forward import ForwardedAnswer
from router import audit_fields
from router import metrics as router_metrics
from router.decide import Path, Route
from router.produce_round import ProduceRound, RoundServices
from router.resend_order import Lane

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ForwardedPartition:
    """One partition of a forwarded request: its batch, route and re-send ticket."""

    item: PartitionBatches
    route: Route
    would: Route | None  # in shadow mode, the route the policy would have taken
    ticket: int


class ForwardedRound:
    """The answer of one forwarded request: `on_answer` is the upstream connection's callback."""

    __slots__ = ("_services", "_direct", "_partitions", "_ctx", "_zone", "_leader_id", "_answer", "_started")

    def __init__(self, services: RoundServices, direct: DirectBackend, partitions: list[ForwardedPartition],
                 ctx: ProduceContext, zone: str | None, leader_id: int, answer: ForwardedAnswer,
                 started: float) -> None:
        self._services = services
        self._direct = direct
        self._partitions = partitions
        self._ctx = ctx
        self._zone = zone  # the leader's zone (the proxy's own)
        self._leader_id = leader_id
        self._answer = answer
        self._started = started

    def on_answer(self, answer: bytes | UpstreamError) -> None:
        """The leader's answer frame, or what ended the request. Raises nothing of its own."""
        if isinstance(answer, UpstreamError):
            self._settle_by_round(answer)
            return
        try:
            scanned = scan_produce_response(answer, self._ctx.client_version)
        except ProtocolError as exc:
            self._settle_by_round(UpstreamError(f"cannot decode the answer of broker {self._leader_id}: {exc}"))
            return
        if not scanned.plain or not self._answers_each_partition(scanned):
            self._settle_by_round(answer)
            return
        self._settle_plain(answer, scanned)

    def _answers_each_partition(self, scanned: ScannedAnswer) -> bool:
        if len(scanned.partitions) != len(self._partitions):
            return False
        asked = {(p.item.topic, p.item.partition) for p in self._partitions}
        return all((topic, index) in asked for topic, index, _code, _offset in scanned.partitions)

    def _settle_plain(self, frame: bytes, scanned: ScannedAnswer) -> None:
        """Every partition succeeded: answer, then settle as ProduceRound settles a success,
        then account. The answer goes first: the rest is in this same step, so no other
        request of the partitions can see the book before it is settled, and a producer
        waits for nothing but its answer."""
        finished = time.perf_counter()
        try:
            self._answer.answer_bytes(frame, scanned)
        finally:
            book = self._services.book
            for p in self._partitions:
                book.finished((p.item.topic, p.item.partition), p.ticket, True)
                book.release(p.item, None)  # a success opens no sequence gap
            router_metrics.FORWARDED_BY("bytes").inc()
            offsets = {(topic, index): offset for topic, index, _code, offset in scanned.partitions}
            for p in self._partitions:
                self._account(p, PartitionResult(errors.NONE, offsets[(p.item.topic, p.item.partition)]), finished)

    def _account(self, p: ForwardedPartition, result: PartitionResult, finished: float) -> None:
        """The metrics and produce_batch audit record ProduceRound gives a local batch."""
        services = self._services
        path = p.route.path_name
        size = p.item.size
        router_metrics.BYTES_OUT_BY(path).inc(size)
        router_metrics.PRODUCE_LATENCY_BY(path).observe(finished - self._started)
        record = audit_fields.produce_batch_record(services.proxy_id, p.item, p.route, self._zone, result,
                                                   self._started, finished, None, p.would, self._ctx.principal)
        services.audit.emit("produce_batch", record)

    def _settle_by_round(self, answer: bytes | UpstreamError) -> None:
        """Anything but a plain success: the decoding path's settlement, in a task."""
        router_metrics.FORWARDED_BY("decoded").inc()
        decoded: ProduceAnswer | UpstreamError
        if isinstance(answer, UpstreamError):
            decoded = answer
        else:
            try:
                decoded = decode_produce_response(answer, self._ctx.client_version)
            except (ProtocolError, ValueError) as exc:
                decoded = UpstreamError(f"cannot decode the answer of broker {self._leader_id}: {exc}")
        items = [p.item for p in self._partitions]
        produce_round = ProduceRound(self._services, items, self._started, self._ctx.principal, self._ctx)
        lane: Lane = (Path.LOCAL.value, self._zone or "", self._leader_id)
        for p in self._partitions:
            produce_round.routed(p.item, p.route, self._zone, p.would, p.ticket, lane)
        produce_round.add_direct(self._direct.answered(self._leader_id, items, decoded), items)
        assert self._services.nursery is not None  # the routing backend's, which forwards only with one
        produce_round.settle_in(self._services.nursery)
        produce_round.on_results(self._deliver_results)

    def _deliver_results(self, results: Results) -> None:
        self._answer.answer_results(results)
