"""One Produce request's round through the router, from the routes chosen to the answer.

`RoutingBackend.submit` chooses each partition's route and hands its batches on (to a
direct backend, or into the WAL writer); it records each in a `ProduceRound`, which then
owns the rest: gathering each partition's result (the direct paths' completions, the WAL
outcomes), settling what routing depends on (circuits, leader zones, sequence gaps,
in-flight counts), giving the producer its answer, and accounting (metrics and one
produce_batch audit record per partition batch, after the answer when it can be).

Awaited (`await round()`) like any backend's completion, or given a consumer with
`on_results(fn)`. When every partition took the WAL path (or was held back), fn(results)
is called synchronously in the step where the last of them completes, i.e. where the
agent's answer is decoded, so the producer's answer can be written in that same step. A
round with a direct part settles in a task of the backend's nursery (`settle_in`), which
calls fn as soon as the results are in: one task per request, none in the producer's
connection (that connection may close while a batch is in flight, cancelling whatever
awaits in it, and an unsettled partition would keep counting the batch in flight, holding
its next path switch for good).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, replace

import trio

from core import errors
from core.audit import AuditSink
from core.produce import PartitionBatches, PartitionResult, ProduceCompletion, Results, ResultsConsumer
from kafka_upstream.metadata import MetadataCache
from router import audit_fields
from router import metrics as router_metrics
from router.decide import Route
from router.partition_book import PartitionBook
from router.wal_path import WalOutcome
from router.zone_circuits import ZoneCircuits
from router.zone_health import Signal, signal_of_result

log = logging.getLogger(__name__)

LEADER_ERRORS = frozenset({errors.NOT_LEADER_OR_FOLLOWER, errors.LEADER_NOT_AVAILABLE,
                           errors.UNKNOWN_TOPIC_OR_PARTITION})


@dataclass(frozen=True)
class RoundServices:
    """What every round of one backend settles and accounts against."""

    book: PartitionBook
    circuits: ZoneCircuits
    metadata: MetadataCache
    audit: AuditSink
    proxy_id: str


@dataclass(frozen=True)
class _Routed:
    route: Route
    dest: str | None  # the leader's zone
    would: Route | None  # in shadow mode, the route the policy would have taken


class ProduceRound:
    """The results of one RoutingBackend.submit (a core.produce.ProduceCompletion)."""

    def __init__(self, services: RoundServices, items: list[PartitionBatches], started: float,
                 principal: str = "") -> None:
        self._services = services
        self._items = items
        self._started = started
        self._principal = principal
        self._routes: dict[tuple[str, int], _Routed] = {}
        self._held_back: dict[tuple[str, int], PartitionResult] = {}  # failed before any path: answered as is
        self._direct: list[tuple[ProduceCompletion, list[PartitionBatches]]] = []  # per direct backend
        self._wal: list[tuple[PartitionBatches, str, WalOutcome]] = []  # (batches, leader's zone, their outcome)
        self._finished_at: dict[tuple[str, int], float] = {}  # per partition: its own path's latency
        self._waiting = 0
        self._consumer: ResultsConsumer | None = None
        self._settled = trio.Event()
        self._results: Results | None = None
        self._error: Exception | None = None
        self._settling = False

    # ---- filled in by RoutingBackend.submit, in request order -----------------------------

    def hold_back(self, tp: tuple[str, int], result: PartitionResult) -> None:
        """The partition fails before any path (no metadata, a sequence gap): answered as is."""
        self._held_back[tp] = result

    def routed(self, item: PartitionBatches, route: Route, dest: str | None, would: Route | None) -> None:
        self._routes[(item.topic, item.partition)] = _Routed(route, dest, would)

    def add_wal(self, item: PartitionBatches, dest: str, outcome: WalOutcome) -> None:
        self._wal.append((item, dest, outcome))

    def add_direct(self, completion: ProduceCompletion, group: list[PartitionBatches]) -> None:
        self._direct.append((completion, group))

    @property
    def has_direct(self) -> bool:
        return bool(self._direct)

    # ---- the answer -------------------------------------------------------------------------

    def settle_in(self, nursery: trio.Nursery) -> None:
        """Settle in a task of `nursery` (the backend's), not in whoever awaits the answer."""
        self._settling = True
        nursery.start_soon(self._settle_all)

    async def __call__(self) -> Results:
        if not self._settling:
            results = await self._gather()
            self._account(results)
            return results
        await self._settled.wait()
        if self._error is not None:
            raise self._error
        assert self._results is not None
        return self._results

    def on_results(self, consumer: ResultsConsumer) -> bool:
        """Have consumer(results) called once every partition has its result (at once if all
        do). False, registering nothing, if a partition took a direct path and this round
        does not settle in a task of its own (not `settle_in`): await instead."""
        if self._direct:
            if not self._settling:
                return False
            self._consumer = consumer
            if self._settled.is_set():  # settled before anyone asked: answer now
                consumer(self._results if self._results is not None else self._unknown_outcome())
            return True
        self._consumer = consumer
        self._waiting = len(self._wal)
        if not self._waiting:
            self._deliver()
        for item, _dest, outcome in self._wal:
            outcome.add_done_callback(functools.partial(self._one_done, (item.topic, item.partition)))
        return True

    async def _settle_all(self) -> None:
        results: Results | None = None
        try:
            results = await self._gather()
        except Exception as exc:  # noqa: BLE001 - our bug: handed to whoever awaits the answer
            self._error = exc
            if self._consumer is not None:
                log.exception("internal error settling a produce request; its partitions are answered "
                              "REQUEST_TIMED_OUT (their outcome is unknown: idempotent producers retry safely)")
        self._results = results
        self._settled.set()
        if self._consumer is not None:
            self._consumer(results if results is not None else self._unknown_outcome())
        if results is not None:
            self._account(results)

    def _unknown_outcome(self) -> Results:
        return {(it.topic, it.partition): PartitionResult(errors.REQUEST_TIMED_OUT,
                                                          error_message="internal error in the sidecar")
                for it in self._items}

    async def _gather(self) -> Results:
        """Every partition's result, once all are in; routing state settled (not accounted)."""
        results: dict[tuple[str, int], PartitionResult] = {}
        for direct_completion, group in self._direct:
            results.update(await direct_completion())
            now = time.perf_counter()
            self._finished_at.update({(it.topic, it.partition): now for it in group})
        for item, _dest, outcome in self._wal:
            await outcome.done.wait()
            self._finished_at[(item.topic, item.partition)] = time.perf_counter()
        return self._settle(results)

    def _one_done(self, tp: tuple[str, int]) -> None:
        self._finished_at[tp] = time.perf_counter()
        self._waiting -= 1
        if self._waiting == 0:
            self._deliver()

    def _deliver(self) -> None:
        assert self._consumer is not None
        results = self._settle({})
        try:
            self._consumer(results)
        finally:
            self._account(results)

    # ---- settlement: what routing depends on --------------------------------------------------

    def _settle(self, results: dict[tuple[str, int], PartitionResult]) -> dict[tuple[str, int], PartitionResult]:
        """Complete `results` (the direct paths' so far) with the WAL outcomes and held-back
        partitions, and update what routing depends on: circuit breakers, leader zones,
        sequence gaps, in-flight counts. Returns the results as the producer will get them."""
        services = self._services
        for item, dest, outcome in self._wal:
            assert outcome.result is not None  # done: merged from its batches' results
            results[(item.topic, item.partition)] = outcome.result
            if outcome.result.error_code in LEADER_ERRORS:
                services.metadata.invalidate(item.topic)  # the leader moved: re-resolve its zone
            key = services.circuits.key(dest, item.topic, item.partition)
            if outcome.result.error_code in (errors.NONE, errors.DUPLICATE_SEQUENCE_NUMBER):
                services.circuits.observe(key, Signal.OK)
            elif errors.is_retriable(outcome.result.error_code):
                # A leader error came from a working agent (the leader moved): the zone's path is
                # fine, so it does not count against it (zone_health: leader_moved is no failure).
                leader_error = outcome.result.error_code in LEADER_ERRORS
                services.circuits.observe(key, signal_of_result(outcome.result.error_message, leader_error),
                                          (outcome.result.error_message or "")[:200])
        results.update(self._held_back)
        for item in self._items:
            tp = (item.topic, item.partition)
            if tp in self._held_back:
                continue
            services.book.release(item, results.get(tp))  # its gap noted before `drained` lets a switch through
            result = results.get(tp) or PartitionResult(errors.UNKNOWN_SERVER_ERROR)
            if result.error_code == errors.NETWORK_EXCEPTION:
                # librdkafka fails records answered NETWORK_EXCEPTION at once (it is not on its
                # produce retry list); REQUEST_TIMED_OUT says the same - the leader may or may not
                # have the batch - and every client retries it, idempotent ones with the same sequence.
                result = replace(result, error_code=errors.REQUEST_TIMED_OUT)
            results[tp] = result
        return results

    # ---- accounting -------------------------------------------------------------------------

    def _account(self, results: dict[tuple[str, int], PartitionResult]) -> None:
        """Metrics and audit records of the finished round (after the producer's answer when it can be)."""
        finished = time.perf_counter()
        outcomes = {id(item): outcome for item, _dest, outcome in self._wal}
        services = self._services
        for item in self._items:
            tp = (item.topic, item.partition)
            if tp in self._held_back:
                continue
            routed = self._routes[tp]
            result = results[tp]
            done = self._finished_at.get(tp, finished)
            if result.error_code == errors.NONE:
                router_metrics.BYTES_OUT_BY(routed.route.path.value).inc(item.size)
                router_metrics.PRODUCE_LATENCY_BY(routed.route.path.value).observe(done - self._started)
            services.audit.emit("produce_batch", audit_fields.produce_batch_record(
                services.proxy_id, item, routed.route, routed.dest, result, self._started, done,
                outcomes.get(id(item)), routed.would, self._principal))
