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

A partition whose leader moved while its batches were on the way comes back refused
(NOT_LEADER_OR_FOLLOWER, from the old leader or the old zone's agent). The round sends such a
batch again, once, by the new leader's route, in the partition's order
(router/resend_order.py), before it settles: the producer hears the second answer. A round
whose WAL part was refused that way settles in a task of the backend's nursery, as a round
with a direct part does.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, replace
from typing import Protocol

import trio

from core import errors
from core.audit import AuditSink
from core.produce import (
    PartitionBatches,
    PartitionResult,
    ProduceCompletion,
    ProduceContext,
    Results,
    ResultsConsumer,
)
from kafka_upstream.metadata import MetadataCache
from router import audit_fields
from router import metrics as router_metrics
from router.decide import Path, Route
from router.partition_book import PartitionBook
from router.resend_order import Lane, Turn, refused_by_a_moved_leader
from router.wal_path import WalOutcome
from router.zone_circuits import ZoneCircuits
from router.zone_health import Signal, signal_of_result

log = logging.getLogger(__name__)

LEADER_ERRORS = frozenset({errors.NOT_LEADER_OR_FOLLOWER, errors.LEADER_NOT_AVAILABLE,
                           errors.UNKNOWN_TOPIC_OR_PARTITION})


@dataclass(frozen=True)
class Followed:
    """Where a refused batch goes now: its route (reason: the re-send), the leader's zone,
    the lane, and in shadow mode the route the policy would have taken."""

    route: Route
    dest: str | None
    lane: Lane
    would: Route | None


@dataclass(frozen=True)
class Resent:
    """A batch handed on again: the direct backend's completion, or its WAL outcome."""

    completion: ProduceCompletion | None
    outcome: WalOutcome | None


class LeaderFollower(Protocol):
    """The backend's half of a re-send (router/backend.py RoutingBackend)."""

    async def follow(self, item: PartitionBatches, refused: Route, lane: Lane) -> Followed | None:
        """The route to the partition's leader as looked up afresh; None if no lookup names
        another lane than the one that refused it (nothing new to try). Raises nothing."""
        ...

    async def hand_on(self, item: PartitionBatches, ctx: ProduceContext, followed: Followed) -> Resent:
        """Send `item`'s batches, unchanged, by `followed`: once this returns they are in
        their lane's order (queued on the leader's connection, or in the WAL buffer)."""
        ...


@dataclass(frozen=True)
class RoundServices:
    """What every round of one backend settles and accounts against."""

    book: PartitionBook
    circuits: ZoneCircuits
    metadata: MetadataCache
    audit: AuditSink
    proxy_id: str
    follower: LeaderFollower | None = None  # None: refusals of a moved leader go to the producer
    nursery: trio.Nursery | None = None  # where a callback-answered round re-sends


@dataclass(frozen=True)
class _Routed:
    route: Route
    dest: str | None  # the leader's zone
    would: Route | None  # in shadow mode, the route the policy would have taken
    ticket: int = -1  # the batch's re-send ticket in its partition (PartitionBook.take)
    lane: Lane = ("", "", -1)
    refused_wire_bytes: int = 0  # what a refused first attempt put across zones (after a re-send)


class ProduceRound:
    """The results of one RoutingBackend.submit (a core.produce.ProduceCompletion)."""

    def __init__(self, services: RoundServices, items: list[PartitionBatches], started: float,
                 principal: str = "", ctx: ProduceContext | None = None) -> None:
        self._services = services
        self._items = items
        self._started = started
        self._principal = principal
        self._ctx = ctx
        self._refused: list[PartitionBatches] = []  # refused by a moved leader, in request order
        self._resent_wal: list[tuple[PartitionBatches, str, WalOutcome]] = []  # sent again by the WAL
        self._resent_results: dict[tuple[str, int], PartitionResult] = {}  # sent again by a direct route
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

    def routed(self, item: PartitionBatches, route: Route, dest: str | None, would: Route | None,
               ticket: int = -1, lane: Lane = ("", "", -1)) -> None:
        self._routes[(item.topic, item.partition)] = _Routed(route, dest, would, ticket, lane)

    def add_wal(self, item: PartitionBatches, dest: str, outcome: WalOutcome) -> None:
        self._wal.append((item, dest, outcome))
        # By callback, whoever awaits the answer: later batches of the partition wait for it.
        outcome.add_done_callback(functools.partial(self._wal_answered, item, outcome))

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
        try:
            for direct_completion, group in self._direct:
                results.update(await direct_completion())
                now = time.perf_counter()
                self._finished_at.update({(it.topic, it.partition): now for it in group})
                for it in group:
                    self._answered(it, results.get((it.topic, it.partition)), None)
            for item, _dest, outcome in self._wal:
                await outcome.done.wait()
                self._finished_at[(item.topic, item.partition)] = time.perf_counter()
            await self._resend_refused()
        except BaseException:
            self._abandon_tickets()  # later batches of these partitions must not wait for them
            raise
        return self._settle(results)

    # ---- re-sends after a leader moved ------------------------------------------------------

    def _wal_answered(self, item: PartitionBatches, outcome: WalOutcome) -> None:
        self._answered(item, outcome.result, outcome)

    def _answered(self, item: PartitionBatches, result: PartitionResult | None, outcome: WalOutcome | None) -> None:
        """The first answer of the partition's batches: refused by a moved leader (to be sent
        again at its turn) or final."""
        tp = (item.topic, item.partition)
        routed = self._routes[tp]
        book = self._services.book
        if (result is not None and self._services.follower is not None and self._ctx is not None
                and refused_by_a_moved_leader(result, len(item.batches),
                                              outcome.batch_codes() if outcome is not None else None)):
            book.refused(tp, routed.ticket)
            self._refused.append(item)
            return
        book.finished(tp, routed.ticket, result is not None and result.error_code == errors.NONE)

    async def _resend_refused(self) -> None:
        """Each refused partition's batches sent again at its turn. Partitions apart: one
        partition waiting for its earlier batches (in other requests) holds up no other."""
        refused, self._refused = self._refused, []
        if len(refused) == 1:
            await self._resend(refused[0])
            return
        async with trio.open_nursery() as nursery:
            for item in refused:
                nursery.start_soon(self._resend, item)

    async def _resend(self, item: PartitionBatches) -> None:
        services, tp = self._services, (item.topic, item.partition)
        assert services.follower is not None and self._ctx is not None  # else nothing was refused
        routed = self._routes[tp]
        ok = False
        try:
            if await services.book.resend_turn(tp, routed.ticket) is not Turn.GO:
                return
            followed = await services.follower.follow(item, routed.route, routed.lane)
            if followed is None:
                return
            await services.book.clear_for(tp, routed.ticket, followed.lane)
            first_outcome = next((o for it, _d, o in self._wal if it is item), None)
            refused_wire = audit_fields.wire_bytes(routed.route.path_name, item.size,
                                                   first_outcome.wire_bytes if first_outcome else 0)
            resent = await services.follower.hand_on(item, self._ctx, followed)
            services.book.resent(tp, routed.ticket, followed.lane)
            self._routes[tp] = _Routed(followed.route, followed.dest, followed.would, routed.ticket, followed.lane,
                                       refused_wire)
            router_metrics.RESENDS_BY(followed.route.path_name,
                                      "agent" if routed.route.path is Path.WAL else "leader").inc()
            if resent.outcome is not None:
                assert followed.dest is not None
                self._resent_wal.append((item, followed.dest, resent.outcome))
                await resent.outcome.done.wait()
                result = resent.outcome.result
            else:
                assert resent.completion is not None
                result = (await resent.completion()).get(tp) or PartitionResult(errors.UNKNOWN_SERVER_ERROR)
                self._resent_results[tp] = result
            self._finished_at[tp] = time.perf_counter()
            ok = result is not None and result.error_code == errors.NONE
        finally:
            services.book.finished(tp, routed.ticket, ok)

    def _abandon_tickets(self) -> None:
        for tp, routed in self._routes.items():
            self._services.book.finished(tp, routed.ticket, False)

    def _one_done(self, tp: tuple[str, int]) -> None:
        self._finished_at[tp] = time.perf_counter()
        self._waiting -= 1
        if self._waiting == 0:
            if self._refused and self._services.nursery is not None:
                self._services.nursery.start_soon(self._resend_then_deliver)
                return
            for item in self._refused:  # nowhere to send them again from: passed on as refused
                tp = (item.topic, item.partition)
                self._services.book.finished(tp, self._routes[tp].ticket, False)
            self._deliver()

    async def _resend_then_deliver(self) -> None:
        await self._resend_refused()
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
        for item, dest, outcome in (*self._wal, *self._resent_wal):  # a re-send's result replaces the first
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
        results.update(self._resent_results)
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
        outcomes: dict[int, WalOutcome | None] = {id(item): outcome for item, _dest, outcome in self._wal}
        outcomes.update({id(item): outcome for item, _dest, outcome in self._resent_wal})
        outcomes.update({id(item): None for item in self._items if (item.topic, item.partition) in self._resent_results})
        services = self._services
        for item in self._items:
            tp = (item.topic, item.partition)
            if tp in self._held_back:
                continue
            routed = self._routes[tp]
            result = results[tp]
            done = self._finished_at.get(tp, finished)
            if result.error_code == errors.NONE:
                router_metrics.BYTES_OUT_BY(routed.route.path_name).inc(item.size)
                router_metrics.PRODUCE_LATENCY_BY(routed.route.path_name).observe(done - self._started)
            record = audit_fields.produce_batch_record(
                services.proxy_id, item, routed.route, routed.dest, result, self._started, done,
                outcomes.get(id(item)), routed.would, self._principal)
            record["wire_bytes"] += routed.refused_wire_bytes  # a refused first attempt crossed too
            services.audit.emit("produce_batch", record)
