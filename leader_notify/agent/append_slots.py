"""The agent's append slots: at most N partition runs at the appender at once, handed out in
request order. Pure bookkeeping, no I/O and no event loop.

A slot is given by calling the taker's `start()` (synchronously, at once when one is free,
else when one is released), not by waking a future. An agent's notification can carry a
run for each of hundreds of partitions; with asyncio.Semaphore each run beyond the free
slots needed a task and a future, and each release scanned the waiters already woken but
not yet run (quadratic when one ProduceRequest's answer ends dozens of runs at once: about
a fifth of the agent's profiled time at 2,048 partitions). Here a take and a release cost
O(1), and the runs a release starts join the appender in the same loop turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

# A taker's start: called when the slot is its own; False if it no longer wants it (its
# notification was cancelled meanwhile), and the slot goes to the next taker.
Start = Callable[[], bool]


class AppendSlots:
    """`count` slots, first come, first served."""

    __slots__ = ("_free", "_waiting")

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"append slots: at least 1, got {count}")
        self._free = count
        self._waiting: deque[Start] = deque()

    @property
    def free(self) -> int:
        """Slots nobody holds."""
        return self._free

    @property
    def waiting(self) -> int:
        """Takers waiting for a slot."""
        return len(self._waiting)

    def take(self, start: Start) -> None:
        """Call `start()` now if a slot is free (and nobody waits before it), else when a
        slot is released to it. Whoever `start` returned True for holds the slot until
        `release()`."""
        if self._free and not self._waiting:
            self._free -= 1
            if not start():
                self.release()
        else:
            self._waiting.append(start)

    def release(self) -> None:
        """Give the slot to the first waiting taker that still wants it, else free it."""
        while self._waiting:
            if self._waiting.popleft()():
                return
        self._free += 1
