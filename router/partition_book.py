"""What the router keeps per partition between requests: the path its batches in flight
took (a switch waits for them to drain, so batches reach the log in the order received),
when it last saw a batch, and which idempotent producers must retry a failed batch first.

Re-sends after a leader moved: each batch handed on takes a ticket of its partition's
`ResendOrder` (router/resend_order.py); a batch refused by a leader that moved waits here
for its turn to be sent again, so the new leader gets the partition's batches in order.

Sequence gaps: a producer's batch that failed retriably must reach the leader before any of
its later batches, or the leader answers OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka
treats as fatal. Until that sequence is sent again, later batches of the producer are
failed instead of forwarded.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

import trio

from core import errors
from core.produce import PartitionBatches, PartitionResult
from router.decide import Path
from router.resend_order import Lane, ResendOrder, Turn

log = logging.getLogger(__name__)

SLOW_WAIT_LOG_S = 5.0  # a path switch waiting for the old path, or a held-back retry, logged past this
SEQUENCE_GAP_TTL_S = 120.0  # a producer that never retries its failed batch stops being held back after this


@dataclass
class PartitionState:
    path: Path | None = None
    in_flight: int = 0
    drained: trio.Event = field(default_factory=trio.Event)
    last_request_at: float | None = None  # trio time this proxy last got a batch of the partition
    # (leader's zone, owning agent) of the batches in flight on the WAL path, (leader's zone,
    # leader) on the direct routes. A new lane drains the old one first, as a path switch does:
    # a partition moves between agents, and to a new leader, in order.
    lane: tuple[str, int] | None = None
    resends: ResendOrder = field(default_factory=ResendOrder)
    resends_changed: trio.Event = field(default_factory=trio.Event)  # set and replaced on every change


GapKey = tuple[str, int, int, int]  # (topic, partition, producer_id, producer_epoch)


class PartitionBook:
    """Per-partition routing state and the producers' sequence gaps."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], PartitionState] = defaultdict(PartitionState)
        # gap key -> (earliest base_sequence that failed retriably, when)
        self._sequence_gaps: dict[GapKey, tuple[int, float]] = {}
        self._gaps_warned: set[GapKey] = set()  # gaps logged as lasting

    def state(self, tp: tuple[str, int]) -> PartitionState:
        return self._partitions[tp]

    def since_previous_request(self, state: PartitionState, now: float | None = None) -> float | None:
        """Seconds since this proxy last got a batch of the partition (None: never), and now
        noted; `now`: the trio time, when the caller has it already."""
        if now is None:
            now = trio.current_time()
        since = None if state.last_request_at is None else now - state.last_request_at
        state.last_request_at = now
        return since

    def take(self, tp: tuple[str, int], path: Path, lane: tuple[str, int] | None) -> int:
        """A batch of the partition leaves by `path` (its drain-before-switch wait is done);
        returns its re-send ticket. A batch sent again later stays counted in flight (on
        the path it was taken on) until released: a switch waits for the re-send too."""
        state = self._partitions[tp]
        if state.in_flight == 0:
            state.drained = trio.Event()
        state.path, state.lane = path, lane
        state.in_flight += 1
        return state.resends.issue()

    # ---- re-sends after a leader moved (router/resend_order.py) -------------------------------

    def refused(self, tp: tuple[str, int], ticket: int) -> None:
        """The batch's leader moved: it will be sent again at its turn."""
        state = self._partitions[tp]
        state.resends.refused(ticket)
        self._resends_changed(state)

    def resent(self, tp: tuple[str, int], ticket: int, lane: Lane) -> None:
        state = self._partitions[tp]
        state.resends.resent(ticket, lane)
        self._resends_changed(state)

    def finished(self, tp: tuple[str, int], ticket: int, ok: bool) -> None:
        """The batch has its final result (repeats are ignored)."""
        state = self._partitions[tp]
        state.resends.finished(ticket, ok)
        self._resends_changed(state)

    async def resend_turn(self, tp: tuple[str, int], ticket: int) -> Turn:
        """GO or GIVE_UP, once every earlier batch of the partition has its result or was sent again."""
        state = self._partitions[tp]
        waited = trio.current_time()
        warned = False
        while (turn := state.resends.turn(ticket)) is Turn.WAIT:
            if not warned and trio.current_time() - waited > SLOW_WAIT_LOG_S:
                warned = True
                log.warning("%s-%d: a batch refused by a moved leader has waited %.1f s for the partition's "
                            "earlier batches", tp[0], tp[1], trio.current_time() - waited)
            with trio.move_on_after(SLOW_WAIT_LOG_S):
                await state.resends_changed.wait()
        return turn

    async def clear_for(self, tp: tuple[str, int], ticket: int, lane: Lane) -> None:
        """Until no earlier batch sent again is unanswered on another lane than `lane`."""
        state = self._partitions[tp]
        while not state.resends.clear_for(ticket, lane):
            await state.resends_changed.wait()

    @staticmethod
    def _resends_changed(state: PartitionState) -> None:
        state.resends_changed.set()
        state.resends_changed = trio.Event()

    def release(self, item: PartitionBatches, result: PartitionResult | None) -> None:
        """The partition's batch of a request has its result: its sequence gap noted first, so
        `drained` lets a path switch through only after it."""
        self.note_failure(item, result)
        state = self._partitions[(item.topic, item.partition)]
        state.in_flight -= 1
        if state.in_flight == 0:
            state.drained.set()

    async def drain_before_switch(self, tp: tuple[str, int], state: PartitionState, to: Path) -> None:
        """A path, leader or agent switch waits for the old lane's batches of the partition to drain
        (else a later batch could overtake an earlier one). Logged when that takes long: the
        client's connection answers in order, so every request behind this one waits too."""
        waited = trio.current_time()
        old_path = state.path
        with trio.move_on_after(SLOW_WAIT_LOG_S):
            await state.drained.wait()
            return
        log.warning("%s-%d: switching from %s to %s waits for %d batch(es) still in flight on the old path",
                    tp[0], tp[1], old_path.value if old_path else "?", to.value, state.in_flight)
        await state.drained.wait()
        log.warning("%s-%d: the old path drained after %.1f s", tp[0], tp[1], trio.current_time() - waited)

    @staticmethod
    def _gap_key(item: PartitionBatches) -> tuple[GapKey, int] | None:
        first = item.batches[0]
        if first.producer_id < 0:
            return None  # not idempotent: at-least-once, the leader does not check sequences
        return (item.topic, item.partition, first.producer_id, first.producer_epoch), first.base_sequence

    def gap_open(self, item: PartitionBatches) -> bool:
        """Whether `item`'s producer has a sequence gap noted on the partition (a question
        only: `behind_a_gap` decides what it means and forgets gaps that ended)."""
        keyed = self._gap_key(item)
        return keyed is not None and keyed[0] in self._sequence_gaps

    def behind_a_gap(self, item: PartitionBatches) -> bool:
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

    def note_failure(self, item: PartitionBatches, result: PartitionResult | None) -> None:
        keyed = self._gap_key(item)
        if keyed is None or result is None or not errors.is_retriable(result.error_code):
            return
        key, sequence = keyed
        known = self._sequence_gaps.get(key)
        if known is None or sequence < known[0]:
            self._sequence_gaps[key] = (sequence, trio.current_time())
