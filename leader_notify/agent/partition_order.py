"""The order the agent keeps, without I/O: one FIFO per partition in arrival order (a
notification takes a ticket per partition the moment it arrives, so two notifications'
batches of a partition are appended in the order the proxy sent them), a notification's
partition runs admitted to the appender as their turn comes and an append slot frees
(`Admission`), and the entries already appended (`AppliedEntries`), answered from memory when
a notification is sent again.

Callbacks on asyncio futures, not tasks: a run starts in the step its predecessor finishes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from leader_notify.agent.append_runs import PartitionRun
from leader_notify.agent.append_slots import AppendSlots


class PartitionSequencer:
    """Per-(topic, partition) FIFO in ticket order. Tickets are taken synchronously on arrival."""

    def __init__(self) -> None:
        self._tails: dict[tuple[str, int], asyncio.Future[None]] = {}

    def reserve(self, tp: tuple[str, int]) -> Ticket:
        prev = self._tails.get(tp)
        mine = asyncio.get_running_loop().create_future()
        self._tails[tp] = mine
        return Ticket(self, tp, prev, mine)

    def __len__(self) -> int:
        return len(self._tails)


class Ticket:
    def __init__(self, seq: PartitionSequencer, tp: tuple[str, int], prev: asyncio.Future[None] | None,
                 mine: asyncio.Future[None]) -> None:
        self._seq, self._tp, self._prev, self._mine = seq, tp, prev, mine

    @property
    def finished(self) -> asyncio.Future[None]:
        """Done once this ticket's turn is passed on (its run through, or given up)."""
        return self._mine

    def when_ready(self, callback: Callable[[], None]) -> None:
        """Call `callback()` now if it is our turn, else once it is (from the loop)."""
        if self._prev is None or self._prev.done():
            callback()
        else:
            self._prev.add_done_callback(lambda _f: callback())

    def release(self) -> None:
        """Pass the turn on once our predecessor is done too (a cancelled waiter never lets
        its successor overtake the running predecessor)."""
        if self._prev is not None and not self._prev.done():
            self._prev.add_done_callback(lambda _f: self._finish())
        else:
            self._finish()

    def _finish(self) -> None:
        if not self._mine.done():
            self._mine.set_result(None)
        if self._seq._tails.get(self._tp) is self._mine:  # noqa: SLF001
            del self._seq._tails[self._tp]  # noqa: SLF001


EntryRun = tuple[list[int], PartitionRun]  # a partition's entry indexes in the request, and their batches


class Admission:
    """One notification's partition runs on their way to the appender. A run starts once its
    ticket says it is its turn and it holds an append slot; the ticket's and the slots'
    callbacks move it from `waiting` to `started`, from which the notification's task takes
    waves. At its turn `at_turn(run)` says what becomes of it: the run to append (itself, or
    what is left of it once the entries applied meanwhile are answered), or a code, and the
    run goes to `refused` without a slot: an error code (an earlier pipelined run of its
    partition failed, ordered_runs.py), or 0 (nothing left to append). Closed when the
    notification ends or is cancelled: runs that have not started never will, and slots of
    started runs not taken into a wave are given back."""

    __slots__ = ("_slots", "waiting", "started", "refused", "_wake", "_closed")

    def __init__(self, slots: AppendSlots) -> None:
        self._slots = slots
        self.waiting = 0  # admitted runs that have not started
        self.started: list[EntryRun] = []  # started, not yet in a wave (each holds a slot)
        self.refused: list[tuple[list[int], PartitionRun, int]] = []  # not appended at their turn, with the code
        self._wake: asyncio.Future[None] | None = None
        self._closed = False

    def admit(self, ticket: Ticket, item: EntryRun, at_turn: Callable[[EntryRun], EntryRun | int] | None = None) -> None:
        self.waiting += 1
        admitted = item

        def start() -> bool:
            if self._closed:
                return False
            self.waiting -= 1
            self.started.append(admitted)
            self._wake_up()
            return True

        def turn() -> None:
            nonlocal admitted
            if self._closed:
                return
            outcome = at_turn(item) if at_turn is not None else item
            if not isinstance(outcome, int):
                admitted = outcome
                self._slots.take(start)
                return
            self.waiting -= 1
            self.refused.append((item[0], item[1], outcome))
            self._wake_up()

        ticket.when_ready(turn)

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def take_started(self) -> list[EntryRun]:
        wave, self.started = self.started, []
        return wave

    def take_refused(self) -> list[tuple[list[int], PartitionRun, int]]:
        refused, self.refused = self.refused, []
        return refused

    async def next_start(self) -> None:
        """Until another run starts (or is refused)."""
        self._wake = asyncio.get_running_loop().create_future()
        await self._wake

    def close(self) -> None:
        self._closed = True
        for _ in self.started:
            self._slots.release()
        self.started = []


class AppliedEntries:
    """Bounded LRU: (object key, entry index) -> base offset of entries already appended."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._map: OrderedDict[tuple[str, int], int] = OrderedDict()

    def get(self, key: str, index: int) -> int | None:
        k = (key, index)
        offset = self._map.get(k)
        if offset is not None:
            self._map.move_to_end(k)
        return offset

    def put(self, key: str, index: int, base_offset: int) -> None:
        self._map[(key, index)] = base_offset
        self._map.move_to_end((key, index))
        while len(self._map) > self._max:
            self._map.popitem(last=False)

    def __len__(self) -> int:
        return len(self._map)
