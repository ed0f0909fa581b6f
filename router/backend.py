"""The routing produce backend: per partition batch, LOCAL / DIRECT_CROSS via the upstream
leader, or WAL via S3 and the leader zone's agent.

Strategy: `submit` runs in the client connection's request order. For each partition it
asks the pure `decide()` for a path; if the path differs from the one the partition's
earlier batches are still travelling, it first waits for them to drain, so batches reach
the log in the order received whatever path each takes. Direct batches are handed to the
DirectBackend in one go; WAL batches are buffered in the WalWriter before `submit`
returns (so their order in WAL objects is the request order). Each WAL object is
announced to each destination zone's agent by one notification, sent per zone strictly in
object sequence order (the writer releases objects in that order). A zone with several
agents: each agent owns some of the zone's partitions (leader_notify/sender/owners.py) and gets
its own notifications, in object order, in parallel with the zone's other agents; each
agent has its own breaker, so an agent that is down sends only its own partitions to
`router.fallback` (after they drain, as on any path switch).

A WAL batch's result is reached by callbacks, not by a task per batch: the writer calls
back when the batch's object is released, the zone notifier when the agent answered, and
the partition's outcome completes when its last batch has a result. Each task hop on the
way cost a scheduler pass (with everything else runnable at that moment) on the produce
latency path.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import trio

from core import errors
from core.audit import AuditSink, NullAuditSink
from core.produce import PartitionBatches, PartitionResult, ProduceCompletion, ProduceContext, Results, ResultsConsumer
from core.zones import leader_zone
from kafka_upstream.direct import DirectBackend
from kafka_upstream.errors import UpstreamError
from kafka_upstream.metadata import MetadataCache
from leader_notify.sender.notifier import NotifySink, ZoneAnswer, ZoneNotifier
from leader_notify.sender.owners import health_key
from leader_notify.sender.sender import Answer
from router import audit_fields
from router import metrics as router_metrics
from router.config import RouterConfig
from router.decide import ObjectShape, Path, Route, ZoneView, decide, predicted_shape, shadow
from router.rates import ZoneRates
from router.seams import WalSink, ZoneAnswers
from router.zone_health import Signal, ZoneCircuit, allows, at, observe, signal_of_result
from wal_s3.config import WalConfig
from wal_s3.flush_policy import producer_wait_s
from wal_s3.format import WalEntry
from wal_s3.writer import FlushedObject, WalPlacement

log = logging.getLogger(__name__)
SLOW_WAIT_LOG_S = 5.0  # a path switch waiting for the old path, or a held-back retry, logged past this

OBSERVED_WEIGHT = 0.2  # EWMA weight of each new flush in the observed object shape
OBSERVED_FRESH_LINGERS = 4  # flush sizes older than 4 lingers no longer describe the traffic
OBSERVED_FRESH_MIN_S = 1.0
TOPIC_REFUSALS_CACHED = 10_000  # topics whose pilot answer is remembered; beyond that it is worked out per batch
SEQUENCE_GAP_TTL_S = 120.0  # a producer that never retries its failed batch stops being held back after this
LEADER_ERRORS = frozenset({errors.NOT_LEADER_OR_FOLLOWER, errors.LEADER_NOT_AVAILABLE,
                           errors.UNKNOWN_TOPIC_OR_PARTITION})


@dataclass
class PartitionState:
    path: Path | None = None
    in_flight: int = 0
    drained: trio.Event = field(default_factory=trio.Event)
    last_request_at: float | None = None  # trio time this proxy last got a batch of the partition
    # WAL path: (leader's zone, owning agent) of the batches in flight. A new lane drains the
    # old one first, as a path switch does: a partition moves between agents in order.
    lane: tuple[str, int] | None = None


class _WalOutcome:
    """One partition's WAL batches of one request: their results, merged once all are in."""

    def __init__(self, batches: int) -> None:
        self.done = trio.Event()
        self.result: PartitionResult | None = None
        self.buffered_at = 0.0
        self.durable_at = 0.0
        self.notified_at = 0.0
        self.sealed_at = 0.0  # when the object holding the (last) batch was sealed
        self.key = ""  # that object's key
        self.wire_bytes = 0  # its batches' shares of their notification round trips, when the sender said
        self.append_us = -1  # the agent's longest append of its batches, when the answer said (protocol v3)
        self.producer_wait_s = 0.0  # what its records had waited in the producer, counted into the linger
        self._results: list[PartitionResult | None] = [None] * batches
        self._missing = batches
        self._submitted = False
        self._callbacks: list[Callable[[], None]] = []

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call `callback()` once the result is in (at once if it already is)."""
        if self.done.is_set():
            callback()
        else:
            self._callbacks.append(callback)

    def set(self, index: int, result: PartitionResult) -> None:
        """Batch `index` has its result (once); completes the outcome when it was the last."""
        if self._results[index] is not None:
            return
        self._results[index] = result
        self._missing -= 1
        self._complete_if_all_in()

    def submitted(self) -> None:
        """Every batch is buffered (or failed): from now on the last result completes it."""
        self._submitted = True
        self._complete_if_all_in()

    def _complete_if_all_in(self) -> None:
        if self._missing or not self._submitted or self.done.is_set():
            return
        merged: PartitionResult | None = None
        for result in self._results:
            assert result is not None  # none missing
            merged = _merge(merged, result)
        self.result = merged
        self.done.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class WalPath:
    """Buffers WAL-routed batches in the writer and resolves them through the agents."""

    def __init__(self, writer: WalSink, sender: NotifySink, nursery: trio.Nursery,
                 acked_topic: Callable[[str], bool] | None = None) -> None:
        """acked_topic(topic): True for ack_mode=wal topics (their entries are re-driven until applied)."""
        self._writer = writer
        self._sender = sender
        self._nursery = nursery
        self._acked_topic = acked_topic
        self._notifiers: dict[tuple[str, int], ZoneAnswers] = {}  # per (zone, agent)
        self.observed = ObjectShape(0.0, 0.0)
        self.observed_at: float | None = None  # trio time of the last flush seen
        writer.on_released = self._on_released
        self._agents = sender.agents
        writer.share_of = sender.share_of  # lay each zone's share out by owning agent
        # Gray failures (a PUT or notification abandoned at its deadline) are passed on at
        # once as on_gray(breaker key, kind), before the batches they hold fail.
        self.on_gray: Callable[[str, str], None] | None = None
        writer.on_gray_put = self._gray_put
        sender.on_gray = self._gray_notify

    def agent_of(self, zone: str, topic: str, partition: int) -> int:
        """Index of the agent of `zone` that owns topic-partition (0 with one agent)."""
        return self._agents.owner(zone, topic, partition)

    def note_leader(self, zone: str, topic: str, partition: int, leader_id: int) -> None:
        """The partition's leader as just resolved (owners may follow leaders: owners.py)."""
        self._agents.note_leader(zone, topic, partition, leader_id)

    def breaker_key(self, zone: str, topic: str, partition: int) -> str:
        """What health is tracked by: the zone, or `zone/agent address` when it has several."""
        agents = self._agents.agents(zone)
        return health_key(zone, agents, self._agents.owner(zone, topic, partition)) if len(agents) > 1 else zone

    def _gray_put(self, zones: tuple[str, ...]) -> None:
        """S3 hung with entries for `zones`: every agent of each is cut off from them."""
        for zone in zones:
            agents = self._agents.agents(zone)
            for key in sorted({health_key(zone, agents, i) for i in range(len(agents))} or {zone}):
                self._gray(key, "s3_put")

    def _gray_notify(self, zone: str, agent: int) -> None:
        self._gray(health_key(zone, self._agents.agents(zone), agent), "notify")

    def _gray(self, key: str, kind: str) -> None:
        if self.on_gray is not None:
            self.on_gray(key, kind)

    async def drain(self) -> None:
        """Until every durable object has been notified to every zone (acknowledged entries
        re-sent until applied). The proxy awaits this on shutdown, within its grace period."""
        for notifier in list(self._notifiers.values()):
            await notifier.wait_idle()

    def _notifier(self, zone: str, agent: int = 0) -> ZoneAnswers:
        notifier = self._notifiers.get((zone, agent))
        if notifier is None:
            notifier = self._notifiers[(zone, agent)] = ZoneNotifier(zone, self._sender, self._nursery,
                                                                      self._acked_topic, agent)
        return notifier

    def _on_released(self, flushed: FlushedObject) -> None:
        for zone, share in flushed.zones.items():
            if self._agents.count(zone) <= 1:
                self._notifier(zone).announce(flushed)
            else:
                try:
                    runs = self._agents.runs(flushed, zone)
                except ValueError:  # not laid out by owner (cannot happen with share_of set): one notifier
                    log.exception("WAL object %s is not laid out by agent for %s", flushed.key, zone)
                    runs = [(0, 0, len(share.entries))]
                for agent, first, end in runs:
                    self._notifier(zone, agent).announce(flushed, first, end)
            if self.observed_at is None:  # the first flush seeds the average
                self.observed = ObjectShape(float(flushed.bytes), float(share.length))
            else:
                self.observed = ObjectShape(
                    (1 - OBSERVED_WEIGHT) * self.observed.object_bytes + OBSERVED_WEIGHT * flushed.bytes,
                    (1 - OBSERVED_WEIGHT) * self.observed.zone_bytes + OBSERVED_WEIGHT * share.length)
        self.observed_at = trio.current_time()

    def observed_shape(self, now: float, fresh_s: float) -> ObjectShape | None:
        """The average shape of recent flushes, or None if there was no flush for `fresh_s`."""
        if self.observed_at is None or now - self.observed_at > fresh_s:
            return None
        return self.observed

    async def submit(self, item: PartitionBatches, dest_zone: str, ack_mode: str,
                     producer_wait_s: float = 0.0) -> _WalOutcome:
        """Buffer every batch of `item` in order; returns once all are in the writer's buffer
        (without a checkpoint when there is room). The outcome completes by callbacks.
        `producer_wait_s`: what the oldest record had waited in the producer (counted into the
        linger)."""
        outcome = _WalOutcome(len(item.batches))
        outcome.producer_wait_s = producer_wait_s
        for index, batch in enumerate(item.batches):
            entry = WalEntry(item.topic, item.partition, batch.producer_id, batch.producer_epoch,
                             batch.base_sequence, batch.record_count, batch.data)
            try:
                pending = await self._writer.buffer(entry, dest_zone, producer_wait_s)
            except Exception as exc:  # noqa: BLE001 - WalWriteError and friends: the batch fails retriably
                outcome.set(index, PartitionResult(errors.REQUEST_TIMED_OUT, error_message=f"WAL write: {exc}"))
                continue
            pending.add_done_callback(functools.partial(self._durable, outcome, index, dest_zone, ack_mode))
        outcome.buffered_at = time.perf_counter()
        outcome.submitted()
        return outcome

    def _durable(self, outcome: _WalOutcome, index: int, zone: str, ack_mode: str, placement: WalPlacement | None,
                 error: Exception | None) -> None:
        """The writer's callback: the batch's object was released (durable and announced) or failed."""
        if error is not None or placement is None:
            outcome.set(index, PartitionResult(errors.REQUEST_TIMED_OUT, error_message=f"WAL write: {error}"))
            return
        outcome.durable_at = time.perf_counter()
        outcome.sealed_at, outcome.key = placement.flushed.sealed_at, placement.key
        agent = 0
        if self._agents.count(zone) > 1:  # the owner when the entry was written (it may have moved since)
            at = placement.entry_index_in_zone
            try:
                runs = self._agents.runs(placement.flushed, zone)
            except ValueError:  # not laid out by owner: _on_released announced it to agent 0
                runs = []
            agent = next((owner for owner, first, end in runs if first <= at < end), 0)
        notifier = self._notifier(zone, agent)
        first = notifier.first_index(placement.key)
        if ack_mode == "wal":
            # The producer is answered on durability; the append must still happen. A failed
            # first delivery is re-sent by the zone's notifier (ZoneNotifier._redrive).
            outcome.set(index, PartitionResult(errors.NONE, -1))
            notifier.on_result(placement.key, functools.partial(self._late_result, placement, zone, first))
            return
        notifier.on_result(placement.key, functools.partial(self._applied, outcome, index, placement, first))

    def _applied(self, outcome: _WalOutcome, index: int, placement: WalPlacement, first: int,
                 got: ZoneAnswer) -> None:
        outcome.notified_at = time.perf_counter()
        if isinstance(got, Answer):  # the round trip's bytes, shared among its entries
            outcome.wire_bytes += audit_fields.notification_share(got.request_bytes, got.response_bytes, len(got))
        if not isinstance(got, Exception):
            outcome.append_us = max(outcome.append_us, got[placement.entry_index_in_zone - first].append_us)
        outcome.set(index, _entry_result(got, placement.entry_index_in_zone - first))

    def _late_result(self, placement: WalPlacement, zone: str, first: int, got: ZoneAnswer) -> None:
        result = _entry_result(got, placement.entry_index_in_zone - first)
        if result.error_code != errors.NONE:
            log.warning("ack_mode=wal entry of %s for %s: first delivery failed (%s); re-sending",
                        placement.key, zone, result.error_message or result.error_code)


