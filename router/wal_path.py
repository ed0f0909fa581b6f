"""The WAL route of a produce: batches buffered in the WAL writer, each released object
announced to the agents of its zones, each batch's result read from its agent's answer.

Two parts, wired in the composition root (azsidecar/sidecar.py):
- `ObjectAnnouncer` is the writer's `on_released` hook: each released object goes, per
  destination zone and owning agent, to that agent's notifier (in object order), and its
  shape feeds the router's cost model.
- `WalPath.submit` buffers one partition's batches and returns a `WalOutcome` that the
  writer's and the notifier's callbacks complete.

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
from collections.abc import Callable

import trio

from core import errors
from core.produce import PartitionBatches, PartitionResult
from leader_notify.sender.notifier import NotifySink, ZoneAnswer, ZoneNotifier
from leader_notify.sender.owners import AgentMap
from leader_notify.sender.sender import Answer
from router import audit_fields
from router.decide import ObjectShape
from router.seams import WalSink, ZoneAnswers
from wal_s3.format import WalEntry
from wal_s3.wal_object import FlushedObject, WalPlacement

log = logging.getLogger(__name__)

OBSERVED_WEIGHT = 0.2  # EWMA weight of each new flush in the observed object shape


class WalOutcome:
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

    def batch_codes(self) -> list[int]:
        """Each batch's error code, in order (-1: no result yet)."""
        return [-1 if result is None else result.error_code for result in self._results]

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
            merged = merge(merged, result)
        self.result = merged
        self.done.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


def merge(first: PartitionResult | None, new: PartitionResult) -> PartitionResult:
    """One result for a partition's batches: the first batch's offset, unless any batch failed."""
    if first is None:
        return new
    if first.error_code == errors.NONE and new.error_code != errors.NONE:
        return PartitionResult(new.error_code, error_message=new.error_message)
    return first


def entry_result(got: ZoneAnswer, entry_index: int) -> PartitionResult:
    """The partition result of one entry from the agent's answer (or the notification's exception)."""
    if isinstance(got, Exception):
        code = errors.REQUEST_TIMED_OUT if errors.exception_is_retriable(got) else errors.UNKNOWN_SERVER_ERROR
        return PartitionResult(code, error_message=f"notify: {got}")
    r = got[entry_index]
    if r.error_code == errors.NONE or r.error_code == errors.DUPLICATE_SEQUENCE_NUMBER or r.duplicate:
        return PartitionResult(errors.NONE, r.base_offset)
    return PartitionResult(r.error_code)


class ObjectAnnouncer:
    """The WAL writer's `on_released` hook: each released object to its agents' notifiers."""

    def __init__(self, sender: NotifySink, nursery: trio.Nursery,
                 acked_topic: Callable[[str], bool] | None = None) -> None:
        """acked_topic(topic): True for ack_mode=wal topics (their entries are re-driven until applied)."""
        self._sender = sender
        self._agents = sender.agents
        self._nursery = nursery
        self._acked_topic = acked_topic
        self._notifiers: dict[tuple[str, int], ZoneAnswers] = {}  # per (zone, agent)
        self.observed = ObjectShape(0.0, 0.0)
        self.observed_at: float | None = None  # trio time of the last flush seen

    def notifier(self, zone: str, agent: int = 0) -> ZoneAnswers:
        notifier = self._notifiers.get((zone, agent))
        if notifier is None:
            notifier = self._notifiers[(zone, agent)] = ZoneNotifier(zone, self._sender, self._nursery,
                                                                      self._acked_topic, agent)
        return notifier

    def announce(self, flushed: FlushedObject) -> None:
        """Called synchronously by the writer with each durable object, in sequence order."""
        for zone, share in flushed.zones.items():
            if self._agents.count(zone) <= 1:
                self.notifier(zone).announce(flushed)
            else:
                try:
                    runs = self._agents.runs(flushed, zone)
                except ValueError:  # not laid out by owner (cannot happen with share_of wired): one notifier
                    log.exception("WAL object %s is not laid out by agent for %s", flushed.key, zone)
                    runs = [(0, 0, len(share.entries))]
                for agent, first, end in runs:
                    self.notifier(zone, agent).announce(flushed, first, end)
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

    async def drain(self) -> None:
        """Until every durable object has been notified to every zone (acknowledged entries
        re-sent until applied). The proxy awaits this on shutdown, within its grace period."""
        for notifier in list(self._notifiers.values()):
            await notifier.wait_idle()


class WalPath:
    """Buffers WAL-routed batches in the writer and resolves them through the agents."""

    def __init__(self, writer: WalSink, announcer: ObjectAnnouncer, agents: AgentMap) -> None:
        self._writer = writer
        self.announcer = announcer
        self._agents = agents

    def agent_of(self, zone: str, topic: str, partition: int) -> int:
        """Index of the agent of `zone` that owns topic-partition (0 with one agent)."""
        return self._agents.owner(zone, topic, partition)

    def note_leader(self, zone: str, topic: str, partition: int, leader_id: int) -> None:
        """The partition's leader as just resolved (owners may follow leaders: owners.py)."""
        self._agents.note_leader(zone, topic, partition, leader_id)

    def observed_shape(self, now: float, fresh_s: float) -> ObjectShape | None:
        return self.announcer.observed_shape(now, fresh_s)

    async def drain(self) -> None:
        await self.announcer.drain()

    async def submit(self, item: PartitionBatches, dest_zone: str, ack_mode: str,
                     producer_wait_s: float = 0.0) -> WalOutcome:
        """Buffer every batch of `item` in order; returns once all are in the writer's buffer
        (without a checkpoint when there is room). The outcome completes by callbacks.
        `producer_wait_s`: what the oldest record had waited in the producer (counted into the
        linger)."""
        outcome = WalOutcome(len(item.batches))
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

    def _durable(self, outcome: WalOutcome, index: int, zone: str, ack_mode: str, placement: WalPlacement | None,
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
            except ValueError:  # not laid out by owner: the announcer announced it to agent 0
                runs = []
            agent = next((owner for owner, first, end in runs if first <= at < end), 0)
        notifier = self.announcer.notifier(zone, agent)
        first = notifier.first_index(placement.key)
        if ack_mode == "wal":
            # The producer is answered on durability; the append must still happen. A failed
            # first delivery is re-sent by the zone's notifier (ZoneNotifier._redrive).
            outcome.set(index, PartitionResult(errors.NONE, -1))
            notifier.on_result(placement.key, functools.partial(self._late_result, placement, zone, first))
            return
        notifier.on_result(placement.key, functools.partial(self._applied, outcome, index, placement, first))

    def _applied(self, outcome: WalOutcome, index: int, placement: WalPlacement, first: int,
                 got: ZoneAnswer) -> None:
        outcome.notified_at = time.perf_counter()
        if isinstance(got, Answer):  # the round trip's bytes, shared among its entries
            outcome.wire_bytes += audit_fields.notification_share(got.request_bytes, got.response_bytes, len(got))
        if not isinstance(got, Exception):
            outcome.append_us = max(outcome.append_us, got[placement.entry_index_in_zone - first].append_us)
        outcome.set(index, entry_result(got, placement.entry_index_in_zone - first))

    def _late_result(self, placement: WalPlacement, zone: str, first: int, got: ZoneAnswer) -> None:
        result = entry_result(got, placement.entry_index_in_zone - first)
        if result.error_code != errors.NONE:
            log.warning("ack_mode=wal entry of %s for %s: first delivery failed (%s); re-sending",
                        placement.key, zone, result.error_message or result.error_code)