def _entry_result(got: ZoneAnswer, entry_index: int) -> PartitionResult:
    """The partition result of one entry from the agent's answer (or the notification's exception)."""
    if isinstance(got, Exception):
        code = errors.REQUEST_TIMED_OUT if getattr(got, "retriable", True) else errors.UNKNOWN_SERVER_ERROR
        return PartitionResult(code, error_message=f"notify: {got}")
    r = got[entry_index]
    if r.error_code == errors.NONE or r.error_code == errors.DUPLICATE_SEQUENCE_NUMBER or r.duplicate:
        return PartitionResult(errors.NONE, r.base_offset)
    return PartitionResult(r.error_code)


# What one submit keeps per partition (topic, partition) until its results are in.
_Routes = dict[tuple[str, int], tuple[Route, str | None, Route | None]]  # (route, leader's zone, shadow's route)
_HeldBack = dict[tuple[str, int], PartitionResult]  # failed before any path: answered as is
_WalItems = list[tuple[PartitionBatches, str, _WalOutcome]]  # (batches, leader's zone, their outcome)
_DirectCompletions = list[tuple[ProduceCompletion, list[PartitionBatches]]]  # per direct backend


def _merge(first: PartitionResult | None, new: PartitionResult) -> PartitionResult:
    """One result for a partition's batches: the first batch's offset, unless any batch failed."""
    if first is None:
        return new
    if first.error_code == errors.NONE and new.error_code != errors.NONE:
        return PartitionResult(new.error_code, error_message=new.error_message)
    return first


class _RoutedCompletion:
    """The results of one RoutingBackend.submit.

    Awaited (`await completion()`) like any backend's completion, or given a consumer with
    `on_results(fn)`. When every partition took the WAL path (or was held back), fn(results)
    is called synchronously in the step where the last of them completes, i.e. where the
    agent's answer is decoded, so the producer's answer can be written in that same step.
    A submit with a direct part settles in a task of the backend's nursery (`settle_in`),
    which calls fn as soon as the results are in: one task per request, none in the
    producer's connection. Metrics and audit records follow the answer.
    """

    def __init__(self, backend: RoutingBackend, items: list[PartitionBatches], routes: _Routes, held_back: _HeldBack,
                 direct: _DirectCompletions, wal_items: _WalItems, started: float, principal: str = "") -> None:
        self._backend = backend
        self._principal = principal
        self._items, self._routes, self._held_back = items, routes, held_back
        self._direct, self._wal_items = direct, wal_items
        self._started = started
        self._finished_at: dict[tuple[str, int], float] = {}  # per partition: its own path's latency
        self._waiting = 0
        self._consumer: ResultsConsumer | None = None
        self._settled = trio.Event()
        self._results: Results | None = None
        self._error: Exception | None = None
        self._settling = False

    def settle_in(self, nursery: trio.Nursery) -> None:
        """Settle in a task of `nursery` (the backend's), not in whoever awaits the answer: the
        producer's connection may close while a direct batch is in flight, cancelling the task
        that awaits it, and an unsettled partition would keep counting that batch in flight,
        holding its next path switch for good."""
        self._settling = True
        nursery.start_soon(self._settle_all)

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
        for item, _dest, outcome in self._wal_items:
            await outcome.done.wait()
            self._finished_at[(item.topic, item.partition)] = time.perf_counter()
        return self._backend._settle(self._items, self._held_back, self._wal_items, results)  # noqa: SLF001

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
        do). False, registering nothing, if a partition took a direct path and this
        completion does not settle in a task of its own (not `settle_in`): await instead."""
        if self._direct:
            if not self._settling:
                return False
            self._consumer = consumer
            if self._settled.is_set():  # settled before anyone asked: answer now
                consumer(self._results if self._results is not None else self._unknown_outcome())
            return True
        self._consumer = consumer
        self._waiting = len(self._wal_items)
        if not self._waiting:
            self._deliver()
        for item, _dest, outcome in self._wal_items:
            outcome.add_done_callback(functools.partial(self._one_done, (item.topic, item.partition)))
        return True

    def _one_done(self, tp: tuple[str, int]) -> None:
        self._finished_at[tp] = time.perf_counter()
        self._waiting -= 1
        if self._waiting == 0:
            self._deliver()

    def _deliver(self) -> None:
        assert self._consumer is not None
        results = self._backend._settle(self._items, self._held_back, self._wal_items, {})  # noqa: SLF001
        try:
            self._consumer(results)
        finally:
            self._account(results)

    def _account(self, results: dict[tuple[str, int], PartitionResult]) -> None:
        self._backend._account(self._items, self._routes, self._held_back, self._wal_items, results,  # noqa: SLF001
                               self._started, self._finished_at, self._principal)


class RoutingBackend:
    """ProduceBackend that routes each partition batch by zone, policy, cost and health."""

    def __init__(self, zone: str, config: RouterConfig, wal_config: WalConfig, direct: DirectBackend,
                 metadata: MetadataCache, wal_path: WalPath | None, nursery: trio.Nursery,
                 audit: AuditSink | None = None, proxy_id: str = "",
                 direct_by_zone: Mapping[str, DirectBackend] | None = None) -> None:
        self.zone = zone
        self._direct_by_zone = dict(direct_by_zone or {})
        self.config = config
        self._wal_config = wal_config
        self._direct = direct
        self._metadata = metadata
        self._wal = wal_path
        self._nursery = nursery
        self._audit = audit or NullAuditSink()
        self._proxy_id = proxy_id
        self._partitions: dict[tuple[str, int], PartitionState] = defaultdict(PartitionState)
        # Zone circuits by breaker key (the zone, or zone/agent): router/zone_health.py decides,
        # from the signal and whether the zone's brokers are still in metadata.
        self._circuits: dict[str, ZoneCircuit] = {}
        self._rates = ZoneRates()
        # (topic, partition, producer_id, producer_epoch) -> (earliest base_sequence that failed
        # retriably, when). Until that sequence is sent again, later batches of the producer are
        # failed instead of forwarded: forwarded, they would reach the leader after a gap, and
        # librdkafka treats the leader's OUT_OF_ORDER_SEQUENCE_NUMBER as fatal.
        self._sequence_gaps: dict[tuple[str, int, int, int], tuple[int, float]] = {}
        self._gaps_warned: set[tuple[str, int, int, int]] = set()  # gaps logged as lasting
        self.policy: str = config.policy  # as set_policy checks it
        self._topic_refusals: dict[str, str | None] = {}  # config.wal_refusal per topic seen
        self.route_counts: dict[str, int] = defaultdict(int)
        if wal_path is not None:
            wal_path.on_gray = self._gray_failure

    def _gray_failure(self, key: str, kind: str) -> None:
        """A WAL PUT holding entries for the zone, or a notification to its agent, was abandoned
        at its gray deadline: a failure for that breaker (`key`: the zone, or `zone/agent`
        address) now, not after every retry."""
        router_metrics.GRAY_FAILURES.labels(key, kind).inc()
        self.observe_zone(key, Signal.S3_FAILED if kind == "s3_put" else Signal.DEADLINE,
                          f"{kind} abandoned at its gray deadline")

    def observe_zone(self, key: str, signal: Signal, detail: str = "") -> None:
        """One signal about a zone's WAL path (`key`: the zone, or `zone/agent address`): the
        router's own outcomes, and the monitor's agent probes."""
        listed = None if signal is Signal.OK else self._zone_brokers_listed(key.split("/", 1)[0])
        circuit = observe(self._circuits.get(key, ZoneCircuit()), signal, trio.current_time(), listed, detail)
        self._circuits[key] = circuit
        self._publish(key, circuit)

    def _zone_brokers_listed(self, zone: str) -> bool | None:
        """Whether the last Metadata listed a broker of `zone` (None: no broker has a known zone)."""
        zones = {self.config.broker_zones.get(str(node_id)) or broker.rack
                 for node_id, broker in self._metadata.view.brokers.items()}
        zones.discard(None)
        zones.discard("")
        return (zone in zones) if zones else None

    def _circuit_now(self, key: str, now: float) -> ZoneCircuit:
        circuit = self._circuits.get(key)
        if circuit is None:
            return ZoneCircuit()
        current = at(circuit, now)
        if current is not circuit:
            self._circuits[key] = current
            self._publish(key, current)
        return current

    @staticmethod
    def _publish(key: str, circuit: ZoneCircuit) -> None:
        router_metrics.ZONE_OPEN.labels(key).set(1 if circuit.state == "open" else 0)
        cause = circuit.cause.value if circuit.state != "closed" else "healthy"
        for name in router_metrics.ZONE_CAUSES:
            router_metrics.ZONE_CONDITION.labels(key, name).set(1 if name == cause else 0)

    def zone_circuits(self) -> dict[str, str]:
        """Each destination zone's circuit as of now: closed, open or half_open (zones seen so far)."""
        now = trio.current_time()
        return {key: self._circuit_now(key, now).state for key in list(self._circuits)}

    def zone_reasons(self) -> dict[str, str]:
        """Each destination zone's circuit with its cause and what was last seen (for /readyz)."""
        now = trio.current_time()
        return {key: self._circuit_now(key, now).reason() for key in list(self._circuits)}

    def set_policy(self, policy: str) -> None:
        """Switch policy at run time (ordering is kept by the drain-before-switch rule)."""
        if policy not in ("cost", "wal", "direct"):
            raise ValueError(f"unknown policy {policy!r}")
        self.policy = policy

    async def _leader_zone(self, item: PartitionBatches) -> tuple[str | None, bool]:
        """(the leader's zone, whether the topic's metadata was cached)."""
        cached = self._metadata.cached(item.topic)
        info, broker, _err = await self._metadata.leader(item.topic, item.partition)
        zone = leader_zone(item.topic, item.partition, info.leader_id if info else None,
                           broker.rack if broker else None, self.config.partition_zones, self.config.broker_zones)
        if self._wal is not None and zone is not None and info is not None:
            self._wal.note_leader(zone, item.topic, item.partition, info.leader_id)
        return zone, cached

    def _count_submit(self, lookups: list[tuple[PartitionBatches, str | None, bool]],
                      routed: list[tuple[PartitionBatches, Route, Route | None]]) -> None:
        """Metrics and audit records of what submit looked up and decided. Called once the
        batches are handed on: a WAL batch then waits for its object's linger anyway."""
        for item, zone, cached in lookups:
            self._audit.emit("metadata_lookup", {"topic": item.topic, "partition": item.partition,
                                                 "leader_zone": zone or "", "cache": "hit" if cached else "miss"})
            router_metrics.METADATA_LOOKUPS_BY("hit" if cached else "miss").inc()
        for item, route, would in routed:
            router_metrics.BYTES_IN_BY(route.path.value).inc(item.size)
            router_metrics.DECISIONS_BY(route.path.value, route.reason).inc()
            if would is not None:
                router_metrics.SHADOW_DECISIONS_BY(would.path.value, would.reason).inc()
                router_metrics.SHADOW_BYTES_BY(would.path.value).inc(item.size)

    def _gap_key(self, item: PartitionBatches) -> tuple[tuple[str, int, int, int], int] | None:
        first = item.batches[0]
        if first.producer_id < 0:
            return None  # not idempotent: at-least-once, the leader does not check sequences
        return (item.topic, item.partition, first.producer_id, first.producer_epoch), first.base_sequence

    def _behind_a_gap(self, item: PartitionBatches) -> bool:
        """True if an earlier batch of this producer failed and `item` is not its retry."""
        keyed = self._gap_key(item)
        if keyed is None or keyed[0] not in self._sequence_gaps:
            return False
        key, sequence = keyed
        failed_sequence, at = self._sequence_gaps[key]
        age_s = trio.current_time() - at
        if sequence <= failed_sequence or age_s > SEQUENCE_GAP_TTL_S:
            del self._sequence_gaps[key]  # the retry (or an older batch), or a producer that moved on
            self._gaps_warned.discard(key)
            return False
        if age_s > SLOW_WAIT_LOG_S and key not in self._gaps_warned:
            self._gaps_warned.add(key)
            log.warning("%s-%d: producer %d's batch of sequence %d failed %.1f s ago and has not come back; "
                        "its later batches are answered REQUEST_TIMED_OUT until it does (or for %.0f s)",
                        key[0], key[1], key[2], failed_sequence, age_s, SEQUENCE_GAP_TTL_S)
        return True

    def _note_failure(self, item: PartitionBatches, result: PartitionResult | None) -> None:
        keyed = self._gap_key(item)
        if keyed is None or result is None or not errors.is_retriable(result.error_code):
            return
        key, sequence = keyed
        known = self._sequence_gaps.get(key)
        if known is None or sequence < known[0]:
            self._sequence_gaps[key] = (sequence, trio.current_time())

    def _breaker_key(self, dest: str, item: PartitionBatches) -> str:
        """Health is per agent: one of a zone's agents down opens only its partitions' breaker."""
        return dest if self._wal is None else self._wal.breaker_key(dest, item.topic, item.partition)

    def _since_previous_request(self, state: PartitionState) -> float | None:
        """Seconds since this proxy last got a batch of the partition (None: never), and now noted."""
        now = trio.current_time()
        since = None if state.last_request_at is None else now - state.last_request_at
        state.last_request_at = now
        return since

    def _producer_wait_s(self, item: PartitionBatches, since_previous: float | None) -> float:
        if not self._wal_config.linger_counts_producer_wait:
            return 0.0
        return producer_wait_s(time.time() * 1000.0, item.batches[0].first_timestamp, since_previous)

    def _ack_mode(self, topic: str) -> str:
        return self.config.ack_mode(topic)

    def _wal_refusal(self, topic: str) -> str | None:
        refusal: str | None | Literal[False] = self._topic_refusals.get(topic, False)  # False: not seen yet
        if refusal is False:
            refusal = self.config.wal_refusal(topic)
            if len(self._topic_refusals) < TOPIC_REFUSALS_CACHED:
                self._topic_refusals[topic] = refusal
        return refusal

    def _route(self, item: PartitionBatches, dest: str | None, state: PartitionState) -> tuple[Route, Route | None]:
        """(the route the batch takes, in shadow mode the route the policy would have taken)."""
        if not self.config.shadow:
            return self._policy_route(item, dest, state), None
        would = self._policy_route(item, dest, state)
        return shadow(would), would

    def _policy_route(self, item: PartitionBatches, dest: str | None, state: PartitionState) -> Route:
        now = trio.current_time()
        healthy = True
        shape = ObjectShape(0, 0)
        if dest is not None and dest != self.zone:
            # Shadow mode has no WAL path to be unhealthy: it asks what the policy would do.
            healthy = self.config.shadow or (
                self._wal is not None and allows(self._circuit_now(self._breaker_key(dest, item), now)))
            # Observed flush sizes while the WAL is in use; predicted from byte rates otherwise.
            linger_ms = self._wal_config.linger_ms
            assert linger_ms is not None  # WalConfig.__post_init__ resolved an unset one
            fresh_s = max(OBSERVED_FRESH_MIN_S, OBSERVED_FRESH_LINGERS * linger_ms / 1000)
            observed = self._wal.observed_shape(now, fresh_s) if self._wal else None
            shape = observed or predicted_shape(self._rates.rate(dest, now), self._rates.total(now),
                                                linger_ms, self._wal_config.max_bytes)
            self._rates.add(dest, item.size, now)
        transactional = any(b.is_transactional for b in item.batches)
        refusal = self._wal_refusal(item.topic)
        if (not transactional and (self._wal is not None or self.config.shadow) and dest is not None
                and dest != self.zone and refusal is None and self._ack_mode(item.topic) == "wal"):
            # Answered on durability: later batches must never overtake one the zone's
            # notifier is still re-sending, so these topics never leave the WAL path.
            return Route(Path.WAL, "ack_mode wal")
        view = ZoneView(self.zone, dest, healthy, self.config.fallback)
        route = decide(self.policy, view, state.path, shape, self.config.prices, transactional,
                       self._wal_config.storage_class, refusal)
        if route.path is Path.WAL and self._wal is None and not self.config.shadow:
            return Route(Path.DIRECT_CROSS, "no WAL configured")
        return route

    async def submit(self, items: list[PartitionBatches], ctx: ProduceContext) -> ProduceCompletion:
        started = time.perf_counter()
        direct_items: dict[DirectBackend, list[PartitionBatches]] = defaultdict(list)
        wal_items: list[tuple[PartitionBatches, str, _WalOutcome]] = []
        routes: dict[tuple[str, int], tuple[Route, str | None, Route | None]] = {}
        held_back: dict[tuple[str, int], PartitionResult] = {}
        lookups: list[tuple[PartitionBatches, str | None, bool]] = []
        routed: list[tuple[PartitionBatches, Route, Route | None]] = []
        for item in items:
            tp = (item.topic, item.partition)
            try:
                dest, cached = await self._leader_zone(item)
            except UpstreamError as exc:
                # No broker answered Metadata: this partition fails retriably, the connection
                # and the other partitions go on; later batches wait for this one's retry.
                held_back[tp] = PartitionResult(errors.REQUEST_TIMED_OUT, error_message=f"no metadata: {exc}")
                self._note_failure(item, held_back[tp])
                continue
            lookups.append((item, dest, cached))
            state = self._partitions[tp]
            since_previous = self._since_previous_request(state)
            route, would = self._route(item, dest, state)
            lane = None
            if route.path is Path.WAL and self._wal is not None and dest is not None:
                lane = (dest, self._wal.agent_of(dest, item.topic, item.partition))
            if state.in_flight > 0 and state.path is not None and (state.path != route.path or state.lane != lane):
                await self._drain_before_switch(tp, state, route)
            if self._behind_a_gap(item):
                held_back[tp] = PartitionResult(
                    errors.REQUEST_TIMED_OUT,
                    error_message="an earlier batch of this producer failed; it must be retried first")
                continue
            if state.in_flight == 0:
                state.drained = trio.Event()
            state.path, state.lane = route.path, lane
            state.in_flight += 1
            routes[tp] = (route, dest, would)
            self.route_counts[route.path.value] += 1
            routed.append((item, route, would))
            if route.path is Path.WAL:
                assert self._wal is not None and dest is not None
                outcome = await self._wal.submit(item, dest, self._ack_mode(item.topic)
                                                 if not any(b.is_transactional for b in item.batches) else "leader",
                                                 self._producer_wait_s(item, since_previous))
                wal_items.append((item, dest, outcome))
            else:
                target = self._direct
                if route.path is Path.DIRECT_CROSS and dest in self._direct_by_zone:
                    target = self._direct_by_zone[dest]
                direct_items[target].append(item)
        direct_completions = [(await target.submit(group, ctx), group) for target, group in direct_items.items()]
        self._count_submit(lookups, routed)
        completion = _RoutedCompletion(self, items, routes, held_back, direct_completions, wal_items, started,
                                       ctx.principal)
        if direct_completions:  # settled (and answered, with on_results) by a task of the backend
            completion.settle_in(self._nursery)
        return completion

    async def _drain_before_switch(self, tp: tuple[str, int], state: PartitionState, route: Route) -> None:
        """A path or agent switch waits for the old path's batches of the partition to drain
        (else a later batch could overtake an earlier one). Logged when that takes long: the
        client's connection answers in order, so every request behind this one waits too."""
        waited = trio.current_time()
        old_path = state.path
        with trio.move_on_after(SLOW_WAIT_LOG_S):
            await state.drained.wait()
            return
        log.warning("%s-%d: switching from %s to %s waits for %d batch(es) still in flight on the old path",
                    tp[0], tp[1], old_path.value if old_path else "?", route.path.value, state.in_flight)
        await state.drained.wait()
        log.warning("%s-%d: the old path drained after %.1f s", tp[0], tp[1], trio.current_time() - waited)

    def _settle(self, items: list[PartitionBatches], held_back: _HeldBack, wal_items: _WalItems,
                results: dict[tuple[str, int], PartitionResult]) -> dict[tuple[str, int], PartitionResult]:
        """Complete `results` (the direct paths' so far) with the WAL outcomes and held-back
        partitions, and update what routing depends on: circuit breakers, leader zones,
        sequence gaps, in-flight counts. Returns the results as the producer will get them."""
        for item, dest, outcome in wal_items:
            assert outcome.result is not None  # done: merged from its batches' results
            results[(item.topic, item.partition)] = outcome.result
            if outcome.result.error_code in LEADER_ERRORS:
                self._metadata.invalidate(item.topic)  # the leader moved: re-resolve its zone
            key = self._breaker_key(dest, item)
            if outcome.result.error_code in (errors.NONE, errors.DUPLICATE_SEQUENCE_NUMBER):
                self.observe_zone(key, Signal.OK)
            elif errors.is_retriable(outcome.result.error_code):
                # A leader error came from a working agent (the leader moved): the zone's path is
                # fine, so it does not count against it (zone_health: leader_moved is no failure).
                leader_error = outcome.result.error_code in LEADER_ERRORS
                self.observe_zone(key, signal_of_result(outcome.result.error_message, leader_error),
                                  (outcome.result.error_message or "")[:200])
        results.update(held_back)
        for item in items:
            tp = (item.topic, item.partition)
            if tp in held_back:
                continue
            self._note_failure(item, results.get(tp))  # before `drained` lets a switch through
            state = self._partitions[tp]
            state.in_flight -= 1
            if state.in_flight == 0:
                state.drained.set()
            result = results.get(tp) or PartitionResult(errors.UNKNOWN_SERVER_ERROR)
            if result.error_code == errors.NETWORK_EXCEPTION:
                # librdkafka fails records answered NETWORK_EXCEPTION at once (it is not on its
                # produce retry list); REQUEST_TIMED_OUT says the same - the leader may or may not
                # have the batch - and every client retries it, idempotent ones with the same sequence.
                result = replace(result, error_code=errors.REQUEST_TIMED_OUT)
            results[tp] = result
        return results

    def _account(self, items: list[PartitionBatches], routes: _Routes, held_back: _HeldBack, wal_items: _WalItems,
                 results: dict[tuple[str, int], PartitionResult], started: float,
                 finished_at: dict[tuple[str, int], float], principal: str = "") -> None:
        """Metrics and audit records of a finished submit (after the producer's answer when it can be)."""
        finished = time.perf_counter()
        outcomes = {id(item): outcome for item, _dest, outcome in wal_items}
        for item in items:
            tp = (item.topic, item.partition)
            if tp in held_back:
                continue
            route, dest, would = routes[tp]
            result = results[tp]
            if result.error_code == errors.NONE:
                router_metrics.BYTES_OUT_BY(route.path.value).inc(item.size)
                router_metrics.PRODUCE_LATENCY_BY(route.path.value).observe(finished_at.get(tp, finished) - started)
            self._audit_batch(item, route, dest, result, started, finished_at.get(tp, finished),
                              outcomes.get(id(item)), would, principal)

    def _audit_batch(self, item: PartitionBatches, route: Route, dest: str | None, result: PartitionResult,
                     started: float, finished: float, outcome: _WalOutcome | None, would: Route | None = None,
                     principal: str = "") -> None:
        size = item.size
        record = {
            "proxy_id": self._proxy_id, "leader_zone": dest or "", "topic": item.topic,
            "partition": item.partition, "route": route.path.value, "reason": route.reason,
            "bytes": size, "records": item.records,
            "wire_bytes": audit_fields.wire_bytes(route.path.value, size, outcome.wire_bytes if outcome else 0),
            "error_code": result.error_code, "latency_ms": (finished - started) * 1000,
            "queue_ms": -1.0, "s3_put_ms": -1.0, "notify_rtt_ms": -1.0, "leader_append_ms": -1.0,
            "wal_key": "", "linger_wait_ms": -1.0, "producer_wait_ms": -1.0,
            "shadow_route": would.path.value if would is not None else "",
            "shadow_reason": would.reason if would is not None else "",
            "principal": principal,
        }
        if outcome is not None:
            record["wal_key"] = outcome.key
            record["producer_wait_ms"] = outcome.producer_wait_s * 1000
            record.update(audit_fields.wal_timing_fields(started, outcome.buffered_at, outcome.sealed_at,
                                                         outcome.durable_at, outcome.notified_at))
            record["leader_append_ms"] = audit_fields.wal_leader_append_ms(outcome.append_us)
        else:
            record["leader_append_ms"] = (finished - started) * 1000
        self._audit.emit("produce_batch", record)
